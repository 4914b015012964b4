"""Does the calibration transfer? Leave one model out, on the networks a record store holds.

  python bench/transfer.py [--threads 2] [--no-floor] [--tag TAG]

For every model in the store (the default one, or ``$GRAPHSELECT_CACHE``) of this machine's
context, the calibration is fitted on the *other* models' built networks only, and each of the
model's own networks is priced by it as a model new to the machine would be (no kernel, family or
launch figure of its own): a prediction made without any measurement of that model, compared with
the network's measured end-to-end time. The same is done with the prior (no network at all:
isolated cold timings and the probed launch cost). Nothing is built or timed: this reads the store.

``--no-floor`` keeps the timing protocol's floor (what it reads for an empty kernel) in the
isolated timings, as the model did before 2026-12-03, to compare the two on the same data.
``--kinds`` adds, per model, what its networks' non-conv kernels of each kind
(``costmodels.calibration.op_kind``) took in place against their isolated cold sum less the floor
(the kernels only, no launch), and how many network calls the kind's isolated snippets became
(networks stored since 2026-12-03 keep this). ``--names`` names the models from bench/e2e.py result files. Results are printed, one line per
model, and saved under bench/results/transfer[-TAG]-STAMP.{md,json} with the CPU named.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def parts(cal, net, kernels, m) -> tuple[float, float, float]:
    """``net``'s end-to-end time by ``cal`` as a model new to the machine (the Problem's sum), as
    (conv kernels, their launches, everything else)."""
    from dataclasses import replace

    from costmodels.calibration import _blend, other_unfloored
    share = cal.share(net.footprint_bytes, m.budget, m.steps)
    total = 0.0
    for k in kernels:
        c, w = cal.kernel(k.key, k.family, k.cold_ms, k.warm_ms, k.incold_ms, model="")
        total += _blend(c, w, share)
    launches = len(kernels) * cal.launch("")
    # the others' isolated timings are a sum over snippets: each loses the floor once
    others = max(0, net.kernel_calls - len(kernels))
    c, w, ic = other_unfloored(net, cal.floor, others)
    oc, ow = replace(cal, floor=(0.0, 0.0, 0.0)).other("", c, w, ic)
    return total - launches, launches, _blend(oc, ow, share)


def main():
    from costmodels.calibration import fit, prior
    from graphselect.stages.machine import machine
    from graphselect.stages.settings import open_store, settings
    from results_io import cpu_line, save

    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="")
    ap.add_argument("--names", nargs="*", default=[], metavar="E2E_JSON",
                    help="bench/e2e.py result files of runs on this store: name the models by them")
    ap.add_argument("--no-floor", action="store_true", help="keep the protocol's floor in the isolated timings")
    ap.add_argument("--kinds", action="store_true", help="also tabulate the non-conv kernels by kind, per model")
    a = ap.parse_args()
    s = settings(threads=a.threads)
    with open_store(s) as store:
        m = machine(s, store)
        nets, kobs = store.networks(s.ctx)
    floor = m.floor if not a.no_floor else (0.0, 0.0, 0.0)
    if not nets:
        sys.exit("no built networks in the record store for this machine: run graphselect optimize first")
    by_net: dict = {}
    for k in kobs:
        by_net.setdefault(k.network, []).append(k)
    models = list(dict.fromkeys(n.model for n in nets))             # newest first
    names = _names(a.names)
    pri = prior(m.launch_ms, floor)
    rows = []
    for mdl in models:
        own = [n for n in nets if n.model == mdl]
        others = [n for n in nets if n.model != mdl]
        other_k = [k for n in others for k in by_net.get(n.network, [])]
        cal = fit(other_k, others, budget=m.budget, steps=m.steps, floor=floor)
        if not cal.networks:
            cal = pri
        errs, perrs, conv, rest = [], [], [], []
        for n in own:
            ks = by_net.get(n.network, [])
            pc, pl, po = parts(cal, n, ks, m)
            errs.append((pc + pl + po) / n.e2e_ms - 1)
            perrs.append(sum(parts(pri, n, ks, m)) / n.e2e_ms - 1)
            # where the error is: the conv kernels against their time in place, the rest (their
            # launches, every other kernel and the runtime) against what the network took beyond them
            conv.append(pc / max(n.conv_innet_ms, 1e-6) - 1)
            rest.append((pl + po) / max(n.e2e_ms - n.conv_innet_ms, 1e-6) - 1)
        rows.append({"model": names.get(mdl, mdl), "networks": len(own), "e2e_ms": float(np.median([n.e2e_ms for n in own])),
                     "footprint_mib": float(np.median([n.footprint_bytes for n in own])) / 2**20,
                     "lomo_error": float(np.median(errs)), "prior_error": float(np.median(perrs)),
                     "conv_error": float(np.median(conv)), "rest_error": float(np.median(rest)),
                     "conv_share": float(np.median([n.conv_innet_ms / n.e2e_ms for n in own])),
                     "calls": int(np.median([n.kernel_calls for n in own])),
                     "fit_networks": cal.networks})
    cpu = cpu_line()
    lines = [f"CPU: {cpu}",
             f"Floor taken off the isolated timings (cold, warm, in-cold): {[round(f * 1e3, 2) for f in floor]} us; "
             f"launch {m.launch_ms * 1e3:.2f} us per call. `python bench/transfer.py{' --no-floor' if a.no_floor else ''}`",
             "", "Leave one model out: each model's networks priced by a calibration fitted on the "
             "other models' networks only (a prediction: none of the model's own timings in it), and by the prior.",
             "", "| model | networks | e2e ms (median) | kernel calls | footprint MiB | error, calibrated on the others "
             "| of which: conv kernels (their share of e2e) | the rest | error, prior |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['networks']} | {r['e2e_ms']:.3f} | {r['calls']} | {r['footprint_mib']:.1f} | "
                     f"{100 * r['lomo_error']:+.1f}% | {100 * r['conv_error']:+.1f}% ({100 * r['conv_share']:.0f}%) | "
                     f"{100 * r['rest_error']:+.1f}% | {100 * r['prior_error']:+.1f}% |")
    e = [abs(r["lomo_error"]) for r in rows]
    p = [abs(r["prior_error"]) for r in rows]
    lines += ["", f"{len(rows)} models: calibrated on the others median {100 * np.median(e):.1f}%, max "
                  f"{100 * max(e):.1f}%, {sum(x <= 0.10 for x in e)} within 10%; prior median {100 * np.median(p):.1f}%, "
                  f"max {100 * max(p):.1f}%."]
    if a.kinds:
        lines += [""] + kinds_table(nets, models, names, floor)
    text = "\n".join(lines) + "\n"
    save("transfer" + (f"-{a.tag}" if a.tag else ""), text, rows)


def kinds_table(nets, models, names, floor) -> list[str]:
    """Per model (its newest network) and kind: in-place ms over isolated cold ms less the floor,
    and network calls per isolated snippet, with the isolated ms at stake."""
    from costmodels.calibration import _unfloor
    kinds = sorted({k for n in nets for k in n.other_kinds})
    lines = ["Non-conv kernels by kind (each model's newest network): in-place / isolated cold less the floor "
             "(isolated us; network calls / isolated snippets).", "",
             "| model | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for mdl in models:
        n = next((x for x in nets if x.model == mdl and x.other_kinds), None)
        if n is None:
            continue
        cells = []
        for k in kinds:
            v = n.other_kinds.get(k)
            if v is None:
                cells.append("")
                continue
            c, w, ic, count, t, calls = v
            if count <= 0:
                cells.append(f"(no snippet; {t * 1e3:.0f} us in {calls} calls)")
                continue
            oc = _unfloor(c, w, ic, floor, int(count))[0]
            cells.append(f"{t / oc:.2f} ({oc * 1e3:.0f} us; {calls}/{count})")
        lines.append(f"| {names.get(mdl, mdl)} | " + " | ".join(cells) + " |")
    return lines


def _names(files) -> dict:
    """Model key -> zoo name from bench/e2e.py result files, in the order the runs optimized
    them: the key a row's calibration holds that no earlier row's did is that row's model."""
    import json
    out, seen = {}, set()
    for f in files:
        for r in json.loads(Path(f).read_text()):
            keys = set((r.get("calibration") or {}).get("model_launch_ms", {}))
            new = keys - seen
            if len(new) == 1:
                out[new.pop()] = r["model"]
            seen |= keys
    return out


if __name__ == "__main__":
    main()
