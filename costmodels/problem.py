"""The whole-graph selection problem every solver reads, and the assignment every solver returns.

A node is anything that has a layout decision: a conv layer (one choice per candidate), a
layout-agnostic op (one choice per layout it can run in), or a fixed op (one choice). Each choice
names the layout it needs on each input port and the layout it produces. An edge carries one
tensor from a producer's output to a consumer's input port; converting between two different
layouts costs the measured ``layout_transform`` time, and a missing pair is impossible.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Choice:
    name: str
    cost: float                      # ms, weights cold (as in a running network); math.inf = unusable
    in_layouts: tuple[str, ...]      # one per input port
    out_layout: str | None           # None for a sink
    warm_cost: float | None = None   # ms with weights warm in cache (None: same as cost)
    weight_bytes: int = 0
    workspace_bytes: int = 0


@dataclass(frozen=True)
class Node:
    name: str
    choices: tuple[Choice, ...]


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    port: int
    # (from_layout, to_layout) -> ms; equal layouts cost 0; a missing pair cannot be converted
    transform: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def cost(self, src_layout: str | None, dst_layout: str) -> float:
        if src_layout == dst_layout:
            return 0.0
        return self.transform.get((src_layout, dst_layout), math.inf)


@dataclass(frozen=True)
class Problem:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    def __post_init__(self):
        n = len(self.nodes)
        for e in self.edges:
            if not (0 <= e.src < n and 0 <= e.dst < n):
                raise ValueError(f"edge {e.src}->{e.dst} refers to a missing node")
            for c in self.nodes[e.dst].choices:
                if e.port >= len(c.in_layouts):
                    raise ValueError(f"edge into {self.nodes[e.dst].name} port {e.port}: choice {c.name} "
                                     f"has only {len(c.in_layouts)} input layouts")

    def evaluate(self, choice: tuple[int, ...] | list[int]) -> float:
        """Total cost of one choice index per node (math.inf if infeasible)."""
        total = sum(self.nodes[i].choices[k].cost for i, k in enumerate(choice))
        for e in self.edges:
            a = self.nodes[e.src].choices[choice[e.src]]
            b = self.nodes[e.dst].choices[choice[e.dst]]
            total += e.cost(a.out_layout, b.in_layouts[e.port])
        return total


@dataclass(frozen=True)
class Assignment:
    choice: tuple[int, ...]     # index into Problem.nodes[i].choices
    cost: float                 # objective value (predicted ms)
    method: str
    optimal: bool               # proven optimal by the method
    seconds: float = 0.0
    gap: float = 0.0            # relative gap to the best bound when not proven optimal
