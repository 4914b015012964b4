"""The model zoo: ONNX CNNs with deterministic random weights.

Every model is built with :class:`models.builder.GraphBuilder` (``onnx.helper``
only, no torch): opset 17, ir_version 8, input "input" ``[batch, 3, H, W]``
float32, output "output" ``[batch, classes]``.  Convs are followed by separate
``BatchNormalization`` nodes (unfolded, as PyTorch exports them) except in
SqueezeNet, which has none, and the squeeze-and-excitation convs (``fc1``/``fc2``,
with biases).  Node names follow torchvision's module names.  The mobile models
(MobileNetV2, EfficientNet-B0, ShuffleNetV2, RegNetX-400MF) have torchvision's
exact layer shapes and parameter counts, and write ops as ``torch.onnx`` does at
opset 17: ReLU6 as ``Clip(x, min, max)``, SiLU as ``Mul(x, Sigmoid(x))``,
``x.view`` with ``x.size()`` as Shape/Gather/Unsqueeze/Concat chains.

Every builder takes keyword-only ``batch``, ``image_size`` (None = the model's
default) and ``seed``; weights depend only on ``seed``, never on the input size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from .builder import GAIN, GraphBuilder

Builder = Callable[..., onnx.ModelProto]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    summary: str
    default_image_size: int
    min_image_size: int
    convs: int  # number of Conv nodes (checked by the tests)
    in_channels: int = 3

    def description(self) -> str:
        s = self.default_image_size
        return f"{self.summary}; input 1x{self.in_channels}x{s}x{s}, {self.convs} conv"


ZOO: dict[str, Builder] = {}
INFO: dict[str, ModelInfo] = {}


def _register(summary: str, *, image_size: int, min_image_size: int, convs: int, in_channels: int = 3,
              spatial_output: bool = False):
    """Register a ``fn(b: GraphBuilder) -> ModelProto`` body as a zoo builder
    (``spatial_output``: the body returns an NCHW feature map, not class scores)."""

    def deco(body: Callable[[GraphBuilder], onnx.ModelProto]) -> Builder:
        name = body.__name__
        info = ModelInfo(name, summary, image_size, min_image_size, convs, in_channels)

        @functools.wraps(body)
        def builder(*, batch: int = 1, image_size: int | None = None,
                    seed: int = 0) -> onnx.ModelProto:
            size = info.default_image_size if image_size is None else int(image_size)
            if size < info.min_image_size:
                raise ValueError(f"{name}: image_size {size} < minimum "
                                 f"{info.min_image_size}")
            b = GraphBuilder(name, batch=batch, image_size=size, seed=seed, in_channels=in_channels)
            x = body(b)
            shape = [batch, b.channels[x], size, size] if spatial_output else None
            return b.finish(x, doc=info.description(), out_shape=shape)

        builder.info = info  # type: ignore[attr-defined]
        ZOO[name] = builder
        INFO[name] = info
        return builder

    return deco


# --------------------------------------------------------------------- ResNet
def _resnet_stem(b: GraphBuilder, width: int = 64) -> str:
    x = b.conv_bn("input", width, 7, stride=2, pad=3, conv="conv1", bn="bn1", act="relu")
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


def _stages(b: GraphBuilder, x: str, block, layers, widths) -> str:
    """ResNet stages ``layer1..``: ``layers[i]`` blocks of ``widths[i]`` channels, the first block of
    every stage after the first with stride 2."""
    for i, (planes, n) in enumerate(zip(widths, layers)):
        for j in range(n):
            stride = 2 if (i > 0 and j == 0) else 1
            x = block(b, x, f"layer{i + 1}.{j}", planes, stride)
    return x


def _resnet(b: GraphBuilder, block, layers: list[int], widths=(64, 128, 256, 512)) -> str:
    return b.head(_stages(b, _resnet_stem(b, widths[0]), block, layers, widths), 1000)


@_register("ResNet-18 (basic blocks, unfolded conv+BN)", image_size=224,
           min_image_size=32, convs=20)
def resnet18(b: GraphBuilder) -> str:
    return _resnet(b, _basic_block, [2, 2, 2, 2])


@_register("ResNet-34 (basic blocks, unfolded conv+BN)", image_size=224,
           min_image_size=32, convs=36)
def resnet34(b: GraphBuilder) -> str:
    return _resnet(b, _basic_block, [3, 4, 6, 3])


@_register("ResNet-18 at half width (32-256 channels), an edge-sized ResNet: 11 MB of dense "
           "weights fit the last-level cache, its Winograd F(6x6) weights (7x) do not",
           image_size=112, min_image_size=32, convs=20)
def resnet18_half(b: GraphBuilder) -> str:
    return _resnet(b, _basic_block, [2, 2, 2, 2], widths=(32, 64, 128, 256))


@_register("Wide ResNet-16-4 for 32x32 inputs (CIFAR): 3x3 stem, three stages of two "
           "basic blocks at 64/128/256 channels (post-activation, as torchvision's ResNet); 11 MB "
           "of dense weights fit the last-level cache, its Winograd F(4x4) weights (4x) do not",
           image_size=32, min_image_size=16, convs=16)
def wrn16_4(b: GraphBuilder) -> str:
    x = b.conv_bn("input", 16, 3, conv="conv1", bn="bn1", act="relu")
    return b.head(_stages(b, x, _basic_block, [2, 2, 2], (64, 128, 256)), 10)


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
    return b.head(vgg11_features(b), 1000, fc="classifier")


def vgg11_features(b: GraphBuilder) -> str:
    """torchvision's ``vgg11_bn`` features (conv3x3+BN+ReLU, 5 max-pools) on the input."""
    x, i = "input", 0
    for v in _VGG11:
        if v == "M":
            x = b.maxpool(x, f"features.{i}", 2, 2)
            i += 1
        else:
            x = b.conv_bn(x, v, 3, bias=True, conv=f"features.{i}",
                          bn=f"features.{i + 1}", act=f"features.{i + 2}")
            i += 3
    return x


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
def _cbr(b: GraphBuilder, y: str, name: str, c: int, k: int, **kw) -> str:
    """Conv + BN + ReLU named ``name.conv`` / ``name.bn`` / ``name.relu`` (torchvision's BasicConv2d)."""
    return b.conv_bn(y, c, k, conv=f"{name}.conv", bn=f"{name}.bn", act=f"{name}.relu", **kw)


