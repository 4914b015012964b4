"""Build kernels in worker processes and time them on this machine with TVM's ``time_evaluator``.

Building: each job's PrimFuncs are made here (TE and schedule: milliseconds) and compiled in
``workers`` processes in parallel (LLVM: up to seconds per Winograd kernel), each to a shared
library; a compiler that fails, crashes or hangs makes a failed measurement, not a dead run.
Only the library file comes back. No timing happens while the workers compile.

Timing: cold timing flushes every argument but the first (the input) from the cache before
each run: weights cold, input warm, as in a running network whose weights do not stay in cache.
The flush happens once per repeat, so cold timing uses ``number=1`` and many repeats. Kernels
are timed in interleaved rounds (each round visits every kernel) and each result is the median
over rounds, so a burst of noise on this shared machine hits all candidates alike.

Load: before each sample a fixed reference kernel is timed (:class:`LoadProbe`); a sample taken
while the reference runs more than ``LOAD_TOLERANCE`` times its quiet time is dropped and taken
again later (a slow spell on this VM lasts seconds). A record whose samples could not be taken
quiet, or whose warm time is well above its cold time, is stored with a ``flag`` and re-timed
by the next run; the reference's time is stored with every record, so a record is also re-timed
when a quieter reference time turns up later.
"""
from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .store import Context, Measurement, RecordStore

log = logging.getLogger(__name__)

LOAD_TOLERANCE = 1.1       # reference kernel slower than this x its quiet time: the machine is loaded
# a stored record is re-timed when the reference ran this much slower while it was taken than the
# quietest reference time known now (looser than LOAD_TOLERANCE: the reference itself varies by
# ~10% between quiet moments, and a record re-timed on every run would cost more than it fixes)
STALE_TOLERANCE = 1.3
LOAD_FLAG = "timed under load"
EXTRA_PASSES = 8           # passes beyond TimingConfig.rounds to get quiet samples
COMPILE_TIMEOUT_S = 300.0  # one kernel's compile; beyond it the compiler is taken as hung
REFERENCE = ("graphselect reference kernel", "nchwc 64->64 3x3/1 28x28 bias+relu")


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
    version: str = ""              # the version of the code build() runs (part of the record key)

    @property
    def key(self) -> tuple[str, str]:
        return (self.workload, self.candidate)


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
    return tvm.compile(tvm.IRModule({"main": func}), target=target).mod


class _Dead(Exception):
    """The compiler process exited."""


class _Worker:
    """One compiler process (``measure.compile_worker``) and its line protocol."""
    COMMAND = ("-m", "graphselect.measure.compile_worker")     # after the interpreter

    def __init__(self):
        import subprocess
        import sys
        self.proc = subprocess.Popen([sys.executable, *self.COMMAND],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1, env={**os.environ, "TVM_NUM_THREADS": "1"})

    def request(self, func_path: str, target: dict, out: str, timeout: float) -> str:
        import json
        import select
        from .compile_worker import MARK
        try:
            self.proc.stdin.write(json.dumps({"func": func_path, "target": target, "out": out}) + "\n")
            self.proc.stdin.flush()
        except OSError:                  # the process is gone (broken pipe)
            raise _Dead() from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FutureTimeout()
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                raise _Dead()
            if line.startswith(MARK):
                answer = json.loads(line[len(MARK):])
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                return answer["ok"]

    def close(self):
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            pass


def _plain(v):
    """A TVM Map/Array (a target's export) as JSON-able Python."""
    if hasattr(v, "items"):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    try:
        return [_plain(x) for x in v]
    except TypeError:
        return str(v)


