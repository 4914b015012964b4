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
    no cost is negative, once a lower bound is no better than the best so far). With a cache
    budget it keeps cold and warm partial totals and the bytes so far: the finished assignment's
    total is ``cold - share * (cold - warm)`` at the share its footprint gets, exactly
    ``problem.evaluate``. With an error budget it keeps the error so far and abandons a partial
    assignment past the budget (errors are never negative). Raises
    ValueError when the product of the finite choice counts exceeds ``max_combinations``.
    ``time_limit`` is ignored.

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
    cache = problem.cache_bytes
    # the largest footprint that still saves part of the warm-cold difference
    top = max((hi for lo, hi, share in problem.levels() if share > 0 and hi is not None), default=None)
    warm_ok = top is not None and problem.activation_bytes <= top
    bound_ok = (all(min(problem.nodes[v].choices[c].cost, problem.nodes[v].choices[c].time(True)) >= 0
                    for v in range(n) for c in cands[v])
                and all(t >= 0 for e in problem.edges for t in e.transform.values())
                and all(ch.weight_bytes + ch.workspace_bytes >= 0 for nd in problem.nodes for ch in nd.choices))

    best, best_choice = math.inf, None
    choice = [0] * n
    cold = [0.0] * (n + 1)                # node cold times plus edges, over nodes < v
    warm = [0.0] * (n + 1)                # the same with warm times (only when warm_ok)
    used = [problem.activation_bytes] * (n + 1)
    err = [0.0] * (n + 1)
    budget = math.inf if problem.error_budget is None else problem.error_budget * (1 + 1e-9)
    pos = [0] * (n + 1)
    v = 0
    while v >= 0:
        if v == n:
            share = problem.share_at(used[n]) if warm_ok else 0.0
            if share >= 1.0:
                total = warm[n]
            elif share <= 0.0:
                total = cold[n]
            else:
                total = math.inf if math.inf in (warm[n], cold[n]) else cold[n] + share * (warm[n] - cold[n])
            if total < best:
                best, best_choice = total, tuple(choice)
            v -= 1
            continue
        if pos[v] == len(cands[v]):
            pos[v] = 0
            v -= 1
            continue
        c = cands[v][pos[v]]
        pos[v] += 1
        choice[v] = c
        ch = problem.nodes[v].choices[c]
        edges = 0.0
        for e in closing[v]:
            a = problem.nodes[e.src].choices[choice[e.src]]
            b = problem.nodes[e.dst].choices[choice[e.dst]]
            edges += e.cost(a.out_layout, b.in_layouts[e.port])
        total_cold = cold[v] + ch.cost + edges
        total_warm = warm[v] + ch.time(True) + edges if warm_ok else math.inf
        bytes_ = used[v] + ch.weight_bytes + ch.workspace_bytes
        # bytes only grow (when bound_ok), so once past the last partial cap the total is cold;
        # before, the blend lies between the two totals
        fits = warm_ok and (bytes_ <= top or not bound_ok)
        bound = min(total_cold, total_warm) if fits else total_cold
        if edges == math.inf or bound == math.inf or (bound_ok and bound >= best) or err[v] + ch.error > budget:
            continue
        cold[v + 1], warm[v + 1], used[v + 1], err[v + 1] = total_cold, total_warm, bytes_, err[v] + ch.error
        v += 1
    if best_choice is None:
        raise Infeasible("no combination of choices has finite layout-transform costs on every edge"
                         + (" within the error budget" if problem.error_budget is not None else ""))
    return Assignment(choice=best_choice, cost=float(problem.evaluate(best_choice)), method="brute",
                      optimal=True, seconds=time.perf_counter() - t0,
                      resident=problem.resident(best_choice) if cache is not None else None)