def _inception(b: GraphBuilder, x: str, p: str, c1: int, c3r: int, c3: int,
               c5r: int, c5: int, pool_proj: int, *, double3x3: bool = False, k5: int = 5,
               pool_ceil: bool = False) -> str:
    """Inception-v1 block: 1x1 | 1x1->3x3 | 1x1->k5 x k5 (or 1x1->3x3->3x3) |
    3x3 max-pool (stride 1, pad 1; ``pool_ceil``: in ceil mode) -> 1x1, concatenated on channels."""
    br1 = _cbr(b, x, f"{p}.branch1", c1, 1)
    br2 = _cbr(b, _cbr(b, x, f"{p}.branch2.0", c3r, 1), f"{p}.branch2.1", c3, 3)
    br3 = _cbr(b, x, f"{p}.branch3.0", c5r, 1)
    if double3x3:
        br3 = _cbr(b, _cbr(b, br3, f"{p}.branch3.1", c5, 3), f"{p}.branch3.2", c5, 3)
    else:
        br3 = _cbr(b, br3, f"{p}.branch3.1", c5, k5)
    br4 = _cbr(b, b.maxpool(x, f"{p}.branch4.0", 3, 1, 1, ceil_mode=pool_ceil), f"{p}.branch4.1", pool_proj, 1)
    return b.concat([br1, br2, br3, br4], f"{p}.concat")


@_register("Inception-v1-style (GoogLeNet stem, blocks 3a, 3b, 4a; 5x5 and "
           "double-3x3 branches)", image_size=224, min_image_size=32, convs=22)
def inception(b: GraphBuilder) -> str:
    x = _cbr(b, "input", "conv1", 64, 7, stride=2, pad=3)
    x = b.maxpool(x, "maxpool1", 3, 2, 1)
    x = _cbr(b, x, "conv2", 64, 1)
    x = _cbr(b, x, "conv3", 192, 3)
    x = b.maxpool(x, "maxpool2", 3, 2, 1)
    x = _inception(b, x, "inception3a", 64, 96, 128, 16, 32, 32)         # -> 256
    x = _inception(b, x, "inception3b", 128, 128, 192, 32, 96, 64)       # -> 480
    x = b.maxpool(x, "maxpool3", 3, 2, 1)
    x = _inception(b, x, "inception4a", 192, 96, 208, 16, 48, 64,
                   double3x3=True)                                       # -> 512
    return b.head(x, 1000)


