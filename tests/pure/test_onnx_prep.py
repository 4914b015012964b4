"""ONNX-level clean-up: loading, shape fixing, constant and BatchNorm folding, refusals.

Every model is built here with onnx.helper; numerics are checked against onnxruntime on the
original model.
"""
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphselect.errors import GraphSelectError, UnsupportedModel
from graphselect.frontend.onnx_prep import CNN_OPS, Prepared, fold_batchnorm, load_model, prepare

RNG = np.random.default_rng(0)


def _t(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _w(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=8, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = ir_version  # older onnxruntime builds refuse the newest IR
    return m


def _run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _assert_close(ref, got, rtol=1e-5):
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape
        assert np.max(np.abs(r - g)) <= rtol * max(np.max(np.abs(r)), 1e-6)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _bn_params(prefix, c):
    return [_w(f"{prefix}_gamma", RNG.uniform(0.5, 2.0, c).astype(np.float32)),
            _w(f"{prefix}_beta", RNG.normal(size=c).astype(np.float32)),
            _w(f"{prefix}_mean", RNG.normal(size=c).astype(np.float32)),
            _w(f"{prefix}_var", RNG.uniform(0.1, 3.0, c).astype(np.float32))]


def _bn(prefix, x, y, eps=1e-3):
    ins = [x] + [f"{prefix}_{p}" for p in ("gamma", "beta", "mean", "var")]
    return helper.make_node("BatchNormalization", ins, [y], name=prefix, epsilon=eps)


def _conv_bn_model(bias, group=1):
    cin, cout = 3, 6
    inits = [_w("w", RNG.normal(size=(cout, cin // group, 3, 3)).astype(np.float32)), *_bn_params("bn", cout)]
    conv_in = ["x", "w"]
    if bias:
        inits.append(_w("b", RNG.normal(size=cout).astype(np.float32)))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1], group=group),
             _bn("bn", "c", "bn_out"),
             helper.make_node("Relu", ["bn_out"], ["y"], name="relu")]
    return _model(nodes, [_t("x", [1, cin, 8, 8])], [_t("y", [1, cout, 8, 8])], inits)


X = RNG.normal(size=(1, 3, 8, 8)).astype(np.float32)


# --- BatchNorm folding -------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("group", [1, 3])
def test_bn_folds_into_conv_and_matches(bias, group):
    m = _conv_bn_model(bias, group)
    p = prepare(m)
    assert isinstance(p, Prepared)
    assert p.folded_bn == 1
    assert _ops(p.model) == ["Conv", "Relu"]
    conv = p.model.graph.node[0]
    assert len(conv.input) == 3 and conv.output[0] == "bn_out"
    assert p.output_names == ("y",)
    _assert_close(_run(m, X), _run(p.model, X))


def test_bn_folded_conv_can_feed_a_graph_output_directly():
    m = _conv_bn_model(bias=True)
    del m.graph.node[2]  # the Relu: the BN output is now the graph output
    m.graph.output[0].name = "bn_out"
    p = prepare(m)
    assert p.folded_bn == 1 and _ops(p.model) == ["Conv"]
    assert p.output_names == ("bn_out",)
    _assert_close(_run(m, X), _run(p.model, X))


def test_bn_not_folded_when_conv_output_is_used_twice():
    inits = [_w("w", RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)), *_bn_params("bn", 4)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             _bn("bn", "c", "n"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["n", "r"], ["y"], name="add")]
    m = _model(nodes, [_t("x", [1, 3, 8, 8])], [_t("y", [1, 4, 8, 8])], inits)
    p = prepare(m)
    assert p.folded_bn == 0
    assert _ops(p.model) == ["Conv", "BatchNormalization", "Relu", "Add"]
    _assert_close(_run(m, X), _run(p.model, X))


def test_fold_batchnorm_with_a_weight_shared_by_two_convs():
    inits = [_w("w", RNG.normal(size=(3, 3, 1, 1)).astype(np.float32)), *_bn_params("bn1", 3), *_bn_params("bn2", 3)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1"), _bn("bn1", "c1", "a"),
             helper.make_node("Conv", ["a", "w"], ["c2"], name="conv2"), _bn("bn2", "c2", "y")]
    m = _model(nodes, [_t("x", [1, 3, 8, 8])], [_t("y", [1, 3, 8, 8])], inits)
    before = m.SerializeToString()
    folded, n = fold_batchnorm(m)
    assert n == 2 and _ops(folded) == ["Conv", "Conv"]
    assert folded.graph.node[0].input[1] != folded.graph.node[1].input[1]
    assert "w" not in {t.name for t in folded.graph.initializer}  # no longer used
    onnx.checker.check_model(folded)
    assert m.SerializeToString() == before
    _assert_close(_run(m, X), _run(folded, X))


# --- PyTorch exporter patterns -----------------------------------------------------------------

def _torch_style_model(ir_version=4, opset=11):
    """Conv -> Relu -> flatten written as Shape/Gather/Unsqueeze/Concat/Reshape -> Gemm, with the
    weights also listed as graph inputs and scalars as Constant nodes, like torch.onnx of old."""
    w = RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)
    fc_w = RNG.normal(size=(10, 4 * 6 * 6)).astype(np.float32)
    fc_b = RNG.normal(size=10).astype(np.float32)
    inits = [_w("conv.weight", w), _w("fc.weight", fc_w), _w("fc.bias", fc_b)]
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight"], ["1"], name="Conv_0"),
        helper.make_node("Relu", ["1"], ["2"], name="Relu_1"),
        helper.make_node("Shape", ["2"], ["3"], name="Shape_2"),
        helper.make_node("Constant", [], ["4"], name="Constant_3",
                         value=helper.make_tensor("", TensorProto.INT64, [], [0])),
        helper.make_node("Gather", ["3", "4"], ["5"], name="Gather_4", axis=0),
        helper.make_node("Unsqueeze", ["5"], ["6"], name="Unsqueeze_5", axes=[0]),
        helper.make_node("Constant", [], ["7"], name="Constant_6",
                         value=helper.make_tensor("", TensorProto.INT64, [1], [-1])),
        helper.make_node("Concat", ["6", "7"], ["8"], name="Concat_7", axis=0),
        helper.make_node("Reshape", ["2", "8"], ["9"], name="Reshape_8"),
        helper.make_node("Gemm", ["9", "fc.weight", "fc.bias"], ["out"], name="Gemm_9", transB=1),
    ]
    inputs = [_t("x", [1, 3, 8, 8]), _t("conv.weight", list(w.shape)), _t("fc.weight", list(fc_w.shape)),
              _t("fc.bias", list(fc_b.shape))]
    return _model(nodes, inputs, [_t("out", [1, 10])], inits, opset=opset, ir_version=ir_version)


