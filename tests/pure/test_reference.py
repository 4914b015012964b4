"""The reference a built network is checked against, when onnxruntime cannot run the model."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphselect.errors import BuildError
from graphselect.measure import reference as ref_mod


def _bn_opset6():
    """BatchNormalization at opset 6 (the ONNX backend tests' old form): valid ONNX that
    onnxruntime has no kernel for."""
    c = 3
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
             [("s", np.array([1.0, 1.5, 2.0])), ("bias", np.array([0.0, 1.0, -1.0])),
              ("mean", np.array([0.5, 0.0, 1.0])), ("var", np.array([1.0, 2.0, 0.5]))]]
    node = helper.make_node("BatchNormalization", ["x", "s", "bias", "mean", "var"], ["y"], epsilon=1e-5, is_test=1)
    # IR 3: every initializer is also a graph input, as exporters of the time wrote them
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 4, 4])] + \
        [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, [c]) for t in inits]
    g = helper.make_graph([node], "bn6", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 4, 4])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)


def _expected(x, m):
    s, b, mean, var = (numpy_helper.to_array(t) for t in m.graph.initializer)
    k = s / np.sqrt(var + 1e-5)
    return (x - mean[None, :, None, None]) * k[None, :, None, None] + b[None, :, None, None]


def test_old_opset_is_converted_for_onnxruntime():
    m = _bn_opset6()
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|not implemented|Could not find"):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype("float32")
    r = ref_mod.reference(m, {"x": x}, threads=1)
    assert r.name == "onnxruntime (opset 6 converted to 17)" and r.timeable
    assert "BatchNormalization" in r.why
    np.testing.assert_allclose(r.outputs[0], _expected(x, m), rtol=1e-5, atol=1e-5)


def test_reference_evaluator_when_onnxruntime_cannot(monkeypatch):
    def no_ort(*_a, **_k):
        raise RuntimeError("no kernel")
    monkeypatch.setattr(ref_mod, "_session", no_ort)
    m = _bn_opset6()
    m = onnx.version_converter.convert_version(m, 15)      # the evaluator runs current op versions
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype("float32")
    r = ref_mod.reference(m, {"x": x}, threads=1)
    assert r.name == "onnx reference evaluator" and not r.timeable and "no kernel" in r.why
    np.testing.assert_allclose(r.outputs[0], _expected(x, m), rtol=1e-5, atol=1e-5)


def test_no_reference_at_all_is_a_clear_error(monkeypatch):
    def no_ort(*_a, **_k):
        raise RuntimeError("no kernel")
    monkeypatch.setattr(ref_mod, "_session", no_ort)
    node = helper.make_node("MyOp", ["x"], ["y"], domain="com.example")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(BuildError, match="no reference could run.*--no-verify"):
        ref_mod.reference(m, {"x": np.zeros(1, np.float32)}, threads=1)
