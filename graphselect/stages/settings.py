"""Stage 1: every option the user gave, validated before any work starts (DESIGN.md, "What goes in")."""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import GraphSelectError

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int, str], None]   # (stage, done, total, message)
SOLVERS = ("cp-sat", "greedy", "dp", "brute", "pbqp")
PRECISION_MODES = ("fp32", "bf16", "auto")
# --tolerance: the largest max |y - y_fp32| / max |y_fp32| over the outputs a lower-precision
# network may have against the fp32 reference on the sample inputs
DEFAULT_TOLERANCE = 2e-2


def _quiet(*_a, **_k):
    pass


@dataclass(frozen=True)
class Settings:
    """Everything the user asked for, validated before any work starts."""
    spec: object                       # graphselect.target.TargetSpec
    target: object                     # tvm.target.Target
    ctx: object                        # measure.store.Context: the record key of this machine
    solver: str
    families: tuple[str, ...] | None
    cache: Path | None                 # record store file; None: in memory only
    time_limit: float
    verify: bool
    benchmark_runs: int
    timing: object                     # measure.local.TimingConfig
    cache_budget: int | str | None
    workers: int                       # compiler processes for measurement; threads compiling a round's networks
    max_rounds: int                    # closed-loop rounds (0: no in-network timing, isolated costs)
    innet_rounds: int
    progress: Progress = field(default=_quiet, compare=False)
    name: str | None = None
    rpc: object = None                 # measure.rpc.RpcConfig: measure and run on the tracker's devices
    cc: str | None = None              # the C compiler that links libraries for the target (cross)
    precision: str = "fp32"            # fp32 | bf16 (lower precision wherever faster) | auto (within tolerance)
    tolerance: float = DEFAULT_TOLERANCE
    time_all: bool = False             # time every candidate: no twin is pruned (measure.twins)

    @property
    def remote(self) -> bool:
        return self.rpc is not None

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions candidates may compute in."""
        # int8: a QDQ model's own arithmetic (its quantized convs, exactly), under every mode
        return ("fp32", "int8") if self.precision == "fp32" else ("fp32", "int8", "bf16")


def settings(*, target="llvm", threads=None, solver="cp-sat", families=None, cache=True, time_limit=30.0,
             verify=True, benchmark_runs=30, timing=None, progress=None, name=None, cache_budget="auto",
             workers=None, max_rounds=None, innet_rounds=8, rpc_tracker=None, rpc_key=None, rpc_sessions=1,
             rpc_timeout=600.0, rpc_load_timeout=30.0,
             cross_cc=None, precision="fp32", tolerance=DEFAULT_TOLERANCE, time_all=False) -> Settings:
    """Validate the options and fix this process's TVM thread count (with ``rpc_tracker``: ask
    the key's devices what they are instead)."""
    import tvm
    from ..measure.jobs import TimingConfig
    from ..measure.store import Context, default_path
    from ..target import arch_of, cpu_model, cross_compiler, parse_target, runtime_tag
    rpc_cfg = device = None
    if rpc_tracker is not None or rpc_key is not None:
        from ..measure import rpc
        if rpc_tracker is None:
            raise GraphSelectError("--rpc-key needs --rpc-tracker HOST:PORT")
        rpc_cfg = rpc.parse_tracker(rpc_tracker, rpc_key, rpc_sessions, rpc_timeout, rpc_load_timeout)
        device = rpc.device(rpc_cfg)
        target = _device_target(target, device)
        if threads is not None and threads != device.threads:
            raise GraphSelectError(f"the servers under key {rpc_key!r} run {device.threads} TVM thread(s), not "
                                   f"{threads}; start them with TVM_NUM_THREADS={threads} or leave --threads out")
        threads = device.threads
    spec = parse_target(target, threads=threads, remote=rpc_cfg is not None)
    if device is not None and spec.arch != arch_of(device.triple):
        raise GraphSelectError(f"the target is {spec.arch} but the servers under key {rpc_key!r} are "
                               f"{device.triple}; pass a target for them (llvm -mtriple={device.triple})")
    cc = cross_compiler(spec, cross_cc)
    if solver not in SOLVERS:
        raise GraphSelectError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    if not time_limit > 0:
        raise GraphSelectError(f"time_limit must be positive seconds, got {time_limit!r}")
    if benchmark_runs < 0:
        raise GraphSelectError(f"benchmark_runs must be >= 0, got {benchmark_runs}")
    if isinstance(cache_budget, (int, float)) and not isinstance(cache_budget, bool) and cache_budget < 0:
        raise GraphSelectError(f"cache budget must be >= 0 bytes, got {cache_budget}; pass a size, auto or off")
    if not (cache_budget in ("auto", "off", None) or
            (isinstance(cache_budget, (int, float)) and not isinstance(cache_budget, bool))):
        raise GraphSelectError(f"cache budget must be auto, off or a number of bytes, got {cache_budget!r}")
    if solver == "dp" and cache_budget not in (None, "off"):
        raise GraphSelectError("the dp solver is exact only without the cache term (residency is a whole-graph "
                               "term that breaks its independence); pass --cache-budget off with --solver dp, "
                               "or use cp-sat")
    _check_precision(spec, precision, tolerance, solver, families)
    _check_hardware_file()
    if device is None:
        _fix_threads(spec.threads)
    path = (default_path() if cache is True else Path(cache)) if cache not in (None, False) else None
    if path is not None:
        path = _writable_store(path)
    cpu = device.name if device is not None else cpu_model()
    ctx = Context(target=spec.key, cpu=cpu, threads=spec.threads, tvm=runtime_tag(tvm.__version__))
    if device is not None:
        max_rounds = 0     # in-network kernel timing runs on this machine only: a device is selected on isolated costs
    elif max_rounds is None:
        max_rounds = 3 if benchmark_runs else 0
    if device is not None and cache_budget == "auto":
        cache_budget = None        # the device's caches are not probed: cold-weight costs
    return Settings(spec=spec, target=spec.tvm_target(), ctx=ctx, solver=solver,
                    families=tuple(families) if families else None, cache=path, time_limit=float(time_limit),
                    verify=verify, benchmark_runs=int(benchmark_runs), timing=timing or TimingConfig(),
                    cache_budget=cache_budget, workers=int(workers or min(2, os.cpu_count() or 1)),
                    max_rounds=int(max_rounds), innet_rounds=int(innet_rounds), progress=progress or _quiet,
                    name=name, rpc=rpc_cfg, cc=cc, precision=precision, tolerance=float(tolerance),
                    time_all=bool(time_all))


