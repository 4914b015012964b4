"""Every solver on the same problems: exact ones agree with brute force, the greedy never beats it."""
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from costmodels.problem import Choice, Edge, Node, Problem
from graphselect.errors import Infeasible
from graphselect.solve import METHODS, brute, cp_sat, solve, synthetic

SEEDS = range(200)


def _valid(problem, a):
    assert len(a.choice) == len(problem.nodes)
    assert all(0 <= c < len(n.choices) for c, n in zip(a.choice, problem.nodes))
    assert a.cost == problem.evaluate(a.choice) < math.inf
    assert a.gap >= 0


@pytest.mark.parametrize("seed", SEEDS)
def test_solvers_against_brute_force(seed):
    p = synthetic.random_problem(seed)
    try:
        ref = solve(p, method="brute")
    except Infeasible:
        for method in METHODS:
            with pytest.raises(Infeasible):
                solve(p, method=method)
        return
    assert ref.optimal
    _valid(p, ref)
    exact = solve(p, method="cp-sat", time_limit=10)
    _valid(p, exact)
    assert exact.optimal and exact.gap == 0
    assert exact.cost == pytest.approx(ref.cost, rel=1e-6, abs=1e-9)   # costs are multiples of 1e-3
    base = solve(p, method="greedy")
    _valid(p, base)
    assert not base.optimal
    assert base.cost >= ref.cost - 1e-9


def test_random_problems_cover_the_interesting_cases():
    seen = Counter()
    for seed in SEEDS:
        p = synthetic.random_problem(seed)
        kinds = {n.name.rstrip("0123456789") for n in p.nodes}
        seen.update(k for k in ("add", "concat", "relu") if k in kinds)
        seen["inf choice"] += any(c.cost == math.inf for n in p.nodes for c in n.choices)
        layouts = {c.out_layout for n in p.nodes for c in n.choices} - {None}
        seen["missing pair"] += any(len(e.transform) < len(layouts) * (len(layouts) - 1) for e in p.edges)
        try:
            ref = brute.solve(p)
        except Infeasible:
            seen["infeasible"] += 1
            continue
        seen["greedy suboptimal"] += solve(p, method="greedy").cost > ref.cost + 1e-9
        seen["nontrivial"] += sum(len(n.choices) > 1 for n in p.nodes) >= 4
    for what in ("add", "concat", "relu", "inf choice", "missing pair", "infeasible",
                 "greedy suboptimal", "nontrivial"):
        assert seen[what] >= 10, (what, seen)


def _chain(*convs, transform):
    """input (NCHW) -> convs... -> output (NCHW); each conv a list of (cost, in, out)."""
    nodes = [Node("input", (Choice("input", 0.0, (), "NCHW"),))]
    for i, cands in enumerate(convs):
        nodes.append(Node(f"conv{i}", tuple(Choice(f"c{k}", cost, (li,), lo)
                                            for k, (cost, li, lo) in enumerate(cands))))
    nodes.append(Node("output", (Choice("output", 0.0, ("NCHW",), None),)))
    edges = tuple(Edge(i, i + 1, 0, dict(transform)) for i in range(len(nodes) - 1))
    return Problem(tuple(nodes), edges)


def test_greedy_is_per_layer_fastest():
    p = _chain([(1.0, "NCHW", "NCHW8c"), (1.5, "NCHW", "NCHW")],
               [(1.0, "NCHW", "NCHW"), (5.0, "NCHW8c", "NCHW")],
               transform={("NCHW8c", "NCHW"): 2.0, ("NCHW", "NCHW8c"): 2.0})
    g = solve(p, method="greedy")
    assert g.choice == (0, 0, 0, 0) and g.cost == 1.0 + 2.0 + 1.0
    for method in ("cp-sat", "brute"):
        a = solve(p, method=method)
        assert a.choice == (0, 1, 0, 0) and a.cost == 2.5 and a.optimal


def test_greedy_breaks_ties_by_lower_index():
    p = _chain([(1.0, "NCHW", "NCHW"), (1.0, "NCHW", "NCHW")], transform={})
    assert solve(p, method="greedy").choice == (0, 0, 0)


