"""The model zoo: ONNX CNNs with deterministic random weights.

Every model is built with :class:`models.builder.GraphBuilder` (``onnx.helper``
only, no torch): opset 17, ir_version 8, input "input" ``[batch, 3, H, W]``
float32, output "output" ``[batch, classes]``.  Convs are followed by separate
``BatchNormalization`` nodes (unfolded, as PyTorch exports them) except in
SqueezeNet, which has none.  Node names follow torchvision's module names.

Every builder takes keyword-only ``batch``, ``image_size`` (None = the model's
default) and ``seed``; weights depend only on ``seed``, never on the input size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from .builder import GraphBuilder

Builder = Callable[..., onnx.ModelProto]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    summary: str
    default_image_size: int
    min_image_size: int
    convs: int  # number of Conv nodes (checked by the tests)

    def description(self) -> str:
        s = self.default_image_size
        return f"{self.summary}; input 1x3x{s}x{s}, {self.convs} conv"


ZOO: dict[str, Builder] = {}
INFO: dict[str, ModelInfo] = {}


def _register(summary: str, *, image_size: int, min_image_size: int, convs: int):
    """Register a ``fn(b: GraphBuilder) -> ModelProto`` body as a zoo builder."""

    def deco(body: Callable[[GraphBuilder], onnx.ModelProto]) -> Builder:
        name = body.__name__
        info = ModelInfo(name, summary, image_size, min_image_size, convs)

        @functools.wraps(body)
        def builder(*, batch: int = 1, image_size: int | None = None,
                    seed: int = 0) -> onnx.ModelProto:
            size = info.default_image_size if image_size is None else int(image_size)
            if size < info.min_image_size:
                raise ValueError(f"{name}: image_size {size} < minimum "
                                 f"{info.min_image_size}")
            b = GraphBuilder(name, batch=batch, image_size=size, seed=seed)
            return b.finish(body(b), doc=info.description())

        builder.info = info  # type: ignore[attr-defined]
        ZOO[name] = builder
        INFO[name] = info
        return builder

    return deco


# --------------------------------------------------------------------- ResNet
def _resnet_stem(b: GraphBuilder) -> str:
    x = b.conv_bn("input", 64, 7, stride=2, pad=3, conv="conv1", bn="bn1", act="relu")
    return b.maxpool(x, "maxpool", 3, 2, 1)


def _basic_block(b: GraphBuilder, x: str, p: str, planes: int, stride: int) -> str:
    y = b.conv_bn(x, planes, 3, stride=stride, conv=f"{p}.conv1", bn=f"{p}.bn1",
                  act=f"{p}.relu1")
    y = b.conv_bn(y, planes, 3, conv=f"{p}.conv2", bn=f"{p}.bn2", gamma_scale=0.2)
    return b.relu(b.add(y, _shortcut(b, x, p, planes, stride), f"{p}.add"), f"{p}.relu")


def _bottleneck(b: GraphBuilder, x: str, p: str, planes: int, stride: int) -> str:
    # torchvision's ResNet v1.5: the stride sits on the 3x3 conv.
    y = b.conv_bn(x, planes, 1, conv=f"{p}.conv1", bn=f"{p}.bn1", act=f"{p}.relu1")
    y = b.conv_bn(y, planes, 3, stride=stride, conv=f"{p}.conv2", bn=f"{p}.bn2",
                  act=f"{p}.relu2")
    y = b.conv_bn(y, planes * 4, 1, conv=f"{p}.conv3", bn=f"{p}.bn3", gamma_scale=0.2)
    return b.relu(b.add(y, _shortcut(b, x, p, planes * 4, stride), f"{p}.add"),
                  f"{p}.relu")


def _shortcut(b: GraphBuilder, x: str, p: str, cout: int, stride: int) -> str:
    """Identity, or 1x1 conv + BN ("downsample") when the shape changes."""
    if stride == 1 and b.channels[x] == cout:
        return x
    return b.conv_bn(x, cout, 1, stride=stride, pad=0, conv=f"{p}.downsample.0",
                     bn=f"{p}.downsample.1")


def _resnet(b: GraphBuilder, block, layers: list[int]) -> str:
    x = _resnet_stem(b)
    for i, (planes, n) in enumerate(zip([64, 128, 256, 512], layers)):
        for j in range(n):
            stride = 2 if (i > 0 and j == 0) else 1
            x = block(b, x, f"layer{i + 1}.{j}", planes, stride)
    return b.head(x, 1000)


@_register("ResNet-18 (basic blocks, unfolded conv+BN)", image_size=224,
           min_image_size=32, convs=20)
def resnet18(b: GraphBuilder) -> str:
    return _resnet(b, _basic_block, [2, 2, 2, 2])


@_register("ResNet-50 v1.5 (bottleneck blocks, unfolded conv+BN)", image_size=224,
           min_image_size=32, convs=53)
def resnet50(b: GraphBuilder) -> str:
    return _resnet(b, _bottleneck, [3, 4, 6, 3])


# ------------------------------------------------------------------------ VGG
_VGG11 = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


@_register("VGG-11 with BN, GAP + Gemm(512->1000) classifier", image_size=224,
           min_image_size=32, convs=8)
def vgg11(b: GraphBuilder) -> str:
    """VGG-11 (torchvision ``vgg11_bn`` features: conv3x3+BN+ReLU, 5 max-pools).

    Deviation from torchvision: the classifier is GlobalAveragePool -> Flatten
    -> Gemm(512 -> 1000) instead of AdaptiveAvgPool(7x7) -> 25088->4096->4096
    ->1000, which would weigh ~500 MB of float32 for layers that are not convs.
    """
    x, i = "input", 0
    for v in _VGG11:
        if v == "M":
            x = b.maxpool(x, f"features.{i}", 2, 2)
            i += 1
        else:
            x = b.conv_bn(x, v, 3, bias=True, conv=f"features.{i}",
                          bn=f"features.{i + 1}", act=f"features.{i + 2}")
            i += 3
    return b.head(x, 1000, fc="classifier")


# ----------------------------------------------------------------- SqueezeNet
def _fire(b: GraphBuilder, x: str, p: str, squeeze: int, e1: int, e3: int) -> str:
    s = b.relu(b.conv(x, f"{p}.squeeze", squeeze, 1, bias=True),
               f"{p}.squeeze_activation")
    y1 = b.relu(b.conv(s, f"{p}.expand1x1", e1, 1, bias=True),
                f"{p}.expand1x1_activation")
    y3 = b.relu(b.conv(s, f"{p}.expand3x3", e3, 3, pad=1, bias=True),
                f"{p}.expand3x3_activation")
    return b.concat([y1, y3], f"{p}.concat")


@_register("SqueezeNet 1.1 (Fire modules, Concat, no BN, conv biases)",
           image_size=224, min_image_size=32, convs=26)
def squeezenet1_1(b: GraphBuilder) -> str:
    x = b.relu(b.conv("input", "features.0", 64, 3, stride=2, pad=0, bias=True),
               "features.1")
    i = 2
    for v in ["M", (16, 64), (16, 64), "M", (32, 128), (32, 128), "M",
              (48, 192), (48, 192), (64, 256), (64, 256)]:
        if v == "M":
            x = b.maxpool(x, f"features.{i}", 3, 2, ceil_mode=True)
        else:
            x = _fire(b, x, f"features.{i}", v[0], v[1], v[1])
        i += 1
    x = b.relu(b.conv(x, "classifier.1", 1000, 1, bias=True), "classifier.2")
    return b.flatten(b.global_avgpool(x, "classifier.3"), "flatten")


# ------------------------------------------------------------------ Inception
def _inception(b: GraphBuilder, x: str, p: str, c1: int, c3r: int, c3: int,
               c5r: int, c5: int, pool_proj: int, *, double3x3: bool = False) -> str:
    """Inception-v1 block: 1x1 | 1x1->3x3 | 1x1->5x5 (or 1x1->3x3->3x3) |
    3x3 max-pool (stride 1, pad 1) -> 1x1, concatenated on channels."""

    def cbr(y: str, name: str, c: int, k: int) -> str:
        return b.conv_bn(y, c, k, conv=f"{name}.conv", bn=f"{name}.bn",
                         act=f"{name}.relu")

    br1 = cbr(x, f"{p}.branch1", c1, 1)
    br2 = cbr(cbr(x, f"{p}.branch2.0", c3r, 1), f"{p}.branch2.1", c3, 3)
    br3 = cbr(x, f"{p}.branch3.0", c5r, 1)
    if double3x3:
        br3 = cbr(cbr(br3, f"{p}.branch3.1", c5, 3), f"{p}.branch3.2", c5, 3)
    else:
        br3 = cbr(br3, f"{p}.branch3.1", c5, 5)
    br4 = cbr(b.maxpool(x, f"{p}.branch4.0", 3, 1, 1), f"{p}.branch4.1", pool_proj, 1)
    return b.concat([br1, br2, br3, br4], f"{p}.concat")


@_register("Inception-v1-style (GoogLeNet stem, blocks 3a, 3b, 4a; 5x5 and "
           "double-3x3 branches)", image_size=224, min_image_size=32, convs=22)
def inception(b: GraphBuilder) -> str:
    def cbr(y: str, name: str, c: int, k: int, **kw) -> str:
        return b.conv_bn(y, c, k, conv=f"{name}.conv", bn=f"{name}.bn",
                         act=f"{name}.relu", **kw)

    x = cbr("input", "conv1", 64, 7, stride=2, pad=3)
    x = b.maxpool(x, "maxpool1", 3, 2, 1)
    x = cbr(x, "conv2", 64, 1)
    x = cbr(x, "conv3", 192, 3)
    x = b.maxpool(x, "maxpool2", 3, 2, 1)
    x = _inception(b, x, "inception3a", 64, 96, 128, 16, 32, 32)         # -> 256
    x = _inception(b, x, "inception3b", 128, 128, 192, 32, 96, 64)       # -> 480
    x = b.maxpool(x, "maxpool3", 3, 2, 1)
    x = _inception(b, x, "inception4a", 192, 96, 208, 16, 48, 64,
                   double3x3=True)                                       # -> 512
    return b.head(x, 1000)


# ----------------------------------------------------------------------- tiny
@_register("tiny residual CNN (Conv with/without bias, BN, Add, Relu, MaxPool, "
           "GAP, Flatten, Gemm)", image_size=32, min_image_size=4, convs=3)
def tiny(b: GraphBuilder) -> str:
    a = b.conv_bn("input", 16, 3, bias=True, conv="conv1", bn="bn1", act="relu1")
    y = b.conv_bn(a, 16, 3, conv="conv2", bn="bn2", gamma_scale=0.5)
    y = b.relu(b.add(y, a, "add"), "relu2")
    y = b.conv_bn(y, 32, 3, stride=2, bias=True, conv="conv3", bn="bn3", act="relu3")
    y = b.maxpool(y, "maxpool", 2, 2)
    return b.head(y, 10)


@_register("tiny two-branch CNN (Concat, AveragePool, Clip(0,6) as ReLU6, Softmax)",
           image_size=32, min_image_size=2, convs=4)
def tiny_concat(b: GraphBuilder) -> str:
    x = b.conv_bn("input", 16, 3, conv="stem.conv", bn="stem.bn", act="stem.relu6",
                  act_op="Clip")
    br1 = b.conv_bn(x, 16, 1, conv="branch1.conv", bn="branch1.bn", act="branch1.relu")
    br2 = b.conv_bn(x, 16, 3, bias=True, conv="branch2.conv", bn="branch2.bn",
                    act="branch2.relu")
    x = b.avgpool(b.concat([br1, br2], "concat"), "avgpool", 2, 2)
    x = b.conv_bn(x, 32, 3, conv="conv2", bn="bn2", act="relu6", act_op="Clip")
    return b.softmax(b.head(x, 10, pool="gap"), "softmax")


# ------------------------------------------------------------------ public API
def _lookup(name: str) -> Builder:
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: "
                       f"{', '.join(sorted(ZOO))}") from None


def build(name: str, *, batch: int = 1, image_size: int | None = None,
          seed: int = 0, sparsity: float = 0.0) -> onnx.ModelProto:
    """Build zoo model ``name``; ``image_size=None`` means the model's default
    (224 for the ImageNet models, 32 for ``tiny``/``tiny_concat``). ``sparsity`` > 0 prunes every
    conv weight to that fraction of zeros (magnitude pruning, per layer)."""
    model = _lookup(name)(batch=batch, image_size=image_size, seed=seed)
    if sparsity:
        from .prune import prune
        model = prune(model, sparsity)
    return model


def list_models() -> list[tuple[str, str]]:
    """``(name, one-line description)`` for every model, in registration order."""
    return [(name, INFO[name].description()) for name in ZOO]


def save(name: str, path: str | Path, **kw) -> Path:
    """Build model ``name`` (``kw`` as for :func:`build`) and write it to ``path``."""
    model = build(name, **kw)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path
