"""The Python API: ``graphselect.optimize`` composes the stages of DESIGN.md (``pipeline``, ``loop``)."""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import GraphSelectError
from .pipeline import Progress, _silence_stderr

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
    input_name: str = "input"
    input_shape: tuple = ()
    extra: dict = field(default_factory=dict)
    library: Path | None = None      # a compiled library on disk this result was loaded from

    def build(self):
        """Compile (once) and return the VM executable."""
        if self.executable is None:
            from .codegen.lower import build
            self.executable = build(self.module, self.target)
        return self.executable

    def run(self, x: np.ndarray) -> np.ndarray:
        """Run the optimized network on one input array."""
        import tvm
        from tvm import relax
        x = np.ascontiguousarray(x, dtype="float32")
        if tuple(x.shape) != tuple(self.input_shape):
            raise GraphSelectError(f"input shape {tuple(x.shape)} != the model's {tuple(self.input_shape)}")
        vm = self.extra.get("vm")
        if vm is None:
            vm = self.extra["vm"] = relax.VirtualMachine(self.build(), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()

    def export(self, outdir: str | os.PathLike) -> dict[str, Path]:
        """Write the compiled library, the annotated module (TVMScript) and the reports.

        Files are written to temporary names and renamed, so an interrupted export never leaves
        a half-written file under the final name.
        """
        from .report import write_reports
        out = Path(outdir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"library": out / "model.so", "module": out / "module.py"}
        tmp = out / ".model.so.partial.so"
        if self.library is not None and self.library.exists():
            shutil.copyfile(self.library, tmp)
        else:
            with _silence_stderr():
                self.build().export_library(str(tmp))
        os.replace(tmp, paths["library"])
        _atomic_write(paths["module"], self.module.script(show_meta=False))
        paths.update(write_reports(self.report, out))
        return paths


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def optimize(model, *, target: str | dict = "llvm", threads: int | None = None,
             input_shape: dict | tuple | None = None, solver: str = "cp-sat", families=None,
             cache: str | os.PathLike | None | bool = True, time_limit: float = 30.0, verify: bool = True,
             benchmark_runs: int = 30, timing=None, progress: Progress | None = None,
             name: str | None = None, cache_budget: int | str | None = "auto", max_rounds: int | None = None,
             workers: int | None = None) -> OptimizeResult:
    """Optimize an ONNX CNN for this CPU.

    Parameters
    ----------
    model : str, Path, bytes or onnx.ModelProto
        The model (a path, serialized bytes or a loaded proto).
    target : str or dict
        ``"llvm"`` (this CPU) or ``"llvm -mcpu=NAME"``; only this machine's CPU can be measured.
    threads : int, optional
        Threads for measurement and inference (default: the CPUs this process may use).
    input_shape : dict or tuple, optional
        Fixes a dynamic input shape, e.g. ``(1, 3, 224, 224)`` or ``{"x": (1, 3, 224, 224)}``.
    solver : {"cp-sat", "greedy", "dp", "pbqp", "brute"}
    families : sequence of str, optional
        Candidate families to consider (default: all).
    cache : path, True or None
        The SQLite record store: True for the default under the user's cache folder, a path,
        or None to keep records in memory only. It also keeps what built networks showed, from
        which this machine's calibration is fitted.
    verify : bool
        Compare every built network with onnxruntime (raises BuildError beyond 1e-4 relative error).
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
        Compiler processes for measurement (default: up to 2).

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
    from . import loop, pipeline
    from .report import make_report
    s = pipeline.settings(target=target, threads=threads, solver=solver, families=families, cache=cache,
                          time_limit=time_limit, verify=verify, benchmark_runs=benchmark_runs, timing=timing,
                          progress=progress, name=name, cache_budget=cache_budget, max_rounds=max_rounds,
                          workers=workers)
    clock = pipeline.Stopwatch()
    imported = pipeline.load(model, s, input_shape)
    clock.lap("import")
    with pipeline.open_store(s) as store:
        measured = pipeline.measure(imported, s, store)
        clock.lap("measure")
        machine = pipeline.machine(s, store)
        selection = loop.select(imported, measured, machine, s, store)
        clock.lap("select")
        checked = pipeline.check(imported, list(selection.built), selection.label, s, store)
        clock.lap("check")
        report = make_report(imported=imported, measured=measured, machine=machine, selection=selection,
                             checked=checked, settings=s, stage_seconds=clock.total(),
                             store=str(store.path) if store.path else None)
    chosen = selection.by_label(selection.label)
    return OptimizeResult(module=chosen.module, report=report, executable=chosen.executable, target=s.target,
                          library=chosen.library,
                          assignment={n: (c.key if hasattr(c, "key") else c) for n, c in chosen.selection.items()},
                          input_name=imported.prepared.input_name, input_shape=imported.prepared.input_shape,
                          extra={"lg": imported.lg, "plan": measured.plan, "problem": selection.problem,
                                 "isolated": selection.isolated, "solution": selection.solution,
                                 "greedy": selection.greedy, "measurements": measured.measurements,
                                 "prepared": imported.prepared, "selection": selection, "imported": imported,
                                 "measured": measured})
