"""How well do timed channel counts price the layout ops and transforms between them? Held out on
record stores where every size was timed (a run with ``--time-all``, or one made before
``graphselect.measure.sizes``).

  python bench/sizes_holdout.py STORE [STORE...] [--ratio 2.0]

For each store, its finite, unflagged records of layout ops and transforms are put in size groups
(``measure.sizes.size_key``, per candidate and code version); within each group the counts
``measure.sizes.to_time`` would time on a fresh store are kept as the timed points and every other
member is priced from them (``measure.sizes.predict``) and compared with its own record, which the
prediction never saw. Printed per store and op kind: members, priced, the absolute error (us:
median, 90th percentile, max; summed, and as a share of the priced members' recorded time), the
signed sum (bias) and the relative error's median and 90th percentile, for cold and warm time. No
timing: safe to run beside anything. Results saved under bench/results/sizes-STAMP.{md,json}.
"""
from __future__ import annotations

import argparse
import collections
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def holdout(path: Path, ratio: float) -> list[dict]:
    from graphselect.measure import sizes
    groups: dict = collections.defaultdict(dict)
    with sqlite3.connect(path) as db:
        for w, c, v, cold, warm, inc, flag, err in db.execute(
                "SELECT workload, candidate, version, cold_ms, warm_ms, incold_ms, flag, error FROM records_v4"):
            sk = sizes.size_key(w)
            inc = cold if inc is None else inc
            if sk is None or flag or err or not sizes.finite(cold, warm, inc):
                continue
            groups[(sk[0], c, v)][sk[1]] = (cold, warm, inc)
    per_kind: dict = collections.defaultdict(lambda: {"members": 0, "priced": 0, "cold": [], "warm": []})
    for (g, _c, _v), pts in groups.items():
        kind = g.split()[0]
        k = per_kind[kind]
        k["members"] += len(pts)
        timed = sizes.to_time(pts, [], ratio)
        known = {ch: t for ch, t in pts.items() if ch in timed}
        for ch, t in pts.items():
            if ch in timed:
                continue
            p = sizes.predict(ch, known, ratio)
            k["priced"] += 1
            k["cold"].append((p.cold_ms - t[0], t[0]))
            k["warm"].append((p.warm_ms - t[1], t[1]))
    rows = []
    for kind, k in sorted(per_kind.items(), key=lambda kv: -kv[1]["members"]):
        row = {"store": str(path), "kind": kind, "members": k["members"], "priced": k["priced"]}
        for what in ("cold", "warm"):
            e = k[what]
            if not e:
                continue
            ab = sorted(abs(d) * 1000 for d, _ in e)
            rel = sorted(abs(d) / t for d, t in e)
            row[what] = {"abs_us_median": ab[len(ab) // 2], "abs_us_p90": ab[int(0.9 * (len(ab) - 1))],
                         "abs_us_max": ab[-1], "abs_us_sum": sum(ab), "recorded_us_sum": 1000 * sum(t for _, t in e),
                         "signed_us_sum": 1000 * sum(d for d, _ in e), "rel_median": rel[len(rel) // 2],
                         "rel_p90": rel[int(0.9 * (len(rel) - 1))]}
        rows.append(row)
    return rows


def main(argv=None) -> int:
    from results_io import cpu_line, save
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--ratio", type=float, default=None)
    a = ap.parse_args(argv)
    from graphselect.measure import sizes
    ratio = a.ratio or sizes.RATIO
    rows = [r for p in a.stores for r in holdout(p, ratio)]
    md = [f"CPU of this script: {cpu_line()} (the stores' records name their own CPU)", "",
          f"`python bench/sizes_holdout.py {' '.join(map(str, a.stores))} --ratio {ratio}`", "",
          "| store | kind | members | priced | cold: abs err us (median / p90 / max) | cold: sum abs err / recorded | "
          "cold: signed sum us | cold: rel err median / p90 | warm: abs err us (median / p90 / max) | "
          "warm: sum abs err / recorded |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, w = r.get("cold"), r.get("warm")
        if c is None:
            md.append(f"| {Path(r['store']).parent.name} | {r['kind']} | {r['members']} | 0 | | | | | | |")
            continue
        md.append(f"| {Path(r['store']).parent.name} | {r['kind']} | {r['members']} | {r['priced']} | "
                  f"{c['abs_us_median']:.2f} / {c['abs_us_p90']:.1f} / {c['abs_us_max']:.1f} | "
                  f"{c['abs_us_sum']:.0f} / {c['recorded_us_sum']:.0f} ({100 * c['abs_us_sum'] / c['recorded_us_sum']:.1f}%) | "
                  f"{c['signed_us_sum']:+.0f} | {100 * c['rel_median']:.1f}% / {100 * c['rel_p90']:.1f}% | "
                  f"{w['abs_us_median']:.2f} / {w['abs_us_p90']:.1f} / {w['abs_us_max']:.1f} | "
                  f"{w['abs_us_sum']:.0f} / {w['recorded_us_sum']:.0f} ({100 * w['abs_us_sum'] / w['recorded_us_sum']:.1f}%) |")
    save("sizes", "\n".join(md) + "\n", {"ratio": ratio, "cpu": cpu_line(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