class Builder:
    """Compiles PrimFuncs to runtime modules: in ``workers`` compiler processes when more than
    one (each to a shared library that is then loaded here), else in this process."""

    def __init__(self, target, workers: int = 1):
        self.target = target
        self.workers = workers if target is not None else 1
        self._free = None
        self._all: list[_Worker] = []
        self._dir = None
        self._n = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for w in self._all:
            w.close()
        self._all = []
        self._free = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def _start(self):
        import queue
        if self._free is None:
            self._dir = tempfile.TemporaryDirectory(prefix="graphselect-build-")
            self._free = queue.Queue()
            for _ in range(self.workers):
                w = _Worker()
                self._all.append(w)
                self._free.put(w)

    def _one(self, func, target: dict):
        import tvm
        self._n += 1
        base = os.path.join(self._dir.name, f"k{self._n}")
        with open(base + ".json", "w") as f:
            f.write(tvm.ir.save_json(func))
        for attempt in range(2):          # a process that died is replaced and the kernel tried once more
            w = self._free.get()
            if w.proc.poll() is not None:   # found dead before use: replace it, no attempt spent
                w = self._replace(w)
            try:
                path = w.request(base + ".json", target, base + ".so", COMPILE_TIMEOUT_S)
                self._free.put(w)
                return tvm.runtime.load_module(path)
            except (FutureTimeout, _Dead) as e:
                self._free.put(self._replace(w))      # hung or dead: a fresh process takes its place
                if isinstance(e, FutureTimeout):
                    return RuntimeError(f"the compiler did not finish within {COMPILE_TIMEOUT_S:.0f} s")
            except RuntimeError as e:
                self._free.put(w)
                return e
        return RuntimeError("the compiler process crashed (twice)")

    def _replace(self, w: _Worker) -> _Worker:
        w.close()
        fresh = _Worker()
        self._all.append(fresh)
        return fresh

    def compile_all(self, funcs: list) -> list:
        """Runtime module or the exception, per PrimFunc (in order)."""
        if self.workers <= 1:
            out = []
            for f in funcs:
                try:
                    out.append(_compile(f, self.target))
                except Exception as e:  # noqa: BLE001 - a failing compile is a value
                    out.append(e)
            return out
        from concurrent.futures import ThreadPoolExecutor
        self._start()
        target = _plain(self.target.export())
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda f: self._one(f, target), funcs))


class LoadProbe:
    """Times a fixed reference kernel (a 64-channel 3x3 conv on 28x28, ~0.1 ms): its time
    against the quietest seen says whether the machine is loaded right now."""

    def __init__(self, target, quiet_ms: float | None = None):
        import tvm
        from ..candidates import nchwc
        from ..graph.layers import ConvSpec
        spec = ConvSpec(1, 64, 28, 28, 64, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, clip_lo=0.0)
        cand = next(c for c in nchwc.propose(spec) if c.param("ic_bn") == 16 and c.param("oc_bn") == 16)
        func = nchwc.build(cand, spec, target, "main")
        dev = tvm.cpu()
        mod = _compile(func, target)
        args = _random_args(func, dev, np.random.default_rng(1))
        self._f = mod.time_evaluator("main", dev, number=3, repeat=3)
        self._args = args
        mod["main"](*args)
        self.stored_ms = quiet_ms if quiet_ms and quiet_ms > 0 else math.inf
        self.readings: list[float] = []
        for _ in range(10):
            self.time()

    @property
    def quiet_ms(self) -> float:
        """The quiet time: the stored one, or this run's lower decile if lower (a robust floor:
        the single fastest reading is an outlier that would call every later reading loaded)."""
        r = sorted(self.readings)
        mine = r[len(r) // 10] if len(r) >= 10 else (r[0] if r else math.inf)
        return min(self.stored_ms, mine)

    def time(self) -> float:
        ms = float(min(self._f(*self._args).results)) * 1e3      # min of 3: a lone spike is not load
        self.readings.append(ms)
        return ms

    def loaded(self, ms: float) -> bool:
        return ms > LOAD_TOLERANCE * self.quiet_ms

    def quiet(self) -> bool:
        """Times the reference now: True when the machine is not loaded."""
        return not self.loaded(self.time())


def stale(m: Measurement, quiet_ms: float | None) -> bool:
    """Whether a stored record must be re-timed: flagged when taken, or taken while the reference
    kernel ran slower than the tolerance allows against the quietest time known now."""
    if m.flag and m.flag.startswith(LOAD_FLAG):
        return True
    return bool(quiet_ms) and m.ok and m.load > 0 and m.load > STALE_TOLERANCE * quiet_ms


def _build_and_check(j: Job, builder: Builder, dev, rng, compiled=None):
    """Compile a job's kernels, run each once, and compare with the reference when it has one."""
    import tvm
    kernels = []
    rel = None
    funcs = j.build()
    chk = j.check() if j.check is not None else None
    if chk is not None and len(funcs) != 1:
        raise ValueError("a checked job must build exactly one kernel")
    mods = compiled if compiled is not None else builder.compile_all(funcs)
    for f, mod in zip(funcs, mods):
        if isinstance(mod, Exception):
            raise mod
        args = _random_args(f, dev, rng)
        if chk is not None:
            args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in chk.inputs] + [args[-1]]
        mod["main"](*args)             # also catches kernels that crash on first run
        if chk is not None:
            got = args[-1].numpy()
            rel = float(np.abs(got - chk.expected).max() / max(float(np.abs(chk.expected).max()), 1e-30))
            if not rel <= chk.tolerance:
                raise NumericalError(rel, chk.tolerance)
        kernels.append((mod, args))
    return kernels, rel


