"""1x1 kernels alone: the best ``pointwise`` candidate against the best ``nchwc`` one, per shape.

  python bench/pointwise.py [--grid] [--threads 2] [--rounds 5]

Shapes: MobileNetV2's and ResNet-50's 1x1 stride-1 layers (224x224 input), with bias and ReLU.
Every candidate of both families for this CPU's vector unit is built, checked against numpy, and
timed warm (``time_evaluator``, 20 calls per sample, 3 samples, the best; 5 rounds interleaved
over all candidates of the shape, median of rounds), with the calling thread pinned as every
graphselect timing is. ``--grid`` also times ``pointwise`` tiles of 4 to 14 positions (the
family proposes two or three of them) to check that the proposed ones are the best. GFLOP/s
are 2 * C_in * C_out * H * W over the time; the FMA probe's peak is read before and after (the
host moves it). Results: printed, and saved under bench/results/pointwise-STAMP.{md,json}.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

SHAPES = [(320, 1280, 7, 7), (960, 160, 7, 7), (160, 960, 7, 7), (96, 576, 14, 14), (576, 96, 14, 14),
          (32, 192, 28, 28), (96, 24, 56, 56), (144, 24, 56, 56), (24, 144, 56, 56), (16, 96, 112, 112),
          (256, 64, 56, 56), (64, 256, 56, 56), (1024, 256, 14, 14), (512, 2048, 7, 7),
          (40, 240, 28, 28), (240, 40, 28, 28)]     # the last two: EfficientNet-B0's


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("--shapes", nargs="*", help="only these, written as in the table (e.g. 144->24 56x56)")
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    import tvm
    from graphselect import candidates
    from graphselect.graph import layouts
    from graphselect.graph.layers import ConvSpec
    from graphselect.measure.affinity import pinned
    from graphselect.measure.peak import measure_peak_gflops
    from graphselect.target import isa_of, parse_target
    from results_io import cpu_line, save
    from tests.reference import conv2d_nchw, rel_err
    target = parse_target("llvm", threads=a.threads).tvm_target()
    isa = isa_of(target)
    dev = tvm.cpu()
    peak0 = measure_peak_gflops(target, a.threads)
    rows = []
    for I, O, H, W in SHAPES:
        if a.shapes and f"{I}->{O} {H}x{W}" not in a.shapes:
            continue
        spec = ConvSpec(1, I, H, W, O, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, clip_lo=0.0)
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((O, I, 1, 1)) / np.sqrt(I)).astype("float32")
        b = rng.standard_normal(O).astype("float32")
        x = rng.standard_normal((1, I, H, W)).astype("float32")
        ref = conv2d_nchw(x, w, bias=b, lo=0.0)
        cands = candidates.propose(spec, ["nchwc", "pointwise"], w, isa)
        proposed = {c.key for c in cands}
        if not any(c.family == "pointwise" for c in cands):
            print(f"{I}->{O} {H}x{W}: no pointwise candidate (channels not a multiple of "
                  f"{isa.lanes}); skipped", flush=True)
            continue
        if a.grid:
            extra = []
            for c in cands:
                if c.family == "pointwise":
                    for rn in range(4, 15):
                        if rn * c.param("oc_bn") // isa.lanes <= isa.registers - 3 and rn <= H * W:
                            extra.append(dataclasses.replace(c, params=tuple((k, rn if k == "reg_n" else v)
                                                                             for k, v in c.params)))
            cands = list({c.key: c for c in cands + extra}.values())
        built = []
        for c in cands:
            fam = candidates.family(c)
            mod = tvm.compile(tvm.IRModule({"k": fam.build(c, spec, target, "k")}), target=target).mod
            args = [tvm.runtime.tensor(layouts.pack(x, c.in_layout), dev)] + \
                [tvm.runtime.tensor(v, dev) for v in fam.pack(c, spec, w, b)] + \
                [tvm.runtime.tensor(np.zeros(layouts.shape_in(spec.out_shape, c.out_layout), "float32"), dev)]
            mod["k"](*args)
            assert rel_err(layouts.unpack(args[-1].numpy(), c.out_layout), ref) < 1e-5, c.key
            built.append((c, mod.time_evaluator("k", dev, number=20, repeat=3), args))
        ms = {c.key: [] for c, _, _ in built}
        with pinned():
            for _ in range(a.rounds):
                for c, fe, args in built:
                    ms[c.key].append(min(fe(*args).results) * 1e3)
        med = {k: float(np.median(v)) for k, v in ms.items()}
        fl = 2 * I * O * H * W
        best = lambda keys: min((med[k], k) for k in keys)  # noqa: E731
        bn = best([k for k in med if k.startswith("nchwc")])
        bp = best([k for k in med if k.startswith("pointwise") and k in proposed])
        row = {"shape": f"{I}->{O} {H}x{W}", "nchwc_ms": bn[0], "nchwc": bn[1], "pointwise_ms": bp[0],
               "pointwise": bp[1], "ratio": bp[0] / bn[0], "nchwc_gflops": fl / bn[0] / 1e6,
               "pointwise_gflops": fl / bp[0] / 1e6, "all": med}
        if a.grid:
            bg = best([k for k in med if k.startswith("pointwise")])
            row.update(grid_ms=bg[0], grid=bg[1])
        rows.append(row)
        print(f"{row['shape']}: nchwc {bn[0]:.4f} ms ({row['nchwc_gflops']:.0f} GF/s, {bn[1]}) | pointwise {bp[0]:.4f} ms "
              f"({row['pointwise_gflops']:.0f} GF/s, {bp[1]}) | {row['ratio']:.3f}"
              + (f" | grid best {row['grid_ms']:.4f} ({row['grid']})" if a.grid else ""), flush=True)
    peak1 = measure_peak_gflops(target, a.threads)
    lines = [f"CPU: {cpu_line()}", "",
             f"`python bench/pointwise.py{' --grid' if a.grid else ''} --rounds {a.rounds}`: FMA probe {peak0:.0f} GFLOP/s "
             f"before, {peak1:.0f} after", "",
             "| 1x1 conv | best nchwc ms (GFLOP/s) | best pointwise ms (GFLOP/s) | pointwise / nchwc |"
             + (" best of the wider grid |" if a.grid else ""),
             "|---|---|---|---|" + ("---|" if a.grid else "")]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['nchwc_ms']:.4f} ({r['nchwc_gflops']:.0f}) {r['nchwc']} | {r['pointwise_ms']:.4f} "
                     f"({r['pointwise_gflops']:.0f}) {r['pointwise']} | {r['ratio']:.3f} |"
                     + (f" {r['grid_ms']:.4f} {r['grid']} |" if a.grid else ""))
    save("pointwise", "\n".join(lines) + "\n", {"peak_before": peak0, "peak_after": peak1, "rows": rows})


if __name__ == "__main__":
    main()
