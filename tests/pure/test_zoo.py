"""Tests for the ONNX model zoo (models/): structure, numerics, determinism, API."""

from __future__ import annotations

import functools
import re
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import models
from models import ZOO, build, list_models, save

MOBILE = ["mobilenet_v2", "efficientnet_b0", "shufflenet_v2", "regnet_x_400mf"]
NAMES = ["resnet18", "resnet34", "resnet18_half", "wrn16_4", "resnet50", "vgg11", "squeezenet1_1", "inception", "googlenet", *MOBILE, "densenet121", "tiny",
         "tiny_concat", "mobile_tiny"]
TINY = ["tiny", "tiny_concat", "mobile_tiny"]
CONVS = {"resnet18": 20, "resnet34": 36, "wrn16_4": 16, "resnet18_half": 20, "resnet50": 53, "vgg11": 8, "squeezenet1_1": 26,
         "inception": 22, "googlenet": 57, "densenet121": 120, "mobilenet_v2": 52, "efficientnet_b0": 81, "shufflenet_v2": 56,
         "regnet_x_400mf": 71, "tiny": 3, "tiny_concat": 4, "mobile_tiny": 12}
CLASSES = {n: 1000 for n in NAMES} | {n: 10 for n in TINY + ["wrn16_4"]}
DEFAULT_SIZE = {n: 224 for n in NAMES} | {n: 32 for n in TINY + ["wrn16_4"]} | {"resnet18_half": 112}
# Small inputs keep the file fast; every architecture still works at this size.
TEST_SIZE = {n: 64 for n in NAMES} | {n: 32 for n in TINY + ["wrn16_4"]}
BATCH = 2


@functools.cache
def model(name: str, seed: int = 0) -> onnx.ModelProto:
    return build(name, batch=BATCH, image_size=TEST_SIZE[name], seed=seed)


@functools.cache
def run(name: str) -> tuple[np.ndarray, np.ndarray]:
    m = model(name)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(123).standard_normal(
        (BATCH, 3, TEST_SIZE[name], TEST_SIZE[name])).astype(np.float32)
    (y,) = sess.run(["output"], {"input": x})
    return x, y


def ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def dims(vi: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


def test_zoo_has_exactly_the_documented_models():
    assert list(ZOO) == NAMES + ["one_conv"]          # the classifiers, and one bare conv
    assert [n for n, _ in list_models()] == NAMES + ["one_conv"]
    assert models.__all__ == ["ZOO", "build", "list_models", "save", "prune", "quantize_qdq", "dynamo_pooling"]


# ------------------------------------------------------------------ structure
@pytest.mark.parametrize("name", NAMES)
def test_model_is_valid_onnx(name):
    m = model(name)
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version == 8
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 17)]
    assert [i.name for i in m.graph.input] == ["input"]
    assert [o.name for o in m.graph.output] == ["output"]
    assert dims(m.graph.input[0]) == [BATCH, 3, TEST_SIZE[name], TEST_SIZE[name]]
    assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert dims(m.graph.output[0]) == [BATCH, CLASSES[name]]
    # Declared output shape agrees with ONNX's own shape inference.
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    assert dims(inferred.graph.output[0]) == [BATCH, CLASSES[name]]


@pytest.mark.parametrize("name", NAMES)
def test_conv_count_matches_architecture_and_description(name):
    m = model(name)
    assert ops(m).count("Conv") == CONVS[name]
    desc = dict(list_models())[name]
    assert f"{CONVS[name]} conv" in desc
    s = DEFAULT_SIZE[name]
    assert f"1x3x{s}x{s}" in desc


