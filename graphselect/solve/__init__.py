"""Choose one choice per node of a :class:`costmodels.problem.Problem`.

Each method is a pure function ``f(problem, *, time_limit) -> Assignment``: no TVM, no files.
They minimize ``Choice.cost`` plus edge transforms, exactly what ``Problem.evaluate`` sums;
``warm_cost``, ``weight_bytes`` and ``workspace_bytes`` are not used (yet).
"""
from __future__ import annotations

import math

from costmodels.problem import Assignment, Problem
from graphselect.errors import Infeasible

from . import brute, cp_sat, greedy

METHODS = {
    "cp-sat": cp_sat.solve,      # exact (proven optimal within its time limit, else a gap)
    "greedy": greedy.solve,      # per-layer fastest baseline
    "brute": brute.solve,        # exhaustive; small problems only
}


def solve(problem: Problem, *, method: str = "cp-sat", time_limit: float = 30.0) -> Assignment:
    """Select one choice per node minimizing node plus layout-transform cost (ms).

    Parameters
    ----------
    problem : Problem
    method : {"cp-sat", "greedy", "brute"}
    time_limit : float
        Seconds; honoured by "cp-sat", ignored by the others.

    Returns
    -------
    Assignment
        ``cost`` is ``problem.evaluate(choice)``; ``optimal`` says whether the method proved it.

    Raises
    ------
    ValueError
        Unknown ``method`` or a non-positive ``time_limit``.
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
    if method not in METHODS:
        raise ValueError(f"unknown solve method {method!r}; choose one of {', '.join(METHODS)}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive seconds, got {time_limit!r}")
    for node in problem.nodes:
        if all(ch.cost == math.inf for ch in node.choices):
            raise Infeasible(f"node {node.name!r}: every choice has infinite cost "
                             f"({len(node.choices)} choices); measure or add a usable candidate")
    return METHODS[method](problem, time_limit=time_limit)
