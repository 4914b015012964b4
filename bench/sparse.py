"""Pruned models: end-to-end latency against onnxruntime (same run, same input, same threads;
alternating blocks of runs, medians) and a per-layer table (sparsity, best dense candidate, best
sparse candidate with its unfused epilogue if any, the choice) from graphselect's measurements.

Usage: python bench/sparse.py [resnet18] [--sparsity 0.9 0.7 0.3] [--runs 30] [--threads 2]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

DENSE = ("direct", "nchwc", "winograd")


def layer_rows(res):
    # isolated timings (the dense/sparse comparison is per layer, alone)
    lg, plan, problem, sol = (res.extra[k] for k in ("lg", "plan", "isolated", "solution"))
    rows = []
    for i, (name, layer) in enumerate(lg.layers.items()):
        if layer.kind != "conv":
            continue
        opts, node = plan.table(name).options, problem.nodes[i]
        best = {}
        for k, opt in enumerate(opts):
            key = opt.name
            group = "sparse" if opt.family == "sparse_csr" else "dense"
            if node.choices[k].cost < best.get(group, (math.inf, None))[0]:
                best[group] = (node.choices[k].cost, key)
        rows.append({"layer": name, "shape": layer.conv.describe(), "sparsity": layer.sparsity,
                     "dense_ms": best.get("dense", (math.inf, None))[0], "dense": best.get("dense", (0, None))[1],
                     "sparse_ms": best.get("sparse", (math.inf, None))[0], "sparse": best.get("sparse", (0, None))[1],
                     "chosen": opts[sol.choice[i]].name, "chosen_ms": node.choices[sol.choice[i]].cost})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("--sparsity", type=float, nargs="+", default=[0.9, 0.7, 0.3])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    import graphselect
    import models

    out, md = [], []
    for sp in a.sparsity:
        res = graphselect.optimize(models.build(a.model, sparsity=sp), threads=a.threads, benchmark_runs=a.runs,
                                   name=f"{a.model}-sp{round(sp * 100)}")
        rep = res.report
        rows = layer_rows(res)
        out.append({"model": a.model, "sparsity": sp, "graphselect_ms": rep["measured_e2e_ms"],
                    "onnxruntime_ms": rep["onnxruntime_ms"], "ratio": rep["ratio_to_onnxruntime"],
                    "predicted_ms": rep["predicted_e2e_ms"], "max_rel_err": rep["max_rel_err"],
                    "families": rep["families_chosen"], "layers": rows})
        line = (f"{a.model} {sp:.0%} sparse: graphselect {rep['measured_e2e_ms']:.3f} ms, onnxruntime "
                f"{rep['onnxruntime_ms']:.3f} ms, ratio {rep['ratio_to_onnxruntime']:.3f}, families "
                f"{rep['families_chosen']}, max rel err {rep['max_rel_err']:.1e}")
        print(line, flush=True)
        md += [f"## {a.model}, {sp:.0%} of conv weights pruned", "", line, "",
               "| layer | shape | sparsity | best dense ms | best dense | best sparse ms | best sparse | chosen |",
               "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            md.append(f"| {r['layer']} | {r['shape']} | {r['sparsity']:.2f} | {r['dense_ms']:.3f} | {r['dense']} | "
                      f"{r['sparse_ms']:.3f} | {r['sparse']} | {r['chosen']} |")
        md.append("")
    text = "\n".join(md)
    print(text)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"sparse-{stamp}.md").write_text(text)
    (HERE / "results" / f"sparse-{stamp}.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