@pytest.mark.parametrize("name", NAMES)
def test_batchnorm_follows_every_conv_except_squeezenet_and_se(name):
    m = model(name)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    bns = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
    if name == "squeezenet1_1":
        assert not bns
        assert all(len(c.input) == 3 for c in convs)  # conv biases
        return
    if name == "densenet121":
        # pre-activation: a BN (+ReLU) on each concatenation before a conv, and one after each
        # dense layer's 1x1 conv; its 3x3 convs and the transitions' 1x1 feed a Concat or a pool
        assert len(bns) == 1 + 58 * 2 + 3 + 1 and len(convs) == 1 + 58 * 2 + 3
        for c in convs:
            (nxt,) = consumers[c.output[0]]
            want = "Concat" if c.name.endswith(".conv2") else "AveragePool" if "transition" in c.name \
                else "BatchNormalization"
            assert nxt.op_type == want, c.name
        return
    # squeeze-and-excitation convs are plain Conv2d(bias=True), as in torchvision
    se = [c for c in convs if c.name.endswith((".fc1", ".fc2"))]
    assert len(bns) == len(convs) - len(se)
    assert all(len(c.input) == 3 for c in se)
    for c in convs:
        if c in se:
            continue
        (nxt,) = consumers[c.output[0]]
        assert nxt.op_type == "BatchNormalization", c.name


@pytest.mark.parametrize("name", NAMES)
def test_bn_parameters_are_realistic(name):
    m = model(name)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type != "BatchNormalization":
            continue
        gamma, beta, mean, var = (inits[i] for i in n.input[1:])
        assert (var > 0).all()
        assert (gamma > 0).all() and gamma.std() > 0
        assert beta.std() > 0 and mean.std() > 0


@pytest.mark.parametrize("name", NAMES)
def test_names_and_dtypes(name):
    m = model(name)
    names = [n.name for n in m.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9_.]+", n) for n in names)
    assert len({t.name for t in m.graph.initializer}) == len(m.graph.initializer)
    # float32 parameters; int64 only for shape arithmetic (indices, axes, split sizes, ...)
    shape_ops = {"Gather", "Unsqueeze", "Concat", "Div", "Split", "Slice"}
    consumers: dict[str, set[str]] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, set()).add(n.op_type)
    for t in m.graph.initializer:
        assert t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64), t.name
        if t.data_type == onnx.TensorProto.INT64:
            assert consumers[t.name] <= shape_ops, t.name


def test_readable_node_names():
    r18 = {n.name: n.op_type for n in model("resnet18").graph.node}
    assert r18["layer1.0.conv1"] == "Conv" and r18["layer1.0.bn1"] == "BatchNormalization"
    assert r18["layer2.0.downsample.0"] == "Conv"
    assert r18["layer2.0.downsample.1"] == "BatchNormalization"
    assert "layer1.0.downsample.0" not in r18  # identity shortcut
    r50 = {n.name for n in model("resnet50").graph.node}
    # bottleneck: 64 -> 256 channels, so layer1.0 has a downsample, layer1.1 not
    assert {"layer1.0.downsample.0", "layer4.2.conv3"} <= r50
    assert "layer1.1.downsample.0" not in r50


def test_resnet_downsample_shortcuts():
    for name, expected in [("resnet18", 3), ("resnet50", 4)]:
        nodes = model(name).graph.node
        assert sum(".downsample.0" in n.name for n in nodes) == expected
        adds = [n for n in nodes if n.op_type == "Add"]
        assert len(adds) == {"resnet18": 8, "resnet50": 16}[name]


def test_squeezenet_fire_modules():
    m = model("squeezenet1_1")
    concats = [n for n in m.graph.node if n.op_type == "Concat"]
    assert len(concats) == 8
    assert all(onnx.helper.get_attribute_value(c.attribute[0]) == 1 for c in concats)
    pools = [n for n in m.graph.node if n.op_type == "MaxPool"]
    assert len(pools) == 3
    for p in pools:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in p.attribute}
        assert attrs["ceil_mode"] == 1 and attrs["kernel_shape"] == [3, 3]
    assert ops(m)[-3:] == ["Relu", "GlobalAveragePool", "Flatten"]


