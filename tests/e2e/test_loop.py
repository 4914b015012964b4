"""The closed loop through ``optimize``: a synthetic case where the isolated timings mislead and
the in-network timings correct the choice; batch > 1 with the loop on; calibration kept for the
next run."""
import numpy as np
import pytest

import graphselect
import models
from graphselect.stages import load, machine, measure, select, settings
from graphselect.measure import plan as plan_mod
from graphselect.measure.innet import KernelCall, NetworkTiming
from graphselect.measure.jobs import TimingConfig
from graphselect.measure.store import Measurement, RecordStore

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)
SLOWER_IN_NETWORK = 10.0      # what the fake network makes of Winograd kernels


def _fake_records(model, path):
    """Isolated records for every job of the model's plan: Winograd 5x faster than the rest."""
    s = settings.settings(cache=path, benchmark_runs=0)
    imported = load.load(model, s)
    plan = plan_mod.make_plan(imported.lg, s.target, None)
    store = RecordStore(path)
    for j in plan.jobs:
        if j.workload.startswith("conv2d"):
            t = 0.01 if j.candidate.startswith("winograd") else 0.05
        else:
            t = 0.002
        # load 0: no reference time known, so no later run takes them as stale and re-times them for real
        store.put(s.ctx, Measurement(j.workload, j.candidate, t, t, version=j.version, load=0.0))
    store.close()
    return imported


def _fake_time(imported, jitter_step: float = 0.0):
    """In-network timings from the isolated records, with Winograd kernels much slower; with
    ``jitter_step``, each network timed a little off the last (so which observations are a
    kernel's newest matters to the fit, as on a real machine)."""
    count = [0]

    def fake(built, x, s, probe):
        out = {}
        for b in built:
            calls = []
            count[0] += 1
            jitter = 1.0 + jitter_step * (count[0] % 4)
            for name, cand in b.selection.items():
                if imported.lg.layers[name].kind != "conv":
                    continue
                t = (0.01 * SLOWER_IN_NETWORK if cand.family == "winograd" else 0.05) * jitter
                calls.append(KernelCall(f"{name}_{cand.family}", t))
            calls.append(KernelCall("fused_ops", 0.01))
            out[b.label] = NetworkTiming(sum(c.ms for c in calls) + 0.001, tuple(calls), 0.001, 0.0, 0.0, 4)
        return out
    return fake


def _winograd_layers(result_or_built, lg):
    sel = result_or_built.selection
    return {n for n, c in sel.items() if lg.layers[n].kind == "conv" and c.family == "winograd"}


