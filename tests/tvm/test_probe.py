"""The load probe (measure.local.LoadProbe) and the quiet time kept between runs (stages.measure.keep_quiet)."""
import math
from types import SimpleNamespace

import pytest
import tvm

from graphselect.measure.local import LOAD_TOLERANCE, REFERENCE, LoadProbe, reference_version
from graphselect.measure.store import Context, RecordStore
from graphselect.stages.measure import keep_quiet, load_probe

CTX = Context(target="llvm test", cpu="test cpu", threads=2, tvm="test")


@pytest.fixture(scope="module")
def probe():
    return LoadProbe(tvm.target.Target("llvm"))


def test_the_probe_judges_load_against_its_quiet_time(probe):
    assert len(probe.readings) >= 10 and all(r > 0 for r in probe.readings)
    floor = probe.own_ms
    assert min(probe.readings) <= floor <= sorted(probe.readings)[1]    # the lower decile, not the fastest
    assert probe.quiet_ms == floor                                       # nothing stored: its own floor
    assert not probe.loaded(floor * (LOAD_TOLERANCE - 0.05)) and probe.loaded(floor * (LOAD_TOLERANCE + 0.05))
    # a stored quiet time far below anything this machine does: every reading is load
    probe.stored_ms = floor / 3
    try:
        assert probe.quiet_ms == floor / 3 and not probe.quiet()
    finally:
        probe.stored_ms = math.inf


def test_the_quiet_time_kept_can_rise_again(tmp_path):
    store = RecordStore(tmp_path / "r.sqlite")
    s = SimpleNamespace(ctx=CTX, remote=False, target=tvm.target.Target("llvm"))
    keep_quiet(s, store, SimpleNamespace(own_ms=0.10))
    assert store.get(CTX, *REFERENCE, reference_version()).cold_ms == pytest.approx(0.10)
    assert store.get(CTX, *REFERENCE, "") is None                      # filed under its own version
    # a slower machine from now on: the next run keeps its own floor instead of the old minimum
    keep_quiet(s, store, SimpleNamespace(own_ms=0.13))
    assert store.get(CTX, *REFERENCE, reference_version()).cold_ms == pytest.approx(0.13)
    keep_quiet(s, store, SimpleNamespace(own_ms=math.inf))             # no reading: nothing stored
    assert store.get(CTX, *REFERENCE, reference_version()).cold_ms == pytest.approx(0.13)
    # the next probe starts from the stored time
    p = load_probe(s, store)
    assert p.stored_ms == pytest.approx(0.13)
    assert load_probe(SimpleNamespace(ctx=CTX, remote=True), store) is None   # a device: no probe here
    store.close()


class ScriptedProbe(LoadProbe):
    """A LoadProbe whose reference readings follow a script (no kernel)."""

    def __init__(self, script, start=()):
        self.stored_ms = math.inf
        self.readings = list(start)
        self._script = iter(script)

    def time(self):
        ms = next(self._script)
        self.readings.append(ms)
        return ms


def test_samples_are_kept_against_the_quiet_time_at_the_end_of_their_batch(monkeypatch):
    """The quiet time falls during a batch: samples taken at 1.05x the early floor, 1.3x the late
    one, are taken again, so the record's reference reading is within tolerance of the floor the
    run ends with (and the next run does not call it stale)."""
    from graphselect.measure import local
    from graphselect.measure.jobs import TimingConfig
    monkeypatch.setattr(local, "sample", lambda kernels, dev, timing: (1.0, 1.0, 1.0))
    # ten readings at 1.0 before the batch; the first three samples at 1.05, then the machine is quieter
    probe = ScriptedProbe([1.05] * 3 + [0.8] * 60, start=[1.0] * 10)
    ready = [(SimpleNamespace(job=SimpleNamespace(workload="w", candidate=f"c{i}", version="v")), [], 0.0, None)
             for i in range(6)]
    out = local._time_batch(ready, None, TimingConfig(rounds=3), probe)
    assert probe.quiet_ms == pytest.approx(0.8)
    for _a, m in out:
        assert m.flag is None and m.load == pytest.approx(0.8)
        assert not local.stale(m, probe.quiet_ms)


def test_a_run_retimes_what_its_final_quiet_time_calls_stale(tmp_path):
    """A record taken early in a run at 1.2x the quiet time the run ends with is taken again
    before the run ends (one more time, not in a loop)."""
    from graphselect.measure.jobs import Job
    from graphselect.measure.run import measure
    from graphselect.measure.store import Measurement

    class Runner:
        files = remote = False

        def __init__(self):
            self.probe = SimpleNamespace(quiet_ms=1.0)
            self.calls = []

        def run(self, artifacts, timing):
            for a in artifacts:
                self.calls.append(a.job.candidate)
                load = 1.2 if a.job.candidate == "early" and self.calls.count("early") == 1 else 1.0
                yield a, Measurement(a.job.workload, a.job.candidate, 1.0, 1.0, version=a.job.version, load=load)

    store = RecordStore(tmp_path / "r.sqlite")
    built = []
    jobs = [Job("w", c, lambda c=c: built.append(c) or [], version="v") for c in ("early", "quiet")]
    runner = Runner()
    out = measure(jobs, target=tvm.target.Target("llvm"), ctx=CTX, store=store, runner=runner, workers=1)
    assert sorted(runner.calls) == ["early", "early", "quiet"]
    assert out[("w", "early")].load == 1.0 and store.get(CTX, "w", "early", "v").load == 1.0
    # the re-timing reuses the kernel it built: each job is built once
    assert sorted(built) == ["early", "quiet"]
    store.close()


def test_racing_gives_a_clear_loser_one_round_and_the_rest_every_round(monkeypatch):
    """A conv candidate over TimingConfig.race times its workload's fastest, cold and warm, after
    a round has that round only; a candidate slower cold but not warm, a candidate of another
    workload, and a non-conv kernel get every round; ``best`` (timed before) counts as fastest."""
    from graphselect.measure import local
    from graphselect.measure.jobs import TimingConfig
    times = {"fast": (1.0, 1.0), "loser": (2.0, 2.0), "cold_only": (2.0, 1.1), "other": (5.0, 5.0),
             "op": (9.0, 9.0), "vs_best": (1.2, 1.2)}
    calls: dict = {}

    def sample(kernels, dev, timing):
        calls[kernels] = calls.get(kernels, 0) + 1
        return (*times[kernels], times[kernels][0])
    monkeypatch.setattr(local, "sample", sample)
    conv, conv2 = "conv2d n1 c8 h8 w8 o8 k3x3 epi=bias", "conv2d n1 c8 h8 w8 o16 k3x3 epi=bias"
    work = {"fast": conv, "loser": conv, "cold_only": conv, "other": conv2, "op": "layout_transform x",
            "vs_best": "conv2d n1 c4 epi=bias"}
    ready = [(SimpleNamespace(job=SimpleNamespace(workload=work[k], candidate=k, version="v")), k, 0.0, None)
             for k in times]
    out = dict((a.job.candidate, m) for a, m in
               local._time_batch(ready, None, TimingConfig(rounds=3), None, {"conv2d n1 c4 epi=bias": (0.5, 0.5)}))
    assert calls == {"fast": 3, "loser": 1, "cold_only": 3, "other": 3, "op": 3, "vs_best": 1}
    assert out["loser"].cold_ms == 2.0 and out["loser"].flag is None
    # race=0: every candidate every round
    calls.clear()
    local._time_batch(ready, None, TimingConfig(rounds=3, race=0), None)
    assert set(calls.values()) == {3}
