"""Every kernel of a built network timed where it runs: inside the network, between the kernels
that really precede and follow it.

The Relax VM calls an instrument before and after each call instruction (``set_instrument``);
ours stamps the clock, so each kernel call gets the interval between its two stamps. The hook
costs time of its own: a few microseconds per call in Python, part of it inside the interval
(the trip back from the hook into the VM and the argument conversion of the second call). So
networks are also timed without the hook, in the same interleaved rounds, and the hook's share
is taken out: the same ``overhead_ms`` from every kernel call, chosen so that the kernels plus
the VM's own builtins (allocation, shape checks, at their floor-corrected intervals) add up to
the plain network time. Rounds of short blocks, as in :mod:`graphselect.measure.e2e`; every
figure is the median over the quieter half of the rounds (:func:`quiet_rounds`), so a slow spell
of the machine moves few rounds and not the result.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..runtime import device_args

BUILTIN_PREFIX = "vm.builtin."


@dataclass(frozen=True)
class KernelCall:
    symbol: str          # the PrimFunc's symbol (conv kernels: "<layer>_<family>")
    ms: float            # per call, the hook's overhead removed


@dataclass(frozen=True)
class NetworkTiming:
    """One built network timed plainly and call by call."""
    e2e_ms: float                    # plain calls: median over rounds of block medians
    calls: tuple[KernelCall, ...]    # kernel calls in execution order (VM builtins excluded)
    builtin_ms: float                # the VM's builtins per network call
    overhead_ms: float               # taken out of every kernel call
    instrumented_ms: float           # a call with the hook on (for the record)
    rounds: int
    loaded_rounds: int = 0           # of the rounds kept, those the load probe found loaded when they began

    @property
    def loaded(self) -> bool:
        """Timed under load: more than a quarter of the kept rounds began while the probe said the
        machine was loaded (its waits used up). Such a timing is shown but not fitted."""
        return self.loaded_rounds * 4 > self.rounds

    @property
    def kernel_ms(self) -> float:
        return sum(c.ms for c in self.calls)


class _Recorder:
    """The instrument: one list of (symbol, ns) per network call."""

    def __init__(self):
        self.calls: list[list[tuple[str, int]]] = []
        self._t = 0

    def start(self):
        self.calls.append([])

    def __call__(self, func, symbol, before, ret, *args):
        if before:
            self._t = time.perf_counter_ns()
        else:
            self.calls[-1].append((symbol, time.perf_counter_ns() - self._t))
        return 0


def time_networks(executables: dict, x, *, rounds: int = 8, block: int = 5,
                  quiet: Callable[[], bool] | None = None, waits: int = 10, seconds: float = 0.0,
                  max_rounds: int = 40) -> dict[str, NetworkTiming]:
    """Time each executable (name -> Relax VM executable) on input ``x`` (an array, or one per
    input): ``rounds`` rounds (more, up to ``max_rounds``, while the session has run less than ``seconds``: small networks get
    many rounds for the price of a big one's few), each a plain block and an instrumented block
    of ``block`` calls per network (after one warm-up call each), networks in alternating order.
    ``quiet()`` (a load probe) is asked before each round; while it says the machine is loaded
    the round waits (half a second at a time, at most ``waits`` times in all)."""
    import tvm
    from tvm import relax
    from .affinity import pinned
    dev = tvm.cpu()
    xt = device_args(x, dev)
    plain, hooked, recs = {}, {}, {}
    for name, ex in executables.items():
        plain[name] = relax.VirtualMachine(ex, dev)["main"]
        vm = relax.VirtualMachine(ex, dev)
        recs[name] = _Recorder()
        vm.set_instrument(recs[name])
        hooked[name] = vm["main"]
    e2e = {n: [] for n in executables}
    inst = {n: [] for n in executables}
    per_round: dict[str, list[list[list[float]]]] = {n: [] for n in executables}   # round -> call -> positions
    names = list(executables)
    loaded: list[bool] = []              # per round: began while the probe said loaded
    with pinned():        # the calling thread off the pool workers' cores (measure.affinity)
        t_start = time.perf_counter()
        r = -1
        while True:
            r += 1
            if r >= max(rounds, 1) and (r >= max_rounds or time.perf_counter() - t_start >= seconds):
                break
            state = None
            if quiet is not None:      # asked every round, waits used up or not: a loaded round is known
                state = quiet()
                while not state and waits > 0:
                    waits -= 1
                    time.sleep(0.5)
                    state = quiet()
            loaded.append(state is False)
            for n in (names if r % 2 == 0 else names[::-1]):
                f = plain[n]
                f(*xt)
                ts = []
                for _ in range(block):
                    t = time.perf_counter()
                    f(*xt)
                    ts.append((time.perf_counter() - t) * 1e3)
                e2e[n].append(float(np.median(ts)))
                g, rec = hooked[n], recs[n]
                rec.start()
                g(*xt)                                     # warm-up, discarded
                rec.calls.clear()
                ts = []
                for _ in range(block):
                    rec.start()
                    t = time.perf_counter()
                    g(*xt)
                    ts.append((time.perf_counter() - t) * 1e3)
                inst[n].append(float(np.median(ts)))
                per_round[n].append([[ns / 1e6 for _, ns in call] for call in rec.calls])
                symbols = [s for s, _ in rec.calls[0]]
                recs[n].symbols = symbols
                rec.calls.clear()
    keep = quiet_rounds(e2e)
    n_loaded = sum(1 for r in keep if loaded[r])
    return {n: replace(_summarize(recs[n].symbols, [per_round[n][r] for r in keep], [e2e[n][r] for r in keep],
                                  [inst[n][r] for r in keep]), loaded_rounds=n_loaded) for n in names}


def quiet_rounds(e2e: dict[str, list[float]]) -> list[int]:
    """The quieter half of the rounds: a round's state is the median over networks of its time
    relative to that network's median round; rounds at or below the median state are kept (the
    VM slows every network together for seconds at a time)."""
    names = list(e2e)
    n = len(e2e[names[0]])
    rel = {k: np.asarray(v) / np.median(v) for k, v in e2e.items()}
    state = np.array([np.median([rel[k][r] for k in names]) for r in range(n)])
    cut = np.median(state)
    return [r for r in range(n) if state[r] <= cut]


def _summarize(symbols, rounds, e2e, inst) -> NetworkTiming:
    n_pos = len(symbols)
    per_pos = np.array([[np.median([call[p] for call in calls]) for p in range(n_pos)] for calls in rounds])
    med = np.median(per_pos, axis=0)                     # per call position, median over rounds
    e2e_ms = float(np.median(e2e))
    builtin = [p for p, s in enumerate(symbols) if s.startswith(BUILTIN_PREFIX)]
    kernels = [p for p, s in enumerate(symbols) if not s.startswith(BUILTIN_PREFIX)]
    floor = float(min(med[builtin])) if builtin else 0.0          # the hook's own cost inside an interval
    builtin_ms = float(sum(max(0.0, med[p] - floor) for p in builtin))
    raw = float(sum(med[p] for p in kernels))
    overhead = max(0.0, (raw + builtin_ms - e2e_ms) / len(kernels)) if kernels else 0.0
    calls = tuple(KernelCall(symbols[p], max(0.0, float(med[p]) - overhead)) for p in kernels)
    return NetworkTiming(e2e_ms, calls, builtin_ms, overhead, float(np.median(inst)), len(rounds))
