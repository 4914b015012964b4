"""Twins: convs equal but for their epilogue (bias, residual add, activation, or no bias at all)
time alike, candidate by candidate, so one twin's timings say which of the other's candidates can
win (DESIGN.md, "Measurement: twins").

A ResNet has each 3x3 conv shape twice, once ending in bias+relu and once in bias+residual+relu;
a PyTorch dynamo export differs from the TorchScript one of the same model only by convs without
their zero bias. The first twin of a group (in the plan's order) is timed whole; for each later
twin only the candidates its first twin ran within ``MARGIN`` of its fastest (cold or warm), and
the fastest of each layout pair (the layout trade-off of the whole graph needs one of each), are
timed. The rest are pruned: the Problem prices them at infinity, so no solver can choose them, and
the report lists each with its reason. A candidate the first twin has no finite timing of is
timed. Pure Python: no TVM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

MARGIN = 0.15        # a later twin's candidate is timed when its first twin ran it within this of its best


def twin_key(workload: str) -> str | None:
    """The conv a workload computes without its epilogue (None: not a conv workload).

    >>> twin_key("conv2d n1 c64 h56 w56 o64 k3x3 s1x1 p1,1,1,1 g1 epi=bias+res+relu")
    'conv2d n1 c64 h56 w56 o64 k3x3 s1x1 p1,1,1,1 g1'
    >>> twin_key("layout_transform (1, 64, 56, 56)") is None
    True
    """
    if not workload.startswith("conv2d "):
        return None
    return workload.split(" epi=")[0]


@dataclass(frozen=True)
class Pruned:
    workload: str
    candidate: str
    why: str


def split(workloads: Iterable[str]) -> dict[str, str]:
    """Later twin workload -> its first twin (the first of its group in ``workloads``' order)."""
    first: dict[str, str] = {}
    out: dict[str, str] = {}
    for w in dict.fromkeys(workloads):
        k = twin_key(w)
        if k is None:
            continue
        if k in first:
            out[w] = first[k]
        else:
            first[k] = w
    return out


def prune(later: Iterable[tuple[str, str]], first_of: Mapping[str, str],
          timed: Mapping[tuple[str, str], tuple[float, float]],
          layouts: Callable[[str, str], object], margin: float = MARGIN) -> tuple[list, list[Pruned]]:
    """Which ``(workload, candidate)`` keys of later twins to time (``keep``) and which not.

    ``timed``: (workload, candidate) -> (cold ms, warm ms) of the first twins' candidates;
    ``layouts(workload, candidate)``: the candidate's layout pair (inputs and output), equal for
    candidates that leave the graph's layouts alike.

    >>> t = {("a", "x"): (1.0, 0.9), ("a", "y"): (1.1, 1.0), ("a", "z"): (2.0, 1.9), ("a", "w"): (3.0, 3.0)}
    >>> lay = lambda w, c: "16c" if c in "xyz" else "32c"
    >>> keep, gone = prune([("b", "x"), ("b", "y"), ("b", "z"), ("b", "w"), ("b", "v")], {"b": "a"}, t, lay)
    >>> keep
    [('b', 'x'), ('b', 'y'), ('b', 'w'), ('b', 'v')]
    >>> gone[0].candidate, gone[0].why
    ('z', 'its twin a ran it 2.00x the fastest (x); 16c is kept by x')
    """
    keep, gone = [], []
    groups: dict[str, dict[str, tuple[float, float]]] = {}
    for (w, c), t in timed.items():
        if all(math.isfinite(v) for v in t):
            groups.setdefault(w, {})[c] = t
    for w, c in later:
        f = first_of.get(w)
        mine = groups.get(f, {}) if f is not None else {}
        if c not in mine:
            keep.append((w, c))
            continue
        best_cold = min(t[0] for t in mine.values())
        best_warm = min(t[1] for t in mine.values())
        cold, warm = mine[c]
        if cold <= (1 + margin) * best_cold or warm <= (1 + margin) * best_warm:
            keep.append((w, c))
            continue
        lay = layouts(f, c)
        rivals = [k for k in mine if layouts(f, k) == lay]
        lead = min(rivals, key=lambda k: mine[k][0])
        if lead == c:
            keep.append((w, c))
            continue
        fastest = min(mine, key=lambda k: mine[k][0])
        gone.append(Pruned(w, c, f"its twin {f} ran it {cold / best_cold:.2f}x the fastest ({fastest}); "
                                 f"{lay} is kept by {lead}"))
    return keep, gone
