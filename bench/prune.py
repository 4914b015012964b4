"""Does pruning cost speed? A fresh run with every candidate timed against one that times only what can win.

  python bench/prune.py MODEL [MODEL...] [--runs 60] [--threads 2]

For each model, two fresh record stores (temporary folders): ``optimize(time_all=True)`` (every
candidate of every conv timed) and then ``optimize()`` (the default: a conv's variants scouted and
only the candidates predicted to be able to win timed, ``graphselect.measure.scouts``; a conv whose
twin, the same conv with another epilogue, was timed has only what its twin says can win timed,
``graphselect.measure.twins``), one after the other, nothing else running. Their stage times and
job counts come from the reports. The two returned networks are then timed against each other in
one session of interleaved rounds (``graphselect.measure.e2e.compare``: short blocks, the order
reversed every other round): the ratio is the median over rounds of pruned / unpruned block
medians (above 1: the pruned run's choice is slower), with the layers where the all-timed run chose
a kernel the pruned run did not time (what pruning took away; both assignments are in the JSON). Results: printed, and saved under
bench/results/prune-STAMP.{md,json} with the CPU named.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def main():
    import graphselect
    import models
    from graphselect.measure.e2e import compare, vm_runner
    from graphselect.measure.scouts import MARGIN
    from graphselect.measure.twins import MARGIN as TWIN_MARGIN, split
    from results_io import cpu_line, save

    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    rows = []
    for name in a.models:
        m = models.build(name)
        got = {}
        for mode, time_all in (("all timed", True), ("pruned", False)):
            with tempfile.TemporaryDirectory(prefix="graphselect-twins-") as d:
                res = graphselect.optimize(m, cache=Path(d) / "records.sqlite", threads=a.threads, time_all=time_all,
                                           name=name)
                rec = res.report["records"]
                got[mode] = {"res": res, "exe": res.build(), "stages": res.report["stage_seconds"],
                             "jobs": rec["jobs"], "pruned": len(rec.get("pruned") or ()),
                             "build_s": rec.get("build_s"), "run_s": rec.get("run_s"),
                             "assignment": dict(res.assignment),
                             "pruned_keys": {(p["workload"], p["candidate"]) for p in rec.get("pruned") or ()},
                             "plan": res.extra["plan"]}
                print(f"{name} ({mode}): {got[mode]['stages']}, {got[mode]['pruned']} pruned", flush=True)
        x = np.random.default_rng(0).standard_normal(got["all timed"]["res"].input_shape).astype("float32")
        r = compare({k: vm_runner(v["exe"], x) for k, v in got.items()}, runs=a.runs, seconds=3.0)
        lg = got["all timed"]["res"].extra["lg"]
        n_twins = len(split(layer.conv.key for layer in lg.layers.values() if layer.kind == "conv"))
        differ = sorted(k for k, v in got["all timed"]["assignment"].items() if got["pruned"]["assignment"].get(k) != v)
        # layers where the all-timed run chose a kernel the pruned run did not time: what pruning took away
        plan, gone = got["all timed"]["plan"], got["pruned"]["pruned_keys"]
        took = sorted(layer for layer, cand in got["all timed"]["assignment"].items()
                      if layer in plan.index and any(o.name == cand and o.kernel is not None and tuple(o.kernel) in gone
                                                     for o in plan.table(layer).options))
        rows.append({"model": name, "twin_workloads": n_twins, "pruned_choices_of_all_timed": took,
                     "assignment_all": got["all timed"]["assignment"],
                     "assignment_pruned": got["pruned"]["assignment"],
                     **{f"{k}_{f}": v[f] for k, v in got.items() for f in ("stages", "jobs", "pruned", "build_s", "run_s")},
                     "ms_all": r.median("all timed"), "ms_pruned": r.median("pruned"),
                     "ratio": r.ratio("pruned", "all timed"), "rounds": len(r.ms["all timed"]),
                     "layers_differ": differ})
    lines = [f"CPU: {cpu_line()}", "",
             f"`python bench/prune.py {' '.join(a.models)} --runs {a.runs}` (scout margin {MARGIN:.0%}, twin margin "
             f"{TWIN_MARGIN:.0%}; fresh store per run)", "",
             "| model | twin workloads | jobs | pruned | optimize s, all timed (measure: compile + timing) "
             "| optimize s, pruned (measure: compile + timing) | returned ms, all timed | pruned | pruned / all (round ratio) "
             "| layers that differ | all-timed choices pruned |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sa, sp = r["all timed_stages"], r["pruned_stages"]
        lines.append(f"| {r['model']} | {r['twin_workloads']} | {r['all timed_jobs']} | {r['pruned_pruned']} | "
                     f"{sa['total']:.0f} ({sa['measure']:.0f}: {r['all timed_build_s']:.0f} + {r['all timed_run_s']:.0f}) | "
                     f"{sp['total']:.0f} ({sp['measure']:.0f}: {r['pruned_build_s']:.0f} + {r['pruned_run_s']:.0f}) | "
                     f"{r['ms_all']:.3f} | {r['ms_pruned']:.3f} | {r['ratio']:.3f} ({r['rounds']} rounds) | "
                     f"{', '.join(r['layers_differ']) or 'none'} | {', '.join(r['pruned_choices_of_all_timed']) or 'none'} |")
    save("prune", "\n".join(lines) + "\n", rows)


if __name__ == "__main__":
    main()