@pytest.mark.parametrize("method", list(METHODS))
def test_all_inf_node_is_infeasible(method):
    p = _chain([(1.0, "NCHW", "NCHW")], [(math.inf, "NCHW", "NCHW"), (math.inf, "NCHW", "NCHW8c")],
               transform={("NCHW8c", "NCHW"): 1.0})
    with pytest.raises(Infeasible, match="conv1"):
        solve(p, method=method)
    with pytest.raises(Infeasible):
        METHODS[method](p, time_limit=5)


@pytest.mark.parametrize("method", list(METHODS))
def test_forced_impossible_edge_is_infeasible(method):
    p = _chain([(1.0, "NCHW8c", "NCHW8c"), (math.inf, "NCHW", "NCHW")],
               transform={("NCHW8c", "NCHW"): 1.0})           # no NCHW -> NCHW8c
    with pytest.raises(Infeasible):
        solve(p, method=method)


def _parity_trap():
    """Every edge is satisfiable alone, the whole is not: x's layout reaches the Add directly and
    flipped through y, and A <-> B cannot be converted (arc consistency does not see it)."""
    def agnostic(name, ports):
        return Node(name, tuple(Choice(f"{name}_{l}", 1.0, (l,) * ports, l) for l in "AB"))

    nodes = (Node("input", (Choice("input", 0.0, (), "N"),)),
             agnostic("x", 1),
             Node("y", (Choice("a2b", 1.0, ("A",), "B"), Choice("b2a", 1.0, ("B",), "A"))),
             agnostic("add", 2))
    t = {("N", "A"): 0.5, ("N", "B"): 0.5}
    edges = (Edge(0, 1, 0, t), Edge(1, 2, 0, t), Edge(1, 3, 0, t), Edge(2, 3, 1, t))
    return Problem(nodes, edges)


@pytest.mark.parametrize("method", list(METHODS))
def test_infeasible_beyond_arc_consistency(method):
    with pytest.raises(Infeasible):
        solve(_parity_trap(), method=method)


def test_unknown_method_lists_the_methods():
    with pytest.raises(ValueError, match="cp-sat.*greedy.*brute"):
        solve(synthetic.random_problem(0), method="no-such-method")
    with pytest.raises(ValueError):
        solve(synthetic.random_problem(0), time_limit=0)


def test_brute_refuses_large_problems():
    with pytest.raises(ValueError, match="max_combinations"):
        brute.solve(synthetic.chain(50), max_combinations=10_000)


def test_greedy_needs_a_dag():
    n = Node("n", (Choice("c", 1.0, ("NCHW",), "NCHW"),))
    with pytest.raises(ValueError, match="cycle"):
        solve(Problem((n, n), (Edge(0, 1, 0), Edge(1, 0, 0))), method="greedy")


@pytest.mark.parametrize("method", list(METHODS))
def test_trivial_problems(method):
    assert solve(Problem((), ()), method=method).choice == ()
    fixed = _chain([(0.25, "NCHW", "NCHW8c")], transform={("NCHW", "NCHW8c"): 0.5,
                                                          ("NCHW8c", "NCHW"): 0.125})
    a = solve(fixed, method=method)
    assert a.choice == (0, 0, 0) and a.cost == 0.25 + 0.125


def test_cp_sat_reports_the_exact_cost_of_unrounded_problems():
    # costs finer than the integer resolution: optimal up to RESOLUTION_MS per term
    for seed in range(20):
        base = synthetic.random_problem(seed)
        p = Problem(tuple(Node(n.name, tuple(Choice(c.name, c.cost * 1.000123457, c.in_layouts, c.out_layout)
                                             for c in n.choices)) for n in base.nodes),
                    tuple(Edge(e.src, e.dst, e.port, {k: v * 0.99987654 for k, v in e.transform.items()})
                          for e in base.edges))
        try:
            ref = brute.solve(p)
        except Infeasible:
            continue
        a = cp_sat.solve(p, time_limit=10)
        assert a.cost == p.evaluate(a.choice)
        terms = len(p.nodes) + len(p.edges)
        assert ref.cost <= a.cost <= ref.cost + terms * cp_sat.RESOLUTION_MS


