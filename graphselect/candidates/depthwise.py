"""``depthwise``: one filter per channel (groups == in channels == out channels).

Layouts:

* ``NCHW[b]c`` in and out (b of 8..64 channels, the same block on both sides): vectorized over
  the channel block, a register tile of ``reg_n`` output columns, parallel over (batch, channel
  block, output row). The padding is a guarded load inside the conv (no padded copy): measured
  as fast as the same conv on a pre-padded input, while a materialised pad cost 1.3-2x.
* plain ``NCHW``: vectorized along the output width (``vec``), a register tile of ``rows`` output
  rows, parallel over (batch, channel, block of ``task_rows`` rows). Each task copies the padded
  rows it reads into a buffer of at most 64 KiB; for stride 2 the copy splits even and odd
  columns, so the conv's vector loads stay contiguous. 2-5x slower than the blocked layout on
  MobileNetV2's layers, for channel counts no block divides and NCHW neighbourhoods.

The epilogue (bias, residual, clamp, activation) is applied to each register tile as it leaves
the registers.
"""
from __future__ import annotations

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from ..target import AVX512
from .base import Candidate, divisors_in, epilogue_compute, finish, make_candidate

FAMILY = "depthwise"
_ACC = 14 / 32       # share of the vector registers a register tile of accumulators may take
_PAD_ROWS = 65536    # bytes of padded rows one NCHW task copies (a 112x112 plane: one task)


