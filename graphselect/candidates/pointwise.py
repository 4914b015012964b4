"""``pointwise``: a 1x1 stride-1 convolution as a register-tiled matrix product over the flattened
output positions, NCHW[ib]c -> NCHW[ob]c.

``nchwc`` tiles the output width only, by a divisor of it, so its register tile is as small as
the map's width allows: 7 columns on MobileNetV2's and ResNet-50's 7x7 and 14x14 maps, and on
AVX2 only one vector of output channels (two would take 14 of 16 registers), which leaves the FMA
pipes waiting on their own latency. A 1x1 stride-1 conv reads and writes every position of a
channel block as one contiguous run (H*W positions of ``b`` lanes), so here the positions are
one axis: a tile of ``reg_n`` positions by one or two vectors of output channels, any ``reg_n``
the registers hold (the positions that do not fill a last tile get a tile of their own size),
accumulated over every input channel with the weight panel of its output block in L1/L2. Zen 3,
weights warm, against the best ``nchwc`` candidate: 0.78-0.89x on MobileNetV2's and ResNet-50's
7x7 and 14x14 layers (178-192 GFLOP/s against an FMA probe of ~200), 0.97-1.0x on wide maps
with 16-256 input channels, 1.12x on 144->24 (`bench/results/pointwise-20261203-195237.md`).

Parallel over (batch, output block, chunk of tiles), at least ``MIN_TASKS`` tasks (a 24-channel
output has 3 blocks of 8: without chunks, one of two threads would do two thirds). The epilogue
(bias, QDQ, residual, clamp, activation) is applied to the tile as it leaves the registers.
"""
from __future__ import annotations

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from ..target import AVX512
from .base import Candidate, epilogue_value, finish, make_candidate

FAMILY = "pointwise"
MIN_TASKS = 16


def applies(spec: ConvSpec) -> bool:
    return (spec.kernel == (1, 1) and spec.stride == (1, 1) and not any(spec.padding) and spec.groups == 1
            and not spec.dilated)


def _blocks(ch: int, isa=AVX512) -> list[int]:
    """One and two vector registers of channels."""
    return [b for b in (isa.lanes, 2 * isa.lanes) if ch % b == 0]


def _whole_block(ch: int, isa=AVX512) -> list[int]:
    """Where no whole vector divides the channels but they are one and a half vectors (AVX-512:
    24; AVX2: 12): every channel in one block, NCHW{ch}c, computed in two whole vectors (the
    weights padded with zero channels, the padded lanes never stored; 40 channels padded to three
    vectors ran 3x slower than ``nchwc`` on the Intel Xeon, so only 1.5 vectors). An FMA on half a
    vector costs the issue slot of a whole one, so the padding costs no FMA throughput, while half-vector blocks (NCHW8c on AVX-512) run every FMA at half width:
    on the Intel Xeon, MobileNetV2's 144->24 1x1 ran at 188-216 GFLOP/s in NCHW8c against an FMA
    peak of ~440."""
    half = isa.lanes // 2
    if _blocks(ch, isa) or half < 4 or ch % half or not isa.lanes < ch < 2 * isa.lanes:
        return []
    return [ch]


def _channel_blocks(ch: int, isa=AVX512) -> list[int]:
    return _blocks(ch, isa) or _whole_block(ch, isa)