@pytest.mark.parametrize("ir_version", [3, 4])
def test_torch_exporter_patterns_fold_away(ir_version):
    m = _torch_style_model(ir_version=ir_version, opset=9 if ir_version == 3 else 11)
    if ir_version == 3:  # opset 9 Unsqueeze is the same; only the IR differs
        onnx.checker.check_model(m)
    p = prepare(m)
    assert [i.name for i in p.model.graph.input] == ["x"]
    assert _ops(p.model) == ["Conv", "Relu", "Reshape", "Gemm"]
    reshape = p.model.graph.node[2]
    shape = {t.name: numpy_helper.to_array(t) for t in p.model.graph.initializer}[reshape.input[1]]
    assert shape.tolist() == [1, -1]
    assert {t.name for t in p.model.graph.initializer} == {"conv.weight", "fc.weight", "fc.bias", reshape.input[1]}
    assert p.output_names == ("out",) and p.input_shape == (1, 3, 8, 8)
    assert any("initializers" in n for n in p.notes)
    _assert_close(_run(m, X), _run(p.model, X))


def test_shape_of_a_folded_reshape_folds_too():
    # The second Shape only becomes static once the first Reshape has a constant shape.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape1"),
        helper.make_node("Slice", ["s", "zero", "two", "zero"], ["nc"], name="slice"),
        helper.make_node("Concat", ["nc", "minus1"], ["s2"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "s2"], ["r"], name="reshape1"),
        helper.make_node("Shape", ["r"], ["s3"], name="shape2"),
        helper.make_node("Gather", ["s3", "zero_scalar"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["s4"], name="cat2", axis=0),
        helper.make_node("Reshape", ["r", "s4"], ["y"], name="reshape2"),
    ]
    inits = [_w("zero", np.array([0], np.int64)), _w("two", np.array([2], np.int64)),
             _w("minus1", np.array([-1], np.int64)), _w("zero_scalar", np.array(0, np.int64))]
    m = _model(nodes, [_t("x", [1, 3, 8, 8])], [_t("y", [1, 192])], inits)
    p = prepare(m)
    assert _ops(p.model) == ["Reshape", "Reshape"]
    _assert_close(_run(m, X), _run(p.model, X))


