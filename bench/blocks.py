"""Does computing depthwise -> pointwise through tiles pay on this CPU? A prototype block kernel
against the two best per-layer kernels graphselect would otherwise chain.

  python bench/blocks.py [--runs 40] [--threads 2] [--model mobilenet_v2]

The block (issue 23, item 1; not yet a candidate the solver can choose): for each task, a band of
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


def block_kernel(dw, pw, cb: int, ob: int, rn: int, rows: int, osplit: int):
    """The fused PrimFunc ``(x, w_dw, b_dw, w_pw, b_pw, [residual], out)`` of depthwise ``dw`` (a
    ConvSpec, groups = channels) then pointwise ``pw`` (1x1 stride 1), in NCHW[cb]c -> NCHW[ob]c
    with ``cb`` the block of the input and hidden channels (one vector)."""
    from tvm.script import tirx as T
    from graphselect.candidates.pointwise import _epi
    from graphselect.candidates.base import activation
    N, C, H, W = dw.in_shape
    KH, KW = dw.kernel
    sh, sw = dw.stride
    pt, pl = dw.padding[0], dw.padding[1]
    OH, OW = dw.out_h, dw.out_w
    O = pw.out_channels
    CB, OB = C // cb, O // ob
    nrt = OH // rows
    P = rows * OW
    tiles, tail = P // rn, P % rn
    per = OB // osplit
    xs, wds, bds, wps, bps, ys = (N, CB, H, W, cb), (CB, KH, KW, cb), (CB, cb), (OB, C, ob), (OB, ob), (N, OB, OH, OW, ob)

    def dw_epi(v, b):
        v = v + b
        if dw.clip_lo is not None:
            v = T.max(v, T.float32(dw.clip_lo))
        if dw.clip_hi is not None:
            v = T.min(v, T.float32(dw.clip_hi))
        return activation(v, dw.act)

    @T.macro
    def tile(buf, wp, bp, rf, yf, n, oc, src, dst, m):
        acc = T.alloc_buffer((m, ob), "float32", scope="local")
        for i in T.unroll(m):
            for l in T.vectorized(ob):
                acc[i, l] = T.float32(0)
        for icb in range(CB):
            for ici in T.unroll(cb):
                for i in T.unroll(m):
                    for l in T.vectorized(ob):
                        acc[i, l] = acc[i, l] + buf[icb, src + i, ici] * wp[oc, icb * cb + ici, l]
        for i in T.unroll(m):
            for l in T.vectorized(ob):
                yf[n, oc, dst + i, l] = _epi(acc[i, l], pw, bp, rf, n, oc, dst + i, l)

    @T.macro
    def body(x, wd, bd, wp, bp, r, y):
        yf = T.decl_buffer((N, OB, OH * OW, ob), "float32", data=y.data)
        rf = T.decl_buffer((N, OB, OH * OW, ob), "float32", data=r.data)
        for t in T.parallel(N * nrt * osplit):
            buf = T.alloc_buffer((CB, P, cb), "float32")
            for cc in range(CB):
                for yy in range(rows):
                    for xx in range(OW):
                        acc1 = T.alloc_buffer((cb,), "float32", scope="local")
                        for l in T.vectorized(cb):
                            acc1[l] = T.float32(0)
                        for ky in T.unroll(KH):
                            for kx in T.unroll(KW):
                                for l in T.vectorized(cb):
                                    acc1[l] = acc1[l] + T.if_then_else(
                                        0 <= (t // osplit % nrt * rows + yy) * sh - pt + ky
                                        and (t // osplit % nrt * rows + yy) * sh - pt + ky < H
                                        and 0 <= xx * sw - pl + kx and xx * sw - pl + kx < W,
                                        x[t // (nrt * osplit), cc, (t // osplit % nrt * rows + yy) * sh - pt + ky,
                                          xx * sw - pl + kx, l], T.float32(0)) * wd[cc, ky, kx, l]
                        for l in T.vectorized(cb):
                            buf[cc, yy * OW + xx, l] = dw_epi(acc1[l], bd[cc, l])
            for oc in range(t % osplit * per, t % osplit * per + per):
                for s in range(tiles):
                    tile(buf, wp, bp, rf, yf, t // (nrt * osplit), oc, s * rn, t // osplit % nrt * P + s * rn, rn)
                if tail > 0:
                    tile(buf, wp, bp, rf, yf, t // (nrt * osplit), oc, tiles * rn, t // osplit % nrt * P + tiles * rn, tail)

    if pw.residual:
        @T.prim_func
        def f(x: T.Buffer(xs, "float32"), wd: T.Buffer(wds, "float32"), bd: T.Buffer(bds, "float32"),
              wp: T.Buffer(wps, "float32"), bp: T.Buffer(bps, "float32"), r: T.Buffer(ys, "float32"),
              y: T.Buffer(ys, "float32")):
            T.func_attr({"tirx.noalias": True})
            body(x, wd, bd, wp, bp, r, y)
    else:
        @T.prim_func
        def f(x: T.Buffer(xs, "float32"), wd: T.Buffer(wds, "float32"), bd: T.Buffer(bds, "float32"),
              wp: T.Buffer(wps, "float32"), bp: T.Buffer(bps, "float32"), y: T.Buffer(ys, "float32")):
            T.func_attr({"tirx.noalias": True})
            body(x, wd, bd, wp, bp, y, y)
    return f



def block_variants(dw, pw, isa):
    """(ob, rn, rows, osplit) of the block: blocks of one and two vectors, the pointwise family's
    tiles, bands of 1 or 2 rows, and output splits that give at least 4 tasks per thread."""
    from graphselect.candidates.pointwise import _reg_ns
    out = []
    for ob in (isa.lanes, 2 * isa.lanes):
        if pw.out_channels % ob:
            continue
        for rn in _reg_ns(ob, isa):
            for rows in (1, 2):
                if dw.out_h % rows:
                    continue
                tasks = dw.out_h // rows
                OB = pw.out_channels // ob
                osplit = next((s for s in range(1, OB + 1) if OB % s == 0 and tasks * s >= 8), OB)
                out.append((ob, rn, rows, osplit))
    return out


def pack_block(dw, pw, wd, bd, wp, bp, cb, ob):
    C = dw.in_channels
    wd4 = wd.reshape(C // cb, cb, *dw.kernel).transpose(0, 2, 3, 1)
    return [np.ascontiguousarray(a, "float32") for a in (
        wd4, bd.reshape(C // cb, cb), wp.reshape(pw.out_channels // ob, ob, C).transpose(0, 2, 1),
        bp.reshape(pw.out_channels // ob, ob))]


def pairs(lg):
    """(depthwise layer, pointwise layer) where the pointwise is the depthwise's only reader."""
    readers = {}
    for l in lg.layers.values():
        for s in l.inputs[:1]:
            readers.setdefault(s, []).append(l)
    out = []
    for l in lg.layers.values():
        if l.kind == "conv" and l.conv.depthwise:
            rs = readers.get(l.name, [])
            if len(rs) == 1 and rs[0].kind == "conv" and rs[0].conv.kernel == (1, 1) and rs[0].conv.stride == (1, 1) \
                    and not any(rs[0].conv.padding) and rs[0].conv.groups == 1:
                out.append((l, rs[0]))
    return out


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
    todo = pairs(lg)[: a.limit or None]
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

        def fused(v):
            ob = v[0]
            xv = rx.Var("x", rx.TensorType(layouts.shape_in(dw.in_shape, lay), "float32"))
            params = [xv] + ([rx.Var("r", rx.TensorType(layouts.shape_in(pw.out_shape, layouts.blocked(ob)), "float32"))]
                             if pw.residual else [])
            consts = pack_block(dw, pw, dl.weight, dl.bias, pl.weight, pl.bias, isa.lanes, ob)

            def body(bb):
                f = block_kernel(dw, pw, isa.lanes, *v).with_attr("global_symbol", "blk").with_attr("tir.is_scheduled", True)
                g = bb.add_func(f, "blk")
                return bb.emit(rx.call_tir(g, [xv] + [rx.const(c) for c in consts] + params[1:],
                                           rx.TensorType(layouts.shape_in(pw.out_shape, layouts.blocked(ob)), "float32")))
            return vm_of(body, params), params

        dws = [c for c in cand_mod.propose(dw, ["depthwise"], dl.weight, isa) if c.in_layout == lay and c.out_layout == lay]
        pws = [c for c in cand_mod.propose(pw, ["pointwise", "nchwc"], pl.weight, isa) if c.in_layout == lay]
        ref = None
        runs = {}
        for cd, cp in itertools.product(dws, pws):
            vm, params = chain(cd, cp)
            runs[f"{cd.key} + {cp.key}"] = ("chain", vm, cp.out_layout)
        for v in block_variants(dw, pw, isa):
            vm, params = fused(v)
            runs["block(ob={},reg_n={},rows={},osplit={})".format(*v)] = ("block", vm, layouts.blocked(v[0]))
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
