"""Measure jobs: the record store first, then the builder (``measure.builder``) and a runner
(``measure.local`` on this machine, ``measure.rpc`` on devices behind a TVM RPC tracker), in
batches; for a remote runner the builder works one batch ahead. Every record is written as it
arrives, so an interrupted run keeps what it measured."""
from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from .builder import Builder
from .jobs import Artifact, Job, NumericalError, TimingConfig, last_line
from .local import LocalRunner, LoadProbe, confirmed, drifted, stale
from .store import Context, Measurement, RecordStore

log = logging.getLogger(__name__)


def measure(jobs: list[Job], *, target, ctx: Context, store: RecordStore, timing: TimingConfig = TimingConfig(),
            progress: Callable[[int, int, str], None] | None = None, batch: int = 48, workers: int = 1,
            probe: LoadProbe | None = None, retime: bool = True, runner=None,
            cc: str | None = None, clock: dict | None = None, kernels=None,
            builder: Builder | None = None, known: dict | None = None) -> dict[tuple[str, str], Measurement]:
    """Measure ``jobs`` not already in ``store``; return a Measurement per (workload, candidate).

    ``runner``: where kernels run (default: a :class:`~measure.local.LocalRunner` guarded by
    ``probe``, a :class:`~measure.local.LoadProbe`); ``cc``: the C compiler that links the
    kernels (a cross compiler for another architecture). ``retime`` re-times stored records that
    :func:`~measure.local.stale` rejects (needs the probe's quiet time). With a remote runner the
    next batch compiles while the devices time this one. ``clock`` (a dict) gets the seconds
    spent waiting for the builder (``build_s``) and in the runner (``run_s``). ``kernels``: the folder
    where each compiled kernel's object file is kept for network builds (``measure.kernels``).
    ``builder``: a :class:`~measure.builder.Builder` made for ``runner`` to use (and leave open), so
    that several calls share its compiler processes; by default one is made and closed here.
    ``known``: (workload, candidate) -> Measurement taken before (by an earlier call), which a
    local runner's racing compares with."""
    runner = runner if runner is not None else LocalRunner(probe)
    probe = getattr(runner, "probe", None)
    known = known or {}
    out: dict[tuple[str, str], Measurement] = {}
    todo = []
    old: dict = {}           # records found but re-timed
    seen = set()
    quiet = probe.quiet_ms if probe is not None and math.isfinite(probe.quiet_ms) else None
    now = getattr(probe, "own_ms", None)           # the machine now (None: no reading)
    for j in jobs:
        key = (j.workload, j.candidate)
        if key in seen:        # layers sharing a workload share its measurements
            continue
        seen.add(key)
        rec = store.get(ctx, *key, j.version)
        if rec is not None and not (retime and stale(rec, quiet, now)):
            out[key] = rec
        else:
            todo.append(j)
            if rec is not None:
                old[key] = rec
    total = len(seen)
    done = total - len(todo)
    if progress:
        progress(done, total, f"{done} reused from the record store")

    def finish(j: Job, m: Measurement, what: str, keep: bool) -> None:
        nonlocal done
        m = confirmed(m, old.get(j.key))
        if keep:
            store.put(ctx, m)
        out[j.key] = m
        done += 1
        if progress:
            progress(done, total, what)

    # what this call built and timed, kept for the re-timing before it ends (below), which then
    # times them again without making and compiling them again (a fresh ResNet-18 re-timed 22
    # kernels that way: 7 s of compiling); their checks are not kept (their outputs were checked)
    kept: OrderedDict = OrderedDict() if probe is not None and retime else None

    def build(builder, chunk):
        """(artifacts, failures, build seconds) of one batch. Each job's PrimFuncs are made here,
        the slowest to compile first (no long tail), and handed to the compiler processes at once,
        so they compile while the next job's PrimFuncs and this one's check are made. A job in
        ``kept`` is not built again."""
        t0 = time.perf_counter()
        again = [kept.pop(j.key) for j in chunk if kept is not None and j.key in kept]
        have = {a.job.key for a in again}
        chunk = [j for j in chunk if j.key not in have]
        made = []
        for j in sorted(chunk, key=compile_rank):
            try:
                fs = j.build()
                futs = builder.submit(fs)
                chk = j.check() if j.check is not None else None
                made.append((j, fs, futs, chk, None))
            except Exception as e:  # noqa: BLE001
                made.append((j, None, None, None, e))
        results = [(j, fs, [f.result() for f in futs] if futs is not None else None, chk, err)
                   for j, fs, futs, chk, err in made]
        share = (time.perf_counter() - t0) / max(1, len(chunk))
        arts, failed = [], []
        for j, fs, compiled, chk, err in results:
            if err is not None:
                failed.append((j, _failed(j, err, share)))
                continue
            arts.append(Artifact(j, fs, compiled, share, chk))
        return again + arts, failed, time.perf_counter() - t0

    own = builder is None
    if own:
        builder = Builder(target, workers, cc=cc, files=runner.files, keep=kernels)
    try:
        with ThreadPoolExecutor(1) as ahead:
            _run(todo, builder, ahead, runner, timing, batch, build, finish, done_so_far=lambda: done, clock=clock,
                 progress=progress, total=total, fastest=(lambda: _fastest(out, known)) if getattr(runner, "races", False) else None,
                 kept=kept)
            if probe is not None and retime:
                # the quiet time may have fallen since a record was taken: what this run took that the
                # run's final quiet time calls stale is taken again now, not left for the next run
                late = [j for j in todo if (m := out.get(j.key)) is not None and drifted(m, probe.quiet_ms)]
                if late:
                    log.info("re-timing %d record(s) taken while the machine ran slower than its final quiet time",
                             len(late))
                    for j in late:
                        old[j.key] = out.pop(j.key)
                    done -= len(late)
                    _run(late, builder, ahead, runner, timing, batch, build, finish, done_so_far=lambda: done,
                         clock=clock, progress=progress, total=total)
    finally:
        if own:
            builder.close()
    return out


