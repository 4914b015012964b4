"""Graphs beyond one input and one output, and every op TVM's importer takes: optimized through
``graphselect.optimize`` and checked output by output against onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphselect
from graphselect.errors import BuildError

RNG = np.random.default_rng(0)


def _t(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _w(name, shape, scale=0.2):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype("float32"), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One record store for the module: the shared conv is measured once."""
    return tmp_path_factory.mktemp("records") / "records.sqlite"


def _close(got, want, tol=1e-4):
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))
    assert err <= tol, err


def test_two_inputs_three_outputs(store):
    """conv -> relu and the same conv -> sigmoid as two outputs, a second input with its own
    output; every output checked (by optimize and here), run() returns all of them."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["y", "y"], ["z"])]
    m = _model(nodes, [_t("x", [1, 8, 16, 16]), _t("y", ["N", 4, 8, 8])],
               [_t("r", [1, 16, 16, 16]), _t("s", [1, 16, 16, 16]), _t("z", ["N", 4, 8, 8])],
               [_w("w", (16, 8, 3, 3)), _w("b", (16,))])
    res = graphselect.optimize(m, cache=store, benchmark_runs=2, max_rounds=1, input_shape={"y": (2, 4, 8, 8)},
                               families=["direct", "nchwc"])
    assert res.input_names == ("x", "y") and res.input_shapes == ((1, 8, 16, 16), (2, 4, 8, 8))
    assert [o["name"] for o in res.report["outputs"]] == ["r", "s", "z"]
    assert res.report["outputs"][2]["shape"] == [2, 4, 8, 8]
    assert res.report["reference"]["name"] == "onnxruntime" and res.report["max_rel_err"] < 1e-4
    x, y = RNG.standard_normal((1, 8, 16, 16)).astype("float32"), RNG.standard_normal((2, 4, 8, 8)).astype("float32")
    got = res.run(x, y)
    assert isinstance(got, tuple) and len(got) == 3
    for g, w in zip(got, _ort(m, {"x": x, "y": y})):
        _close(g, w)
    by_name = res.run({"y": y, "x": x})
    assert all(np.array_equal(a, b) for a, b in zip(got, by_name))
    with pytest.raises(graphselect.GraphSelectError, match="takes 2 input"):
        res.run(x)
    with pytest.raises(graphselect.GraphSelectError, match="input 'y' has shape"):
        res.run(x, x)


def test_a_wrong_second_output_is_caught(store, monkeypatch):
    """The check compares every output, not only the first."""
    from graphselect.measure import reference as ref_mod
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Sigmoid", ["c"], ["s"])]
    m = _model(nodes, [_t("x", [1, 4, 8, 8])], [_t("r", [1, 8, 6, 6]), _t("s", [1, 8, 6, 6])],
               [_w("w", (8, 4, 3, 3))])
    real = ref_mod.reference

    def off_second(model, feeds, threads):
        r = real(model, feeds, threads)
        return ref_mod.Reference(r.name, r.session, (r.outputs[0], r.outputs[1] + 0.5), r.why)

    monkeypatch.setattr(ref_mod, "reference", off_second)
    with pytest.raises(BuildError, match="output 's'"):
        graphselect.optimize(m, cache=store, benchmark_runs=0, families=["direct"])


# one conv feeding the op under test, as a CNN would; (nodes after the conv, extra inits, output shape)
def _op_cases():
    c = [1, 8, 8, 8]
    return {
        "LRN": ([helper.make_node("LRN", ["c"], ["y"], size=3, alpha=1e-2, beta=0.75, bias=1.0)], [], c),
        "Sum": ([helper.make_node("Sum", ["c", "c", "k"], ["y"])], [_w("k", (1, 8, 1, 1))], c),
        "Max": ([helper.make_node("Max", ["c", "k"], ["y"])], [_w("k", (1, 8, 1, 1))], c),
        "Min": ([helper.make_node("Min", ["c", "k"], ["y"])], [_w("k", (1, 8, 1, 1))], c),
        "Mean": ([helper.make_node("Mean", ["c", "k"], ["y"])], [_w("k", (1, 8, 1, 1))], c),
        "InstanceNormalization": ([helper.make_node("InstanceNormalization", ["c", "g", "be"], ["y"])],
                                  [_w("g", (8,)), _w("be", (8,))], c),
        "Resize": ([helper.make_node("Resize", ["c", "", "sc"], ["y"], mode="nearest")],
                   [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")], [1, 8, 16, 16]),
        "Upsample": ([helper.make_node("Upsample", ["c", "sc"], ["y"], mode="nearest")],
                     [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")], [1, 8, 16, 16]),
        "PRelu": ([helper.make_node("PRelu", ["c", "sl"], ["y"])], [_w("sl", (8, 1, 1))], c),
        "Elu": ([helper.make_node("Elu", ["c"], ["y"], alpha=0.7)], [], c),
        "Softplus": ([helper.make_node("Softplus", ["c"], ["y"])], [], c),
        "GELU (Erf)": ([helper.make_node("Div", ["c", "sq2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                        helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["c", "e1"], ["h"]),
                        helper.make_node("Mul", ["h", "half"], ["y"])],
                       [numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sq2"),
                        numpy_helper.from_array(np.array(1, np.float32), "one"),
                        numpy_helper.from_array(np.array(0.5, np.float32), "half")], c),
        "ConvTranspose": ([helper.make_node("ConvTranspose", ["c", "wt"], ["y"], strides=[2, 2])],
                          [_w("wt", (8, 4, 2, 2))], [1, 4, 16, 16]),
    }


CASES = _op_cases()


@pytest.mark.parametrize("op", list(CASES))
def test_op_the_importer_takes_runs_and_matches(op, store):
    nodes, inits, out = CASES[op]
    opset = 9 if op == "Upsample" else 17
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])
    m = _model([conv] + nodes, [_t("x", [1, 4, 8, 8])], [_t("y", out)],
               [_w("w", (8, 4, 3, 3)), _w("b", (8,))] + inits, opset=opset)
    res = graphselect.optimize(m, cache=store, benchmark_runs=0, families=["direct"])
    assert res.report["conv_layers"] >= 1
    x = RNG.standard_normal((1, 4, 8, 8)).astype("float32")
    _close(res.run(x), _ort(m, {"x": x})[0])


def test_dilated_convs_get_candidates(store):
    """A dilated 3x3 (DeepLab-style) and a dilated depthwise conv: measured candidates of their
    own (direct and blocked; direct for the depthwise one), outputs equal to onnxruntime's."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[2, 2, 2, 2], dilations=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[3, 3, 3, 3], dilations=[3, 3], group=16)]
    m = _model(nodes, [_t("x", [1, 8, 12, 12])], [_t("y", [1, 16, 12, 12])],
               [_w("w1", (16, 8, 3, 3)), _w("b1", (16,)), _w("w2", (16, 1, 3, 3))])
    res = graphselect.optimize(m, cache=store, benchmark_runs=0)
    layers = {l["name"]: l for l in res.report["layers"]} if "layers" in res.report else {}
    assert len(res.assignment) >= 2
    fams = {name: key.split("(")[0] for name, key in res.assignment.items() if name.startswith("conv")}
    assert set(fams) == {"conv0", "conv1"}, res.assignment
    assert fams["conv1"] == "direct"
    cands = res.extra["plan"].table("conv0").options
    assert {o.family for o in cands} >= {"direct", "nchwc"}
    assert res.extra["lg"].layers["conv0"].conv.dilation == (2, 2)
    x = RNG.standard_normal((1, 8, 12, 12)).astype("float32")
    _close(res.run(x), _ort(m, {"x": x})[0])
    del layers