def _sample(kernels, dev, timing: TimingConfig) -> tuple[float, float]:
    c = w = 0.0
    for mod, args in kernels:
        fc = mod.time_evaluator("main", dev, number=1, repeat=timing.cold_repeat,
                                f_preproc="cache_flush_cpu_non_first_arg")
        fw = mod.time_evaluator("main", dev, number=timing.warm_number, repeat=timing.warm_repeat)
        c += float(np.median(fc(*args).results))
        w += float(np.median(fw(*args).results))
    return c * 1e3, w * 1e3


def _suspicious_warm(cold: float, warm: float) -> bool:
    return warm > 1.25 * cold + 2e-3


def measure(jobs: list[Job], *, target, ctx: Context, store: RecordStore, timing: TimingConfig = TimingConfig(),
            progress: Callable[[int, int, str], None] | None = None, batch: int = 48, workers: int = 1,
            probe: LoadProbe | None = None, retime: bool = True) -> dict[tuple[str, str], Measurement]:
    """Measure ``jobs`` not already in ``store``; return a Measurement per (workload, candidate).

    ``probe`` (a :class:`LoadProbe`) guards every sample against load; ``retime`` re-times
    stored records that :func:`stale` rejects (needs the probe's quiet time)."""
    import tvm
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    out: dict[tuple[str, str], Measurement] = {}
    todo = []
    seen = set()
    quiet = probe.quiet_ms if probe is not None and math.isfinite(probe.quiet_ms) else None
    for j in jobs:
        key = (j.workload, j.candidate)
        if key in seen:        # layers sharing a workload share its measurements
            continue
        seen.add(key)
        rec = store.get(ctx, *key, j.version)
        if rec is not None and not (retime and stale(rec, quiet)):
            out[key] = rec
        else:
            todo.append(j)
    total = len(seen)
    done = total - len(todo)
    if progress:
        progress(done, total, f"{done} reused from the record store")
    with Builder(target, workers) as builder:
        for start in range(0, len(todo), batch):
            chunk = todo[start:start + batch]
            built = []        # (job, [(runtime module, args)], build seconds, rel err)
            t0 = time.perf_counter()
            funcs, made = [], []
            for j in chunk:   # PrimFuncs here, compiled together below (in parallel)
                try:
                    fs = j.build()
                    made.append((j, fs, None))
                    funcs.extend(fs)
                except Exception as e:  # noqa: BLE001
                    made.append((j, None, e))
            mods = builder.compile_all(funcs)
            share = (time.perf_counter() - t0) / max(1, len(chunk))
            k = 0
            for j, fs, err in made:
                t1 = time.perf_counter()
                try:
                    if err is not None:
                        raise err
                    compiled = mods[k:k + len(fs)]
                    k += len(fs)
                    jj = replace(j, build=lambda fs=fs: fs)
                    kernels, rel = _build_and_check(jj, builder, dev, rng, compiled)
                    built.append((j, kernels, share + time.perf_counter() - t1, rel))
                except NumericalError as e:
                    # deterministic for these weights: stored, so later runs do not rebuild it
                    m = Measurement(j.workload, j.candidate, math.inf, math.inf, str(e), share, e.rel_err, j.version)
                    log.info("candidate %s on %s rejected: %s", j.candidate, j.workload, e)
                    store.put(ctx, m)
                    out[j.key] = m
                    done += 1
                    if progress:
                        progress(done, total, f"{j.candidate} rejected")
                except Exception as e:  # noqa: BLE001 - a failing candidate is a value, not a crash
                    msg = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
                    log.info("candidate %s on %s failed: %s", j.candidate, j.workload, msg)
                    # build failures are not stored: the next run (maybe with a fixed TVM) tries again
                    out[j.key] = Measurement(j.workload, j.candidate, math.inf, math.inf, msg, share,
                                             version=j.version)
                    done += 1
                    if progress:
                        progress(done, total, f"{j.candidate} failed")
            if progress and built:
                progress(done, total, f"built {len(built)} kernels, timing them")
            for m in _time_batch(built, dev, timing, probe):
                store.put(ctx, m)
                out[(m.workload, m.candidate)] = m
                done += 1
                if progress:
                    progress(done, total, f"timed {m.candidate}" + (f" ({m.flag})" if m.flag else ""))
    return out