def test_identity_and_dropout_removed_and_output_name_kept():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Identity", ["a"], ["b"], name="id_mid"),
             helper.make_node("Dropout", ["b"], ["c"], name="drop"),
             helper.make_node("Sigmoid", ["c"], ["d"], name="sig"),
             helper.make_node("Identity", ["d"], ["out"], name="id_out"),
             helper.make_node("Tanh", ["d"], ["e"], name="tanh"),
             helper.make_node("Dropout", ["e"], ["out2", "mask"], name="drop_out")]
    m = _model(nodes, [_t("x", [1, 3, 8, 8])], [_t("out", [1, 3, 8, 8]), _t("out2", [1, 3, 8, 8])])
    p = prepare(m)
    assert "Identity" not in _ops(p.model) and "Dropout" not in _ops(p.model)
    assert p.output_names == ("out", "out2")
    assert {o for n in p.model.graph.node for o in n.output} >= {"out", "out2"}
    _assert_close(_run(m, X), _run(p.model, X))


def test_identity_from_input_to_output_is_kept():
    m = _model([helper.make_node("Identity", ["x"], ["y"])], [_t("x", [1, 3])], [_t("y", [1, 3])])
    p = prepare(m)
    assert _ops(p.model) == ["Identity"] and p.output_names == ("y",)


def test_dropout_in_training_mode_is_kept():
    nodes = [helper.make_node("Dropout", ["x", "", "train"], ["y"], name="drop")]
    m = _model(nodes, [_t("x", [1, 3])], [_t("y", [1, 3])], [_w("train", np.array(True))])
    assert _ops(prepare(m).model) == ["Dropout"]


# --- Input shape -------------------------------------------------------------------------------

def _dynamic_model():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _model(nodes, [_t("x", ["N", 3, 224, 224])], [_t("y", ["N", 3, 224, 224])])


def test_dynamic_batch_without_override_is_refused():
    with pytest.raises(UnsupportedModel) as e:
        prepare(_dynamic_model())
    msg = str(e.value)
    assert "input 'x'" in msg and "[N,3,224,224]" in msg
    assert "--input-shape x:1,3,224,224" in msg


def test_dynamic_batch_with_override():
    m = _dynamic_model()
    p = prepare(m, input_shapes={"x": (2, 3, 224, 224)})
    assert p.input_shape == (2, 3, 224, 224)
    dims = [d.dim_value for d in p.model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 224, 224]
    out_dims = [d.dim_value for d in p.model.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == [2, 3, 224, 224]
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # caller's model untouched


@pytest.mark.parametrize("shapes, words", [
    ({"y": (1, 3, 224, 224)}, "'y'"),
    ({"x": (1, 3, 224)}, "rank"),
    ({"x": (0, 3, 224, 224)}, "positive"),
])
def test_bad_override_is_refused(shapes, words):
    with pytest.raises(UnsupportedModel, match=words):
        prepare(_dynamic_model(), input_shapes=shapes)


@pytest.mark.parametrize("with_matmul", [False, True])
def test_override_inconsistent_with_the_graph_is_refused(with_matmul):
    # Reshape to a fixed [1, 48] (caught by our element count) or [N, -1] then a 48-row MatMul
    # (caught by ONNX shape inference) both break with a 3x5x5 image.
    if with_matmul:
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
        inits = [_w("shape", np.array([1, -1], np.int64)), _w("w", np.zeros((48, 2), np.float32))]
        out = _t("y", [1, 2])
    else:
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
        inits, out = [_w("shape", np.array([1, 48], np.int64))], _t("y", [1, 48])
    m = _model(nodes, [_t("x", [1, 3, "H", "W"])], [out], inits)
    assert prepare(m, input_shapes={"x": (1, 3, 4, 4)}).input_shape == (1, 3, 4, 4)
    with pytest.raises(UnsupportedModel, match="inconsistent.*input-shape"):
        prepare(m, input_shapes={"x": (1, 3, 5, 5)})


# --- Refusals ----------------------------------------------------------------------------------

def test_unsupported_ops_are_named_with_their_node():
    lstm_w = [_w("W", np.zeros((1, 12, 4), np.float32)), _w("R", np.zeros((1, 12, 3), np.float32))]
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["h"], name="lstm_1", hidden_size=3),
             helper.make_node("MyOp", ["h"], ["y"], name="custom", domain="com.example"),
             helper.make_node("LSTM", ["x", "W", "R"], ["h2"], name="lstm_2", hidden_size=3)]
    m = _model(nodes, [_t("x", [5, 1, 4])], [_t("y", None), _t("h2", [5, 1, 1, 3])], lstm_w,
               extra_opsets=[helper.make_opsetid("com.example", 1)])
    m.graph.output[0].type.tensor_type.shape.SetInParent()  # the checker wants a shape field
    m.graph.output[0].type.tensor_type.shape.dim.add()
    # the compiler's importer decides (here: one that takes the CNN ops but not LSTM)
    with pytest.raises(UnsupportedModel) as e:
        prepare(m, ops=CNN_OPS)
    msg = str(e.value)
    assert "LSTM (node 'lstm_1')" in msg and "lstm_2" not in msg
    assert "com.example.MyOp (node 'custom')" in msg
    assert "importer" in msg
    # another domain's op is refused whatever the importer takes
    with pytest.raises(UnsupportedModel, match="com.example.MyOp") as e:
        prepare(m, ops=CNN_OPS | {"LSTM"})
    assert "LSTM" not in str(e.value)


