"""QDQ models (onnxruntime's static quantizer on the tiny model): their QuantizeLinear ->
DequantizeLinear pairs become fake-quants fused into the conv epilogues (before and after the
residual add) or layout-agnostic layers; convs whose input and weights are quantized get int8
candidates; the built network is checked against onnxruntime running the same QDQ model. The
isolated records are made up (int8 kernels 4x faster), so no kernel is timed; the networks are
really built and run."""
import numpy as np
import pytest

import graphselect
import models
from graphselect.stages import check, load, settings
from graphselect.candidates import nchwc_int8, precision_of
from graphselect.graph.layers import FAKE_QUANT
from graphselect.measure import plan as plan_mod
from graphselect.measure.store import Measurement, RecordStore
from graphselect.target import parse_target

HAS_VNNI = nchwc_int8.VNNI in parse_target("llvm").isa.features


@pytest.fixture(scope="module")
def qdq_tiny():
    return models.quantize_qdq(models.build("tiny"), samples=4)


def _ort(model, x, optimized=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def test_qdq_pairs_fuse_into_the_convs_and_mark_them_int8(qdq_tiny):
    imported = load.load(qdq_tiny, settings.settings(cache=False, benchmark_runs=0))
    lg = imported.lg
    convs = {l.name: l.conv for l in lg.convs}
    assert len(convs) == 3 and all(c.quant is not None for c in convs.values())
    # conv1 -> Q/DQ -> add(., block input) -> Q/DQ: quantized before and after the residual add
    res = [c for c in convs.values() if c.residual]
    assert len(res) == 1 and res[0].quant_pre is not None
    # the stem reads the quantized image, the others the previous conv's fake-quantized output
    assert all(c.qdq is not None for c in convs.values())
    assert not any(l.op in ("relax.quantize", "relax.dequantize") for l in lg.layers.values())
    fq = [l for l in lg.layers.values() if l.op == FAKE_QUANT]
    assert fq and all(l.quant is not None for l in fq)
    assert any(l.kind == "agnostic" for l in fq)          # 4-D ones run in any channel layout


def _fake_records(model, path):
    s = settings.settings(cache=path, benchmark_runs=0)
    imported = load.load(model, s)
    plan = plan_mod.make_plan(imported.lg, s.target, None, s.precisions)
    store = RecordStore(path)
    n8 = 0
    for j in plan.jobs:
        int8 = j.workload.startswith("conv2d") and precision_of(j.candidate.split("(")[0]) == "int8"
        n8 += int8
        t = 0.01 if int8 else 0.04 if j.workload.startswith("conv2d") else 0.002
        store.put(s.ctx, Measurement(j.workload, j.candidate, t, t, version=j.version, rel_err=1e-7, load=0.0))
    store.close()
    return n8


def test_qdq_model_built_with_int8_kernels_matches_onnxruntime(qdq_tiny, tmp_path):
    path = tmp_path / "records.sqlite"
    n8 = _fake_records(qdq_tiny, path)
    assert (n8 > 0) == HAS_VNNI                           # int8 candidates exactly where VNNI is
    res = graphselect.optimize(qdq_tiny, cache=path, benchmark_runs=0)
    chosen = res.report["families_chosen"]
    if HAS_VNNI:
        assert "nchwc_int8" in chosen, chosen
    assert res.report["records"]["reused"] == res.report["records"]["jobs"]
    x = np.random.default_rng(9).standard_normal(res.input_shape).astype("float32")
    got = res.run(x)
    for want in (_ort(qdq_tiny, x), _ort(qdq_tiny, x, optimized=False)):
        assert float(np.abs(got - want).max() / np.abs(want).max()) <= check.QDQ_TOLERANCE
    assert int(np.argmax(got)) == int(np.argmax(_ort(qdq_tiny, x, optimized=False)))


def test_qdq_model_without_int8_families_still_matches_onnxruntime(qdq_tiny):
    """The dequantize-and-float32 path: a QDQ ResNet-18 failed the 1e-4 check against onnxruntime
    before QDQ models had their own tolerance."""
    res = graphselect.optimize(qdq_tiny, cache=False, benchmark_runs=0, families=["direct"])
    assert set(res.report["families_chosen"]) == {"direct"}
    x = np.random.default_rng(2).standard_normal(res.input_shape).astype("float32")
    want = _ort(qdq_tiny, x, optimized=False)
    assert float(np.abs(res.run(x) - want).max() / np.abs(want).max()) <= check.QDQ_TOLERANCE
