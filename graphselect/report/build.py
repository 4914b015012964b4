"""Assemble the report dict from every stage's outputs."""
from __future__ import annotations

import math

import numpy as np

from costmodels.explain import compare

from ..candidates import Candidate, precision_of
from ..candidates.dwpw import BlockCandidate
from ..rewrite.apply import count_transforms

SCHEMA_VERSION = 3      # 3: prediction_error is out of sample (before the build); calibrated_agreement


def _r(v, nd=4):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(float(v), nd)


def make_report(*, imported, measured, machine, selection, checked, settings, stage_seconds, store) -> dict:
    lg, plan, meas = imported.lg, measured.plan, measured.measurements
    prob, iso = selection.problem, selection.isolated
    chosen = selection.by_label(selection.label)
    choice, gchoice = chosen.choice, tuple(selection.greedy.choice)
    innet = _innet_by_layer(imported, chosen, selection.innet.get(chosen.label))
    flagged = {(w, c): why for w, c, why in measured.flagged}
    layers = []
    for i, lname in enumerate(lg.layers):
        layer = lg.layers[lname]
        if lname not in plan.impls:
            continue
        opts, objs = plan.table(lname).options, plan.impls[lname]
        k = choice[i]
        ch_iso = iso.nodes[i].choices[k]
        row = {"name": lname, "kind": layer.kind, "op": layer.op, "onnx_name": layer.onnx_name,
               "out_shape": list(layer.out_shape) if layer.out_shape else None,
               "chosen": opts[k].name, "greedy": opts[gchoice[i]].name,
               "cost_ms": _r(prob.nodes[i].choices[k].blend(prob.warm_share(choice))),
               "isolated_cold_ms": _r(ch_iso.cost), "isolated_warm_ms": _r(ch_iso.time(True)),
               "innet_ms": _r(innet.get(lname))}
        if layer.kind == "conv":
            c: Candidate = objs[k]
            row.update(workload=layer.conv.key, shape=layer.conv.describe(), epilogue=layer.conv.epilogue,
                       gflop=_r(layer.conv.flops / 1e9, 5), family=c.family, params=dict(c.params),
                       precision=precision_of(c.family),
                       # dense-equivalent FLOP/s of the chosen kernel alone, warm (Winograd and
                       # sparse kernels count the direct convolution's FLOPs)
                       gflops_warm=_r(layer.conv.flops / 1e6 / ch_iso.time(True), 1) if ch_iso.time(True) else None,
                       in_layout=c.in_layout, out_layout=c.out_layout, weight_layout=c.weight_layout,
                       weight_bytes=c.weight_bytes, workspace_bytes=c.workspace_bytes, sparsity=_r(layer.sparsity),
                       rel_err=_err(meas, getattr(c, "workload", "") or layer.conv.key, c.key))
            if isinstance(c, BlockCandidate):
                row["block"] = {"members": list(c.members), "kernel": c.last}
            cands = []
            for opt, obj in zip(opts, objs):
                m = meas.get(opt.kernel)
                cands.append({"key": opt.name, "family": obj.family, "precision": opt.precision,
                              "in_layout": obj.in_layout,
                              "out_layout": obj.out_layout, "cold_ms": _r(m.cold_ms) if m else None,
                              "warm_ms": _r(m.warm_ms) if m else None,
                              "incold_ms": _r(m.incold_ms) if m and m.incold_ms is not None else None,
                              "error": m.error if m else "not measured",
                              "rel_err": m.rel_err if m else None, "flag": flagged.get(tuple(opt.kernel)) if opt.kernel else None})
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
            row["layout"] = opts[k].name
        layers.append(row)
    measured_ms = checked.measured_ms
    ts = checked.rounds
    gs, ort = measured_ms.get(chosen.label), measured_ms.get("onnxruntime")
    quiet = _quiet(ts, chosen.label) if ts is not None else None
    fastest = ts.fastest([b.label for b in selection.built]) if ts is not None else None
    sol = selection.solution
    acc = selection.accuracy
    alternatives = []
    for b in selection.built:
        pb = selection.before.get(b.label)
        alternatives.append({
            "label": b.label, "predicted_ms": _r(prob.evaluate(b.choice)),
            # before it was built: the prediction, and its error against the end-to-end check
            "predicted_before_ms": _r(pb.ms) if pb else None, "basis": pb.basis if pb else None,
            "prediction_error": _err_of(pb, measured_ms.get(b.label)),
            "isolated_predicted_ms": _r(iso.evaluate(b.choice)),
            "innet_e2e_ms": _r(selection.innet[b.label].e2e_ms) if b.label in selection.innet else None,
            "measured_ms": _r(measured_ms.get(b.label)), "measured_quiet_ms": _r(_quiet(ts, b.label)) if ts else None,
            "relative_to_chosen": _r(ts.ratio(b.label, chosen.label)) if ts is not None else None,
            "max_rel_err": checked.errors.get(b.label), "chosen": b.label == chosen.label,
            "estimated_rel_err": _r(iso.error(b.choice), 6),
            "bf16_layers": sum(1 for lt, k in zip(plan.layers, b.choice) if lt.options[k].precision == "bf16"),
            "fastest": b.label == fastest, "footprint_bytes": iso.footprint(b.choice)})
    rounds = [{"round": r.index, "solution": r.solution, "new": list(r.new), "calibration": _rounded(r.calibration),
               "error_budget": _r(r.error_budget, 6), "errors_vs_fp32": _rounded(r.errors),
               "handoff_us": _r(r.handoff_us, 3),
               # every network timed after the round's solve; "new" ones were predicted before they
               # were built (a prediction), the others after an earlier round had timed them (agreement)
               "networks": [{"label": lb, "predicted_ms": _r(p), "measured_ms": _r(r.measured_ms.get(lb)),
                             "new": lb in r.new, "basis": selection.before[lb].basis
                             if lb in r.new and lb in selection.before else None,
                             "error": _r((p - r.measured_ms[lb]) / r.measured_ms[lb])
                             if r.measured_ms.get(lb) else None}
                            for lb, p in r.predicted_ms.items()]}
              for r in selection.rounds]
    before = selection.before.get(chosen.label)
    return {
        "schema_version": SCHEMA_VERSION,
        "model": imported.name,
        "input": {"name": imported.prepared.input_name, "shape": list(imported.prepared.input_shape)},
        "inputs": [{"name": n, "shape": list(sh)} for n, sh in imported.prepared.shapes.items()],
        "outputs": _outputs(imported),
        "reference": {"name": checked.reference, "why": checked.reference_note},
        "prepare_notes": list(imported.prepared.notes),
        "folded_batchnorm": imported.prepared.folded_bn,
        "target": settings.spec.key, "cpu": settings.ctx.cpu, "threads": settings.spec.threads,
        "runner": ({"kind": "rpc", "tracker": settings.rpc.address, "key": settings.rpc.key,
                    "sessions": settings.rpc.sessions} if settings.remote else {"kind": "local"}),
        "tvm_version": settings.ctx.tvm.split(" ")[0], "tvm_runtime": settings.ctx.tvm,
        "solver": {"method": sol.method, "optimal": sol.optimal, "seconds": _r(sol.seconds, 3),
                   "gap": _r(sol.gap, 6), "predicted_ms": _r(sol.cost)},
        "greedy": {"predicted_ms": _r(prob.evaluate(gchoice)), "isolated_predicted_ms": _r(selection.greedy.cost)},
        # which layers the selection changed against warm-cache greedy, and why (calibrated costs)
        "versus_greedy": _rounded(compare(prob, choice, gchoice).as_dict()),
        "predicted_e2e_ms": _r(prob.evaluate(choice)),
        "isolated_predicted_e2e_ms": _r(iso.evaluate(choice)),
        "cache": {"budget_bytes": prob.cache_bytes, "isolated_budget_bytes": machine.budget,
                  "activation_bytes": prob.activation_bytes, "footprint_bytes": prob.footprint(choice),
                  "resident": prob.resident(choice), "warm_share": prob.warm_share(choice),
                  "partial_steps": [list(st) for st in prob.partial]},
        "predicted_transform_ms": _r(prob.transform_cost(choice)),
        # 1 ns: at 0.1 us a 50 us network's figure moved the error computed from it by 0.2-0.3%
        "measured_e2e_ms": _r(gs, 6),
        "measured_quiet_ms": _r(quiet),
        # the error of the prediction made before the returned network was built (None when an
        # earlier run had timed this very network: no prediction was made)
        "prediction_error": _err_of(before, gs),
        "prediction": {"predicted_ms": _r(before.ms) if before else None, "round": before.round if before else None,
                       "basis": before.basis if before else None, "measured_ms": _r(gs),
                       "error": _err_of(before, gs), "error_vs_quiet": _err_of(before, quiet)},
        "first_prediction": _first(selection),
        # the final calibrated objective against the measurement: its terms were fitted to the
        # returned network's own run, so this is agreement, not a prediction error
        "calibrated_agreement": _r((prob.evaluate(choice) - gs) / gs) if gs else None,
        "onnxruntime_ms": _r(ort),
        "ratio_to_onnxruntime": _r(checked.versus_ort.ratio(chosen.label, "onnxruntime"))
        if checked.versus_ort is not None else None,
        # the returned network as a user calls it (OptimizeResult.run: numpy in, outputs copied)
        "measured_user_ms": _r(checked.user_ms), "ratio_to_onnxruntime_user": _r(checked.user_ratio),
        # the host's state while the check ran (before, after): the thread pool's hand-off, us per call
        "check_handoff_us": [_r(h, 3) for h in checked.handoff_us] if checked.handoff_us else None,
        "layout_transforms": count_transforms(chosen.module),
        "max_rel_err": checked.errors.get(chosen.label),
        "precision": _precision(settings, acc, checked, layers, chosen.label),
        "conv_layers": sum(1 for r in layers if r["kind"] == "conv"),
        "families_chosen": _count(r["family"] for r in layers if r["kind"] == "conv"),
        "records": {"jobs": measured.jobs, "reused": measured.reused,
                    "retimed": measured.retimed, "new": measured.new, "store": store, **measured.seconds,
                    "flagged": [{"workload": w, "candidate": c, "why": why} for w, c, why in measured.flagged],
                    "pruned": [{"workload": w, "candidate": c, "why": why} for w, c, why in measured.pruned],
                    "predicted": [{"workload": w, "candidate": c, "why": why} for w, c, why in measured.predicted]},
        "calibration": _rounded(selection.calibration.as_dict()),
        "loop": {"rounds": rounds, "converged": selection.converged, "chosen": chosen.label,
                 "timed_under_load": list(selection.unfitted),
                 "fastest_measured": fastest},
        "alternatives": alternatives,
        "kernels": _kernel_points(imported, selection),
        "breakdown": _breakdown(imported, chosen, selection.innet.get(chosen.label), layers),
        "hardware": machine.hardware,
        "chosen_by": selection.chosen_by or sol.method,
        "stage_seconds": stage_seconds,
        # every network the loop built: compiled, linked from the kernels measurement compiled, or
        # loaded from the build cache (stages.build.Built.origin)
        "builds": [{"label": b.label, "origin": b.origin, "kernels_linked": b.linked} for b in selection.built],
        "blocks": _blocks(imported, measured, selection, chosen, innet),
        "layers": layers,
    }


