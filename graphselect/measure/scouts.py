"""Scouts: a conv's candidates are timed only where they can still win (DESIGN.md, "Measurement:
scouts"; issue 24, item 1).

A conv layer's candidates fall into *variants*: a family and the parameters that change its
algorithm (Winograd's tile ``m``, an NCHW output, direct's flat loop, nchwc's inlined padding),
apart from the blocking parameters every variant has (channel blocks, register tiles, vector
widths: ``TILE``). Within a workload, members of one variant time within tens of percent of each
other; variants differ by up to several times (ResNet-18's 3x3 convs on Zen 4: nchwc 3.2x the
best Winograd, m=2 1.5x where m=4 wins). So each conv workload is measured in two passes:

1. **Scouts**: one member per variant, the one the parameter model ranks first (preferring a
   member whose layout pair no scout covers yet, so the scouts cover the layout pairs too).
2. **The rest**, each predicted from its variant's fastest timed member times the parameter
   model's factor between the two (1 where the model has no data): timed when predicted within
   ``MARGIN`` of the workload's fastest timed candidate, cold or warm; also timed when it is the
   best predicted of a layout pair no timed candidate has (the graph's layout trade-off needs one
   of each). The rest are pruned: priced at infinity, listed with their reason in the report.

The **parameter model** is fitted on this machine's own records (the store's, any workload, any
model, of the code versions in use, and this run's): log time = a per (workload, variant)
intercept + one effect per (variant, parameter, value), by alternating least squares, for cold
and warm alike. It only ranks members of one variant against each other; the variant's level on a
workload always comes from a timing on that workload. Pure Python: no TVM.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from .twins import Pruned

MARGIN = 0.25          # a candidate predicted within this of its workload's fastest timed one is timed
MIN_CANDIDATES = 6     # a workload with fewer candidates has them all timed
BATCH = 6              # pass 2 times workloads together until this many jobs per compiler process
# blocking parameters: members of one variant differ in these
TILE = frozenset({"ic_bn", "oc_bn", "bn", "reg_n", "pt", "vec", "oc_tile", "rows", "task_rows", "tile_h", "tile_w"})

_KEY = re.compile(r"^([A-Za-z0-9_]+)\((.*)\)$")


def parse(candidate: str) -> tuple[str, dict[str, str]]:
    """``"winograd(ic_bn=16,m=4)"`` -> ``("winograd", {"ic_bn": "16", "m": "4"})``.

    >>> parse("nchwc(ic_bn=16,oc_bn=32,reg_n=7)")
    ('nchwc', {'ic_bn': '16', 'oc_bn': '32', 'reg_n': '7'})
    >>> parse("NCHW16c->NCHW")
    ('NCHW16c->NCHW', {})
    """
    m = _KEY.match(candidate)
    if m is None:
        return candidate, {}
    params = {}
    for part in filter(None, m.group(2).split(",")):
        k, _, v = part.partition("=")
        params[k.strip()] = v.strip()
    return m.group(1), params


def variant(candidate: str) -> str:
    """The family and its algorithm parameters, and the names of its blocking ones.

    >>> variant("winograd(ic_bn=16,m=4,oc_bn=32,pt=7)")
    'winograd(m=4)[ic_bn,oc_bn,pt]'
    >>> variant("winograd(ic_bn=32,m=4,oc_bn=16,pt=4)") == variant("winograd(ic_bn=16,m=4,oc_bn=32,pt=7)")
    True
    >>> variant("depthwise(rows=4,task_rows=56,vec=14)") == variant("depthwise(bn=16,reg_n=8)")
    False
    """
    fam, p = parse(candidate)
    algo = ",".join(f"{k}={v}" for k, v in sorted(p.items()) if k not in TILE)
    tiles = ",".join(sorted(k for k in p if k in TILE))
    return f"{fam}({algo})[{tiles}]"


def _tiles(candidate: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in sorted(parse(candidate)[1].items()) if k in TILE]


@dataclass
class ParamModel:
    """log time = intercept per (workload, variant) + effect per (variant, parameter, value)."""
    effects: dict = field(default_factory=dict)      # (variant, param, value) -> (log cold, log warm)
    support: dict = field(default_factory=dict)      # variant -> workloads it was fitted on

    @classmethod
    def fit(cls, rows: Iterable[tuple[str, str, float, float]], iterations: int = 12) -> "ParamModel":
        """From (workload, candidate, cold ms, warm ms) rows; only (workload, variant) groups with
        two or more finite members say anything about the blocking parameters."""
        groups: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
        for w, c, cold, warm in rows:
            if not (cold and warm and math.isfinite(cold) and math.isfinite(warm) and cold > 0 and warm > 0):
                continue
            groups.setdefault((w, variant(c)), {})[c] = (math.log(cold), math.log(warm))
        groups = {g: m for g, m in groups.items() if len(m) >= 2}
        model = cls()
        if not groups:
            return model
        for (w, v) in groups:
            model.support.setdefault(v, set()).add(w)
        by_group = {g: [(_tiles(c), t) for c, t in m.items()] for g, m in groups.items()}
        obs = [(g, ks, t) for g, o in by_group.items() for ks, t in o]
        eff: dict = {}
        for _ in range(iterations):
            icpt = {}
            for g, o in by_group.items():
                rs = [(t[0] - sum(eff.get((g[1], *kv), (0.0, 0.0))[0] for kv in ks),
                       t[1] - sum(eff.get((g[1], *kv), (0.0, 0.0))[1] for kv in ks))
                      for ks, t in o]
                icpt[g] = (sum(r[0] for r in rs) / len(rs), sum(r[1] for r in rs) / len(rs))
            acc: dict = {}
            for g, ks, t in obs:
                for kv in ks:
                    key = (g[1], *kv)
                    others = [eff.get((g[1], *o), (0.0, 0.0)) for o in ks if o != kv]
                    r = (t[0] - icpt[g][0] - sum(o[0] for o in others), t[1] - icpt[g][1] - sum(o[1] for o in others))
                    a = acc.setdefault(key, [0.0, 0.0, 0])
                    a[0] += r[0]
                    a[1] += r[1]
                    a[2] += 1
            eff = {k: (a[0] / a[2], a[1] / a[2]) for k, a in acc.items()}
        model.effects = eff
        return model

    def factor(self, candidate: str, reference: str) -> tuple[float, float]:
        """Predicted (cold, warm) time of ``candidate`` over that of ``reference``, a member of the
        same variant; a parameter whose value in either the model has no data on counts as equal."""
        v = variant(candidate)
        mine, theirs = dict(_tiles(candidate)), dict(_tiles(reference))
        lc = lw = 0.0
        for p in mine.keys() | theirs.keys():
            a, b = self.effects.get((v, p, mine.get(p))), self.effects.get((v, p, theirs.get(p)))
            if a is not None and b is not None:
                lc += a[0] - b[0]
                lw += a[1] - b[1]
        return math.exp(lc), math.exp(lw)

    def rank(self, candidate: str) -> float:
        """Where ``candidate`` stands within its variant (lower: faster; 0 without data)."""
        v = variant(candidate)
        return sum(self.effects.get((v, *kv), (0.0, 0.0))[0] for kv in _tiles(candidate))


def scouts(candidates: list[str], known: Mapping[str, tuple[float, float]], layouts: Callable[[str], object],
           model: ParamModel) -> list[str]:
    """The members of one workload's ``candidates`` to time first: one per variant that has no
    timing in ``known`` (candidate -> (cold, warm)), the one the model ranks first, among those
    within 3% of it preferring one whose layout pair no timing or scout covers yet."""
    covered = {layouts(c) for c, t in known.items() if _finite(t)}
    have = {variant(c) for c, t in known.items() if _finite(t)}
    members: dict[str, list[str]] = {}
    for c in candidates:
        members.setdefault(variant(c), []).append(c)
    out = []
    for v, ms in members.items():
        if v in have:
            continue
        ranked = sorted(ms, key=model.rank)          # stable: the grid's order breaks ties
        top = model.rank(ranked[0])
        near = [c for c in ranked if model.rank(c) <= top + math.log(1.03)]
        pick = next((c for c in near if layouts(c) not in covered), ranked[0])
        covered.add(layouts(pick))
        out.append(pick)
    return out


def prune(candidates: list[str], timed: Mapping[str, tuple[float, float]], layouts: Callable[[str], object],
          model: ParamModel, margin: float = MARGIN) -> tuple[list[str], list[tuple[str, str]]]:
    """Which of one workload's untimed ``candidates`` to time (``keep``) and which not
    (``(candidate, why)``), given the workload's timings ``timed`` (candidate -> (cold, warm)).

    >>> t = {"w(ic_bn=16,m=2)": (1.0, 1.0), "w(ic_bn=16,m=4)": (2.0, 2.0)}
    >>> keep, gone = prune(["w(ic_bn=32,m=2)", "w(ic_bn=32,m=4)", "d(vec=8)"], t, lambda c: "p", ParamModel())
    >>> keep
    ['w(ic_bn=32,m=2)', 'd(vec=8)']
    >>> gone[0][0], gone[0][1]
    ('w(ic_bn=32,m=4)', 'predicted 2.00x the fastest (w(ic_bn=16,m=2)) from w(ic_bn=16,m=4) timed at 2.00x')
    """
    ok = {c: t for c, t in timed.items() if _finite(t)}
    if not ok:
        return list(candidates), []
    best_cold = min(t[0] for t in ok.values())
    best_warm = min(t[1] for t in ok.values())
    fastest = min(ok, key=lambda c: ok[c][0])
    lead: dict[str, str] = {}                       # variant -> its fastest timed member
    for c in sorted(ok, key=lambda c: ok[c][0]):
        lead.setdefault(variant(c), c)
    keep, maybe = [], []
    for c in candidates:
        s = lead.get(variant(c))
        if s is None:                                # nothing to predict it from
            keep.append(c)
            continue
        fc, fw = model.factor(c, s)
        pc, pw = ok[s][0] * fc, ok[s][1] * fw
        if pc <= (1 + margin) * best_cold or pw <= (1 + margin) * best_warm:
            keep.append(c)
        else:
            maybe.append((c, pc, s))
    pairs = {layouts(c) for c in ok} | {layouts(c) for c in keep}
    best_of: dict = {}
    for c, pc, s in maybe:                           # a layout pair nothing timed covers keeps its best
        lay = layouts(c)
        if lay not in pairs and (lay not in best_of or pc < best_of[lay][1]):
            best_of[lay] = (c, pc)
    chosen = {c for c, _ in best_of.values()}
    gone = []
    for c, pc, s in maybe:
        if c in chosen:
            keep.append(c)
        else:
            gone.append((c, f"predicted {pc / best_cold:.2f}x the fastest ({fastest}) from {s} timed at "
                            f"{ok[s][0] / best_cold:.2f}x"))
    order = {c: i for i, c in enumerate(candidates)}
    keep.sort(key=order.__getitem__)
    return keep, gone


def _finite(t) -> bool:
    return all(v is not None and math.isfinite(v) for v in t)


def to_pruned(workload: str, gone: list[tuple[str, str]]) -> list[Pruned]:
    return [Pruned(workload, c, why) for c, why in gone]
