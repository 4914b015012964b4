"""``nchwc_int8``: a QDQ model's conv computed in integers (AVX512-VNNI ``vpdpbusd``).

A QDQ model (what onnxruntime's quantizer and PyTorch's QDQ export write) says which convs run on
quantized values: the input passes a QuantizeLinear -> DequantizeLinear pair (a per-tensor scale
``s_x`` and zero point ``z_x``) and the weights are dequantized int8 (per output channel ``s_w``,
symmetric). ``layers.extract`` records the input's quantization as ``ConvSpec.qdq`` when the
weights are on such a grid, and only then is this family proposed. It computes exactly what the
model specifies, in integer arithmetic:

    y[o] = s_x * s_w[o] * sum((x_q - z_x) * w_q[o]) + bias[o]      (then the fused epilogue)

The same layouts as ``nchwc`` (NCHW[ic]c float32 in, NCHW[oc]c float32 out): the input is
quantized to uint8 in the padding pass (``x_q - qmin``: int8 activations are shifted into
uint8, as ``vpdpbusd`` multiplies unsigned by signed bytes; padding is the quantized zero), the
weights are packed int8 (O/oc_bn, I/ic_bn, KH, KW, ic_bn/4, oc_bn, 4) so that one ``vpdpbusd``
adds 4 input channels' products into 16 int32 accumulators, and the epilogue subtracts the
zero point's share (``(z_x - qmin) * sum(w_q[o])``, packed per output channel), scales to float32
and applies bias, residual, clamp and the output's fake-quant there. Integer accumulation is
exact, so the only difference from the float32 path is float32 rounding in the scaling: a
quarter of the weight bytes, four times the products per instruction, and no loss of accuracy
against the model.

Proposed only where the target's vector unit has ``avx512_vnni``. The activations between layers
stay float32 on their grid (as the bf16 families keep them): no layer needs another's precision.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import layouts
from ..graph.layers import ConvSpec, int8_weights
from ..target import AVX512
from . import nchwc_bf16
from .base import Candidate, epilogue_compute, finish, make_candidate, quantize
from .nchwc_bf16 import LANES, _blocks, _converted_bytes, _in_blocks, _pointwise, _reg_ns, schedule_dot

FAMILY = "nchwc_int8"
PRECISION = "int8"
DEPENDS = (nchwc_bf16,)    # its channel blocks, register tiles and schedule (part of the code version)
VNNI = "avx512_vnni"       # the VectorIsa feature this family needs
INTRIN = "graphselect_vpdpbusd_16x4"   # tensor intrinsic: C[16] += A[4] . B[16, 4] (u8 x s8 -> s32)


def _quads(ib: int) -> int:
    return (ib + 3) // 4


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    if spec.qdq is None or VNNI not in isa.features or spec.groups != 1:
        return []
    out = []
    kelems = spec.out_channels * spec.in_channels * spec.kernel[0] * spec.kernel[1]
    for ib in _in_blocks(spec.in_channels):
        for ob in _blocks(spec.out_channels):
            for rn in _reg_ns(spec.out_w, ob):
                c = make_candidate(FAMILY, spec, in_layout=layouts.blocked(ib), out_layout=layouts.blocked(ob),
                                   weight_layout=f"OIHW{_quads(ib)}i{ob}o4i", weight_elems=kelems,
                                   workspace_bytes=_converted_bytes(spec, 4, 1), ic_bn=ib, oc_bn=ob, reg_n=rn)
                packed = kelems // spec.in_channels * 4 * _quads(ib) * (spec.in_channels // ib)
                # int8 weights (a zero channel completing a stem's quad), int32 + float32 per channel
                out.append(dataclasses.replace(c, weight_bytes=c.weight_bytes - 4 * kelems + packed
                                               + 8 * spec.out_channels))
    return out


def compute(spec: ConvSpec, ib: int, ob: int):
    from tvm import te, tirx
    q = spec.qdq
    n, c, h, w = spec.in_shape
    O, (KH, KW), (sh, sw), (dh, dw) = spec.out_channels, spec.kernel, spec.stride, spec.dilation
    pt, pl, pb, pr = spec.padding
    OH, OW = spec.out_h, spec.out_w
    cp = 4 * _quads(ib)
    data = te.placeholder((n, c // ib, h, w, ib), name="data")
    kern = te.placeholder((O // ob, c // ib, KH, KW, cp // 4, ob, 4), "int8", name="weight")
    comp = te.placeholder((O // ob, ob), "int32", name="zero_point_share")
    mult = te.placeholder((O // ob, ob), name="scale")
    bias = te.placeholder((O // ob, ob), name="bias") if spec.bias else None
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
    zero_u8 = tirx.const(q.zero_point - q.qmin, "uint8")

    def to_u8(v):                # the quantized value, shifted into [0, 255] for vpdpbusd
        return (quantize(v, q) - f32(q.qmin)).astype("uint8")

    if _pointwise(spec):
        def strided(b, cc, y, x, i):
            v = to_u8(data[b, cc, y * sh, x * sw, tirx.min(i, ib - 1)])
            return v if cp == ib else tirx.if_then_else(i < ib, v, zero_u8)
        xb = te.compute((n, c // ib, OH, OW, cp), strided, name="data_pad")

        def read(b, cc, y, x, ky, kx, i):
            return xb[b, cc, y, x, i]
    else:
        def padded(b, cc, y, x, i):
            inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl, i < ib)
            return tirx.if_then_else(inside, to_u8(data[b, cc, y - pt, x - pl, tirx.min(i, ib - 1)]), zero_u8)
        xb = te.compute((n, c // ib, h + pt + pb, w + pl + pr, cp), padded, name="data_pad")

        def read(b, cc, y, x, ky, kx, i):
            return xb[b, cc, y * sh + ky * dh, x * sw + kx * dw, i]
    rc = te.reduce_axis((0, c // ib), "rc")
    rh, rw = te.reduce_axis((0, KH), "rh"), te.reduce_axis((0, KW), "rw")
    r4, r1 = te.reduce_axis((0, cp // 4), "r4"), te.reduce_axis((0, 4), "r1")
    acc = te.compute((n, O // ob, OH, OW, ob), lambda b, oc, y, x, o: te.sum(
        read(b, rc, y, x, rh, rw, r4 * 4 + r1).astype("int32") * kern[oc, rc, rh, rw, r4, o, r1].astype("int32"),
        axis=[rc, rh, rw, r4, r1]), name="conv2d_NCHWc")

    class _Scaled:               # epilogue_compute reads conv(*idx) and conv.shape
        shape = acc.shape

        def __call__(self, b, oc, y, x, o):
            return (acc[b, oc, y, x, o] - comp[oc, o]).astype("float32") * mult[oc, o]
    res = te.placeholder(acc.shape, name="residual") if spec.residual else None
    out = epilogue_compute(_Scaled(), spec, bias, res, lambda b, oc, y, x, cb: (oc, cb))
    args = [data, kern, comp, mult] + ([bias] if bias is not None else []) + ([res] if res is not None else []) \
        + [out]
    return te.create_prim_func(args)


def register() -> None:
    """Register :data:`INTRIN` (once per process). TVM 0.27 ships one (``dot_16x4_vnni``), but it
    calls ``vpdpbusd`` with ``<16 x i32>`` operands where its LLVM declares ``<64 x i8>``, and the
    module fails verification; this one passes the bytes as LLVM declares them."""
    from tvm.s_tir import TensorIntrin
    from tvm.s_tir.tensor_intrin.x86 import dot_product_16x4_u8i8i32_desc as desc
    from tvm.script import tirx as T
    if TensorIntrin.get(INTRIN, allow_missing=True) is not None:
        return

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((4,), "uint8", offset_factor=1), B: T.Buffer((16, 4), "int8", offset_factor=1),
             C: T.Buffer((16,), "int32", offset_factor=1)):
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")      # four input channels
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), C.vload([0], "int32x16"),
                T.reinterpret(T.broadcast(a, 16), dtype="int8x64"), B.vload([0, 0], dtype="int8x64"), dtype="int32x16")

    TensorIntrin.register(INTRIN, desc, impl)


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    from tvm.s_tir import Schedule
    register()
    ib, ob, reg_n = cand.param("ic_bn"), cand.param("oc_bn"), cand.param("reg_n")
    sch = Schedule(compute(spec, ib, ob))
    schedule_dot(sch, reg_n, INTRIN)
    return finish(sch.mod["main"], cand, spec, name)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    ib, ob = cand.param("ic_bn"), cand.param("oc_bn")
    q = spec.qdq
    got = int8_weights(weight)
    if got is None:
        raise ValueError("the weights are not dequantized int8 (symmetric, per output channel)")
    wq, s = got
    O, I, KH, KW = weight.shape
    cp = 4 * _quads(ib)
    share = (q.zero_point - q.qmin) * wq.reshape(O, -1).astype(np.int64).sum(axis=1)
    w = wq.reshape(O, I // ib, ib, KH, KW)
    if cp != ib:
        w = np.concatenate([w, np.zeros((O, I // ib, cp - ib, KH, KW), w.dtype)], axis=2)
    w = w.reshape(O // ob, ob, I // ib, cp // 4, 4, KH, KW).transpose(0, 2, 5, 6, 3, 1, 4)
    out = [np.ascontiguousarray(w),
           np.ascontiguousarray(share.reshape(O // ob, ob), dtype="int32"),
           np.ascontiguousarray((np.float32(q.scale) * s).reshape(O // ob, ob), dtype="float32")]
    if spec.bias:
        out.append(np.ascontiguousarray(bias.reshape(O // ob, ob), dtype="float32"))
    return out
