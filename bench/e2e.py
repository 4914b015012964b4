"""End-to-end latency, one process, same input and thread count for every peer:

  tvm-default   TVM's own Relax pipeline (from_onnx -> tvm.compile, no scheduling)
  uniform       every conv in the best single NCHW[b]c blocking (b picked by predicted time)
  greedy        per-layer fastest candidate, layouts fixed up locally
  graphselect   the CP-SAT whole-graph selection
  onnxruntime   CPU execution provider

Usage: python bench/e2e.py MODEL [MODEL...] [--runs 30] [--threads 2] [--default-runs 30]
                           [--image-size N] [--sparsity 0.7] [--skip-default]
       python bench/e2e.py --summarize bench/results/e2e-*.json   (one table of earlier runs)

Each peer runs short blocks of calls (warm-up first) in interleaved rounds (graphselect.measure.e2e).
Times are medians over all calls; ratios (to onnxruntime, greedy / graphselect) are medians over
rounds of the ratio within the round, so a slow spell of the machine between rounds does not move
them. Results: printed, and saved under bench/results/.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def uniform_choice(problem, lg, plan, block: int):
    """Choice indices with every conv in NCHW{block}c (best register tile per layer)."""
    want = f"NCHW{block}c"
    choice = []
    for i, (name, layer) in enumerate(lg.layers.items()):
        node = problem.nodes[i]
        if name not in plan.impls:
            choice.append(0)
            continue
        opts = plan.table(name).options
        if layer.kind == "conv":
            ok = [k for k, o in enumerate(opts) if o.family == "nchwc" and o.out_layout == want
                  and (o.in_layouts[0] == want or layer.conv.in_channels % block)]
            ok = ok or list(range(len(opts)))
            choice.append(min(ok, key=lambda k: node.choices[k].cost))
        else:
            choice.append(next((k for k, o in enumerate(opts) if o.name == want), 0))
    return tuple(choice)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--summarize", nargs="+", metavar="JSON", default=None,
                    help="print one table (and the median prediction errors) of earlier result files")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--default-runs", type=int, default=30, help="runs for TVM's unscheduled default pipeline")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--skip-default", action="store_true")
    ap.add_argument("--sparsity", type=float, default=None,
                    help="zoo models: magnitude-prune every conv to this sparsity first")
    a = ap.parse_args()
    if a.summarize:
        print(_table([_with_quiet(r) for f in a.summarize for r in json.loads(Path(f).read_text())]))
        return
    if not a.models:
        ap.error("name at least one model (or --summarize result files)")
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    import graphselect
    import models
    from graphselect.measure import plan as plan_mod
    from graphselect.measure.e2e import compare, median, ort_runner, ort_session, time_calls, vm_runner
    from graphselect.rewrite.apply import apply
    from graphselect.codegen.lower import build

    rows = []
    for name in a.models:
        t0 = time.perf_counter()
        if name in models.ZOO:
            m = models.build(name, image_size=a.image_size, sparsity=a.sparsity)
            if a.sparsity:
                name = f"{name} ({a.sparsity:.0%} pruned)"
        else:
            m = __import__("onnx").load(name)
        # as a user runs it: the solver's assignment and its alternatives are built and timed
        # end to end inside optimize, and the fastest is kept
        res = graphselect.optimize(m, threads=a.threads, benchmark_runs=max(10, a.runs // 2), name=name)
        t_opt = time.perf_counter() - t0
        ex = res.extra
        lg, plan, problem = ex["lg"], ex["plan"], ex["problem"]
        target = res.target
        x = np.random.default_rng(0).standard_normal(res.input_shape).astype("float32")
        sess = ort_session(m.SerializeToString(), a.threads)

        def build_choice(choice):
            return build(apply(lg, plan_mod.selection_from(lg, plan, choice), target), target)

        kept = next(x for x in res.report["alternatives"] if x["chosen"])
        unis = {b: uniform_choice(problem, lg, plan, b) for b in (16, 32)}
        ub = min(unis, key=lambda b: problem.evaluate(unis[b]))
        peers = {"uniform": build_choice(unis[ub]), "greedy": build_choice(ex["greedy"].choice),
                 "graphselect": res.build()}
        fns = {k: vm_runner(v, x) for k, v in peers.items()}
        fns["onnxruntime"] = ort_runner(sess, res.input_name, x)
        ts = compare(fns, runs=a.runs)
        t = {k: ts.median(k) for k in fns}
        ratio = {k: ts.ratio(k, "onnxruntime") for k in fns}
        if not a.skip_default:
            dmod = from_onnx(m, shape_dict={res.input_name: list(res.input_shape)})
            dex = tvm.compile(dmod, target=target)
            t["tvm-default"] = median(time_calls(vm_runner(dex, x), a.default_runs, warmup=1))
            ratio["tvm-default"] = t["tvm-default"] / t["onnxruntime"]     # not interleaved
        row = {"model": name, "input": list(res.input_shape), "threads": a.threads, "runs": a.runs,
               "uniform_block": ub, "optimize_s": round(t_opt, 1),
               "predicted_ms": {"uniform": problem.evaluate(unis[ub]), "greedy": ex["greedy"].cost,
                                "graphselect": kept["predicted_ms"]},
               "ms": t, "ratio_to_ort": ratio, "greedy_over_graphselect": ts.ratio("greedy", "graphselect"),
               "round_medians_ms": {k: [round(median(b), 4) for b in ts.ms[k]] for k in fns},
               "max_rel_err": res.report["max_rel_err"],
               "optimize_alternatives": res.report.get("alternatives"),
               "kept": kept["label"],
               "footprint_mib": {"greedy": problem.footprint(ex["greedy"].choice) / 2**20,
                                 "graphselect": res.report["cache"]["footprint_bytes"] / 2**20}}
        row = _with_quiet(row)
        rows.append(row)
        print(_line(row), flush=True)

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"e2e-{stamp}.json").write_text(json.dumps(rows, indent=1))
    md = _table(rows)
    (out / f"e2e-{stamp}.md").write_text(md)
    print()
    print(md)


PEERS = ("tvm-default", "uniform", "greedy", "graphselect", "onnxruntime")


def _line(r):
    return f"{r['model']}: " + "  ".join(f"{k} {r['ms'][k]:.3f} ms ({r['ratio_to_ort'][k]:.2f}x)"
                                          for k in PEERS if k in r["ms"]) + f"  [kept: {r.get('kept')}]"


def _table(rows):
    head = ("| model | " + " | ".join(f"{p} ms (x ORT)" for p in PEERS) +
            " | greedy / graphselect | graphselect predicted ms (error; vs quiet rounds)"
            " | footprint MiB greedy / graphselect"
            " | max rel err |")
    sep = "|" + "---|" * (len(PEERS) + 5)
    err = _errors(rows)
    lines = [head, sep]
    for r in rows:
        cells = []
        for p in PEERS:
            v = r["ms"].get(p)
            cells.append("—" if v is None or not math.isfinite(v) else f"{v:.3f} ({r['ratio_to_ort'][p]:.3f})")
        gs = r["ms"].get("graphselect")
        fp = r.get("footprint_mib", {})
        inp = r.get("input") or []
        size = f" {inp[2]}x{inp[3]}" if len(inp) == 4 else ""
        # older result files: the ratio of medians (rounds were not compared one by one then)
        g_gs = r.get("greedy_over_graphselect") or r["ms"]["greedy"] / gs
        lines.append(f"| {r['model']}{size} | " + " | ".join(cells) +
                     f" | {g_gs:.3f}x | {r['predicted_ms']['graphselect']:.3f} "
                     f"({100 * (r['predicted_ms']['graphselect'] - gs) / gs:+.0f}%; "
                     f"{_signed(r, 'graphselect_quiet_ms')}) | "
                     f"{fp.get('greedy', float('nan')):.1f} / {fp.get('graphselect', float('nan')):.1f} | "
                     f"{r['max_rel_err']:.1e} |")
    if err["median"]:
        lines += ["", f"Median absolute prediction error over {len(rows)} model(s): "
                      f"{100 * float(np.median(err['median'])):.1f}% against the median of all calls"
                      + (f"; {100 * float(np.median(err['quiet'])):.1f}% against the quiet rounds (lower "
                         f"quartile of the round medians, {len(err['quiet'])} model(s) with round data)"
                         if err["quiet"] else "")]
    return "\n".join(lines) + "\n"


def _with_quiet(r):
    rm = (r.get("round_medians_ms") or {}).get("graphselect")
    if rm and not r.get("graphselect_quiet_ms"):
        r = dict(r, graphselect_quiet_ms=float(np.percentile(rm, 25)))
    return r


def _signed(r, key):
    v = r.get(key)
    return "—" if not v else f"{100 * (r['predicted_ms']['graphselect'] - v) / v:+.0f}%"


def _errors(rows):
    """Absolute relative prediction errors of graphselect's kept assignment, against the median of
    all calls and against the quiet rounds (older result files lack the latter)."""
    p = [r["predicted_ms"]["graphselect"] for r in rows]
    return {"median": [abs(a - r["ms"]["graphselect"]) / r["ms"]["graphselect"] for a, r in zip(p, rows)],
            "quiet": [abs(a - r["graphselect_quiet_ms"]) / r["graphselect_quiet_ms"]
                      for a, r in zip(p, rows) if r.get("graphselect_quiet_ms")]}


if __name__ == "__main__":
    main()
