"""The stages of :func:`graphselect.optimize` (DESIGN.md, "Data flow"), one function each, each
returning a frozen record that the later stages read. ``api.optimize`` only composes them."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import BuildError, GraphSelectError

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int, str], None]   # (stage, done, total, message)
TOLERANCE = 1e-4      # max |tvm - onnxruntime| / max |onnxruntime|
# A QDQ (quantized) model: a value within rounding error of a rounding boundary of a fake-quant
# goes either way, and the step propagates; two correct executions of the same QDQ model differ by
# a few output steps (onnxruntime's own, optimized (int8 kernels) against unoptimized (float32 ops):
# 7.8e-3 on a QDQ ResNet-18, bench/results/int8-20261202.md)
QDQ_TOLERANCE = 3e-2
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
    workers: int                       # compiler processes for measurement
    max_rounds: int                    # closed-loop rounds (0: no in-network timing, isolated costs)
    innet_rounds: int
    progress: Progress = field(default=_quiet, compare=False)
    name: str | None = None
    rpc: object = None                 # measure.rpc.RpcConfig: measure and run on the tracker's devices
    cc: str | None = None              # the C compiler that links libraries for the target (cross)
    precision: str = "fp32"            # fp32 | bf16 (lower precision wherever faster) | auto (within tolerance)
    tolerance: float = DEFAULT_TOLERANCE

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
             cross_cc=None, precision="fp32", tolerance=DEFAULT_TOLERANCE) -> Settings:
    """Validate the options and fix this process's TVM thread count (with ``rpc_tracker``: ask
    the key's devices what they are instead)."""
    import tvm
    from .measure.jobs import TimingConfig
    from .measure.store import Context, default_path
    from .target import arch_of, cpu_model, cross_compiler, parse_target, runtime_tag
    rpc_cfg = device = None
    if rpc_tracker is not None or rpc_key is not None:
        from .measure import rpc
        if rpc_tracker is None:
            raise GraphSelectError("--rpc-key needs --rpc-tracker HOST:PORT")
        rpc_cfg = rpc.parse_tracker(rpc_tracker, rpc_key, rpc_sessions)
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
                    name=name, rpc=rpc_cfg, cc=cc, precision=precision, tolerance=float(tolerance))


def quantized(lg) -> bool:
    """Whether the model is a QDQ model (fake-quant pairs on its activations)."""
    from .graph.layers import FAKE_QUANT
    return any(l.op == FAKE_QUANT or (l.conv is not None and (l.conv.quant or l.conv.quant_pre))
               for l in lg.layers.values())


def _check_precision(spec, precision, tolerance, solver, families) -> None:
    """Refuse a precision the target cannot compute in, a tolerance that is no budget, and
    lower-precision families without a precision that allows them."""
    from . import candidates
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
    from .candidates.lowp import BF16
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
    from .target import arch_of
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
    from .fsutil import probe_write
    from .measure.store import RecordStore
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
    from .measure.store import RecordStore
    store = RecordStore(s.cache)
    try:
        yield store
    finally:
        store.close()


# --- import ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Imported:
    original: object                   # the user's onnx.ModelProto
    prepared: object                   # frontend.onnx_prep.Prepared
    lg: object                         # graph.layers.LayerGraph (its extra["module"]: the Relax module)
    model_key: str                     # identifies the model's structure (per-model calibration)
    name: str
    content_key: str = ""              # identifies the prepared model exactly, weights included


def load(model, s: Settings, input_shape=None) -> Imported:
    from .frontend import onnx_prep
    from .frontend.relax_import import import_onnx, importer_ops
    from .graph.layers import extract
    s.progress("import", 0, 1, "loading the model")
    original = onnx_prep.load_model(model)
    if isinstance(input_shape, (tuple, list)):
        names = _inputs(original)
        if len(names) != 1:
            raise GraphSelectError(f"the model has {len(names)} inputs ({', '.join(names)}): give each shape by "
                                   f"name, --input-shape NAME:1,3,224,224 (repeated)")
        input_shape = {names[0]: tuple(int(v) for v in input_shape)}
    prepared = onnx_prep.prepare(original, input_shapes=input_shape, ops=importer_ops())
    onnx_convs = tuple(n.name or n.output[0] for n in prepared.model.graph.node if n.op_type == "Conv")
    mod = import_onnx(prepared.model, prepared.shapes)
    lg = extract(mod, onnx_conv_names=onnx_convs)
    lg.extra["module"] = mod
    key = hashlib.sha1("|".join(f"{l.name}:{l.op}:{l.out_shape}:{l.conv.key if l.conv else ''}"
                                for l in lg.layers.values()).encode()).hexdigest()[:12]
    content = hashlib.sha1(prepared.model.SerializeToString()).hexdigest()[:16]
    s.progress("import", 1, 1, f"{len(lg.convs)} conv layers, {len(lg.layers)} layers")
    return Imported(original, prepared, lg, key, s.name or _model_name(model, original), content)


