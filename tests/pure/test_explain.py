"""costmodels.explain: the reasons must follow from the Problem's own cost terms."""
import pytest

from costmodels.explain import REASONS, compare
from costmodels.problem import Choice, Edge, Node, Problem
from graphselect.solve import solve

MB = 2**20


def _chain(cache_bytes):
    """input -> a -> b -> output. Each conv: 'big' (fast warm, 20 MB, slow cold) or 'small'
    (4 MB); b also offers 'blk' in another layout."""
    src = Node("input", (Choice("input", 0.0, (), "A"),))
    a = Node("a", (Choice("big", 5.0, ("A",), "A", warm_cost=1.0, weight_bytes=20 * MB),
                   Choice("small", 2.0, ("A",), "A", warm_cost=1.5, weight_bytes=4 * MB)))
    b = Node("b", (Choice("big", 5.0, ("A",), "A", warm_cost=1.0, weight_bytes=20 * MB),
                   Choice("small", 2.0, ("A",), "A", warm_cost=1.5, weight_bytes=4 * MB)))
    out = Node("output", (Choice("output", 0.0, ("A",), None),))
    edges = (Edge(0, 1, 0), Edge(1, 2, 0), Edge(2, 3, 0))
    return Problem((src, a, b, out), edges, cache_bytes=cache_bytes, activation_bytes=MB)


def test_cache_reason_when_greedy_overflows():
    p = _chain(25 * MB)
    greedy = solve(p, method="greedy")
    best = solve(p, method="brute")
    assert greedy.choice == (0, 0, 0, 0) and not p.resident(greedy.choice)
    cmp = compare(p, best.choice, greedy.choice)
    assert cmp.baseline_ms == pytest.approx(10.0) and cmp.chosen_ms == pytest.approx(best.cost)
    assert cmp.chosen_resident and not cmp.baseline_resident
    assert cmp.changes and all(c.reason == "cache" for c in cmp.changes)
    ch = cmp.changes[0]
    assert ch.baseline_warm_ms == 1.0 and ch.baseline_ms == 5.0
    assert "does not fit the cache" in ch.text()
    d = cmp.as_dict()
    assert d["reasons"]["cache"] == len(cmp.changes) and d["changes"][0]["saved_ms"] > 0


def test_no_changes_when_equal():
    p = _chain(None)
    g = solve(p, method="greedy")
    cmp = compare(p, g.choice, g.choice)
    assert cmp.changes == () and cmp.chosen_ms == cmp.baseline_ms


def test_layout_reason():
    src = Node("input", (Choice("input", 0.0, (), "A"),))
    a = Node("a", (Choice("inA", 1.0, ("A",), "A"), Choice("inB", 0.9, ("B",), "B")))
    out = Node("output", (Choice("output", 0.0, ("A",), None),))
    tr = {("A", "B"): 0.5, ("B", "A"): 0.5}
    p = Problem((src, a, out), (Edge(0, 1, 0, tr), Edge(1, 2, 0, tr)))
    best = solve(p, method="brute")
    cmp = compare(p, best.choice, (0, 1, 0))
    assert [c.reason for c in cmp.changes] == ["layout"]
    assert cmp.changes[0].baseline_transform_ms == pytest.approx(1.0)
    assert cmp.changes[0].chosen_transform_ms == 0.0


@pytest.mark.parametrize("seed", range(30))
def test_random_problems_reasons_consistent(seed):
    from graphselect.solve.synthetic import random_problem
    from graphselect.errors import Infeasible
    p = random_problem(seed, residency=seed % 2 == 0)
    try:
        best = solve(p, method="brute")
        g = solve(p, method="greedy")
    except Infeasible:
        pytest.skip("random problem without a feasible assignment (or greedy dead-ends)")
    cmp = compare(p, best.choice, g.choice)
    assert cmp.chosen_ms <= cmp.baseline_ms + 1e-9
    diff = [i for i, (x, y) in enumerate(zip(best.choice, g.choice)) if x != y]
    assert sorted(c.node for c in cmp.changes) == diff
    for c in cmp.changes:
        assert c.reason in REASONS
        if c.reason == "cache":
            assert not cmp.baseline_resident and c.baseline_warm_ms < c.baseline_ms
        if c.reason == "faster":
            assert c.chosen_ms < c.baseline_ms
