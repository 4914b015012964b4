"""Every conv layer of a model, alone: graphselect's best candidate of each family (weights cold
and warm) beside onnxruntime running the same conv, with the same epilogue (bias, residual add,
clamp, activation), on the same shape and thread count.

Usage: python bench/layers_vs_ort.py [resnet18 mobilenet_v2 ...] [--threads 2] [--runs 200]

Two kinds of figures: graphselect's records (``optimize`` measures what the store lacks:
time_evaluator rounds, cold = every argument but the input flushed, warm = not flushed), and a
same-run comparison: each family's best kernel (by its warm record) compiled again and timed
against onnxruntime running a one-layer model of the same conv and epilogue, in interleaved
rounds of 10-call blocks (``measure.e2e.compare``: order reversed every other round, a pause at
every runtime switch, weights warm, ``--runs`` calls each); the ratio is the median over rounds
of the ratio within the round. Both sides are called from Python (onnxruntime's ``run`` costs a
few microseconds more per call than a compiled function's). Each distinct workload is listed
once, with the layers that share it. Writes bench/results/layers-vs-ort-MODEL-STAMP.{md,json}
with the CPU's name.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from results_io import save  # noqa: E402


def conv_model(layer):
    """A one-layer ONNX model of ``layer`` (a graphselect conv Layer) with its epilogue."""
    from onnx import TensorProto, helper, numpy_helper
    s = layer.conv
    inits = [numpy_helper.from_array(layer.weight.astype("float32"), "w")]
    ins = ["x", "w"]
    if s.bias:
        inits.append(numpy_helper.from_array(layer.bias.astype("float32"), "b"))
        ins.append("b")
    pads = [s.padding[0], s.padding[1], s.padding[2], s.padding[3]]
    nodes = [helper.make_node("Conv", ins, ["c"], kernel_shape=list(s.kernel), strides=list(s.stride), pads=pads,
                              group=s.groups, dilations=list(s.dilation))]
    cur = "c"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(s.in_shape))]
    if s.residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, list(s.out_shape)))
        nodes.append(helper.make_node("Add", [cur, "r"], ["a"]))
        cur = "a"
    if s.clip_lo is not None or s.clip_hi is not None:
        if s.clip_lo == 0 and s.clip_hi is None:
            nodes.append(helper.make_node("Relu", [cur], ["k"]))
        else:
            lo = numpy_helper.from_array(np.array(-np.inf if s.clip_lo is None else s.clip_lo, np.float32), "lo")
            hi = numpy_helper.from_array(np.array(np.inf if s.clip_hi is None else s.clip_hi, np.float32), "hi")
            inits += [lo, hi]
            nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["k"]))
        cur = "k"
    if s.act == "sigmoid":
        nodes.append(helper.make_node("Sigmoid", [cur], ["g"]))
        cur = "g"
    elif s.act == "silu":
        nodes += [helper.make_node("Sigmoid", [cur], ["sg"]), helper.make_node("Mul", [cur, "sg"], ["g"])]
        cur = "g"
    elif s.act == "hardswish":
        nodes.append(helper.make_node("HardSwish", [cur], ["g"]))
        cur = "g"
    g = helper.make_graph(nodes, "layer", inputs, [helper.make_tensor_value_info(cur, TensorProto.FLOAT,
                                                                                 list(s.out_shape))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def ort_fn(model, spec, threads: int):
    from graphselect.measure.e2e import ort_runner, ort_session
    sess = ort_session(model.SerializeToString(), threads)
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal(spec.in_shape).astype("float32")}
    if spec.residual:
        feed["r"] = rng.standard_normal(spec.out_shape).astype("float32")
    return ort_runner(sess, feed)


def ort_floor(threads: int, runs: int) -> float:
    """onnxruntime's own cost of one ``run`` call: an Identity on one float, timed like the layers."""
    from onnx import TensorProto, helper
    from graphselect.measure.e2e import compare, ort_runner, ort_session
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "floor",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    fn = ort_runner(ort_session(m.SerializeToString(), threads), {"x": np.zeros(1, np.float32)})
    return compare({"floor": fn}, runs=runs, block=10, pause=0.0).median("floor")