def test_two_inputs_each_get_their_shape():
    m = _model([helper.make_node("Add", ["a", "b"], ["y"])], [_t("a", ["N", 3]), _t("b", [1, 3])], [_t("y", [1, 3])])
    with pytest.raises(UnsupportedModel, match="'a' has a dynamic shape"):
        prepare(m)
    p = prepare(m, input_shapes={"a": (1, 3)})
    assert p.input_names == ("a", "b") and p.input_shapes == ((1, 3), (1, 3))
    assert p.shapes == {"a": (1, 3), "b": (1, 3)} and p.input_name == "a"
    with pytest.raises(UnsupportedModel, match="'c'.*inputs are 'a', 'b'"):
        prepare(m, input_shapes={"a": (1, 3), "c": (1, 3)})


def test_integer_input_is_refused():
    m = _model([helper.make_node("Identity", ["ids"], ["y"])], [_t("ids", [1, 3], TensorProto.INT64)],
               [_t("y", [1, 3], TensorProto.INT64)])
    with pytest.raises(UnsupportedModel, match="int64"):
        prepare(m)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(GraphSelectError) as e:
        load_model(path)
    assert type(e.value) is GraphSelectError
    assert str(e.value) == f"model file not found: {path}"


def test_garbage_bytes_and_garbage_file(tmp_path):
    garbage = b"\x00\xffnot an onnx model at all\x13\x37" * 10
    with pytest.raises(UnsupportedModel):
        load_model(garbage)
    (tmp_path / "bad.onnx").write_bytes(garbage)
    with pytest.raises(UnsupportedModel):
        prepare(tmp_path / "bad.onnx")


def test_checker_failure_is_unsupported_model():
    m = _model([helper.make_node("Relu", ["nowhere"], ["y"])], [_t("x", [1, 3])], [_t("y", [1, 3])])
    with pytest.raises(UnsupportedModel, match="checker"):
        load_model(m)


# --- Loading -----------------------------------------------------------------------------------

def test_load_from_path_bytes_and_external_data(tmp_path):
    m = _conv_bn_model(bias=True)
    assert load_model(m) is m
    assert load_model(m.SerializeToString()).SerializeToString() == m.SerializeToString()
    ext = onnx.ModelProto()
    ext.CopyFrom(m)
    path = tmp_path / "ext.onnx"
    onnx.save_model(ext, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size > 0
    loaded = load_model(str(path))
    want = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    got = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])
    p = prepare(path)
    assert p.folded_bn == 1
    _assert_close(_run(m, X), _run(p.model, X))


def test_callers_model_is_not_mutated():
    for m in (_torch_style_model(), _conv_bn_model(bias=False), _dynamic_model()):
        before = m.SerializeToString()
        prepare(m, input_shapes={"x": tuple(d.dim_value or 1 for d in m.graph.input[0].type.tensor_type.shape.dim)})
        assert m.SerializeToString() == before


def test_prepared_model_is_checked_and_fully_shaped():
    p = prepare(_torch_style_model())
    onnx.checker.check_model(p.model)
    names = {v.name for v in p.model.graph.value_info}
    assert {"1", "2", "9"} <= names
    assert not any("without a static shape" in n for n in p.notes)
    assert set(_ops(p.model)) <= CNN_OPS


# --- Mobile networks: Split, Slice and the exporter's shape chains ------------------------------

