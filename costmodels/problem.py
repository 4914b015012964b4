"""The whole-graph selection problem every solver reads, and the assignment every solver returns.

A node is anything that has a layout decision: a conv layer (one choice per candidate), a
layout-agnostic op (one choice per layout it can run in), or a fixed op (one choice). Each choice
names the layout it needs on each input port and the layout it produces. An edge carries one
tensor from a producer's output to a consumer's input port; converting between two different
layouts costs the measured ``layout_transform`` time, and a missing pair is impossible.

Cache residency is one global decision: when the chosen choices' weights and workspaces plus the
live activations fit ``Problem.cache_bytes``, every node runs at its warm time, otherwise at its
cold time (``Problem.resident`` and ``Problem.evaluate``).
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

    def time(self, warm: bool) -> float:
        """ms under the given cache state; an unusable choice (cost inf) stays unusable warm."""
        if warm and self.warm_cost is not None and self.cost < math.inf:
            return self.warm_cost
        return self.cost


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
    cache_bytes: int | None = None   # last-level cache budget; None: no residency term, cold costs
    activation_bytes: int = 0        # live activations that occupy the cache alongside the weights

    def __post_init__(self):
        if self.cache_bytes is not None and self.cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0 or None, got {self.cache_bytes!r}")
        if self.activation_bytes < 0:
            raise ValueError(f"activation_bytes must be >= 0, got {self.activation_bytes!r}")
        n = len(self.nodes)
        for e in self.edges:
            if not (0 <= e.src < n and 0 <= e.dst < n):
                raise ValueError(f"edge {e.src}->{e.dst} refers to a missing node")
            for c in self.nodes[e.dst].choices:
                if e.port >= len(c.in_layouts):
                    raise ValueError(f"edge into {self.nodes[e.dst].name} port {e.port}: choice {c.name} "
                                     f"has only {len(c.in_layouts)} input layouts")

    def footprint(self, choice: tuple[int, ...] | list[int]) -> int:
        """Bytes the choice keeps in cache: chosen weights and workspaces plus activations."""
        return self.activation_bytes + sum(
            ch.weight_bytes + ch.workspace_bytes
            for ch in (self.nodes[i].choices[k] for i, k in enumerate(choice)))

    def resident(self, choice: tuple[int, ...] | list[int]) -> bool:
        """True iff a cache budget is set and :meth:`footprint` fits it."""
        return self.cache_bytes is not None and self.footprint(choice) <= self.cache_bytes

    def evaluate(self, choice: tuple[int, ...] | list[int]) -> float:
        """Total cost of one choice index per node (math.inf if infeasible): every node at its
        warm time when :meth:`resident`, else at its cold ``cost``; plus the edge transforms."""
        warm = self.resident(choice)
        return sum(self.nodes[i].choices[k].time(warm) for i, k in enumerate(choice)) + self.transform_cost(choice)

    def transform_cost(self, choice: tuple[int, ...] | list[int]) -> float:
        """The layout transforms ``choice`` needs on its edges (ms)."""
        total = 0.0
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
    resident: bool | None = None  # problem.resident(choice); None when the problem has no cache term
    # other good, distinct choices the method met (cp-sat: the best of the other residency
    # branch), worth building and timing before trusting the prediction
    alternatives: tuple[tuple[int, ...], ...] = ()
