"""Mobile CNNs (depthwise and grouped convs, SiLU/HardSwish/Sigmoid epilogues, squeeze-and-
excitation, channel shuffle, split/slice) through the whole pipeline, checked against
onnxruntime on inputs the pipeline never saw."""
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import tvm  # noqa: F401 - a hard dependency: a broken install must fail, not skip

import graphselect
import models
from graphselect.measure.jobs import TimingConfig

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)
DATA = Path(__file__).resolve().parents[1] / "data"


def _ort(model_bytes, x):
    s = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _check_fresh_inputs(res, model_bytes, seeds=(1, 2)):
    for seed in seeds:
        x = np.random.default_rng(seed).standard_normal(res.input_shape).astype("float32")
        got, want = res.run(x), _ort(model_bytes, x)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6)


def test_mobile_tiny_every_conv_is_selected_with_its_epilogue():
    m = models.build("mobile_tiny")
    res = graphselect.optimize(m, cache=None, benchmark_runs=0, timing=QUICK)
    rep = res.report
    assert rep["max_rel_err"] <= 1e-4
    convs = [l for l in rep["layers"] if l["kind"] == "conv"]
    # every Conv node of the model is a conv layer with measured candidates: none is left to TVM
    assert len(convs) == sum(1 for n in m.graph.node if n.op_type == "Conv")
    dw = [l for l in convs if " dw " in l["shape"]]
    grouped = [l for l in convs if " g" in l["shape"]]
    assert len(dw) == 3 and len(grouped) == 1
    for l in dw:
        fams = {c["family"] for c in l["candidates"] if c["cold_ms"] is not None}
        assert "depthwise" in fams
        assert {c["in_layout"] for c in l["candidates"]} >= {"NCHW"} and \
            any(c["in_layout"] != "NCHW" for c in l["candidates"])     # plain and blocked variants
    for l in grouped:
        assert {c["family"] for c in l["candidates"] if c["cold_ms"] is not None} >= {"direct"}
    # SiLU (Sigmoid·Mul), HardSwish and the SE gate's Sigmoid are absorbed into their convs
    epis = " ".join(l["epilogue"] for l in convs)
    for act in ("silu", "hardswish", "sigmoid"):
        assert act in epis
    _check_fresh_inputs(res, m.SerializeToString())


def test_torch_exported_mobile_blocks():
    """The TorchScript exporter's own output: Shape chains, Slice for chunk, HardSwish, SE."""
    path = DATA / "torch_mobile.onnx"
    res = graphselect.optimize(str(path), input_shape=(1, 3, 32, 32), cache=None, benchmark_runs=0,
                               timing=QUICK)
    assert res.report["max_rel_err"] <= 1e-4
    assert res.report["conv_layers"] == 12
    import onnx
    m = onnx.load(str(path))
    _check_fresh_inputs(res, m.SerializeToString(), seeds=(3,))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "shufflenet_v2", "regnet_x_400mf"])
def test_mobile_models(name):
    m = models.build(name, image_size=64)
    res = graphselect.optimize(m, cache=None, benchmark_runs=0, timing=QUICK)
    assert res.report["max_rel_err"] <= 1e-4
    _check_fresh_inputs(res, m.SerializeToString(), seeds=(1,))
