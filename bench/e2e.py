"""End-to-end latency and prediction, one process, same input and thread count for every peer:

  tvm-default   TVM's own Relax pipeline (from_onnx -> tvm.compile, no scheduling), with --tvm-default
  uniform       every conv in the best single NCHW[b]c blocking (b picked by predicted time)
  greedy        per-layer fastest candidate with warm weights, layouts fixed up locally
  graphselect   what ``graphselect.optimize`` returns (the closed loop's final assignment), in
                --precision fp32 (default), bf16 or auto
  graphselect-fp32  with --precision bf16|auto: the same model optimized in fp32, as a peer;
                with --qdq: the float model (before quantization) optimized in fp32
  onnxruntime   CPU execution provider (on a --qdq model: its int8 kernels)
  onnxruntime-fp32  with --qdq: onnxruntime on the float model
  openvino      OpenVINO's CPU plugin in f32, with --openvino (where it is installed)
  openvino-default  the same with no precision hint: what OpenVINO picks for this CPU (bf16 where
                it has AMX or AVX512-BF16; the row says which)
  deepsparse    DeepSparse 1.8 in its own environment (a worker process), with --deepsparse

Usage: python bench/e2e.py MODEL [MODEL...] [--runs 60] [--threads 2] [--batch 1] [--image-size N]
                           [--sparsity 0.7 [--block 4]] [--tvm-default] [--openvino] [--deepsparse] [--tag TEXT]
                           [--precision fp32|bf16|auto [--tolerance 0.02]] [--qdq]
       python bench/e2e.py --summarize bench/results/e2e-*.json   (one table of earlier runs)

Each model is optimized as a user runs it (default record store, so calibration from earlier
models on this machine is reused), then the TVM peers are timed against each other in short
blocks of calls in interleaved rounds (graphselect.measure.e2e; one runtime, so no pauses, at
least 3 s), and graphselect against onnxruntime in rounds with a 1 s pause at every runtime
switch. Times are medians over all calls and over the quiet rounds (lower quartile of the round
medians); ratios are medians over rounds of the ratio within the round (to onnxruntime: the
peer's ratio to graphselect times graphselect's to onnxruntime), so a slow spell of the machine
between rounds does not move them. Per model the row also records what optimize itself saw: its calibrated
prediction, its end-to-end check (median and quiet rounds), and how the returned assignment
compares, round by round, with the fastest assignment optimize built and timed. Each round of
the graphselect / onnxruntime comparison begins with a reading of the thread pool's hand-off
(``measure.peak.HandoffProbe``, the host's state: on a 2-vCPU Zen 5 VM it moved ShuffleNetV2 2x),
and the ratio is also given over the rounds of low and of high hand-off (split at 1.5x the run's
lowest reading; a run spent in one state has only "low" rounds, and the readings' range says
which state that was). Results:
printed, and saved under bench/results/ with the CPU's name.
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
sys.path.insert(0, str(HERE))

from peers import deepsparse_runner, openvino_runner  # noqa: E402


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


def cpu_name() -> str:
    from results_io import cpu_line
    return cpu_line()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--summarize", nargs="+", metavar="JSON", default=None,
                    help="print one table (and the median prediction errors) of earlier result files")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--tvm-default", action="store_true", help="also time TVM's unscheduled default pipeline")
    ap.add_argument("--openvino", action="store_true",
                    help="also time OpenVINO's CPU plugin (latency hint, f32, same threads), where it is installed")
    ap.add_argument("--deepsparse", action="store_true",
                    help="also time DeepSparse (its own environment: bash bench/peers/setup_deepsparse.sh)")
    ap.add_argument("--deepsparse-python", default=None, help="the interpreter of DeepSparse's environment")
    ap.add_argument("--default-runs", type=int, default=10)
    ap.add_argument("--sparsity", type=float, default=None,
                    help="zoo models: magnitude-prune every conv to this sparsity first")
    ap.add_argument("--block", type=int, default=1,
                    help="with --sparsity: prune in blocks of this many output channels (BSR)")
    ap.add_argument("--tag", default="", help="appended to the result file names")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"],
                    help="what graphselect may compute in (bf16/auto: the fp32 optimization is timed beside it)")
    ap.add_argument("--tolerance", type=float, default=None, help="--precision auto's accuracy budget")
    ap.add_argument("--qdq", action="store_true", help="quantize each zoo model to int8 QDQ first (onnxruntime's "
                    "static quantizer): every peer runs the QDQ model, graphselect-fp32 and onnxruntime-fp32 the float one")
    a = ap.parse_args()
    if a.summarize:
        print(_table([r for f in a.summarize for r in json.loads(Path(f).read_text())]))
        return
    if not a.models:
        ap.error("name at least one model (or --summarize result files)")
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    import graphselect
    import models
    from graphselect.stages import build, settings
    from graphselect.measure.e2e import compare, median, ort_runner, ort_session, time_calls, vm_runner

    rows = []
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    handoff = None          # the host's state per round of the graphselect / onnxruntime comparison
    for name in a.models:
        t0 = time.perf_counter()
        if name in models.ZOO:
            m = models.build(name, batch=a.batch, image_size=a.image_size, sparsity=a.sparsity, block=a.block)
            label = name + (f" ({a.sparsity:.0%} pruned" + (f", {a.block}-blocks)" if a.block > 1 else ")")
                            if a.sparsity else "") + \
                (f" batch {a.batch}" if a.batch != 1 else "")
        else:
            m = __import__("onnx").load(name)
            label = Path(name).stem
        m_float = None
        if a.qdq:
            m_float, m = m, models.quantize_qdq(m)
            label += " QDQ int8"
            t0 = time.perf_counter()          # optimize's time, not the quantizer's
        res = graphselect.optimize(m, threads=a.threads, name=label, precision=a.precision, tolerance=a.tolerance)
        t_opt = time.perf_counter() - t0
        fp32 = graphselect.optimize(m_float if m_float is not None else m, threads=a.threads,
                                    name=label.replace(" QDQ int8", "")) \
            if a.precision != "fp32" or m_float is not None else None
        rep, ex = res.report, res.extra
        sel, lg, plan = ex["selection"], ex["lg"], ex["plan"]
        iso, prob = sel.isolated, sel.problem
        x = np.random.default_rng(0).standard_normal(res.input_shape).astype("float32")
        sess = ort_session(m.SerializeToString(), a.threads)
        unis = {b: uniform_choice(iso, lg, plan, b) for b in (16, 32)}
        ub = min(unis, key=lambda b: iso.evaluate(unis[b]))
        s = settings.settings(threads=a.threads, benchmark_runs=0)
        if handoff is None:
            from graphselect.measure.peak import HandoffProbe
            handoff = HandoffProbe(s.target, a.threads)
        imported, measured = ex["imported"], ex["measured"]
        greedy = next((b for b in sel.built if b.choice == tuple(sel.greedy.choice)), None) or \
            build.build(imported, measured, "greedy", sel.greedy, s)
        uniform = build.build(imported, measured, "uniform", type(sel.greedy)(unis[ub], 0.0, "uniform", False), s)
        peers = {"uniform": uniform.executable, "greedy": greedy.executable, "graphselect": res.build()}
        if fp32 is not None:
            peers["graphselect-fp32"] = fp32.build()
        fns = {k: vm_runner(v, x) for k, v in peers.items()}
        # the TVM peers against each other (one runtime: no pauses between blocks), then
        # graphselect against onnxruntime (a pause at every switch, so neither runtime's
        # spinning threads slow the other's calls)
        ts = compare(fns, runs=a.runs, seconds=3.0)
        vs = compare({"graphselect": fns["graphselect"], "onnxruntime": ort_runner(sess, {res.input_name: x})},
                     runs=a.runs, state=handoff)
        t = {k: ts.median(k) for k in fns} | {"onnxruntime": vs.median("onnxruntime")}
        quiet = {k: _quiet(ts.ms[k]) for k in fns} | {"onnxruntime": _quiet(vs.ms["onnxruntime"])}
        to_ort = vs.ratio("graphselect", "onnxruntime")
        # the host's state per round (the thread pool's hand-off): the ratio in each state, split
        # at 1.5x the lowest reading of the run (on the Zen 5 VM: 0.56 against 1.87 us)
        # (relative to this run: a run spent in one state has all its rounds "low"; the range says which)
        cut = 1.5 * min(vs.state)
        low, high = vs.by_state(cut)
        by_state = {"cut_us": round(cut, 3), "rounds": [len(low), len(high)],
                    "handoff_us": [round(min(vs.state), 3), round(max(vs.state), 3)],
                    "low": vs.ratio("graphselect", "onnxruntime", low) if low else None,
                    "high": vs.ratio("graphselect", "onnxruntime", high) if high else None}
        ratio = {k: ts.ratio(k, "graphselect") * to_ort for k in fns} | {"onnxruntime": 1.0}

        def versus(peer: str, fn):
            """``fn`` against graphselect in rounds of their own; its ratio to onnxruntime through
            graphselect's."""
            r = compare({"graphselect": fns["graphselect"], peer: fn}, runs=a.runs)
            t[peer], quiet[peer] = r.median(peer), _quiet(r.ms[peer])
            ratio[peer] = r.ratio(peer, "graphselect") * to_ort

        peer_err, peer_precision = {}, {}
        # what a user calls: OptimizeResult.run (numpy in, every output copied out), against
        # graphselect's bare call; onnxruntime's run converts and copies likewise
        user = lambda: res.run(x)      # noqa: E731
        user.runtime = "tvm"
        versus("graphselect-user", user)
        if m_float is not None:
            versus("onnxruntime-fp32", ort_runner(ort_session(m_float.SerializeToString(), a.threads),
                                                  {res.input_name: x}))
        if a.openvino:
            for peer, prec in (("openvino", "f32"), ("openvino-default", None)):
                ov = openvino_runner(m, x, a.threads, prec)
                if ov is not None:
                    ref = sess.run(None, {res.input_name: x})
                    peer_err[peer] = max(float(np.max(np.abs(o - r)) / (np.max(np.abs(r)) + 1e-12))
                                         for o, r in zip(ov.outputs(), ref))
                    peer_precision[peer] = ov.precision
                    versus(peer, ov)
        if a.deepsparse:
            ds = deepsparse_runner(m, x, a.threads, a.deepsparse_python)
            if ds is not None:
                ref = sess.run(None, {res.input_name: x})
                peer_err["deepsparse"] = max(float(np.max(np.abs(o - r)) / (np.max(np.abs(r)) + 1e-12))
                                             for o, r in zip(ds.outputs(), ref))
                versus("deepsparse", ds)
                ds.close()
        if a.tvm_default:
            dmod = from_onnx(m, shape_dict={res.input_name: list(res.input_shape)})
            dex = tvm.compile(dmod, target=res.target)
            t["tvm-default"] = median(time_calls(vm_runner(dex, x), a.default_runs, warmup=1))
            ratio["tvm-default"] = t["tvm-default"] / t["onnxruntime"]     # not interleaved
        alts = rep["alternatives"]
        chosen = next(x for x in alts if x["chosen"])
        fastest = min(alts, key=lambda x: x["relative_to_chosen"] if x["relative_to_chosen"] is not None else 9)
        row = {"model": label, "input": list(res.input_shape), "threads": a.threads, "runs": a.runs,
               "cpu": cpu_name(), "uniform_block": ub, "optimize_s": round(t_opt, 1),
               "stage_seconds": rep["stage_seconds"], "records": {k: rep["records"][k] for k in ("jobs", "reused")},
               "rounds": len(rep["loop"]["rounds"]), "converged": rep["loop"]["converged"],
               "calibration": rep["calibration"],
               # the prediction made before the returned network was built (out of sample unless
               # basis is "timed before"), and round 0's first one against its first time in place
               "prediction": rep.get("prediction"), "first_prediction": rep.get("first_prediction"),
               "chosen_by": rep.get("chosen_by"),
               "predicted_ms": {"graphselect": rep["predicted_e2e_ms"],
                                "graphselect_isolated": rep["isolated_predicted_e2e_ms"],
                                "greedy": prob.evaluate(sel.greedy.choice), "uniform": prob.evaluate(unis[ub])},
               "optimize_check_ms": {"median": rep["measured_e2e_ms"], "quiet": rep["measured_quiet_ms"]},
               "check_handoff_us": rep.get("check_handoff_us"), "ratio_to_ort_by_state": by_state,
               # how the returned assignment compares with the fastest optimize built (> 1: slower)
               "returned_over_fastest": round(1.0 / fastest["relative_to_chosen"], 4)
               if fastest["relative_to_chosen"] else None,
               "fastest_built": fastest["label"], "returned": chosen["label"],
               "ms": t, "quiet_ms": quiet, "ratio_to_ort": ratio,
               "greedy_over_graphselect": ts.ratio("greedy", "graphselect"),
               "round_medians_ms": {k: [round(median(b), 4) for b in ts.ms[k]] for k in fns},
               "versus_ort_round_medians_ms": {k: [round(median(b), 4) for b in vs.ms[k]] for k in vs.ms},
               "max_rel_err": rep["max_rel_err"], "peer_max_rel_err": peer_err,
               "precision": rep.get("precision"), "peer_precision": peer_precision,
               "optimize_alternatives": alts,
               "loop": rep["loop"],
               "footprint_mib": {"greedy": iso.footprint(sel.greedy.choice) / 2**20,
                                 "graphselect": rep["cache"]["footprint_bytes"] / 2**20}}
        rows.append(row)
        print(_line(row), flush=True)
        _save(rows, stamp, a.tag)
    print()
    print(_table(rows))


