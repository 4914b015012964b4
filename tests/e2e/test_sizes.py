"""Layout ops and transforms between timed channel counts are priced, not timed (measure.sizes;
issue 24, item 1): checked through optimize on a small dense block, whose concats, BNs and ReLUs
grow 16 -> 56 channels at one spatial size."""
import math
import sqlite3

from graphselect.measure import local as local_mod, run as run_mod, sizes
from graphselect.measure.jobs import TimingConfig
from models.builder import GraphBuilder

import graphselect

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)


def _dense_block():
    b = GraphBuilder("dense", batch=1, image_size=8, seed=3, in_channels=3)
    x = b.conv("input", "stem", 16, 3, pad=1)
    for j in range(5):
        y = b.relu(b.bn(x, f"l{j}.bn"), f"l{j}.relu")
        y = b.conv(y, f"l{j}.conv", 8, 3, pad=1)
        x = b.concat([x, y], f"l{j}.concat")
    return b.finish(x, doc="dense block", out_shape=[1, b.channels[x], 8, 8])


def _run(model, path, **kw):
    return graphselect.optimize(model, cache=path, benchmark_runs=0, timing=QUICK, families=["direct", "nchwc"], **kw)


def _stored(path):
    with sqlite3.connect(path) as db:
        return {(w, c) for w, c in db.execute("SELECT workload, candidate FROM records_v4")}


def test_sizes_between_timed_ones_are_priced_not_timed_and_never_stored(tmp_path, monkeypatch):
    m = _dense_block()
    store = tmp_path / "a.sqlite"
    res = _run(m, store)
    rec = res.report["records"]
    priced = rec["predicted"]
    assert priced, "nothing priced from its sizes"
    assert rec["reused"] + rec["retimed"] + rec["new"] + len(rec["pruned"]) + len(priced) == rec["jobs"]
    assert res.report["max_rel_err"] < 1e-4                 # the network still matches onnxruntime
    stored = _stored(store)
    meas = res.extra["measured"].measurements
    for p in priced:
        key = (p["workload"], p["candidate"])
        assert key not in stored                           # predictions are made again, never kept
        g, ch = sizes.size_key(p["workload"])
        # its two timed neighbours in the same group bracket it within RATIO, and it lies between them
        nb = {sizes.size_key(w)[1]: mm for (w, c), mm in meas.items() if c == p["candidate"]
              and sizes.size_key(w) is not None and sizes.size_key(w)[0] == g and (w, c) in stored}
        lo, hi = max(c for c in nb if c < ch), min(c for c in nb if c > ch)
        assert hi <= sizes.RATIO * lo and p["why"] == f"interpolated between its timed channel counts {lo} and {hi}"
        t = meas[key]
        assert min(nb[lo].cold_ms, nb[hi].cold_ms) <= t.cold_ms <= max(nb[lo].cold_ms, nb[hi].cold_ms)
        assert math.isfinite(t.warm_ms) and t.error is None

    # an unchanged rerun times nothing: the priced ones are priced again from the records. The
    # load probe is pinned to call no record stale: under load, or with a warm-above-cold flag on
    # a 2-us kernel, it re-times records at random (tests/tvm/test_probe.py tests that), and this
    # test is about what the sizes rule times
    monkeypatch.setattr(local_mod, "stale", lambda *a, **k: False)
    monkeypatch.setattr(run_mod, "stale", lambda *a, **k: False)
    again = _run(m, store)
    r2 = again.report["records"]
    assert r2["new"] == 0 and r2["retimed"] == 0
    assert {(p["workload"], p["candidate"]) for p in r2["predicted"]} == {(p["workload"], p["candidate"]) for p in priced}
    assert _stored(store) == stored

    # time_all times every size
    full = _run(m, tmp_path / "b.sqlite", time_all=True)
    assert full.report["records"]["predicted"] == []
    assert {(p["workload"], p["candidate"]) for p in priced} <= _stored(tmp_path / "b.sqlite")