def test_inception_blocks():
    m = model("inception")
    o = ops(m)
    concats = [n for n in m.graph.node if n.op_type == "Concat"]
    assert len(concats) == 3 and all(len(c.input) == 4 for c in concats)
    kernels = {tuple(onnx.helper.get_attribute_value(a))
               for n in m.graph.node if n.op_type == "Conv"
               for a in n.attribute if a.name == "kernel_shape"}
    assert {(1, 1), (3, 3), (5, 5), (7, 7)} <= kernels
    assert o[-3:] == ["GlobalAveragePool", "Flatten", "Gemm"]


def test_vgg11_layout():
    m = model("vgg11")
    o = ops(m)
    assert o.count("MaxPool") == 5 and o.count("Relu") == 8
    assert o[-3:] == ["GlobalAveragePool", "Flatten", "Gemm"]
    gemm = [t for t in m.graph.initializer if t.name == "classifier.weight"]
    assert list(gemm[0].dims) == [1000, 512]


def test_tiny_models_exercise_the_intended_ops():
    t = model("tiny")
    assert {"Conv", "BatchNormalization", "Add", "Relu", "MaxPool",
            "GlobalAveragePool", "Flatten", "Gemm"} <= set(ops(t))
    conv_inputs = {len(n.input) for n in t.graph.node if n.op_type == "Conv"}
    assert conv_inputs == {2, 3}  # with and without bias
    tc = model("tiny_concat")
    assert {"Concat", "AveragePool", "Clip", "Softmax"} <= set(ops(tc))
    assert ops(tc)[-1] == "Softmax"
    inits = {t.name: numpy_helper.to_array(t) for t in tc.graph.initializer}
    for clip in (n for n in tc.graph.node if n.op_type == "Clip"):
        assert len(clip.input) == 3 and not clip.attribute
        assert inits[clip.input[1]].shape == () == inits[clip.input[2]].shape
        assert float(inits[clip.input[1]]) == 0.0 and float(inits[clip.input[2]]) == 6.0


