"""PBQP reduction solver (Scholz and Eckstein), as in TVM's former graph tuner.

Each node has a cost vector (one entry per choice), each connected node pair one cost matrix: the
layout transforms of every problem edge between the two, merged. Nodes are reduced one at a time,
lowest degree first: R0 (degree 0: take the minimum), RI (degree 1: fold the node into its
neighbour's vector), RII (degree 2: fold it into a matrix between its two neighbours), all exact;
only when every remaining node has degree three or more, the heuristic RN fixes the max-degree
node at its locally best choice. Choices are then read back in reverse reduction order.

Series-parallel graphs (chains, trees, residual and concat blocks) never need RN, so there the
result is optimal for the cold objective. The residency term is global and invisible to PBQP:
with ``cache_bytes`` set the solver runs once per residency level (cold, warm, and the blended
times of each ``Problem.partial`` step) and keeps whichever assignment ``Problem.evaluate``
prices lower, never claiming optimality.
"""
from __future__ import annotations

import heapq
import math
import time

import numpy as np

from costmodels.problem import Assignment, Problem
from graphselect.errors import Infeasible


def _graph(problem: Problem, share: float):
    """Cost vectors and merged, undirected cost matrices keyed (u, v) with u < v, rows u."""
    vec = [np.array([ch.blend(share) for ch in node.choices], dtype=float) for node in problem.nodes]
    mat = {}
    for e in problem.edges:
        src, dst = problem.nodes[e.src].choices, problem.nodes[e.dst].choices
        m = np.array([[e.cost(a.out_layout, b.in_layouts[e.port]) for b in dst] for a in src],
                     dtype=float).reshape(len(src), len(dst))
        if e.src == e.dst:            # a self-loop only sees equal choices
            vec[e.src] = vec[e.src] + np.diag(m)
            continue
        key, m = ((e.src, e.dst), m) if e.src < e.dst else ((e.dst, e.src), m.T)
        mat[key] = mat[key] + m if key in mat else m
    return vec, mat


def _reduce(problem: Problem, share: float) -> tuple[tuple[int, ...], dict]:
    vec, mat = _graph(problem, share)
    n = len(problem.nodes)
    adj = [set() for _ in range(n)]
    for u, v in mat:
        adj[u].add(v)
        adj[v].add(u)

    def get(u, v):                    # matrix with rows u, columns v
        return mat[u, v] if u < v else mat[v, u].T

    def add(u, v, m):
        key, m = ((u, v), m) if u < v else ((v, u), m.T)
        if key in mat:
            mat[key] = mat[key] + m
        else:
            mat[key] = m
            adj[u].add(v)
            adj[v].add(u)
            heapq.heappush(heap, (len(adj[u]), u))
            heapq.heappush(heap, (len(adj[v]), v))

    def remove(v):
        alive.discard(v)
        for u in adj[v]:
            mat.pop((min(u, v), max(u, v)))
            adj[u].discard(v)
            heapq.heappush(heap, (len(adj[u]), u))
        adj[v].clear()

    info = {"rn_reductions": 0, "ri": 0, "rii": 0, "r0": 0}
    alive = set(range(n))
    heap = [(len(adj[v]), v) for v in range(n)]
    heapq.heapify(heap)
    stack = []                        # (v, neighbours, matrices rows v, v's vector) or (v, choice)
    while alive:
        while heap and (heap[0][1] not in alive or heap[0][0] != len(adj[heap[0][1]])):
            heapq.heappop(heap)       # stale entry
        if heap and heap[0][0] <= 2:
            deg, v = heapq.heappop(heap)
            nbrs = sorted(adj[v])
            ms = [get(v, u) for u in nbrs]
            c = vec[v]
            if deg == 1:
                (u,), (m,) = nbrs, ms
                vec[u] = vec[u] + (c[:, None] + m).min(axis=0)
                info["ri"] += 1
            elif deg == 2:
                (u, w), (mu, mw) = nbrs, ms
                add(u, w, (c[:, None, None] + mu[:, :, None] + mw[:, None, :]).min(axis=0))
                info["rii"] += 1
            else:
                info["r0"] += 1
            stack.append((v, nbrs, ms, c))
            remove(v)
            continue
        # RN: every node has degree >= 3; fix the max-degree one at its locally best choice
        v = max(alive, key=lambda v: (len(adj[v]), -v))
        nbrs = sorted(adj[v])
        local = vec[v].copy()
        for u in nbrs:
            local = local + (get(v, u) + vec[u][None, :]).min(axis=1)
        k = int(np.argmin(local))
        for u in nbrs:
            vec[u] = vec[u] + get(v, u)[k, :]
        info["rn_reductions"] += 1
        stack.append((v, k))
        remove(v)

    choice = [0] * n
    for entry in reversed(stack):
        if len(entry) == 2:
            v, k = entry
            choice[v] = k
            continue
        v, nbrs, ms, c = entry
        total = c.copy()
        for u, m in zip(nbrs, ms):
            total = total + m[:, choice[u]]
        choice[v] = int(np.argmin(total))     # lowest index among equal minima
    return tuple(choice), info


def solve_with_info(problem: Problem, *, time_limit: float | None = None) -> tuple[Assignment, dict]:
    """Solve by PBQP reductions and say how: ``(assignment, info)``.

    ``info`` counts the reductions of the returned run: ``"rn_reductions"`` (heuristic steps; 0
    means the reductions were exact), ``"ri"``, ``"rii"``, ``"r0"``, and ``"objective"``
    (``"cold"``, ``"warm"`` or ``"warm share S"`` for a partial-residency level: the node times the
    reductions minimized). ``optimal`` is True iff
    no RN step was used and ``problem.cache_bytes`` is None. ``time_limit`` is accepted for a
    uniform signature and ignored.

    Raises
    ------
    graphselect.errors.Infeasible
        The assignment the reductions reach has infinite cost. Without an RN step (and without
        a cache term) that proves no finite assignment exists; otherwise an exact method may
        still find one.

    Examples
    --------
    >>> from graphselect.solve import synthetic
    >>> a, info = solve_with_info(synthetic.residual(30, seed=0))
    >>> a.optimal, info["rn_reductions"]
    (True, 0)
    """
    t0 = time.perf_counter()
    shares = sorted({share for _, _, share in problem.levels()})       # cold first
    best = None
    for share in shares:
        choice, info = _reduce(problem, share)
        cost = float(problem.evaluate(choice))
        info["objective"] = "cold" if share == 0 else "warm" if share == 1 else f"warm share {share:g}"
        if best is None or cost < best[1]:
            best = (choice, cost, info)
    choice, cost, info = best
    if cost == math.inf:
        hint = (f"; {info['rn_reductions']} heuristic RN step(s) were taken, so an assignment may "
                f"still exist: use method='cp-sat'" if info["rn_reductions"] else "")
        raise Infeasible(f"pbqp found no assignment with finite node and layout-transform costs{hint}")
    a = Assignment(choice=choice, cost=cost, method="pbqp",
                   optimal=info["rn_reductions"] == 0 and problem.cache_bytes is None,
                   seconds=time.perf_counter() - t0,
                   resident=problem.resident(choice) if problem.cache_bytes is not None else None)
    return a, info


def solve(problem: Problem, *, time_limit: float | None = None) -> Assignment:
    """:func:`solve_with_info` without the info: the assignment alone."""
    return solve_with_info(problem, time_limit=time_limit)[0]
