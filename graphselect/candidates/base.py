"""The candidate contract shared by every family (see DESIGN.md, "Candidate contract").

A family module provides ``propose(spec) -> list[Candidate]``, ``build(cand, spec, target) ->
PrimFunc`` and ``pack(cand, spec, weight, bias) -> list[np.ndarray]``. The PrimFunc takes
``(data, *packed constants, [residual], out)``: data first, so a cache flush of every argument
but the first leaves the input warm and the weights cold, as in a running network.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.layers import ACTIVATIONS, ConvSpec

EPILOGUES = frozenset({"bias", "residual", "clip", "quant", *ACTIVATIONS})   # quant: a QDQ model's fake-quant
# Max relative error (to the output's scale) against the float64 direct convolution for the
# exact algorithms; float32 accumulation over 4608 terms stays near 1e-6.
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Candidate:
    family: str
    params: tuple[tuple[str, int], ...]      # sorted (name, value) pairs
    in_layout: str
    out_layout: str
    weight_layout: str
    fusable_epilogues: frozenset[str]
    weight_bytes: int                        # packed constants (weights + bias) in bytes
    workspace_bytes: int                     # temporary buffers inside the kernel

    def param(self, name: str) -> int:
        return dict(self.params)[name]

    @property
    def key(self) -> str:
        return f"{self.family}(" + ",".join(f"{k}={v}" for k, v in self.params) + ")"

    def fuses(self, spec: ConvSpec) -> bool:
        """Whether this candidate absorbs the whole epilogue of ``spec``."""
        need = set()
        if spec.bias:
            need.add("bias")
        if spec.residual:
            need.add("residual")
        if spec.clip_lo is not None or spec.clip_hi is not None:
            need.add("clip")
        if spec.act is not None:
            need.add(spec.act)
        if spec.quant is not None or spec.quant_pre is not None:
            need.add("quant")
        return need <= self.fusable_epilogues


def make_candidate(family: str, spec: ConvSpec, *, in_layout: str, out_layout: str, weight_layout: str,
                   weight_elems: int, workspace_bytes: int = 0, **params: int) -> Candidate:
    return Candidate(family=family, params=tuple(sorted((k, int(v)) for k, v in params.items())),
                     in_layout=in_layout, out_layout=out_layout, weight_layout=weight_layout,
                     fusable_epilogues=EPILOGUES,
                     weight_bytes=4 * (weight_elems + (spec.out_channels if spec.bias else 0)),
                     workspace_bytes=workspace_bytes)


def epilogue_compute(conv, spec: ConvSpec, bias, residual, bias_index):
    """``te.compute`` applying bias, residual add and clamp to ``conv`` (any layout).

    ``bias_index(*idx)`` maps an output index to the bias tensor's index.
    """
    from tvm import te

    def f(*idx):
        return epilogue_value(conv(*idx), spec, bias(*bias_index(*idx)) if bias is not None else None,
                              residual(*idx) if residual is not None else None)
    return te.compute(conv.shape, f, name="epilogue")


def epilogue_value(v, spec: ConvSpec, bias=None, res=None):
    """The epilogue of ``spec`` on one TIR value ``v``: bias, QDQ before the add, residual add,
    clamp, activation, QDQ, in that order (``bias``/``res``: the values to add, or None)."""
    import tvm
    from tvm import te
    if bias is not None:
        v = v + bias
    if spec.quant_pre is not None:
        v = fake_quant(v, spec.quant_pre)
    if res is not None:
        v = v + res
    if spec.clip_lo is not None:
        v = te.max(v, tvm.tirx.const(spec.clip_lo, "float32"))
    if spec.clip_hi is not None:
        v = te.min(v, tvm.tirx.const(spec.clip_hi, "float32"))
    v = activation(v, spec.act)
    return fake_quant(v, spec.quant) if spec.quant is not None else v


def quantize(v, q):
    """The integer (as a float32 TIR value) ``v`` quantizes to by ``q`` (``layers.Quant``), as TVM
    legalizes ``relax.quantize``: divide, round half to even, add the zero point, clamp."""
    import tvm
    from tvm import te
    f32 = lambda c: tvm.tirx.const(c, "float32")  # noqa: E731
    r = te.round(v / f32(q.scale)) + f32(q.zero_point)
    return te.min(te.max(r, f32(q.qmin)), f32(q.qmax))


def fake_quant(v, q):
    """A QDQ pair on the float32 TIR value ``v``: :func:`quantize`, then dequantize."""
    import tvm
    f32 = lambda c: tvm.tirx.const(c, "float32")  # noqa: E731
    return (quantize(v, q) - f32(q.zero_point)) * f32(q.scale)


def activation(v, act: str | None):
    """``act`` (one of ``ACTIVATIONS`` or None) applied to the TIR value ``v``."""
    import tvm
    from tvm import te
    if act is None:
        return v
    f32 = lambda c: tvm.tirx.const(c, "float32")  # noqa: E731
    if act == "sigmoid":
        return f32(1.0) / (f32(1.0) + vexp(-v))
    if act == "silu":
        return v / (f32(1.0) + vexp(-v))
    if act == "hardswish":
        return v * te.min(te.max(v + f32(3.0), f32(0.0)), f32(6.0)) / f32(6.0)
    raise ValueError(f"unknown activation {act!r}")


def vexp(x):
    """exp(x) for float32 TIR values as arithmetic LLVM vectorizes (Cephes' expf: range reduction
    by ln 2, a degree-5 polynomial, 2^n through the exponent bits; ~1 ulp). ``tir.exp`` becomes one
    scalar libm call per lane: a SiLU epilogue made EfficientNet's 1x1 convs 5-10x slower. Inputs
    are clamped to [-87, 87], where 2^n stays a normal float."""
    import tvm
    from tvm import te
    tir = tvm.tirx
    f32 = lambda c: tir.const(c, "float32")  # noqa: E731
    x = te.min(te.max(x, f32(-87.0)), f32(87.0))
    n = te.floor(x * f32(1.44269504088896341) + f32(0.5))
    r = x - n * f32(0.693359375) - n * f32(-2.12194440e-4)
    p = f32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + f32(c)
    y = p * (r * r) + r + f32(1.0)
    bits = (n.astype("int32") + tir.const(127, "int32")) << tir.const(23, "int32")
    return y * tir.reinterpret("float32", bits)


def activation_np(y: np.ndarray, act: str | None) -> np.ndarray:
    """numpy twin of :func:`activation`."""
    if act is None:
        return y
    if act == "sigmoid":
        return 1.0 / (1.0 + np.exp(-y))
    if act == "silu":
        return y / (1.0 + np.exp(-y))
    if act == "hardswish":
        return y * np.clip(y + 3.0, 0.0, 6.0) / 6.0
    raise ValueError(f"unknown activation {act!r}")


def finish(func, cand: Candidate, spec: ConvSpec, name: str):
    """Attributes every conv PrimFunc carries: what it is, and that Relax must leave it alone."""
    return (func.with_attr("global_symbol", name)
            .with_attr("tir.is_scheduled", True)
            .with_attr("op_pattern", 8)           # opaque: FuseOps must not merge it (epilogue is inside)
            .with_attr("graphselect.family", cand.family)
            .with_attr("graphselect.params", ",".join(f"{k}={v}" for k, v in cand.params))
            .with_attr("graphselect.in_layout", cand.in_layout)
            .with_attr("graphselect.out_layout", cand.out_layout)
            .with_attr("graphselect.weight_layout", cand.weight_layout)
            .with_attr("graphselect.workload", spec.key))


def reference(spec: ConvSpec, x: np.ndarray, weight: np.ndarray, bias, residual) -> np.ndarray:
    """The direct convolution with its epilogue in float64 (NCHW), the yardstick for every family."""
    pt, pl, pb, pr = spec.padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c = xp.shape[:2]
    oh, ow = spec.out_h, spec.out_w
    sh, sw = spec.stride
    dh, dw = spec.dilation
    g = spec.groups
    og, ig = spec.out_channels // g, c // g
    y = np.zeros((n, g, og, oh * ow))
    w = weight.astype(np.float64).reshape(g, og, ig, *spec.kernel)
    for i in range(spec.kernel[0]):
        for j in range(spec.kernel[1]):
            patch = xp[:, :, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw].reshape(n, g, ig, oh * ow)
            y += np.matmul(w[None, :, :, :, i, j], patch)      # BLAS, one tap at a time, per group
    y = y.reshape(n, spec.out_channels, oh, ow)
    if bias is not None:
        y += bias.astype(np.float64)[None, :, None, None]
    if spec.quant_pre is not None:
        y = spec.quant_pre.fake_np(y).astype(np.float64)
    if residual is not None:
        y += residual
    if spec.clip_lo is not None:
        y = np.maximum(y, spec.clip_lo)
    if spec.clip_hi is not None:
        y = np.minimum(y, spec.clip_hi)
    y = activation_np(y, spec.act)
    return spec.quant.fake_np(y).astype(np.float64) if spec.quant is not None else y


def quant_step(spec: ConvSpec) -> float:
    """How far a correct kernel's output may land from the float64 reference where a fake-quant
    rounds: a value within rounding error of a rounding boundary goes either way, one step of the
    output's grid (plus the steps of a quantization before the residual add)."""
    return (spec.quant.scale if spec.quant is not None else 0.0) + \
        (spec.quant_pre.scale if spec.quant_pre is not None else 0.0)


def schedule_tail(sch, conv_block, reduce_loop, spec: ConvSpec, pad_outer: int) -> None:
    """The last steps every scheduled conv shares: split off the accumulator's init (after
    vectorize/parallel, a TVM 0.27 trap) and vectorize it; parallelize and vectorize the padding."""
    init = sch.decompose_reduction(conv_block, reduce_loop)
    sch.vectorize(sch.get_loops(init)[-1])
    if any(spec.padding):
        pl = sch.get_loops(sch.get_sblock("data_pad"))
        sch.parallel(sch.fuse(*pl[:pad_outer]))
        sch.vectorize(pl[-1])


def divisors_in(n: int, lo: int, hi: int) -> list[int]:
    return [d for d in range(lo, hi + 1) if n % d == 0]