def attrs(n: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


def inits(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def conv_kinds(m: onnx.ModelProto) -> Counter:
    """(kernel, 'dense' | 'depthwise' | 'grouped') for every Conv."""
    w = inits(m)
    out = Counter()
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        cout, cin_g, k, _ = w[n.input[1]].shape
        g = attrs(n)["group"]
        kind = "dense" if g == 1 else "depthwise" if cin_g == 1 and g == cout else "grouped"
        out[(k, kind)] += 1
    return out


# torchvision's learnable parameter counts (sum(p.numel() for p in m.parameters()))
TORCHVISION_PARAMS = {"resnet34": 21_797_672, "mobilenet_v2": 3_504_872, "efficientnet_b0": 5_288_548,
                      "shufflenet_v2": 2_278_604, "regnet_x_400mf": 5_495_976}


@pytest.mark.parametrize("name", ["resnet34", *MOBILE])
def test_parameter_count_equals_torchvision(name):
    m = model(name)
    clip_bounds = {i for n in m.graph.node if n.op_type == "Clip" for i in n.input[1:]}
    n = sum(v.size for k, v in inits(m).items()
            if v.dtype == np.float32 and k not in clip_bounds
            and not k.endswith((".running_mean", ".running_var")))
    assert n == TORCHVISION_PARAMS[name]


def _clips_are_relu6(m: onnx.ModelProto) -> int:
    w = inits(m)
    clips = [n for n in m.graph.node if n.op_type == "Clip"]
    for c in clips:  # as the exporter writes ReLU6 at opset >= 11: bounds as inputs
        assert len(c.input) == 3 and not c.attribute
        assert w[c.input[1]].shape == () == w[c.input[2]].shape
        assert float(w[c.input[1]]) == 0.0 and float(w[c.input[2]]) == 6.0
    return len(clips)


def test_mobilenet_v2_structure():
    m = model("mobilenet_v2")
    assert conv_kinds(m) == {(1, "dense"): 34, (3, "depthwise"): 17, (3, "dense"): 1}
    assert _clips_are_relu6(m) == 35  # stem, 16 expansions, 17 depthwise, the 1280 conv
    o = ops(m)
    # residual when stride 1 and channels kept: 24:1, 32:2, 64:3, 96:2, 160:2
    assert o.count("Add") == 10
    assert o[-3:] == ["GlobalAveragePool", "Flatten", "Gemm"]
    w = inits(m)
    assert w["features.18.0.weight"].shape == (1280, 320, 1, 1)
    assert w["classifier.1.weight"].shape == (1000, 1280)
    # the projection is linear: its BN feeds the Add and/or the next block, never a Clip
    consumers: dict[str, set[str]] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, set()).add(n.op_type)
    assert consumers["features.1.conv.2"] == {"Conv"}  # 32 -> 16: no residual
    assert consumers["features.2.conv.3"] == {"Conv", "Add"}  # input of block 3 and its residual
    assert consumers["features.3.conv.3"] == {"Add"}


def _silu_and_gates(m: onnx.ModelProto) -> tuple[int, int]:
    """(SiLU as Mul(x, Sigmoid(x)), sigmoid gates Mul(Sigmoid(s), x) with s != x)."""
    producer = {n.output[0]: n for n in m.graph.node}
    silu = gate = 0
    for n in m.graph.node:
        if n.op_type != "Mul":
            continue
        a, b = (producer.get(i) for i in n.input)
        if b is not None and b.op_type == "Sigmoid" and b.input[0] == n.input[0]:
            silu += 1
        elif any(p is not None and p.op_type in ("Sigmoid", "HardSigmoid") and
                 p.input[0] not in n.input for p in (a, b)):
            gate += 1
    return silu, gate


def test_efficientnet_b0_structure():
    m = model("efficientnet_b0")
    # 16 MBConv: 5x5 depthwise in stages 3, 5, 6 (2 + 3 + 4 blocks), 3x3 in the other 7;
    # 1x1: 15 expansions, 16 projections, 32 SE convs, the 1280 head; stem 3x3
    assert conv_kinds(m) == {(1, "dense"): 64, (3, "depthwise"): 7, (5, "depthwise"): 9,
                             (3, "dense"): 1}
    # SiLU: stem, 15 expansions, 16 depthwise, 16 SE activations, head
    assert _silu_and_gates(m) == (49, 16)
    o = ops(m)
    assert o.count("Sigmoid") == 65 and o.count("Mul") == 65
    assert o.count("GlobalAveragePool") == 17 and o.count("Add") == 9
    assert "Clip" not in o and "Relu" not in o
    w = inits(m)
    # squeeze to a quarter of the block's input channels, with biases
    assert w["features.1.0.block.1.fc1.weight"].shape == (8, 32, 1, 1)
    assert w["features.6.3.block.2.fc1.weight"].shape == (48, 1152, 1, 1)
    assert w["features.6.3.block.2.fc2.bias"].shape == (1152,)
    assert w["features.8.0.weight"].shape == (1280, 320, 1, 1)


def test_shufflenet_v2_structure():
    m = model("shufflenet_v2")
    # 3 stride-2 units (branch1: dw + 1x1; branch2: 1x1, dw, 1x1), 13 stride-1 units
    # (branch2 only), stem 3x3, conv5 1x1
    assert conv_kinds(m) == {(1, "dense"): 3 + 16 * 2 + 1, (3, "depthwise"): 3 + 16,
                             (3, "dense"): 1}
    o = ops(m)
    assert o.count("Split") == 13 and o.count("Transpose") == 16 and o.count("Reshape") == 32
    assert o.count("MaxPool") == 1
    w = inits(m)
    for n in m.graph.node:
        if n.op_type == "Split":  # x.chunk(2, dim=1) with the opset-13 `split` input
            assert attrs(n)["axis"] == 1 and len(n.output) == 2
            assert w[n.input[1]].tolist() in ([58, 58], [116, 116], [232, 232])
        if n.op_type == "Transpose":
            assert attrs(n)["perm"] == [0, 2, 1, 3, 4]
        if n.op_type == "Reshape":  # shapes computed from x.size(), not constants
            assert n.input[1] not in w
    mean = [n for n in m.graph.node if n.op_type == "ReduceMean"]
    assert len(mean) == 1 and attrs(mean[0]) == {"axes": [2, 3], "keepdims": 0}  # x.mean([2, 3])
    assert o[-2:] == ["ReduceMean", "Gemm"]


def test_regnet_x_400mf_structure():
    m = model("regnet_x_400mf")
    w = inits(m)
    groups = Counter()
    for n in m.graph.node:
        if n.op_type == "Conv" and attrs(n)["group"] > 1:
            cout = w[n.input[1]].shape[0]
            assert cout // attrs(n)["group"] == 16  # group width 16
            groups[(cout, attrs(n)["group"])] += 1
    # depths [1, 2, 7, 12]; torchvision's widths after its group-width rounding
    assert groups == {(32, 2): 1, (64, 4): 2, (160, 10): 7, (400, 25): 12}
    assert sum(".proj.0" in n.name for n in m.graph.node) == 4
    assert ops(m).count("Add") == 22 and ops(m).count("Relu") == 1 + 22 * 3
    assert w["fc.weight"].shape == (1000, 400)


def test_mobile_tiny_has_each_construct():
    m = model("mobile_tiny")
    o = Counter(ops(m))
    assert {"HardSwish", "HardSigmoid", "Split", "Slice", "ReduceMean", "Transpose", "Shape",
            "Gather", "Unsqueeze", "Add", "GlobalAveragePool"} <= set(o)
    assert conv_kinds(m) == {(3, "dense"): 1, (3, "depthwise"): 3, (1, "dense"): 7,
                             (3, "grouped"): 1}
    assert _clips_are_relu6(m) == 2
    assert _silu_and_gates(m) == (2, 2)  # dw + SE activation; SE Sigmoid and HardSigmoid gates
    mean = next(n for n in m.graph.node if n.op_type == "ReduceMean")
    assert attrs(mean) == {"axes": [2, 3], "keepdims": 1}
    hsig = next(n for n in m.graph.node if n.op_type == "HardSigmoid")
    assert attrs(hsig)["alpha"] == pytest.approx(1 / 6)
    w = inits(m)
    sl = next(n for n in m.graph.node if n.op_type == "Slice")
    assert [w[i].tolist() for i in sl.input[1:]] == [[0], [24], [1]]


def _np_mobile_tiny(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """mobile_tiny written out in float64 numpy from its weights, independent of the graph."""
    w = {k: v.astype(np.float64) for k, v in inits(m).items()}

    def conv(x, name, stride=1, group=1, bias=False):
        k = w[f"{name}.weight"]
        cout, cin_g, kh, _ = k.shape
        p = kh // 2
        xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        oh = (x.shape[2] + 2 * p - kh) // stride + 1
        ow = (x.shape[3] + 2 * p - kh) // stride + 1
        y = np.zeros((x.shape[0], cout, oh, ow))
        og = cout // group
        for g in range(group):
            xg = xp[:, g * cin_g:(g + 1) * cin_g]
            for i in range(kh):
                for j in range(kh):
                    y[:, g * og:(g + 1) * og] += np.einsum(
                        "nchw,oc->nohw", xg[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride],
                        k[g * og:(g + 1) * og, :, i, j])
        return y + w[f"{name}.bias"][None, :, None, None] if bias else y

    def bn(x, name):
        s = w[f"{name}.weight"] / np.sqrt(w[f"{name}.running_var"] + 1e-5)
        return (x - w[f"{name}.running_mean"][None, :, None, None]) * s[None, :, None, None] \
            + w[f"{name}.bias"][None, :, None, None]

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    def relu6(x):
        return np.clip(x, 0, 6)

    def hsig(x):
        return np.clip(x / 6 + 0.5, 0, 1)

    def hswish(x):
        return x * hsig(x)

    def silu(x):
        return x * sigmoid(x)

    def relu(x):
        return np.maximum(x, 0)

    x = hswish(bn(conv(x, "stem.0", stride=2), "stem.1"))
    x = relu6(bn(conv(x, "dw.0", group=16), "dw.1"))
    y = relu6(bn(conv(x, "block.expand.0"), "block.expand.1"))
    y = silu(bn(conv(y, "block.dw.0", group=48), "block.dw.1"))
    s = y.mean(axis=(2, 3), keepdims=True)
    s = sigmoid(conv(silu(conv(s, "block.se.fc1", bias=True)), "block.se.fc2", bias=True))
    y = bn(conv(s * y, "block.project.0"), "block.project.1")
    x = relu(bn(conv(x + y, "grouped.0", stride=2, group=4), "grouped.1"))
    x1, x2 = x[:, :16], x[:, 16:]
    x2 = relu(bn(conv(x2, "shuffle.branch2.0"), "shuffle.branch2.1"))
    x2 = bn(conv(x2, "shuffle.branch2.3", group=16), "shuffle.branch2.4")
    x2 = relu(bn(conv(x2, "shuffle.branch2.5"), "shuffle.branch2.6"))
    x = np.concatenate([x1, x2], axis=1)
    n, c, h, wd = x.shape
    x = x.reshape(n, 2, c // 2, h, wd).transpose(0, 2, 1, 3, 4).reshape(n, c, h, wd)
    x = x * hsig(x.mean(axis=(2, 3), keepdims=True))
    x = hswish(bn(conv(x[:, :24], "last.0"), "last.1"))
    return x.mean(axis=(2, 3)) @ w["fc.weight"].T + w["fc.bias"]


def test_mobile_tiny_matches_numpy():
    x, y = run("mobile_tiny")
    ref = _np_mobile_tiny(model("mobile_tiny"), x.astype(np.float64))
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


def test_channel_shuffle_interleaves_the_two_halves():
    # After the shuffle, channel 2i comes from the first half and 2i+1 from the second.
    from models.builder import GraphBuilder
    b = GraphBuilder("shuffle", batch=2, image_size=3, seed=0, in_channels=6)
    y = b.flatten(b.channel_shuffle("input", "s", 2), "flat")
    m = b.finish(y)
    x = np.arange(2 * 6 * 9, dtype=np.float32).reshape(2, 6, 3, 3)
    (got,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) \
        .run(None, {"input": x})
    np.testing.assert_array_equal(got.reshape(2, 6, 3, 3), x[:, [0, 3, 1, 4, 2, 5]])


# ------------------------------------------------------------------ numerics
@pytest.mark.parametrize("name", NAMES)
def test_onnxruntime_output_is_sane(name):
    x, y = run(name)
    assert y.shape == (BATCH, CLASSES[name])
    assert y.dtype == np.float32 and np.isfinite(y).all()
    assert 1e-3 < y.std() < 1e3
    # the output depends on the input, not only on biases
    assert not np.allclose(y[0], y[1])
    if name == "tiny_concat":
        np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)
    else:
        assert 1e-2 < y.std() < 1e2  # order one, not exploding/vanishing


def test_batch_and_image_size_are_respected():
    m = build("tiny", batch=3, image_size=48)
    assert dims(m.graph.input[0]) == [3, 3, 48, 48]
    assert dims(m.graph.output[0]) == [3, 10]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": np.ones((3, 3, 48, 48), np.float32)})
    assert y.shape == (3, 10)


@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "mobile_tiny", "squeezenet1_1",
                                  "inception", "shufflenet_v2"])