# --- measure ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    plan: object                       # measure.plan.Plan
    measurements: dict                 # (workload, candidate) -> measure.store.Measurement
    timings: dict                      # (workload, candidate) -> costmodels.table.Timing
    jobs: int
    reused: int
    retimed: int                       # records found but not trusted (flagged or stale), so re-timed
    flagged: tuple[tuple[str, str, str], ...]   # (workload, candidate, why) of records not trusted
    seconds: dict = field(default_factory=dict)  # waiting for the builder (build_s) and in the runner (run_s)


def measure(imported: Imported, s: Settings, store) -> Measured:
    from costmodels.table import Timing
    from .measure import plan as plan_mod
    from .measure.local import REFERENCE, stale
    from .measure.run import measure as run
    plan = plan_mod.make_plan(imported.lg, s.target, s.families, s.precisions)
    keys = {j.key: j for j in plan.jobs}
    ref = store.get(s.ctx, *REFERENCE, "")
    quiet = ref.cold_ms if ref is not None else None
    found = [m for k, j in keys.items() if (m := store.get(s.ctx, *k, j.version)) is not None]
    retimed = sum(1 for m in found if stale(m, quiet))
    reused = len(found) - retimed
    probe = None
    if reused < len(keys) and not s.remote:
        s.progress("measure", 0, len(keys), "timing the reference kernel (load detection)")
        probe = load_probe(s, store)
    clock: dict = {}
    meas = run(list(plan.jobs), target=s.target, ctx=s.ctx, store=store, timing=s.timing, workers=s.workers,
               runner=runner(s, probe), cc=s.cc, clock=clock, progress=lambda d, n, m: s.progress("measure", d, n, m))
    if probe is not None:
        keep_quiet(s, store, probe)
    timings = {k: Timing(m.cold_ms, m.warm_ms, m.rel_err) for k, m in meas.items()}
    flagged = tuple((m.workload, m.candidate, m.flag) for m in meas.values() if m.flag)
    return Measured(plan, meas, timings, len(keys), reused, retimed, flagged,
                    {k: round(v, 2) for k, v in clock.items()})


def runner(s: Settings, probe=None):
    """Where kernels are timed: the tracker's devices, or this machine guarded by ``probe``."""
    if s.remote:
        from .measure.rpc import RpcRunner
        return RpcRunner(s.rpc)
    from .measure.local import LocalRunner
    return LocalRunner(probe)


def load_probe(s: Settings, store):
    """A :class:`measure.local.LoadProbe` that starts from the quietest reference time stored;
    None on an RPC device (taken as dedicated: the probe would time this machine)."""
    from .measure.local import REFERENCE, LoadProbe
    if s.remote:
        return None
    ref = store.get(s.ctx, *REFERENCE, "")
    return LoadProbe(s.target, ref.cold_ms if ref is not None else None)


def keep_quiet(s: Settings, store, probe) -> None:
    """Store the probe's quietest time when it beats the stored one."""
    from .measure.local import REFERENCE
    from .measure.store import Measurement
    ref = store.get(s.ctx, *REFERENCE, "")
    if ref is None or probe.quiet_ms < ref.cold_ms:
        store.put(s.ctx, Measurement(*REFERENCE, probe.quiet_ms, probe.quiet_ms))