@_register("GoogLeNet (torchvision's Inception-v1: nine inception blocks, 3x3 in the '5x5' branch, "
           "ceil-mode pooling)", image_size=224, min_image_size=32, convs=57)
def googlenet(b: GraphBuilder) -> str:
    """torchvision's ``googlenet`` without its auxiliary heads (inference): every conv is
    conv + BN + ReLU, and the branch torchvision names 5x5 is a 3x3 (torchvision's choice)."""
    def block(y: str, p: str, *cfg: int) -> str:
        return _inception(b, y, p, *cfg, k5=3, pool_ceil=True)

    x = _cbr(b, "input", "conv1", 64, 7, stride=2, pad=3)
    x = b.maxpool(x, "maxpool1", 3, 2, ceil_mode=True)
    x = _cbr(b, x, "conv2", 64, 1)
    x = _cbr(b, x, "conv3", 192, 3)
    x = b.maxpool(x, "maxpool2", 3, 2, ceil_mode=True)
    x = block(x, "inception3a", 64, 96, 128, 16, 32, 32)
    x = block(x, "inception3b", 128, 128, 192, 32, 96, 64)
    x = b.maxpool(x, "maxpool3", 3, 2, ceil_mode=True)
    for name, cfg in (("4a", (192, 96, 208, 16, 48, 64)), ("4b", (160, 112, 224, 24, 64, 64)),
                      ("4c", (128, 128, 256, 24, 64, 64)), ("4d", (112, 144, 288, 32, 64, 64)),
                      ("4e", (256, 160, 320, 32, 128, 128))):
        x = block(x, f"inception{name}", *cfg)
    x = b.maxpool(x, "maxpool4", 2, 2, ceil_mode=True)
    x = block(x, "inception5a", 256, 160, 320, 32, 128, 128)
    x = block(x, "inception5b", 384, 192, 384, 48, 128, 128)
    return b.head(x, 1000)


