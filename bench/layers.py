"""Per-layer table: for every 3x3 stride-1 conv of the given models, the best NCHWc and the best
Winograd candidate, warm and with weights flushed, their ratio, and direct-equivalent GFLOP/s
(the direct convolution's FLOPs over the measured time).

Usage: python bench/layers.py [resnet18 vgg11 ...] [--threads 2]

The times are graphselect's own measurements (interleaved rounds of time_evaluator; cold:
number=1 with every argument but the input flushed), taken in one run or reused from the
record store of an earlier run on this machine.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from results_io import save  # noqa: E402


def best(meas, workload, plan_opts, family, attr):
    vals = [(getattr(meas[o.kernel], attr), o.name) for o in plan_opts
            if o.family == family and o.kernel in meas and meas[o.kernel].ok]
    return min(vals) if vals else (math.inf, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["resnet18", "vgg11"])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    import graphselect
    import models

    rows = []
    for name in a.models:
        res = graphselect.optimize(models.build(name), threads=a.threads, benchmark_runs=0, verify=False, name=name)
        lg, plan, meas = res.extra["lg"], res.extra["plan"], res.extra["measurements"]
        seen = set()
        for layer in lg.convs:
            s = layer.conv
            if s.kernel != (3, 3) or s.stride != (1, 1) or s.key in seen:
                continue
            seen.add(s.key)
            opts = plan.table(layer.name).options
            row = {"model": name, "layer": s.describe(), "epilogue": s.epilogue, "gflop": s.flops / 1e9}
            for mode in ("warm_ms", "cold_ms"):
                n, nk = best(meas, s.key, opts, "nchwc", mode)
                w, wk = best(meas, s.key, opts, "winograd", mode)
                row[mode] = {"nchwc": n, "nchwc_cfg": nk, "winograd": w, "winograd_cfg": wk, "speedup": n / w}
            rows.append(row)
    lines = ["| model | layer | epilogue | NCHWc warm ms | Winograd warm ms | warm speedup | NCHWc cold ms | "
             "Winograd cold ms | cold speedup | Winograd warm GFLOP/s (direct-equiv.) | best Winograd (warm) |",
             "|" + "---|" * 11]
    f = lambda v, spec: "—" if not math.isfinite(v) or v == 0 else format(v, spec)  # noqa: E731
    for r in rows:
        wm, cm = r["warm_ms"], r["cold_ms"]
        lines.append(f"| {r['model']} | {r['layer']} | {r['epilogue']} | {f(wm['nchwc'], '.3f')} | "
                     f"{f(wm['winograd'], '.3f')} | {f(wm['speedup'], '.2f')}x | {f(cm['nchwc'], '.3f')} | "
                     f"{f(cm['winograd'], '.3f')} | {f(cm['speedup'], '.2f')}x | "
                     f"{f(r['gflop'] / wm['winograd'] * 1e3, '.0f')} | {wm['winograd_cfg'] or '— (C=3: not applicable)'} |")
    save("layers", "\n".join(lines) + "\n", rows)

if __name__ == "__main__":
    main()
