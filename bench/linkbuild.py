"""A/B of one network build: every PrimFunc compiled, against the kernels measurement compiled
linked in (``measure.kernels``, issue 24 item 2). One fresh record store per model; the greedy
and the cp-sat round-0 assignments are each built both ways, alternating, into fresh build
folders, and the linked network's outputs are compared with the compiled one's.

    python bench/linkbuild.py resnet18 mobilenet_v2 --repeats 2
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    import models
    from graphselect.stages import build, load, machine, measure, select, settings
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
    rows = []
    for name in a.models:
        root = Path(tempfile.mkdtemp(prefix=f"linkbuild-{name}-"))
        s = settings.settings(cache=root / "records.sqlite", benchmark_runs=0)
        imp = load.load(models.build(name), s)
        t0 = time.perf_counter()
        with settings.open_store(s) as store:
            meas = measure.measure(imp, s, store)
            hw = machine.machine(s, store)
            sel = select.select(imp, meas, hw, s, store)
        measure_s = time.perf_counter() - t0
        want = [(b.label, b.assignment) for b in sel.built]
        xs = load.inputs(imp)
        kdir = root / "kernels"
        hidden = root / "kernels.off"
        times = {"compiled": [], "linked": []}
        for r in range(a.repeats):
            for how in (("compiled", "linked") if r % 2 == 0 else ("linked", "compiled")):
                shutil.rmtree(root / "builds", ignore_errors=True)
                if how == "compiled":
                    kdir.rename(hidden)
                try:
                    s1 = settings.settings(cache=root / "records.sqlite", benchmark_runs=0, workers=1)
                    t = time.perf_counter()
                    got = build.build_all(imp, meas, want, s1)
                    times[how].append(time.perf_counter() - t)
                finally:
                    if how == "compiled":
                        hidden.rename(kdir)
                assert all(b.origin == how for b in got), [b.origin for b in got]
                outs = [build.LocalNetwork(b.executable).run(xs) for b in got]
                if how == "compiled":
                    ref = outs
                else:
                    linked_outs, linked_counts = outs, [b.linked for b in got]
        for o1, o2 in zip(ref, linked_outs):
            for u, v in zip(o1, o2):
                np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
        row = {"model": name, "networks": len(want), "measure_select_s": round(measure_s, 1),
               "compiled_s": [round(t, 2) for t in times["compiled"]],
               "linked_s": [round(t, 2) for t in times["linked"]],
               "ratio_median": round(float(np.median(times["linked"]) / np.median(times["compiled"])), 3),
               "linked_kernels": linked_counts}
        print(json.dumps(row), flush=True)
        rows.append(row)
        shutil.rmtree(root, ignore_errors=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(a.out) / f"linkbuild-{stamp}.json"
    out.write_text(json.dumps({"cpu": cpu, "rows": rows}, indent=1))
    print("wrote", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
