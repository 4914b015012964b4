"""costmodels.calibration: the fit recovers what synthetic networks were made with, and the
calibrated Problem prices what the fit learned."""
import math

import numpy as np
import pytest

from costmodels.calibration import Calibration, KernelObservation, NetworkObservation, fit, prior
from costmodels.table import EdgeTable, LayerTable, MissingMeasurement, Option, Timing, build_problem, other_costs

MiB = 1 << 20


def _net(name, kernels, *, footprint, launch=0.0, other=(0.2, 0.1), other_scale=1.0, model="m"):
    """A network whose conv kernels took ``innet`` ms and whose other kernels took
    ``other_scale`` times their cold sum (one other kernel)."""
    conv = sum(k.innet_ms for k in kernels)
    other_ms = other_scale * other[0]
    calls = len(kernels) + 1
    e2e = conv + other_ms + launch * calls
    return NetworkObservation(name, model, footprint, e2e, calls, conv, other_ms, other[0], other[1])


def _kernels(net, rng, scale, *, share=0.0, n=12, family="nchwc", miss=0.0, ms=(0.05, 1.0)):
    """``n`` kernels that ran ``scale`` times their blended time, plus ``miss`` of what reading
    their input from memory adds (in-cold - cold)."""
    out = []
    for i in range(n):
        cold = float(rng.uniform(*ms))
        warm = cold * float(rng.uniform(0.5, 0.9))
        incold = cold * float(rng.uniform(1.0, 2.0))
        t = scale * (cold + share * (warm - cold) + miss * (incold - cold))
        out.append(KernelObservation(net, (f"{family}{i}", family), family, cold, warm, t, incold))
    return out


def test_no_observations_is_the_prior():
    """Nothing timed in place yet: isolated cold times as they are (warm is not reached in a
    network until one shows it), the budget untouched; Calibration() itself is the identity."""
    cal = fit([], [], budget=10 * MiB, steps=())
    assert cal.identity and cal == prior()
    assert cal.kernel(("w", "c"), "nchwc", 1.0, 0.5, 1.5) == (1.0, 1.0)
    assert cal.budget(10 * MiB, ((12 * MiB, 0.5),)) == (10 * MiB, ((12 * MiB, 0.5),))
    assert prior(0.002).kernel(("w", "c"), "nchwc", 1.0, 0.5) == pytest.approx((1.002, 1.002))
    assert Calibration().kernel(("w", "c"), "nchwc", 1.0, 0.5, 1.5) == (1.0, 0.5)


def test_family_scale_and_launch_are_recovered():
    rng = np.random.default_rng(0)
    ks = _kernels("n1", rng, 1.3, n=80) + _kernels("n1", rng, 0.9, family="winograd", n=80)
    net = _net("n1", ks, footprint=100 * MiB, launch=0.004, other_scale=1.5)
    cal = fit(ks, [net], budget=10 * MiB, steps=())          # far beyond the budget: cold
    # families that ran for tens of ms keep their own scales (a little of the machine's in them)
    assert cal.family_scale["nchwc"] == pytest.approx(1.3, rel=0.03)
    assert cal.family_scale["winograd"] == pytest.approx(0.9, rel=0.03)
    assert 0.9 <= cal.scale <= 1.3 and cal.input_miss == 0.0
    assert cal.launch_ms == pytest.approx(0.004, rel=0.05)
    # a kernel seen in the network gets its own scale; an unseen one its family's
    cold, warm = cal.kernel(ks[0].key, "nchwc", ks[0].cold_ms, ks[0].warm_ms)
    assert cold == pytest.approx(ks[0].innet_ms + cal.launch_ms, rel=1e-6)
    cold, _ = cal.kernel(("unseen", "nchwc"), "nchwc", 1.0, 0.5)
    assert cold == pytest.approx(1.3 + cal.launch_ms, rel=0.03)
    # a family never seen: the machine's scale
    cold, _ = cal.kernel(("unseen", "depthwise"), "depthwise", 1.0, 0.5)
    assert cold == pytest.approx(cal.scale + cal.launch_ms, rel=1e-6)
    # other kernels: 1.5x their isolated time, plus their launches
    c, _ = cal.other("m", 0.2, 0.1)
    assert c == pytest.approx(1.5 * 0.2 + cal.launch_ms, rel=0.05)


