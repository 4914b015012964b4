"""The whole-graph selection problem every solver reads, and the assignment every solver returns.

A node is anything that has a layout decision: a conv layer (one choice per candidate), a
layout-agnostic op (one choice per layout it can run in), or a fixed op (one choice). Each choice
names the layout it needs on each input port and the layout it produces. An edge carries one
tensor from a producer's output to a consumer's input port; converting between two different
layouts costs the measured ``layout_transform`` time, and a missing pair is impossible.

Precision is a per-choice property with one global budget: a lower-precision choice carries
``Choice.error``, its estimated contribution to the network's relative output error, and an
assignment is admissible only while the sum over its choices stays within
``Problem.error_budget`` (None: no budget; fp32 choices carry 0). The sum is a first-order model
(per-layer errors add); the closed loop checks it against the built network's measured error.

Cache residency is one global decision: when the chosen choices' weights and workspaces plus the
live activations fit ``Problem.cache_bytes``, every node runs at its warm time, otherwise at its
cold time (``Problem.resident`` and ``Problem.evaluate``). ``Problem.partial`` grades the step
beyond the budget: a footprint up to each further cap keeps a share of the warm-cold difference
(a real last-level cache loses its contents gradually, not at one byte), so a node costs
``cold - share * (cold - warm)`` with one share for the whole network (``Problem.warm_share``).
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
    error: float = 0.0               # estimated relative output error it adds (lower precision)

    def time(self, warm: bool) -> float:
        """ms under the given cache state; an unusable choice (cost inf) stays unusable warm."""
        if warm and self.warm_cost is not None and self.cost < math.inf:
            return self.warm_cost
        return self.cost

    def blend(self, share: float) -> float:
        """ms when ``share`` of the warm-cold difference is saved: ``cold - share * (cold - warm)``
        (``share`` 1: warm, 0: cold); an unusable choice stays unusable."""
        if share >= 1.0:
            return self.time(True)
        if share <= 0.0:
            return self.cost
        warm = self.time(True)
        if warm == math.inf or self.cost == math.inf:
            return math.inf
        return self.cost + share * (warm - self.cost)


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
    # beyond cache_bytes: (footprint cap in bytes, warm share) steps, caps increasing, shares in
    # [0, 1] not increasing; a footprint above the last cap runs cold. () : the plain budget.
    partial: tuple[tuple[int, float], ...] = ()
    error_budget: float | None = None  # the most sum(Choice.error) an assignment may carry; None: any

    def __post_init__(self):
        if self.error_budget is not None and not self.error_budget >= 0:
            raise ValueError(f"error_budget must be >= 0 or None, got {self.error_budget!r}")
        if self.cache_bytes is not None and self.cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0 or None, got {self.cache_bytes!r}")
        if self.activation_bytes < 0:
            raise ValueError(f"activation_bytes must be >= 0, got {self.activation_bytes!r}")
        if self.partial:
            if self.cache_bytes is None:
                raise ValueError("partial residency steps need a cache_bytes budget")
            caps = [self.cache_bytes] + [c for c, _ in self.partial]
            shares = [1.0] + [s for _, s in self.partial]
            if any(b <= a for a, b in zip(caps, caps[1:])):
                raise ValueError(f"partial residency caps must increase beyond cache_bytes, got {caps}")
            if any(not 0.0 <= s <= 1.0 for s in shares) or any(b > a for a, b in zip(shares, shares[1:])):
                raise ValueError(f"partial residency shares must lie in [0, 1] and not increase, got {shares[1:]}")
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

    def error(self, choice: tuple[int, ...] | list[int]) -> float:
        """The estimated relative output error of a choice: its choices' errors summed."""
        return sum(self.nodes[i].choices[k].error for i, k in enumerate(choice))

    def admissible(self, choice: tuple[int, ...] | list[int]) -> bool:
        """True iff the choice's :meth:`error` fits the budget (always without one)."""
        return self.error_budget is None or self.error(choice) <= self.error_budget * (1 + 1e-9)

    def resident(self, choice: tuple[int, ...] | list[int]) -> bool:
        """True iff a cache budget is set and :meth:`footprint` fits it."""
        return self.cache_bytes is not None and self.footprint(choice) <= self.cache_bytes

    def warm_share(self, choice: tuple[int, ...] | list[int]) -> float:
        """Share of the warm-cold difference the choice gets: 1 when :meth:`resident`, the share
        of the first ``partial`` step whose cap its footprint fits, else 0 (cold)."""
        return self.share_at(self.footprint(choice))

    def share_at(self, footprint: int) -> float:
        """:meth:`warm_share` for a footprint in bytes."""
        if self.cache_bytes is None:
            return 0.0
        if footprint <= self.cache_bytes:
            return 1.0
        for cap, share in self.partial:
            if footprint <= cap:
                return share
        return 0.0

    def levels(self) -> tuple[tuple[int | None, int | None, float], ...]:
        """The residency levels as ``(low exclusive, high inclusive, share)`` footprint ranges in
        bytes (None: unbounded), from warm to cold; one cold level without a budget."""
        if self.cache_bytes is None:
            return ((None, None, 0.0),)
        out, lo = [(None, self.cache_bytes, 1.0)], self.cache_bytes
        for cap, share in self.partial:
            out.append((lo, cap, share))
            lo = cap
        out.append((lo, None, 0.0))
        return tuple(out)

    def evaluate(self, choice: tuple[int, ...] | list[int]) -> float:
        """Total cost of one choice index per node (math.inf if infeasible): every node at its
        time under :meth:`warm_share` (warm when :meth:`resident`, cold beyond the last
        ``partial`` cap), plus the edge transforms."""
        return self.evaluate_at(choice, self.warm_share(choice))

    def evaluate_at(self, choice: tuple[int, ...] | list[int], share: float) -> float:
        """Total cost with every node at ``share`` of its warm-cold difference (a residency
        level's objective, whatever the choice's own footprint), plus the edge transforms."""
        return sum(self.nodes[i].choices[k].blend(share) for i, k in enumerate(choice)) + self.transform_cost(choice)

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
