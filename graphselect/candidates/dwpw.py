"""``dwpw``: a block candidate, one kernel for a depthwise conv and the 1x1 conv that reads it
(issue 23; DESIGN.md, "Blocks").

A depthwise conv's output (MobileNetV2's 6x-expanded hidden activation) is written to memory by
one kernel and read back by the next; here each parallel task computes a band of ``rows`` output
rows of the depthwise conv (and its epilogue) for every hidden channel into a task-private buffer
(``rows`` x width x channels floats, in L1/L2), and the 1x1 conv reads it from there in the
register tiles of ``pointwise`` (``reg_n`` positions by one or two vectors of output channels),
with its own epilogue (bias, residual add, clamp, activation) as the tile leaves the registers.
Where the output has few rows, the output channel blocks are split over ``osplit`` tasks, each
recomputing its band's depthwise part (9 multiply-adds per hidden value against C_in per output
value of the 1x1 part).

NCHW[cb]c in (``cb`` one vector of hidden channels), NCHW[ob]c out. The chain's workload is
:func:`workload` (both convs' keys); it is measured, checked and stored like any kernel, and the
whole-graph problem gets it as one more choice on both layers, tied by a layout only the two
produce and read (``costmodels.blocks``), so it is chosen on both or on neither.

Not offered: QDQ convs, dilated or grouped-but-not-depthwise convs, a 1x1 with padding or stride.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from ..target import AVX512
from . import pointwise
from .base import EPILOGUES, Candidate, epilogue_value

FAMILY = "dwpw"
DEPENDS = (pointwise,)
MIN_TASKS = 8          # parallel tasks at least (bands x output splits)
TOKEN = "~"            # an inner member's output layout starts with it: only the block reads it


@dataclass(frozen=True)
class BlockCandidate(Candidate):
    """A candidate computing a chain of layers (``members``, producer first); ``position`` says
    which member this object stands for. The last member's object is the kernel (its layouts are
    the block's: the first member's input, the last member's output); an inner member's has the
    block's token as its output layout, no weights and no kernel of its own."""
    members: tuple[str, ...] = ()
    position: int = 0
    workload: str = ""

    @property
    def last(self) -> bool:
        return self.position == len(self.members) - 1

    @property
    def token(self) -> str:
        return f"{TOKEN}{self.members[0]}+{self.key}"


def is_inner(cand) -> bool:
    """Whether ``cand`` is an inner member of a block (computed by the block's last member)."""
    return isinstance(cand, BlockCandidate) and not cand.last


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    """Nothing for one layer: blocks are proposed for chains (:func:`propose_chain`)."""
    return []


def applies(dw: ConvSpec, pw: ConvSpec) -> bool:
    plain = lambda s: s.quant is None and s.quant_pre is None and s.qdq is None  # noqa: E731
    return (dw.depthwise and not dw.dilated and not dw.residual and pointwise.applies(pw)
            and pw.in_channels == dw.out_channels and pw.in_shape == dw.out_shape and plain(dw) and plain(pw))


def workload(dw: ConvSpec, pw: ConvSpec) -> str:
    """The record key of the chain: both convs, epilogues included."""
    return f"block dwpw [{dw.key}] -> [{pw.key}]"


