"""End-to-end timing of whole networks, TVM and onnxruntime in one process.

Each runtime's idle worker threads keep spinning for a while after a call and steal the cores
from the other, so single calls are never alternated: each function runs a block of calls (after
a warm-up call), and when the runtime changes from one block to the next the pause before the
block outlasts the previous runtime's spinning. TVM's worker, with the spin count graphselect
sets (``graphselect.SPIN_COUNT``), keeps spinning for about 0.55 s after a call on this machine
(0.17 s with TVM's default); onnxruntime timed in its wake ran 3-4x slow.

The machine itself switches state: on the shared 2-core VM this was written on, every network
ran 1.5-1.9x slower for stretches of seconds to minutes (the last-level cache taken by a
neighbour; a pure-compute loop on either core kept its speed), and back. So blocks are short
and come in many rounds, each round visiting every function (in alternating order), and
functions are compared round by round: :meth:`Rounds.ratio` is the median over rounds of the
ratio of block medians, which a change of state between rounds does not move.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


WARMUP_S = 0.01      # a block warms up for at least this long (small networks: many calls)


def time_calls(fn: Callable[[], object], runs: int, warmup: int = 2, warmup_s: float = 0.0) -> list[float]:
    """Per-call ms of ``runs`` calls after ``warmup`` calls, and more warm-up calls (up to 200)
    until ``warmup_s`` has passed: after a pause the caches and the workers of a 30 us network
    need more than one call to come back."""
    from .affinity import pinned
    with pinned():        # the calling thread off the pool workers' cores (measure.affinity)
        return _calls(fn, runs, warmup, warmup_s)


def _calls(fn: Callable[[], object], runs: int, warmup: int, warmup_s: float) -> list[float]:
    """:func:`time_calls` where the caller has pinned the thread already (:func:`compare`)."""
    t0 = time.perf_counter()
    n = 0
    while n < warmup or (time.perf_counter() - t0 < warmup_s and n < 200):
        fn()
        n += 1
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


PAUSE_S = 1.0        # idle before a block whose runtime differs from the previous block's
BLOCK_CALLS = 5      # calls per block; runs // BLOCK_CALLS rounds (at least 3)


@dataclass(frozen=True)
class Rounds:
    """Per-call milliseconds of several functions timed in interleaved rounds:
    ``ms[name][r]`` holds the calls of round ``r``; ``state[r]``, when given, what the state
    probe read as round ``r`` began (the thread pool's hand-off, us per kernel call)."""
    ms: dict[str, list[list[float]]]
    state: tuple[float, ...] | None = None

    def by_state(self, cut: float) -> tuple[list[int], list[int]]:
        """The rounds whose state reading was at or below ``cut``, and the others."""
        st = self.state or ()
        return [r for r, v in enumerate(st) if v <= cut], [r for r, v in enumerate(st) if v > cut]

    def calls(self, name: str) -> list[float]:
        return [t for block in self.ms[name] for t in block]

    def median(self, name: str) -> float:
        return median(self.calls(name))

    def ratio(self, name: str, reference: str, rounds=None) -> float:
        """Median over rounds (all, or those indexed by ``rounds``) of (block median of ``name``) /
        (block median of ``reference``): > 1 when ``name`` is slower."""
        pairs = list(zip(self.ms[name], self.ms[reference]))
        if rounds is not None:
            pairs = [pairs[r] for r in rounds]
        return median([median(a) / median(b) for a, b in pairs])

    def fastest(self, names) -> str:
        """The function with the smallest median over rounds of its block median relative to the
        round's fastest block."""
        names = list(names)
        rel = {n: [] for n in names}
        for r in range(len(self.ms[names[0]])):
            meds = {n: median(self.ms[n][r]) for n in names}
            best = min(meds.values())
            for n in names:
                rel[n].append(meds[n] / best)
        return min(names, key=lambda n: (median(rel[n]), self.median(n)))


def compare(fns: dict[str, Callable[[], object]], *, runs: int = 30, block: int = BLOCK_CALLS,
            pause: float = PAUSE_S, quiet: Callable[[], bool] | None = None, waits: int = 20,
            seconds: float = 0.0, max_rounds: int = 40, warmup_s: float = WARMUP_S,
            state: Callable[[], float] | None = None) -> Rounds:
    """Time every function ``runs`` times (at least): rounds of one ``block``-call block per
    function, the order reversed every other round. ``pause`` seconds idle come before the first
    block and before every block whose runtime is not the previous block's: a function's
    ``runtime`` attribute names it (``vm_runner``: "tvm", ``ort_runner``: "onnxruntime"; functions
    of one runtime share its threads), and a function without one is its own runtime. With
    ``quiet`` (a load probe), each round waits while it says the machine is loaded (half a second
    at a time, ``waits`` times at most in all). More rounds follow, up to ``max_rounds``, while
    the timing (pauses not counted) has taken less than ``seconds``. Each block warms up with one
    call and more until ``warmup_s`` has passed (:func:`time_calls`). A function with a
    ``time_block(runs, warmup=, warmup_s=)`` method (a runtime in another process, which times
    its own calls) is asked for its block's per-call times instead. ``state`` (e.g.
    ``measure.peak.HandoffProbe``, a TVM kernel like the load probe) is read as each round begins,
    after the load probe: ``Rounds.state``."""
    rounds = max(3, -(-runs // block))
    per = max(1, -(-runs // rounds))
    out: dict[str, list[list[float]]] = {k: [] for k in fns}
    names = list(fns)
    runtime = {k: getattr(f, "runtime", k) for k, f in fns.items()}
    states: list[float] = []
    from .affinity import pinned
    with pinned():        # the calling thread off the pool workers' cores (measure.affinity)
        last = None
        timed = 0.0
        r = -1
        while True:
            r += 1
            if r >= rounds and (r >= max(rounds, max_rounds) or timed >= seconds):
                break
            if quiet is not None:
                while not quiet() and waits > 0:
                    waits -= 1
                    time.sleep(0.5)
                last = "tvm"          # the probe is a TVM kernel: its workers spin like a network's
            if state is not None:
                states.append(float(state()))
                last = "tvm"
            for k in (names if r % 2 == 0 else names[::-1]):
                if runtime[k] != last:
                    time.sleep(pause)
                last = runtime[k]
                t0 = time.perf_counter()
                block_timer = getattr(fns[k], "time_block", None)
                out[k].append(block_timer(per, warmup=1, warmup_s=warmup_s) if block_timer is not None
                              else _calls(fns[k], per, 1, warmup_s))
                timed += time.perf_counter() - t0
    return Rounds(out, tuple(states) if state is not None else None)


def median(ts: list[float]) -> float:
    return float(np.median(ts)) if ts else float("nan")


def vm_runner(executable, x):
    """A zero-argument callable running the compiled network on ``x`` (an array, or one per
    input; result synchronised)."""
    import tvm
    from tvm import relax
    from ..runtime import device_args
    dev = tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    xt = device_args(x, dev)
    f = vm["main"]
    return _tagged(lambda: f(*xt), "tvm")


def vm_user_runner(executable, x):
    """Like :func:`vm_runner`, but what a user's call costs: the numpy inputs copied into the
    VM's input tensors and every output copied back to numpy on every call (``runtime.Caller``,
    what ``OptimizeResult.run`` calls)."""
    import tvm
    from tvm import relax
    from ..runtime import Caller
    caller = Caller(relax.VirtualMachine(executable, tvm.cpu()))
    return _tagged(lambda: caller(x), "tvm")


def ort_session(model_bytes: bytes, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def ort_runner(sess, feed: dict):
    """A zero-argument callable running an onnxruntime session on ``feed`` (input name -> array)."""
    return _tagged(lambda: sess.run(None, feed), "onnxruntime")


def _tagged(fn, runtime: str):
    fn.runtime = runtime
    return fn