def _blocks(imported, measured, selection, chosen, innet) -> list[dict]:
    """Every block of the returned network: the layers it covers, the hidden traffic it saves (the
    tensor the per-layer kernels would write and read back), its times against the per-layer
    kernels' (the fastest alone of each member, summed; and in place, from a network of this run
    that computed the members one by one, when one was built)."""
    lg, plan, meas = imported.lg, measured.plan, measured.measurements
    out = []
    for name, c in chosen.selection.items():
        if not isinstance(c, BlockCandidate) or not c.last:
            continue
        inner = [lg.layers[m] for m in c.members[:-1]]
        hidden = sum(4 * int(np.prod(l.out_shape)) for l in inner)
        m = meas.get((c.workload, c.key))
        alone = 0.0
        for mem in c.members:
            ts = [meas[o.kernel].cold_ms for o in plan.table(mem).options
                  if o.kernel is not None and o.family != c.family and o.kernel in meas]
            alone += min(ts) if ts else math.inf
        per_layer = None
        for b in selection.built:
            t = selection.innet.get(b.label)
            if t is None or any(isinstance(b.selection.get(mem), BlockCandidate) for mem in c.members):
                continue
            by = _innet_by_layer(imported, b, t)
            if all(mem in by for mem in c.members):
                per_layer = {"network": b.label, "innet_ms": _r(sum(by[mem] for mem in c.members))}
                break
        out.append({"kernel": c.key, "members": list(c.members),
                    "shapes": [lg.layers[mem].conv.describe() for mem in c.members],
                    "hidden_bytes": hidden, "traffic_saved_bytes": 2 * hidden,
                    "cold_ms": _r(m.cold_ms) if m else None, "warm_ms": _r(m.warm_ms) if m else None,
                    "innet_ms": _r(innet.get(name)), "per_layer_best_cold_ms": _r(alone),
                    "per_layer_innet": per_layer})
    return out


