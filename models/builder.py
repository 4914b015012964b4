"""A small ONNX graph builder shared by every model in the zoo.

:class:`GraphBuilder` appends nodes and float32 initializers to an ONNX graph
the way a PyTorch exporter lays them out before any folding: every ``Conv`` is
its own node, followed by a separate ``BatchNormalization`` node (where the
architecture has one), followed by the activation.

Weights come from ``numpy.random.default_rng(seed)`` so that a (model, seed)
pair always produces byte-identical models.  Scaling keeps activations of
order one through the network:

* conv weights: He-normal, ``std = sqrt(2 / fan_in)`` (``fan_in = cin/group * kh * kw``)
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
             group: int = 1) -> str:
        """Conv2d with He-normal weights; ``pad`` defaults to ``k // 2`` ("same")."""
        cin = self.channels[x]
        kh, kw = (k, k) if isinstance(k, int) else k
        if pad is None:
            pad = kh // 2
        if cin % group or cout % group:
            raise ValueError(f"{name}: channels {cin}->{cout} not divisible by group {group}")
        fan_in = cin // group * kh * kw
        w = self.rng.standard_normal((cout, cin // group, kh, kw), dtype=np.float32)
        w *= np.float32(np.sqrt(2.0 / fan_in))
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
                pad: int | None = None, bias: bool = False,
                gamma_scale: float = 1.0) -> str:
        """Conv -> BatchNormalization [-> Relu | Clip(0, 6)] with the given node names."""
        y = self.bn(self.conv(x, conv, cout, k, stride=stride, pad=pad, bias=bias),
                    bn, gamma_scale=gamma_scale)
        if act is None:
            return y
        if act_op == "Relu":
            return self.relu(y, act)
        if act_op == "Clip":
            return self.clip(y, act)
        raise ValueError(f"unknown activation {act_op!r}")

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

    def finish(self, x: str, *, doc: str = "") -> onnx.ModelProto:
        """Rename tensor ``x`` (a ``[batch, features]`` tensor) to "output" and
        return the checked model (opset 17, ir_version 8)."""
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
            OUTPUT_NAME, TensorProto.FLOAT, [self.batch, self.channels[x]])
        graph = helper.make_graph(self.nodes, self.graph_name, [inp], [out],
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="graphselect.models",
                                  doc_string=doc)
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model
