"""Exhaustive enumeration: the reference the other solvers are tested against."""
from __future__ import annotations

import math
import time

from costmodels.problem import Assignment, Problem
from graphselect.errors import Infeasible

MAX_COMBINATIONS = 2_000_000


def solve(problem: Problem, *, time_limit: float | None = None,
          max_combinations: int = MAX_COMBINATIONS) -> Assignment:
    """Try every combination of finite-cost choices; the first minimum in index order wins.

    Depth-first in node order, abandoning a partial assignment once it is infinite (or, when
    no cost is negative, no better than the best so far). Raises ValueError when the product
    of the finite choice counts exceeds ``max_combinations``. ``time_limit`` is ignored.

    Examples
    --------
    >>> from graphselect.solve import synthetic
    >>> solve(synthetic.random_problem(1)).optimal
    True
    """
    t0 = time.perf_counter()
    cands = [[c for c, ch in enumerate(node.choices) if ch.cost < math.inf] for node in problem.nodes]
    for node, cs in zip(problem.nodes, cands):
        if not cs:
            raise Infeasible(f"node {node.name!r}: every choice has infinite cost")
    size = math.prod(len(cs) for cs in cands)
    if size > max_combinations:
        raise ValueError(f"brute force over {size:.3g} combinations exceeds max_combinations="
                         f"{max_combinations}; use method='cp-sat'")
    n = len(problem.nodes)
    closing = [[] for _ in range(n)]     # edges whose later endpoint is v
    for e in problem.edges:
        closing[max(e.src, e.dst)].append(e)
    bound_ok = (all(problem.nodes[v].choices[c].cost >= 0 for v in range(n) for c in cands[v])
                and all(t >= 0 for e in problem.edges for t in e.transform.values()))

    best, best_choice = math.inf, None
    choice = [0] * n
    partial = [0.0] * (n + 1)
    pos = [0] * (n + 1)
    v = 0
    while v >= 0:
        if v == n:
            if partial[n] < best:
                best, best_choice = partial[n], tuple(choice)
            v -= 1
            continue
        if pos[v] == len(cands[v]):
            pos[v] = 0
            v -= 1
            continue
        c = cands[v][pos[v]]
        pos[v] += 1
        choice[v] = c
        total = partial[v] + problem.nodes[v].choices[c].cost
        for e in closing[v]:
            a = problem.nodes[e.src].choices[choice[e.src]]
            b = problem.nodes[e.dst].choices[choice[e.dst]]
            total += e.cost(a.out_layout, b.in_layouts[e.port])
        if total == math.inf or (bound_ok and total >= best):
            continue
        partial[v + 1] = total
        v += 1
    if best_choice is None:
        raise Infeasible("no combination of choices has finite layout-transform costs on every edge")
    return Assignment(choice=best_choice, cost=float(problem.evaluate(best_choice)), method="brute",
                      optimal=True, seconds=time.perf_counter() - t0)