def kernel_fn(cand, spec, target):
    """The candidate's kernel compiled alone, as a zero-argument callable on random arguments."""
    import tvm
    from graphselect.candidates import family
    from graphselect.measure.builder import compile_func
    from graphselect.measure.jobs import arg_arrays
    f = family(cand).build(cand, spec, target, "main")
    lib = compile_func(f, target)
    args = [tvm.runtime.tensor(x, tvm.cpu()) for x in arg_arrays(f, np.random.default_rng(0))]
    main = lib["main"]
    fn = lambda: main(*args)  # noqa: E731
    fn.runtime = "tvm"
    return fn


def best(meas, opts, family, attr):
    vals = [(getattr(meas[o.kernel], attr), o.name) for o in opts
            if o.family == family and o.kernel in meas and meas[o.kernel].ok]
    return min(vals) if vals else (math.inf, None)


DENSE = ("direct", "nchwc")      # the families that do every FLOP of the convolution


def machine_peak(threads: int) -> float:
    from graphselect.measure.peak import measure_peak_gflops
    from graphselect.target import parse_target
    return measure_peak_gflops(parse_target("llvm", threads=threads).tvm_target(), threads)


def throughput(row: dict, peak: float) -> dict:
    """GFLOP/s (same run) of the best dense kernel and its share of ``peak``, and Winograd's
    effective GFLOP/s (the direct convolution's FLOPs over its time) over the best dense one."""
    fams = row["families"]
    dense = [fams[f]["same_run_ms"] for f in DENSE if f in fams]
    out = {}
    if dense:
        out["dense_gflops"] = row["gflop"] / min(dense) * 1e3
        out["dense_of_peak"] = out["dense_gflops"] / peak
    if "winograd" in fams and dense:
        out["winograd_over_dense"] = min(dense) / fams["winograd"]["same_run_ms"]
    return out


