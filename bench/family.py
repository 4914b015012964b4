"""What one candidate family adds: a fresh run without it against a fresh run with every family.

  python bench/family.py FAMILY MODEL [MODEL...] [--runs 60] [--threads 2]

For each model, two fresh record stores (temporary folders), one after the other, nothing else
running: ``optimize(families=<every fp32 family but FAMILY>)`` and ``optimize()`` (every family).
Their stage times and job counts come from the reports. The two returned networks are then timed
against each other in one session of interleaved rounds (``graphselect.measure.e2e.compare``:
short blocks, the order reversed every other round): the ratio is the median over rounds of
with / without block medians (below 1: the family made the network faster). Per model the row
also gives the layers that chose FAMILY, their kernels' time in place in the with-run's network,
and the conv kernels' GFLOP/s in place against the FMA probe's peak read in the same run
(the probe's reading moves with the host: read it as a ratio of this run only). Results: printed,
and saved under bench/results/family-FAMILY-STAMP.{md,json} with the CPU named.
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


def _kernels(report, family: str) -> dict:
    """In-place figures of the with-run's conv layers: those of ``family`` and all of them."""
    mine = [l for l in report["layers"] if l["kind"] == "conv" and l.get("family") == family]
    convs = [l for l in report["layers"] if l["kind"] == "conv" and l.get("innet_ms")]
    gf = lambda ls: sum(l["gflop"] for l in ls) / max(1e-9, sum(l["innet_ms"] or 0 for l in ls)) * 1e3  # noqa: E731
    return {"layers": [l["name"] for l in mine], "ms": sum(l.get("innet_ms") or 0 for l in mine),
            "gflops": gf(mine) if mine else None, "conv_gflops": gf(convs) if convs else None}


def main():
    import graphselect
    import models
    from graphselect import candidates
    from graphselect.measure.e2e import compare, vm_runner
    from results_io import cpu_line, save

    ap = argparse.ArgumentParser()
    ap.add_argument("family")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.family not in candidates.FAMILIES:
        sys.exit(f"unknown family {a.family!r}; known: {', '.join(candidates.FAMILIES)}")
    others = [f for f in candidates.FAMILIES if f != a.family and candidates.precision_of(f) == "fp32"]
    rows = []
    for name in a.models:
        m = models.build(name)
        got = {}
        for mode, fams in (("without", others), ("with", None)):
            with tempfile.TemporaryDirectory(prefix="graphselect-family-") as d:
                res = graphselect.optimize(m, cache=Path(d) / "records.sqlite", threads=a.threads, families=fams,
                                           name=name)
                rep = res.report
                got[mode] = {"res": res, "exe": res.build(), "stages": rep["stage_seconds"],
                             "jobs": rep["records"]["jobs"], "peak": rep["hardware"].get("peak_gflops"),
                             "kernels": _kernels(rep, a.family), "e2e_ms": rep["measured_e2e_ms"],
                             "ratio_to_ort": rep.get("ratio_to_onnxruntime"), "handoff": rep.get("check_handoff_us")}
                print(f"{name} ({mode} {a.family}): {got[mode]['stages']}, {got[mode]['jobs']} jobs", flush=True)
        x = np.random.default_rng(0).standard_normal(got["with"]["res"].input_shape).astype("float32")
        r = compare({k: vm_runner(v["exe"], x) for k, v in got.items()}, runs=a.runs, seconds=3.0)
        rows.append({"model": name, **{f"{k}_{f}": v[f] for k, v in got.items()
                                       for f in ("stages", "jobs", "peak", "kernels", "e2e_ms", "ratio_to_ort", "handoff")},
                     "ms_without": r.median("without"), "ms_with": r.median("with"),
                     "ratio": r.ratio("with", "without"), "rounds": len(r.ms["with"])})
    f = a.family
    lines = [f"CPU: {cpu_line()}", "",
             f"`python bench/family.py {f} {' '.join(a.models)} --runs {a.runs}` (fresh store per run)", "",
             f"| model | jobs without / with | optimize s without / with | layers choosing {f} | their ms in place "
             f"| their GFLOP/s in place | all convs' GFLOP/s in place (without / with) | FMA probe GFLOP/s (without / with) "
             f"| returned ms without / with | with / without (round ratio) | to onnxruntime in each run's check (without / with) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    for r in rows:
        k = r["with_kernels"]
        lines.append(f"| {r['model']} | {r['without_jobs']} / {r['with_jobs']} | {r['without_stages']['total']:.0f} / "
                     f"{r['with_stages']['total']:.0f} | {len(k['layers'])} | {k['ms']:.3f} | {fmt(k['gflops'])} | "
                     f"{fmt(r['without_kernels']['conv_gflops'])} / {fmt(k['conv_gflops'])} | "
                     f"{fmt(r['without_peak'])} / {fmt(r['with_peak'])} | {r['ms_without']:.3f} / {r['ms_with']:.3f} | "
                     f"{r['ratio']:.3f} ({r['rounds']} rounds) | {r['without_ratio_to_ort']:.2f} / {r['with_ratio_to_ort']:.2f} |")
    save(f"family-{f}", "\n".join(lines) + "\n", rows)


if __name__ == "__main__":
    main()