def _run(todo, builder, ahead, runner, timing, batch, build, finish, *, done_so_far, clock, progress, total,
         fastest=None, kept=None):
    """Build and time ``todo`` in batches, each result through ``finish``; ``fastest()``: workload ->
    (cold, warm) of its fastest timed candidate so far, for a local runner's racing; ``kept`` (an
    OrderedDict): gets each timed job's artifact, without its check, up to :data:`KEEP` of them
    (the oldest dropped first)."""
    chunks = [todo[i:i + batch] for i in range(0, len(todo), batch)]
    nxt = ahead.submit(build, builder, chunks[0]) if chunks else None
    for i in range(len(chunks)):
        t0 = time.perf_counter()
        arts, failed, _ = nxt.result()
        if clock is not None:
            clock["build_s"] = clock.get("build_s", 0.0) + time.perf_counter() - t0
        # a remote runner's devices time this batch while the next one compiles here; a local
        # one times on this machine, so nothing else may run meanwhile
        nxt = ahead.submit(build, builder, chunks[i + 1]) if runner.remote and i + 1 < len(chunks) else None
        for j, m in failed:
            finish(j, m, f"{j.candidate} failed", False)
        if progress and arts:
            progress(done_so_far(), total, f"built {len(arts)} kernels, timing them")
        t0 = time.perf_counter()
        for a, res in runner.run(arts, timing, **({"best": fastest()} if fastest is not None else {})):
            j = a.job
            if isinstance(res, Measurement):
                finish(j, res, f"timed {j.candidate}" + (f" ({res.flag})" if res.flag else ""), True)
                if kept is not None:
                    kept[j.key] = replace(a, check=None)
                    while len(kept) > KEEP:
                        kept.popitem(last=False)
            elif isinstance(res, NumericalError):
                # deterministic for these weights: stored, so later runs do not rebuild it
                log.info("candidate %s on %s rejected: %s", j.candidate, j.workload, res)
                finish(j, Measurement(j.workload, j.candidate, math.inf, math.inf, str(res), a.build_s,
                                      res.rel_err, j.version), f"{j.candidate} rejected", True)
            else:
                # build and run failures are not stored: the next run (maybe with a fixed TVM) tries again
                finish(j, _failed(j, res, a.build_s), f"{j.candidate} failed", False)
        if clock is not None:
            clock["run_s"] = clock.get("run_s", 0.0) + time.perf_counter() - t0
        if nxt is None and i + 1 < len(chunks):
            nxt = ahead.submit(build, builder, chunks[i + 1])


KEEP = 512        # timed artifacts (loaded kernels) kept at most for a call's closing re-timing


def compile_rank(job: Job) -> int:
    """Sorts a batch's jobs slowest-to-compile first (Winograd by its tile, m=6 compiles in ~2 s
    on Zen 4, m=4 0.7 s, nchwc 0.2 s, a layout transform 0.05 s), so that the compiler processes
    do not wait on one long compile at the end of a batch. Order only: every job is compiled."""
    import re
    m = re.search(r"\bm=(\d+)", job.candidate) if job.candidate.startswith("winograd") else None
    return -(int(m.group(1)) if m else (1 if job.workload.startswith("conv2d ") else 0))


def _fastest(*groups) -> dict:
    """workload -> (fastest cold, fastest warm) over the finite measurements of ``groups``."""
    out: dict = {}
    for g in groups:
        for m in g.values():
            if m.ok and math.isfinite(m.cold_ms) and math.isfinite(m.warm_ms):
                c, w = out.get(m.workload, (math.inf, math.inf))
                out[m.workload] = (min(c, m.cold_ms), min(w, m.warm_ms))
    return out


def _failed(j: Job, e: BaseException, build_s: float) -> Measurement:
    msg = last_line(e)
    log.info("candidate %s on %s failed: %s", j.candidate, j.workload, msg)
    return Measurement(j.workload, j.candidate, math.inf, math.inf, msg, build_s, version=j.version)
