"""Two exported networks of one model against each other and against onnxruntime, interleaved:

  python bench/ab.py MODEL A/model.so B/model.so [--runs 60] [--threads 2]

For a code change whose effect is one network against another (``graphselect optimize`` before
and after, each writing its ``model.so``): both libraries are loaded into Relax VMs and timed in
one session of interleaved rounds (``graphselect.measure.e2e.compare``: short blocks, the order
reversed every other round), then each against onnxruntime (a pause at every switch of runtime).
MODEL is a zoo name or an ONNX file (for onnxruntime and the input shape). Printed: the medians,
B / A as the median over rounds of block-median ratios, and each to onnxruntime.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import onnx
    import tvm

    import models
    from graphselect.measure.e2e import compare, ort_runner, ort_session, vm_runner
    m = models.build(args.model) if args.model in models.ZOO else onnx.load(args.model)
    inp = m.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    fns = {k: vm_runner(tvm.runtime.load_module(p), x) for k, p in (("A", args.a), ("B", args.b))}
    outs = {k: fns[k]() for k in fns}
    del outs
    ab = compare(fns, runs=args.runs, seconds=3.0)
    ort = ort_runner(ort_session(m.SerializeToString(), args.threads), {inp.name: x})
    va = compare({"A": fns["A"], "onnxruntime": ort}, runs=args.runs)
    vb = compare({"B": fns["B"], "onnxruntime": ort}, runs=args.runs)
    print(f"A {ab.median('A'):.3f} ms  B {ab.median('B'):.3f} ms  B / A {ab.ratio('B', 'A'):.3f} "
          f"({len(ab.ms['A'])} rounds)")
    print(f"to onnxruntime: A {va.ratio('A', 'onnxruntime'):.3f} (ort {va.median('onnxruntime'):.3f} ms), "
          f"B {vb.ratio('B', 'onnxruntime'):.3f} (ort {vb.median('onnxruntime'):.3f} ms)")


if __name__ == "__main__":
    main()
