"""The ONNX project's own backend test models (shipped in the onnx package with their inputs and
recorded outputs) for Conv, BatchNormalization, pooling, padding and ReLU: each optimized by
graphselect and its outputs compared with the recorded ones.

The backend models pass weights, pads and BN statistics as graph inputs; a CNN carries them as
initializers, so every input after the first is bound to its recorded value first (as a user
exporting the layer with its weights would have it). Cases whose first input is not float32
(``maxpool_2d_uint8``, the int32 ``edge/reflect/wrap_pad``) are outside graphselect's scope and
are listed, not run. MaxPool with its argmax output is beyond TVM's importer, and BatchNormalization
in training mode is not inference (TVM would import it as the inference form): both are refused
with a message naming them."""
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import graphselect

PREFIXES = ("test_basic_conv_", "test_conv_with_", "test_batchnorm_", "test_averagepool_", "test_maxpool_",
            "test_globalaveragepool", "test_globalmaxpool", "test_constant_pad", "test_edge_pad", "test_reflect_pad",
            "test_wrap_pad", "test_relu")


def _cases():
    from onnx.backend.test.case.node import collect_testcases
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return {c.name: c for c in cases if c.name.startswith(PREFIXES) and c.model is not None and c.data_sets}


CASES = _cases()


def _bound(case):
    """The case's model with every input but the first turned into an initializer."""
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    inputs, _outputs = case.data_sets[0]
    names = [i.name for i in m.graph.input]
    keep = m.graph.input[0]
    for name, value in zip(names[1:], inputs[1:]):
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    del m.graph.input[:]
    m.graph.input.append(keep)
    if m.ir_version < 4:
        m.ir_version = 4
    return m, np.asarray(inputs[0])


def _in_scope(case) -> bool:
    return np.asarray(case.data_sets[0][0][0]).dtype == np.float32


def test_the_cases_are_there():
    assert sum(n.startswith("test_basic_conv_") or n.startswith("test_conv_with_") for n in CASES) >= 5
    assert any(n.startswith("test_batchnorm_") for n in CASES) and any(n.startswith("test_maxpool_") for n in CASES)
    assert any(n.endswith("_pad") for n in CASES) and "test_relu" in CASES
    assert sorted(n for n, c in CASES.items() if not _in_scope(c)) == \
        ["test_edge_pad", "test_maxpool_2d_uint8", "test_reflect_pad", "test_wrap_pad"]
    assert sum(_in_scope(c) for c in CASES.values()) >= 50


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("backend") / "records.sqlite"


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if _in_scope(c)))
def test_backend_model_optimizes_and_matches_its_recorded_output(name, store):
    case = CASES[name]
    model, x = _bound(case)
    if "with_argmax" in name:           # TVM's MaxPool converter has no indices output
        with pytest.raises(graphselect.UnsupportedModel, match="importer.*MaxPool"):
            graphselect.optimize(model, cache=store, benchmark_runs=0)
        return
    if "training_mode" in name:         # batch statistics: not inference (TVM would import it wrongly)
        with pytest.raises(graphselect.UnsupportedModel, match="training_mode=1.*inference"):
            graphselect.optimize(model, cache=store, benchmark_runs=0)
        return
    res = graphselect.optimize(model, cache=store, benchmark_runs=0, families=["direct", "nchwc"])
    got = res.run(x)
    got = got if isinstance(got, tuple) else (got,)
    want = case.data_sets[0][1]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        if w.dtype != np.float32:       # maxpool's argmax indices: compared exactly
            np.testing.assert_array_equal(g, w)
            continue
        np.testing.assert_allclose(g, w, rtol=max(case.rtol, 1e-4), atol=max(case.atol, 1e-5))
