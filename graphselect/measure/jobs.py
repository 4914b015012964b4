"""What a measurement is made of, shared by the builder, the runners and the plan: a job (the
kernels of one candidate on one workload), its numerical check, the timing protocol, and the
artifact the builder hands a runner."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Check:
    """Real inputs for a single-kernel job and the output it must produce."""
    inputs: list                   # numpy arrays, one per kernel parameter but the output
    expected: np.ndarray           # in the kernel's output layout
    tolerance: float               # max relative error (to the output's scale) before rejection
    # a fake-quantized output (a QDQ model's): an element within rounding error of a rounding
    # boundary may land one grid step (absolute) away; up to MAX_FLIPS of the elements may
    step: float = 0.0


MAX_FLIPS = 0.01


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


@dataclass(frozen=True)
class TimingConfig:
    rounds: int = 3
    cold_repeat: int = 20          # per round; number=1 each
    warm_number: int = 10
    warm_repeat: int = 2           # per round
    incold_repeat: int = 10        # per round, number=1 each: every argument flushed, the input too (0: not timed)
    race: float = 1.5              # a conv candidate this many times its workload's fastest, cold and warm, after
                                   # a round, has that round only (0: every candidate gets every round)


@dataclass(frozen=True)
class Artifact:
    """A built job, as the builder hands it to a runner."""
    job: Job
    funcs: list                    # the PrimFuncs (their parameters give the arguments' shapes)
    compiled: list                 # per func: a loaded runtime module, or a library file (remote runners)
    build_s: float
    check: Check | None


class NumericalError(Exception):
    """A kernel ran but its result is too far from the reference: a deterministic rejection."""

    def __init__(self, rel_err: float, tolerance: float):
        super().__init__(f"numerical error {rel_err:.2e} exceeds the tolerance {tolerance:.0e}")
        self.rel_err = rel_err


def arg_arrays(func, rng, params=None) -> list[np.ndarray]:
    """Random host arrays for every parameter of a PrimFunc (TVM 0.27: parameters carry their
    buffer type), or for those of ``params`` (indices). float32 ones are drawn as float32 (4.5x
    faster than drawing float64 and casting: a fresh ResNet-18 drew 5.2 s of arrays that way)."""
    out = []
    ps = list(func.params)
    for i in (range(len(ps)) if params is None else params):
        buf = ps[i].ty
        shape, dtype = [int(s) for s in buf.shape], str(buf.dtype)
        out.append(rng.standard_normal(shape, dtype=np.float32) if dtype == "float32"
                   else rng.standard_normal(shape).astype(dtype))
    return out


def kernel_args(a: Artifact, i: int, dev, rng) -> list:
    """The device tensors kernel ``i`` of ``a`` runs on: the check's inputs when it has one (and
    a random output, the only array drawn then)."""
    import tvm
    if a.check is not None:
        host = [np.ascontiguousarray(x) for x in a.check.inputs] + arg_arrays(a.funcs[i], rng,
                                                                              [len(a.funcs[i].params) - 1])
    else:
        host = arg_arrays(a.funcs[i], rng)
    return [tvm.runtime.tensor(x, dev) for x in host]


def check_output(a: Artifact, out) -> float | None:
    """The max relative error of a checked kernel's output (a device tensor); NumericalError past
    the check's tolerance. None for jobs without a check."""
    chk = a.check
    if chk is None:
        return None
    got = out.numpy()
    scale = max(float(np.abs(chk.expected).max()), 1e-30)
    d = np.abs(got.astype(np.float64) - chk.expected)
    if chk.step > 0:
        off = d > chk.tolerance * scale
        if off.mean() <= MAX_FLIPS:
            d = np.where(off & (d <= chk.step * 1.001 + chk.tolerance * scale), 0.0, d)
    rel = float(d.max() / scale)
    if not rel <= chk.tolerance:
        raise NumericalError(rel, chk.tolerance)
    return rel