def test_cp_sat_scales_to_a_200_node_residual_network():
    p = synthetic.residual(200, seed=3)
    assert len(p.nodes) >= 190 and max(len(n.choices) for n in p.nodes) == 20
    a = solve(p, method="cp-sat", time_limit=60)
    _valid(p, a)
    assert a.optimal and a.gap == 0
    assert solve(p, method="greedy").cost >= a.cost


def test_cp_sat_under_a_tight_time_limit_still_returns_a_valid_assignment():
    p = synthetic.branching(1000, seed=1)
    a = solve(p, method="cp-sat", time_limit=0.2)
    _valid(p, a)
    assert a.seconds < 5                     # the limit, plus generous slack for a loaded machine


def test_importing_solve_does_not_import_tvm():
    code = "import sys, graphselect.solve; assert 'tvm' not in sys.modules, 'tvm imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def _with_errors(p: Problem, seed: int, budget: float) -> Problem:
    """``p`` with a random half of every conv's choices made 'lower precision': 0.7x faster with
    an error each, under ``budget``."""
    import dataclasses
    import random
    rng = random.Random(seed)
    nodes = []
    for n in p.nodes:
        chs = []
        for c in n.choices:
            if n.name.startswith("conv") and rng.random() < 0.5 and c.cost < math.inf:
                c = dataclasses.replace(c, cost=0.7 * c.cost, warm_cost=None if c.warm_cost is None else 0.7 * c.warm_cost,
                                        error=rng.choice((1e-3, 3e-3, 1e-2)))
            chs.append(c)
        nodes.append(dataclasses.replace(n, choices=tuple(chs)))
    return dataclasses.replace(p, nodes=tuple(nodes), error_budget=budget)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("budget", [0.0, 4e-3, 1.5e-2, None])
def test_error_budget_cp_sat_agrees_with_brute_force(seed, budget):
    """An error budget is respected by the exact solvers, which still agree; budget 0 keeps every
    lower-precision choice out; a larger budget is never slower."""
    p = _with_errors(synthetic.random_problem(seed, residency=seed % 2 == 1), seed, budget)
    try:
        ref = solve(p, method="brute")
    except Infeasible:
        with pytest.raises(Infeasible):
            solve(p, method="cp-sat", time_limit=10)
        return
    exact = solve(p, method="cp-sat", time_limit=10)
    for a in (ref, exact):
        _valid(p, a)
        assert p.admissible(a.choice) and (budget is None or p.error(a.choice) <= budget + 1e-12)
    assert exact.cost == pytest.approx(ref.cost, rel=1e-6, abs=1e-9)
    if budget == 0.0:
        assert p.error(exact.choice) == 0.0
    looser = solve(dataclasses_replace(p, error_budget=None), method="brute")
    assert looser.cost <= ref.cost + 1e-9


def dataclasses_replace(p, **kw):
    import dataclasses
    return dataclasses.replace(p, **kw)


def test_error_budget_keeps_fp32_where_it_is_tight():
    """Two layers whose bf16 choice saves time; the budget admits the error of one: the solver
    spends it where it saves most and keeps the other fp32 (a chain, no transforms)."""
    L = "NCHW16c"
    nodes = [Node("input", (Choice("input", 0.0, (), L),)),
             Node("conv_a", (Choice("a32", 2.0, (L,), L), Choice("a16", 1.0, (L,), L, error=3e-3))),
             Node("conv_b", (Choice("b32", 2.0, (L,), L), Choice("b16", 1.5, (L,), L, error=3e-3))),
             Node("output", (Choice("output", 0.0, (L,), None),))]
    edges = tuple(Edge(i, i + 1, 0) for i in range(3))
    for budget, want in ((2e-3, (0, 0, 0, 0)), (4e-3, (0, 1, 0, 0)), (7e-3, (0, 1, 1, 0)), (None, (0, 1, 1, 0))):
        p = Problem(tuple(nodes), edges, error_budget=budget)
        for method in ("cp-sat", "brute"):
            assert tuple(solve(p, method=method).choice) == want, (budget, method)
    with pytest.raises(ValueError, match="error_budget"):
        Problem(tuple(nodes), edges, error_budget=-1.0)
