"""Why the whole-graph selection differs from a baseline (warm-cache greedy), layer by layer.

Pure Python over :class:`~costmodels.problem.Problem`: the same cost terms the solvers see, so
the explanation is the objective taken apart, never a separate story. Each layer whose choice
differs gets the time of both choices under the cache state their own whole assignment is in,
the layout transforms on the edges that touch it under each assignment, the weight bytes each
keeps, and a reason:

- ``cache``: the baseline's choice is faster with warm weights, but the baseline's whole
  assignment overflows the cache budget, so in the network it runs cold (or only partly warm,
  see ``Problem.partial``) and loses;
- ``layout``: the selected choice is no faster alone, but it saves layout transforms around it;
- ``faster``: the selected choice is faster alone under the cache state each assignment gets
  (the baseline picked by warm time where the network runs cold, or the other way round);
- ``neighbours``: none of the above for this layer alone; it changed to fit the choices around it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .problem import Problem

REASONS = ("cache", "layout", "faster", "neighbours")


@dataclass(frozen=True)
class Change:
    node: int
    name: str
    chosen: str
    baseline: str
    chosen_ms: float              # node time under the selected assignment's cache state
    baseline_ms: float            # node time under the baseline assignment's cache state
    baseline_warm_ms: float       # what the baseline expected (its choice with warm weights)
    chosen_transform_ms: float    # layout transforms on this node's edges, selected assignment
    baseline_transform_ms: float  # the same edges under the baseline assignment
    chosen_weight_bytes: int
    baseline_weight_bytes: int
    reason: str

    @property
    def saved_ms(self) -> float:
        """How much this layer (with its edges) gains over the baseline; edges shared by two changed
        layers count for both."""
        return (self.baseline_ms + self.baseline_transform_ms) - (self.chosen_ms + self.chosen_transform_ms)

    def text(self) -> str:
        if self.reason == "cache":
            return (f"{self.baseline} is {self.baseline_warm_ms:.3f} ms with warm weights, but the baseline "
                    f"does not fit the cache, so it runs at {self.baseline_ms:.3f} ms; "
                    f"{self.chosen} takes {self.chosen_ms:.3f} ms "
                    f"({_mb(self.chosen_weight_bytes)} vs {_mb(self.baseline_weight_bytes)} of weights)")
        if self.reason == "layout":
            return (f"{self.chosen} ({self.chosen_ms:.3f} ms) over {self.baseline} ({self.baseline_ms:.3f} ms) "
                    f"saves layout transforms: {self.baseline_transform_ms:.3f} -> {self.chosen_transform_ms:.3f} ms")
        if self.reason == "faster":
            return (f"{self.chosen} runs at {self.chosen_ms:.3f} ms in the network against "
                    f"{self.baseline_ms:.3f} ms for {self.baseline}")
        return (f"{self.chosen} ({self.chosen_ms:.3f} ms) over {self.baseline} ({self.baseline_ms:.3f} ms) "
                f"to suit the layers around it")

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["saved_ms"] = self.saved_ms
        d["text"] = self.text()
        return d


@dataclass(frozen=True)
class Comparison:
    chosen_ms: float
    baseline_ms: float
    chosen_resident: bool
    baseline_resident: bool
    chosen_footprint: int
    baseline_footprint: int
    cache_bytes: int | None
    changes: tuple[Change, ...]
    chosen_share: float = 0.0     # share of the warm-cold difference each assignment gets
    baseline_share: float = 0.0

    def summary(self) -> str:
        def state(res, fp, share=None):
            if res:
                return f"{_mb(fp)}, fits"
            part = f" ({share:.0%} warm)" if share else ""
            return f"{_mb(fp)}, does not fit{part}"
        budget = "no cache budget" if self.cache_bytes is None else f"cache budget {_mb(self.cache_bytes)}"
        return (f"{len(self.changes)} layer(s) differ from the baseline; predicted {self.chosen_ms:.3f} ms vs "
                f"{self.baseline_ms:.3f} ms; {budget}; selected footprint "
                f"{state(self.chosen_resident, self.chosen_footprint, self.chosen_share)}, baseline footprint "
                f"{state(self.baseline_resident, self.baseline_footprint, self.baseline_share)}")

    def as_dict(self) -> dict:
        return {"chosen_ms": self.chosen_ms, "baseline_ms": self.baseline_ms,
                "chosen_resident": self.chosen_resident, "baseline_resident": self.baseline_resident,
                "chosen_footprint_bytes": self.chosen_footprint, "baseline_footprint_bytes": self.baseline_footprint,
                "chosen_warm_share": self.chosen_share, "baseline_warm_share": self.baseline_share,
                "cache_bytes": self.cache_bytes, "summary": self.summary(),
                "reasons": {r: sum(1 for c in self.changes if c.reason == r) for r in REASONS},
                "changes": [c.as_dict() for c in self.changes]}


def compare(problem: Problem, chosen: tuple[int, ...], baseline: tuple[int, ...]) -> Comparison:
    """Every node where ``chosen`` and ``baseline`` differ, with the reason (see module doc),
    sorted by how much the change gains."""
    warm_c, warm_b = problem.resident(chosen), problem.resident(baseline)
    share_c, share_b = problem.warm_share(chosen), problem.warm_share(baseline)
    touching: dict[int, list] = {}
    for e in problem.edges:
        touching.setdefault(e.src, []).append(e)
        touching.setdefault(e.dst, []).append(e)

    def edges_ms(choice, i):
        total = 0.0
        for e in touching.get(i, ()):
            a = problem.nodes[e.src].choices[choice[e.src]]
            b = problem.nodes[e.dst].choices[choice[e.dst]]
            total += e.cost(a.out_layout, b.in_layouts[e.port])
        return total

    eps = 1e-9
    changes = []
    for i, (kc, kb) in enumerate(zip(chosen, baseline)):
        if kc == kb:
            continue
        node = problem.nodes[i]
        c, b = node.choices[kc], node.choices[kb]
        c_ms, b_ms = c.blend(share_c), b.blend(share_b)
        b_warm = b.time(True)
        tc, tb = edges_ms(chosen, i), edges_ms(baseline, i)
        if not warm_b and b_warm < c_ms - eps and b_ms > c_ms + eps and (warm_c or c.weight_bytes < b.weight_bytes):
            reason = "cache"
        elif c_ms < b_ms - eps:
            reason = "faster"
        elif tc < tb - eps:
            reason = "layout"
        else:
            reason = "neighbours"
        changes.append(Change(i, node.name, c.name, b.name, c_ms, b_ms, b_warm, tc, tb,
                              c.weight_bytes, b.weight_bytes, reason))
    changes.sort(key=lambda ch: -ch.saved_ms)
    return Comparison(problem.evaluate(chosen), problem.evaluate(baseline), warm_c, warm_b,
                      problem.footprint(chosen), problem.footprint(baseline), problem.cache_bytes, tuple(changes),
                      share_c, share_b)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
