"""Choose one choice per node of a :class:`costmodels.problem.Problem`.

Each method is a pure function ``f(problem, *, time_limit) -> Assignment``: no TVM, no files.
They minimize what ``Problem.evaluate`` sums: node times plus edge transforms, with warm times
for every node when the chosen weights, workspaces and activations fit ``Problem.cache_bytes``
(the greedy picks per layer by warm time and is blind to the budget).
"""
from __future__ import annotations

import math

from costmodels.problem import Assignment, Problem
from graphselect.errors import Infeasible

from . import brute, cp_sat, dp, greedy, pbqp

METHODS = {
    "cp-sat": cp_sat.solve,      # exact (proven optimal within its time limit, else a gap)
    "greedy": greedy.solve,      # per-layer fastest baseline
    "brute": brute.solve,        # exhaustive; small problems only
    "pbqp": pbqp.solve,          # PBQP reductions: exact unless the heuristic RN step is needed
}
# Methods that refuse (ValueError) problems outside their class; kept out of METHODS, which
# names the methods that take any DAG and that every same-cases-for-all test runs against.
RESTRICTED = {
    "dp": dp.solve,              # exact on chains and in-trees without a cache term
}


def solve(problem: Problem, *, method: str = "cp-sat", time_limit: float = 30.0) -> Assignment:
    """Select one choice per node minimizing node plus layout-transform cost (ms).

    Parameters
    ----------
    problem : Problem
    method : {"cp-sat", "greedy", "brute", "pbqp", "dp"}
        "dp" only takes chains and in-trees without ``cache_bytes`` (ValueError otherwise).
    time_limit : float
        Seconds; honoured by "cp-sat", ignored by the others.

    Returns
    -------
    Assignment
        ``cost`` is ``problem.evaluate(choice)``; ``optimal`` says whether the method proved it.

    Raises
    ------
    ValueError
        Unknown ``method``, a non-positive ``time_limit``, or a problem "dp" does not cover.
    graphselect.errors.Infeasible
        No assignment has a finite cost: some node has only infinite-cost choices, or every
        combination needs a layout transform that does not exist.

    Examples
    --------
    >>> from graphselect.solve import solve, synthetic
    >>> p = synthetic.residual(50, seed=0)
    >>> best = solve(p, method="cp-sat", time_limit=10)
    >>> best.optimal, best.cost <= solve(p, method="greedy").cost
    (True, True)
    """
    methods = {**METHODS, **RESTRICTED}
    if method not in methods:
        raise ValueError(f"unknown solve method {method!r}; choose one of {', '.join(methods)}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive seconds, got {time_limit!r}")
    for node in problem.nodes:
        if all(ch.cost == math.inf for ch in node.choices):
            raise Infeasible(f"node {node.name!r}: every choice has infinite cost "
                             f"({len(node.choices)} choices); measure or add a usable candidate")
    return methods[method](problem, time_limit=time_limit)