def load_and_check(a: Artifact, dev, rng, load=lambda compiled: compiled):
    """Each kernel of ``a`` as (module, its device tensors), run once (catching kernels that crash
    on first run) with a checked job's output compared with its reference: (kernels, rel err).
    ``load`` turns what the builder made into a module on ``dev`` (a remote runner uploads it)."""
    if a.check is not None and len(a.funcs) != 1:
        raise ValueError("a checked job must build exactly one kernel")
    kernels, rel = [], None
    for i, compiled in enumerate(a.compiled):
        if isinstance(compiled, Exception):
            raise compiled
        mod = load(compiled)
        args = kernel_args(a, i, dev, rng)
        mod["main"](*args)
        rel = check_output(a, args[-1])
        kernels.append((mod, args))
    return kernels, rel


def last_line(e: BaseException) -> str:
    """An exception as one line for a record or a message (TVM's errors end with the point)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]


FLUSH_ALL = "graphselect.cache_flush_all_args"


def _register_flush_all() -> bool:
    """Register :data:`FLUSH_ALL`, a time_evaluator preprocessor that flushes every argument of
    the kernel from the cache, its input too (TVM's own ``cache_flush_cpu_non_first_arg`` keeps
    the first): called with a dummy first argument. Here only: an RPC device has no Python."""
    import tvm
    if tvm.get_global_func(FLUSH_ALL, allow_missing=True) is not None:
        return True
    flush = tvm.get_global_func("cache_flush_cpu_non_first_arg", allow_missing=True)
    if flush is None:
        return False
    dummy = tvm.runtime.tensor(np.zeros(16, "float32"), tvm.cpu())

    def flush_all(*args):
        flush(dummy, *args)
    tvm.register_global_func(FLUSH_ALL, flush_all, override=True)
    return True


def sample(kernels, dev, timing: TimingConfig, local: bool = True) -> tuple[float, float, float]:
    """One round of the protocol over a job's kernels, (module, args) each: (cold, warm, in-cold)
    ms. Cold flushes every argument but the first (the input) from the cache before each run:
    weights and output cold, the input warm. In-cold flushes the input as well (and a residual
    operand, which cold flushes already): what a kernel pays when the tensor it reads is no
    longer in cache, as in a network where its producer ran earlier (DESIGN.md, "Measurement");
    ``local`` False (an RPC device, where the preprocessor does not exist) or ``incold_repeat``
    0 gives the cold time for it."""
    c = w = ic = 0.0
    incold = local and timing.incold_repeat > 0 and _register_flush_all()
    for mod, args in kernels:
        fc = mod.time_evaluator("main", dev, number=1, repeat=timing.cold_repeat,
                                f_preproc="cache_flush_cpu_non_first_arg")
        fw = mod.time_evaluator("main", dev, number=timing.warm_number, repeat=timing.warm_repeat)
        cold = float(np.median(fc(*args).results))
        c += cold
        w += float(np.median(fw(*args).results))
        if incold:
            fi = mod.time_evaluator("main", dev, number=1, repeat=timing.incold_repeat, f_preproc=FLUSH_ALL)
            ic += max(cold, float(np.median(fi(*args).results)))
        else:
            ic += cold
    return c * 1e3, w * 1e3, ic * 1e3


WARM_FLAG = "warm well above cold"     # a record's flag when suspicious_warm: re-timed by the next run
AGAIN = " (again when re-timed)"       # ... and once more when re-timed: it stands, not re-timed again


def suspicious_warm(cold: float, warm: float) -> bool:
    return warm > 1.25 * cold + 2e-3


def warm_flag(cold: float, warm: float) -> str | None:
    """The record's flag when its warm time is well above its cold time (both runners), else None."""
    return f"{WARM_FLAG}: warm {warm:.4f} ms, cold {cold:.4f} ms" if suspicious_warm(cold, warm) else None
