"""Arc consistency on layouts: drop choices that cannot have a finite cost on some edge.

Shared by the exact and the greedy solvers. Sound (never drops a choice of a finite-cost
assignment) but not complete on graphs with reconvergent paths.
"""
from __future__ import annotations

import heapq
import math
from collections import deque

from costmodels.problem import Problem
from graphselect.errors import Infeasible


def finite_domains(problem: Problem) -> list[set[int]]:
    """Per node, the indices of its finite-cost choices; Infeasible if some node has none."""
    domains = []
    for node in problem.nodes:
        dom = {c for c, ch in enumerate(node.choices) if ch.cost < math.inf}
        if not dom:
            raise Infeasible(f"node {node.name!r}: every choice has infinite cost "
                             f"({len(node.choices)} choices); measure or add a usable candidate")
        domains.append(dom)
    return domains


def incident_edges(problem: Problem) -> list[list[int]]:
    incident = [[] for _ in problem.nodes]
    for i, e in enumerate(problem.edges):
        incident[e.src].append(i)
        if e.dst != e.src:
            incident[e.dst].append(i)
    return incident


def propagate(problem: Problem, incident, domains: list[set[int]], nodes, trail=None) -> int | None:
    """Make the edges around ``nodes`` arc-consistent, in place; removals go to ``trail``.

    Returns the index of a node whose domain became empty, or None.
    """
    pending = deque(i for v in nodes for i in incident[v])
    queued = set(pending)
    while pending:
        i = pending.popleft()
        queued.discard(i)
        e = problem.edges[i]
        src, dst = problem.nodes[e.src].choices, problem.nodes[e.dst].choices
        outs = {src[c].out_layout for c in domains[e.src]}
        ins = {dst[d].in_layouts[e.port] for d in domains[e.dst]}
        ok_in = {q for q in ins if any(e.cost(p, q) < math.inf for p in outs)}
        ok_out = {p for p in outs if any(e.cost(p, q) < math.inf for q in ok_in)}
        for v, keep, layout in ((e.dst, ok_in, lambda d: dst[d].in_layouts[e.port]),
                                (e.src, ok_out, lambda c: src[c].out_layout)):
            drop = [c for c in domains[v] if layout(c) not in keep]
            if not drop:
                continue
            domains[v].difference_update(drop)
            if trail is not None:
                trail.extend((v, c) for c in drop)
            if not domains[v]:
                return v
            for j in incident[v]:
                if j != i and j not in queued:
                    queued.add(j)
                    pending.append(j)
    return None


def undo(domains: list[set[int]], trail) -> None:
    for v, c in trail:
        domains[v].add(c)


def consistent_domains(problem: Problem) -> list[set[int]]:
    """Finite-cost choices that survive arc consistency; Infeasible if a node loses them all."""
    domains = finite_domains(problem)
    wiped = propagate(problem, incident_edges(problem), domains, range(len(problem.nodes)))
    if wiped is not None:
        raise Infeasible(f"node {problem.nodes[wiped].name!r}: no choice has a finite-cost layout "
                         f"transform to or from its neighbours' usable choices; add the missing "
                         f"layout_transform measurements or candidates in compatible layouts")
    return domains


def topological_order(problem: Problem) -> list[int]:
    """Kahn's algorithm, lowest index first among ready nodes; ValueError on a cycle."""
    n = len(problem.nodes)
    indeg = [0] * n
    succ = [[] for _ in range(n)]
    for e in problem.edges:
        indeg[e.dst] += 1
        succ[e.src].append(e.dst)
    ready = [v for v in range(n) if indeg[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, w)
    if len(order) != n:
        raise ValueError("the problem's edges contain a cycle; expected a DAG (edges src -> dst)")
    return order
