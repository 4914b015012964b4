"""Assemble the report dict from every stage's outputs."""
from __future__ import annotations

import math

from costmodels.explain import compare

from ..candidates import Candidate


def _r(v, nd=4):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(float(v), nd)


def make_report(*, name, lg, plan, meas, problem, assignment, greedy, spec, ctx, prepared, transforms,
                max_rel_err, times, stage_seconds, records) -> dict:
    names = list(lg.layers)
    layers = []
    for i, lname in enumerate(names):
        layer = lg.layers[lname]
        if lname not in plan.options:
            continue
        opts = plan.options[lname]
        chosen = opts[assignment.choice[i]]
        g_chosen = opts[greedy.choice[i]]
        row = {"name": lname, "kind": layer.kind, "op": layer.op, "onnx_name": layer.onnx_name,
               "out_shape": list(layer.out_shape) if layer.out_shape else None,
               "chosen": chosen[0], "greedy": g_chosen[0],
               "cost_ms": _r(problem.nodes[i].choices[assignment.choice[i]].cost)}
        if layer.kind == "conv":
            c: Candidate = chosen[3]
            row.update(workload=layer.conv.key, shape=layer.conv.describe(), epilogue=layer.conv.epilogue,
                       gflop=_r(layer.conv.flops / 1e9, 5), family=c.family, params=dict(c.params),
                       in_layout=c.in_layout, out_layout=c.out_layout, weight_layout=c.weight_layout,
                       weight_bytes=c.weight_bytes, workspace_bytes=c.workspace_bytes, sparsity=_r(layer.sparsity),
                       rel_err=_chosen_err(meas, layer.conv.key, c.key))
            cands = []
            for cname, wl, ckey, obj in opts:
                m = meas.get((wl, ckey))
                cands.append({"key": ckey, "family": obj.family, "in_layout": obj.in_layout,
                              "out_layout": obj.out_layout, "cold_ms": _r(m.cold_ms) if m else None,
                              "warm_ms": _r(m.warm_ms) if m else None, "error": m.error if m else "not measured",
                              "rel_err": m.rel_err if m else None})
            row["candidates"] = cands
            fam_best = {}
            for cd in cands:
                if cd["cold_ms"] is not None:
                    f = cd["family"]
                    fam_best[f] = min(fam_best.get(f, math.inf), cd["cold_ms"])
            row["best_by_family_ms"] = fam_best
            ok = [cd for cd in cands if cd["cold_ms"] is not None]
            row["fastest_alone"] = min(ok, key=lambda cd: cd["cold_ms"])["key"] if ok else None
        else:
            row["layout"] = chosen[0]
        layers.append(row)
    ort = times.get("onnxruntime")
    gs = times.get("graphselect")
    return {
        "schema_version": 1,
        "model": name,
        "input": {"name": prepared.input_name, "shape": list(prepared.input_shape)},
        "prepare_notes": list(prepared.notes),
        "folded_batchnorm": prepared.folded_bn,
        "target": spec.key, "cpu": ctx.cpu, "threads": spec.threads, "tvm_version": ctx.tvm.split(" ")[0], "tvm_runtime": ctx.tvm,
        "solver": {"method": assignment.method, "optimal": assignment.optimal, "seconds": _r(assignment.seconds, 3),
                   "gap": _r(assignment.gap, 6), "predicted_ms": _r(assignment.cost)},
        "greedy": {"predicted_ms": _r(greedy.cost)},
        # which layers the selection changed against warm-cache greedy, and why
        "versus_greedy": _rounded(compare(problem, assignment.choice, greedy.choice).as_dict()),
        "predicted_e2e_ms": _r(assignment.cost),
        "cache": {"budget_bytes": problem.cache_bytes, "activation_bytes": problem.activation_bytes,
                  "footprint_bytes": problem.footprint(assignment.choice),
                  "resident": problem.resident(assignment.choice),
                  "warm_share": problem.warm_share(assignment.choice),
                  "partial_steps": [list(st) for st in problem.partial]},
        "predicted_transform_ms": _r(problem.transform_cost(assignment.choice)),
        "measured_e2e_ms": _r(gs),
        "onnxruntime_ms": _r(ort),
        "ratio_to_onnxruntime": _r(gs / ort) if gs and ort else None,
        "layout_transforms": transforms,
        "max_rel_err": max_rel_err,
        "conv_layers": sum(1 for r in layers if r["kind"] == "conv"),
        "families_chosen": _count(r["family"] for r in layers if r["kind"] == "conv"),
        "records": records,
        "stage_seconds": stage_seconds,
        "layers": layers,
    }


def _rounded(d):
    if isinstance(d, dict):
        return {k: _rounded(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_rounded(v) for v in d]
    return _r(d) if isinstance(d, float) else d


def _chosen_err(meas, workload, key):
    m = meas.get((workload, key))
    return m.rel_err if m is not None else None


def _count(it) -> dict:
    out: dict = {}
    for x in it:
        out[x] = out.get(x, 0) + 1
    return out
