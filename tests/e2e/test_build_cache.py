"""Compiled networks kept beside the record store are keyed by the annotated module itself: no
option list, family set or rewrite change can load another network (issue 22, item 5)."""
import numpy as np
import onnx
from onnx import numpy_helper

import graphselect
import models
from graphselect.measure.jobs import TimingConfig
from graphselect.stages import build, settings

QUICK = TimingConfig(rounds=1, cold_repeat=2, warm_number=1, warm_repeat=1)


def _run(model, path, families):
    return graphselect.optimize(model, cache=path, benchmark_runs=0, timing=QUICK, families=families)


def _origin(res):
    """How the returned network was made (stages.build.Built.origin)."""
    return next(b["origin"] for b in res.report["builds"] if b["label"] == res.report["loop"]["chosen"])


def _families(res):
    return {c.split("(")[0] for c in res.assignment.values() if "(" in c}


def test_two_family_sets_on_one_store_each_load_their_own_network(tmp_path):
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    s = settings.settings(cache=path, benchmark_runs=0)
    first = {}
    for fams in (["direct"], ["nchwc"]):
        r = _run(model, path, fams)
        first[fams[0]] = r
        assert _origin(r) in ("compiled", "linked")   # made in this run
        assert build.build_path(r.module, s).exists()  # and kept under its module's key
    assert len(list((tmp_path / "builds").glob("*.so"))) == 2
    assert build.module_key(first["direct"].module, s) != build.module_key(first["nchwc"].module, s)
    x = np.random.default_rng(3).standard_normal(first["direct"].input_shape).astype("float32")
    for fams in (["direct"], ["nchwc"]):
        prev = first[fams[0]]
        for _ in range(2):
            # a record the first run flagged (warm above cold) is re-timed once by the next, which
            # may change the choice: then that run compiles its own module, and the one after loads it
            again = _run(model, path, fams)
            if _origin(again) == "cache":
                break
            assert again.module.script(show_meta=False) != prev.module.script(show_meta=False)
            prev = again
        # the cached library loaded is the one this run's module names, and it is that module
        assert again.library == build.build_path(again.module, s)
        assert again.module.script(show_meta=False) == prev.module.script(show_meta=False)
        assert _families(again) == _families(prev) == {fams[0]}
        np.testing.assert_allclose(again.run(x), prev.run(x), rtol=1e-5, atol=1e-6)


def test_the_key_sees_the_weights_and_nothing_else_of_the_options(tmp_path):
    """One module rewritten twice, from two option lists, has one key; the same choice of
    kernels on a model with one weight changed has another."""
    from graphselect.measure import plan as plan_mod
    from graphselect.rewrite.apply import apply
    from graphselect.stages import load
    model = models.build("tiny")
    other = onnx.ModelProto()
    other.CopyFrom(model)
    w = next(i for i in other.graph.initializer if numpy_helper.to_array(i).ndim == 4)
    arr = numpy_helper.to_array(w).copy()
    arr.flat[0] += 1.0
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    s = settings.settings(cache=tmp_path / "r.sqlite", benchmark_runs=0)

    def module(m, families):
        imp = load.load(m, s)
        plan = plan_mod.make_plan(imp.lg, s.target, families, s.precisions)
        # each layer's first direct kernel (conv) or first layout: the same kernels whatever the list
        choice = [next((k for k, o in enumerate(lt.options) if o.name.startswith("direct") or o.name == "NCHW"), 0)
                  for lt in plan.layers]
        return apply(imp.lg, plan_mod.selection_from(imp.lg, plan, choice), s.target), plan

    a, pa = module(model, ["direct"])
    a2, pa2 = module(model, ["direct", "nchwc", "winograd"])
    b, _ = module(other, ["direct"])
    assert len(pa2.table("conv0").options) > len(pa.table("conv0").options)   # the option lists differ
    assert build.module_key(a, s) == build.module_key(a2, s)
    assert a.script(show_meta=False) == b.script(show_meta=False)        # only a constant differs
    assert build.module_key(a, s) != build.module_key(b, s)


def _two_assignments(tmp_path, cache=True):
    """tiny loaded and measured (quick protocol), and two assignments of it: every layer's first
    direct option, and every layer's first nchwc option."""
    from costmodels.problem import Assignment
    from graphselect.stages import load, measure
    s = settings.settings(cache=tmp_path / "r.sqlite" if cache else None, benchmark_runs=0, timing=QUICK,
                          families=["direct", "nchwc"], workers=2)      # two compile threads
    imp = load.load(models.build("tiny"), s)
    with settings.open_store(s) as store:
        meas = measure.measure(imp, s, store)
    out = []
    for fam in ("direct", "nchwc"):
        choice = tuple(next((k for k, o in enumerate(lt.options) if o.name.startswith(fam)), 0)
                       for lt in meas.plan.layers)
        out.append((fam, Assignment(choice, 0.0, fam, False)))
    return s, imp, meas, out