def _save(rows, stamp, tag):
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    base = out / f"e2e-{stamp}{('-' + tag) if tag else ''}"
    base.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    base.with_suffix(".md").write_text(_table(rows))


def _quiet(blocks) -> float:
    meds = [float(np.median(b)) for b in blocks]
    return float(np.percentile(meds, 25)) if meds else float("nan")


PEERS = ("tvm-default", "uniform", "greedy", "graphselect", "graphselect-user", "graphselect-fp32", "onnxruntime",
         "onnxruntime-fp32",
         "openvino", "openvino-default", "deepsparse")


def _err(p, m):
    return (p - m) / m if p and m else float("nan")


def _line(r):
    return (f"{r['model']}: " + "  ".join(f"{k} {r['ms'][k]:.3f} ms ({r['ratio_to_ort'][k]:.2f}x)"
                                          for k in PEERS if k in r["ms"])
            + f"  [predicted before built {_before(r)}, {100 * _oos(r):+.1f}% vs quiet; "
              f"first prediction {100 * _first(r):+.1f}% in place; "
              f"returned/fastest built {r['returned_over_fastest']}; optimize {r['optimize_s']:.0f} s; "
              f"x ORT in the rounds of low / high hand-off {_by_state(r)}]")


def _by_state(r) -> str:
    """graphselect / onnxruntime in the rounds of the run's low hand-off and of its high one (over
    1.5x the lowest), the rounds of each and the readings' range."""
    b = r.get("ratio_to_ort_by_state")
    if not b:
        return "—"
    f = lambda v: f"{v:.3f}" if v is not None else "—"     # noqa: E731
    return (f"{f(b['low'])} / {f(b['high'])} ({b['rounds'][0]}/{b['rounds'][1]} rounds, "
            f"{b['handoff_us'][0]:.2f}-{b['handoff_us'][1]:.2f} us)")