def _check_precision(spec, precision, tolerance, solver, families) -> None:
    """Refuse a precision the target cannot compute in, a tolerance that is no budget, and
    lower-precision families without a precision that allows them."""
    from .. import candidates
    if precision not in PRECISION_MODES:
        raise GraphSelectError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISION_MODES)}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
        raise GraphSelectError(f"tolerance must be a relative error between 0 and 1 (e.g. {DEFAULT_TOLERANCE:g}), "
                               f"got {tolerance!r}")
    lowp = sorted(f for f in families or () if f in candidates.FAMILIES and candidates.precision_of(f) == "bf16")
    if precision == "fp32" and lowp:
        raise GraphSelectError(f"famil{'ies' if len(lowp) > 1 else 'y'} {', '.join(lowp)} compute in "
                               f"{candidates.precision_of(lowp[0])}: pass --precision bf16 or auto to use them")
    if precision == "fp32":
        return
    from ..candidates.lowp import BF16
    units = spec.isa.features
    if BF16 not in units:
        have = ", ".join(sorted(units)) or "none"
        raise GraphSelectError(f"--precision {precision} needs a CPU with AVX512-BF16 (vdpbf16ps); the target "
                               f"{spec.key} has none (its lower-precision units: {have}); use --precision fp32")
    if precision == "auto" and solver not in ("cp-sat", "brute"):
        raise GraphSelectError(f"--precision auto keeps the error within --tolerance, which only the cp-sat and "
                               f"brute solvers enforce, not {solver}; use --solver cp-sat or --precision bf16")


def _device_target(target, device):
    """``llvm`` with no CPU or triple means the device's own CPU and triple; a triple of the
    device's architecture with no CPU, the device's CPU."""
    from ..target import arch_of
    if not isinstance(target, str):
        return target
    parts = target.split()
    if parts == ["llvm"]:
        return f"llvm -mcpu={device.cpu} -mtriple={device.triple}"
    triple = next((p.split("=", 1)[1] for p in parts if p.startswith("-mtriple=")), None)
    if (parts and parts[0] == "llvm" and triple and not any(p.startswith("-mcpu=") for p in parts)
            and arch_of(triple) == arch_of(device.triple) and device.cpu != "generic"):
        return f"{target} -mcpu={device.cpu}"
    return target


def _fix_threads(threads: int) -> None:
    """Set this process's TVM thread count, or refuse when its pool already runs another."""
    import tvm
    # TVM's thread pool reads this when it starts; set it before any TVM kernel runs
    os.environ["TVM_NUM_THREADS"] = str(threads)
    running = int(tvm.get_global_func("runtime.NumThreads")())
    if running != threads:     # the pool started earlier: timings would be filed under the wrong count
        raise GraphSelectError(
            f"TVM's thread pool already runs {running} thread(s), started before optimize could set "
            f"TVM_NUM_THREADS={threads}; set TVM_NUM_THREADS={threads} before the first TVM kernel "
            f"runs in this process, or pass threads={running}")


def _check_hardware_file() -> None:
    from costmodels.hardware import ENV, detect
    try:
        detect()
    except (OSError, ValueError) as e:
        raise GraphSelectError(f"${ENV} ({os.environ.get(ENV)}) is not a usable hardware file: "
                               f"{' '.join(str(e).split())[:300]}; fix it or unset {ENV}") from None


def _writable_store(path: Path) -> Path | None:
    """``path`` when the record store can be opened and written there; else None (records kept in
    memory for this run) with a warning that says why."""
    import sqlite3
    from ..fsutil import probe_write
    from ..measure.store import RecordStore
    try:
        if path.exists() and not path.is_file():
            raise OSError(f"{path} is not a file")
        RecordStore(path).close()
        with open(path, "ab"):
            pass
        probe_write(path.parent)          # SQLite's journal files go beside the store
        return path
    except (OSError, sqlite3.Error) as e:
        log.warning("cannot use the record store %s (%s): measurements are kept in memory for this run only; "
                    "pass --cache PATH or set GRAPHSELECT_CACHE to a writable folder", path, e)
        return None


@contextlib.contextmanager
def open_store(s: Settings):
    from ..measure.store import RecordStore
    store = RecordStore(s.cache)
    try:
        yield store
    finally:
        store.close()