def test_a_family_seen_for_microseconds_takes_the_machine_scale():
    """tiny's direct kernels ran at 0.72x in a few microseconds: that must not price the next
    model's big direct convs (SqueezeNet was predicted 20% low on it)."""
    rng = np.random.default_rng(5)
    big = _kernels("n", rng, 1.1, n=40)
    small = _kernels("n", rng, 0.7, n=3, family="direct", ms=(0.001, 0.003))
    cal = fit(big + small, [_net("n", big + small, footprint=100 * MiB)], budget=10 * MiB)
    assert cal.family_scale["direct"] == pytest.approx(cal.scale, rel=0.02)
    assert cal.scale == pytest.approx(1.1, rel=0.02)


def test_a_models_own_family_scale_prices_its_siblings_unshrunk():
    """In its own model a family that ran for microseconds still prices the family's other
    candidates by what it showed (a small model's Winograd kernels 10x slower in place: all its
    Winograd candidates are); another model gets the shrunk, machine-wide figure."""
    rng = np.random.default_rng(7)
    big = _kernels("n", rng, 1.0, n=40)
    wino = _kernels("n", rng, 10.0, n=2, family="winograd", ms=(0.005, 0.01))
    cal = fit(big + wino, [_net("n", big + wino, footprint=100 * MiB, model="small")], budget=10 * MiB)
    cold, _ = cal.kernel(("sibling", "winograd"), "winograd", 0.01, 0.01, model="small")
    assert cold == pytest.approx(10.0 * 0.01 + cal.launch_ms, rel=0.05)
    cold, _ = cal.kernel(("sibling", "winograd"), "winograd", 0.01, 0.01, model="another")
    assert cold < 2.0 * 0.01 + cal.launch_ms


def test_the_input_miss_is_recovered_and_transfers():
    """Kernels that pay 40% of what reading their input from memory costs alone (in-cold - cold):
    the fit finds the share, and prices a kernel it never saw by its own in-cold time."""
    rng = np.random.default_rng(6)
    ks = _kernels("n", rng, 1.0, n=60, miss=0.4)
    cal = fit(ks, [_net("n", ks, footprint=100 * MiB)], budget=10 * MiB)
    assert cal.input_miss == pytest.approx(0.4, abs=0.05)
    assert cal.scale == pytest.approx(1.0, rel=0.03)
    cold, _ = cal.kernel(("new", "nchwc"), "nchwc", 1.0, 0.8, 3.0)
    assert cold == pytest.approx(1.0 + 0.4 * 2.0 + cal.launch_ms, rel=0.05)
    # without an in-cold time (a device, or an old record): no miss is charged
    cold, _ = cal.kernel(("new", "nchwc"), "nchwc", 1.0, 0.8)
    assert cold == pytest.approx(cal.scale + cal.launch_ms, rel=1e-6)


def test_a_network_running_warm_beyond_the_budget_stretches_the_capacity():
    """The Xeon case: the isolated model says 'cold' (footprint 2x the budget), the network runs
    its kernels warm; the fit puts the effective cache beyond the footprint."""
    rng = np.random.default_rng(1)
    budget = 80 * MiB
    ks = _kernels("big", rng, 1.0, share=1.0, n=30)
    net = _net("big", ks, footprint=int(1.4 * budget))
    cal = fit(ks, [net], budget=budget, steps=((int(1.1 * budget), 0.5),))
    assert cal.capacity * budget >= 1.4 * budget
    new_budget, _ = cal.budget(budget, ((int(1.1 * budget), 0.5),))
    assert new_budget >= int(1.4 * budget)
    # the calibrated Problem now prices this network warm
    k = ks[0]
    _, warm = cal.kernel(k.key, k.family, k.cold_ms, k.warm_ms)
    assert warm == pytest.approx(k.warm_ms + cal.launch_ms, rel=0.05)


