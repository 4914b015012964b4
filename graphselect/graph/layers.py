"""LayerGraph: the layout-relevant view of a Relax module.

Each layer is one of
- ``conv``: a conv2d with constant weights plus the epilogue chain it absorbs (bias add,
  residual add, clamp such as ReLU/ReLU6), one node with one set of candidates;
- ``agnostic``: an op that runs in any channel layout (elementwise, pooling, global mean,
  channel concat), so the solver picks its layout;
- ``fixed``: anything else, run as imported in plain NCHW (reshape, gemm, softmax, ...);
- ``input`` / ``output``: the function's parameters (``input``, ``input1``, ...) and its result
  (one ``output`` layer whose inputs are the returned tensors, in order), all in NCHW.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from ..errors import UnsupportedModel
from . import layouts


# Activations a conv can absorb after its clamp: x*sigmoid(x), x*clip(x+3, 0, 6)/6, sigmoid(x).
ACTIVATIONS = ("silu", "hardswish", "sigmoid")
FAKE_QUANT = "graphselect.fake_quant"   # the op of a layer made of a QDQ pair (quantize, then dequantize)


@dataclass(frozen=True)
class Quant:
    """Per-tensor affine quantization of an activation, as a QDQ model's QuantizeLinear ->
    DequantizeLinear pair applies it: ``(clip(round(x / scale) + zero_point, qmin, qmax) -
    zero_point) * scale`` (round half to even), a value on the integer grid, kept in float32."""
    scale: float
    zero_point: int
    dtype: str                            # uint8 | int8

    @property
    def qmin(self) -> int:
        return 0 if self.dtype == "uint8" else -128

    @property
    def qmax(self) -> int:
        return 255 if self.dtype == "uint8" else 127

    @property
    def key(self) -> str:
        """What a kernel's cost depends on: the type, not the scale or zero point (so the layers of
        one shape share their measurements, as float layers do; each is built with its own)."""
        return f"{self.dtype[0]}8"

    def quantize_np(self, x: np.ndarray) -> np.ndarray:
        """The integers (as float32) ``x`` maps to, in float32 arithmetic as the kernels compute it."""
        q = np.rint(np.asarray(x, np.float32) / np.float32(self.scale)) + np.float32(self.zero_point)
        return np.clip(q, self.qmin, self.qmax).astype(np.float32)

    def fake_np(self, x: np.ndarray) -> np.ndarray:
        """quantize then dequantize (float32)."""
        return ((self.quantize_np(x) - np.float32(self.zero_point)) * np.float32(self.scale)).astype(np.float32)


def int8_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 ``q``, per-output-channel scales ``s``) with ``w == s * q`` and ``q`` in [-127, 127],
    or None when ``w`` is not on such a grid. The weights of a QDQ model's conv are dequantized
    int8 (symmetric, as onnxruntime's quantizer writes them: the largest magnitude is 127 steps),
    so ``s = max|w| / 127`` recovers the integers exactly; any other weights fail the check."""
    w = np.asarray(w, np.float32)
    flat = w.reshape(w.shape[0], -1)
    amax = np.abs(flat).max(axis=1)
    s = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    q = np.rint(flat / s[:, None])
    if np.abs(q).max(initial=0) > 127:
        return None
    err = np.abs(q * s[:, None] - flat).max(axis=1)
    return (q.reshape(w.shape).astype(np.int8), s) if bool(np.all(err <= amax * 2.0 ** -20)) else None