def test_the_loop_corrects_a_choice_the_isolated_timings_got_wrong(tmp_path, monkeypatch):
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    imported = _fake_records(model, path)
    fake, sessions = _fake_time(imported), []

    def timed(session, x, s, probe):
        sessions.append([b.label for b in session])
        return fake(session, x, s, probe)
    monkeypatch.setattr(select, "_time", timed)
    r = graphselect.optimize(model, cache=path, benchmark_runs=3, timing=QUICK, cache_budget=None)
    sel = r.extra["selection"]
    lg = imported.lg
    # round 0 timed all it built; each later round its new networks beside the incumbent, the
    # earlier-built network its objective ranked first, and only those have a timing that round
    rounds_timed = [x for x in sel.rounds if x.measured_ms]
    assert len(sessions) == len(rounds_timed) >= 2
    assert sessions[0] == list(sel.rounds[0].new)
    for got, rd in zip(sessions[1:], rounds_timed[1:]):
        earlier = [b for b in sel.built if b.label not in rd.new and sel.before[b.label].round < rd.index]
        incumbent = min(earlier, key=lambda b: rd.predicted_ms[b.label])
        assert got == [incumbent.label, *rd.new] and set(rd.measured_ms) == set(got)
    assert len(sel.built) > len(sessions[-1])      # some built network was not timed again
    first = next(b for b in sel.built if b.label == "cp-sat")
    assert _winograd_layers(first, lg), "isolated timings should make round 0 pick Winograd"
    final = sel.by_label(sel.label)
    assert not _winograd_layers(final, lg), "the calibrated objective should drop Winograd"
    assert sel.converged and len(sel.rounds) >= 2
    # the model's own Winograd kernels priced its other Winograd candidates; machine-wide the
    # family's scale is shrunk (a few tens of microseconds in one small model say little of another)
    assert sel.calibration.model_family_scale[(imported.model_key, "winograd")] > 5
    assert sel.calibration.family_scale["winograd"] < sel.calibration.model_family_scale[(imported.model_key, "winograd")]
    # the returned assignment is one that was built and timed in place, and its prediction is
    # the calibrated sum the fake network produced
    assert final.choice == tuple(sel.solution.choice)
    assert abs(sel.problem.evaluate(final.choice) - sel.innet[final.label].e2e_ms) < 0.02
    assert r.report["max_rel_err"] <= 1e-4
    assert r.report["loop"]["rounds"][0]["networks"] and r.report["calibration"]["networks"] >= 2
    # every round that timed networks in place read the thread pool's hand-off around it; the
    # round that found nothing new to build timed nothing and has none
    timed_rounds = [x for x in r.report["loop"]["rounds"] if any(n["measured_ms"] for n in x["networks"])]
    assert timed_rounds and all(0 < x["handoff_us"] < 1e3 for x in timed_rounds)
    assert all(x["handoff_us"] is None for x in r.report["loop"]["rounds"] if x not in timed_rounds)
    # each round records the calibration it solved with: round 0 on a fresh store the prior (no
    # network), round 1 what round 0's networks taught
    assert [x.calibration["networks"] for x in sel.rounds[:2]] == [0, len(sel.rounds[0].new)]
    # every built network has the prediction made before it was built; round 0's, on a store with
    # no network of this model, saw a new model; the returned one was predicted in a later round
    assert set(sel.before) == {b.label for b in sel.built}
    assert sel.before["cp-sat"].basis == "new model" and sel.before["cp-sat"].round == 0
    assert sel.before[final.label].basis == "new network" and sel.before[final.label].round >= 1
    rep = r.report
    # the end-to-end check read the host's state before and after it timed
    assert len(rep["check_handoff_us"]) == 2 and all(0 < h < 1e3 for h in rep["check_handoff_us"])
    assert rep["prediction"]["predicted_ms"] == round(sel.before[final.label].ms, 4)
    want = (sel.before[final.label].ms - rep["measured_e2e_ms"]) / rep["measured_e2e_ms"]
    assert abs(rep["prediction_error"] - want) < 1e-3
    assert rep["first_prediction"]["label"] == "cp-sat" and rep["first_prediction"]["basis"] == "new model"
    # round 0 predicted Winograd's network fast; timed in place, it was slow: the first error is large
    assert rep["first_prediction"]["error"] < -0.3
    assert rep["chosen_by"].startswith("the final cp-sat solve's")
    labels = {b.label for b in sel.built}
    assert "greedy" in labels or sel.greedy.method != "greedy"
    # every timed network is stored with its non-conv kernels by kind, adding up to its totals:
    # the fake network's one "fused_ops" call is of no known kind and has no isolated snippet
    store = RecordStore(path)
    nets, _ = store.networks(settings.settings(cache=path).ctx)
    store.close()
    assert nets and all(n.other_kinds for n in nets)
    # ... and with the hand-off read around the session that timed it
    assert {round(n.handoff_us, 3) for n in nets} <= {x["handoff_us"] for x in timed_rounds}
    for n in nets:
        kinds = n.other_kinds
        assert sum(v[4] for v in kinds.values()) == pytest.approx(n.other_innet_ms)
        assert sum(v[0] for v in kinds.values()) == pytest.approx(n.other_cold_ms)
        assert kinds["other"][3:] == (0, 0.01, 1) and sum(v[5] for v in kinds.values()) == 1
    # the next run starts calibrated: round 0 already avoids Winograd
    r2 = graphselect.optimize(model, cache=path, benchmark_runs=3, timing=QUICK, cache_budget=None)
    sel2 = r2.extra["selection"]
    assert not _winograd_layers(sel2.built[0], lg)
    # its round-0 assignment is one the first run timed: no prediction error is claimed for it
    if sel2.label in sel2.before and sel2.before[sel2.label].basis == "timed before":
        assert r2.report["prediction_error"] is None
    assert all(p.basis != "new model" for p in sel2.before.values())