def test_kernels_that_run_cold_inside_the_budget_lower_the_warm_share():
    """The Zen 5 MobileNetV2 case: weights fit the budget, kernels run at their cold times."""
    rng = np.random.default_rng(2)
    ks = _kernels("small", rng, 1.0, share=0.0, n=30)
    net = _net("small", ks, footprint=5 * MiB)
    cal = fit(ks, [net], budget=25 * MiB, steps=())
    assert cal.warm_max < 0.2
    k = ks[3]
    _, warm = cal.kernel(("unseen", k.family), k.family, k.cold_ms, k.warm_ms)
    assert warm == pytest.approx(k.cold_ms, rel=0.1)


def test_flat_data_keep_the_prior():
    """Where warm equals cold and in-cold the data cannot tell m, k or b: the pull keeps the
    prior's (m = 0, k = 1, b = 0)."""
    ks = [KernelObservation("n", (f"w{i}", "f"), "f", 1.0, 1.0, 1.0, 1.0) for i in range(5)]
    cal = fit(ks, [_net("n", ks, footprint=MiB)], budget=10 * MiB)
    assert cal.warm_max == 0.0 and cal.capacity == 1.0 and cal.input_miss == 0.0


def _tables():
    layers = [LayerTable("input", "input", (Option("input", (), "NCHW"),)),
              LayerTable("conv0", "conv", (Option("a", ("NCHW",), "NCHW", ("c0", "a"), family="direct",
                                                  weight_bytes=MiB),
                                           Option("b", ("NCHW",), "NCHW8c", ("c0", "b"), (("epi", "x"),),
                                                  family="nchwc", weight_bytes=2 * MiB))),
              LayerTable("relu", "agnostic", (Option("NCHW", ("NCHW",), "NCHW", ("r", "NCHW")),
                                              Option("NCHW8c", ("NCHW8c",), "NCHW8c", ("r", "NCHW8c")))),
              LayerTable("output", "output", (Option("output", ("NCHW",), None),))]
    edges = [EdgeTable(0, 1, 0), EdgeTable(1, 2, 0, {("NCHW8c", "NCHW"): ("t", "8c->nchw"),
                                                      ("NCHW", "NCHW8c"): ("t", "nchw->8c")}),
             EdgeTable(2, 3, 0, {("NCHW8c", "NCHW"): ("t2", "8c->nchw")})]
    timings = {("c0", "a"): Timing(1.0, 0.6), ("c0", "b"): Timing(0.5, 0.3), ("epi", "x"): Timing(0.1, 0.05),
               ("r", "NCHW"): Timing(0.2, 0.1), ("r", "NCHW8c"): Timing(0.2, 0.1),
               ("t", "8c->nchw"): Timing(0.07, 0.02), ("t", "nchw->8c"): Timing(0.07, 0.02),
               ("t2", "8c->nchw"): Timing(0.03, 0.01)}
    return layers, edges, timings


def test_build_problem_prices_options_from_their_records():
    layers, edges, timings = _tables()
    p = build_problem(layers, edges, timings)
    # conv b's unfused epilogue is part of its cost; transforms sit on the edges
    assert p.nodes[1].choices[1].cost == pytest.approx(0.6) and p.nodes[1].choices[1].warm_cost == pytest.approx(0.35)
    assert p.evaluate((0, 1, 1, 0)) == pytest.approx(0.6 + 0.2 + 0.03)
    assert p.evaluate((0, 0, 1, 0)) == pytest.approx(1.0 + 0.07 + 0.2 + 0.03)
    assert other_costs(layers, edges, timings, (0, 1, 1, 0)) == pytest.approx((0.1 + 0.2 + 0.03, 0.05 + 0.1 + 0.03,
                                                                               0.1 + 0.2 + 0.03))


def test_a_missing_measurement_is_an_error_not_a_free_option():
    layers, edges, timings = _tables()
    del timings[("epi", "x")]
    with pytest.raises(MissingMeasurement, match="conv0.*epi"):
        build_problem(layers, edges, timings)
    layers, edges, timings = _tables()
    del timings[("t", "nchw->8c")]
    with pytest.raises(MissingMeasurement, match="edge conv0 -> relu"):
        build_problem(layers, edges, timings)


