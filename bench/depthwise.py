"""Per-layer table of the depthwise (and grouped) conv layers of zoo models: the best plain-NCHW
candidate, the best channel-blocked one, and what the whole-graph selection chose.

Usage: python bench/depthwise.py MODEL [MODEL...] [--threads 2] [--image-size N]

Times are the measured kernel times (cold weights, median of interleaved rounds, as stored in the
record store), with the fused epilogue. The chosen candidate can be slower alone than the best one:
its layout saves transforms around it. Results: printed, and saved under bench/results/.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def rows_of(report: dict, grouped: bool) -> list[dict]:
    out = []
    for l in report["layers"]:
        if l.get("kind") != "conv" or not (" dw " in l["shape"] or (grouped and " g" in l["shape"])):
            continue
        ok = [c for c in l["candidates"] if c["cold_ms"] is not None]
        plain = [c for c in ok if c["in_layout"] == "NCHW" and c["out_layout"] == "NCHW"]
        blocked = [c for c in ok if c not in plain]
        best = lambda cs: min(cs, key=lambda c: c["cold_ms"]) if cs else None  # noqa: E731
        chosen = next(c for c in l["candidates"] if c["key"] == l["chosen"])
        out.append({"layer": l["name"], "shape": l["shape"], "epilogue": l["epilogue"],
                    "best_nchw": best(plain), "best_blocked": best(blocked), "chosen": chosen})
    return out


def table(model: str, rows: list[dict]) -> str:
    def cell(c):
        if c is None:
            return "—"
        lay = c["in_layout"] if c["in_layout"] == c["out_layout"] else f"{c['in_layout']}->{c['out_layout']}"
        return f"{c['cold_ms']:.4f} {c['family']} {lay}"
    lines = [f"### {model}", "", "| layer | shape | epilogue | best NCHW ms | best blocked ms | chosen ms |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['shape']} | {r['epilogue']} | {cell(r['best_nchw'])} | "
                     f"{cell(r['best_blocked'])} | {cell(r['chosen'])} |")
    tot = lambda k: sum(r[k]["cold_ms"] for r in rows if r[k] is not None)  # noqa: E731
    lines.append(f"| total | | | {tot('best_nchw'):.3f} | {tot('best_blocked'):.3f} | {tot('chosen'):.3f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--grouped", action="store_true", help="include grouped (not depthwise) convs")
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    import graphselect
    import models
    out, md = {}, []
    for name in a.models:
        m = models.build(name, image_size=a.image_size)
        res = graphselect.optimize(m, threads=a.threads, benchmark_runs=0, name=name)
        out[name] = rows_of(res.report, a.grouped)
        md.append(table(name, out[name]))
        print(md[-1], flush=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"depthwise-{stamp}.json").write_text(json.dumps(out, indent=1))
    (HERE / "results" / f"depthwise-{stamp}.md").write_text("\n".join(md))


if __name__ == "__main__":
    main()
