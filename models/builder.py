"""A small ONNX graph builder shared by every model in the zoo.

:class:`GraphBuilder` appends nodes and float32 initializers to an ONNX graph
the way a PyTorch exporter lays them out before any folding: every ``Conv`` is
its own node, followed by a separate ``BatchNormalization`` node (where the
architecture has one), followed by the activation.

Weights come from ``numpy.random.default_rng(seed)`` so that a (model, seed)
pair always produces byte-identical models.  Scaling keeps activations of
order one through the network:

* conv weights: He-normal, ``std = sqrt(2 / fan_in)`` (``fan_in = cin/group * kh * kw``);
  a conv fed by another activation uses ``std = sqrt(gain / fan_in)`` with
  ``gain = 1 / E[act(z)^2]``, ``z ~ N(0, 1)`` (:data:`GAIN`; 2 is ReLU's), so that
  SiLU/HardSwish networks and squeeze-and-excitation gates do not shrink the
  signal layer after layer
* linear (Gemm) weights: ``std = sqrt(1 / fan_in)`` (classifier, no ReLU after)
* biases: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (PyTorch's default)
* BN: ``gamma ~ U(0.7, 1.3) * gamma_scale``, ``beta ~ N(0, 0.1)``,
  ``running_mean ~ N(0, 0.1)``, ``running_var ~ U(0.75, 1.25)`` (always > 0).
  Residual branches pass a small ``gamma_scale`` to their last BN (as trained
  ResNets have) so the residual stream does not double in variance per block.

The builder tracks the channel count of every tensor it produces, so callers
only give output channels.  Node names are the caller's readable names
("layer1.0.conv1"); each node's output tensor has the node's name, and its
parameters are ``<name>.weight``, ``<name>.bias``, ``<name>.running_mean``...

Shape arithmetic is written the way PyTorch's TorchScript exporter writes it
for ``x.size()``/``x.view(...)`` (``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape``), with its constants as int64 initializers, so that the frontend's
folding of such chains is exercised.  Those are the only non-float32
initializers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
INPUT_NAME = "input"
OUTPUT_NAME = "output"
BN_EPSILON = 1e-5

# 1 / E[act(z)^2] for z ~ N(0, 1): the conv weight gain that keeps the variance of a signal
# fed through that activation (He's 2 for ReLU). "SE" is a SiLU output scaled by a Sigmoid
# gate: 1 / E[sigmoid(z)^2] would be 3.4, 2 keeps EfficientNet-B0's residual stream near 1.
GAIN = {"Relu": 2.0, "Clip": 2.0, "SiLU": 2.8, "HardSwish": 3.0, "SE": 2.8 * 2.0}


class GraphBuilder:
    """Appends conv/bn/relu/pool/... nodes and their initializers.

    Every method takes the input tensor name(s) and the new node's name, and
    returns the name of the tensor it produced (equal to the node's name).
    """

    def __init__(self, graph_name: str, *, batch: int, image_size: int, seed: int,
                 in_channels: int = 3):
        if int(batch) < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if int(image_size) < 1:
            raise ValueError(f"image_size must be >= 1, got {image_size}")
        self.graph_name = graph_name
        self.batch = int(batch)
        self.image_size = int(image_size)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.channels: dict[str, int] = {INPUT_NAME: in_channels}
        self.in_channels = in_channels

    # ---------------------------------------------------------------- basics
    def _param(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(
            numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def _int64(self, name: str, values) -> str:
        """An int64 initializer (shape constants, indices, axes, split sizes)."""
        self.initializers.append(
            numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    def _node(self, op: str, inputs: Sequence[str], name: str, channels: int,
              **attrs) -> str:
        if name in self.channels:
            raise ValueError(f"duplicate node/tensor name {name!r}")
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        self.channels[name] = channels
        return name

    def _uniform_bias(self, n: int, fan_in: int) -> np.ndarray:
        bound = 1.0 / np.sqrt(fan_in)
        return self.rng.uniform(-bound, bound, size=n).astype(np.float32)

    # ---------------------------------------------------------------- layers
    def conv(self, x: str, name: str, cout: int, k: int | tuple[int, int], *,
             stride: int = 1, pad: int | None = None, bias: bool = False,
             group: int = 1, gain: float = 2.0) -> str:
        """Conv2d with ``N(0, gain / fan_in)`` weights (He-normal by default); ``pad``
        defaults to ``k // 2`` ("same")."""
        cin = self.channels[x]
        kh, kw = (k, k) if isinstance(k, int) else k
        if pad is None:
            pad = kh // 2
        if cin % group or cout % group:
            raise ValueError(f"{name}: channels {cin}->{cout} not divisible by group {group}")
        fan_in = cin // group * kh * kw
        w = self.rng.standard_normal((cout, cin // group, kh, kw), dtype=np.float32)
        w *= np.float32(np.sqrt(gain / fan_in))
        inputs = [x, self._param(f"{name}.weight", w)]
        if bias:
            inputs.append(self._param(f"{name}.bias", self._uniform_bias(cout, fan_in)))
        return self._node("Conv", inputs, name, cout,
                          kernel_shape=[kh, kw], strides=[stride, stride],
                          pads=[pad, pad, pad, pad], dilations=[1, 1], group=group)

    def bn(self, x: str, name: str, *, gamma_scale: float = 1.0) -> str:
        """Inference-mode BatchNormalization with random realistic statistics."""
        c = self.channels[x]
        rng = self.rng
        gamma = rng.uniform(0.7, 1.3, size=c) * gamma_scale
        beta = rng.normal(0.0, 0.1, size=c)
        mean = rng.normal(0.0, 0.1, size=c)
        var = rng.uniform(0.75, 1.25, size=c)
        inputs = [x,
                  self._param(f"{name}.weight", gamma),
                  self._param(f"{name}.bias", beta),
                  self._param(f"{name}.running_mean", mean),
                  self._param(f"{name}.running_var", var)]
        return self._node("BatchNormalization", inputs, name, c, epsilon=BN_EPSILON)

    def relu(self, x: str, name: str) -> str:
        return self._node("Relu", [x], name, self.channels[x])

    def clip(self, x: str, name: str, lo: float = 0.0, hi: float = 6.0) -> str:
        """Clip with min/max as scalar initializer inputs (opset >= 11), e.g. ReLU6."""
        lo_name = self._param(f"{name}.min", np.array(lo, dtype=np.float32))
        hi_name = self._param(f"{name}.max", np.array(hi, dtype=np.float32))
        return self._node("Clip", [x, lo_name, hi_name], name, self.channels[x])

    def conv_bn(self, x: str, cout: int, k: int, *, conv: str, bn: str,
                act: str | None = None, act_op: str = "Relu", stride: int = 1,
                pad: int | None = None, bias: bool = False, group: int = 1,
                gain: float = 2.0, gamma_scale: float = 1.0) -> str:
        """Conv -> BatchNormalization [-> activation] with the given node names.

        ``act_op``: "Relu", "Clip" (ReLU6), "SiLU" (Sigmoid then Mul, as exported
        at opset 17) or "HardSwish". ``gain``: see :data:`GAIN` (the activation
        that feeds this conv, not the one after it).
        """
        y = self.bn(self.conv(x, conv, cout, k, stride=stride, pad=pad, bias=bias,
                              group=group, gain=gain),
                    bn, gamma_scale=gamma_scale)
        if act is None:
            return y
        return self.activation(y, act, act_op)

    def activation(self, x: str, name: str, op: str) -> str:
        if op == "Relu":
            return self.relu(x, name)
        if op == "Clip":
            return self.clip(x, name)
        if op == "SiLU":
            return self.silu(x, name)
        if op == "HardSwish":
            return self.hardswish(x, name)
        raise ValueError(f"unknown activation {op!r}")

    def sigmoid(self, x: str, name: str) -> str:
        return self._node("Sigmoid", [x], name, self.channels[x])

    def silu(self, x: str, name: str) -> str:
        """SiLU as torch.onnx (TorchScript) writes it: ``Mul(x, Sigmoid(x))``."""
        return self.mul(x, self.sigmoid(x, f"{name}.sigmoid"), name)

    def hardswish(self, x: str, name: str) -> str:
        return self._node("HardSwish", [x], name, self.channels[x])

    def hardsigmoid(self, x: str, name: str) -> str:
        """``nn.Hardsigmoid`` as exported: relu6(x + 3) / 6."""
        return self._node("HardSigmoid", [x], name, self.channels[x],
                          alpha=1.0 / 6.0, beta=0.5)

    def mul(self, a: str, b: str, name: str) -> str:
        """Elementwise product; one side may be a broadcast ``[N, C, 1, 1]`` scale."""
        if self.channels[a] != self.channels[b]:
            raise ValueError(f"{name}: multiplying {self.channels[a]} and "
                             f"{self.channels[b]} channels")
        return self._node("Mul", [a, b], name, self.channels[a])

    def reduce_mean(self, x: str, name: str, *, keepdims: bool) -> str:
        """Mean over H and W (``x.mean((2, 3), keepdim=...)``); opset 17 takes axes as an attribute."""
        return self._node("ReduceMean", [x], name, self.channels[x], axes=[2, 3],
                          keepdims=int(keepdims))

    def squeeze_excitation(self, x: str, p: str, squeeze: int, *,
                           act_op: str = "SiLU") -> str:
        """torchvision's ``SqueezeExcitation``: GlobalAveragePool -> 1x1 conv (+bias) ->
        act -> 1x1 conv (+bias) -> Sigmoid, then ``scale * input`` broadcast over H, W."""
        c = self.channels[x]
        s = self.global_avgpool(x, f"{p}.avgpool")
        s = self.activation(self.conv(s, f"{p}.fc1", squeeze, 1, bias=True, gain=1.0),
                            f"{p}.activation", act_op)
        s = self.conv(s, f"{p}.fc2", c, 1, bias=True, gain=GAIN[act_op])
        return self.mul(self.sigmoid(s, f"{p}.scale_activation"), x, f"{p}.scale")

    # ------------------------------------------------------- channel plumbing
    def split(self, x: str, name: str, sizes: Sequence[int]) -> list[str]:
        """``x.chunk(n, dim=1)`` as one Split with the opset-13 ``split`` input; outputs are
        ``<name>.0``, ``<name>.1``, ... (torch 2.x's TorchScript exporter writes chunk as
        Slices with Shape-computed bounds instead: ``tests/data/torch_mobile.onnx`` has that)."""
        if sum(sizes) != self.channels[x]:
            raise ValueError(f"{name}: split sizes {list(sizes)} do not add up to "
                             f"{self.channels[x]} channels")
        outs = [f"{name}.{i}" for i in range(len(sizes))]
        for o in [name, *outs]:
            if o in self.channels:
                raise ValueError(f"duplicate node/tensor name {o!r}")
        self.nodes.append(helper.make_node(
            "Split", [x, self._int64(f"{name}.split", list(sizes))], outs, name=name, axis=1))
        self.channels[name] = 0
        self.channels.update(zip(outs, sizes))
        return outs

    def slice_channels(self, x: str, name: str, start: int, end: int) -> str:
        """``x[:, start:end]``: Slice with starts/ends/axes inputs."""
        if not 0 <= start < end <= self.channels[x]:
            raise ValueError(f"{name}: bad channel range {start}:{end} of {self.channels[x]}")
        inputs = [x, self._int64(f"{name}.starts", [start]), self._int64(f"{name}.ends", [end]),
                  self._int64(f"{name}.axes", [1])]
        return self._node("Slice", inputs, name, end - start)

    def _dim(self, x: str, name: str, i: int) -> str:
        """``x.size(i)`` as the TorchScript exporter writes it: Shape -> Gather(scalar index)."""
        shape = self._node("Shape", [x], f"{name}.shape", 0)
        return self._node("Gather", [shape, self._int64(f"{name}.index", i)], name, 0, axis=0)

    def _unsqueeze(self, s: str, name: str) -> str:
        return self._node("Unsqueeze", [s, self._int64(f"{name}.axes", [0])], name, 0)

    def channel_shuffle(self, x: str, p: str, groups: int) -> str:
        """torchvision's ``channel_shuffle`` as torch.onnx (TorchScript) exports it: Reshape to
        ``[N, groups, C // groups, H, W]`` -> Transpose(0, 2, 1, 3, 4) -> Reshape to
        ``[N, -1, H, W]``, both shapes computed from ``x.size()`` by Shape/Gather/Div/Unsqueeze/
        Concat chains."""
        c = self.channels[x]
        if c % groups:
            raise ValueError(f"{p}: {c} channels not divisible by {groups} groups")
        n, ch, h, w = (self._dim(x, f"{p}.size{i}", i) for i in range(4))
        per_group = self._node("Div", [ch, self._int64(f"{p}.groups", groups)],
                               f"{p}.channels_per_group", 0)
        shape5 = self._node("Concat", [
            self._unsqueeze(n, f"{p}.view1.n"), self._int64(f"{p}.view1.groups", [groups]),
            self._unsqueeze(per_group, f"{p}.view1.c"), self._unsqueeze(h, f"{p}.view1.h"),
            self._unsqueeze(w, f"{p}.view1.w")], f"{p}.view1.shape", 0, axis=0)
        y = self._node("Reshape", [x, shape5], f"{p}.view1", c)
        y = self._node("Transpose", [y], f"{p}.transpose", c, perm=[0, 2, 1, 3, 4])
        shape4 = self._node("Concat", [
            self._unsqueeze(n, f"{p}.view2.n"), self._int64(f"{p}.view2.c", [-1]),
            self._unsqueeze(h, f"{p}.view2.h"), self._unsqueeze(w, f"{p}.view2.w")],
            f"{p}.view2.shape", 0, axis=0)
        return self._node("Reshape", [y, shape4], f"{p}.view2", c)

    def maxpool(self, x: str, name: str, k: int, stride: int, pad: int = 0, *,
                ceil_mode: bool = False) -> str:
        return self._node("MaxPool", [x], name, self.channels[x],
                          kernel_shape=[k, k], strides=[stride, stride],
                          pads=[pad, pad, pad, pad], ceil_mode=int(ceil_mode))

    def avgpool(self, x: str, name: str, k: int, stride: int, pad: int = 0) -> str:
        return self._node("AveragePool", [x], name, self.channels[x],
                          kernel_shape=[k, k], strides=[stride, stride],
                          pads=[pad, pad, pad, pad], ceil_mode=0, count_include_pad=0)

    def global_avgpool(self, x: str, name: str) -> str:
        return self._node("GlobalAveragePool", [x], name, self.channels[x])

    def flatten(self, x: str, name: str) -> str:
        return self._node("Flatten", [x], name, self.channels[x], axis=1)

    def gemm(self, x: str, name: str, out_features: int) -> str:
        """Linear layer as exported by PyTorch: Gemm(x, W[out, in], b, transB=1)."""
        fan_in = self.channels[x]
        w = self.rng.standard_normal((out_features, fan_in), dtype=np.float32)
        w *= np.float32(np.sqrt(1.0 / fan_in))
        inputs = [x, self._param(f"{name}.weight", w),
                  self._param(f"{name}.bias", self._uniform_bias(out_features, fan_in))]
        return self._node("Gemm", inputs, name, out_features,
                          alpha=1.0, beta=1.0, transB=1)

    def add(self, a: str, b: str, name: str) -> str:
        if self.channels[a] != self.channels[b]:
            raise ValueError(f"{name}: adding {self.channels[a]} and {self.channels[b]} channels")
        return self._node("Add", [a, b], name, self.channels[a])

    def concat(self, xs: Sequence[str], name: str) -> str:
        """Channel concatenation (axis 1)."""
        return self._node("Concat", list(xs), name,
                          sum(self.channels[x] for x in xs), axis=1)

    def softmax(self, x: str, name: str) -> str:
        return self._node("Softmax", [x], name, self.channels[x], axis=1)

    # ---------------------------------------------------------------- finish
    def head(self, x: str, out_features: int, *, pool: str = "avgpool",
             flatten: str = "flatten", fc: str = "fc") -> str:
        """GlobalAveragePool -> Flatten -> Gemm, the classifier every model ends with."""
        return self.gemm(self.flatten(self.global_avgpool(x, pool), flatten), fc,
                         out_features)

    def finish(self, x: str, *, doc: str = "", out_shape: Sequence[int] | None = None) -> onnx.ModelProto:
        """Rename tensor ``x`` (a ``[batch, features]`` tensor, or ``out_shape``) to "output"
        and return the checked model (opset 17, ir_version 8)."""
        for node in self.nodes:
            for i, name in enumerate(node.output):
                if name == x:
                    node.output[i] = OUTPUT_NAME
            for i, name in enumerate(node.input):
                if name == x:
                    node.input[i] = OUTPUT_NAME
        inp = helper.make_tensor_value_info(
            INPUT_NAME, TensorProto.FLOAT,
            [self.batch, self.in_channels, self.image_size, self.image_size])
        out = helper.make_tensor_value_info(
            OUTPUT_NAME, TensorProto.FLOAT, list(out_shape) if out_shape else [self.batch, self.channels[x]])
        graph = helper.make_graph(self.nodes, self.graph_name, [inp], [out],
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="graphselect.models",
                                  doc_string=doc)
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model
