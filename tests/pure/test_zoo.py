"""Tests for the ONNX model zoo (models/): structure, numerics, determinism, API."""

from __future__ import annotations

import functools
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import models
from models import ZOO, build, list_models, save

NAMES = ["resnet18", "resnet50", "vgg11", "squeezenet1_1", "inception", "tiny",
         "tiny_concat"]
CONVS = {"resnet18": 20, "resnet50": 53, "vgg11": 8, "squeezenet1_1": 26,
         "inception": 22, "tiny": 3, "tiny_concat": 4}
CLASSES = {n: 1000 for n in NAMES} | {"tiny": 10, "tiny_concat": 10}
DEFAULT_SIZE = {n: 224 for n in NAMES} | {"tiny": 32, "tiny_concat": 32}
# Small inputs keep the file fast; every architecture still works at this size.
TEST_SIZE = {n: 64 for n in NAMES} | {"tiny": 32, "tiny_concat": 32}
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
    assert list(ZOO) == NAMES
    assert [n for n, _ in list_models()] == NAMES
    assert models.__all__ == ["ZOO", "build", "list_models", "save", "prune"]


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
def test_batchnorm_follows_every_conv_except_squeezenet(name):
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
    assert len(bns) == len(convs)
    for c in convs:
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
    assert all(t.data_type == onnx.TensorProto.FLOAT for t in m.graph.initializer)
    assert len({t.name for t in m.graph.initializer}) == len(m.graph.initializer)


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


@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "squeezenet1_1", "inception"])
def test_default_input_shape(name):
    m = build(name)
    s = DEFAULT_SIZE[name]
    assert dims(m.graph.input[0]) == [1, 3, s, s]
    assert dims(m.graph.output[0]) == [1, CLASSES[name]]


@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "squeezenet1_1"])
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
@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "squeezenet1_1", "inception"])
def test_same_seed_gives_identical_bytes(name):
    a = build(name, image_size=TEST_SIZE[name], seed=7).SerializeToString()
    b = build(name, image_size=TEST_SIZE[name], seed=7).SerializeToString()
    assert a == b


def test_weights_do_not_depend_on_input_size():
    a = build("tiny", image_size=32, seed=3)
    b = build("tiny", image_size=48, seed=3)
    assert [t.SerializeToString() for t in a.graph.initializer] == \
           [t.SerializeToString() for t in b.graph.initializer]


@pytest.mark.parametrize("name", ["tiny", "tiny_concat", "squeezenet1_1"])
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
