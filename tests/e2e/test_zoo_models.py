"""Every zoo model through the whole pipeline at a small input size, checked against onnxruntime
(``optimize`` raises BuildError beyond 1e-4 relative error). The default suite runs the small
models; the big ones are marked slow."""
import pytest

import tvm  # noqa: F401 - a hard dependency: a broken install must fail, not skip

import graphselect
import models
from graphselect.measure.jobs import TimingConfig

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)


@pytest.mark.parametrize("name,size", [("tiny", 32), ("tiny_concat", 32), ("squeezenet1_1", 64)])
def test_small_models(name, size):
    r = graphselect.optimize(models.build(name, image_size=size), cache=None, benchmark_runs=0, timing=QUICK)
    assert r.report["max_rel_err"] <= 1e-4
    assert r.report["solver"]["optimal"]
    assert r.report["conv_layers"] == sum(1 for n in models.build(name, image_size=size).graph.node
                                          if n.op_type == "Conv")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "vgg11", "inception"])
def test_big_models(name):
    r = graphselect.optimize(models.build(name, image_size=64), cache=None, benchmark_runs=0, timing=QUICK)
    assert r.report["max_rel_err"] <= 1e-4


def test_cache_budget_decides_warm_or_cold_timings():
    m = models.build("tiny")
    big = graphselect.optimize(m, cache=None, benchmark_runs=0, timing=QUICK, cache_budget=10**12)
    off = graphselect.optimize(m, cache=None, benchmark_runs=0, timing=QUICK, cache_budget=None)
    assert big.report["cache"]["resident"] is True
    assert off.report["cache"]["resident"] is False and off.report["cache"]["budget_bytes"] is None
    # resident: the prediction is the sum of warm times, which the problem evaluates as such
    p = big.extra["problem"]
    choice = big.extra["solution"].choice
    warm = sum(n.choices[k].time(True) for n, k in zip(p.nodes, choice))
    cold = sum(n.choices[k].cost for n, k in zip(p.nodes, choice))
    assert abs(big.extra["solution"].cost - (warm + p.transform_cost(choice))) < 1e-9
    assert warm != cold
    assert big.report["cache"]["footprint_bytes"] <= 10**12