def test_default_input_shape(name):
    m = build(name)
    s = DEFAULT_SIZE[name]
    assert dims(m.graph.input[0]) == [1, 3, s, s]
    assert dims(m.graph.output[0]) == [1, CLASSES[name]]


@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "mobile_tiny", "squeezenet1_1",
                                  *MOBILE])
def test_minimum_image_size_runs(name):
    from models.zoo import INFO
    s = INFO[name].min_image_size
    m = build(name, image_size=s)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": np.ones((1, 3, s, s), np.float32)})
    assert y.shape == (1, CLASSES[name]) and np.isfinite(y).all()


def test_too_small_image_is_rejected():
    with pytest.raises(ValueError):
        build("resnet18", image_size=8)
    with pytest.raises(ValueError):
        build("tiny", batch=0)


# --------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "mobile_tiny", "squeezenet1_1",
                                  "inception", "shufflenet_v2"])
def test_same_seed_gives_identical_bytes(name):
    a = build(name, image_size=TEST_SIZE[name], seed=7).SerializeToString()
    b = build(name, image_size=TEST_SIZE[name], seed=7).SerializeToString()
    assert a == b


def test_weights_do_not_depend_on_input_size():
    a = build("tiny", image_size=32, seed=3)
    b = build("tiny", image_size=48, seed=3)
    assert [t.SerializeToString() for t in a.graph.initializer] == \
           [t.SerializeToString() for t in b.graph.initializer]