# ---------------------------------------------------------------- MobileNetV2
# torchvision's inverted_residual_setting: expand ratio t, channels c, repeats n, stride s
_MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                 (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _inverted_residual(b: GraphBuilder, x: str, p: str, cout: int, stride: int,
                       expand: int) -> str:
    """MobileNetV2 block: [1x1 expand + ReLU6] -> 3x3 depthwise + ReLU6 -> 1x1 linear
    projection, plus the input when the stride is 1 and the channels match."""
    cin = b.channels[x]
    hidden, y, i = cin * expand, x, 0
    if expand != 1:
        y = b.conv_bn(y, hidden, 1, conv=f"{p}.conv.0.0", bn=f"{p}.conv.0.1",
                      act=f"{p}.conv.0.2", act_op="Clip")
        i = 1
    y = b.conv_bn(y, hidden, 3, stride=stride, group=hidden, conv=f"{p}.conv.{i}.0",
                  bn=f"{p}.conv.{i}.1", act=f"{p}.conv.{i}.2", act_op="Clip")
    residual = stride == 1 and cin == cout
    y = b.conv_bn(y, cout, 1, conv=f"{p}.conv.{i + 1}", bn=f"{p}.conv.{i + 2}",
                  gamma_scale=0.3 if residual else 1.0)
    return b.add(x, y, f"{p}.add") if residual else y


@_register("MobileNetV2 1.0 (inverted residuals, depthwise 3x3, ReLU6 as Clip)",
           image_size=224, min_image_size=32, convs=52)
def mobilenet_v2(b: GraphBuilder) -> str:
    x = b.conv_bn("input", 32, 3, stride=2, conv="features.0.0", bn="features.0.1",
                  act="features.0.2", act_op="Clip")
    i = 1
    for t, c, n, s in _MOBILENET_V2:
        for j in range(n):
            x = _inverted_residual(b, x, f"features.{i}", c, s if j == 0 else 1, t)
            i += 1
    x = b.conv_bn(x, 1280, 1, conv=f"features.{i}.0", bn=f"features.{i}.1",
                  act=f"features.{i}.2", act_op="Clip")
    return b.head(x, 1000, fc="classifier.1")


# ------------------------------------------------------------- EfficientNet-B0
# torchvision's MBConvConfig list: expand ratio, kernel, stride, cin, cout, layers
_EFFICIENTNET_B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
                    (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
                    (6, 3, 1, 192, 320, 1)]


def _mbconv(b: GraphBuilder, x: str, p: str, cout: int, k: int, stride: int,
            expand: int) -> str:
    """EfficientNet MBConv: [1x1 expand + SiLU] -> kxk depthwise + SiLU -> squeeze-and-
    excitation (squeeze to cin // 4) -> 1x1 linear projection [+ input]."""
    cin = b.channels[x]
    hidden, y, i = cin * expand, x, 0
    if expand != 1:
        y = b.conv_bn(y, hidden, 1, conv=f"{p}.block.0.0", bn=f"{p}.block.0.1",
                      act=f"{p}.block.0.2", act_op="SiLU", gain=1.0)  # a linear input
        i = 1
    y = b.conv_bn(y, hidden, k, stride=stride, group=hidden, conv=f"{p}.block.{i}.0",
                  bn=f"{p}.block.{i}.1", act=f"{p}.block.{i}.2", act_op="SiLU",
                  gain=GAIN["SiLU"])
    y = b.squeeze_excitation(y, f"{p}.block.{i + 1}", max(1, cin // 4))
    residual = stride == 1 and cin == cout
    y = b.conv_bn(y, cout, 1, conv=f"{p}.block.{i + 2}.0", bn=f"{p}.block.{i + 2}.1",
                  gain=GAIN["SE"], gamma_scale=0.3 if residual else 1.0)
    # stochastic depth is the identity at inference
    return b.add(y, x, f"{p}.add") if residual else y


@_register("EfficientNet-B0 (MBConv, depthwise 3x3/5x5, squeeze-and-excitation, "
           "SiLU as Sigmoid*Mul)", image_size=224, min_image_size=32, convs=81)
def efficientnet_b0(b: GraphBuilder) -> str:
    x = b.conv_bn("input", 32, 3, stride=2, conv="features.0.0", bn="features.0.1",
                  act="features.0.2", act_op="SiLU")
    for stage, (t, k, s, _cin, cout, n) in enumerate(_EFFICIENTNET_B0, start=1):
        for j in range(n):
            x = _mbconv(b, x, f"features.{stage}.{j}", cout, k, s if j == 0 else 1, t)
    x = b.conv_bn(x, 1280, 1, conv="features.8.0", bn="features.8.1", act="features.8.2",
                  act_op="SiLU")
    return b.head(x, 1000, fc="classifier.1")


# -------------------------------------------------------------- ShuffleNetV2
def _shuffle_unit(b: GraphBuilder, x: str, p: str, cout: int, stride: int) -> str:
    """ShuffleNetV2 unit. Stride 2: two branches on the whole input, concatenated.
    Stride 1: ``x.chunk(2, dim=1)``, the second half through the branch, concatenated
    with the first. Then ``channel_shuffle(out, 2)``."""
    half = cout // 2

    def branch2(y: str) -> str:
        y = b.conv_bn(y, half, 1, conv=f"{p}.branch2.0", bn=f"{p}.branch2.1",
                      act=f"{p}.branch2.2")
        y = b.conv_bn(y, half, 3, stride=stride, group=half, conv=f"{p}.branch2.3",
                      bn=f"{p}.branch2.4")
        return b.conv_bn(y, half, 1, conv=f"{p}.branch2.5", bn=f"{p}.branch2.6",
                         act=f"{p}.branch2.7", gain=1.0)  # after the linear depthwise

    if stride == 1:
        x1, x2 = b.split(x, f"{p}.chunk", [half, half])
        out = b.concat([x1, branch2(x2)], f"{p}.cat")
    else:
        cin = b.channels[x]
        y1 = b.conv_bn(x, cin, 3, stride=stride, group=cin, conv=f"{p}.branch1.0",
                       bn=f"{p}.branch1.1")
        y1 = b.conv_bn(y1, half, 1, conv=f"{p}.branch1.2", bn=f"{p}.branch1.3",
                       act=f"{p}.branch1.4", gain=1.0)
        out = b.concat([y1, branch2(x)], f"{p}.cat")
    return b.channel_shuffle(out, f"{p}.shuffle", 2)


@_register("ShuffleNetV2 x1.0 (channel split, channel shuffle via Shape-chain Reshape/"
           "Transpose, depthwise 3x3)", image_size=224, min_image_size=32, convs=56)
def shufflenet_v2(b: GraphBuilder) -> str:
    x = b.conv_bn("input", 24, 3, stride=2, conv="conv1.0", bn="conv1.1", act="conv1.2")
    x = b.maxpool(x, "maxpool", 3, 2, 1)
    for stage, (repeats, cout) in enumerate(zip([4, 8, 4], [116, 232, 464]), start=2):
        for j in range(repeats):
            x = _shuffle_unit(b, x, f"stage{stage}.{j}", cout, 2 if j == 0 else 1)
    x = b.conv_bn(x, 1024, 1, conv="conv5.0", bn="conv5.1", act="conv5.2")
    return b.gemm(b.reduce_mean(x, "mean", keepdims=False), "fc", 1000)  # x.mean([2, 3])


# ---------------------------------------------------------------------- RegNet
def _res_bottleneck(b: GraphBuilder, x: str, p: str, cout: int, stride: int,
                    group_width: int) -> str:
    """RegNet ResBottleneckBlock (bottleneck ratio 1, no SE): 1x1 -> grouped 3x3 (groups =
    width / group_width, carrying the stride) -> 1x1, plus a 1x1 projection shortcut when the
    shape changes."""
    shortcut = x
    if stride != 1 or b.channels[x] != cout:
        shortcut = b.conv_bn(x, cout, 1, stride=stride, pad=0, conv=f"{p}.proj.0",
                             bn=f"{p}.proj.1")
    y = b.conv_bn(x, cout, 1, conv=f"{p}.f.a.0", bn=f"{p}.f.a.1", act=f"{p}.f.a.2")
    y = b.conv_bn(y, cout, 3, stride=stride, group=cout // group_width, conv=f"{p}.f.b.0",
                  bn=f"{p}.f.b.1", act=f"{p}.f.b.2")
    y = b.conv_bn(y, cout, 1, conv=f"{p}.f.c.0", bn=f"{p}.f.c.1", gamma_scale=0.3)
    return b.relu(b.add(shortcut, y, f"{p}.add"), f"{p}.activation")


@_register("RegNetX-400MF (grouped 3x3 bottlenecks, group width 16, projection "
           "shortcuts)", image_size=224, min_image_size=32, convs=71)
def regnet_x_400mf(b: GraphBuilder) -> str:
    """torchvision's ``regnet_x_400mf``: depths [1, 2, 7, 12], widths [32, 64, 160, 400].

    The last width is 400, not 384: torchvision rounds the generated 392 to a multiple of the
    group width with ``_make_divisible`` (``int(392 + 8) // 16 * 16``, 25 groups), not to the
    nearest even multiple; with 400 the parameter count is torchvision's 5,495,976 exactly.
    """
    x = b.conv_bn("input", 32, 3, stride=2, conv="stem.0", bn="stem.1", act="stem.2")
    for stage, (depth, width) in enumerate(zip([1, 2, 7, 12], [32, 64, 160, 400]), start=1):
        for j in range(depth):
            # torchvision names blocks "block1-0"; '-' becomes '_' to keep names identifiers
            x = _res_bottleneck(b, x, f"trunk_output.block{stage}.block{stage}_{j}", width,
                                2 if j == 0 else 1, 16)
    return b.head(x, 1000)


@_register("DenseNet-121 (dense blocks 6-12-24-16, growth 32, pre-activation BN+ReLU on each "
           "concatenation, average-pool transitions)", image_size=224, min_image_size=32, convs=120)
def densenet121(b: GraphBuilder) -> str:
    """torchvision's ``densenet121``: each dense layer is BN -> ReLU -> 1x1 (128) -> BN -> ReLU ->
    3x3 (32), its output concatenated to its input; a transition is BN -> ReLU -> 1x1 (half the
    channels) -> 2x2 average pool. The BN before a conv reads a concatenation, not a conv's
    output, so it cannot be folded into a conv's weights."""
    x = b.conv("input", "features.conv0", 64, 7, stride=2, pad=3)
    x = b.relu(b.bn(x, "features.norm0"), "features.relu0")
    x = b.maxpool(x, "features.pool0", 3, 2, 1)
    for i, n in enumerate((6, 12, 24, 16), start=1):
        for j in range(1, n + 1):
            p = f"features.denseblock{i}.denselayer{j}"
            y = b.relu(b.bn(x, f"{p}.norm1"), f"{p}.relu1")
            y = b.conv_bn(y, 128, 1, conv=f"{p}.conv1", bn=f"{p}.norm2", act=f"{p}.relu2")
            y = b.conv(y, f"{p}.conv2", 32, 3, pad=1)
            x = b.concat([x, y], f"{p}.concat")
        if i < 4:
            p = f"features.transition{i}"
            y = b.relu(b.bn(x, f"{p}.norm"), f"{p}.relu")
            x = b.avgpool(b.conv(y, f"{p}.conv", b.channels[x] // 2, 1), f"{p}.pool", 2, 2)
    x = b.relu(b.bn(x, "features.norm5"), "features.relu5")
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


@_register("tiny mobile CNN (depthwise+ReLU6, inverted residual with SE, HardSwish, "
           "HardSigmoid gate on ReduceMean, grouped conv, Split/shuffle, channel Slice)",
           image_size=32, min_image_size=4, convs=12)
def mobile_tiny(b: GraphBuilder) -> str:
    """Every mobile construct once, small enough for end-to-end tests."""
    x = b.conv_bn("input", 16, 3, stride=2, conv="stem.0", bn="stem.1", act="stem.2",
                  act_op="HardSwish")
    x = b.conv_bn(x, 16, 3, group=16, conv="dw.0", bn="dw.1", act="dw.2", act_op="Clip",
                  gain=GAIN["HardSwish"])
    # inverted residual: expand + ReLU6, depthwise + SiLU, SE (SiLU, Sigmoid), project, add
    y = b.conv_bn(x, 48, 1, conv="block.expand.0", bn="block.expand.1", act="block.expand.2",
                  act_op="Clip")
    y = b.conv_bn(y, 48, 3, group=48, conv="block.dw.0", bn="block.dw.1", act="block.dw.2",
                  act_op="SiLU")
    y = b.squeeze_excitation(y, "block.se", 4)
    y = b.conv_bn(y, 16, 1, conv="block.project.0", bn="block.project.1", gain=GAIN["SE"],
                  gamma_scale=0.5)
    x = b.add(x, y, "block.add")
    x = b.conv_bn(x, 32, 3, stride=2, group=4, conv="grouped.0", bn="grouped.1",
                  act="grouped.2")
    x = _shuffle_unit(b, x, "shuffle", 32, 1)
    # MobileNetV3-style gate computed from a ReduceMean instead of GlobalAveragePool
    x = b.mul(x, b.hardsigmoid(b.reduce_mean(x, "gate.mean", keepdims=True), "gate.act"),
              "gate.mul")
    x = b.slice_channels(x, "slice", 0, 24)
    x = b.conv_bn(x, 48, 1, conv="last.0", bn="last.1", act="last.2", act_op="HardSwish")
    return b.head(x, 10)


@_register("one conv (16->32 channels, 3x3, ReLU) on a 16-channel 32x32 input: the smallest graph "
           "there is, where runtime overheads decide", image_size=32, min_image_size=8, convs=1,
           in_channels=16, spatial_output=True)
def one_conv(b: GraphBuilder) -> str:
    return b.relu(b.conv("input", "conv", 32, 3, bias=True), "relu")


# ------------------------------------------------------------------ public API
def _lookup(name: str) -> Builder:
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: "
                       f"{', '.join(sorted(ZOO))}") from None


def build(name: str, *, batch: int = 1, image_size: int | None = None,
          seed: int = 0, sparsity: float = 0.0, block: int = 1) -> onnx.ModelProto:
    """Build zoo model ``name``; ``image_size=None`` means the model's default
    (224 for the ImageNet models, 32 for ``tiny``/``tiny_concat``/``mobile_tiny``). ``sparsity`` > 0 prunes every
    conv weight to that fraction of zeros (magnitude pruning, per layer; ``block`` > 1: in blocks
    of that many output channels, see :func:`models.prune.prune`)."""
    model = _lookup(name)(batch=batch, image_size=image_size, seed=seed)
    if sparsity:
        from .prune import prune
        model = prune(model, sparsity, block)
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