def retime(model, s: Settings, store, *, match: str | None = None, flagged_only: bool = False,
           input_shape=None) -> list[tuple[str, str, object, object]]:
    """Re-time the records a model's plan uses (those whose workload or candidate contains
    ``match``; only flagged or stale ones with ``flagged_only``): (workload, candidate, old, new)."""
    from .measure import plan as plan_mod
    from .measure.local import REFERENCE, stale
    from .measure.run import measure as run
    imported = load(model, s, input_shape)
    plan = plan_mod.make_plan(imported.lg, s.target, s.families, s.precisions)
    ref = store.get(s.ctx, *REFERENCE, "")
    quiet = ref.cold_ms if ref is not None else None
    jobs, old = [], {}
    for j in plan.jobs:
        if j.key in old or (match and match not in j.workload and match not in j.candidate):
            continue
        m = store.get(s.ctx, *j.key, j.version)
        if flagged_only and (m is None or not (m.flag or stale(m, quiet))):
            continue
        old[j.key] = m
        jobs.append(j)
    for j in jobs:
        store.delete(s.ctx, match=None, key=(j.workload, j.candidate, j.version))
    probe = load_probe(s, store) if jobs else None
    new = run(jobs, target=s.target, ctx=s.ctx, store=store, timing=s.timing, workers=s.workers,
              runner=runner(s, probe), cc=s.cc, progress=lambda d, n, m: s.progress("measure", d, n, m))
    if probe is not None:
        keep_quiet(s, store, probe)
    return [(j.workload, j.candidate, old[j.key], new.get(j.key)) for j in jobs]


# --- this machine's cache ----------------------------------------------------------------------

@dataclass(frozen=True)
class Machine:
    budget: int | None                 # residency budget before calibration (bytes)
    steps: tuple[tuple[int, float], ...]
    hardware: dict                     # what the report shows


def machine(s: Settings, store) -> Machine:
    from costmodels.hardware import detect, fma_peak, residency, residency_budget, throughput
    from .measure.peak import measure_peak_gflops
    hw = detect()
    if s.cache_budget == "auto":
        budget = residency_budget(hw)
    else:
        budget = None if s.cache_budget in (None, "off") else int(s.cache_budget)
    if s.remote:    # this machine's caches say nothing of the device's, and no probe runs there
        return Machine(budget, (), {"source": f"RPC device {s.ctx.cpu} (key {s.rpc.key}): caches and peak not probed"})
    hardware = {"l1d_bytes": hw.l1d_bytes, "l2_bytes": hw.l2_bytes, "l3_bytes": hw.l3_bytes,
                "line_bytes": hw.line_bytes, "source": hw.source, "residency_budget_bytes": residency_budget(hw)}
    steps = ()
    if store.path is not None:     # peak FLOP/s, bandwidth, residency steps: measured once per CPU and threads
        tp = throughput(store.path.parent / "hardware.json", threads=s.spec.threads, cpu=s.ctx.cpu)
        peak = fma_peak(store.path.parent / "hardware.json", threads=s.spec.threads, cpu=s.ctx.cpu,
                        isa=s.spec.key, measure=lambda: measure_peak_gflops(s.target, s.spec.threads))
        # peak: what the target's FMAs issue (the kernels' ceiling); blas: numpy's GEMM
        hardware.update(peak_gflops=peak, blas_gflops=tp.peak_gflops, bandwidth_gbs=tp.bandwidth_gbs)
        if s.cache_budget == "auto" and budget:
            res = residency(store.path.parent / "hardware.json", budget, threads=s.spec.threads, cpu=s.ctx.cpu)
            steps = tuple(res.steps)
            hardware["residency_steps"] = [list(st) for st in res.steps]
    return Machine(budget, steps, hardware)


def problem(imported: Imported, measured: Measured, m: Machine, calibration=None, error_budget=None):
    """The Problem of this model on this machine (``calibration``: see costmodels.calibration;
    ``error_budget``: the most estimated relative output error lower precision may add)."""
    from costmodels.table import MissingMeasurement, build_problem
    plan = measured.plan
    try:
        return build_problem(plan.layers, plan.edges, measured.timings, cache_bytes=m.budget, partial=m.steps,
                             activation_bytes=plan.activation_bytes, calibration=calibration,
                             model=imported.model_key, error_budget=error_budget)
    except MissingMeasurement as e:
        raise GraphSelectError(str(e)) from None


