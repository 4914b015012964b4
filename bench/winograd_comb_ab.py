"""Winograd transforms written as Selects among whole linear combinations (the form until
2026-12) against Selects among constant coefficients (``candidates.winograd._comb``): compile
seconds (graphselect's TIR pipeline, then linking), and whether the assembly and the outputs are
identical.

  python bench/winograd_comb_ab.py [--model resnet18]

Every Winograd candidate of each stride-1 3x3 conv workload with a bias+relu epilogue, both forms
compiled in this process one after the other (each compile timed once: compile seconds are noisy
to ~10%, the sums over all kernels are not). Nothing else may run meanwhile.
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


def old_comb(idx, M, terms):
    """The form until 2026-12: one linear combination per value of ``idx``, the Select choosing
    among them."""
    import tvm
    from graphselect.candidates import winograd

    def lin(coefs):
        e = None
        for c, t in zip(coefs, terms):
            c = float(np.float32(c))
            if c == 0.0:
                continue
            term = t if c in (1.0, -1.0) else t * tvm.tirx.const(c, "float32")
            if e is None:
                e = -term if c == -1.0 else term
            else:
                e = e - term if c == -1.0 else e + term
        return e if e is not None else tvm.tirx.const(0.0, "float32")
    return winograd._sel(idx, [lin(M[:, k]) for k in range(M.shape[1])])


def compiled(cand, spec, target):
    """(seconds to make the PrimFunc, to compile it, to link it; its assembly; the module)."""
    import tempfile
    import tvm
    from graphselect.candidates import winograd
    from graphselect.codegen.pipeline import tir_pipeline
    t0 = time.perf_counter()
    f = winograd.build(cand, spec, target, "k")
    t1 = time.perf_counter()
    ex = tvm.compile(tvm.IRModule({"main": f}), target=target, tir_pipeline=tir_pipeline())
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        ex.mod.export_library(f"{d}/k.so")
    t3 = time.perf_counter()
    asm = [ln for ln in ex.mod.inspect_source("asm").splitlines()
           if not ln.strip().startswith((".", "#")) or ln.strip().startswith(".L")]
    return (t1 - t0, t2 - t1, t3 - t2), asm, ex.mod, f


def main():
    import tvm
    from graphselect.candidates import winograd
    from graphselect.measure.jobs import arg_arrays
    from results_io import cpu_line
    from winograd_workloads import bias_relu_winograd
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    a = ap.parse_args()
    s, workloads = bias_relu_winograd(a.model)
    dev = tvm.cpu()
    print(cpu_line())
    print("| workload | candidate | old s (make + compile + link) | new s | asm identical | outputs identical |")
    print("|---|---|---|---|---|---|")
    new_comb = winograd._comb
    tot = np.zeros((2, 3))
    same_asm = same_out = n = 0
    for key, spec in workloads:
        for cand in winograd.propose(spec):
            got = []
            for i, form in enumerate((old_comb, new_comb)):
                winograd._comb = form
                try:
                    got.append(compiled(cand, spec, s.target))
                finally:
                    winograd._comb = new_comb
                tot[i] += got[-1][0]
            args = [x for x in arg_arrays(got[0][3], np.random.default_rng(0))]
            outs = []
            for _, _, mod, _ in got:
                t = [tvm.runtime.tensor(x, dev) for x in args]
                mod["k"](*t)
                outs.append(t[-1].numpy())
            asm_eq, out_eq = got[0][1] == got[1][1], bool(np.array_equal(outs[0], outs[1]))
            same_asm += asm_eq
            same_out += out_eq
            n += 1
            o, w = got[0][0], got[1][0]
            print(f"| {key.split(' epi=')[0]} | {cand.key} | {sum(o):.2f} ({o[0]:.2f} + {o[1]:.2f} + {o[2]:.2f}) | "
                  f"{sum(w):.2f} ({w[0]:.2f} + {w[1]:.2f} + {w[2]:.2f}) | {asm_eq} | {out_eq} |", flush=True)
    print(f"\n{n} kernels: assembly identical {same_asm}, outputs identical {same_out}; seconds in all, old "
          f"{tot[0].sum():.1f} (make {tot[0][0]:.1f}, compile {tot[0][1]:.1f}, link {tot[0][2]:.1f}), new "
          f"{tot[1].sum():.1f} (make {tot[1][0]:.1f}, compile {tot[1][1]:.1f}, link {tot[1][2]:.1f})")


if __name__ == "__main__":
    main()