def test_split_and_slice_of_a_runtime_tensor_stay_and_constant_ones_fold():
    # Split/Slice of the input are compute; Split/Slice of a constant shape fold into the Reshape.
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=1),
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["c"], name="slice"),
        helper.make_node("Concat", ["b", "a", "c"], ["cat"], name="cat", axis=1),
        helper.make_node("Shape", ["cat"], ["s"], name="shape"),
        helper.make_node("Split", ["s", "halves"], ["s01", "s23"], name="split_shape", axis=0),
        helper.make_node("Slice", ["s23", "zero", "one", "zero"], ["h"], name="slice_shape"),
        helper.make_node("Concat", ["s01", "h", "minus1"], ["target"], name="cat_shape", axis=0),
        helper.make_node("Reshape", ["cat", "target"], ["y"], name="reshape"),
    ]
    inits = [_w("sizes", np.array([1, 2], np.int64)), _w("starts", np.array([1], np.int64)),
             _w("ends", np.array([3], np.int64)), _w("axes", np.array([1], np.int64)),
             _w("halves", np.array([2, 2], np.int64)), _w("zero", np.array([0], np.int64)),
             _w("one", np.array([1], np.int64)), _w("minus1", np.array([-1], np.int64))]
    m = _model(nodes, [_t("x", [1, 3, 8, 8])], [_t("y", [1, 5, 8, 8])], inits)
    p = prepare(m)
    assert _ops(p.model) == ["Split", "Slice", "Concat", "Reshape"]
    init = {t.name: numpy_helper.to_array(t) for t in p.model.graph.initializer}
    assert init[p.model.graph.node[3].input[1]].tolist() == [1, 5, 8, -1]
    assert any("1 Split" in n and "1 Slice" in n for n in p.notes)
    _assert_close(_run(m, X), _run(p.model, X))


def _assert_shape_chains_folded(p: Prepared):
    init = {t.name for t in p.model.graph.initializer}
    assert not {"Shape", "Gather", "Unsqueeze", "Div", "Cast", "Constant"} & set(_ops(p.model))
    for n in p.model.graph.node:
        if n.op_type in ("Reshape", "Split", "Slice"):
            assert n.input[0] not in init  # a runtime op on activations ...
            assert all(i in init for i in n.input[1:] if i), n.name  # ... with constant parameters
    assert set(_ops(p.model)) <= CNN_OPS


@pytest.mark.parametrize("name, size", [("mobile_tiny", 32), ("shufflenet_v2", 64)])
def test_zoo_channel_shuffle_chains_fold(name, size):
    import models
    m = models.build(name, image_size=size, batch=2)
    p = prepare(m)
    assert p.folded_bn == sum(n.op_type == "BatchNormalization" for n in m.graph.node)
    _assert_shape_chains_folded(p)
    ops = _ops(p.model)
    assert ops.count("Reshape") == 2 * ops.count("Transpose") > 0
    assert ops.count("Split") == _ops(m).count("Split") > 0
    x = RNG.normal(size=(2, 3, size, size)).astype(np.float32)
    _assert_close(_run(m, x), _run(p.model, x))


@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "regnet_x_400mf"])
def test_mobile_zoo_models_are_accepted(name):
    import models
    m = models.build(name, image_size=32)
    p = prepare(m)
    assert p.folded_bn == sum(n.op_type == "BatchNormalization" for n in m.graph.node) > 0
    assert _ops(p.model).count("Conv") == _ops(m).count("Conv")
    assert set(_ops(p.model)) <= CNN_OPS
    x = RNG.normal(size=(1, 3, 32, 32)).astype(np.float32)
    _assert_close(_run(m, x), _run(p.model, x), rtol=1e-4)


TORCH_MOBILE = Path(__file__).resolve().parents[1] / "data" / "torch_mobile.onnx"


def test_torch_mobile_export_is_accepted():
    # What torch.onnx (TorchScript, opset 17) writes for ReLU6, SiLU, Hardswish, Hardsigmoid, SE,
    # chunk (Shape/Gather/Add/Div/Mul -> Slice), channel_shuffle (x.size() -> view/transpose/view).
    raw = onnx.load(str(TORCH_MOBILE))
    assert {"Shape", "Gather", "Slice", "Transpose", "Reshape", "HardSwish", "HardSigmoid", "Clip",
            "Constant", "Sigmoid", "ReduceMean"} <= set(_ops(raw))
    with pytest.raises(UnsupportedModel, match="dynamic shape"):
        prepare(TORCH_MOBILE)
    p = prepare(TORCH_MOBILE, input_shapes={"images": (2, 3, 32, 32)})
    assert p.input_shape == (2, 3, 32, 32) and p.output_names == ("logits",)
    assert p.folded_bn == 10 and _ops(p.model).count("Conv") == 12
    _assert_shape_chains_folded(p)
    assert _ops(p.model).count("Slice") == 3  # the two chunk halves and x[:, :24]
    x = RNG.normal(size=(2, 3, 32, 32)).astype(np.float32)
    _assert_close(_run(raw, x), _run(p.model, x), rtol=1e-4)
