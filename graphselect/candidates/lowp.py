"""Lower-precision building blocks shared by the bf16 families: bf16 values as their bits in
uint16, the AVX512-BF16 dot product as a tensor intrinsic, and numpy packing.

TVM 0.27 cannot hand LLVM a ``bfloat`` value: its BF16 legalization passes widen every bf16
expression to float32 (so ``vdpbf16ps`` gets float operands and the module fails verification),
and without them the LLVM code generator crashes on the bf16 type. So bf16 data is kept as
uint16 bits everywhere in TIR, and the one instruction that needs ``<32 x bfloat>`` is a tiny
LLVM IR function imported into each kernel (``pragma_import_llvm``) that bitcasts its integer
operands and calls ``llvm.x86.avx512bf16.dpbf16ps.512``; LLVM inlines it, so the loop body is
one ``vdpbf16ps`` per 16 output lanes and 2 input channels (fp32 accumulation).
"""
from __future__ import annotations

import numpy as np

BF16 = "avx512_bf16"               # the VectorIsa feature the bf16 families need
DOT = "graphselect_dpbf16_16x2"    # tensor intrinsic: C[16] += A[2] . B[16, 2] (bf16 -> fp32)

_LLVM = r"""
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
define linkonce_odr <16 x float> @graphselect_dpbf16ps(<16 x float> %c, <16 x i32> %a, <16 x i32> %b) alwaysinline {
  %ab = bitcast <16 x i32> %a to <32 x bfloat>
  %bb = bitcast <16 x i32> %b to <32 x bfloat>
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %c, <32 x bfloat> %ab, <32 x bfloat> %bb)
  ret <16 x float> %r
}
"""


def widen(v):
    """bf16 bits (uint16 TIR value) -> float32: the bits are the top half of the float."""
    from tvm import tirx
    return tirx.reinterpret("float32", tirx.shift_left(v.astype("uint32"), tirx.const(16, "uint32")))


def narrow(v):
    """float32 TIR value -> bf16 bits, rounded to nearest even (as ``vcvtneps2bf16``)."""
    from tvm import tirx
    u32 = lambda c: tirx.const(c, "uint32")  # noqa: E731
    u = tirx.reinterpret("uint32", v)
    r = u + u32(0x7FFF) + tirx.bitwise_and(tirx.shift_right(u, u32(16)), u32(1))
    return tirx.shift_right(r, u32(16)).astype("uint16")


def register() -> None:
    """Register :data:`DOT` with TVM (once per process)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T
    if TensorIntrin.get(DOT, allow_missing=True) is not None:
        return

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((2,), "uint16", offset_factor=1), B: T.Buffer((16, 2), "uint16", offset_factor=1),
             C: T.Buffer((16,), "float32", offset_factor=1)):
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            for i, k in T.grid(16, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.reinterpret("float32", T.shift_left(T.Cast("uint32", A[vk]), T.uint32(16))) \
                        * T.reinterpret("float32", T.shift_left(T.Cast("uint32", B[vi, vk]), T.uint32(16)))

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((2,), "uint16", offset_factor=1), B: T.Buffer((16, 2), "uint16", offset_factor=1),
             C: T.Buffer((16,), "float32", offset_factor=1)):
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            a = T.reinterpret(A.vload([0], "uint16x2"), dtype="int32")      # one input channel pair
            C[T.ramp(T.int32(0), 1, 16)] = T.call_pure_extern(
                "float32x16", "graphselect_dpbf16ps", C.vload([0], "float32x16"), T.broadcast(a, 16),
                T.reinterpret(B.vload([0, 0], "uint16x32"), dtype="int32x16"))

    TensorIntrin.register(DOT, desc, impl)


def with_llvm_import(func):
    """``func`` with the LLVM IR of the dot product imported into its module (see the module doc)."""
    import tvm
    from tvm import tirx
    return func.with_body(tirx.AttrStmt(tirx.const(0, "int32"), "pragma_import_llvm", tvm.ir.StringImm(_LLVM),
                                        func.body))


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 array -> its bf16 bits (uint16), rounded to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
