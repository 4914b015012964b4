"""measure.sizes: which channel counts of a size group are timed, and how the rest are priced."""
import doctest
import random

import pytest

from graphselect.measure import sizes


def test_doctests():
    assert doctest.testmod(sizes).failed == 0


def test_size_groups_hold_one_op_layout_and_spatial_size():
    a = sizes.size_key("relax.nn.relu in=[(1, 96, 28, 28)] out=(1, 96, 28, 28)  clamp=('max', 0.0)")
    b = sizes.size_key("relax.nn.relu in=[(1, 160, 28, 28)] out=(1, 160, 28, 28)  clamp=('max', 0.0)")
    c = sizes.size_key("relax.nn.relu in=[(1, 96, 14, 14)] out=(1, 96, 14, 14)  clamp=('max', 0.0)")
    d = sizes.size_key("relax.add in=[(1, 96, 28, 28)] out=(1, 96, 28, 28) ")
    assert a[0] == b[0] and (a[1], b[1]) == (96, 160)
    assert len({a[0], c[0], d[0]}) == 3
    # convs, epilogues and ops with a non-4-D output are never grouped
    for w in ("conv2d n1 c64 h56 w56 o128 k1x1 s1x1 p0,0,0,0 g1 epi=bias+relu",
              "epilogue conv2d n1 c64 h56 w56 o128 k1x1 s1x1 p0,0,0,0 g1 epi=bias+relu",
              "relax.matmul in=[(1, 1024)] out=(1, 1000) relax.attrs.MatmulAttrs(out_dtype=None)",
              "graphselect reference kernel"):
        assert sizes.size_key(w) is None


@pytest.mark.parametrize("seed", range(20))
def test_every_untimed_count_lies_between_two_timed_ones_within_ratio(seed):
    rnd = random.Random(seed)
    allc = sorted(rnd.sample(range(8, 2048, 8), rnd.randint(1, 40)))
    known = set(rnd.sample(allc, rnd.randint(0, len(allc) // 3)))
    needed = set(allc) - known
    t = sizes.to_time(needed, known)
    assert t <= needed
    timed = sorted(t | known)
    assert timed[0] == allc[0] and timed[-1] == allc[-1]     # never extrapolated
    for c in needed - t:
        lo = max(x for x in timed if x < c)
        hi = min(x for x in timed if x > c)
        assert hi <= sizes.RATIO * lo
        # and predict agrees it can price it from those points
        pts = {x: (float(x), float(x) / 2, float(x) * 2) for x in timed}
        p = sizes.predict(c, pts)
        assert p is not None and p.cold_ms == pytest.approx(c) and p.incold_ms == pytest.approx(2 * c)


def test_records_of_the_store_spare_timings_and_a_lone_count_is_timed():
    assert sizes.to_time([96, 160], [64, 128, 192]) == set()
    assert sizes.to_time([96, 160], []) == {96, 160}       # the ends
    assert sizes.to_time([640], [64, 128]) == {640}
    # a gap the records leave over RATIO is filled
    assert sizes.to_time([128, 192, 256, 320], [64, 512]) == {128, 256}


def test_predict_never_extrapolates_or_spans_a_wide_gap():
    pts = {64: (1.0, 1.0, 1.0), 128: (2.0, 2.0, 2.0), 512: (8.0, 8.0, 8.0)}
    assert sizes.predict(32, pts) is None and sizes.predict(1024, pts) is None
    assert sizes.predict(256, pts) is None                 # 512 > 2 x 128
    assert sizes.predict(64, pts).cold_ms == 1.0
    assert sizes.predict(96, pts).cold_ms == pytest.approx(1.5)


def test_a_recorded_size_counts_as_timed_even_when_its_flag_keeps_it_out_of_the_points():
    """The measure stage re-times a flagged record before pricing, so what it prices must not
    change with the flag: a rerun prices what the run before it did."""
    from graphselect.measure.jobs import Job
    from graphselect.stages.measure import _to_predict
    wl = lambda c: f"layout_transform (1, {c}, 7, 7)"      # noqa: E731
    jobs = [Job(wl(c), "NCHW->NCHW8c", lambda: [], version="v") for c in (64, 96, 128)]
    g = sizes.size_key(wl(64))[0], "NCHW->NCHW8c", "v"
    every = {g: {64: (1.0, 1.0, 1.0), 128: (2.0, 2.0, 2.0)}}
    recorded = {(wl(64), "NCHW->NCHW8c"), (wl(128), "NCHW->NCHW8c")}
    want = {(wl(96), "NCHW->NCHW8c"): (g, 96)}
    assert _to_predict(jobs, recorded, every) == want
    # 128's record is flagged: the store's points leave it out, and 96 is still priced, not timed
    assert _to_predict(jobs, recorded, {g: {64: (1.0, 1.0, 1.0)}}) == want
    # with no record of 128, the group's top is timed and 96 between 64 and 128 priced
    assert _to_predict(jobs, {(wl(64), "NCHW->NCHW8c")}, {g: {64: (1.0, 1.0, 1.0)}}) == want
    # on a fresh store 64 and 128 are timed (the ends), 96 priced
    assert _to_predict(jobs, set(), {}) == want