def check_solver(imported: Imported, s: Settings) -> None:
    """Refuse, before any measurement, a solver that cannot take this graph."""
    if s.solver == "brute":
        import math
        from .measure import plan as plan_mod
        from .solve.brute import MAX_COMBINATIONS
        plan = plan_mod.make_plan(imported.lg, s.target, s.families, s.precisions)
        size = math.prod(len(lt.options) for lt in plan.layers)
        if size > MAX_COMBINATIONS:
            raise GraphSelectError(f"brute force would try {size:.3g} assignments of this model (at most "
                                   f"{MAX_COMBINATIONS} are allowed); use cp-sat (exact) or fewer --families")
        return
    if s.solver != "dp":
        return
    from collections import Counter
    uses = Counter(src for src, _dst, _port in imported.lg.edges())
    many = [n for n, k in uses.items() if k > 1]
    if many:
        raise GraphSelectError(f"the dp solver takes chains and trees only; layer {many[0]} is read "
                               f"{uses[many[0]]} times ({len(many)} such layer(s)); use cp-sat (exact on any graph)")


def solve(problem_, method: str, time_limit: float):
    from . import solve as solve_mod
    try:
        return solve_mod.solve(problem_, method=method, time_limit=time_limit)
    except ValueError as e:        # e.g. dp on a graph that is not a tree: the user picked it
        raise GraphSelectError(str(e)) from None


# --- build -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Built:
    label: str
    assignment: object                 # costmodels.problem.Assignment
    selection: dict                    # layer -> Candidate | layout (rewrite.apply's input)
    module: object                     # the annotated Relax IRModule
    executable: object                 # the compiled VM executable (or the loaded library)
    library: Path | None = None        # the exported library it was loaded from, when cached

    @property
    def choice(self) -> tuple[int, ...]:
        return tuple(self.assignment.choice)


def build(imported: Imported, measured: Measured, label: str, assignment, s: Settings) -> Built:
    """Rewrite and compile one assignment. With a record store, the compiled library is kept
    under ``builds/`` beside it, keyed by the model's content, the choice, the code versions,
    target and TVM, and loaded instead of compiled again by a later run."""
    import tvm
    from .codegen.lower import build as compile_module
    from .measure import plan as plan_mod
    from .rewrite.apply import apply
    sel = plan_mod.selection_from(imported.lg, measured.plan, assignment.choice)
    module = apply(imported.lg, sel, s.target)
    cached = _build_path(imported, sel, s)
    if cached is not None and cached.exists():
        try:
            return Built(label, assignment, sel, module, tvm.runtime.load_module(str(cached)), cached)
        except Exception:  # noqa: BLE001 - a damaged cache file is rebuilt
            log.info("cached build %s could not be loaded; rebuilding", cached)
    try:
        ex = compile_module(module, s.target)
    except Exception as e:  # noqa: BLE001 - the user needs to know which selection failed
        raise BuildError(f"the {label} selection did not compile: {str(e).strip().splitlines()[-1][:300]}") from e
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f".{cached.stem}.{os.getpid()}.partial.so")
            with _silence_stderr():
                ex.export_library(str(tmp))
            os.replace(tmp, cached)
        except OSError as e:       # the cache is an optimisation: never fail the run for it
            log.warning("could not keep the build in %s: %s", cached.parent, e)
    return Built(label, assignment, sel, module, ex)


def _build_path(imported: Imported, selection: dict, s: Settings) -> Path | None:
    """Where the compiled network of ``selection`` (layer -> Candidate or layout) is kept: keyed by
    what each layer runs, not by option indices, which differ between option lists (families,
    precision)."""
    if s.cache is None or s.spec.foreign:      # a library for another CPU cannot be loaded back here
        return None
    from . import candidates, codegen
    code = "|".join([codegen.code_version()] + [candidates.code_version(f) for f in sorted(candidates.FAMILIES)])
    what = ";".join(f"{name}={getattr(c, 'key', c)}" for name, c in selection.items())
    key = hashlib.sha1(f"{imported.content_key}|{what}|{code}|{s.ctx.target}|{s.ctx.tvm}".encode()).hexdigest()
    return s.cache.parent / "builds" / f"{key[:24]}.so"


@contextlib.contextmanager
def _silence_stderr():
    """TVM logs a harmless "Scope Saving" warning per function while exporting."""
    import sys
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def conv_symbols(imported: Imported, b: Built) -> dict[str, str]:
    """PrimFunc symbol -> conv layer name, for the kernels of ``b`` (see rewrite.apply)."""
    return {f"{name}_{c.family}": name for name, c in b.selection.items()
            if imported.lg.layers[name].kind == "conv"}


