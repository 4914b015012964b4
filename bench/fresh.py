"""Fresh-store tuning time: ``graphselect optimize MODEL`` on a new record store per model, one
model after another (nothing else may run meanwhile: the timings would be wrong and stored).

  python bench/fresh.py MODEL [MODEL...] [--root /tmp/fresh/TAG]

Each model gets ROOT/MODEL/{store.sqlite,out,log.txt}. Printed per model: the wall time (the
shell's view, interpreter start included) and, from report.json, the stage seconds, the time
measurement waited for the compilers (build_s) and in the runner (run_s), the jobs (new, reused,
pruned) and the ratio to onnxruntime measured in the same run. The CPU is printed first.
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


def run(model: str, root: Path) -> dict:
    d = root / model
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    with open(d / "log.txt", "w") as log:
        rc = subprocess.run(["graphselect", "optimize", model, "--cache", str(d / "store.sqlite"), "-o", str(d / "out")],
                            stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    row = {"model": model, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}
    try:
        r = json.loads((d / "out" / "report.json").read_text())
    except (OSError, ValueError):
        return row
    rec = r.get("records", {})
    row.update(stages=r.get("stage_seconds"), build_s=rec.get("build_s"), run_s=rec.get("run_s"),
               jobs=rec.get("jobs"), new=rec.get("new"), reused=rec.get("reused"),
               pruned=len(rec.get("pruned") or ()), ratio=r.get("ratio_to_onnxruntime"))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--root", default="/tmp/fresh/run")
    a = ap.parse_args(argv)
    print(cpu_line())
    for m in a.models:
        print(json.dumps(run(m, Path(a.root))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
