"""Measurement wall time with the local runner and with 1 and 2 RPC servers, and the selection
each gives.

Usage: python bench/rpc_scale.py [MODEL] [--servers 0,1,2] [--runs 30]
       python bench/rpc_scale.py [MODEL] --runner-only [--servers 0,1,2]

Every configuration starts from an empty record store (its own folder), so all of its
candidates are measured. With RPC the builder compiles the next batch while the servers time
this one (here the servers share the machine's cores with the compiler processes, which a real
device does not). Local: this process times kernels with one TVM thread. RPC: a tracker
on loopback and N servers, each pinned to one core (``taskset -c i``) with one TVM thread, the
measurement spread over N sessions. The builder (2 compiler processes) is the same in all. Per
configuration: the measure stage's wall time, the number of jobs, the predicted cost of the
chosen assignment, and its end-to-end time where it ran (the local one here with one thread,
the RPC ones on a server, through the device's own timer). Nothing else may run meanwhile.
Results: printed and saved under bench/results/rpc-scale-STAMP.{md,json} with the CPU's name.

``--runner-only`` compiles every job once, first, then times only the runners on those same
artifacts (local: loaded here, with the load probe, as optimize does; RPC: 1 and 2 servers),
one after the other with nothing compiling meanwhile: what more devices buy when the builder is
not the bottleneck (on this 2-core machine it is, and the devices share its cores).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def lscpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")


def one(model, servers: int, runs: int, workdir: Path) -> dict:
    import graphselect
    import models
    from tests.rpc_servers import Cluster
    store = workdir / f"store-{servers}" / "records.sqlite"
    kw = {}
    cluster = None
    if servers:
        cluster = Cluster(str(workdir))
        for i in range(servers):
            cpus = os.sched_getaffinity(0)
            core = sorted(cpus)[i % len(cpus)]
            cluster.server("bench", python=("taskset", "-c", str(core), sys.executable), threads=1)
        kw = dict(rpc_tracker=cluster.address, rpc_key="bench", rpc_sessions=servers)
    else:
        kw = dict(threads=1)
    try:
        t0 = time.perf_counter()
        r = graphselect.optimize(models.build(model), cache=store, benchmark_runs=runs, max_rounds=0, **kw)
        total = time.perf_counter() - t0
    finally:
        if cluster is not None:
            cluster.close()
    rep = r.report
    return {"servers": servers, "runner": rep["runner"]["kind"], "jobs": rep["records"]["jobs"],
            "measure_s": rep["stage_seconds"]["measure"], "total_s": round(total, 1),
            "build_wait_s": rep["records"].get("build_s"), "run_s": rep["records"].get("run_s"),
            "predicted_ms": rep["solver"]["predicted_ms"], "measured_ms": rep["measured_e2e_ms"],
            "assignment": r.assignment}


class _Collect:
    """A runner that keeps the builder's library files (copied out of its temporary folder)."""
    files, remote, probe = True, False, None

    def __init__(self, folder: Path):
        self.folder, self.arts = folder, []

    def run(self, arts, timing):
        from dataclasses import replace
        for a in arts:
            kept = []
            for c in a.compiled:
                if isinstance(c, str):
                    dst = self.folder / f"k{len(self.arts)}_{len(kept)}.so"
                    shutil.copyfile(c, dst)
                    c = str(dst)
                kept.append(c)
            self.arts.append(replace(a, compiled=kept))
        return iter(())