# --- verify and time end to end ----------------------------------------------------------------

@dataclass(frozen=True)
class Checked:
    errors: dict                       # label -> max relative error against the reference, over all outputs
    rounds: object                     # measure.e2e.Rounds of the built networks (None without timing)
    versus_ort: object                 # measure.e2e.Rounds of the returned one and onnxruntime (None: not timed)
    measured_ms: dict                  # label (and "onnxruntime") -> median ms
    reference: str = ""                # what the outputs were checked against (measure.reference)
    reference_note: str = ""           # why onnxruntime on the model as given was not the reference
    samples: dict | None = None        # lower precision: the returned network on SAMPLES inputs (agreement())


CHECK_SECONDS = 3.0    # the built networks are compared for at least this long (pauses not counted)


def inputs(imported: Imported) -> list[np.ndarray]:
    """The inputs every check and in-place timing runs on (reproducible)."""
    from .runtime import random_inputs
    return random_inputs(imported.prepared.input_shapes)


def check(imported: Imported, built: list[Built], chosen: str, s: Settings, store=None) -> Checked:
    """Every output of every built network against the reference (onnxruntime, or what
    ``measure.reference`` falls back to); then the built networks timed against each other (one
    runtime: no pauses, so many rounds), and the returned one against onnxruntime (pauses at every
    switch, so ``benchmark_runs`` calls). On an RPC device the networks run and are timed there
    (the reference still runs here), and onnxruntime, which runs here, is not timed against them."""
    prep = imported.prepared
    xs = inputs(imported)
    feeds = dict(zip(prep.input_names, xs))
    errs: dict[str, float] = {}
    ref = None
    if s.verify or s.benchmark_runs:
        s.progress("verify", 0, 1, "running the reference")
        ref = reference_for(imported, s, xs)
    nets = networks(built, s) if s.verify or s.benchmark_runs else {}
    samples = None
    if s.verify:
        where = f" on the RPC device ({s.rpc.key})" if s.remote else ""
        s.progress("verify", 0, 1, f"comparing every output{where} with {ref.name}")
        # a lower-precision network is held to --tolerance by the selection (auto) or reported
        # against it (bf16); here only a gross error is a failure
        tol = TOLERANCE if s.precision == "fp32" else LOWP_SANITY
        if quantized(imported.lg):
            tol = max(tol, QDQ_TOLERANCE)
        for b in built:
            got = nets[b.label].run(xs)
            errs[b.label] = compare_outputs(got, ref.outputs, prep.output_names, b.label, ref.name, tol)
        if s.precision != "fp32":
            samples = agreement(nets[chosen], imported, s)
    if not s.benchmark_runs:
        return Checked(errs, None, None, {}, ref.name if ref else "", ref.why if ref else "", samples)
    from .measure.e2e import compare, ort_runner
    versus = ref.timeable and not s.remote
    s.progress("benchmark", 0, 1, f"timing end to end ({len(built)} network(s)"
               + (", then against onnxruntime)" if versus else ")"))
    probe = load_probe(s, store) if store is not None else None
    quiet = probe.quiet if probe is not None else None
    fns = {b.label: nets[b.label].runner(xs) for b in built}
    ts = compare(fns, runs=s.benchmark_runs, quiet=quiet, waits=6, seconds=CHECK_SECONDS) \
        if len(fns) > 1 or not versus else None
    vs = None
    if versus:
        # blocks of 10: half the runtime switches, each of which costs a 1 s pause
        vs = compare({chosen: fns[chosen], "onnxruntime": ort_runner(ref.session, feeds)},
                     runs=s.benchmark_runs, block=10, quiet=quiet, waits=6)
    measured = {k: ts.median(k) for k in fns} if ts is not None else {chosen: vs.median(chosen)}
    if vs is not None:
        measured["onnxruntime"] = vs.median("onnxruntime")
    return Checked(errs, ts if ts is not None else vs, vs, measured, ref.name, ref.why, samples)


class _LocalNetwork:
    """A built network on this machine, with the interface of ``measure.rpc.RemoteNetwork``."""

    def __init__(self, executable):
        import tvm
        from tvm import relax
        self.executable = executable
        self.vm = relax.VirtualMachine(executable, tvm.cpu())

    def run(self, xs) -> list[np.ndarray]:
        from .runtime import call
        return call(self.vm, xs)

    def runner(self, xs):
        from .measure.e2e import vm_runner
        return vm_runner(self.executable, xs)


