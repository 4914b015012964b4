"""``direct``: plain NCHW convolution, vectorized along output width, tiled over output channels.

Grouped convolutions (1 < groups < channels) reduce over their group's input channels; an output
channel tile never straddles two groups. Dilated convolutions step their taps by the dilation.
Depthwise convolutions belong to ``depthwise``, except dilated ones (``depthwise`` has no
dilation), which this family takes as groups of one channel. 1x1 stride-1 convs also get a
flattened-pixel variant (``flat=1``): vectors along the pixels, up to 29 output channels per tile;
and their row schedule takes wide channel tiles too."""
from __future__ import annotations

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from ..target import AVX512
from .base import Candidate, divisors_in, epilogue_compute, finish, make_candidate, schedule_tail

FAMILY = "direct"


def _vec(ow: int) -> int:
    ds = divisors_in(ow, 4, 16)
    return ds[-1] if ds else (ow if ow <= 32 else max(divisors_in(ow, 1, 16)))


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    if (spec.depthwise and not spec.dilated) or spec.in_channels % spec.groups or spec.out_channels % spec.groups:
        return []
    og = spec.out_channels // spec.groups
    tiles = [t for t in (4, 8) if og % t == 0]
    if not tiles:            # e.g. ShuffleNet's 58 channels: direct must apply to every conv
        tiles = [max(divisors_in(og, 1, 8))]
    if spec.kernel == (1, 1) and spec.groups == 1:
        # 1x1: wide output-channel tiles (up to 29 accumulators) so each input row loaded feeds
        # many FMAs (232->232 at 14x14: tile 8 0.073 ms, tile 29 0.059; 672->112: 0.112 -> 0.082)
        tiles += divisors_in(og, 9, _accumulators(isa) // -(-_vec(spec.out_w) // isa.lanes))[-2:]
    welems = spec.out_channels * (spec.in_channels // spec.groups) * spec.kernel[0] * spec.kernel[1]
    out = [make_candidate(FAMILY, spec, in_layout=layouts.NCHW, out_layout=layouts.NCHW, weight_layout="OIHW",
                          weight_elems=welems, workspace_bytes=spec.padded_input_bytes, oc_tile=t, vec=_vec(spec.out_w))
           for t in tiles]
    return out + [make_candidate(FAMILY, spec, in_layout=layouts.NCHW, out_layout=layouts.NCHW, weight_layout="OIHW",
                                 weight_elems=welems, oc_tile=t, vec=v, flat=1) for t, v in _flat_tiles(spec, og, isa)]


def _accumulators(isa) -> int:
    """Vector accumulators a register tile may take: all registers but the input vector, a
    broadcast weight and one spare (AVX-512: 29 of 32)."""
    return isa.registers - 3


def _flat_tiles(spec: ConvSpec, og: int, isa=AVX512) -> list[tuple[int, int]]:
    """A 1x1 stride-1 conv is a matrix product over the flattened output pixels: full 16-float
    vectors along them (a row of 14 or 7 pixels is not a vector) and output-channel tiles that
    need not be powers of two (ShuffleNet's 58, 116 and 232 channels: 29 accumulators), so every
    input vector loaded feeds many FMAs."""
    if spec.kernel != (1, 1) or spec.stride != (1, 1) or any(spec.padding) or spec.groups != 1 or spec.dilated:
        return []
    pixels = spec.out_h * spec.out_w
    vec = next((v for v in (16, 8) if pixels % v == 0), None)   # 14x14, 7x7: a row vector is faster
    if vec is None:
        return []
    # up to 29 accumulators on AVX-512: with the input vector and a broadcast weight, 31 of the 32 registers
    return [(t, vec) for t in divisors_in(og, 4, _accumulators(isa) // -(-vec // isa.lanes))[-2:]]


def compute(spec: ConvSpec):
    from tvm import te, topi
    n, c, h, w = spec.in_shape
    kh, kw = spec.kernel
    sh, sw = spec.stride
    dh, dw = spec.dilation
    pt, pl, pb, pr = spec.padding
    data = te.placeholder((n, c, h, w), name="data")
    g = spec.groups
    og, ig = spec.out_channels // g, c // g
    weight = te.placeholder((spec.out_channels, ig, kh, kw), name="weight")
    bias = te.placeholder((spec.out_channels,), name="bias") if spec.bias else None
    padded = topi.nn.pad(data, [0, 0, pt, pl], [0, 0, pb, pr], name="data_pad") if any(spec.padding) else data
    rc = te.reduce_axis((0, ig), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    # input channel of output channel o's group (rc itself when groups == 1)
    ic = (lambda o: rc) if g == 1 else (lambda o: o // og * ig + rc)
    conv = te.compute(spec.out_shape, lambda b, o, y, x: te.sum(
        padded[b, ic(o), y * sh + ry * dh, x * sw + rx * dw] * weight[o, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    res = te.placeholder(spec.out_shape, name="residual") if spec.residual else None
    out = epilogue_compute(conv, spec, bias, res, lambda b, o, y, x: (o,))
    args = [data, weight] + ([bias] if bias is not None else []) + ([res] if res is not None else []) + [out]
    return te.create_prim_func(args)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    from tvm.s_tir import Schedule
    sch = Schedule(compute(spec))
    conv, epi = sch.get_sblock("conv"), sch.get_sblock("epilogue")
    b, o, y, x, rc, ry, rx = sch.get_loops(conv)
    oo, oi = sch.split(o, [None, cand.param("oc_tile")])
    if dict(cand.params).get("flat"):
        # 1x1: pixels flattened, a vector of pixels times an oc_tile of channels per register tile
        po, pi = sch.split(sch.fuse(y, x), [None, cand.param("vec")])
        sch.reorder(b, oo, po, rc, ry, rx, oi, pi)
        sch.vectorize(pi)
        sch.unroll(oi)
        sch.parallel(sch.fuse(b, oo, po))
        # the epilogue as its own pass: a vector of flattened pixels is not a rectangle of (y, x),
        # so it cannot be computed at the conv's tile
        eb, eo, ey, ex = sch.get_loops(epi)
        eo_, ei = sch.split(sch.fuse(ey, ex), [None, cand.param("vec")])
        sch.parallel(sch.fuse(eb, eo))
        sch.vectorize(ei)
        schedule_tail(sch, conv, rc, spec, pad_outer=2)
        return finish(sch.mod["main"], cand, spec, name)
    xo, xi = sch.split(x, [None, cand.param("vec")])
    sch.reorder(b, oo, y, xo, rc, ry, rx, oi, xi)
    sch.reverse_compute_at(epi, xo)
    sch.vectorize(xi)
    sch.unroll(oi)
    sch.unroll(rx)
    el = sch.get_loops(epi)
    sch.vectorize(el[-1])
    sch.parallel(sch.fuse(b, oo, y))
    schedule_tail(sch, conv, rc, spec, pad_outer=2)
    return finish(sch.mod["main"], cand, spec, name)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    return [np.ascontiguousarray(weight, dtype="float32")] + \
        ([np.ascontiguousarray(bias, dtype="float32")] if spec.bias else [])