@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "mobile_tiny", "squeezenet1_1",
                                  "efficientnet_b0"])
def test_different_seed_gives_different_weights(name):
    a, b = model(name, 0), model(name, 1)
    assert ops(a) == ops(b)
    wa = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    wb = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    assert wa.keys() == wb.keys()
    weights = [k for k in wa if k.endswith(".weight")]
    assert weights and all(not np.array_equal(wa[k], wb[k]) for k in weights)


# ------------------------------------------------------------------------ API
def test_unknown_name_raises_keyerror_listing_known_names():
    with pytest.raises(KeyError) as exc:
        build("resnet1000")
    msg = str(exc.value)
    assert "resnet1000" in msg
    for n in NAMES:
        assert n in msg
    with pytest.raises(KeyError):
        save("nope", "/nonexistent/x.onnx")


def test_builders_take_keyword_only_arguments():
    with pytest.raises(TypeError):
        ZOO["tiny"](1)
    m = ZOO["tiny"](batch=1, image_size=None, seed=0)
    assert dims(m.graph.input[0]) == [1, 3, 32, 32]


def test_list_models_descriptions():
    entries = list_models()
    assert all(isinstance(n, str) and isinstance(d, str) and "\n" not in d
               for n, d in entries)


def test_save_roundtrip(tmp_path):
    path = save("tiny_concat", tmp_path / "sub" / "m.onnx", seed=5)
    loaded = onnx.load(str(path))
    assert loaded.SerializeToString() == build("tiny_concat", seed=5).SerializeToString()


