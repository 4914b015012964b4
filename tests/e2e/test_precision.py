"""--precision through ``optimize`` on the tiny model: the error budget keeps fp32 where it is
tight, spends it where it is loose, and the closed error loop corrects an estimate the built
network disproves. The isolated records are made up (bf16 kernels 4x faster, with a given
per-layer error), so no kernel is timed; the networks are really built and run, and their outputs
checked against onnxruntime."""
import numpy as np
import pytest

import graphselect
import models
from graphselect.stages import check, load, settings
from graphselect.candidates import lowp, precision_of
from graphselect.measure import plan as plan_mod
from graphselect.measure.store import Measurement, RecordStore
from graphselect.target import parse_target

pytestmark = pytest.mark.skipif(lowp.BF16 not in parse_target("llvm").isa.features,
                                reason="this CPU has no AVX512-BF16 unit: no bf16 kernels to select")


def _fake_records(model, path, bf16_error: float):
    """Every job of the model's bf16 plan: bf16 conv kernels 4x faster than fp32 ones, each with
    ``bf16_error`` as its measured error."""
    s = settings.settings(cache=path, benchmark_runs=0, precision="bf16")
    imported = load.load(model, s)
    plan = plan_mod.make_plan(imported.lg, s.target, None, s.precisions)
    store = RecordStore(path)
    for j in plan.jobs:
        lowp_ = j.workload.startswith("conv2d") and precision_of(j.candidate.split("(")[0]) == "bf16"
        t = 0.01 if lowp_ else 0.04 if j.workload.startswith("conv2d") else 0.002
        store.put(s.ctx, Measurement(j.workload, j.candidate, t, t, version=j.version,
                                     rel_err=bf16_error if lowp_ else 1e-7, load=0.0))   # never stale
    store.close()


def _bf16_layers(res) -> int:
    return (res.report["precision"]["layers"]).get("bf16", 0)


def _check_against_ort(res, model, tol):
    import onnxruntime as ort
    x = np.random.default_rng(5).standard_normal(res.input_shape).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = res.run(x)
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_auto_keeps_fp32_where_the_budget_is_tight_and_spends_a_loose_one(tmp_path):
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    _fake_records(model, path, bf16_error=3e-3)
    tight = graphselect.optimize(model, cache=path, benchmark_runs=0, precision="auto", tolerance=1e-3)
    assert _bf16_layers(tight) == 0 and tight.report["records"]["reused"] == tight.report["records"]["jobs"]
    assert _check_against_ort(tight, model, 1e-3) < 1e-4
    loose = graphselect.optimize(model, cache=path, benchmark_runs=0, precision="auto", tolerance=0.05)
    assert _bf16_layers(loose) == 3
    p = loose.report["precision"]
    assert p["mode"] == "auto" and p["within_tolerance"] and 1e-5 < p["max_rel_err"] <= 0.05
    assert p["samples"]["inputs"] == check.SAMPLES and p["samples"]["max_rel_error"] <= check.LOWP_SANITY
    assert 1e-5 < _check_against_ort(loose, model, 0.05) <= 0.05
    assert all(l["precision"] == "bf16" for l in loose.report["layers"] if l["kind"] == "conv")
    assert {c["family"] for c in loose.report["layers"][1]["candidates"]} >= {"nchwc_bf16", "winograd_bf16", "nchwc"}


def test_auto_re_solves_when_the_built_network_misses_the_tolerance(tmp_path):
    """Kernel errors that promise far less than bf16 delivers: the first network is over the
    tolerance, the measured/estimated ratio tightens the budget, and an fp32 network returns."""
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    _fake_records(model, path, bf16_error=1e-7)
    res = graphselect.optimize(model, cache=path, benchmark_runs=0, precision="auto", tolerance=2e-4)
    rounds = res.report["loop"]["rounds"]
    first = rounds[0]["errors_vs_fp32"]
    assert first and max(first.values()) > 2e-4                 # the estimate was wrong ...
    assert len(rounds) >= 2 and rounds[1]["error_budget"] < rounds[0]["error_budget"]    # ... and corrected
    assert res.report["precision"]["within_tolerance"] and _bf16_layers(res) == 0
    assert _check_against_ort(res, model, 2e-4) < 2e-4


def test_bf16_reports_the_error_it_has(tmp_path):
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    _fake_records(model, path, bf16_error=3e-3)
    res = graphselect.optimize(model, cache=path, benchmark_runs=0, precision="bf16", tolerance=1e-4)
    p = res.report["precision"]
    assert _bf16_layers(res) == 3 and p["within_tolerance"] is False and p["max_rel_err"] > 1e-4
    from graphselect.report.terminal import summary_table
    assert "OVER the tolerance" in summary_table(res.report)
