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
``--one-scale`` prices every non-conv kernel by one scale (the model's, else the machine's), as
before 2026-12-03, instead of by its kind's (networks stored before then have no kinds and are
priced so either way). ``--names`` names the models from bench/e2e.py result files. Results are printed, one line per
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

    from costmodels.calibration import _blend, _unfloor
    share = cal.share(net.footprint_bytes, m.budget, m.steps)
    total = 0.0
    for k in kernels:
        c, w = cal.kernel(k.key, k.family, k.cold_ms, k.warm_ms, k.incold_ms, model="")
        total += _blend(c, w, share)
    launches = len(kernels) * cal.launch("")
    bare = replace(cal, floor=(0.0, 0.0, 0.0))
    if net.other_kinds:
        # by kind: each kind's isolated sum loses the floor once per snippet, priced by its kind's scale
        rest = 0.0
        for kind, (c, w, ic, count, _, _) in net.other_kinds.items():
            if c <= 0:
                continue
            c, w, ic = _unfloor(c, w, ic, cal.floor, max(int(count), 1))
            oc, ow = bare.other("", c, w, ic, kind)
            rest += _blend(oc, ow, share)
        return total - launches, launches, rest
    # the others' isolated timings are a sum over snippets: each loses the floor once
    others = max(0, net.kernel_calls - len(kernels))
    c, w, ic = _unfloor(net.other_cold_ms, net.other_warm_ms, net.other_incold_ms, cal.floor, others)
    oc, ow = bare.other("", c, w, ic)
    return total - launches, launches, _blend(oc, ow, share)


def main():
    from dataclasses import replace

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
    ap.add_argument("--one-scale", action="store_true",
                    help="price every non-conv kernel by one scale, not by its kind's (the model before 2026-12-03)")
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
        elif a.one_scale:
            cal = replace(cal, kind_scale={}, model_kind_scale={})
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
             f"launch {m.launch_ms * 1e3:.2f} us per call. `python bench/transfer.py{' --no-floor' if a.no_floor else ''}"
             f"{' --one-scale' if a.one_scale else ''}`",
             f"Other kernels priced {'by one scale' if a.one_scale else 'by their kind'}; networks stored with their "
             f"other kernels by kind: {sum(1 for n in nets if n.other_kinds)} of {len(nets)}.",
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
    text = "\n".join(lines) + "\n"
    save("transfer" + (f"-{a.tag}" if a.tag else ""), text, rows)


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
