"""``nchwc_bf16``: channel-blocked convolution in bf16 with fp32 accumulation (AVX512-BF16).

The same layouts as ``nchwc`` (NCHW[ic]c float32 in, NCHW[oc]c float32 out, the epilogue fused
in fp32 on the accumulator tile), so a layer can switch precision without a transform on either
edge. Inside, one pass converts the input to bf16 (the padded copy ``nchwc`` makes anyway; for an
unpadded 1x1 conv, only the pixels its stride reads), and the weights are stored as bf16, packed
(O/oc_bn, I/ic_bn, KH, KW, ic_bn/2, oc_bn, 2): each ``vdpbf16ps`` multiplies one broadcast pair of
input channels by 16 output channels of two weights each and adds both products to 16 fp32
accumulators. Half the weight bytes, twice the products per instruction; the error is bf16's
rounding of inputs and weights (8 significant bits), a few 1e-3 of a layer's output scale.

Proposed only for targets whose vector unit has ``avx512_bf16`` (``target.VectorIsa.features``),
and only when the user allows lower precision (``--precision bf16|auto``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec
from ..target import AVX512
from . import lowp
from .base import Candidate, divisors_in, epilogue_compute, finish, make_candidate

FAMILY = "nchwc_bf16"
PRECISION = "bf16"
DEPENDS = (lowp,)          # part of the code version
# Rejects a broken kernel, not bf16 itself: bf16 rounding gives 2-5e-3 of the output's scale.
TOLERANCE = 3e-2
LANES = 16                 # the dot product's fp32 lanes


def _blocks(ch: int) -> list[int]:
    return [b for b in (LANES, 2 * LANES) if ch % b == 0]


def _in_blocks(ch: int) -> list[int]:
    """Input channel blocks: one and two vectors, or all channels in one block when fewer than a
    vector (a stem's 3: computed as 4, the pair completed with a zero channel)."""
    return _blocks(ch) or ([ch] if ch < LANES else [])


def _pairs(ib: int) -> int:
    """Channel pairs the dot product reads per input block (an odd block gets a zero channel)."""
    return (ib + 1) // 2


def _reg_ns(ow: int, oc_bn: int) -> list[int]:
    # reg_n x oc_bn/16 accumulators, with two weight vectors and the broadcast beside them in 32 registers
    ds = divisors_in(ow, 4, 28 * LANES // oc_bn) or [max(divisors_in(ow, 1, 28 * LANES // oc_bn))]
    return ds[-2:]


def _pointwise(spec: ConvSpec) -> bool:
    """An unpadded 1x1 conv: the conversion pass reads only the pixels the stride uses."""
    return spec.kernel == (1, 1) and not any(spec.padding)


def _converted_bytes(spec: ConvSpec, depth: int = 2, itemsize: int = 2) -> int:
    """The converted copy of the input the kernel makes: bf16 (2 bytes, channel pairs) here, uint8
    (1 byte, channel quads) in ``nchwc_int8``."""
    n, c, h, w = spec.in_shape
    if c < LANES:
        c = -(-c // depth) * depth     # a stem's channel count completed by zero channels
    if _pointwise(spec):
        return itemsize * n * c * spec.out_h * spec.out_w
    pt, pl, pb, pr = spec.padding
    return itemsize * n * c * (h + pt + pb) * (w + pl + pr)


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    if lowp.BF16 not in isa.features or spec.groups != 1:
        return []
    out = []
    kelems = spec.out_channels * spec.in_channels * spec.kernel[0] * spec.kernel[1]
    for ib in _in_blocks(spec.in_channels):
        for ob in _blocks(spec.out_channels):
            for rn in _reg_ns(spec.out_w, ob):
                c = make_candidate(FAMILY, spec, in_layout=layouts.blocked(ib), out_layout=layouts.blocked(ob),
                                   weight_layout=f"OIHW{_pairs(ib)}i{ob}o2i", weight_elems=kelems,
                                   workspace_bytes=_converted_bytes(spec), ic_bn=ib, oc_bn=ob, reg_n=rn)
                # bf16 weights: 2 bytes each, a zero channel completing an odd block (the fp32 bias stays 4)
                packed = kelems // spec.in_channels * 2 * _pairs(ib) * (spec.in_channels // ib)
                out.append(dataclasses.replace(c, weight_bytes=c.weight_bytes - 4 * kelems + 2 * packed))
    return out


def compute(spec: ConvSpec, ib: int, ob: int):
    from tvm import te, tirx
    n, c, h, w = spec.in_shape
    O, (KH, KW), (sh, sw), (dh, dw) = spec.out_channels, spec.kernel, spec.stride, spec.dilation
    pt, pl, pb, pr = spec.padding
    OH, OW = spec.out_h, spec.out_w
    cp = 2 * _pairs(ib)                # channels per block as computed (an odd block gets a zero one)
    data = te.placeholder((n, c // ib, h, w, ib), name="data")
    kern = te.placeholder((O // ob, c // ib, KH, KW, cp // 2, ob, 2), "uint16", name="weight")
    bias = te.placeholder((O // ob, ob), name="bias") if spec.bias else None
    zero = tirx.const(0.0, "float32")
    if _pointwise(spec):
        def strided(b, cc, y, x, i):
            v = data[b, cc, y * sh, x * sw, i] if cp == ib else tirx.if_then_else(i < ib, data[b, cc, y * sh, x * sw,
                                                                                                 tirx.min(i, ib - 1)], zero)
            return lowp.narrow(v)
        xb = te.compute((n, c // ib, OH, OW, cp), strided, name="data_pad")

        def read(b, cc, y, x, ky, kx, i):
            return xb[b, cc, y, x, i]
    else:
        def padded(b, cc, y, x, i):
            inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl, i < ib)
            return lowp.narrow(tirx.if_then_else(inside, data[b, cc, y - pt, x - pl, tirx.min(i, ib - 1)], zero))
        xb = te.compute((n, c // ib, h + pt + pb, w + pl + pr, cp), padded, name="data_pad")

        def read(b, cc, y, x, ky, kx, i):
            return xb[b, cc, y * sh + ky * dh, x * sw + kx * dw, i]
    rc = te.reduce_axis((0, c // ib), "rc")
    rh, rw = te.reduce_axis((0, KH), "rh"), te.reduce_axis((0, KW), "rw")
    r2, r1 = te.reduce_axis((0, cp // 2), "r2"), te.reduce_axis((0, 2), "r1")
    conv = te.compute((n, O // ob, OH, OW, ob), lambda b, oc, y, x, o: te.sum(
        lowp.widen(read(b, rc, y, x, rh, rw, r2 * 2 + r1)) * lowp.widen(kern[oc, rc, rh, rw, r2, o, r1]),
        axis=[rc, rh, rw, r2, r1]), name="conv2d_NCHWc")
    res = te.placeholder(conv.shape, name="residual") if spec.residual else None
    out = epilogue_compute(conv, spec, bias, res, lambda b, oc, y, x, cb: (oc, cb))
    args = [data, kern] + ([bias] if bias is not None else []) + ([res] if res is not None else []) + [out]
    return te.create_prim_func(args)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    from tvm.s_tir import Schedule
    lowp.register()
    ib, ob, reg_n = cand.param("ic_bn"), cand.param("oc_bn"), cand.param("reg_n")
    sch = Schedule(compute(spec, ib, ob))
    schedule_dot(sch, reg_n, lowp.DOT)
    return lowp.with_llvm_import(finish(sch.mod["main"], cand, spec, name))


def schedule_dot(sch, reg_n: int, intrin: str) -> None:
    """The schedule of a blocked conv whose innermost reduction is a dot-product instruction (this
    family's and ``nchwc_int8``'s): a register tile of ``reg_n`` pixels by the output block, the
    epilogue on the accumulator tile, ``intrin`` tensorized over each 16 lanes."""
    conv, epi = sch.get_sblock("conv2d_NCHWc"), sch.get_sblock("epilogue")
    n, occ, oh, ow, ocb, rc, rh, rw, rv, r1 = sch.get_loops(conv)
    ow_o, ow_i = sch.split(ow, [None, reg_n])
    ocv, oc16 = sch.split(ocb, [None, LANES])
    sch.reorder(n, occ, oh, ow_o, rc, rh, rw, rv, ow_i, ocv, oc16, r1)
    sch.unroll(ow_i)
    sch.unroll(ocv)
    sch.unroll(rw)
    # the accumulator tile is consumed at once by the epilogue (fp32), as in nchwc
    sch.reverse_compute_at(epi, ow_o)
    el = sch.get_loops(epi)
    sch.vectorize(el[-1])
    sch.unroll(el[-2])
    sch.parallel(sch.fuse(n, occ, oh))
    # vectorize/unroll/parallel before decompose_reduction (TVM 0.27 trap); tensorize after it
    init = sch.decompose_reduction(conv, rc)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(oc16, intrin)
    pl = sch.get_loops(sch.get_sblock("data_pad"))
    sch.parallel(sch.fuse(*pl[:3]))
    sch.vectorize(pl[-1])


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    ib, ob = cand.param("ic_bn"), cand.param("oc_bn")
    O, I, KH, KW = weight.shape
    cp = 2 * _pairs(ib)
    w = weight.reshape(O, I // ib, ib, KH, KW)
    if cp != ib:                      # the zero channel that completes an odd block's last pair
        w = np.concatenate([w, np.zeros((O, I // ib, cp - ib, KH, KW), w.dtype)], axis=2)
    w = w.reshape(O // ob, ob, I // ib, cp // 2, 2, KH, KW).transpose(0, 2, 5, 6, 3, 1, 4)
    out = [np.ascontiguousarray(lowp.to_bf16_bits(w))]
    if spec.bias:
        out.append(np.ascontiguousarray(bias.reshape(O // ob, ob), dtype="float32"))
    return out
