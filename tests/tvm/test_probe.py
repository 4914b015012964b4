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
