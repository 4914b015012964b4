"""Per-layer fastest with a warm cache: the baseline every exact solver is compared against."""
from __future__ import annotations

import math
import time

from costmodels.problem import Assignment, Problem
from graphselect.errors import Infeasible

from ._consistency import consistent_domains, incident_edges, propagate, topological_order, undo


def solve(problem: Problem, *, time_limit: float | None = None) -> Assignment:
    """Choose node by node in topological order, each minimizing its own *warm* time
    (``warm_cost``, or ``cost`` where none is given) plus the transforms from its already-chosen
    producers (ties: lower choice index).

    Warm, because that is what per-layer tuning picks: each layer is timed alone, repeatedly,
    with its weights in cache. The greedy is blind to residency: its choices may together
    overflow the cache, and the reported ``cost`` is ``problem.evaluate(choice)``, i.e. cold
    times when they do. Without a cache term (``cache_bytes=None``) that is the cold total.

    Choices that arc consistency shows cannot reach a finite total are skipped, so the greedy
    never walks into a missing ``layout_transform`` on chains and trees; on reconvergent graphs
    it can still reach a dead end, and then raises :class:`~graphselect.errors.Infeasible`
    although an exact method may find an assignment. ``time_limit`` is accepted for a uniform
    signature and ignored (the greedy is linear in the graph size).

    Examples
    --------
    >>> from graphselect.solve import synthetic
    >>> solve(synthetic.chain(20, seed=0)).optimal
    False
    """
    t0 = time.perf_counter()
    order = topological_order(problem)
    domains = consistent_domains(problem)
    incident = incident_edges(problem)
    into = [[] for _ in problem.nodes]
    for e in problem.edges:
        into[e.dst].append(e)
    choice = [-1] * len(problem.nodes)
    for v in order:
        node = problem.nodes[v]

        def local(c):
            ch = node.choices[c]
            return ch.time(True) + sum(e.cost(problem.nodes[e.src].choices[choice[e.src]].out_layout,
                                        ch.in_layouts[e.port]) for e in into[v])

        for c in sorted(domains[v], key=lambda c: (local(c), c)):
            if local(c) == math.inf:
                break
            trail = [(v, d) for d in domains[v] if d != c]
            domains[v] = {c}
            if propagate(problem, incident, domains, [v], trail) is None:
                choice[v] = c
                break
            undo(domains, trail)
        if choice[v] < 0:
            raise Infeasible(f"greedy reached a dead end at node {node.name!r}: no choice is "
                             f"compatible with the layouts chosen upstream; an assignment may still "
                             f"exist, use method='cp-sat'")
    return Assignment(choice=tuple(choice), cost=float(problem.evaluate(choice)), method="greedy",
                      optimal=False, seconds=time.perf_counter() - t0,
                      resident=problem.resident(choice) if problem.cache_bytes is not None else None)
