"""Sizes: a layout op or layout transform is timed only where its neighbours in channel count
cannot price it (DESIGN.md, "Measurement: sizes"; issue 24, item 1).

DenseNet-121 has 2174 such jobs against 628 conv ones: a ``layout_transform`` per layout pair
and an elementwise op or concat per layout, for every channel count its dense blocks grow through
(64, 96, 128, ... 1024). They are memory-bound kernels whose time grows with the channel count
at one spatial size, and timing each cost about 80 ms (building its Relax snippet, compiling,
timing) for a kernel of 2-150 us.

So such workloads fall into *size groups*: the same op, layout (or layout pair), batch, spatial
size and attributes, differing only in their channel counts (every 4-D input's and the output's
channel dim; the output's is the group's axis). Within a group, the channel counts to time are
the smallest and largest, and enough between that any two neighbouring timed counts are within
``RATIO`` of each other; every other member is **predicted**, by linear interpolation of cold,
warm and in-cold time in the channel count between its two timed neighbours, never
extrapolated. A timed count is any record of the group: the record store's (any model, the code
versions in use) as well as this run's, so a later model times only the counts no record
brackets. Predictions are not stored: every run makes them again from the records it has.

Accuracy, held out (``python bench/sizes_holdout.py STORE``, on stores where every member was
timed): see ``bench/results/sizes-*.md``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

RATIO = 2.0        # neighbouring timed channel counts of a group are within this of each other

_OP = re.compile(r"^(?P<op>\S+) in=\[(?P<ins>[^\]]*)\] out=(?P<out>\([^)]*\))(?P<tail>.*)$", re.S)
_TRANSFORM = re.compile(r"^layout_transform (?P<out>\([^)]*\))$")
_SHAPE4 = re.compile(r"\((\d+), (\d+), (\d+), (\d+)\)")


def size_key(workload: str) -> tuple[str, int] | None:
    """(group key, channel count) of a layout op's or layout transform's workload, or None (a conv,
    an epilogue, an op whose output is not 4-D).

    >>> size_key("layout_transform (1, 768, 7, 7)")
    ('layout_transform (1, C, 7, 7)', 768)
    >>> size_key("relax.concat in=[(1, 800, 7, 7), (1, 32, 7, 7)] out=(1, 832, 7, 7) relax.attrs.ConcatAttrs(axis=1)")
    ('relax.concat in=[(1, C, 7, 7), (1, C, 7, 7)] out=(1, C, 7, 7) relax.attrs.ConcatAttrs(axis=1)', 832)
    >>> size_key("relax.nn.max_pool2d in=[(1, 64, 112, 112)] out=(1, 64, 56, 56) Pool2DAttrs(padding=(1, 1, 1, 1))")
    ('relax.nn.max_pool2d in=[(1, C, 112, 112)] out=(1, C, 56, 56) Pool2DAttrs(padding=(1, 1, 1, 1))', 64)
    >>> size_key("relax.reshape in=[(1, 512, 1, 1)] out=(1, 512) ") is None
    True
    """
    m = _TRANSFORM.match(workload)
    if m is not None:
        out = _SHAPE4.fullmatch(m.group("out"))
        return (f"layout_transform {_blank(out)}", int(out.group(2))) if out else None
    m = _OP.match(workload)
    if m is None or workload.startswith(("conv2d ", "epilogue ", "graphselect ")):
        return None
    out = _SHAPE4.fullmatch(m.group("out"))
    if out is None:
        return None
    ins = _SHAPE4.sub(lambda s: _blank(s), m.group("ins"))
    return f"{m.group('op')} in=[{ins}] out={_blank(out)}{m.group('tail')}", int(out.group(2))


def _blank(m) -> str:
    return f"({m.group(1)}, C, {m.group(3)}, {m.group(4)})"


def to_time(needed: Iterable[int], known: Iterable[int], ratio: float = RATIO) -> set[int]:
    """The channel counts of ``needed`` (one group's counts with no record) to time, given the
    counts ``known`` (with a finite record): the group's smallest and largest, and each count
    whose next one up is over ``ratio`` times the last timed one (so that every untimed count lies
    between two timed ones within ``ratio`` of each other).

    >>> sorted(to_time([64, 96, 128, 160, 192, 224, 256], []))
    [64, 128, 256]
    >>> sorted(to_time([96, 160, 224], [64, 128, 192, 256]))     # the records bracket every one
    []
    >>> sorted(to_time([512], [64]))                             # never extrapolated
    [512]
    """
    needed, known = set(needed), set(known)
    allc = sorted(needed | known)
    if not allc:
        return set()
    timed = set(known) | {allc[0], allc[-1]}
    last = allc[0]
    for i, c in enumerate(allc):
        if c in timed:
            last = c
            continue
        if allc[i + 1] > ratio * last:
            timed.add(c)
            last = c
    return timed & needed


@dataclass(frozen=True)
class Prediction:
    cold_ms: float
    warm_ms: float
    incold_ms: float
    why: str


def predict(channels: int, points: Mapping[int, tuple[float, float, float]], ratio: float = RATIO) -> Prediction | None:
    """``channels``' times interpolated between its timed neighbours in ``points`` (channel count
    -> (cold, warm, in-cold) ms, finite), or None where no two neighbours within ``ratio`` of each
    other bracket it.

    >>> p = predict(96, {64: (1.0, 0.5, 1.2), 128: (2.0, 1.0, 2.4)})
    >>> round(p.cold_ms, 3), round(p.warm_ms, 3), round(p.incold_ms, 3), p.why
    (1.5, 0.75, 1.8, 'interpolated between its timed channel counts 64 and 128')
    >>> predict(96, {64: (1.0, 0.5, 1.2), 256: (2.0, 1.0, 2.4)}) is None
    True
    """
    if channels in points:
        t = points[channels]
        return Prediction(*t, f"as the timed channel count {channels}")
    lo = max((c for c in points if c < channels), default=None)
    hi = min((c for c in points if c > channels), default=None)
    if lo is None or hi is None or hi > ratio * lo:
        return None
    f = (channels - lo) / (hi - lo)
    a, b = points[lo], points[hi]
    t = [x + (y - x) * f for x, y in zip(a, b)]
    return Prediction(*t, f"interpolated between its timed channel counts {lo} and {hi}")


def finite(*ts) -> bool:
    return all(t is not None and math.isfinite(t) and t > 0 for t in ts)