def test_a_failed_measurement_makes_the_option_unusable():
    layers, edges, timings = _tables()
    timings[("c0", "b")] = Timing(math.inf, math.inf)
    p = build_problem(layers, edges, timings)
    assert p.nodes[1].choices[1].cost == math.inf


def test_calibration_reprices_the_problem():
    layers, edges, timings = _tables()
    cal = Calibration(warm_max=0.5, capacity=2.0, launch_ms=0.01, family_scale={"nchwc": 2.0},
                      kernel_scale={("c0", "a"): 0.5}, other_scale=3.0, networks=1)
    p = build_problem(layers, edges, timings, cache_bytes=4 * MiB, partial=((5 * MiB, 0.5),), calibration=cal)
    assert p.cache_bytes == 8 * MiB and p.partial == ((10 * MiB, 0.5),)
    a = p.nodes[1].choices[0]
    assert a.cost == pytest.approx(0.5 * 1.0 + 0.01)
    assert a.warm_cost == pytest.approx(0.5 * (1.0 + 0.5 * (0.6 - 1.0)) + 0.01)
    b = p.nodes[1].choices[1]               # family scale, plus the epilogue at the other scale
    assert b.cost == pytest.approx(2.0 * 0.5 + 0.01 + 3.0 * 0.1)
    assert p.nodes[2].choices[0].cost == pytest.approx(3.0 * 0.2)
    assert p.edges[1].transform[("NCHW8c", "NCHW")] == pytest.approx(3.0 * 0.07)


def test_the_protocols_floor_is_taken_off_isolated_timings():
    """Every isolated timing carries the protocol's floor (the packed call, the pool's fork and
    join), which a network pays as its per-call launch: it is taken off cold, warm and in-cold
    (each keeping at least a tenth of itself, the in-cold not below the cold) before the scale."""
    cal = prior(0.0, (0.010, 0.002, 0.012))
    assert cal.kernel(("w", "c"), "nchwc", 1.0, 0.5, 1.5) == pytest.approx((0.990, 0.990))
    assert cal.kernel(("w", "c"), "nchwc", 0.011, 0.004) == pytest.approx((0.0011, 0.0011))   # a tenth kept
    assert cal.other("m", 0.015, 0.003)[0] == pytest.approx(0.005)
    with_miss = Calibration(warm_max=0.0, input_miss=1.0, floor=(0.010, 0.002, 0.012))
    # in-cold 0.030 - 0.012 = 0.018 against cold 0.020 - 0.010 = 0.010: a miss of 0.008
    assert with_miss.kernel(("w", "c"), "nchwc", 0.020, 0.008, 0.030)[0] == pytest.approx(0.018)
    assert Calibration(floor=(0.01, 0.002, 0.01)).kernel(("w", "c"), "nchwc", 1.0, 0.5)[1] == pytest.approx(0.498)
    assert Calibration().kernel(("w", "c"), "nchwc", 1.0, 0.5) == (1.0, 0.5)


def test_fit_with_the_floor_recovers_the_scale_of_microsecond_kernels():
    """Kernels of a few microseconds whose isolated timings carry a 2 us floor ran in place at
    their timings less the floor: with the floor the fit finds scale 1 for them (an unseen one is
    priced near what it runs at); without it, far below 1 and a family of them mispriced."""
    rng = np.random.default_rng(3)
    fl = 0.002
    ks = []
    for i in range(30):
        cold = float(rng.uniform(0.002, 0.008))
        warm = cold * 0.9
        ks.append(KernelObservation("n", (f"w{i}", "direct"), "direct", cold + fl, warm + fl, cold, cold + fl))
    net = _net("n", ks, footprint=100 * MiB)
    with_floor = fit(ks, [net], budget=10 * MiB, floor=(fl, fl, fl))
    without = fit(ks, [net], budget=10 * MiB)
    assert with_floor.floor == (fl, fl, fl) and with_floor.scale == pytest.approx(1.0, rel=0.05)
    assert without.scale < 0.8
    c, _ = with_floor.kernel(("new", "direct"), "direct", 0.004 + fl, 0.0036 + fl, 0.004 + fl)
    assert c == pytest.approx(0.004 + with_floor.launch_ms, rel=0.1)