def peak_table(results: list[dict], peak: float) -> str:
    lines = [f"FMA peak {peak:.0f} GFLOP/s ({results[0]['cpu'] if results else '?'}, graphselect.measure.peak)", "",
             "| model | layer(s) | shape | GFLOP | best dense GFLOP/s (of peak) | Winograd effective / best dense |",
             "|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            t = throughput(r, peak)
            if "dense_gflops" not in t:
                continue
            w = t.get("winograd_over_dense")
            lines.append(f"| {res['model']} | {', '.join(r['layers'])} | {r['shape']} | {r['gflop']:.3f} | "
                         f"{t['dense_gflops']:.0f} ({100 * t['dense_of_peak']:.0f}%) | "
                         + (f"{w:.2f}x" if w else "—") + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["resnet18"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--peak", nargs="+", metavar="JSON", default=None,
                    help="only the throughput table of earlier result files, against this machine's FMA peak")
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    if a.peak:
        print(peak_table([json.loads(Path(f).read_text()) for f in a.peak], machine_peak(a.threads)))
        return
    import graphselect
    import models
    from graphselect.candidates import FAMILIES
    from graphselect.measure.e2e import compare
    from graphselect.target import cpu_model

    floor = ort_floor(a.threads, a.runs)
    peak = machine_peak(a.threads)
    for name in a.models:
        res = graphselect.optimize(models.build(name), threads=a.threads, benchmark_runs=0, verify=False, name=name)
        lg, plan, meas = res.extra["lg"], res.extra["plan"], res.extra["measurements"]
        rows, by_key = [], {}
        for layer in lg.convs:
            s = layer.conv
            if s.key in by_key:
                by_key[s.key]["layers"].append(layer.name)
                continue
            opts = plan.table(layer.name).options
            row = {"layers": [layer.name], "shape": s.describe(), "epilogue": s.epilogue, "gflop": s.flops / 1e9,
                   "families": {}}
            impls = dict(zip((o.name for o in opts), plan.impls[layer.name]))
            fns = {}
            for fam in FAMILIES:
                (w, wk), (c, _ck) = best(meas, opts, fam, "warm_ms"), best(meas, opts, fam, "cold_ms")
                if wk is not None:
                    row["families"][fam] = {"warm_ms": w, "cold_ms": c, "best": wk}
                    fns[fam] = kernel_fn(impls[wk], s, res.target)
            fns["onnxruntime"] = ort_fn(conv_model(layer), s, a.threads)
            rounds = compare(fns, runs=a.runs, block=10, pause=0.5)
            for fam in row["families"]:
                row["families"][fam]["same_run_ms"] = rounds.median(fam)
                row["families"][fam]["over_ort"] = rounds.ratio(fam, "onnxruntime")
            row["ort_ms"] = rounds.median("onnxruntime")
            fam_best = min(row["families"], key=lambda f: row["families"][f]["same_run_ms"])
            row["best_family"] = fam_best
            row["best_warm_ms"] = row["families"][fam_best]["same_run_ms"]
            row["best_over_ort_with_call"] = row["families"][fam_best]["over_ort"]
            row["ort_floor_ms"] = floor
            row["best_over_ort"] = row["best_warm_ms"] / max(row["ort_ms"] - floor, 1e-6)
            print(f"{layer.name:8s} {s.describe():28s} best {fam_best} {row['best_warm_ms']:.3f} ms, "
                  f"onnxruntime {row['ort_ms']:.3f} ms: {row['best_over_ort']:.2f}x less its floor", file=sys.stderr,
                  flush=True)
            by_key[s.key] = row
            rows.append(row)
        fams = [f for f in FAMILIES if any(f in r["families"] for r in rows)]
        head = ["layer(s)", "shape", "epilogue"] + [f"{f}: record cold / warm, same run" for f in fams] + \
            ["onnxruntime, same run", "best / (ORT - floor)", "best / ORT"]
        lines = [f"{name}, {cpu_model()}, {a.threads} threads; ms (records: time_evaluator; same run: "
                 f"interleaved 10-call blocks against onnxruntime, {a.runs} calls each). onnxruntime's own cost "
                 f"per run call (an Identity on one float): {floor * 1e3:.1f} us, inside every onnxruntime figure; "
                 f"'best / ORT' compares with the onnxruntime time less that floor.", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        fmt = lambda v: "—" if not math.isfinite(v) else f"{v:.3f}"  # noqa: E731
        for r in rows:
            cells = [", ".join(r["layers"]), r["shape"], r["epilogue"]]
            for f in fams:
                v = r["families"].get(f)
                cells.append(f"{fmt(v['cold_ms'])} / {fmt(v['warm_ms'])}, {fmt(v['same_run_ms'])}" if v else "—")
            ratio = r["best_over_ort"]
            cells += [fmt(r["ort_ms"]), (f"**{ratio:.2f}**" if ratio > 1 else f"{ratio:.2f}"),
                      f"{r['best_over_ort_with_call']:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
        tot_best = sum(r["best_warm_ms"] * len(r["layers"]) for r in rows)
        tot_ort = sum((r["ort_ms"] - floor) * len(r["layers"]) for r in rows)
        slower = [r for r in rows if r["best_over_ort"] > 1]
        lines += ["", f"all {sum(len(r['layers']) for r in rows)} conv layers: best (same run) {tot_best:.3f} ms, "
                      f"onnxruntime less its call floor {tot_ort:.3f} ms ({tot_best / tot_ort:.2f}x); {len(slower)} of {len(rows)} "
                      f"workloads slower than onnxruntime (bold)"]
        result = {"model": name, "cpu": cpu_model(), "threads": a.threads, "rows": rows, "peak_gflops": peak}
        for r in rows:
            r.update(throughput(r, peak))
        save(f"layers-vs-ort-{name}", "\n".join(lines) + "\n\n" + peak_table([result], peak), result)

if __name__ == "__main__":
    main()
