"""Time kernels on this machine with TVM's ``time_evaluator``.

Cold timing flushes every argument but the first (the input) from the cache before each run:
weights cold, input warm, as in a running network whose weights do not stay in cache. The flush
happens once per repeat, so cold timing uses ``number=1`` and many repeats. Kernels are timed in
interleaved rounds (each round visits every kernel) and each result is the median over rounds,
so a burst of noise on this shared machine hits all candidates alike.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .store import Context, Measurement, RecordStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """Real inputs for a single-kernel job and the output it must produce."""
    inputs: list                   # numpy arrays, one per kernel parameter but the output
    expected: np.ndarray           # in the kernel's output layout
    tolerance: float               # max relative error (to the output's scale) before rejection


@dataclass(frozen=True)
class Job:
    workload: str
    candidate: str
    build: Callable[[], list]      # -> the scheduled PrimFuncs whose times add up to this job's cost
    check: Callable[[], Check] | None = None


class NumericalError(Exception):
    """A kernel ran but its result is too far from the reference: a deterministic rejection."""

    def __init__(self, rel_err: float, tolerance: float):
        super().__init__(f"numerical error {rel_err:.2e} exceeds the tolerance {tolerance:.0e}")
        self.rel_err = rel_err


@dataclass(frozen=True)
class TimingConfig:
    rounds: int = 3
    cold_repeat: int = 20          # per round; number=1 each
    warm_number: int = 10
    warm_repeat: int = 2           # per round


def _random_args(func, dev, rng):
    import tvm
    args = []
    for p in func.params:
        buf = p.ty                     # TVM 0.27: parameters carry their buffer type
        shape = [int(s) for s in buf.shape]
        args.append(tvm.runtime.tensor(rng.standard_normal(shape).astype(str(buf.dtype)), dev))
    return args


def _compile(func, target):
    import tvm
    func = func.with_attr("global_symbol", "main")
    return tvm.compile(tvm.IRModule({"main": func}), target=target)


def _build_and_check(j: Job, target, dev, rng):
    """Compile a job's kernels, run each once, and compare with the reference when it has one."""
    import tvm
    kernels = []
    rel = None
    funcs = j.build()
    chk = j.check() if j.check is not None else None
    if chk is not None and len(funcs) != 1:
        raise ValueError("a checked job must build exactly one kernel")
    for f in funcs:
        ex = _compile(f, target)
        args = _random_args(f, dev, rng)
        if chk is not None:
            args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in chk.inputs] + [args[-1]]
        ex["main"](*args)             # also catches kernels that crash on first run
        if chk is not None:
            got = args[-1].numpy()
            rel = float(np.abs(got - chk.expected).max() / max(float(np.abs(chk.expected).max()), 1e-30))
            if not rel <= chk.tolerance:
                raise NumericalError(rel, chk.tolerance)
        kernels.append((ex, args))
    return kernels, rel


def measure(jobs: list[Job], *, target, ctx: Context, store: RecordStore, timing: TimingConfig = TimingConfig(),
            progress: Callable[[int, int, str], None] | None = None, batch: int = 48) -> dict[tuple[str, str], Measurement]:
    """Measure ``jobs`` not already in ``store``; return a Measurement per (workload, candidate)."""
    import tvm
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    out: dict[tuple[str, str], Measurement] = {}
    todo = []
    seen = set()
    for j in jobs:
        key = (j.workload, j.candidate)
        if key in seen:        # layers sharing a workload share its measurements
            continue
        seen.add(key)
        rec = store.get(ctx, *key)
        if rec is not None:
            out[key] = rec
        else:
            todo.append(j)
    total = len(seen)
    done = total - len(todo)
    if progress:
        progress(done, total, f"{done} reused from the record store")
    for start in range(0, len(todo), batch):
        built = []        # (job, [(runtime module, args)], build seconds)
        for j in todo[start:start + batch]:
            t0 = time.perf_counter()
            try:
                kernels, rel = _build_and_check(j, target, dev, rng)
                built.append((j, kernels, time.perf_counter() - t0, rel))
            except NumericalError as e:
                # deterministic for these weights: stored, so later runs do not rebuild it
                m = Measurement(j.workload, j.candidate, math.inf, math.inf, str(e), time.perf_counter() - t0,
                                e.rel_err)
                log.info("candidate %s on %s rejected: %s", j.candidate, j.workload, e)
                store.put(ctx, m)
                out[(j.workload, j.candidate)] = m
                done += 1
                if progress:
                    progress(done, total, f"{j.candidate} rejected")
            except Exception as e:  # noqa: BLE001 - a failing candidate is a value, not a crash
                msg = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
                log.info("candidate %s on %s failed: %s", j.candidate, j.workload, msg)
                # build failures are not stored: the next run (maybe with a fixed TVM) tries again
                m = Measurement(j.workload, j.candidate, math.inf, math.inf, msg, time.perf_counter() - t0)
                out[(j.workload, j.candidate)] = m
                done += 1
                if progress:
                    progress(done, total, f"{j.candidate} failed")
            else:
                if progress:
                    progress(done, total, f"built {j.candidate}")
        cold = {id(b): [] for b in built}
        warm = {id(b): [] for b in built}
        for _ in range(timing.rounds):
            for b in built:
                _, kernels, _, _ = b
                c = w = 0.0
                for ex, args in kernels:
                    fc = ex.mod.time_evaluator("main", dev, number=1, repeat=timing.cold_repeat,
                                               f_preproc="cache_flush_cpu_non_first_arg")
                    fw = ex.mod.time_evaluator("main", dev, number=timing.warm_number, repeat=timing.warm_repeat)
                    c += float(np.median(fc(*args).results))
                    w += float(np.median(fw(*args).results))
                cold[id(b)].append(c * 1e3)
                warm[id(b)].append(w * 1e3)
        for b in built:
            j, _, bs, rel = b
            m = Measurement(j.workload, j.candidate, float(np.median(cold[id(b)])), float(np.median(warm[id(b)])),
                            None, bs, rel)
            store.put(ctx, m)
            out[(j.workload, j.candidate)] = m
            done += 1
            if progress:
                progress(done, total, f"timed {j.candidate}")
    return out
