"""The measured-table model: every layer's options, the measurement records their costs come
from, and the :class:`~costmodels.problem.Problem` they make.

A plan (``graphselect.measure.plan``) describes each layer as a :class:`LayerTable` of
:class:`Option` s, each naming the records (workload, candidate) whose times it costs, and each
edge as an :class:`EdgeTable` of the ``layout_transform`` records between layout pairs.
:func:`build_problem` turns them and the measured :class:`Timing` s into a Problem, through a
:class:`~costmodels.calibration.Calibration` of this machine when one is given. Pure Python: no
TVM, no files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from .calibration import Calibration, workload_kind
from .problem import Choice, Edge, Node, Problem

Key = tuple[str, str]          # (workload, candidate) of a measurement record


@dataclass(frozen=True)
class Option:
    """One way to run one layer."""
    name: str
    in_layouts: tuple[str, ...]               # one per input port
    out_layout: str | None                    # None for the output sink
    kernel: Key | None = None                 # its kernel's record (None: no kernel runs)
    extra: tuple[Key, ...] = ()               # further kernels it runs (an epilogue it cannot fuse)
    family: str = ""                          # conv candidate family; "" for every other layer
    weight_bytes: int = 0
    workspace_bytes: int = 0
    precision: str = "fp32"                   # what its kernel computes in


@dataclass(frozen=True)
class LayerTable:
    name: str
    kind: str                                 # conv, agnostic, fixed, input, output
    options: tuple[Option, ...]


@dataclass(frozen=True)
class EdgeTable:
    src: int                                  # index into the layer tables
    dst: int
    port: int
    transforms: Mapping[tuple[str, str], Key] = field(default_factory=dict)   # (from, to) -> record


@dataclass(frozen=True)
class Timing:
    cold_ms: float                            # math.inf: the kernel failed or was rejected
    warm_ms: float
    rel_err: float | None = None              # its output's error against the float64 reference (checked kernels)
    incold_ms: float | None = None            # its input flushed too (None: not measured, as cold)


# A lower-precision option whose kernel has no measured error counts as this: it never fits a budget.
UNKNOWN_ERROR = 1.0


class MissingMeasurement(ValueError):
    """A cost the Problem needs has no measurement: never priced as zero."""


def _get(timings: Mapping[Key, Timing], key: Key, where: str) -> Timing:
    t = timings.get(tuple(key))
    if t is None:
        raise MissingMeasurement(f"{where}: no measurement for {key[1]} on {key[0]!r}; measure it first")
    return t


def build_problem(layers: tuple[LayerTable, ...] | list[LayerTable], edges, timings: Mapping[Key, Timing], *,
                  cache_bytes: int | None = None, partial: tuple[tuple[int, float], ...] = (),
                  activation_bytes: int = 0, calibration: Calibration | None = None,
                  model: str = "", error_budget: float | None = None) -> Problem:
    """The Problem of ``layers`` and ``edges`` priced by ``timings``.

    Without ``calibration`` an option costs its records' times as measured alone (cold: weights
    flushed; warm). With one, conv kernels follow ``calibration.kernel`` and every other cost
    (op layers, unfused epilogues, layout transforms) ``calibration.other`` for ``model``, and
    the residency budget and steps are stretched by the fitted capacity. A lower-precision
    option's ``Choice.error`` is its kernel's measured error (``Timing.rel_err``), which
    ``error_budget`` bounds in sum.

    Raises
    ------
    MissingMeasurement
        A record an option or a transform names is not in ``timings``.

    Examples
    --------
    >>> t = {("w", "a"): Timing(1.0, 0.5)}
    >>> layers = [LayerTable("in", "input", (Option("input", (), "NCHW"),)),
    ...           LayerTable("c", "conv", (Option("a", ("NCHW",), "NCHW", ("w", "a"), family="direct"),)),
    ...           LayerTable("out", "output", (Option("output", ("NCHW",), None),))]
    >>> edges = [EdgeTable(0, 1, 0), EdgeTable(1, 2, 0)]
    >>> build_problem(layers, edges, t).evaluate((0, 0, 0))
    1.0
    """
    cal = calibration or Calibration()
    if calibration is not None:
        cache_bytes, partial = cal.budget(cache_bytes, partial)
    nodes = []
    for lt in layers:
        choices = []
        for opt in lt.options:
            cold = warm = err = 0.0
            if opt.kernel is not None:
                t = _get(timings, opt.kernel, f"layer {lt.name}, option {opt.name}")
                if opt.precision != "fp32":
                    err = UNKNOWN_ERROR if t.rel_err is None else t.rel_err
                if not (math.isfinite(t.cold_ms) and math.isfinite(t.warm_ms)):
                    cold = warm = math.inf
                elif opt.family:
                    cold, warm = cal.kernel(opt.kernel, opt.family, t.cold_ms, t.warm_ms, t.incold_ms, model=model)
                else:
                    cold, warm = cal.other(model, t.cold_ms, t.warm_ms, t.incold_ms)
            for key in opt.extra:
                t = _get(timings, key, f"layer {lt.name}, option {opt.name} (epilogue)")
                c, w = cal.other(model, t.cold_ms, t.warm_ms, t.incold_ms)
                cold, warm = cold + c, warm + w
            choices.append(Choice(opt.name, cold, opt.in_layouts, opt.out_layout, warm_cost=warm,
                                  weight_bytes=opt.weight_bytes, workspace_bytes=opt.workspace_bytes, error=err))
        nodes.append(Node(lt.name, tuple(choices)))
    out_edges = []
    for e in edges:
        tr = {}
        for pair, key in e.transforms.items():
            t = _get(timings, key, f"edge {layers[e.src].name} -> {layers[e.dst].name}")
            tr[pair] = cal.other(model, t.cold_ms, t.warm_ms, t.incold_ms)[0] if math.isfinite(t.cold_ms) else math.inf
        out_edges.append(Edge(e.src, e.dst, e.port, tr))
    return Problem(tuple(nodes), tuple(out_edges), cache_bytes=cache_bytes, activation_bytes=activation_bytes,
                   partial=tuple(partial) if cache_bytes is not None else (), error_budget=error_budget)


def option_keys(layers, edges) -> set[Key]:
    """Every record the tables name."""
    keys = set()
    for lt in layers:
        for opt in lt.options:
            if opt.kernel is not None:
                keys.add(tuple(opt.kernel))
            keys.update(tuple(k) for k in opt.extra)
    for e in edges:
        keys.update(tuple(k) for k in e.transforms.values())
    return keys


def other_costs(layers, edges, timings: Mapping[Key, Timing], choice) -> tuple[float, float, float]:
    """Isolated (cold, warm, in-cold) ms of everything but the conv kernels that ``choice`` runs:
    op layers, unfused epilogues and layout transforms (transforms cold in the first two)."""
    return kinds_total(other_costs_by_kind(layers, edges, timings, choice))


def kinds_total(by_kind: Mapping[str, tuple]) -> tuple[float, float, float]:
    """(cold, warm, in-cold) summed over the kinds of :func:`other_costs_by_kind`."""
    parts = by_kind.values()
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))


def other_costs_by_kind(layers, edges, timings: Mapping[Key, Timing], choice) -> dict[str, tuple[float, float, float, int]]:
    """:func:`other_costs` by kind (``calibration.op_kind`` of each record's op): kind ->
    (cold, warm, in-cold, how many isolated snippets)."""
    out: dict[str, list] = {}

    def add(key, t, warm):
        p = out.setdefault(workload_kind(key[0]), [0.0, 0.0, 0.0, 0])
        p[0] += t.cold_ms
        p[1] += warm
        p[2] += _incold(t)
        p[3] += 1
    for lt, k in zip(layers, choice):
        opt = lt.options[k]
        keys = ([] if opt.family or opt.kernel is None else [opt.kernel]) + list(opt.extra)
        for key in keys:
            t = _get(timings, key, f"layer {lt.name}")
            add(key, t, t.warm_ms)
    for e in edges:
        a = layers[e.src].options[choice[e.src]].out_layout
        b = layers[e.dst].options[choice[e.dst]].in_layouts[e.port]
        if a != b:
            key = e.transforms[(a, b)]
            t = _get(timings, key, f"edge {layers[e.src].name} -> {layers[e.dst].name}")
            add(key, t, t.cold_ms)
    return {k: tuple(v) for k, v in out.items()}


def _incold(t: Timing) -> float:
    return t.cold_ms if t.incold_ms is None else max(t.cold_ms, t.incold_ms)
