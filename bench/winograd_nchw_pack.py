"""Plain-NCHW Winograd kernels with the input packed into a padded NCHW[ib]c buffer first against
gathered as the input transform reads it (``candidates.winograd.packs``): seconds to make,
compile and link each, its warm time, and whether the outputs are identical.

  python bench/winograd_nchw_pack.py [--model resnet18] [--rounds 40]

Every plain-NCHW candidate (F(2x2), F(4x4)) of each stride-1 3x3 conv workload with a bias+relu
epilogue; both forms compiled here and timed in interleaved rounds (the order reversed every
other round), 5 warm calls a round; the ratio is the median over rounds of the round's ratio
(a slow spell of the machine moves both kernels of a round), the times are medians of the rounds. Nothing else may run meanwhile.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def main():
    import tvm
    from graphselect.candidates import winograd
    from graphselect.codegen.pipeline import tir_pipeline
    from graphselect.measure.jobs import arg_arrays
    from results_io import cpu_line
    from winograd_workloads import bias_relu_winograd
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    s, workloads = bias_relu_winograd(a.model)
    dev = tvm.cpu()
    packs = winograd.packs
    print(cpu_line())
    print("| workload | candidate | s gathered | s packed | ms gathered | ms packed | packed / gathered (median of round ratios) | outputs identical |")
    print("|---|---|---|---|---|---|---|---|")
    for key, spec in workloads:
        for cand in [c for c in winograd.propose(spec) if c.in_layout == "NCHW"]:
            got = []
            for pack in (False, True):
                winograd.packs = lambda m, pack=pack: pack
                try:
                    t0 = time.perf_counter()
                    f = winograd.build(cand, spec, s.target, "k")
                    mod = tvm.compile(tvm.IRModule({"main": f}), target=s.target, tir_pipeline=tir_pipeline()).mod
                    with tempfile.TemporaryDirectory() as d:
                        mod.export_library(f"{d}/k.so")
                    secs = time.perf_counter() - t0
                finally:
                    winograd.packs = packs
                args = [tvm.runtime.tensor(x, dev) for x in arg_arrays(f, np.random.default_rng(0))]
                mod["k"](*args)
                got.append((secs, mod, args, args[-1].numpy().copy()))
            ms = [[], []]
            for r in range(a.rounds):
                for i in ((0, 1) if r % 2 else (1, 0)):
                    ms[i].append(got[i][1].time_evaluator("k", dev, number=5, repeat=1)(*got[i][2]).mean * 1e3)
            g, p = float(np.median(ms[0])), float(np.median(ms[1]))
            ratio = float(np.median([b / a for a, b in zip(*ms)]))     # round by round: a slow spell moves both
            print(f"| {key.split(' epi=')[0]} | {cand.key} | {got[0][0]:.2f} | {got[1][0]:.2f} | {g:.4f} | {p:.4f} | "
                  f"{ratio:.3f} | {bool(np.array_equal(got[0][3], got[1][3]))} |", flush=True)


if __name__ == "__main__":
    main()