def test_the_final_objective_is_the_one_the_next_run_starts_from(tmp_path, monkeypatch):
    """The loop's last fit is on the store's networks in the store's order, as the next run's
    first is: an unchanged rerun's round 0 solves the problem this run's final solve did (an
    order-sensitive fit on this round's networks prepended in session order solved another)."""
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    imported = _fake_records(model, path)
    monkeypatch.setattr(select, "_time", _fake_time(imported, jitter_step=0.03))
    r = graphselect.optimize(model, cache=path, benchmark_runs=3, timing=QUICK, cache_budget=None)
    sel = r.extra["selection"]
    s1 = settings.settings(cache=path, benchmark_runs=3, timing=QUICK, cache_budget=None)
    with settings.open_store(s1) as st:
        again = load.load(model, s1)
        meas = measure.measure(again, s1, st)
        hw = machine.machine(s1, st)
        nets, kobs = st.networks(s1.ctx)
        start = select.problem(again, meas, hw, select._fit(nets, kobs, meas, hw))
    assert len(nets) > 3                             # more than the fit's newest few per kernel
    for b in sel.built:
        assert start.evaluate(b.choice) == pytest.approx(r.extra["problem"].evaluate(b.choice), rel=1e-9)


def test_a_greedy_that_dead_ends_is_not_labelled_greedy():
    from costmodels.problem import Assignment
    s = type("S", (), {"solver": "cp-sat"})()
    fallback = Assignment((0,), 1.0, "cp-sat", True)
    out = select._alternatives(None, Assignment((0,), 1.0, "cp-sat", True), fallback, s, levels=False)
    assert [lb for lb, _ in out] == ["cp-sat (greedy dead-ended)"]
    out = select._alternatives(None, fallback, Assignment((0,), 1.0, "greedy", False), s, levels=False)
    assert [lb for lb, _ in out] == ["greedy"]


class _Costs:
    """A Problem stand-in: each assignment's cost from a table, all resident, no cache term."""
    cache_bytes = None

    def __init__(self, costs):
        self.costs = costs

    def evaluate(self, choice):
        return self.costs[tuple(choice)]

    def resident(self, choice):
        return True

    def warm_share(self, choice):
        return 1.0

    def footprint(self, choice):
        return 2**20 * choice[0]


def test_round_0_takes_an_earlier_runs_network_within_the_rerun_margin_only():
    from costmodels.problem import Assignment
    opt = Assignment((0,), 10.0, "cp-sat", True)
    near, far = (1,), (2,)
    costs = _Costs({(0,): 10.0, near: 10.0 * (1 + select.CONVERGED) - 1e-6, far: 10.0 * (1 + select.CONVERGED) + 1e-3})
    took = select._timed_earlier(costs, opt, [far, near])
    assert took.choice == near and not took.optimal and took.cost == costs.evaluate(near)
    assert select._timed_earlier(costs, opt, [far]) is opt          # outside the margin: the optimum
    assert select._timed_earlier(costs, opt, [(0,)]) is opt         # the optimum itself was timed


def test_a_calibrated_machine_builds_only_the_residency_levels_within_the_margin():
    from costmodels.problem import Assignment
    s = type("S", (), {"solver": "cp-sat"})()
    costs = _Costs({(0,): 10.0, (1,): 10.5, (2,): 10.0 * (1 + select.ALT_MARGIN) + 0.01})
    sol = Assignment((0,), 10.0, "cp-sat", True, alternatives=((2,), (1,)))
    greedy = Assignment((3,), 11.0, "greedy", False)
    every = select._alternatives(costs, sol, greedy, s)
    assert [a.choice for _, a in every] == [(1,), (2,), (3,)]
    near = select._alternatives(costs, sol, greedy, s, margin=select.ALT_MARGIN)
    assert [a.choice for _, a in near] == [(1,), (3,)]              # greedy is built whatever it costs


def test_batch_4_with_the_loop_matches_onnxruntime():
    m = models.build("tiny", batch=4)
    r = graphselect.optimize(m, cache=None, benchmark_runs=3, timing=QUICK)
    assert r.input_shape[0] == 4 and r.report["max_rel_err"] <= 1e-4
    x = np.random.default_rng(1).standard_normal(r.input_shape).astype("float32")
    import onnxruntime as ort
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = r.run(x)
    assert got.shape == ref.shape == (4, 10)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    rounds = r.report["loop"]["rounds"]
    assert rounds and all(n["measured_ms"] > 0 for n in rounds[0]["networks"] if n["measured_ms"] is not None)
    kernels = r.report["kernels"]
    assert kernels and all(k["innet_ms"] >= 0 and k["calibrated_ms"] > 0 for k in kernels)
