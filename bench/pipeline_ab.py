"""Winograd kernels under TVM's default TIR pipeline against graphselect's (``codegen.pipeline``:
unrolled before vectorized): compile seconds, kernel time, and whether the outputs are equal.

  python bench/pipeline_ab.py [--model resnet18] [--rounds 20]

Per candidate of each stride-1 3x3 conv workload (bias+relu epilogue): both kernels compiled in
this process and timed in interleaved rounds (the order reversed every other round), weights and
inputs warm, 10 calls a round; the median of the rounds. Nothing else may run meanwhile.
"""
from __future__ import annotations

import argparse
import sys
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
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    s, workloads = bias_relu_winograd(a.model)
    dev, rng = tvm.cpu(), np.random.default_rng(0)
    print(cpu_line())
    print("| workload | candidate | compile s default | graphselect | ms default | graphselect | ratio | outputs equal |")
    print("|---|---|---|---|---|---|---|---|")
    ratios, speed = [], []
    for key, spec in workloads:
        for cand in winograd.propose(spec):
            f = winograd.build(cand, spec, s.target, "k")
            mod = tvm.IRModule({"main": f})
            libs, secs = [], []
            for pipe in ("default", tir_pipeline()):
                t0 = time.perf_counter()
                libs.append(tvm.tirx.build(mod, target=s.target, pipeline=pipe))
                secs.append(time.perf_counter() - t0)
            args = [tvm.runtime.tensor(x, dev) for x in arg_arrays(f, rng)]
            outs = []
            for lib in libs:
                lib["k"](*args)
                outs.append(args[-1].numpy().copy())
            ms = [[], []]
            for r in range(a.rounds):
                for i in ((0, 1) if r % 2 else (1, 0)):
                    ms[i].append(libs[i].time_evaluator("k", dev, number=10, repeat=1)(*args).mean * 1e3)
            m0, m1 = float(np.median(ms[0])), float(np.median(ms[1]))
            ratios.append(m1 / m0)
            speed.append(secs[0] / secs[1])
            print(f"| {key.split(' epi=')[0]} | {cand.key} | {secs[0]:.2f} | {secs[1]:.2f} | {m0:.4f} | {m1:.4f} | "
                  f"{m1 / m0:.3f} | {bool(np.array_equal(outs[0], outs[1]))} |", flush=True)
    print(f"\n{len(ratios)} kernels: time ratio median {np.median(ratios):.3f} (range {min(ratios):.3f}-"
          f"{max(ratios):.3f}); compile speed-up median {np.median(speed):.2f}x")


if __name__ == "__main__":
    main()
