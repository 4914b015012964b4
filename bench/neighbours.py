"""Is the returned assignment a local optimum in fact, not only by the objective?

  python bench/neighbours.py MODEL [MODEL...] [--k 4] [--seed 0] [--runs 60] [--seconds 10] [--threads 2]

Optimizes MODEL as a user does (the default record store: a model optimized before is not
measured again), then takes the returned assignment's single-layer changes (one layer's option
replaced by another, every other layer as returned; changes the Problem cannot price, a missing
layout transform, are left out) and builds:

- the ``k`` best of them by the final calibrated objective (what the solver would try next), and
- ``k`` others drawn at random (seeded), which the objective did not pick.

Every one of them is timed against the returned network in one session of interleaved rounds
(``graphselect.measure.e2e.compare``: short blocks, the order reversed every other round, one
runtime, so no pauses), and compared round by round: a neighbour's ratio is the median over
rounds of its block median over the returned network's block median in the same round, so a
slow spell of the machine between rounds does not move it. A neighbour *beats* the returned
assignment when that ratio is below 0.99 and the upper quartile of its per-round ratios is
below 1 (more than 1% faster, in most rounds). Results: printed, and saved under
bench/results/neighbours-MODEL-STAMP.{md,json} with the CPU named.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

BEATS = 0.99          # a neighbour beats the returned assignment below this ratio (more than 1% faster) ...
# ... in most rounds: the upper quartile of its per-round ratios below 1


def single_changes(problem, choice) -> list[tuple[int, int]]:
    """(node, option) for every single-node change of ``choice`` the Problem can price (finite)."""
    out = []
    for i, node in enumerate(problem.nodes):
        for k in range(len(node.choices)):
            if k == choice[i]:
                continue
            c = list(choice)
            c[i] = k
            if np.isfinite(problem.evaluate(c)):
                out.append((i, k))
    return out


def pick(problem, choice, k: int, seed: int):
    """The ``k`` best single changes by ``problem``'s objective and ``k`` random others."""
    changes = single_changes(problem, choice)

    def cost(ch):
        c = list(choice)
        c[ch[0]] = ch[1]
        return problem.evaluate(c)
    ranked = sorted(changes, key=cost)
    best = ranked[:k]
    rest = ranked[k:]
    rnd = random.Random(seed).sample(rest, min(k, len(rest)))
    return [("best", ch, cost(ch)) for ch in best] + [("random", ch, cost(ch)) for ch in rnd], len(changes)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--k", type=int, default=4, help="best and random neighbours each (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=60, help="calls per network at least")
    ap.add_argument("--seconds", type=float, default=10.0, help="timing session at least this long")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import graphselect
    import models
    from results_io import save
    from graphselect.measure.e2e import compare, median, vm_runner
    from graphselect.stages import build, settings
    from results_io import cpu_line

    for name in a.models:
        t0 = time.perf_counter()
        m = models.build(name) if name in models.ZOO else __import__("onnx").load(name)
        label = name if name in models.ZOO else Path(name).stem
        res = graphselect.optimize(m, threads=a.threads, name=label)
        t_opt = time.perf_counter() - t0
        ex = res.extra
        sel, plan, imported, measured = ex["selection"], ex["plan"], ex["imported"], ex["measured"]
        prob, chosen = sel.problem, tuple(sel.solution.choice)
        base_cost = prob.evaluate(chosen)
        picked, n_changes = pick(prob, chosen, a.k, a.seed)
        s = settings.settings(threads=a.threads, benchmark_runs=0)
        Assignment = type(sel.solution)
        nets = {"returned": res.build()}
        rows = []
        t_build = time.perf_counter()
        for j, (kind, (i, k), cost) in enumerate(picked):
            lt = plan.layers[i]
            c = list(chosen)
            c[i] = k
            lb = f"{kind} {j}: {lt.name}"
            print(f"[{time.perf_counter() - t0:7.1f}s] building {lb} -> {lt.options[k].name}", file=sys.stderr, flush=True)
            b = build.build(imported, measured, lb, Assignment(tuple(c), cost, "neighbour", False), s)
            nets[lb] = b.executable
            rows.append({"label": lb, "kind": kind, "layer": lt.name, "from": lt.options[chosen[i]].name,
                         "to": lt.options[k].name, "predicted_ms": cost,
                         "predicted_over_returned": cost / base_cost})
        t_build = time.perf_counter() - t_build
        x = [np.random.default_rng(0).standard_normal(sh).astype("float32") for sh in res.input_shapes]
        fns = {lb: vm_runner(ex_, x) for lb, ex_ in nets.items()}
        r = compare(fns, runs=a.runs, seconds=a.seconds)
        for row in rows:
            per = [median(u) / median(v) for u, v in zip(r.ms[row["label"]], r.ms["returned"])]
            row["measured_ms"] = r.median(row["label"])
            row["ratio"] = float(np.median(per))
            row["ratio_q1"], row["ratio_q3"] = (float(q) for q in np.percentile(per, [25, 75]))
            row["beats"] = row["ratio"] < BEATS and row["ratio_q3"] < 1.0
        data = {"model": label, "cpu": cpu_line(), "threads": a.threads, "k": a.k, "seed": a.seed,
                "returned_label": res.report["chosen_by"] if "chosen_by" in res.report else None,
                "returned_predicted_ms": base_cost, "returned_measured_ms": r.median("returned"),
                "rounds": len(r.ms["returned"]), "single_changes": n_changes, "optimize_s": round(t_opt, 1),
                "build_s": round(t_build, 1), "neighbours": rows}
        save(f"neighbours-{label}", _markdown(data), data)


def _markdown(d) -> str:
    rows = d["neighbours"]
    beat = [r for r in rows if r["beats"]]
    lines = [f"# Neighbours of the returned {d['model']} assignment",
             "",
             f"CPU: {d['cpu']}, {d['threads']} threads. `python bench/neighbours.py {d['model']} --k {d['k']} "
             f"--seed {d['seed']}`: {d['single_changes']} single-layer changes the Problem can price; the {d['k']} "
             f"best by the final calibrated objective and {d['k']} random ones built ({d['build_s']:.0f} s) and timed "
             f"against the returned network in {d['rounds']} interleaved rounds.",
             "",
             f"Returned: predicted {d['returned_predicted_ms']:.3f} ms (final objective), measured "
             f"{d['returned_measured_ms']:.3f} ms (median of all calls in this session). Chosen by: "
             f"{d['returned_label']}.",
             "",
             "| neighbour | layer | returned option | changed to | predicted / returned | measured ms | "
             "measured / returned (median of rounds) | rounds' IQR | beats by > 1% |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['layer']} | {r['from']} | {r['to']} | {r['predicted_over_returned']:.3f} | "
                     f"{r['measured_ms']:.3f} | {r['ratio']:.3f} | {r['ratio_q1']:.3f}-{r['ratio_q3']:.3f} | "
                     f"{'yes' if r['beats'] else 'no'} |")
    lines += ["", f"{len(beat)} of {len(rows)} neighbours beat the returned assignment by more than 1% "
                  f"(median per-round ratio < {BEATS}, upper quartile < 1): "
                  + (", ".join(f"{r['layer']} -> {r['to']} ({r['ratio']:.3f})" for r in beat) or "none") + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