def _reg_ns(ob: int, isa=AVX512) -> list[int]:
    """Positions per register tile. Two vectors of channels (or one and a half to two and a half,
    :func:`_whole_block`, in whole registers): as many as the registers hold beside the weight
    vectors and one broadcast, and one and two fewer (AVX2: 4, 5, 6; AVX-512: 12-14). One vector:
    that count less two where that is at most 12 (AVX2: 12), else 4 and 8 (AVX-512). On Zen 3, timing every tile from 4 to 14
    positions, the best two-vector tile of each of 12 MobileNetV2 and ResNet-50 1x1 shapes was 4,
    5 or 6; where only one vector divides the channels (144->24) 9 beat 12 by 11%, a case too
    small to pay for more candidates (`bench/results/pointwise-20261203-195237.md`)."""
    nv = -(-ob // isa.lanes)          # registers per position
    most = (isa.registers - nv - 1) // nv
    if nv == 1:
        if most - 2 <= 12:
            return [max(1, most - 2)]
        # 32 registers: 24 positions by one vector ran 1.6-2.2x the best of a 4-24 grid on the
        # Intel Xeon (24->144 56x56 best at 4, 40->240 28x28 at 8; pointwise-20261204 notebook)
        return [4, 8]
    return [r for r in (most - 2, most - 1, most) if r >= 1]


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    if not applies(spec):
        return []
    out = []
    positions = spec.out_h * spec.out_w
    for ib in _channel_blocks(spec.in_channels, isa):
        for ob in _channel_blocks(spec.out_channels, isa):
            wide = -(-ob // isa.lanes) * isa.lanes
            extra = {"wide": wide} if wide != ob else {}
            for rn in sorted({min(r, positions) for r in _reg_ns(ob, isa)}):
                out.append(make_candidate(
                    FAMILY, spec, in_layout=layouts.blocked(ib), out_layout=layouts.blocked(ob),
                    weight_layout=f"OI{wide}o", weight_elems=spec.out_channels // ob * wide * spec.in_channels,
                    ic_bn=ib, oc_bn=ob, reg_n=rn, **extra))
    return out


def _epi(v, spec: ConvSpec, b, r, n, oc, p, l):
    """``base.epilogue_value`` of the accumulator ``v`` at (n, oc, position p, lane l): ``b`` the packed
    bias, ``r`` the residual seen as (N, O/ob, H*W, ob); read only where ``spec`` has them."""
    return epilogue_value(v, spec, b[oc, l] if spec.bias else None, r[n, oc, p, l] if spec.residual else None)


def kernel(spec: ConvSpec, ib: int, ob: int, rn: int, wide: int | None = None):
    """The PrimFunc ``(data, weight, [bias], [residual], out)``: weight packed (O/ob, I, wide),
    ``wide`` (default ``ob``) the accumulated lanes, whole vectors (:func:`_whole_block`: zero
    channels beyond ``ob``, computed and never stored)."""
    from tvm.script import tirx as T
    N, I, H, W = spec.in_shape
    O = spec.out_channels
    P = H * W
    IB, OB = I // ib, O // ob
    tiles, tail = P // rn, P % rn
    units = N * OB
    chunks = max(1, min(tiles, -(-MIN_TASKS // units))) if tiles else 1
    per = -(-tiles // chunks) if tiles else 0
    wide = wide or ob
    v2 = wide - ob            # a whole block is whole vectors and a half (:func:`_whole_block`)
    v1 = ob - v2
    xs, ws, bs, ys = (N, IB, H, W, ib), (OB, I, wide), (OB, ob), (N, OB, H, W, ob)

    @T.macro
    def tile(xf, w, b, rf, yf, n, oc, base, m):
        # m positions from ``base``: accumulate over every input channel, then the epilogue
        acc = T.alloc_buffer((m, wide), "float32", scope="local")
        for i in T.unroll(m):
            for l in T.vectorized(wide):
                acc[i, l] = T.float32(0)
        for icb in range(IB):
            for ici in T.unroll(ib):
                for i in T.unroll(m):
                    for l in T.vectorized(wide):
                        acc[i, l] = acc[i, l] + xf[n, icb, base + i, ici] * w[oc, icb * ib + ici, l]
        for i in T.unroll(m):
            for l in T.vectorized(v1):
                yf[n, oc, base + i, l] = _epi(acc[i, l], spec, b, rf, n, oc, base + i, l)
            if v2 > 0:
                for l in T.vectorized(v2):
                    yf[n, oc, base + i, v1 + l] = _epi(acc[i, v1 + l], spec, b, rf, n, oc, base + i, v1 + l)

    @T.macro
    def body(x, w, b, r, y):
        xf = T.decl_buffer((N, IB, P, ib), "float32", data=x.data)
        yf = T.decl_buffer((N, OB, P, ob), "float32", data=y.data)
        rf = T.decl_buffer((N, OB, P, ob), "float32", data=r.data)
        for t in T.parallel(units * chunks):
            for s in range(t % chunks * per, T.min(t % chunks * per + per, tiles)):
                tile(xf, w, b, rf, yf, t // (OB * chunks), t // chunks % OB, s * rn, rn)
            if tail > 0:
                if t % chunks == chunks - 1:
                    tile(xf, w, b, rf, yf, t // (OB * chunks), t // chunks % OB, tiles * rn, tail)

    if spec.bias and spec.residual:
        @T.prim_func
        def f(x: T.Buffer(xs, "float32"), w: T.Buffer(ws, "float32"), b: T.Buffer(bs, "float32"),
              r: T.Buffer(ys, "float32"), y: T.Buffer(ys, "float32")):
            T.func_attr({"tirx.noalias": True})
            body(x, w, b, r, y)
    elif spec.bias:
        @T.prim_func
        def f(x: T.Buffer(xs, "float32"), w: T.Buffer(ws, "float32"), b: T.Buffer(bs, "float32"),
              y: T.Buffer(ys, "float32")):
            T.func_attr({"tirx.noalias": True})
            body(x, w, b, y, y)
    elif spec.residual:
        @T.prim_func
        def f(x: T.Buffer(xs, "float32"), w: T.Buffer(ws, "float32"), r: T.Buffer(ys, "float32"),
              y: T.Buffer(ys, "float32")):
            T.func_attr({"tirx.noalias": True})
            body(x, w, w, r, y)
    else:
        @T.prim_func
        def f(x: T.Buffer(xs, "float32"), w: T.Buffer(ws, "float32"), y: T.Buffer(ys, "float32")):
            T.func_attr({"tirx.noalias": True})
            body(x, w, w, y, y)
    return f


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    f = kernel(spec, cand.param("ic_bn"), cand.param("oc_bn"), cand.param("reg_n"),
               dict(cand.params).get("wide"))
    return finish(f, cand, spec, name)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    ob = cand.param("oc_bn")
    wide = dict(cand.params).get("wide", ob)
    O, I = weight.shape[:2]
    w = weight.reshape(O // ob, ob, I).transpose(0, 2, 1)
    out = [np.ascontiguousarray(np.pad(w, ((0, 0), (0, 0), (0, wide - ob))), dtype="float32")]
    if spec.bias:
        out.append(np.ascontiguousarray(bias.reshape(O // ob, ob), dtype="float32"))
    return out
