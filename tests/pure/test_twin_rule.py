"""measure.twins: which candidates of a conv's later twins are timed (issue 24, items 1 and 3)."""
import math

from graphselect.measure import twins

R = "conv2d n1 c64 h56 w56 o64 k3x3 s1x1 p1,1,1,1 g1"


def test_twins_are_convs_equal_but_for_the_epilogue_and_the_first_in_order_is_timed_whole():
    ws = [f"{R} epi=bias+relu", "layout_transform (1, 64, 56, 56)", f"{R} epi=bias+res+relu", f"{R} epi=bias+relu",
          f"{R.replace('c64', 'c32')} epi=bias+relu", f"{R} epi=relu"]
    assert twins.split(ws) == {f"{R} epi=bias+res+relu": f"{R} epi=bias+relu", f"{R} epi=relu": f"{R} epi=bias+relu"}
    assert twins.split(reversed(ws))[f"{R} epi=bias+relu"] == f"{R} epi=relu"


def _layouts(w, c):
    return c.split("/")[0]           # "16c/a": layout pair 16c


def test_a_later_twin_times_what_can_win_and_the_fastest_of_each_layout_pair():
    first, later = f"{R} epi=bias+relu", f"{R} epi=bias+res+relu"
    timed = {(first, "16c/a"): (1.00, 0.80), (first, "16c/b"): (1.14, 0.95), (first, "16c/c"): (1.30, 0.90),
             (first, "16c/d"): (1.60, 1.50), (first, "32c/a"): (2.00, 1.90), (first, "32c/b"): (2.50, 2.40),
             (first, "8c/a"): (math.inf, math.inf)}
    cands = ["16c/a", "16c/b", "16c/c", "16c/d", "32c/a", "32c/b", "8c/a", "64c/new"]
    keep, gone = twins.prune([(later, c) for c in cands], {later: first}, timed, _layouts)
    kept = [c for _, c in keep]
    # within 15% cold (b) or warm (c) of the best; the fastest of layout 32c; one the first twin could
    # not run (8c/a) and one it never had (64c/new) are timed, for want of evidence
    assert kept == ["16c/a", "16c/b", "16c/c", "32c/a", "8c/a", "64c/new"]
    assert [(g.workload, g.candidate) for g in gone] == [(later, "16c/d"), (later, "32c/b")]
    assert gone[0].why == f"its twin {first} ran it 1.60x the fastest (16c/a); 16c is kept by 16c/a"
    assert "kept by 32c/a" in gone[1].why


def test_no_first_twin_timings_prunes_nothing_and_a_wider_margin_keeps_more():
    first, later = f"{R} epi=bias+relu", f"{R} epi=relu"
    keys = [(later, "16c/a"), (later, "16c/d")]
    assert twins.prune(keys, {later: first}, {}, _layouts) == (keys, [])
    timed = {(first, "16c/a"): (1.0, 1.0), (first, "16c/d"): (1.6, 1.6)}
    assert twins.prune(keys, {later: first}, timed, _layouts)[0] == keys[:1]
    assert twins.prune(keys, {later: first}, timed, _layouts, margin=0.7)[0] == keys
