"""The local runner: times built kernels on this machine with TVM's ``time_evaluator``.

Timing: cold timing flushes every argument but the first (the input) from the cache before
each run: weights cold, input warm, as in a running network whose weights do not stay in cache.
The flush happens once per repeat, so cold timing uses ``number=1`` and many repeats. Kernels
are timed in interleaved rounds (each round visits every kernel) and each result is the median
over rounds, so a burst of noise on this shared machine hits all candidates alike.

Load: before each sample a fixed reference kernel is timed (:class:`LoadProbe`); a sample taken
while the reference runs more than ``LOAD_TOLERANCE`` times its quiet time is dropped and taken
again later (a slow spell on this VM lasts seconds). A record whose samples could not be taken
quiet, or whose warm time is well above its cold time, is stored with a ``flag`` and re-timed
by the next run (warm above cold once more: the flag says so, and it stands); the reference's
time is stored with every record, so a record is also re-timed when the quiet time known later
is lower than ``STALE_TOLERANCE`` allows. The quiet time is the lower of this run's
floor and the previous run's (kept in the store under the reference's own code version), so it
can rise again when the machine's neighbours change instead of calling every later run loaded.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Iterator

import numpy as np

from .affinity import pinned
from .builder import compile_func
from .jobs import AGAIN, WARM_FLAG, Artifact, TimingConfig, arg_arrays, load_and_check, sample, suspicious_warm, warm_flag
from .store import Measurement

log = logging.getLogger(__name__)

LOAD_TOLERANCE = 1.1       # reference kernel slower than this x its quiet time: the machine is loaded
# a stored record is re-timed when the reference ran this much slower while it was taken than the
# quiet reference time known now: the same tolerance as for a sample. A sample is kept against the
# quiet time known at that moment, which can fall during a run; so each batch re-checks its
# samples against the quiet time at its end, and a run re-times once, before it ends, the records
# it took that the run's final quiet time calls stale (run.measure). Until 2026-12 this was 1.3,
# which kept records taken at 1.1-1.3x the quiet time for good.
STALE_TOLERANCE = LOAD_TOLERANCE
LOAD_FLAG = "timed under load"
EXTRA_PASSES = 8           # passes beyond TimingConfig.rounds to get quiet samples
REFERENCE = ("graphselect reference kernel", "nchwc 64->64 3x3/1 28x28 bias+relu")


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
        mod = compile_func(func, target)
        args = [tvm.runtime.tensor(x, dev) for x in arg_arrays(func, np.random.default_rng(1))]
        self._f = mod.time_evaluator("main", dev, number=3, repeat=3)
        self._args = args
        mod["main"](*args)
        self.stored_ms = quiet_ms if quiet_ms and quiet_ms > 0 else math.inf
        self.readings: list[float] = []
        with pinned():
            for _ in range(10):
                self.time()

    @property
    def own_ms(self) -> float:
        """This run's floor: the lower decile of its readings (a robust floor: the single fastest
        reading is an outlier that would call every later reading loaded)."""
        r = sorted(self.readings)
        return r[len(r) // 10] if len(r) >= 10 else (r[0] if r else math.inf)

    @property
    def quiet_ms(self) -> float:
        """The quiet time: the stored one, or this run's floor if lower."""
        return min(self.stored_ms, self.own_ms)

    def time(self) -> float:
        ms = float(min(self._f(*self._args).results)) * 1e3      # min of 3: a lone spike is not load
        self.readings.append(ms)
        return ms

    def loaded(self, ms: float) -> bool:
        return ms > LOAD_TOLERANCE * self.quiet_ms

    def quiet(self) -> bool:
        """Times the reference now: True when the machine is not loaded."""
        return not self.loaded(self.time())


def stale(m: Measurement, quiet_ms: float | None, now_ms: float | None = None) -> bool:
    """Whether a stored record must be re-timed: flagged when taken (under load, or warm well
    above cold unless a re-time confirmed it), or taken while the reference kernel ran slower
    than the tolerance allows against the quiet time known now and against ``now_ms``, the
    reference's time on the machine as it is now (a probe's floor): a record taken in a state no
    slower than the present one would come out no better timed again. A 2-vCPU Zen 4 VM swung
    between two states (reference 0.26 and 0.31-0.34 ms) within minutes; an unchanged rerun in the
    slow state re-timed 198 records taken in it, against a floor the quiet state had left, in 100 s."""
    if m.flag and (m.flag.startswith(LOAD_FLAG) or _unconfirmed_warm(m.flag)):
        return True
    return drifted(m, max(quiet_ms, now_ms) if quiet_ms and now_ms and math.isfinite(now_ms) else quiet_ms)


def drifted(m: Measurement, quiet_ms: float | None) -> bool:
    """Whether a record was taken while the reference kernel ran more than ``STALE_TOLERANCE``
    times the quiet time known now (the machine was slower then than it is quiet)."""
    return bool(quiet_ms) and m.ok and m.load > 0 and m.load > STALE_TOLERANCE * quiet_ms


def reference_version() -> str:
    """The reference kernel's version: its family's code and the timing protocol (a stored
    quiet time of another probe kernel or protocol is not this one's)."""
    from .. import candidates
    from . import protocol_version
    return f"{candidates.code_version('nchwc')}.{protocol_version()}"


def confirmed(new: Measurement, old: Measurement | None) -> Measurement:
    """``new``, its warm-above-cold flag marked as confirmed when the record it replaces had the
    same flag (the kernel's warm timing really is slower: re-timing it each run would not help)."""
    from dataclasses import replace
    if old is not None and old.flag and old.flag.startswith(WARM_FLAG) and _unconfirmed_warm(new.flag):
        return replace(new, flag=new.flag + AGAIN)
    return new