def _out_blocks(ch: int, isa) -> list[int]:
    bs = pointwise._blocks(ch, isa)
    if not bs and isa.lanes % 2 == 0 and ch % (isa.lanes // 2) == 0:
        bs = [isa.lanes // 2]        # MobileNetV2's 24-channel projections on AVX-512
    return bs


def _reg_n(ob: int, isa) -> int:
    """The middle of ``pointwise``'s tiles (AVX-512: 13 positions by two vectors, 24 by one)."""
    if ob <= isa.lanes:
        return max(1, min(isa.registers - 4, 24))
    rs = pointwise._reg_ns(ob, isa)
    return rs[len(rs) // 2]


def _osplit(tasks: int, OB: int) -> int:
    return next((s for s in range(1, OB + 1) if OB % s == 0 and tasks * s >= MIN_TASKS), OB)


def propose_chain(dw: ConvSpec, pw: ConvSpec, members: tuple[str, str], isa=AVX512) -> list[BlockCandidate]:
    """The block's grid for one chain: hidden channels in one vector, output blocks of one or two
    vectors (half a vector where neither divides), bands of 1 or 2 rows; the last member's
    objects (:func:`parts` gives the others)."""
    if not applies(dw, pw):
        return []
    cb = isa.lanes
    if dw.in_channels % cb:
        return []
    out = []
    wl = workload(dw, pw)
    for ob in _out_blocks(pw.out_channels, isa):
        rn = min(_reg_n(ob, isa), dw.out_h * dw.out_w)
        for rows in (1, 2):
            if dw.out_h % rows:
                continue
            osplit = _osplit(dw.batch * dw.out_h // rows, pw.out_channels // ob)
            welems = dw.in_channels * (dw.kernel[0] * dw.kernel[1] + 1) + pw.out_channels * (pw.in_channels + 1)
            out.append(BlockCandidate(
                family=FAMILY,
                params=tuple(sorted(dict(cb=cb, ob=ob, reg_n=rn, rows=rows, osplit=osplit).items())),
                in_layout=layouts.blocked(cb), out_layout=layouts.blocked(ob),
                weight_layout=f"dw:CHW{cb}c+pw:OI{ob}o", fusable_epilogues=EPILOGUES - {"quant"},
                weight_bytes=4 * welems, workspace_bytes=4 * rows * dw.out_w * dw.out_channels * 2,
                members=members, position=1, workload=wl))
    return out


def parts(cand: BlockCandidate) -> list[BlockCandidate]:
    """One object per member, ``cand`` (the last) included: inner members read the block's input
    layout and produce its token, with no weights or workspace of their own."""
    import dataclasses
    inner = [dataclasses.replace(cand, position=k, out_layout=cand.token, weight_bytes=0, workspace_bytes=0)
             for k in range(len(cand.members) - 1)]
    return inner + [cand]


def _tap(dw: ConvSpec, x, n, cc, y, xc, l):
    """The input at (row y, column xc) of channel block cc, 0 in the padding; only the sides the
    window can cross are tested."""
    import tvm
    tir = tvm.tirx
    pt, pl = dw.padding[:2]
    conds = []
    if pt:
        conds.append(y >= 0)
    if (dw.out_h - 1) * dw.stride[0] + dw.kernel[0] - pt > dw.height:
        conds.append(y < dw.height)
    if pl:
        conds.append(xc >= 0)
    if (dw.out_w - 1) * dw.stride[1] + dw.kernel[1] - pl > dw.width:
        conds.append(xc < dw.width)
    if not conds:
        return x[n, cc, y, xc, l]
    return tir.if_then_else(tir.all(*conds), x[n, cc, y, xc, l], tir.const(0.0, "float32"))


def kernel(dw: ConvSpec, pw: ConvSpec, cb: int, ob: int, rn: int, rows: int, osplit: int):
    """The PrimFunc ``(x, w_dw, b_dw, w_pw, b_pw, [residual], out)``: ``w_dw`` (C/cb, KH, KW, cb),
    ``w_pw`` (O/ob, C, ob), biases blocked (zeros where the conv has none)."""
    from tvm.script import tirx as T
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
                yf[n, oc, dst + i, l] = pointwise._epi(acc[i, l], pw, bp, rf, n, oc, dst + i, l)

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
                                    acc1[l] = acc1[l] + _tap(dw, x, t // (nrt * osplit), cc,
                                                             (t // osplit % nrt * rows + yy) * sh - pt + ky,
                                                             xx * sw - pl + kx, l) * wd[cc, ky, kx, l]
                        for l in T.vectorized(cb):
                            buf[cc, yy * OW + xx, l] = epilogue_value(acc1[l], dw, bd[cc, l] if dw.bias else None)
            for oc in range(t % osplit * per, t % osplit * per + per):
                for s in range(tiles):
                    tile(buf, wp, bp, rf, yf, t // (nrt * osplit), oc, s * rn, t // osplit % nrt * P + s * rn, rn)
                if tail > 0:
                    tile(buf, wp, bp, rf, yf, t // (nrt * osplit), oc, tiles * rn, t // osplit % nrt * P + tiles * rn,
                         tail)

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


def build_chain(cand: BlockCandidate, dw: ConvSpec, pw: ConvSpec, target, name: str = "block"):
    f = kernel(dw, pw, cand.param("cb"), cand.param("ob"), cand.param("reg_n"), cand.param("rows"),
               cand.param("osplit"))
    return (f.with_attr("global_symbol", name)
            .with_attr("tir.is_scheduled", True)
            .with_attr("op_pattern", 8)
            .with_attr("graphselect.family", cand.family)
            .with_attr("graphselect.params", ",".join(f"{k}={v}" for k, v in cand.params))
            .with_attr("graphselect.in_layout", cand.in_layout)
            .with_attr("graphselect.out_layout", cand.out_layout)
            .with_attr("graphselect.weight_layout", cand.weight_layout)
            .with_attr("graphselect.members", ",".join(cand.members))
            .with_attr("graphselect.workload", cand.workload))


def pack_chain(cand: BlockCandidate, dw: ConvSpec, pw: ConvSpec, wd: np.ndarray, bd, wp: np.ndarray, bp) -> list[np.ndarray]:
    """The block's constants: depthwise weights and bias, 1x1 weights and bias (zeros for a conv
    without one: the kernel never reads them then)."""
    cb, ob = cand.param("cb"), cand.param("ob")
    C, O = dw.in_channels, pw.out_channels
    bd = np.zeros(C, "float32") if bd is None or not dw.bias else bd
    bp = np.zeros(O, "float32") if bp is None or not pw.bias else bp
    return [np.ascontiguousarray(a, "float32") for a in (
        wd.reshape(C // cb, cb, *dw.kernel).transpose(0, 2, 3, 1), np.asarray(bd).reshape(C // cb, cb),
        wp.reshape(O // ob, ob, C).transpose(0, 2, 1), np.asarray(bp).reshape(O // ob, ob))]


def reference(dw: ConvSpec, pw: ConvSpec, x, wd, bd, wp, bp, residual=None) -> np.ndarray:
    """The chain in float64 (NCHW): the depthwise conv with its epilogue, then the 1x1 with its own."""
    from .base import reference as conv_ref
    h = conv_ref(dw, x, wd, bd if dw.bias else None, None)
    return conv_ref(pw, h, wp, bp if pw.bias else None, residual)
