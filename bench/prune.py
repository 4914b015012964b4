"""Does pruning cost speed? The assignment a pruned run returns against one returned with every candidate timed.

  python bench/prune.py MODEL [MODEL...] [--runs 60] [--threads 2] [--fresh]

For each model, first ``optimize()`` (the default: a conv's variants scouted and only the
candidates predicted to be able to win timed, ``graphselect.measure.scouts``; a conv whose twin,
the same conv with another epilogue, was timed has only what its twin says can win timed,
``graphselect.measure.twins``) in a fresh record store, then ``optimize(time_all=True)`` (every
candidate of every conv timed) in a copy of that store with its network records removed and its
records' load readings cleared: the all-timed run reuses every kernel record the pruned run made as
it is (none re-timed for a faster machine state, ``measure.local.stale``), times only what it pruned, and
its closed loop starts, like the pruned run's, with no calibration. The two runs then differ only in
what pruning took away, not in two timings of the same kernels (issue 24: "same store"); the
all-timed run's stage times are those of timing the pruned rest. With ``--fresh``, each run has a
fresh store of its own instead (all timed first), and its stage times are those of a fresh run.
The two returned networks are then timed against each other in one session of interleaved rounds
(``graphselect.measure.e2e.compare``: short blocks, the order reversed every other round): the
ratio is the median over rounds of pruned / unpruned block medians (above 1: the pruned run's choice
is slower), beside the same ratio for the all-timed network against itself in a second VM (what
two runs of one network differ by in that session), with the layers where the all-timed run chose
a kernel the pruned run did not time (what pruning took away; both assignments are in the JSON).
Results: printed, and saved under
bench/results/prune-STAMP.{md,json} with the CPU named.
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
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
    ap.add_argument("--root", help="keep each model's two record stores under ROOT/MODEL (default: a temporary folder)")
    ap.add_argument("--fresh", action="store_true", help="a fresh store for each run (all timed first) instead "
                    "of the all-timed run extending the pruned run's kernel records")
    a = ap.parse_args()
    rows = []
    for name in a.models:
        m = models.build(name)
        got = {}
        order = (("all timed", True), ("pruned", False)) if a.fresh else (("pruned", False), ("all timed", True))
        with tempfile.TemporaryDirectory(prefix="graphselect-prune-") as tmp:
            top = Path(a.root) / name if a.root else Path(tmp)
            if a.root:
                shutil.rmtree(top, ignore_errors=True)
                top.mkdir(parents=True)
            for mode, time_all in order:
                d = top / mode.replace(" ", "-")
                if not a.fresh and time_all:
                    _copy_kernels_only(top / "pruned", d)
                d.mkdir(exist_ok=True)
                res = graphselect.optimize(m, cache=d / "records.sqlite", threads=a.threads, time_all=time_all,
                                           name=name)
                rec = res.report["records"]
                got[mode] = {"res": res, "exe": res.build(), "stages": res.report["stage_seconds"],
                             "jobs": rec["jobs"], "pruned": len(rec.get("pruned") or ()),
                             "new": rec.get("new"), "reused": rec.get("reused"),
                             "build_s": rec.get("build_s"), "run_s": rec.get("run_s"),
                             "assignment": dict(res.assignment),
                             "pruned_keys": {(p["workload"], p["candidate"]) for p in rec.get("pruned") or ()},
                             "plan": res.extra["plan"], "measurements": res.extra["measurements"]}
                print(f"{name} ({mode}): {got[mode]['stages']}, {got[mode]['pruned']} pruned, "
                      f"{got[mode]['new']} new, {got[mode]['reused']} reused", flush=True)
        x = np.random.default_rng(0).standard_normal(got["all timed"]["res"].input_shape).astype("float32")
        # the all-timed network a second time, in a VM of its own: the ratio two runs of one network
        # give in this session (the noise floor the pruned / all-timed ratio is read against)
        fns = {k: vm_runner(v["exe"], x) for k, v in got.items()}
        fns["all timed, again"] = vm_runner(got["all timed"]["exe"], x)
        r = compare(fns, runs=a.runs, seconds=3.0)
        lg = got["all timed"]["res"].extra["lg"]
        n_twins = len(split(layer.conv.key for layer in lg.layers.values() if layer.kind == "conv"))
        differ = sorted(k for k, v in got["all timed"]["assignment"].items() if got["pruned"]["assignment"].get(k) != v)
        # layers where the all-timed run chose a kernel the pruned run did not time: what pruning took away
        plan, gone = got["all timed"]["plan"], got["pruned"]["pruned_keys"]
        took = sorted(layer for layer, cand in got["all timed"]["assignment"].items()
                      if _kernel(plan, layer, cand) in gone)

        # for each layer that differs: both choices' isolated cold ms as each run's records have them
        # (what the choice was made from; None where a run did not time it)
        def cold(mode, layer, cand):
            m = got[mode]["measurements"].get(_kernel(plan, layer, cand))
            return None if m is None or not np.isfinite(m.cold_ms) else round(float(m.cold_ms), 4)
        cold_ms = {layer: {mode: {which: cold(mode, layer, got[which]["assignment"][layer]) for which in got}
                           for mode in got} for layer in differ}
        rows.append({"model": name, "cold_ms_of_differing_layers": cold_ms, "twin_workloads": n_twins, "pruned_choices_of_all_timed": took,
                     "assignment_all": got["all timed"]["assignment"],
                     "assignment_pruned": got["pruned"]["assignment"],
                     "protocol": "fresh" if a.fresh else "shared",
                     **{f"{k}_{f}": v[f] for k, v in got.items()
                        for f in ("stages", "jobs", "pruned", "new", "reused", "build_s", "run_s")},
                     "ms_all": r.median("all timed"), "ms_pruned": r.median("pruned"),
                     "ratio": r.ratio("pruned", "all timed"), "rounds": len(r.ms["all timed"]),
                     "ratio_same": r.ratio("all timed, again", "all timed"),
                     "layers_differ": differ})
    lines = [f"CPU: {cpu_line()}", "",
             f"`python bench/prune.py {' '.join(a.models)} --runs {a.runs}{' --fresh' if a.fresh else ''}` (scout margin "
             f"{MARGIN:.0%}, twin margin {TWIN_MARGIN:.0%}; "
             + ("a fresh store per run)" if a.fresh else "pruned run in a fresh store, then the all-timed run in a copy "
                "of its kernel records, timing only what it pruned; no network records in either)"), "",
             "| model | twin workloads | jobs | pruned | optimize s, all timed (measure: compile + timing) "
             "| optimize s, pruned (measure: compile + timing) | returned ms, all timed | pruned | pruned / all (round ratio) "
             "| all timed, again / all (same network) | layers that differ | all-timed choices pruned |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sa, sp = r["all timed_stages"], r["pruned_stages"]
        lines.append(f"| {r['model']} | {r['twin_workloads']} | {r['all timed_jobs']} | {r['pruned_pruned']} | "
                     f"{sa['total']:.0f} ({sa['measure']:.0f}: {r['all timed_build_s']:.0f} + {r['all timed_run_s']:.0f}) | "
                     f"{sp['total']:.0f} ({sp['measure']:.0f}: {r['pruned_build_s']:.0f} + {r['pruned_run_s']:.0f}) | "
                     f"{r['ms_all']:.3f} | {r['ms_pruned']:.3f} | {r['ratio']:.3f} ({r['rounds']} rounds) | {r['ratio_same']:.3f} | "
                     f"{', '.join(r['layers_differ']) or 'none'} | {', '.join(r['pruned_choices_of_all_timed']) or 'none'} |")
    save("prune", "\n".join(lines) + "\n", rows)


def _kernel(plan, layer: str, cand: str):
    """The (workload, candidate) record key of ``layer``'s option ``cand`` in ``plan``, or None
    (a layer the plan does not price, or an option with no kernel of its own)."""
    for o in plan.table(layer).options if layer in plan.index else ():
        if o.name == cand and o.kernel is not None:
            return tuple(o.kernel)
    return None


def _copy_kernels_only(src: Path, dst: Path):
    """``src``'s record store and kept kernels in ``dst``, without its built networks (``builds/``)
    or its network records: what the next run may reuse is every kernel timing, and nothing the
    closed loop learnt. The records' load readings are cleared, so that none is re-timed."""
    from graphselect.measure.store import TABLE, RecordStore
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("builds"))
    store = RecordStore(dst / "records.sqlite")
    store.forget_networks()
    store.close()
    with sqlite3.connect(dst / "records.sqlite") as db:
        # no record is re-timed for having been taken in a slower state than the one the all-timed
        # run finds (``measure.local.stale``): both runs choose from the very same timings
        db.execute(f"UPDATE {TABLE} SET load = 0 WHERE flag IS NULL OR flag = ''")


if __name__ == "__main__":
    main()