def test_one_conv_is_a_bare_conv_with_relu():
    from tests.reference import conv2d_nchw
    m = build("one_conv", batch=4)
    assert ops(m) == ["Conv", "Relu"]
    assert dims(m.graph.input[0]) == [4, 16, 32, 32] and dims(m.graph.output[0]) == [4, 32, 32, 32]
    assert "1x16x32x32, 1 conv" in dict(list_models())["one_conv"]
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    x = np.random.default_rng(0).standard_normal((4, 16, 32, 32)).astype(np.float32)
    (y,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    ref = np.maximum(conv2d_nchw(x, inits["conv.weight"], padding=(1, 1, 1, 1), bias=inits["conv.bias"]), 0)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("opset", [17, 18])
def test_dynamo_pooling_rewrites_every_global_pool_and_keeps_the_outputs(opset):
    m = build("mobile_tiny", image_size=32)
    if opset != 17:
        m = onnx.version_converter.convert_version(m, opset)
    gaps = sum(n.op_type == "GlobalAveragePool" for n in m.graph.node)
    assert gaps >= 2          # the squeeze-and-excitation block's and the head's
    means = sum(n.op_type == "ReduceMean" for n in m.graph.node)
    d = models.dynamo_pooling(m)
    assert sum(n.op_type == "GlobalAveragePool" for n in d.graph.node) == 0
    assert sum(n.op_type == "ReduceMean" for n in d.graph.node) == means + gaps
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(run(d), run(m), rtol=1e-5, atol=1e-6)
