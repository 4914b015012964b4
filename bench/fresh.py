"""Fresh-store tuning time: ``graphselect optimize MODEL`` on a new record store per model, one
model after another (nothing else may run meanwhile: the timings would be wrong and stored).

  python bench/fresh.py MODEL [MODEL...] [--root /tmp/fresh/TAG] [--again N] [--reuse]

Each model gets ROOT/MODEL/{store.sqlite,out,log.txt}. Printed per model: the wall time (the
shell's view, interpreter start included) and, from report.json, the stage seconds, the time
measurement waited for the compilers (build_s) and in the runner (run_s), the jobs (new, reused,
pruned) and the ratio to onnxruntime measured in the same run. The CPU is printed first.

``--again N``: then N unchanged reruns, each in a copy of the store the run before it left (its
kept kernels and network builds included), ROOT/MODEL-again1, -again2, ... ``--reuse``: then a
model whose kernels are all in the store: the zoo model with other weights (``--seed 1``) in a
copy of the fresh store without its network builds, ROOT/MODEL-seed1 (issue 24's three targets).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from results_io import cpu_line  # noqa: E402


def run(model: str, root: Path, *, name: str | None = None, start: Path | None = None, builds: bool = True) -> dict:
    """``graphselect optimize model`` in ROOT/NAME (default: the model's name), on a new store or
    on a copy of the store folder ``start`` (without its network builds unless ``builds``)."""
    d = root / (name or Path(model).stem)
    shutil.rmtree(d, ignore_errors=True)
    if start is None:
        d.mkdir(parents=True)
    else:
        skip = {"out", "log.txt"} | (set() if builds else {"builds"})
        shutil.copytree(start, d, ignore=lambda where, names: [n for n in names if Path(where) == start and n in skip])
    t0 = time.perf_counter()
    with open(d / "log.txt", "w") as log:
        rc = subprocess.run(["graphselect", "optimize", model, "--cache", str(d / "store.sqlite"), "-o", str(d / "out")],
                            stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    row = {"model": d.name, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}
    try:
        r = json.loads((d / "out" / "report.json").read_text())
    except (OSError, ValueError):
        return row
    rec = r.get("records", {})
    row.update(stages=r.get("stage_seconds"), build_s=rec.get("build_s"), run_s=rec.get("run_s"),
               jobs=rec.get("jobs"), new=rec.get("new"), reused=rec.get("reused"), retimed=rec.get("retimed"),
               pruned=len(rec.get("pruned") or ()), ratio=r.get("ratio_to_onnxruntime"))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--root", default="/tmp/fresh/run")
    ap.add_argument("--again", type=int, default=0, help="unchanged reruns after each fresh run")
    ap.add_argument("--reuse", action="store_true", help="then the model with other weights on a copy of its store")
    a = ap.parse_args(argv)
    root = Path(a.root)
    print(cpu_line())
    for m in a.models:
        print(json.dumps(run(m, root)), flush=True)
        last = root / m
        for k in range(1, a.again + 1):
            print(json.dumps(run(m, root, name=f"{m}-again{k}", start=last)), flush=True)
            last = root / f"{m}-again{k}"
        if a.reuse:
            other = root / f"{m}-seed1.onnx"
            subprocess.run(["graphselect", "zoo", "build", m, "--seed", "1", "-o", str(other)], check=True,
                           stdout=subprocess.DEVNULL)
            print(json.dumps(run(str(other), root, name=f"{m}-seed1", start=root / m, builds=False)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
