"""The Python API: ``graphselect.optimize`` composes the stages of DESIGN.md (``graphselect.stages``)."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import GraphSelectError
from .stages.build import silence_stderr
from .stages.settings import DEFAULT_TOLERANCE, Progress

log = logging.getLogger(__name__)


@dataclass(eq=False)
class OptimizeResult:
    """What :func:`optimize` returns.

    Attributes
    ----------
    module : tvm.IRModule
        The annotated Relax module: each conv is a ``call_tir`` to a PrimFunc whose attributes
        ``graphselect.family``, ``graphselect.params``, ``graphselect.in_layout``,
        ``graphselect.out_layout`` and ``graphselect.weight_layout`` name its implementation.
    assignment : dict
        Layer name -> chosen candidate key (conv) or layout (other layers).
    report : dict
        Everything measured and decided (what ``report.json`` holds).
    """
    module: object
    assignment: dict
    report: dict
    executable: object = None
    target: object = None
    input_names: tuple = ("input",)
    input_shapes: tuple = ()
    output_names: tuple = ()
    extra: dict = field(default_factory=dict)
    library: Path | None = None      # a compiled library on disk this result was loaded from
    cc: str | None = None            # the C compiler that links the library (a cross compiler)
    foreign: bool = False            # built for another CPU or architecture: it runs on the device only

    def build(self):
        """Compile (once) and return the VM executable."""
        if self.executable is None:
            from .codegen.lower import build
            self.executable = build(self.module, self.target)
        return self.executable

    @property
    def input_name(self) -> str:
        """The first input's name (the only one of most CNNs)."""
        return self.input_names[0]

    @property
    def input_shape(self) -> tuple:
        """The first input's shape."""
        return tuple(self.input_shapes[0]) if self.input_shapes else ()

    def run(self, *xs: np.ndarray):
        """Run the optimized network: one array per input, in the model's input order (or one
        dict of name -> array). Returns the output array, or a tuple of them when the model has
        several outputs."""
        import tvm
        from tvm import relax
        from .runtime import Caller
        if len(xs) == 1 and isinstance(xs[0], dict):
            missing = [n for n in self.input_names if n not in xs[0]]
            if missing or len(xs[0]) != len(self.input_names):
                raise GraphSelectError(f"inputs by name must be exactly {list(self.input_names)}, got {list(xs[0])}")
            xs = tuple(xs[0][n] for n in self.input_names)
        if len(xs) != len(self.input_names):
            raise GraphSelectError(f"the model takes {len(self.input_names)} input(s) ({', '.join(self.input_names)}), "
                                   f"got {len(xs)}")
        xs = tuple(np.ascontiguousarray(x, dtype="float32") for x in xs)
        for name, x, shape in zip(self.input_names, xs, self.input_shapes):
            if tuple(x.shape) != tuple(shape):
                raise GraphSelectError(f"input '{name}' has shape {tuple(x.shape)}, the model's is {tuple(shape)}")
        if self.foreign:
            raise GraphSelectError(f"this network is built for {self.report.get('target')} and runs on that device, "
                                   "not here: export() it and load model.so there")
        caller = self.extra.get("caller")
        if caller is None:
            vm = self.extra["vm"] = relax.VirtualMachine(self.build(), tvm.cpu())
            caller = self.extra["caller"] = Caller(vm)
        outs = caller(xs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def export(self, outdir: str | os.PathLike) -> dict[str, Path]:
        """Write the compiled library, the annotated module (TVMScript) and the reports.

        Everything is written into a hidden folder inside ``outdir`` first and moved under the
        final names only once all of it is written, so an interrupted or failed export never
        leaves a half-written file, or a mix of old and new files, under the final names.
        """
        from .report import write_reports
        out = Path(outdir)
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out))
        try:
            lib = tmp / "model.so"
            if self.library is not None and self.library.exists():
                shutil.copyfile(self.library, lib)
            else:
                from .measure.builder import export
                with silence_stderr():
                    export(self.build(), str(lib), self.cc)
            (tmp / "module.py").write_text(self.module.script(show_meta=False))
            written = {"library": lib, "module": tmp / "module.py", **write_reports(self.report, tmp)}
            paths = {}
            for key, path in written.items():
                final = out / path.name
                os.replace(path, final)
                paths[key] = final
            return paths
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def optimize(model, *, target: str | dict = "llvm", threads: int | None = None,
             input_shape: dict | tuple | None = None, solver: str = "cp-sat", families=None,
             cache: str | os.PathLike | None | bool = True, time_limit: float = 30.0, verify: bool = True,
             benchmark_runs: int = 30, timing=None, progress: Progress | None = None,
             name: str | None = None, cache_budget: int | str | None = "auto", max_rounds: int | None = None,
             workers: int | None = None, rpc_tracker: str | None = None, rpc_key: str | None = None,
             rpc_sessions: int = 1, rpc_timeout: float = 600.0, rpc_load_timeout: float = 30.0,
             cross_cc: str | None = None, precision: str = "fp32",
             tolerance: float | None = None, time_all: bool = False) -> OptimizeResult:
    """Optimize an ONNX CNN for this CPU, or for the devices behind a TVM RPC tracker.

    Parameters
    ----------
    model : str, Path, bytes or onnx.ModelProto
        The model (a path, serialized bytes or a loaded proto).
    target : str or dict
        ``"llvm"`` (this CPU; with ``rpc_tracker``, the device's) or ``"llvm -mcpu=NAME
        [-mtriple=TRIPLE] [-mattr=...]"``; a CPU other than this machine's needs ``rpc_tracker``.
    threads : int, optional
        Threads for measurement and inference (default: the CPUs this process may use).
    input_shape : dict or tuple, optional
        Fixes dynamic input shapes: ``(1, 3, 224, 224)`` for a one-input model, or by name,
        ``{"x": (1, 3, 224, 224), "y": (1, 3, 112, 112)}``.
    solver : {"cp-sat", "greedy", "dp", "pbqp", "brute"}
    families : sequence of str, optional
        Candidate families to consider (default: all).
    cache : path, True or None
        The SQLite record store: True for the default under the user's cache folder, a path,
        or None to keep records in memory only. It also keeps what built networks showed, from
        which this machine's calibration is fitted.
    verify : bool
        Compare every output of every built network with onnxruntime (raises BuildError beyond 1e-4
        relative error); where onnxruntime cannot run the model, with onnxruntime on the model
        converted to a newer opset, else with onnx's reference evaluator (the report names it).
    benchmark_runs : int
        Runs for the end-to-end check of each built assignment and onnxruntime, in interleaved
        rounds of short blocks (``measure.e2e.compare``); 0 skips timing and the closed loop (the
        isolated timings decide).
    cache_budget : int, "auto" or None
        Bytes of cache the network's weights, workspaces and live activations may count on to
        run with warm-weight timings before calibration ("auto": from the CPU's cache sizes, see
        ``costmodels.hardware``, with partial-residency steps beyond it measured once per CPU
        when ``cache`` keeps a record store; None: always cold-weight timings).
    max_rounds : int, optional
        Closed-loop rounds (solve, build, time in the network, calibrate); default 3 with
        timing, 0 without.
    workers : int, optional
        Compiler processes for measurement, and threads compiling one round's networks (default:
        up to 2).
    time_all : bool
        Time every candidate of every conv. By default only the candidates that can still win
        are timed: a conv with six or more candidates has one per variant timed first and then
        those predicted within 25% of its fastest (``measure.scouts``), and a conv whose twin (the
        same conv with another epilogue) was timed those its twin ran within 15% of its fastest
        (``measure.twins``); either way each layout pair keeps one. The report lists the others
        under ``records.pruned`` with the reason. Layout ops and transforms between two timed
        channel counts of their size group are priced from those (``measure.sizes``), listed
        under ``records.predicted``; ``time_all`` times them too.
    rpc_tracker, rpc_key : str, optional
        ``"HOST:PORT"`` of a TVM RPC tracker and the key its device servers registered under:
        every kernel is measured on those devices (``rpc_sessions`` of them at once), and the
        built network is verified and timed there (onnxruntime's reference runs here). Records
        are filed under the device's CPU, triple and threads. The device is selected on isolated
        costs (no closed loop, no cache probe: ``cache_budget`` "auto" means none).
    rpc_timeout, rpc_load_timeout : float
        Seconds after which a device's server ends a session (600), and after which a device
        that has not loaded a built network is taken as hung and the run stops with an error (30).
    cross_cc : str, optional
        The C compiler that links libraries for the target (default: ``<triple>-gcc`` on PATH
        for another architecture, the host's otherwise).
    precision : {"fp32", "bf16", "auto"}
        "fp32" (default): every kernel in float32, as the model says. "bf16": bf16 kernels with
        fp32 accumulation are candidates beside the fp32 ones wherever the CPU has AVX512-BF16,
        chosen where faster; the network's error against fp32 is measured and reported. "auto":
        the same candidates, with each layer's precision chosen so that the built network's
        measured error stays within ``tolerance`` (the selection re-solves with a tighter error
        budget when a built network misses it).
    tolerance : float, optional
        The accuracy budget of a lower-precision network: the largest max |y - y_fp32| / max
        |y_fp32| over its outputs on the sample inputs (default ``stages.settings.DEFAULT_TOLERANCE``,
        2e-2).

    Returns
    -------
    OptimizeResult

    Examples
    --------
    >>> import graphselect, models
    >>> r = graphselect.optimize(models.build("tiny"), cache=None, benchmark_runs=0)  # doctest: +SKIP
    >>> r.run(np.zeros(r.input_shape, "float32")).shape                               # doctest: +SKIP
    (1, 10)
    """
    from .report import make_report
    from .stages import check, load, machine, measure, select, settings
    s = settings.settings(target=target, threads=threads, solver=solver, families=families, cache=cache,
                          time_limit=time_limit, verify=verify, benchmark_runs=benchmark_runs, timing=timing,
                          progress=progress, name=name, cache_budget=cache_budget, max_rounds=max_rounds,
                          workers=workers, rpc_tracker=rpc_tracker, rpc_key=rpc_key, rpc_sessions=rpc_sessions,
                          rpc_timeout=rpc_timeout, rpc_load_timeout=rpc_load_timeout,
                          cross_cc=cross_cc, precision=precision,
                          tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance, time_all=time_all)
    clock = Stopwatch()
    imported = load.load(model, s, input_shape)
    select.check_solver(imported, s)
    clock.lap("import")
    with settings.open_store(s) as store:
        measured = measure.measure(imported, s, store)
        clock.lap("measure")
        hw = machine.machine(s, store)
        selection = select.select(imported, measured, hw, s, store)
        clock.lap("select")
        checked = check.check(imported, list(selection.built), selection.label, s, store)
        clock.lap("check")
        report = make_report(imported=imported, measured=measured, machine=hw, selection=selection,
                             checked=checked, settings=s, stage_seconds=clock.total(),
                             store=str(store.path) if store.path else None)
    chosen = selection.by_label(selection.label)
    return OptimizeResult(module=chosen.module, report=report, executable=chosen.executable, target=s.target,
                          library=chosen.library, cc=s.cc, foreign=s.spec.foreign,
                          assignment={n: (c.key if hasattr(c, "key") else c) for n, c in chosen.selection.items()},
                          input_names=imported.prepared.input_names, input_shapes=imported.prepared.input_shapes,
                          output_names=imported.prepared.output_names,
                          extra={"lg": imported.lg, "plan": measured.plan, "problem": selection.problem,
                                 "isolated": selection.isolated, "solution": selection.solution,
                                 "greedy": selection.greedy, "measurements": measured.measurements,
                                 "prepared": imported.prepared, "selection": selection, "imported": imported,
                                 "measured": measured})


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