def test_a_rounds_networks_compile_together_in_order_and_match_onnxruntime(tmp_path):
    from graphselect.stages import load
    s, imp, meas, wants = _two_assignments(tmp_path)
    seen = []
    built = build.build_all(imp, meas, wants, s, lambda d, n, what: seen.append((d, n, what)))
    assert [b.label for b in built] == ["direct", "nchwc"]
    assert sorted(d for d, _, _ in seen) == [1, 2] and {n for _, n, _ in seen} == {2}
    assert {w for _, _, w in seen} == {"compiled direct", "compiled nchwc"}
    # every conv kernel measurement compiled is linked in, not compiled again (measure.kernels)
    convs = sum(1 for l in imp.lg.layers.values() if l.kind == "conv")
    assert all(b.executable is not None and b.origin == "linked" and b.linked >= convs for b in built)
    assert all(build.build_path(b.module, s).exists() for b in built)
    xs = load.inputs(imp)
    ref = load.reference_for(imp, s, xs)
    assert ref.name == "onnxruntime"
    for b in built:
        for got, want in zip(build.LocalNetwork(b.executable).run(xs), ref.outputs, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # a second call loads both from the cache, in the same order, and says so
    seen.clear()
    again = build.build_all(imp, meas, wants, s, lambda d, n, what: seen.append((d, n, what)))
    assert [b.label for b in again] == ["direct", "nchwc"]
    assert [b.library for b in again] == [build.build_path(b.module, s) for b in built]
    assert seen == [(2, 2, "loaded from the build cache")]


def test_one_failing_compile_of_a_round_raises_a_build_error_naming_it(tmp_path, monkeypatch):
    import threading
    from graphselect.codegen import lower
    from graphselect.errors import BuildError
    s, imp, meas, wants = _two_assignments(tmp_path, cache=False)
    real, lock, calls = lower.compile_module, threading.Lock(), []

    def flaky(mod, target):
        with lock:
            calls.append(1)
            n = len(calls)
        if n == 2:
            raise RuntimeError("injected\nthe compiler gave up")
        return real(mod, target)
    monkeypatch.setattr(lower, "compile_module", flaky)
    try:
        build.build_all(imp, meas, wants, s)
    except BuildError as e:
        assert "selection did not compile: the compiler gave up" in str(e)
        assert any(f"the {lb} selection" in str(e) for lb, _ in wants)
    else:
        raise AssertionError("no BuildError")
    assert len(calls) == 2                    # the other network was still compiled


def test_a_rounds_networks_are_lowered_in_the_calling_thread(tmp_path, monkeypatch):
    """Legalization runs TE under a tag scope that is one per process: two at once failed with
    "nested op_tag is not allowed" (a suite run on 2026-12-03). Only the compiles run in threads."""
    import threading
    from graphselect.codegen import lower
    s, imp, meas, wants = _two_assignments(tmp_path, cache=False)
    real, where = lower.lower, []

    def spy(mod, target):
        where.append(threading.get_ident())
        return real(mod, target)
    monkeypatch.setattr(lower, "lower", spy)
    built = build.build_all(imp, meas, wants, s)
    assert [b.label for b in built] == ["direct", "nchwc"]
    assert where == [threading.get_ident()] * 2


def test_an_unchanged_rerun_loads_the_network_timed_before_and_times_nothing_in_place(tmp_path):
    """Once a run's assignment was timed in place and nothing changed (no record re-timed), the
    next run takes it without a closed-loop round: loaded from the build cache, nothing timed in
    place, no prediction error claimed, the same outputs."""
    model = models.build("tiny")
    path = tmp_path / "records.sqlite"
    run = lambda: graphselect.optimize(model, cache=path, benchmark_runs=3, timing=QUICK,  # noqa: E731
                                       families=["direct", "nchwc"])       # with timing: the loop runs
    prev = run()
    for _ in range(3):
        # a record flagged by the run before is re-timed once, and may change the choice
        again = run()
        if again.report["records"]["reused"] == again.report["records"]["jobs"] - \
                len(again.report["records"]["pruned"]) and again.report["loop"]["rounds"][0]["networks"][0]["basis"] \
                == "timed before":
            break
        prev = again
    rounds = again.report["loop"]["rounds"]
    assert len(rounds) == 1 and again.report["loop"]["converged"]
    assert [n["measured_ms"] for n in rounds[0]["networks"]] == [None]
    assert rounds[0]["networks"][0]["basis"] == "timed before"
    assert again.extra["selection"].innet == {}
    assert again.report["prediction_error"] is None
    assert [b["origin"] for b in again.report["builds"]] == ["cache"]
    x = np.random.default_rng(4).standard_normal(again.input_shape).astype("float32")
    np.testing.assert_allclose(again.run(x), prev.run(x), rtol=1e-5, atol=1e-6)