def runner_only(model: str, counts, workdir: Path) -> list[dict]:
    import tvm
    from dataclasses import replace
    import graphselect  # noqa: F401 - sets the thread pool's spin count
    import models
    from graphselect.stages import load, settings
    from graphselect.measure import plan as plan_mod
    from graphselect.measure.jobs import TimingConfig
    from graphselect.measure.local import LoadProbe, LocalRunner
    from graphselect.measure.rpc import RpcConfig, RpcRunner
    from graphselect.measure.run import measure
    from graphselect.measure.store import RecordStore
    from tests.rpc_servers import Cluster
    s = settings.settings(cache=None, benchmark_runs=0, threads=1)
    imp = load.load(models.build(model), s)
    plan = plan_mod.make_plan(imp.lg, s.target, s.families)
    (workdir / "libs").mkdir()
    keep = _Collect(workdir / "libs")
    t0 = time.perf_counter()
    measure(list(plan.jobs), target=s.target, ctx=s.ctx, store=RecordStore(None), runner=keep, workers=2)
    build_s = time.perf_counter() - t0
    timing = TimingConfig()
    rows = []
    for n in counts:
        batches = [keep.arts[i:i + 48] for i in range(0, len(keep.arts), 48)]
        cluster = None
        if n == 0:
            runner = LocalRunner(LoadProbe(s.target))
            batches = [[replace(a, compiled=[tvm.runtime.load_module(c) if isinstance(c, str) else c
                                             for c in a.compiled]) for a in b] for b in batches]
        else:
            cluster = Cluster(str(workdir))
            for i in range(n):
                cluster.server("bench", python=("taskset", "-c", str(i % (os.cpu_count() or 1)), sys.executable))
            runner = RpcRunner(RpcConfig("127.0.0.1", cluster.port, "bench", n))
        try:
            t0 = time.perf_counter()
            res = [r for b in batches for _, r in runner.run(b, timing)]
            wall = time.perf_counter() - t0
        finally:
            if cluster is not None:
                cluster.close()
        ok = sum(1 for r in res if getattr(r, "ok", False))
        rows.append({"servers": n, "jobs": len(keep.arts), "ok": ok, "run_s": round(wall, 1),
                     "build_s": round(build_s, 1)})
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("--servers", default="0,1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--runner-only", action="store_true", help="time the runners alone on prebuilt kernels")
    a = ap.parse_args(argv)
    if "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = "1"      # the local runner: one thread, as each server
    from results_io import save
    rows = []
    work = Path(tempfile.mkdtemp(prefix="graphselect-rpc-scale-"))
    if a.runner_only:
        try:
            rows = runner_only(a.model, [int(x) for x in a.servers.split(",")], work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        md = [f"# Runners alone on prebuilt kernels ({a.model})", "",
              f"CPU: {lscpu()}, {os.cpu_count()} vCPUs; one TVM thread per runner; every job compiled once first "
              f"({rows[0]['build_s']:.0f} s, 2 compiler processes); default timing protocol.", "",
              "| runner | jobs | timed ok | runner wall s | speed-up |", "|---|---|---|---|---|"]
        for r in rows:
            name = "local (load probe)" if r["servers"] == 0 else f"rpc x{r['servers']}"
            md.append(f"| {name} | {r['jobs']} | {r['ok']} | {r['run_s']:.1f} | {rows[0]['run_s'] / r['run_s']:.2f} |")
        save(f"rpc-runners-{a.model}", "\n".join(md) + "\n", {"cpu": lscpu(), "rows": rows})
        return 0
    try:
        for n in (int(x) for x in a.servers.split(",")):
            print(f"--- {'local runner' if n == 0 else f'{n} RPC server(s)'}", flush=True)
            rows.append(one(a.model, n, a.runs, work))
            print({k: v for k, v in rows[-1].items() if k != "assignment"}, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0]
    same = {r["servers"]: sum(r["assignment"][k] == base["assignment"][k] for k in base["assignment"])
            for r in rows}
    md = [f"# Measurement wall time: local runner and RPC servers ({a.model})", "",
          f"CPU: {lscpu()}, {os.cpu_count()} vCPUs; one TVM thread per runner; fresh record store each; "
          f"builder: 2 compiler processes.", "",
          "| runner | jobs | measure s | speed-up | waiting for the builder s | in the runner s | predicted ms | "
          "end to end ms | layers as the first row |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = "local" if r["servers"] == 0 else f"rpc x{r['servers']}"
        md.append(f"| {name} | {r['jobs']} | {r['measure_s']:.1f} | {base['measure_s'] / r['measure_s']:.2f} | "
                  f"{r['build_wait_s']:.1f} | {r['run_s']:.1f} | {r['predicted_ms']:.3f} | {r['measured_ms']:.3f} | "
                  f"{same[r['servers']]}/{len(base['assignment'])} |")
    save(f"rpc-scale-{a.model}", "\n".join(md) + "\n", {"cpu": lscpu(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
