"""What a run pruned is pruned again by a rerun while the records it was decided from are
unchanged (measure stage, ``RecordStore.pruned``; issue 24, item 4): a refitted parameter model
must not make an unchanged rerun time what its first run pruned. Checked through optimize on a
residual block, whose first conv is scouted and whose second is its twin."""
import numpy as np
import onnxruntime as ort

import graphselect
from graphselect.measure import local as local_mod, run as run_mod, scouts, twins
from graphselect.measure.jobs import TimingConfig
from graphselect.stages import settings
from graphselect.measure.store import RecordStore
from models.builder import GraphBuilder

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)


def _block():
    """x -> conv3x3 -> relu -> conv3x3 -> + x -> relu: two convs equal but for the epilogue."""
    b = GraphBuilder("block", batch=1, image_size=12, seed=5, in_channels=16)
    y = b.relu(b.conv("input", "conv0", 16, 3, pad=1), "relu0")
    y = b.relu(b.add(b.conv(y, "conv1", 16, 3, pad=1), "input", "add"), "relu1")
    return b.finish(y, doc="residual block", out_shape=[1, 16, 12, 12])


def _run(model, path, **kw):
    return graphselect.optimize(model, cache=path, benchmark_runs=0, timing=QUICK, families=["direct", "nchwc"], **kw)


def _ctx(path):
    return settings.settings(cache=path).ctx


def _pruned(res):
    return {(p["workload"], p["candidate"]): p["why"] for p in res.report["records"]["pruned"]}


def _strict(monkeypatch):
    """The first run prunes all it can: scouts and twins keep only the fastest and each layout
    pair's best."""
    strict = scouts.prune
    monkeypatch.setattr(scouts, "prune", lambda *a, **k: strict(*a, **{**k, "margin": 0.0}))
    monkeypatch.setattr(twins, "MARGIN", 0.0)


def _keep_all(monkeypatch):
    """The rules as a rerun's refitted parameter model might have them: everything can win."""
    monkeypatch.setattr(scouts, "prune", lambda cands, *a, **k: (list(cands), []))
    monkeypatch.setattr(twins, "prune", lambda later, *a, **k: (list(later), []))


def test_an_unchanged_rerun_prunes_what_the_first_run_pruned_and_a_changed_record_decides_again(tmp_path, monkeypatch):
    m = _block()
    path = tmp_path / "a.sqlite"
    with monkeypatch.context() as mp:
        _strict(mp)
        first = _run(m, path)
    gone = _pruned(first)
    plan = first.extra["plan"]
    w0, w1 = (plan.table(n).options[0].kernel[0] for n in ("conv0", "conv1"))
    # the twin (decided from the scouted conv's records) prunes; whether the scouted conv itself
    # has a candidate left to prune at margin 0 depends on its timings (in one full-suite run it had none)
    assert w1 in {w for w, _ in gone} and {w for w, _ in gone} <= {w0, w1}
    # the rerun's rules would now keep everything (as a parameter model refitted on more records
    # may): what decides is the kept decision. The load probe is pinned to call no record stale
    # (tests/tvm/test_probe.py tests that): this test is about what pruning times
    monkeypatch.setattr(local_mod, "stale", lambda *a, **k: False)
    monkeypatch.setattr(run_mod, "stale", lambda *a, **k: False)
    _keep_all(monkeypatch)
    again = _run(m, path)
    r = again.report["records"]
    assert r["new"] == 0 and r["retimed"] == 0
    assert _pruned(again) == gone                        # the same candidates, for the same reasons
    assert again.assignment == first.assignment
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype("float32")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(again.run(x), want, rtol=1e-4, atol=1e-5)

    # one record of the scouted conv removed: its decision and its twin's (decided from its
    # records) are made again, by the rules as they now are (keep everything)
    store = RecordStore(path)
    rec = next(x for x in store.records() if x["workload"] == w0 and x["cold_ms"] is not None)
    assert store.delete(key=(w0, rec["candidate"], rec["version"])) == 1
    store.close()
    third = _run(m, path)
    r = third.report["records"]
    assert _pruned(third) == {}
    assert r["new"] == len(gone) + 1
    timed = {(x["workload"], x["candidate"]) for x in RecordStore(path).records()}
    assert set(gone) <= timed


def test_time_all_ignores_a_kept_decision_and_leaves_it_kept(tmp_path, monkeypatch):
    m = _block()
    path = tmp_path / "a.sqlite"
    with monkeypatch.context() as mp:
        _strict(mp)
        gone = _pruned(_run(m, path))
    assert gone
    store = RecordStore(path)
    kept = store.pruned(_ctx(path))
    assert {w: {c for c, _v, _why in g} for w, (_b, g) in kept.items()} == \
        {w: {c for ww, c in gone if ww == w} for w, _ in gone}
    store.close()
    full = _run(m, path, time_all=True)
    assert full.report["records"]["pruned"] == [] and full.report["records"]["new"] == len(gone)
    store = RecordStore(path)
    assert store.pruned(_ctx(path)) == kept
    assert store.forget_pruned() == len(kept) and store.pruned(_ctx(path)) == {}
    store.close()