@pytest.mark.parametrize("solver", ["greedy", "pbqp", "brute", "dp"])
def test_every_solver_runs_through_optimize(solver, store):
    """Each --solver choice builds a network that matches onnxruntime and reports its method
    (dp without the cache term, the only form it is exact in; a chain, the graphs it takes)."""
    import models
    m = models.build("mobile_tiny") if solver not in ("dp", "brute") else models.build("one_conv")
    res = graphselect.optimize(m, cache=store, benchmark_runs=0, solver=solver,
                               cache_budget="off" if solver == "dp" else "auto",
                               families=["direct", "nchwc", "depthwise"])
    assert res.report["solver"]["method"] == solver
    x = RNG.standard_normal(res.input_shape).astype("float32")
    _close(res.run(x), _ort(m, {res.input_name: x})[0])
    # graphs a solver cannot take are refused before anything is measured
    refused = {"dp": ("tiny", "chains and trees"), "brute": ("mobile_tiny", "brute force would try")}
    if solver in refused:
        name, words = refused[solver]
        with pytest.raises(graphselect.GraphSelectError, match=words):
            graphselect.optimize(models.build(name), cache=None, benchmark_runs=0, solver=solver, cache_budget="off",
                                 progress=lambda stage, *_: stage == "measure" and pytest.fail("measured"))