def reference_for(imported: Imported, s: Settings, xs):
    """The fp32 reference (``measure.reference``) run on the inputs ``xs``."""
    from .measure.reference import reference
    prep = imported.prepared
    return reference(_with_shape(imported.original, prep), dict(zip(prep.input_names, xs)), s.spec.threads)


SAMPLES = 8            # inputs a lower-precision network's error and top-1 agreement are measured on
LOWP_SANITY = 0.5      # a lower-precision network further than this from the reference is broken


def agreement(net, imported: Imported, s: Settings) -> dict:
    """A network against the fp32 reference on :data:`SAMPLES` random inputs (seeds 1..): the
    largest relative error over them and every output, and how often the first output's arg max
    over its last axis (top-1, for a classifier) is the reference's."""
    from .runtime import random_inputs
    prep = imported.prepared
    worst, same, total = 0.0, 0, 0
    ref = None
    for seed in range(1, SAMPLES + 1):
        xs = random_inputs(prep.input_shapes, seed=seed)
        if ref is None or ref.session is None:      # the evaluator has no session to run again
            ref = reference_for(imported, s, xs)
            want = ref.outputs
        else:                                        # the same session, the next input
            want = tuple(ref.session.run(None, dict(zip(prep.input_names, xs))))
        got = net.run(xs)
        worst = max(worst, compare_outputs(got, want, prep.output_names, "", ref.name, math.inf))
        g, w = np.asarray(got[0]), np.asarray(want[0])
        if g.ndim >= 1 and g.shape[-1] > 1:
            a, b = g.reshape(-1, g.shape[-1]).argmax(-1), w.reshape(-1, w.shape[-1]).argmax(-1)
            same += int((a == b).sum())
            total += a.size
    return {"inputs": SAMPLES, "max_rel_error": worst, "top1_agree": same, "top1_total": total,
            "top1_agreement": same / total if total else None}


def networks(built: list[Built], s: Settings) -> dict:
    """label -> the built network loaded where it runs: this machine, or an RPC device."""
    if not s.remote:
        return {b.label: _LocalNetwork(b.executable) for b in built}
    from .measure.rpc import RemoteNetwork, open_session
    sess = open_session(s.rpc)
    return {b.label: RemoteNetwork(sess, b.executable, s.cc, b.library) for b in built}


def compare_outputs(got: list, want, names, label: str, ref_name: str, tolerance: float = TOLERANCE) -> float:
    """The max relative error over all outputs (each against its own largest magnitude);
    BuildError when the outputs' number or shapes differ or an error exceeds ``tolerance``
    (``math.inf``: only a non-finite error)."""
    want = [np.asarray(w) for w in want]
    if len(got) != len(want):
        raise BuildError(f"the {label} selection returns {len(got)} output(s), {ref_name} {len(want)}")
    worst = 0.0
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape:
            raise BuildError(f"output '{name}' of the {label} selection has shape {g.shape}, {ref_name}'s {w.shape}")
        if w.size == 0:
            continue
        e = float(np.abs(g.astype(np.float64) - w).max() / max(float(np.abs(w).max()), 1e-30))
        if not np.isfinite(e) or e > tolerance:
            raise BuildError(f"output '{name}' of the {label} selection differs from {ref_name}: max relative "
                             f"error {e:.2e} > {tolerance:g}")
        worst = max(worst, e)
    return worst


def _inputs(m) -> list[str]:
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def _with_shape(original, prepared):
    """The user's model with the input shapes graphselect used (for the reference)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(original)
    shapes = prepared.shapes
    for i in m.graph.input:
        if i.name in shapes:
            dims = i.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[i.name]):
                d.Clear()
                d.dim_value = int(v)
    return m


def _model_name(model, proto) -> str:
    if isinstance(model, (str, os.PathLike)):
        return Path(model).stem
    return proto.graph.name or "model"


class Stopwatch:
    """Seconds per stage, for the report."""

    def __init__(self):
        self.t0 = self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(self.seconds.get(stage, 0.0) + now - self.last, 3)
        self.last = now

    def total(self) -> dict[str, float]:
        return {**self.seconds, "total": round(time.perf_counter() - self.t0, 3)}