def _blocks(ch: int, isa=AVX512) -> list[int]:
    """Channel blocks of half to four vector registers (AVX-512: 8 to 64; NEON: 4 to 16)."""
    bs = [b for b in (isa.lanes // 2, isa.lanes, 2 * isa.lanes, 4 * isa.lanes) if b >= 4 and ch % b == 0]
    if len(bs) > 2:
        bs = bs[1:]       # half a register never beats one on AVX-512 (the 1x1 neighbours' nchwc drops it too)
    if not bs:            # e.g. ShuffleNet's 58/116 channels: the block nchwc picks for them
        bs = [max(divisors_in(ch, 1, max(16, isa.lanes)))]
    return bs


def _reg_ns(ow: int, b: int, isa=AVX512) -> list[int]:
    """Output columns per register tile: reg_n x ceil(b/lanes) accumulators within _ACC of the
    registers (AVX-512: 14 of 32)."""
    acc = int(_ACC * isa.registers)
    ds = divisors_in(ow, 1, max(1, acc * isa.lanes // max(b, isa.lanes)))
    picks = [ds[-1]]
    if b <= isa.lanes and len(ds) > 1 and ds[-2] >= 4:
        picks.insert(0, ds[-2])
    return picks


def _vec(ow: int) -> int:
    ds = divisors_in(ow, 4, 16)
    return ds[-1] if ds else min(ow, 16)


def _nchw_rows(spec: ConvSpec) -> tuple[int, int]:
    """(register rows, output rows per task) for the NCHW variant."""
    oh = spec.out_h
    rows = min(4, oh)
    wq = -(-(spec.width + spec.padding[1] + spec.padding[3]) // spec.stride[1]) * spec.stride[1]
    per_row = 4 * wq * spec.stride[0]
    fit = max(rows, (_PAD_ROWS // per_row) // rows * rows)
    n_tasks = -(-oh // fit)
    task = -(-oh // n_tasks)
    return rows, min(oh, -(-task // rows) * rows)


def _pad_rows_bytes(spec: ConvSpec, task_rows: int) -> int:
    sh, sw = spec.stride
    wq = -(-(spec.width + spec.padding[1] + spec.padding[3]) // sw)
    return 4 * ((task_rows - 1) * sh + spec.kernel[0]) * sw * wq


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    if not spec.depthwise or spec.dilated:      # dilated depthwise: ``direct`` takes it
        return []
    c, (kh, kw) = spec.in_channels, spec.kernel
    welems = c * kh * kw
    rows, task_rows = _nchw_rows(spec)
    out = [make_candidate(FAMILY, spec, in_layout=layouts.NCHW, out_layout=layouts.NCHW, weight_layout="OIHW",
                          weight_elems=welems, workspace_bytes=_pad_rows_bytes(spec, task_rows),
                          vec=_vec(spec.out_w), rows=rows, task_rows=task_rows)]
    for b in _blocks(c, isa):
        for rn in _reg_ns(spec.out_w, b, isa):
            out.append(make_candidate(FAMILY, spec, in_layout=layouts.blocked(b), out_layout=layouts.blocked(b),
                                      weight_layout=f"OHW{b}o", weight_elems=welems, bn=b, reg_n=rn))
    return out


def _guarded(spec: ConvSpec, y, x, load):
    """``load()`` where input row y, column x exists, 0 in the padding. Only the sides the conv's
    window can cross are tested."""
    import tvm
    pt, pl = spec.padding[:2]
    conds = []
    if pt:
        conds.append(y >= 0)
    if (spec.out_h - 1) * spec.stride[0] + spec.kernel[0] - pt > spec.height:
        conds.append(y < spec.height)
    if pl:
        conds.append(x >= 0)
    if (spec.out_w - 1) * spec.stride[1] + spec.kernel[1] - pl > spec.width:
        conds.append(x < spec.width)
    if not conds:
        return load()
    return tvm.tirx.if_then_else(tvm.tirx.all(*conds), load(), tvm.tirx.const(0.0, "float32"))


def _compute_blocked(spec: ConvSpec, b: int):
    from tvm import te
    n, c, h, w = spec.in_shape
    kh, kw = spec.kernel
    sh, sw = spec.stride
    pt, pl = spec.padding[:2]
    data = te.placeholder((n, c // b, h, w, b), name="data")
    kern = te.placeholder((c // b, kh, kw, b), name="weight")
    bias = te.placeholder((c // b, b), name="bias") if spec.bias else None
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def tap(i, cc, y, x, cb):
        yy, xx = y * sh + ry - pt, x * sw + rx - pl
        return _guarded(spec, yy, xx, lambda: data[i, cc, yy, xx, cb]) * kern[cc, ry, rx, cb]
    conv = te.compute((n, c // b, spec.out_h, spec.out_w, b), lambda *i: te.sum(tap(*i), axis=[ry, rx]),
                      name="conv")
    res = te.placeholder(conv.shape, name="residual") if spec.residual else None
    out = epilogue_compute(conv, spec, bias, res, lambda i, cc, y, x, cb: (cc, cb))
    args = [data, kern] + ([bias] if bias is not None else []) + ([res] if res is not None else []) + [out]
    return te.create_prim_func(args)


def _compute_nchw(spec: ConvSpec):
    from tvm import te, tirx
    n, c, h, w = spec.in_shape
    kh, kw = spec.kernel
    sh, sw = spec.stride
    pt, pl, pb, pr = spec.padding
    wq = -(-(w + pl + pr) // sw)
    data = te.placeholder((n, c, h, w), name="data")
    kern = te.placeholder((c, 1, kh, kw), name="weight")
    bias = te.placeholder((c,), name="bias") if spec.bias else None

    # padded input with the columns split by phase (x mod stride): the conv then reads
    # consecutive columns for any stride. A select on a clamped load, not a guarded load: a
    # guard that varies along the vector scalarizes the loop into branches (2x slower at stride 2)
    def pad(i, cc, yy, p, xq):
        y0, x0 = yy - pt, xq * sw + p - pl
        inside = tirx.all(y0 >= 0, y0 < h, x0 >= 0, x0 < w)
        v = data[i, cc, tirx.max(tirx.min(y0, h - 1), 0), tirx.max(tirx.min(x0, w - 1), 0)]
        return tirx.Select(inside, v, tirx.const(0.0, "float32"))
    padded = te.compute((n, c, h + pt + pb, sw, wq), pad, name="data_pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute(spec.out_shape, lambda i, cc, y, x: te.sum(
        padded[i, cc, y * sh + ry, rx % sw, x + rx // sw] * kern[cc, 0, ry, rx], axis=[ry, rx]), name="conv")
    res = te.placeholder(spec.out_shape, name="residual") if spec.residual else None
    out = epilogue_compute(conv, spec, bias, res, lambda i, cc, y, x: (cc,))
    args = [data, kern] + ([bias] if bias is not None else []) + ([res] if res is not None else []) + [out]
    return te.create_prim_func(args)


def _unroll_taps(sch, ry, rx, spec: ConvSpec, tile: int) -> None:
    sch.unroll(rx)
    if spec.kernel[0] * spec.kernel[1] * tile <= 256:   # keeps 5x5 with wide tiles building fast
        sch.unroll(ry)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    from tvm.s_tir import Schedule
    blocked = cand.in_layout != layouts.NCHW
    sch = Schedule(_compute_blocked(spec, cand.param("bn")) if blocked else _compute_nchw(spec))
    conv, epi = sch.get_sblock("conv"), sch.get_sblock("epilogue")
    if blocked:
        reg_n = cand.param("reg_n")
        n, cc, y, x, cb, ry, rx = sch.get_loops(conv)
        xo, xi = sch.split(x, [None, reg_n])
        sch.reorder(n, cc, y, xo, ry, rx, xi, cb)
        sch.reverse_compute_at(epi, xo)
        sch.vectorize(cb)
        sch.unroll(xi)
        _unroll_taps(sch, ry, rx, spec, reg_n)
        par = sch.fuse(n, cc, y)
    else:
        rows, task_rows = cand.param("rows"), cand.param("task_rows")
        n, c, y, x, ry, rx = sch.get_loops(conv)
        yb, y = sch.split(y, [None, task_rows])
        yo, yi = sch.split(y, [None, rows])
        xo, xi = sch.split(x, [None, cand.param("vec")])
        sch.reorder(n, c, yb, yo, xo, ry, rx, yi, xi)
        sch.reverse_compute_at(epi, xo)
        sch.vectorize(xi)
        sch.unroll(yi)
        _unroll_taps(sch, ry, rx, spec, rows)
        par = sch.fuse(n, c, yb)
    el = sch.get_loops(epi)
    sch.vectorize(el[-1])
    sch.unroll(el[-2])
    sch.parallel(par)
    init = sch.decompose_reduction(conv, ry)
    sch.vectorize(sch.get_loops(init)[-1])
    if not blocked:
        pad = sch.get_sblock("data_pad")
        sch.compute_at(pad, par)
        sch.vectorize(sch.get_loops(pad)[-1])
    return finish(sch.mod["main"], cand, spec, name)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    c, _, kh, kw = weight.shape
    if cand.in_layout == layouts.NCHW:
        out = [np.ascontiguousarray(weight, dtype="float32")]
        bshape = (c,)
    else:
        b = cand.param("bn")
        out = [np.ascontiguousarray(weight.reshape(c // b, b, kh, kw).transpose(0, 2, 3, 1), dtype="float32")]
        bshape = (c // b, b)
    if spec.bias:
        out.append(np.ascontiguousarray(bias.reshape(bshape), dtype="float32"))
    return out
