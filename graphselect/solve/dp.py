"""Exact dynamic programming on chains and in-trees (every node feeds at most one consumer).

Where each node has at most one consumer, the subtree above a node only meets the rest of the
graph through that node's choice, so the best cost of the subtree for each choice is a sum of
independent minima: f[v][c] = time(c) + sum over input edges e of
min_p (best f of the producer's choices with out layout p + transform_e[p, in_c]). Linear in the
edges times (layouts squared plus choices). Residency is a global term that breaks this
independence, so ``cache_bytes`` is refused, as are reconvergent graphs (use CP-SAT).
"""
from __future__ import annotations

import math
import time

from costmodels.problem import Assignment, Problem
from graphselect.errors import Infeasible

from ._consistency import topological_order

_REFUSE = "dp is exact on chains and trees without a cache term; use cp-sat"


def solve(problem: Problem, *, time_limit: float | None = None) -> Assignment:
    """Minimize node plus layout-transform cost exactly on a forest of in-trees.

    ``time_limit`` is accepted for a uniform signature and ignored. Among equal minima the
    lowest choice index wins at each sink, then at each producer.

    Raises ValueError (message: "dp is exact on chains and trees without a cache term; use
    cp-sat") when some node has two or more outgoing edges or ``problem.cache_bytes`` is set,
    and :class:`~graphselect.errors.Infeasible` when no finite-cost assignment exists.

    Examples
    --------
    >>> from graphselect.solve import synthetic
    >>> solve(synthetic.chain(20, seed=0)).optimal
    True
    """
    t0 = time.perf_counter()
    if problem.cache_bytes is not None:
        raise ValueError(_REFUSE)
    consumers = [0] * len(problem.nodes)
    for e in problem.edges:
        consumers[e.src] += 1
    if any(k > 1 for k in consumers):
        raise ValueError(_REFUSE)
    order = topological_order(problem)
    nodes = problem.nodes
    into = [[] for _ in nodes]
    for e in problem.edges:
        into[e.dst].append(e)

    f = [None] * len(nodes)           # f[v][c]: best cost of v's subtree with v at choice c
    back = {}                         # (edge index in into[v], v) -> in layout q -> producer choice
    for v in order:
        # per input edge: in layout -> (best cost of the producer's subtree plus transform, choice)
        feeds = []
        for e in into[v]:
            best_out = {}
            for c, ch in enumerate(nodes[e.src].choices):
                if f[e.src][c] < best_out.get(ch.out_layout, (math.inf, -1))[0]:
                    best_out[ch.out_layout] = (f[e.src][c], c)
            table = {}
            for ch in nodes[v].choices:
                q = ch.in_layouts[e.port]
                if q not in table:
                    table[q] = min(((fc + e.cost(p, q), c) for p, (fc, c) in best_out.items()),
                                   default=(math.inf, -1))
            feeds.append(table)
        f[v] = [ch.cost + sum(t[ch.in_layouts[e.port]][0] for e, t in zip(into[v], feeds))
                for ch in nodes[v].choices]
        for i, t in enumerate(feeds):
            back[v, i] = t

    choice = [-1] * len(nodes)
    for v in reversed(order):         # consumers before producers
        if consumers[v] == 0:
            best = min(range(len(f[v])), key=lambda c: (f[v][c], c), default=None)
            if best is None or f[v][best] == math.inf:
                raise Infeasible(f"node {nodes[v].name!r}: no choice has a finite cost together with "
                                 f"the layout transforms from its inputs")
            choice[v] = best
        ch = nodes[v].choices[choice[v]]
        for i, e in enumerate(into[v]):
            choice[e.src] = back[v, i][ch.in_layouts[e.port]][1]
    choice = tuple(choice)
    return Assignment(choice=choice, cost=float(problem.evaluate(choice)), method="dp",
                      optimal=True, seconds=time.perf_counter() - t0)