def _unconfirmed_warm(flag: str | None) -> bool:
    """A warm-above-cold flag that no re-time has repeated yet."""
    return bool(flag) and flag.startswith(WARM_FLAG) and not flag.endswith(AGAIN)




class LocalRunner:
    """Times artifacts (loaded modules) on this machine: each kernel run once and checked, then
    the batch in interleaved rounds, guarded by ``probe`` (a :class:`LoadProbe`) when given."""
    files = False              # takes loaded modules from the builder
    remote = False
    races = True               # run() takes best= (racing, see _time_batch)

    def __init__(self, probe: LoadProbe | None = None):
        import tvm
        self.probe = probe
        self.dev = tvm.cpu()
        self.rng = np.random.default_rng(0)

    def run(self, artifacts: list[Artifact], timing: TimingConfig, best=None) -> Iterator[tuple[Artifact, object]]:
        """(artifact, Measurement or the exception that stopped it), as each is done. ``best``:
        workload -> (cold, warm) of its fastest candidate timed before (what racing compares with)."""
        ready = []
        for a in artifacts:
            t0 = time.perf_counter()
            try:
                kernels, rel = load_and_check(a, self.dev, self.rng)
            except Exception as e:  # noqa: BLE001 - a failing candidate is a value
                yield a, e
                continue
            ready.append((a, kernels, a.build_s + time.perf_counter() - t0, rel))
        with pinned():         # the calling thread off the pool workers' cores (measure.affinity)
            done = _time_batch(ready, self.dev, timing, self.probe, best)
        yield from done


def _race(ready, kept, best, factor: float, raced: set) -> None:
    """Mark in ``raced`` the conv candidates of ``ready`` whose kept samples so far put them over
    ``factor`` times their workload's fastest, cold and warm (see :func:`_time_batch`)."""
    from .twins import twin_key
    now: dict = {}
    lead = {w: tuple(t) for w, t in best.items()}
    for b in ready:
        w = b[0].job.workload
        ss = kept(b)[0]
        if not ss or twin_key(w) is None:
            continue
        now[id(b)] = (w, float(np.median([x[0] for x in ss])), float(np.median([x[1] for x in ss])))
        c, wm = lead.get(w, (math.inf, math.inf))
        lead[w] = (min(c, now[id(b)][1]), min(wm, now[id(b)][2]))
    for key, (w, cold, warm) in now.items():
        c, wm = lead[w]
        if cold > factor * c and warm > factor * wm:
            raced.add(key)


def _time_batch(ready, dev, timing: TimingConfig, probe: LoadProbe | None,
                best=None) -> list[tuple[Artifact, Measurement]]:
    """Interleaved rounds over the batch, (artifact, kernels, build s, rel err) each; with a probe,
    loaded samples are retaken. Racing: after each pass, a conv candidate whose samples so far
    put it over ``timing.race`` times its workload's fastest (in this batch or ``best``, workload
    -> (cold, warm) timed before), cold and warm, is done: it cannot be chosen for its speed, and
    one round (its medians over the round's repeats) places it well enough for the layout
    trade-off."""
    samples = {id(b): [] for b in ready}
    raced: set = set()
    loads = {id(b): [] for b in ready}        # the reference's time before each kept sample
    loaded = {id(b): [] for b in ready}       # ... before each sample dropped for load
    passes = 0

    def kept(b):
        """The samples of ``b`` quiet by the quiet time known now (it may have fallen since)."""
        if probe is None:
            return samples[id(b)], loads[id(b)]
        ok = [i for i, ref in enumerate(loads[id(b)]) if not probe.loaded(ref)]
        return [samples[id(b)][i] for i in ok], [loads[id(b)][i] for i in ok]

    def rounds(b):
        return 1 if id(b) in raced else timing.rounds

    while True:
        need = [b for b in ready if len(kept(b)[0]) < rounds(b)]
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
            got = sample(b[1], dev, timing)
            if suspicious_warm(got[0], got[1]) and len(kept(b)[0]) < timing.rounds + 2:
                again = sample(b[1], dev, timing)        # once more at once: a spike rarely repeats
                if again[1] < got[1]:
                    got = again
            samples[id(b)].append(got)
            loads[id(b)].append(ref)
        if timing.race > 0:
            _race(ready, kept, best or {}, timing.race, raced)
        if probe is not None and not any_quiet:
            time.sleep(0.5)        # the whole pass was loaded: let the spell pass
    out = []
    for b in ready:
        a, kernels, bs, rel = b
        j = a.job
        ss, refs = kept(b)
        flag = None
        if len(ss) < rounds(b):
            # could not get enough quiet samples: take what the loaded state gives, flagged
            extra = rounds(b) - len(ss)
            late = [r for r in loads[id(b)] if r not in refs] + loaded[id(b)]
            ss = ss + [sample(kernels, dev, timing) for _ in range(extra)]
            refs = refs + late
            flag = f"{LOAD_FLAG} (reference kernel {np.median(late or [0.0]) / probe.quiet_ms:.2f}x its quiet time)"
        cold, warm, incold = (float(np.median([x[i] for x in ss])) for i in range(3))
        if flag is None:
            flag = warm_flag(cold, warm)
        load = float(np.median(refs)) if refs and probe is not None else 0.0
        out.append((a, Measurement(j.workload, j.candidate, cold, warm, None, bs, rel, j.version, load, flag,
                                   max(cold, incold))))
    return out