def test_op_kind_names_what_a_kernel_does_to_memory():
    from costmodels.calibration import op_kind, workload_kind
    assert [op_kind(n) for n in ("fused_max_pool2d", "adaptive_avg_pool2d1", "fused_matmul_add", "fused_mean_multiply",
                                 "layout_transform3", "fused_add1_relu2", "fused_maximum", "fused_reshape_transpose",
                                 "split2", "fused_concatenate1", "pad", "vm.unknown_thing")] == \
        ["pool", "pool", "dense", "reduce", "transform", "elementwise", "elementwise", "view",
         "view", "copy", "copy", "other"]
    # a record's kind is its op's, not its attributes'
    assert workload_kind("relax.clip in=[(1, 32, 1, 1)] out=(1, 32, 1, 1)  clamp=('clip', (0.0, 1.0))") == "elementwise"
    assert workload_kind("relax.concat in=[(1, 8)] out=(1, 16) relax.attrs.ConcatAttrs(axis=1)") == "copy"
    assert workload_kind("layout_transform (1, 64, 56, 56)|NCHW->NCHW16c") == "transform"


def test_other_kernels_lose_the_floor_once_per_isolated_snippet_as_the_problem_prices_them():
    """The Problem prices every non-conv record alone (one floor off each); the fit must divide
    by the same figure. A network whose fusion ran 77 snippets in 17 calls loses 77 floors, not
    17; a network stored before snippets were counted by kind falls back to its calls."""
    from costmodels.calibration import other_unfloored
    floor = (0.002, 0.001, 0.003)
    kinds = {"view": (0.5, 0.4, 0.6, 77, 0.05, 17), "pool": (0.1, 0.05, 0.12, 1, 0.2, 1)}
    n = NetworkObservation("n", "m", MiB, 3.0, 20, 2.0, 0.25, 0.6, 0.45, 0.72, kinds)
    assert other_unfloored(n, floor, 18) == pytest.approx((0.6 - 78 * 0.002, 0.45 - 78 * 0.001, 0.72 - 78 * 0.003))
    old = NetworkObservation("n", "m", MiB, 3.0, 20, 2.0, 0.25, 0.6, 0.45, 0.72)
    assert other_unfloored(old, floor, 18) == pytest.approx((0.6 - 18 * 0.002, 0.45 - 18 * 0.001, 0.72 - 18 * 0.003))
    # the fit's scale for such a network: in-place time (and its calls' launches) over that
    cal = fit([KernelObservation("n", ("w", "x"), "nchwc", 0.5, 0.4, 2.0)], [n], budget=None, floor=floor)
    launch = cal.launch("m")
    # 19 non-conv calls: 20 in the network, one conv kernel
    assert cal.model_other_scale["m"] == pytest.approx((0.25 + 19 * launch) / (0.6 - 78 * 0.002), rel=1e-6)
    # and what the Problem then prices the same records at, one by one, adds up to that time
    assert sum(cal.other("m", c, w, ic)[0] * count / count for c, w, ic, count in
               [(0.5 / 77, 0.4 / 77, 0.6 / 77, 1)] * 77 + [(0.1, 0.05, 0.12, 1)]) == pytest.approx(
        0.25 + 19 * launch, rel=1e-6)


def test_other_costs_by_kind_add_up_to_other_costs():
    from costmodels.table import other_costs_by_kind
    layers, edges, timings = _tables()
    for choice in ((0, 1, 1, 0), (0, 0, 1, 0), (0, 1, 0, 0)):
        by = other_costs_by_kind(layers, edges, timings, choice)
        assert tuple(sum(v[i] for v in by.values()) for i in range(3)) == pytest.approx(
            other_costs(layers, edges, timings, choice))
    by = other_costs_by_kind(layers, edges, timings, (0, 1, 1, 0))
    # the workloads of _tables() name no op: "other"; the transforms are "t" records on edges
    assert sum(v[3] for v in by.values()) == 3