def _precision(settings, acc, checked, layers, label) -> dict:
    """What the returned network computes in and how far that takes it from fp32."""
    convs = [r for r in layers if r["kind"] == "conv"]
    lowp = sorted({r["precision"] for r in convs} - {"fp32"})
    out = {"mode": settings.precision, "tolerance": settings.tolerance if settings.precision != "fp32" else None,
           "layers": _count(r["precision"] for r in convs),
           # a bf16 or int8 kernel takes and returns fp32 activations (NCHW[x]c, as nchwc): it converts
           # (quantizes) its input in its padding pass, so no conversion runs between kernels
           "conversions": f"inside the {'/'.join(lowp)} kernels (their input pass)" if lowp else "none"}
    err = checked.errors.get(label)
    if settings.precision != "fp32":
        out.update(max_rel_err=err, within_tolerance=None if err is None else bool(err <= settings.tolerance),
                   samples=_rounded(checked.samples) if checked.samples else None,
                   error_model_ratio=_r(acc.ratio, 4) if acc is not None and acc.ratios else None)
    return out


def _err_of(pred, measured):
    """(prediction - measured) / measured of a prediction made before the network ran; None for
    one made after (an earlier run timed that network) or without a measurement."""
    if pred is None or not pred.out_of_sample or not measured:
        return None
    return _r((pred.ms - measured) / measured)