def _before(r) -> str:
    p = r.get("prediction") or {}
    return f"{p['predicted_ms']:.3f} ms ({p.get('basis')})" if p.get("predicted_ms") else "-"


def _oos(r) -> float:
    """The out-of-sample error: the prediction made before the returned network was built against
    the bench's quiet rounds (nan when an earlier run had timed that network)."""
    p = r.get("prediction") or {}
    if not p.get("predicted_ms") or p.get("basis") == "timed before":
        return float("nan")
    return _err(p["predicted_ms"], r["quiet_ms"]["graphselect"])


def _first(r) -> float:
    f = r.get("first_prediction") or {}
    return f["error"] if f.get("error") is not None else float("nan")


def _precision(r) -> str:
    p = r.get("precision") or {}
    lay = p.get("layers") or {}
    low = ", ".join(f"{k} {v}" for k, v in sorted(lay.items()) if k != "fp32") or "0"
    return f"{p.get('mode', 'fp32')} ({low})" if p else "fp32"


def _table(rows):
    old = [r for r in rows if "quiet_ms" not in r]
    rows = [r for r in rows if "quiet_ms" in r]
    lines = []
    if rows:
        cpu = sorted({r.get("cpu", "?") for r in rows})
        lines += [f"CPU: {', '.join(cpu)}", "",
                  "| model | input | graphselect ms (x ORT) | user call x ORT | onnxruntime ms | greedy / graphselect | "
                  "uniform x ORT | predicted before built, ms (basis) | its error vs quiet | first prediction: error "
                  "in place | final objective: agreement vs quiet | "
                  "returned / fastest built | rounds | optimize s (measure, select) | max rel err | OpenVINO x ORT | "
                  "DeepSparse x ORT | precision (lower-precision layers) | graphselect fp32 x ORT | OpenVINO default x ORT | "
                  "ORT fp32 x ORT | x ORT, rounds of low / high hand-off (rounds, us) |",
                  "|" + "---|" * 22]
        for r in rows:
            p = r["predicted_ms"]["graphselect"]
            st = r.get("stage_seconds") or {}
            inp = "x".join(map(str, r.get("input") or []))
            lines.append(
                f"| {r['model']} | {inp} | {r['ms']['graphselect']:.3f} ({r['ratio_to_ort']['graphselect']:.3f}) | "
                + (f"{r['ratio_to_ort']['graphselect-user']:.3f} | " if "graphselect-user" in r["ratio_to_ort"] else "— | ")
                + f"{r['ms']['onnxruntime']:.3f} | {r['greedy_over_graphselect']:.3f}x | "
                f"{r['ratio_to_ort']['uniform']:.3f} | {_before(r)} | {100 * _oos(r):+.1f}% | "
                f"{100 * _first(r):+.1f}% | "
                f"{100 * _err(p, r['quiet_ms']['graphselect']):+.1f}% | {r['returned_over_fastest']} | "
                f"{r['rounds']}{'' if r['converged'] else ' (limit)'} | "
                f"{r['optimize_s']:.0f} ({st.get('measure', float('nan')):.0f}, {st.get('select', float('nan')):.0f}) | "
                f"{r['max_rel_err']:.1e} | "
                + "".join(f"{r['ratio_to_ort'][k]:.3f} | " if k in r["ratio_to_ort"] else "— | "
                          for k in ("openvino", "deepsparse"))
                + f"{_precision(r)} | "
                + (f"{r['ratio_to_ort']['graphselect-fp32']:.3f} | " if "graphselect-fp32" in r["ratio_to_ort"] else "— | ")
                + (f"{r['ratio_to_ort']['openvino-default']:.3f} ({r['peer_precision'].get('openvino-default')}) | "
                   if "openvino-default" in r["ratio_to_ort"] else "— | ")
                + (f"{r['ratio_to_ort']['onnxruntime-fp32']:.3f} | " if "onnxruntime-fp32" in r["ratio_to_ort"]
                   else "— | ")
                + f"{_by_state(r)} |")
        oos = [abs(e) for e in map(_oos, rows) if np.isfinite(e)]
        first = [abs(e) for e in map(_first, rows) if np.isfinite(e)]
        # a first prediction made on a machine some other model calibrated (its round 0 saw built
        # networks) against one made from the prior alone (a fresh store)
        seen = [abs(_first(r)) for r in rows if np.isfinite(_first(r)) and _round0_networks(r) > 0]
        fresh = [abs(_first(r)) for r in rows if np.isfinite(_first(r)) and _round0_networks(r) == 0]
        agree = [abs(_err(r["predicted_ms"]["graphselect"], r["quiet_ms"]["graphselect"])) for r in rows]
        worst = max(r["returned_over_fastest"] or 1.0 for r in rows)
        stat = lambda v: (f"median {100 * float(np.median(v)):.1f}%, max {100 * max(v):.1f}% over {len(v)}"  # noqa: E731
                          if v else "none")
        lines += ["", f"{len(rows)} model(s). Out of sample (predicted before the network was built): returned "
                      f"network against the quiet rounds {stat(oos)}; first prediction against its first time in "
                      f"place {stat(first)} (on a machine calibrated by other models {stat(seen)}, "
                      f"{sum(e <= 0.10 for e in seen)} within 10%; from the prior on a fresh store {stat(fresh)}). In sample (the final objective, fitted to the returned network's own "
                      f"run: agreement, not prediction): {stat(agree)}. Returned assignment at most {worst:.3f}x the "
                      f"fastest one optimize built."]
    if old:
        lines += ["", f"({len(old)} row(s) from result files of the earlier format not shown)"]
    return "\n".join(lines) + "\n"


def _round0_networks(r) -> int:
    """How many built networks calibrated the model's first prediction (0: the prior alone)."""
    rounds = (r.get("loop") or {}).get("rounds") or [{}]
    return int((rounds[0].get("calibration") or {}).get("networks", 0) or 0)


if __name__ == "__main__":
    main()
