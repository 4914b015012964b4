"""Where the calling thread runs, and what it costs: networks as ``graphselect.optimize`` builds
them (the record store at hand; no end-to-end check) and the load probe's reference kernel, timed in
three placements of the calling thread, interleaved rounds in one process:

  shared   forced onto the core TVM binds its pool worker to (the state the scheduler left the
           caller in after a wait, before graphselect.measure.affinity)
  free     the caller's mask as the process starts (the scheduler decides)
  pinned   graphselect.measure.affinity.pinned (what timing and OptimizeResult.run use)

Each round: a 0.3 s busy subprocess first (as a compile job is), then per network a block of
calls free (first: where the scheduler left the caller), pinned, shared. Ratios are medians over rounds of the block medians' ratio to ``pinned``.

Usage: python bench/affinity.py [MODEL ...] [--rounds 20]      (default: tiny mobile_tiny squeezenet1_1)
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["tiny", "mobile_tiny", "squeezenet1_1"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=int, default=10)
    a = ap.parse_args()
    from graphselect.target import default_threads
    os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))
    import tvm
    from tvm import relax

    import models
    from graphselect.measure.affinity import pinned, worker_cpus
    from graphselect.measure.local import LoadProbe
    from graphselect.stages.settings import settings
    from results_io import cpu_line

    target = settings().target
    fns = {}
    probe = LoadProbe(target)
    fns["reference kernel"] = lambda: probe._f(*probe._args)
    import graphselect
    for name in a.models:
        r = graphselect.optimize(models.build(name), benchmark_runs=0)
        shape = r.input_shape
        f = relax.VirtualMachine(r.build(), tvm.cpu())["main"]
        x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype("float32"))
        f(x)
        fns[name] = (lambda f, x: lambda: f(x))(f, x)
    before = os.sched_getaffinity(0)
    workers = sorted(worker_cpus())
    if not workers:
        sys.exit("no TVM pool worker bound to a core (one thread?): nothing to compare")

    def block(fn):
        fn()
        ts = []
        for _ in range(a.block):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts)) * 1e3

    res = {(n, p): [] for n in fns for p in ("shared", "free", "pinned")}
    for r in range(a.rounds):
        subprocess.run([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<0.3: pass"])
        for n, fn in fns.items():
            res[(n, "free")].append(block(fn))           # first: where the scheduler left it
            with pinned():
                res[(n, "pinned")].append(block(fn))
            os.sched_setaffinity(0, {workers[0]})
            res[(n, "shared")].append(block(fn))
            os.sched_setaffinity(0, before)
    lines = [f"# Caller placement, {dt.datetime.now():%Y-%m-%d %H:%M}", "",
             f"CPU: {cpu_line()}; TVM threads {tvm.runtime.num_threads()}, worker bound to core(s) {workers}; "
             f"{a.rounds} rounds of {a.block} calls, each round after a 0.3 s busy subprocess.", "",
             "| network | pinned ms | free / pinned | shared / pinned | rounds where free is >1.3x pinned |",
             "|---|---|---|---|---|"]
    for n in fns:
        p = np.array(res[(n, "pinned")])
        fr = np.array(res[(n, "free")]) / p
        sh = np.array(res[(n, "shared")]) / p
        lines.append(f"| {n} | {np.median(p):.3f} | {np.median(fr):.2f} (max {fr.max():.2f}) | "
                     f"{np.median(sh):.2f} | {int((fr > 1.3).sum())} of {len(fr)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).resolve().parent / "results" / f"affinity-{dt.datetime.now():%Y%m%d-%H%M%S}.md"
    out.write_text(text)
    print("saved", out)


if __name__ == "__main__":
    main()