def _first(selection) -> dict | None:
    """Round 0's prediction of its solver's assignment against that network's first time in
    place: the first figure this run predicted for the model on this machine."""
    if not selection.rounds:
        return None
    r0 = selection.rounds[0]
    pred = selection.before.get(r0.solution) if r0.solution in r0.new else None
    if pred is None:
        return None
    got = r0.measured_ms.get(r0.solution)
    return {"label": r0.solution, "predicted_ms": _r(pred.ms), "measured_innet_e2e_ms": _r(got),
            "basis": pred.basis, "error": _err_of(pred, got)}


def _innet_by_layer(imported, b, timing) -> dict:
    """Conv layer -> its kernel's in-network ms in the built network ``b``."""
    if timing is None:
        return {}
    sym = b.symbols
    return {sym[c.symbol]: c.ms for c in timing.calls if c.symbol in sym}


CATEGORIES = (("layout transforms", ("layout_transform",)), ("pooling", ("pool",)),
              ("matmul / dense", ("matmul", "dense", "gemm")))


def _breakdown(imported, b, timing, layers) -> dict | None:
    """Where the returned network's time goes, measured in place: conv kernels (beside their
    isolated cold and warm sums), other kernels by kind, the VM's own builtins and the per-call
    cost the hook measurement attributes to every call (thread-pool launch and join, dispatch)."""
    if timing is None:
        return None
    sym = b.symbols
    groups: dict[str, list] = {"conv kernels": []}
    for c in timing.calls:
        if c.symbol in sym:
            groups["conv kernels"].append(c.ms)
            continue
        name = next((cat for cat, keys in CATEGORIES if any(k in c.symbol for k in keys)), "other kernels")
        groups.setdefault(name, []).append(c.ms)
    convs = [r for r in layers if r["kind"] == "conv"]
    return {"e2e_ms": _r(timing.e2e_ms), "kernel_calls": len(timing.calls),
            "parts": [{"part": k, "calls": len(v), "ms": _r(sum(v))} for k, v in groups.items()]
            + [{"part": "VM builtins", "calls": None, "ms": _r(timing.builtin_ms)}],
            "conv_isolated_cold_ms": _r(sum(r["isolated_cold_ms"] or 0 for r in convs)),
            "conv_isolated_warm_ms": _r(sum(r["isolated_warm_ms"] or 0 for r in convs)),
            "hook_overhead_us_per_call": _r(timing.overhead_ms * 1e3, 2)}


def _kernel_points(imported, selection) -> list[dict]:
    """Every conv kernel timed in a network: isolated cold/warm, calibrated prediction and
    in-network time (the predicted-against-measured plot)."""
    out = []
    prob, iso = selection.problem, selection.isolated
    names = list(imported.lg.layers)
    for b in selection.built:
        timing = selection.innet.get(b.label)
        if timing is None:
            continue
        share = prob.warm_share(b.choice)
        by_layer = _innet_by_layer(imported, b, timing)
        for lname, ms in by_layer.items():
            i = names.index(lname)
            ch, ci = prob.nodes[i].choices[b.choice[i]], iso.nodes[i].choices[b.choice[i]]
            out.append({"network": b.label, "layer": lname, "candidate": ch.name, "innet_ms": _r(ms),
                        "calibrated_ms": _r(ch.blend(share)), "isolated_cold_ms": _r(ci.cost),
                        "isolated_warm_ms": _r(ci.time(True))})
    return out


def _quiet(ts, label):
    """The quiet rounds' time: the lower quartile of the round medians."""
    if ts is None or label not in ts.ms:
        return None
    meds = [float(np.median(b)) for b in ts.ms[label]]
    return float(np.percentile(meds, 25)) if meds else None


def _rounded(d):
    if isinstance(d, dict):
        return {str(k): _rounded(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_rounded(v) for v in d]
    return _r(d) if isinstance(d, float) else d


def _err(meas, workload, key):
    m = meas.get((workload, key))
    return m.rel_err if m is not None else None


def _count(it) -> dict:
    out: dict = {}
    for x in it:
        out[x] = out.get(x, 0) + 1
    return out


def _outputs(imported) -> list[dict]:
    """Every graph output's name and shape (from the prepared model's inferred shapes)."""
    g = imported.prepared.model.graph
    out = []
    for o in g.output:
        tt = o.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
        out.append({"name": o.name, "shape": shape})
    return out