def test_cli_takes_a_shape_per_input(tmp_path, capsys):
    """`--input-shape` repeated, one per dynamic input; the report lists both inputs and outputs."""
    import json
    import onnx
    from graphselect import cli
    nodes = [helper.make_node("Conv", ["a", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["b", "b"], ["s"])]
    m = _model(nodes, [_t("a", ["N", 4, "H", "W"]), _t("b", ["N", 2])], [_t("r", ["N", 8, "H", "W"]), _t("s", ["N", 2])],
               [_w("w", (8, 4, 3, 3))])
    onnx.save(m, tmp_path / "two.onnx")
    out = tmp_path / "out"
    argv = ["optimize", str(tmp_path / "two.onnx"), "--cache", str(tmp_path / "r.sqlite"), "--runs", "0",
            "--families", "direct", "-o", str(out)]
    assert cli.main(argv + ["--input-shape", "a:1,4,8,8"]) == 2
    assert "'b' has a dynamic shape" in capsys.readouterr().err
    assert cli.main(argv + ["--input-shape", "a:1,4,8,8", "--input-shape", "b:1,2"]) == 0, capsys.readouterr().err
    rep = json.loads((out / "report.json").read_text())
    assert rep["inputs"] == [{"name": "a", "shape": [1, 4, 8, 8]}, {"name": "b", "shape": [1, 2]}]
    assert [o["name"] for o in rep["outputs"]] == ["r", "s"] and rep["outputs"][0]["shape"] == [1, 8, 8, 8]


def test_a_layer_with_an_unknown_shape_is_an_error_not_free(store):
    """NonZero's output size depends on the data: the layer reading it cannot be measured, and
    optimize says so naming it instead of costing it as free plumbing."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT), helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    m = _model(nodes, [_t("x", [1, 2, 4, 4])], [_t("y", [])], [_w("w", (2, 2, 3, 3))])
    with pytest.raises(graphselect.UnsupportedModel, match="shape is not static"):
        graphselect.optimize(m, cache=store, benchmark_runs=0, families=["direct"])


def test_old_opsets_optimize_against_a_converted_reference(store):
    """The issue's two cases: BatchNormalization at opset 6 and AveragePool at opset 1 (valid ONNX
    onnxruntime has no kernels for) optimize; the reference is onnxruntime after conversion."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pure"))
    from test_reference import _bn_opset6, _expected
    x = RNG.standard_normal((1, 3, 4, 4)).astype("float32")
    m = _bn_opset6()
    r = graphselect.optimize(m, cache=store, benchmark_runs=0)
    assert r.report["reference"]["name"] == "onnxruntime (opset 6 converted to 17)"
    assert "BatchNormalization(6)" in r.report["reference"]["why"]
    _close(r.run(x), _expected(x, m).astype("float32"))
    n = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    g = helper.make_graph([n], "ap", [_t("x", [1, 3, 4, 4])], [_t("y", [1, 3, 2, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 1)], ir_version=3)
    r = graphselect.optimize(m, cache=store, benchmark_runs=0)
    assert r.report["reference"]["name"] == "onnxruntime (opset 1 converted to 17)"
    _close(r.run(x), x.reshape(1, 3, 2, 2, 2, 2).mean(axis=(3, 5)))