def _time_batch(built, dev, timing: TimingConfig, probe: LoadProbe | None) -> list[Measurement]:
    """Interleaved rounds over the batch; with a probe, loaded samples are retaken."""
    samples = {id(b): [] for b in built}
    loads = {id(b): [] for b in built}        # the reference's time before each kept sample
    loaded = {id(b): [] for b in built}       # ... before each sample dropped for load
    passes = 0
    while True:
        need = [b for b in built if len(samples[id(b)]) < timing.rounds]
        if not need or passes >= timing.rounds + (EXTRA_PASSES if probe is not None else 0):
            break
        passes += 1
        any_quiet = False
        for b in need:
            ref = probe.time() if probe is not None else 0.0
            if probe is not None and probe.loaded(ref):
                loaded[id(b)].append(ref)
                continue
            any_quiet = True
            c, w = _sample(b[1], dev, timing)
            if _suspicious_warm(c, w) and len(samples[id(b)]) < timing.rounds + 2:
                c2, w2 = _sample(b[1], dev, timing)        # once more at once: a spike rarely repeats
                if w2 < w:
                    c, w = c2, w2
            samples[id(b)].append((c, w))
            loads[id(b)].append(ref)
        if probe is not None and not any_quiet:
            time.sleep(0.5)        # the whole pass was loaded: let the spell pass
    out = []
    for b in built:
        j, kernels, bs, rel = b
        ss = samples[id(b)]
        flag = None
        if len(ss) < timing.rounds:
            # could not get enough quiet samples: take what the loaded state gives, flagged
            extra = timing.rounds - len(ss)
            ss = ss + [_sample(kernels, dev, timing) for _ in range(extra)]
            loads[id(b)] += loaded[id(b)]
            flag = f"{LOAD_FLAG} (reference kernel {np.median(loaded[id(b)]) / probe.quiet_ms:.2f}x its quiet time)"
        cold = float(np.median([c for c, _ in ss]))
        warm = float(np.median([w for _, w in ss]))
        if flag is None and _suspicious_warm(cold, warm):
            flag = f"warm {warm:.4f} ms well above cold {cold:.4f} ms"
        load = float(np.median(loads[id(b)])) if loads[id(b)] and probe is not None else 0.0
        out.append(Measurement(j.workload, j.candidate, cold, warm, None, bs, rel, j.version, load, flag))
    return out
