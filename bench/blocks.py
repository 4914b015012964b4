"""Does computing depthwise -> pointwise through tiles pay on this CPU? The ``dwpw`` block
candidate against the two best per-layer kernels graphselect would otherwise chain.

  python bench/blocks.py [--runs 40] [--threads 2] [--model mobilenet_v2]

The block (``graphselect.candidates.dwpw``, issue 23, item 1): for each task, a band of
``rows`` output rows and a share of the output channel blocks, the depthwise conv (and its
epilogue) writes the band's hidden activations, every channel, to a task-private buffer (rows x
width x channels floats: 27-43 KiB on MobileNetV2, in L1/L2), and the pointwise conv reads them
from there in register tiles of ``reg_n`` positions by one or two vectors of output channels, with
its own epilogue (bias, residual). Where the output has few rows, the output channel blocks are
split over ``osplit`` tasks, each recomputing the band's depthwise part (9 multiply-adds per hidden
value against C_in per output value of the pointwise part).

For every depthwise -> pointwise pair of the model (MobileNetV2: the 3x3 depthwise and the 1x1
projection of each inverted residual), the per-layer side is the best of all ``depthwise``
candidates in NCHW[b]c and the best ``pointwise``/``nchwc`` candidate reading that layout, chained
in one Relax VM function (two kernel calls, the hidden tensor through memory, as in a network),
against the block's variants in another; both timed end to end with ``time_evaluator`` in
interleaved rounds, median of rounds. Results: printed, and saved under
bench/results/blocks-STAMP.{md,json} with the CPU named.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first N pairs")
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    import tvm
    from tvm import relax as rx
    import models
    from graphselect import candidates as cand_mod
    from graphselect.codegen.lower import build
    from graphselect.frontend import onnx_prep
    from graphselect.frontend.relax_import import import_onnx
    from graphselect.graph import layouts
    from graphselect.graph.layers import extract
    from graphselect.candidates import dwpw
    from graphselect.measure.plan import chains
    from graphselect.measure.affinity import pinned
    from graphselect.target import isa_of, parse_target
    from results_io import cpu_line, save
    target = parse_target("llvm", threads=a.threads).tvm_target()
    isa = isa_of(target)
    p = onnx_prep.prepare(models.build(a.model))
    mod = import_onnx(p.model, p.shapes)
    lg = extract(mod)
    dev = tvm.cpu()
    rows_out = []
    todo = chains(lg)[: a.limit or None]
    for dl, pl in todo:
        dw, pw = dl.conv, pl.conv
        if dw.in_channels % isa.lanes:
            continue
        lay = layouts.blocked(isa.lanes)
        rng = np.random.default_rng(0)
        x = rng.standard_normal(dw.in_shape).astype("float32")
        res = rng.standard_normal(pw.out_shape).astype("float32") if pw.residual else None

        def vm_of(body, params):
            bb = rx.BlockBuilder()
            with bb.function("main", params):
                with bb.dataflow():
                    out = bb.emit_output(body(bb))
                bb.emit_func_output(out)
            return rx.VirtualMachine(build(bb.get(), target), dev)

        def chain(cd, cp):
            """dw candidate cd then pw candidate cp as two call_tirs (a network's two kernels)."""
            fd, fp = cand_mod.family(cd), cand_mod.family(cp)
            xv = rx.Var("x", rx.TensorType(layouts.shape_in(dw.in_shape, lay), "float32"))
            params = [xv] + ([rx.Var("r", rx.TensorType(layouts.shape_in(pw.out_shape, cp.out_layout), "float32"))]
                             if pw.residual else [])

            def body(bb):
                gd = bb.add_func(fd.build(cd, dw, target, "dw"), "dw")
                h = bb.emit(rx.call_tir(gd, [xv] + [rx.const(c) for c in fd.pack(cd, dw, dl.weight, dl.bias)],
                                        rx.TensorType(layouts.shape_in(dw.out_shape, cd.out_layout), "float32")))
                gp = bb.add_func(fp.build(cp, pw, target, "pw"), "pw")
                return bb.emit(rx.call_tir(gp, [h] + [rx.const(c) for c in fp.pack(cp, pw, pl.weight, pl.bias)]
                                           + params[1:], rx.TensorType(layouts.shape_in(pw.out_shape, cp.out_layout),
                                                                      "float32")))
            return vm_of(body, params), params

        def fused(c):
            xv = rx.Var("x", rx.TensorType(layouts.shape_in(dw.in_shape, lay), "float32"))
            params = [xv] + ([rx.Var("r", rx.TensorType(layouts.shape_in(pw.out_shape, c.out_layout), "float32"))]
                             if pw.residual else [])
            consts = dwpw.pack_chain(c, dw, pw, dl.weight, dl.bias, pl.weight, pl.bias)

            def body(bb):
                g = bb.add_func(dwpw.build_chain(c, dw, pw, target, "blk"), "blk")
                return bb.emit(rx.call_tir(g, [xv] + [rx.const(a) for a in consts] + params[1:],
                                           rx.TensorType(layouts.shape_in(pw.out_shape, c.out_layout), "float32")))
            return vm_of(body, params), params

        dws = [c for c in cand_mod.propose(dw, ["depthwise"], dl.weight, isa) if c.in_layout == lay and c.out_layout == lay]
        pws = [c for c in cand_mod.propose(pw, ["pointwise", "nchwc"], pl.weight, isa) if c.in_layout == lay]
        ref = None
        runs = {}
        for cd, cp in itertools.product(dws, pws):
            vm, params = chain(cd, cp)
            runs[f"{cd.key} + {cp.key}"] = ("chain", vm, cp.out_layout)
        blocks = dwpw.propose_chain(dw, pw, (dl.name, pl.name), isa)
        if not blocks:
            continue
        for c in blocks:
            vm, params = fused(c)
            runs[c.key] = ("block", vm, c.out_layout)
        # check every variant against the first chain, then time them all in interleaved rounds
        args = {}
        for k, (kind, vm, ol) in runs.items():
            ins = [tvm.runtime.tensor(layouts.pack(x, lay), dev)] + \
                ([tvm.runtime.tensor(layouts.pack(res, ol), dev)] if res is not None else [])
            out = layouts.unpack(vm["main"](*ins).numpy(), ol)
            if ref is None:
                ref = out
            err = float(np.abs(out - ref).max() / max(1e-12, np.abs(ref).max()))
            assert err < 1e-4, (k, err)
            args[k] = ins
        ms = {k: [] for k in runs}
        fe = {k: vm.time_evaluator("main", dev, number=20, repeat=1) for k, (_, vm, _) in runs.items()}
        with pinned():
            for _ in range(max(3, a.runs // 8)):
                for k in runs:
                    ms[k].append(fe[k](*args[k]).mean * 1e3)
        med = {k: float(np.median(v)) for k, v in ms.items()}
        bc = min((v, k) for k, v in med.items() if runs[k][0] == "chain")
        bb_ = min((v, k) for k, v in med.items() if runs[k][0] == "block")
        row = {"dw": dl.name, "pw": pl.name, "shape": f"{dw.describe()} -> {pw.describe()}", "residual": pw.residual,
               "chain_ms": bc[0], "chain": bc[1], "block_ms": bb_[0], "block": bb_[1], "ratio": bb_[0] / bc[0],
               "hidden_kib": dw.out_channels * dw.out_h * dw.out_w * 4 / 1024, "variants": med}
        rows_out.append(row)
        print(f"{row['shape']}: chain {bc[0]:.4f} ms ({bc[1]}) | block {bb_[0]:.4f} ms ({bb_[1]}) | {row['ratio']:.3f}",
              flush=True)
    geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in rows_out]))) if rows_out else None
    tot_c, tot_b = sum(r["chain_ms"] for r in rows_out), sum(r["block_ms"] for r in rows_out)
    lines = [f"CPU: {cpu_line()}", "", f"`python bench/blocks.py --model {a.model} --runs {a.runs}`", "",
             "| depthwise -> pointwise | hidden KiB | best chain ms | best block ms | block / chain | block |",
             "|---|---|---|---|---|---|"]
    for r in rows_out:
        lines.append(f"| {r['shape']}{' +res' if r['residual'] else ''} | {r['hidden_kib']:.0f} | {r['chain_ms']:.4f} | "
                     f"{r['block_ms']:.4f} | {r['ratio']:.3f} | {r['block']} |")
    if rows_out:
        lines += ["", f"geomean block / chain {geo:.3f}; summed {tot_b:.3f} ms against {tot_c:.3f} ms"]
    save(f"blocks-{a.model}", "\n".join(lines) + "\n", rows_out)


if __name__ == "__main__":
    main()