@dataclass(frozen=True)
class ConvSpec:
    """One conv workload including its fused epilogue: what a candidate is measured on."""
    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]   # top, left, bottom, right
    groups: int = 1
    bias: bool = False
    residual: bool = False
    clip_lo: float | None = None          # ReLU is clip_lo=0
    clip_hi: float | None = None
    act: str | None = None                # applied after the clamp: one of ACTIVATIONS
    dilation: tuple[int, int] = (1, 1)
    # QDQ models: ``quant_pre`` fake-quantizes conv + bias before the residual add, ``quant`` the
    # result (last); ``qdq`` is the input's quantization when the input and the weights are both on
    # an int8 grid, so the layer can be computed in integers (the int8 families)
    quant_pre: Quant | None = None
    quant: Quant | None = None
    qdq: Quant | None = None

    @property
    def dilated(self) -> bool:
        return self.dilation != (1, 1)

    @property
    def extent(self) -> tuple[int, int]:
        """The kernel's reach over the input, dilation included."""
        return ((self.kernel[0] - 1) * self.dilation[0] + 1, (self.kernel[1] - 1) * self.dilation[1] + 1)

    @property
    def out_h(self) -> int:
        return (self.height + self.padding[0] + self.padding[2] - self.extent[0]) // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        return (self.width + self.padding[1] + self.padding[3] - self.extent[1]) // self.stride[1] + 1

    @property
    def in_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.in_channels, self.height, self.width)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, self.out_h, self.out_w)

    def bare(self) -> "ConvSpec":
        """The same convolution without its epilogue."""
        return dataclasses.replace(self, bias=False, residual=False, clip_lo=None, clip_hi=None, act=None,
                                   quant_pre=None, quant=None)

    @property
    def depthwise(self) -> bool:
        """One input and one output channel per group (groups == channels, multiplier 1)."""
        return self.groups > 1 and self.groups == self.in_channels == self.out_channels

    @property
    def padded_input_bytes(self) -> int:
        """The padded copy of the input a kernel materialises (0 without padding)."""
        if not any(self.padding):
            return 0
        return 4 * self.batch * self.in_channels * (self.height + self.padding[0] + self.padding[2]) \
            * (self.width + self.padding[1] + self.padding[3])

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.out_channels * self.out_h * self.out_w * \
            (self.in_channels // self.groups) * self.kernel[0] * self.kernel[1]

    @property
    def epilogue(self) -> str:
        parts = (["bias"] if self.bias else []) + ([f"q{self.quant_pre.key}"] if self.quant_pre else []) \
            + (["res"] if self.residual else [])
        if self.clip_lo is not None or self.clip_hi is not None:
            if self.clip_lo == 0 and self.clip_hi is None:
                parts.append("relu")
            else:
                parts.append(f"clip({self.clip_lo},{self.clip_hi})")
        if self.act is not None:
            parts.append(self.act)
        if self.quant is not None:
            parts.append(f"q{self.quant.key}")
        return "+".join(parts) or "none"

    @property
    def key(self) -> str:
        """Workload key for the record store: every field that changes the kernel."""
        return (f"conv2d n{self.batch} c{self.in_channels} h{self.height} w{self.width} "
                f"o{self.out_channels} k{self.kernel[0]}x{self.kernel[1]} s{self.stride[0]}x{self.stride[1]} "
                f"p{','.join(map(str, self.padding))} g{self.groups}"
                + (f" d{self.dilation[0]}x{self.dilation[1]}" if self.dilated else "")
                + (f" in={self.qdq.key}" if self.qdq else "") + f" epi={self.epilogue}")

    def describe(self) -> str:
        g = "" if self.groups == 1 else (" dw" if self.depthwise else f" g{self.groups}")
        g += f" dil{self.dilation[0]}" if self.dilated else ""
        return (f"{self.in_channels}->{self.out_channels} {self.kernel[0]}x{self.kernel[1]}/{self.stride[0]}{g} "
                f"{self.height}x{self.width}")


@dataclass(frozen=True, eq=False)
class Layer:
    name: str
    kind: str                          # conv | agnostic | fixed | input | output
    op: str                            # relax op name ("relax.nn.relu"), "conv2d", "input", "output"
    inputs: tuple[str, ...]            # producer layer per input port
    out_shape: tuple[int, ...] | None  # None when the value is not a single tensor
    layouts: tuple[str, ...] = (layouts.NCHW,)   # layouts this layer may run in (agnostic ops)
    conv: ConvSpec | None = None
    weight: np.ndarray | None = None   # OIHW float32 (BN already folded)
    bias: np.ndarray | None = None     # (O,)
    binding: int = -1                  # index of the binding where the layer is emitted
    absorbed: tuple[int, ...] = ()     # bindings folded into this layer (conv epilogues)
    onnx_name: str = ""
    quant: Quant | None = None         # a FAKE_QUANT layer's quantization

    @property
    def sparsity(self) -> float:
        if self.weight is None:
            return 0.0
        return float(np.count_nonzero(self.weight == 0)) / self.weight.size


@dataclass(eq=False)
class LayerGraph:
    layers: dict[str, Layer]           # in topological order
    graph: nx.DiGraph                  # edges producer -> consumer, attribute ports=[...]
    func: object = None                # the Relax function the layers came from
    output: str = ""                   # name of the output layer
    extra: dict = field(default_factory=dict)

    @property
    def convs(self) -> list[Layer]:
        return [l for l in self.layers.values() if l.kind == "conv"]

    def edges(self):
        """(producer, consumer, port) for every tensor edge."""
        for name, layer in self.layers.items():
            for port, src in enumerate(layer.inputs):
                yield src, name, port


# ---------------------------------------------------------------------------------------------
# extraction from Relax

BLOCK_CANDIDATES = (8, 16, 32, 64)
_UNARY = {"relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.nn.silu"}
_BINARY = {"relax.add", "relax.multiply", "relax.subtract", "relax.divide", "relax.maximum", "relax.minimum"}
_CLAMP_TIR = re.compile(r"^(maximum|minimum)\d*$")


def _rx():
    from tvm import relax
    return relax


def _shape(e) -> tuple[int, ...] | None:
    ty = getattr(e, "ty", None) or getattr(e, "struct_info", None)
    shape = getattr(ty, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        return None


def _is_const(e) -> bool:
    return type(e).__name__ in ("GenericConst", "Constant")


def const_value(e) -> np.ndarray:
    v = getattr(e, "value", None)
    if v is None:
        v = e.data
    return v.numpy()


def _op_name(call) -> str | None:
    op = getattr(call, "op", None)
    return getattr(op, "name", None) if op is not None and type(op).__name__ == "Op" else None


def _vars_in(e, rx):
    if isinstance(e, rx.Var):
        return [e]
    if isinstance(e, rx.Call):
        return [v for a in e.args for v in _vars_in(a, rx)]
    if isinstance(e, rx.Tuple):
        return [v for a in e.fields for v in _vars_in(a, rx)]
    if isinstance(e, rx.TupleGetItem):
        return _vars_in(e.tuple_value, rx)
    return []


def _scalar_const(e, value: float | None = None) -> bool:
    return _is_const(e) and const_value(e).size == 1 and \
        (value is None or float(const_value(e).reshape(())) == value)


def clamp_of(call, rx) -> tuple[str, float] | None:
    """("max", c) / ("min", c) / ("relu", 0) / ("clip", (lo, hi)) if ``call`` clamps by a scalar."""
    name = _op_name(call)
    if name == "relax.nn.relu":
        return ("max", 0.0)
    if name == "relax.clip":
        lo, hi = (float(getattr(a, "value", a)) for a in call.args[1:3])
        return ("clip", (lo, hi))
    if name in ("relax.maximum", "relax.minimum") and len(call.args) == 2 and _scalar_const(call.args[1]):
        return (name.split(".")[1][:3], float(const_value(call.args[1]).reshape(())))
    if name == "relax.call_tir":
        gv, args = call.args[0], call.args[1]
        if _CLAMP_TIR.match(getattr(gv, "name_hint", "")) and isinstance(args, rx.Tuple) and len(args.fields) == 2 \
                and _scalar_const(args.fields[1]):
            return (gv.name_hint[:3], float(const_value(args.fields[1]).reshape(())))
    return None


def _activation_at(cur, us, bindings, users, out_vars, rx):
    """(act, bindings it spans) when the values bound at ``us`` compute an activation of ``cur``
    that nothing else reads: sigmoid(x), x*sigmoid(x) (SiLU as exported: Sigmoid then Mul) or
    x*clip(x+3, 0, 6)/6 (how the ONNX importer writes HardSwish)."""
    def only_user(var):
        u = users.get(var, [])
        return u[0] if len(u) == 1 and var not in out_vars else None

    def is_mul_of(j, a, b):
        v = bindings[j].value
        return _op_name(v) == "relax.multiply" and len(v.args) == 2 and (
            (v.args[0].same_as(a) and v.args[1].same_as(b)) or (v.args[0].same_as(b) and v.args[1].same_as(a)))

    if len(us) == 1:
        v = bindings[us[0]].value
        if _op_name(v) == "relax.sigmoid" and v.args[0].same_as(cur):
            return "sigmoid", [us[0]]
        return None
    if len(us) != 2:
        return None
    for j, k in (us, us[::-1]):
        v = bindings[j].value
        name = _op_name(v)
        if name == "relax.sigmoid" and v.args[0].same_as(cur) and only_user(bindings[j].var) == k \
                and is_mul_of(k, cur, bindings[j].var):
            return "silu", [j, k]
        if name == "relax.add" and v.args[0].same_as(cur) and _scalar_const(v.args[1], 3.0):
            j2 = only_user(bindings[j].var)
            if j2 is None:
                continue
            cl = clamp_of(bindings[j2].value, rx)
            if cl != ("clip", (0.0, 6.0)):
                continue
            j3 = only_user(bindings[j2].var)
            if j3 is None:
                continue
            d = bindings[j3].value
            if _op_name(d) != "relax.divide" or not d.args[0].same_as(bindings[j2].var) \
                    or not _scalar_const(d.args[1], 6.0) or only_user(bindings[j3].var) != k \
                    or not is_mul_of(k, cur, bindings[j3].var):
                continue
            return "hardswish", [j, j2, j3, k]
    return None


def _fake_quant(j: int, bindings, users, out_vars) -> tuple[Quant, int] | None:
    """(its quantization, the dequantize's binding) when binding ``j`` quantizes by scalar
    constants and its only reader dequantizes by the same ones: a QDQ pair, one fake-quant."""
    v = bindings[j].value
    if _op_name(v) != "relax.quantize" or not all(_scalar_const(a) for a in v.args[1:3]):
        return None
    dtype = str(v.attrs.out_dtype)
    us = users.get(bindings[j].var, [])
    if dtype not in ("uint8", "int8") or len(us) != 1 or bindings[j].var in out_vars:
        return None
    d = bindings[us[0]].value
    if _op_name(d) != "relax.dequantize" or not d.args[0].same_as(bindings[j].var) \
            or not all(_scalar_const(a) for a in d.args[1:3]) or str(d.attrs.out_dtype) != "float32":
        return None
    s, z = (float(const_value(a).reshape(())) for a in v.args[1:3])
    if (float(const_value(d.args[1]).reshape(())), float(const_value(d.args[2]).reshape(()))) != (s, z) or s <= 0:
        return None
    return Quant(float(np.float32(s)), int(z), dtype), us[0]


def _residual_of(v, cur, rx):
    """The other operand when ``v`` adds a same-shaped tensor to ``cur`` (a residual add)."""
    if _op_name(v) != "relax.add" or not all(isinstance(x, rx.Var) for x in v.args) \
            or _shape(v.args[0]) != _shape(v.args[1]) or v.args[0].same_as(v.args[1]):
        return None
    if v.args[0].same_as(cur):
        return v.args[1]
    return v.args[0] if v.args[1].same_as(cur) else None


def _channel_const(e, channels: int) -> bool:
    return _is_const(e) and (const_value(e).size == 1 or _shape(e) in ((1, channels, 1, 1), (channels, 1, 1)))


# Reductions that stay in a blocked layout when they reduce over H and W only (keepdims): the
# global pooling of a squeeze-and-excitation block or a head, however the exporter wrote it
# (GlobalAveragePool; ReduceMean/Sum/Max/Min with axes [2, 3] or counted from the end, [-2, -1]).
SPATIAL_REDUCTIONS = ("relax.mean", "relax.sum", "relax.max", "relax.min")


def spatial_axes(call) -> bool:
    """Whether a 4-D reduction ``call`` reduces over exactly the two spatial axes."""
    axis = call.attrs.axis
    return axis is not None and sorted(int(a) % 4 for a in axis) == [2, 3]


def _agnostic_layouts(call, in_shapes, out_shape, rx) -> tuple[str, ...]:
    """The layouts an op can run in without changing its meaning (NCHW always)."""
    if out_shape is None or len(out_shape) != 4 or not in_shapes or any(s is None or len(s) != 4 for s in in_shapes):
        return (layouts.NCHW,)
    name = _op_name(call)
    chans = [s[1] for s in in_shapes] + [out_shape[1]]
    ok = False
    if name in _UNARY or clamp_of(call, rx) is not None:
        ok = True
    elif name in _BINARY:
        tensors = [a for a in call.args if isinstance(a, rx.Var)]
        consts = [a for a in call.args if not isinstance(a, rx.Var)]
        # a per-channel scale (N, C, 1, 1), as squeeze-and-excitation multiplies by, broadcasts in
        # any channel layout too
        n, c = out_shape[:2]
        ok = all(_shape(a) in (out_shape, (n, c, 1, 1)) for a in tensors) and \
            any(_shape(a) == out_shape for a in tensors) and all(_channel_const(c_, c) for c_ in consts)
    elif name == "relax.quantize":        # a fake-quant pair by scalars (the caller checked)
        ok = True
    elif name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        ok = call.attrs.layout == "NCHW" and call.attrs.out_layout == "NCHW"
    elif name in SPATIAL_REDUCTIONS:
        ok = spatial_axes(call) and bool(call.attrs.keepdims)
    elif name == "relax.concat":
        ok = int(call.attrs.axis) in (1, -3)
    if not ok:
        return (layouts.NCHW,)
    return (layouts.NCHW,) + tuple(layouts.blocked(b) for b in BLOCK_CANDIDATES if all(c % b == 0 for c in chans))


def extract(mod, *, onnx_conv_names: tuple[str, ...] = ()) -> LayerGraph:
    """Build the LayerGraph of ``mod["main"]`` (a single dataflow block, as ``from_onnx`` emits)."""
    rx = _rx()
    func = mod["main"]
    blocks = func.body.blocks
    if len(blocks) != 1:
        raise UnsupportedModel("the imported module has control flow or several blocks; "
                               "graphselect supports feed-forward CNNs")
    bindings = list(blocks[0].bindings)
    ret = func.body.body
    # several outputs: the importer binds their tuple in the block and returns that variable
    tuple_at = next((i for i, b in enumerate(bindings) if b.var.same_as(ret) and isinstance(b.value, rx.Tuple)), None)
    if tuple_at is not None:
        ret = bindings[tuple_at].value
        bindings = bindings[:tuple_at] + bindings[tuple_at + 1:]
        if tuple_at != len(bindings):
            raise UnsupportedModel("the imported module uses its output tuple inside the graph")
    out_vars = set(_vars_in(ret, rx))

    users: dict = {}
    for i, b in enumerate(bindings):
        for v in _vars_in(b.value, rx):
            users.setdefault(v, []).append(i)

    layers: dict[str, Layer] = {}
    producer: dict = {}          # relax var -> layer name
    for k, param in enumerate(func.params):
        name = input_layer(k)
        layers[name] = Layer(name, "input", "input", (), _shape(param))
        producer[param] = name

    absorbed: set[int] = set()
    chains: dict[int, dict] = {}  # end binding -> chain description
    for i, b in enumerate(bindings):
        e = b.value
        if _op_name(e) != "relax.nn.conv2d" or not _is_const(e.args[1]):
            continue
        a = e.attrs
        ishape, wshape = _shape(e.args[0]), _shape(e.args[1])
        if ishape is None or len(ishape) != 4 or a.data_layout != "NCHW" or a.kernel_layout != "OIHW" \
                or a.out_layout != "NCHW":
            continue
        O = wshape[0]
        ch = {"conv": i, "bias": None, "res": None, "lo": None, "hi": None, "act": None, "end": i,
              "qpre": None, "quant": None}
        cur = b.var
        stage = 0
        while True:
            us = users.get(cur, [])
            if cur in out_vars or any(u in absorbed for u in us):
                break
            fq = _fake_quant(us[0], bindings, users, out_vars) if len(us) == 1 else None
            if fq is not None and bindings[us[0]].value.args[0].same_as(cur):
                q, d = fq
                dvar = bindings[d].var
                nxt = users.get(dvar, [])
                absorbed.update((us[0], d))
                ch["end"] = d
                cur = dvar
                if stage < 2 and len(nxt) == 1 and dvar not in out_vars and _residual_of(bindings[nxt[0]].value, cur, rx) \
                        is not None:
                    ch["qpre"] = q                 # quantized before the residual add (a QDQ ResNet)
                    stage = 1
                    continue
                ch["quant"] = q
                break
            act = _activation_at(cur, us, bindings, users, out_vars, rx) if stage < 4 else None
            if act is not None:
                ch["act"], taken = act
                absorbed.update(taken)
                ch["end"] = taken[-1]
                cur = bindings[taken[-1]].var
                stage = 4
                break
            if len(us) != 1:
                break
            j = us[0]
            v = bindings[j].value
            name = _op_name(v)
            cl = clamp_of(v, rx)
            if stage < 1 and name == "relax.add" and v.args[0].same_as(cur) and _is_const(v.args[1]) \
                    and const_value(v.args[1]).size == O and _shape(v.args[1]) in ((1, O, 1, 1), (O, 1, 1)):
                ch["bias"] = const_value(v.args[1]).reshape(O).astype("float32")
                stage = 1
            elif stage < 2 and (res := _residual_of(v, cur, rx)) is not None:
                ch["res"] = res
                stage = 2
            elif stage < 4 and cl is not None and (v.args[0].same_as(cur) if name != "relax.call_tir"
                                                   else v.args[1].fields[0].same_as(cur)):
                kind, val = cl
                lo, hi = ch["lo"], ch["hi"]
                if kind == "clip":
                    lo = val[0] if lo is None else max(lo, val[0])
                    hi = val[1] if hi is None else min(hi, val[1])
                elif kind == "max":
                    lo = val if lo is None else max(lo, val)
                else:
                    hi = val if hi is None else min(hi, val)
                ch["lo"], ch["hi"] = lo, hi
                stage = 3
            else:
                break
            absorbed.add(j)
            ch["end"] = j
            cur = bindings[j].var
        chains[ch["end"]] = ch
        absorbed.add(i)

    # convs are numbered in the importer's order, which is the ONNX node order (a conv whose
    # epilogue waits for a residual is emitted later, at the end of its chain)
    rank = {ch["conv"]: k for k, ch in enumerate(sorted(chains.values(), key=lambda c: c["conv"]))}
    for i, b in enumerate(bindings):
        e = b.value
        out_shape = _shape(b.var)
        if i in chains:
            ch = chains[i]
            conv = bindings[ch["conv"]].value
            a = conv.attrs
            w = const_value(conv.args[1]).astype("float32")
            ishape = _shape(conv.args[0])
            pad = tuple(int(p) for p in a.padding)
            if len(pad) == 2:
                pad = (pad[0], pad[1], pad[0], pad[1])
            spec = ConvSpec(batch=ishape[0], in_channels=ishape[1], height=ishape[2], width=ishape[3],
                            out_channels=w.shape[0], kernel=(w.shape[2], w.shape[3]),
                            stride=tuple(int(s) for s in a.strides), padding=pad, groups=int(a.groups),
                            bias=ch["bias"] is not None, residual=ch["res"] is not None,
                            clip_lo=ch["lo"], clip_hi=ch["hi"], act=ch["act"],
                            dilation=tuple(int(d) for d in a.dilation), quant_pre=ch["qpre"], quant=ch["quant"])
            src = layers[producer[conv.args[0]]]
            q_in = src.quant if src.op == FAKE_QUANT else (src.conv.quant if src.kind == "conv" else None)
            if q_in is not None and spec.groups == 1 and int8_weights(w) is not None:
                spec = dataclasses.replace(spec, qdq=q_in)
            ins = [producer[conv.args[0]]] + ([producer[ch["res"]]] if ch["res"] is not None else [])
            k = rank[ch["conv"]]
            name = f"conv{k}"
            onnx_name = onnx_conv_names[k] if k < len(onnx_conv_names) else ""
            layers[name] = Layer(name, "conv", "conv2d", tuple(ins), spec.out_shape, conv=spec, weight=w,
                                 bias=ch["bias"], binding=i,
                                 absorbed=tuple(sorted(j for j in range(ch["conv"], i + 1)
                                                       if j in absorbed and j != i)),
                                 onnx_name=onnx_name)
            producer[b.var] = name
            continue
        if i in absorbed:
            continue
        fq = _fake_quant(i, bindings, users, out_vars)
        if fq is not None and fq[1] not in absorbed:
            q, d = fq
            x = e.args[0]
            if not isinstance(x, rx.Var) or x not in producer:
                raise UnsupportedModel(f"value {getattr(x, 'name', x)} is used before it is defined")
            shp = _shape(x)
            lay = _agnostic_layouts(e, [shp], shp, rx)
            name = f"fake_quant{i}"
            layers[name] = Layer(name, "agnostic" if len(lay) > 1 else "fixed", FAKE_QUANT, (producer[x],),
                                 _shape(bindings[d].var), layouts=lay, binding=d, absorbed=(i,), quant=q)
            producer[bindings[d].var] = name
            absorbed.add(d)
            continue
        vin = []
        for v in _vars_in(e, rx):
            if v not in vin:
                vin.append(v)
        for v in vin:
            if v not in producer:
                raise UnsupportedModel(f"value {v.name} is used before it is defined")
        in_shapes = [_shape(v) for v in vin]
        lay = _agnostic_layouts(e, in_shapes, out_shape, rx) if isinstance(e, rx.Call) else (layouts.NCHW,)
        name = f"{(_op_name(e) or type(e).__name__).split('.')[-1]}{i}"
        if _op_name(e) == "relax.call_tir":
            name = f"{e.args[0].name_hint}{i}"
        layers[name] = Layer(name, "agnostic" if len(lay) > 1 else "fixed", _op_name(e) or type(e).__name__,
                             tuple(producer[v] for v in vin), out_shape, layouts=lay, binding=i)
        producer[b.var] = name

    constants: dict[str, object] = {}
    if isinstance(ret, rx.Var):
        rets = [ret]
    elif isinstance(ret, rx.Tuple) and ret.fields and all(isinstance(f, rx.Var) or _is_const(f) for f in ret.fields):
        rets = []
        for k, f in enumerate(ret.fields):
            if _is_const(f):
                # an output the importer computed ahead of time (BN's running statistics): a source
                # layer whose value is that constant
                v = rx.Var(f"const_output{k}", f.ty)
                name = f"const_output{k}"
                layers[name] = Layer(name, "input", "constant", (), _shape(f))
                producer[v] = name
                constants[name] = f
                f = v
            rets.append(f)
    else:
        raise UnsupportedModel("the imported module returns a nested or computed value; graphselect supports "
                               "models whose outputs are tensors")
    for v in rets:
        if v not in producer:
            raise UnsupportedModel(f"output {v.name} is not computed by the model")
        if _shape(v) is None:
            raise UnsupportedModel(f"output {v.name} has no static tensor shape after import")
    layers["output"] = Layer("output", "output", "output", tuple(producer[v] for v in rets),
                             _shape(ret) if len(rets) == 1 else None)

    g = nx.DiGraph()
    g.add_nodes_from(layers)
    for name, layer in layers.items():
        for port, src in enumerate(layer.inputs):
            if g.has_edge(src, name):
                g.edges[src, name]["ports"].append(port)
            else:
                g.add_edge(src, name, ports=[port])
    return LayerGraph(layers=layers, graph=g, func=func, output="output", extra={"constants": constants})


def input_layer(k: int) -> str:
    """The name of the layer of the function's ``k``-th parameter."""
    return "input" if k == 0 else f"input{k}"


def ops_summary(lg: LayerGraph) -> dict[str, int]:
    out: dict[str, int] = {}
    for l in lg.layers.values():
        out[l.op] = out.get(l.op, 0) + 1
    return out


def weight_megabytes(lg: LayerGraph) -> float:
    return sum(l.weight.nbytes for l in lg.convs if l.weight is not None) / 2**20


