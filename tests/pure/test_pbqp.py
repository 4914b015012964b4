"""PBQP reductions against brute force and the tree DP; RN only where no exact reduction applies."""
import math
import random

import numpy as np
import pytest

from costmodels.problem import Choice, Edge, Node, Problem
from graphselect.errors import Infeasible
from graphselect.solve import METHODS, brute, dp, pbqp, solve, synthetic

SEEDS = range(200)


def _check(p, heuristic_miss_ok=False):
    """pbqp against brute force; returns (ref, assignment, info), or None when infeasible or
    (``heuristic_miss_ok``) when an RN step led the heuristic into an infinite cost."""
    try:
        ref = brute.solve(p)
    except Infeasible:
        with pytest.raises(Infeasible):
            pbqp.solve(p)
        return None
    if heuristic_miss_ok:
        try:
            pbqp.solve(p)
        except Infeasible as err:
            assert "heuristic RN" in str(err) and "cp-sat" in str(err)
            return None
    a, info = pbqp.solve_with_info(p)
    assert a.method == "pbqp"
    assert a.cost == p.evaluate(a.choice) < math.inf
    assert a.cost >= ref.cost - 1e-9
    assert a.optimal is (info["rn_reductions"] == 0 and p.cache_bytes is None)
    assert a.resident == (p.resident(a.choice) if p.cache_bytes is not None else None)
    if a.optimal:
        assert a.cost == pytest.approx(ref.cost, rel=1e-9, abs=1e-9)
    return ref, a, info


@pytest.mark.parametrize("residency", [False, True])
def test_random_problems_against_brute_force(residency):
    seen = {"feasible": 0, "infeasible": 0, "rii": 0}
    for seed in SEEDS:
        got = _check(synthetic.random_problem(seed, residency=residency))
        seen["infeasible" if got is None else "feasible"] += 1
        if got:
            seen["rii"] += got[2]["rii"] > 0
            assert got[2]["rn_reductions"] == 0          # series-parallel: always reducible
    assert all(k >= 10 for k in seen.values()), seen


def test_exact_on_chains_and_trees():
    for seed in range(40):
        p = synthetic.random_problem(seed)
        if any(sum(e.src == v for e in p.edges) > 1 for v in range(len(p.nodes))):
            continue                                     # reconvergent: not a tree
        try:
            ref = dp.solve(p)
        except Infeasible:
            with pytest.raises(Infeasible):
                pbqp.solve(p)
            continue
        a = pbqp.solve(p)
        assert a.optimal and a.cost == pytest.approx(ref.cost, rel=1e-9, abs=1e-9)
    for seed in range(3):
        p = synthetic.chain(120, seed=seed)
        a, info = pbqp.solve_with_info(p)
        assert info["rn_reductions"] == 0 and info["rii"] == 0
        assert a.optimal and a.cost == pytest.approx(dp.solve(p).cost, rel=1e-9)


def test_large_series_parallel_networks_need_no_heuristic():
    for gen in (synthetic.residual, synthetic.branching):
        p = gen(150, seed=2)
        a, info = pbqp.solve_with_info(p)
        assert info["rn_reductions"] == 0 and info["rii"] > 0 and a.optimal
        assert a.cost <= solve(p, method="greedy").cost


def _clique(k, seed, n_choices=3, layouts="ABC", p_missing=0.0):
    """k agnostic nodes, an edge i -> j for every i < j (port = i's rank among j's inputs)."""
    rng = random.Random(seed)
    nodes = []
    for j in range(k):
        ports = j
        nodes.append(Node(f"n{j}", tuple(Choice(f"n{j}_{c}", round(rng.uniform(0.5, 3.0), 3),
                                                (rng.choice(layouts),) * ports, rng.choice(layouts))
                                         for c in range(n_choices))))
    edges = []
    for j in range(k):
        for port, i in enumerate(range(j)):
            t = {(p, q): round(rng.uniform(0.1, 2.0), 3) for p in layouts for q in layouts
                 if p != q and rng.random() >= p_missing}
            edges.append(Edge(i, j, port, t))
    return Problem(tuple(nodes), tuple(edges))


def test_four_clique_forces_rn():
    for seed in range(30):
        p = _clique(4, seed)
        got = _check(p)
        assert got is not None
        _, a, info = got
        assert info["rn_reductions"] >= 1 and not a.optimal


def test_cliques_with_missing_transforms_stay_sound():
    # RN may steer into a missing transform on a feasible problem (then Infeasible names the
    # heuristic); a cost it returns is always real and never below the optimum
    found = 0
    for seed in range(60):
        found += _check(_clique(5, seed, p_missing=0.5), heuristic_miss_ok=True) is not None
    assert found >= 5


def test_parallel_edges_are_merged():
    # two edges between the same pair (a concat of x with itself): both transforms count
    nodes = (Node("x", (Choice("xa", 1.0, (), "A"), Choice("xb", 1.2, (), "B"))),
             Node("cat", (Choice("ca", 1.0, ("B", "B"), "B"), Choice("cb", 1.0, ("A", "B"), "B"))))
    t = {("A", "B"): 0.15, ("B", "A"): 5.0}
    p = Problem(nodes, (Edge(0, 1, 0, t), Edge(0, 1, 1, t)))
    a, info = pbqp.solve_with_info(p)
    assert a.choice == brute.solve(p).choice == (0, 1) and a.cost == pytest.approx(2.15)
    assert info["ri"] == 1 and info["rn_reductions"] == 0


def test_infinite_costs_do_not_make_nan():
    nodes = (Node("in", (Choice("i", 0.0, (), "A"),)),
             Node("c", (Choice("x", math.inf, ("A",), "A"), Choice("y", 1.0, ("A",), "B"))),
             Node("out", (Choice("o", 0.0, ("A",), None),)))
    p = Problem(nodes, (Edge(0, 1, 0), Edge(1, 2, 0, {("B", "A"): 0.5})))
    with np.errstate(invalid="raise"):
        a = pbqp.solve(p)
    assert a.choice == (0, 1, 0) and a.cost == 1.5 and a.optimal


def test_registered_as_a_general_method():
    assert "pbqp" in METHODS
    a = solve(synthetic.residual(40, seed=0), method="pbqp")
    assert a.method == "pbqp" and a.optimal
    infeasible = _clique(4, 0, layouts="AB", p_missing=1.0)
    for method in ("brute", "pbqp"):
        with pytest.raises(Infeasible):
            solve(infeasible, method=method)
