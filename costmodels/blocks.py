"""Candidates that span layers ("blocks"): one kernel computes a chain of layers, and the
whole-graph problem chooses where to use it (issue 23; the kernels are not candidates yet, see
``bench/blocks.py``).

A block enters the :class:`~costmodels.problem.Problem` without a new kind of variable. Each member
layer gets one more choice, and the members' choices are tied by a layout that only they produce
and read, the block's *token* (``~NAME``): every edge inside the chain costs 0 between equal
tokens and cannot convert a token into anything else (the transform table has no such pair). So
every solver, unchanged, picks the block's choice on all of its members or on none of them: each
layer is computed by exactly one chosen candidate (a per-layer one, or the one block that contains
it), which is the one-choice-per-node rule. The first member's inputs from outside the block take
the block's input layouts, the last member's output the block's output layout (layouts and
transforms are paid at the block's boundary only); an inner output that a layer outside the block
reads would need a transform from a token, so :func:`with_blocks` refuses such a chain. The
block's time, weights and workspace are priced on its last member, 0 on the others.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from .problem import Choice, Node, Problem


@dataclass(frozen=True)
class Block:
    """A chain of Problem nodes computed by one kernel."""
    name: str
    members: tuple[int, ...]                                  # node indices, producer first
    out_layout: str                                           # what the last member's readers see
    cost: float                                               # ms (cold), the whole chain
    # (position in ``members``, port) -> layout, for every port fed from outside the chain
    ports: Mapping[tuple[int, int], str] = field(default_factory=dict)
    warm_cost: float | None = None
    weight_bytes: int = 0
    workspace_bytes: int = 0
    error: float = 0.0

    @property
    def token(self) -> str:
        return "~" + self.name


def with_blocks(problem: Problem, blocks) -> Problem:
    """``problem`` with one more choice, named after the block, on every member of every block.

    Raises ValueError for a block that is not a chain of the problem's edges, whose inner output
    is read outside it, or that leaves a port from outside without a layout."""
    nodes = [list(n.choices) for n in problem.nodes]
    names = set()
    for b in blocks:
        if b.name in names:
            raise ValueError(f"two blocks are named {b.name!r}")
        names.add(b.name)
        m = b.members
        if len(m) < 2 or len(set(m)) != len(m) or not all(0 <= i < len(nodes) for i in m):
            raise ValueError(f"block {b.name}: members {m} are not two or more distinct nodes")
        pos = {v: k for k, v in enumerate(m)}
        chained = set()
        for e in problem.edges:
            if e.src in pos and pos[e.src] < len(m) - 1:
                if e.dst != m[pos[e.src] + 1]:
                    raise ValueError(f"block {b.name}: the output of {problem.nodes[e.src].name} is read by "
                                     f"{problem.nodes[e.dst].name}, outside the chain")
                chained.add((pos[e.dst], e.port))
        for k in range(1, len(m)):
            if not any(p == k for p, _ in chained):
                raise ValueError(f"block {b.name}: no edge from {problem.nodes[m[k - 1]].name} "
                                 f"to {problem.nodes[m[k]].name}")
        for k, v in enumerate(m):
            ports = len(problem.nodes[v].choices[0].in_layouts) if problem.nodes[v].choices else 0
            ins = []
            for p in range(ports):
                if (k, p) in chained:
                    ins.append(b.token)
                elif (k, p) in b.ports:
                    ins.append(b.ports[(k, p)])
                else:
                    raise ValueError(f"block {b.name}: port {p} of {problem.nodes[v].name} is fed from outside "
                                     f"and has no layout")
            last = k == len(m) - 1
            nodes[v].append(Choice(b.name, b.cost if last else 0.0, tuple(ins), b.out_layout if last else b.token,
                                   warm_cost=(b.warm_cost if last else 0.0) if b.warm_cost is not None else None,
                                   weight_bytes=b.weight_bytes if last else 0,
                                   workspace_bytes=b.workspace_bytes if last else 0,
                                   error=b.error if last else 0.0))
    return dataclasses.replace(problem, nodes=tuple(Node(n.name, tuple(cs)) for n, cs in zip(problem.nodes, nodes)))


def chosen(problem: Problem, choice, blocks) -> list[Block]:
    """The blocks an assignment of ``with_blocks(problem, blocks)`` uses (all members on the block)."""
    out = []
    for b in blocks:
        on = [problem.nodes[v].choices[choice[v]].name == b.name for v in b.members]
        if all(on):
            out.append(b)
        elif any(on):
            raise ValueError(f"block {b.name} chosen on some of its members only: not a valid assignment")
    return out
