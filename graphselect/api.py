"""The Python API: ``graphselect.optimize`` runs every stage of DESIGN.md on one model."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import BuildError, GraphSelectError

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int, str], None]   # (stage, done, total, message)
TOLERANCE = 1e-4      # max |tvm - onnxruntime| / max |onnxruntime|
MAX_ALTERNATIVES = 2  # other solver assignments built and timed beside the chosen one and greedy


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

    def build(self):
        """Compile (once) and return the VM executable."""
        if self.executable is None:
            from .rewrite.build import build
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
        ex = self.build()
        with _silence_stderr():     # TVM logs a harmless "Scope Saving" warning per function
            ex.export_library(str(tmp))
        os.replace(tmp, paths["library"])
        _atomic_write(paths["module"], self.module.script(show_meta=False))
        paths.update(write_reports(self.report, out))
        return paths


@contextlib.contextmanager
def _silence_stderr():
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def _quiet(*_a, **_k):
    pass


def optimize(model, *, target: str | dict = "llvm", threads: int | None = None,
             input_shape: dict | tuple | None = None, solver: str = "cp-sat", families=None,
             cache: str | os.PathLike | None | bool = True, time_limit: float = 30.0, verify: bool = True,
             benchmark_runs: int = 30, timing=None, progress: Progress | None = None,
             name: str | None = None, cache_budget: int | str | None = "auto") -> OptimizeResult:
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
    solver : {"cp-sat", "greedy", "brute"}
    families : sequence of str, optional
        Candidate families to consider (default: all).
    cache : path, True or None
        The SQLite record store: True for the default under the user's cache folder, a path,
        or None to keep records in memory only.
    verify : bool
        Compare the built network with onnxruntime (raises BuildError beyond 1e-4 relative error).
    benchmark_runs : int
        Runs for the end-to-end time of each built assignment and onnxruntime, in interleaved
        rounds of short blocks (``measure.e2e.compare``); the assignment fastest round by round
        is kept (0 to skip timing and keep the solver's).
    cache_budget : int, "auto" or None
        Bytes of cache the network's weights, workspaces and live activations may count on to
        run with warm-weight timings ("auto": from the CPU's cache sizes, see
        ``costmodels.hardware``, with partial-residency steps beyond it measured once per CPU
        when ``cache`` keeps a record store; None: always cold-weight timings).

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
    from .target import parse_target
    spec = parse_target(target, threads=threads)
    # TVM's thread pool reads this when it starts; set it before any TVM kernel runs
    os.environ["TVM_NUM_THREADS"] = str(spec.threads)
    progress = progress or _quiet
    if timing is None:
        from .measure.local import TimingConfig
        timing = TimingConfig()

    import tvm
    running = int(tvm.get_global_func("runtime.NumThreads")())
    if running != spec.threads:     # the pool started earlier: timings would be filed under the wrong count
        raise GraphSelectError(
            f"TVM's thread pool already runs {running} thread(s), started before optimize could set "
            f"TVM_NUM_THREADS={spec.threads}; set TVM_NUM_THREADS={spec.threads} before the first TVM kernel "
            f"runs in this process, or pass threads={running}")
    from costmodels.problem import Assignment
    from .frontend import onnx_prep
    from .frontend.relax_import import import_onnx
    from .graph.layers import extract
    from .measure import plan as plan_mod
    from .measure.local import measure
    from .measure.store import Context, RecordStore, default_path
    from .rewrite.apply import apply, count_transforms
    from .report import make_report
    from . import solve as solve_mod
    from .target import cpu_model, runtime_tag

    t_start = time.perf_counter()
    stage_s: dict[str, float] = {}

    def lap(stage: str, t0: float) -> float:
        stage_s[stage] = round(time.perf_counter() - t0, 3)
        return time.perf_counter()

    t0 = time.perf_counter()
    progress("import", 0, 1, "loading the model")
    original = onnx_prep.load_model(model)
    if isinstance(input_shape, (tuple, list)):
        input_shape = {_first_input(original): tuple(int(v) for v in input_shape)}
    prepared = onnx_prep.prepare(original, input_shapes=input_shape)
    onnx_convs = tuple(n.name or n.output[0] for n in prepared.model.graph.node if n.op_type == "Conv")
    mod = import_onnx(prepared.model, prepared.input_name, prepared.input_shape)
    lg = extract(mod, onnx_conv_names=onnx_convs)
    lg.extra["module"] = mod
    tvm_target = spec.tvm_target()
    progress("import", 1, 1, f"{len(lg.convs)} conv layers, {len(lg.layers)} layers")
    t0 = lap("import", t0)

    store = RecordStore(default_path() if cache is True else cache) if cache not in (None, False) else RecordStore(None)
    ctx = Context(target=spec.key, cpu=cpu_model(), threads=spec.threads, tvm=runtime_tag(tvm.__version__))
    plan = plan_mod.make_plan(lg, tvm_target, families)
    reused_before = sum(1 for j in {(j.workload, j.candidate) for j in plan.jobs} if store.get(ctx, *j) is not None)
    meas = measure(list(plan.jobs), target=tvm_target, ctx=ctx, store=store, timing=timing,
                   progress=lambda d, n, m: progress("measure", d, n, m))
    t0 = lap("measure", t0)

    from costmodels.hardware import detect, residency, residency_budget, throughput
    hw = detect()
    if cache_budget == "auto":
        budget = residency_budget(hw)
    else:
        budget = None if cache_budget in (None, "off") else int(cache_budget)
    hardware = {"l1d_bytes": hw.l1d_bytes, "l2_bytes": hw.l2_bytes, "l3_bytes": hw.l3_bytes,
                "line_bytes": hw.line_bytes, "source": hw.source, "residency_budget_bytes": residency_budget(hw)}
    partial = ()
    if store.path is not None:     # peak FLOP/s, bandwidth, residency steps: measured once per CPU and threads
        tp = throughput(store.path.parent / "hardware.json", threads=spec.threads, cpu=ctx.cpu)
        hardware.update(peak_gflops=tp.peak_gflops, bandwidth_gbs=tp.bandwidth_gbs)
        if cache_budget == "auto" and budget:
            res = residency(store.path.parent / "hardware.json", budget, threads=spec.threads, cpu=ctx.cpu)
            partial = res.steps
            hardware["residency_steps"] = [list(st) for st in res.steps]
    problem = plan_mod.make_problem(lg, plan, meas, cache_bytes=budget, partial=partial)
    try:
        assignment: Assignment = solve_mod.solve(problem, method=solver, time_limit=time_limit)
    except ValueError as e:        # e.g. dp on a graph that is not a tree: the user picked it
        raise GraphSelectError(str(e)) from None
    try:
        greedy = solve_mod.solve(problem, method="greedy") if solver != "greedy" else assignment
    except GraphSelectError:       # greedy can dead-end on reconvergent graphs; it is only a baseline
        greedy = assignment
    progress("solve", 1, 1, f"{solver}: predicted {assignment.cost:.3f} ms "
             f"({'optimal' if assignment.optimal else 'not proven optimal'})")
    t0 = lap("solve", t0)

    # the solver's choice, and (when end-to-end timing is on) the other distinct assignments
    # worth checking: predictions are verified by measurement, not trusted
    alternatives = [(solver, assignment)]
    if benchmark_runs:
        # the best assignments of other residency levels: the one that fits the budget (safe
        # when the shares beyond it are off) and the predicted fastest of the rest
        others = sorted(assignment.alternatives, key=problem.evaluate)
        fits = [c for c in others if problem.resident(c)][:1]
        for c in fits + [c for c in others if c not in fits][:MAX_ALTERNATIVES - len(fits)]:
            share = problem.warm_share(c)
            state = "resident" if share >= 1 else f"{share:.0%} warm" if share > 0 else "cold"
            # optimal for its own residency level, as the solver proved (or not) for all levels
            alternatives.append((f"{solver} ({state})", Assignment(
                tuple(c), problem.evaluate(c), solver, assignment.optimal, seconds=assignment.seconds,
                resident=problem.resident(c))))
        alternatives.append(("greedy", greedy))
    distinct: dict = {}
    for lb, a in alternatives:
        distinct.setdefault(tuple(a.choice), (lb, a))
    alternatives = list(distinct.values())
    built = []
    for label, a in alternatives:
        progress("build", len(built), len(alternatives), f"compiling the {label} selection")
        sel = plan_mod.selection_from(lg, plan, a.choice)
        annotated = apply(lg, sel, tvm_target)
        r = OptimizeResult(module=annotated, assignment={}, report={}, target=tvm_target,
                           input_name=prepared.input_name, input_shape=prepared.input_shape)
        r.build()
        built.append((label, a, sel, r))
    t0 = lap("build", t0)

    x = np.random.default_rng(0).standard_normal(prepared.input_shape).astype("float32")
    ort_bytes = _with_shape(original, prepared).SerializeToString()
    errs: dict[str, float] = {}
    sess = None
    if verify or benchmark_runs:
        from .measure.e2e import ort_session
        sess = ort_session(ort_bytes, spec.threads)
    if verify:
        progress("verify", 0, 1, "comparing with onnxruntime")
        ref = sess.run(None, {prepared.input_name: x})[0]
        for label, _, _, r in built:
            got = r.run(x)
            if got.shape != ref.shape:
                raise BuildError(f"output shape {got.shape} differs from onnxruntime's {ref.shape}")
            e = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))
            if not np.isfinite(e) or e > TOLERANCE:
                raise BuildError(f"outputs of the {label} selection differ from onnxruntime: max relative "
                                 f"error {e:.2e} > {TOLERANCE:g}")
            errs[label] = e
        t0 = lap("verify", t0)
    times = {}
    measured: dict[str, float] = {}
    if benchmark_runs:
        from .measure.e2e import compare, ort_runner, vm_runner
        progress("benchmark", 0, 1, f"timing end to end ({benchmark_runs} runs each)")
        fns = {label: vm_runner(r.build(), x) for label, _, _, r in built}
        fns["onnxruntime"] = ort_runner(sess, prepared.input_name, x)
        ts = compare(fns, runs=benchmark_runs)
        measured = {k: ts.median(k) for k in fns}
        t0 = lap("benchmark", t0)
    # the fastest measured assignment wins (compared round by round, see measure.e2e); without
    # timing, the solver's
    fastest = ts.fastest([b[0] for b in built]) if measured else built[0][0]
    label, assignment_used, selection, result = next(b for b in built if b[0] == fastest)
    if measured:
        times = {"graphselect": measured[label], "onnxruntime": measured["onnxruntime"]}
    err = errs.get(label)
    stage_s["total"] = round(time.perf_counter() - t_start, 3)

    result.assignment = {n: (s.key if hasattr(s, "key") else s) for n, s in selection.items()}
    result.report = make_report(
        name=name or _model_name(model, original), lg=lg, plan=plan, meas=meas, problem=problem,
        assignment=assignment_used, greedy=greedy, spec=spec, ctx=ctx, prepared=prepared,
        transforms=count_transforms(result.module), max_rel_err=err, times=times, stage_seconds=stage_s,
        records={"jobs": len({(j.workload, j.candidate) for j in plan.jobs}), "reused": reused_before,
                 "store": str(store.path) if store.path else None})
    result.report["alternatives"] = [
        {"label": lb, "predicted_ms": round(a.cost, 4), "measured_ms": round(measured[lb], 4) if lb in measured else None,
         "relative_to_chosen": round(ts.ratio(lb, label), 4) if measured else None,
         "max_rel_err": errs.get(lb), "chosen": lb == label} for lb, a, _, _ in built]
    result.report["hardware"] = hardware
    result.report["chosen_by"] = "measurement" if measured and len(built) > 1 else assignment_used.method
    result.extra.update(lg=lg, plan=plan, problem=problem, solution=assignment, greedy=greedy,
                        measurements=meas, prepared=prepared)
    store.close()
    return result


def _first_input(m) -> str:
    inits = {i.name for i in m.graph.initializer}
    return next(i.name for i in m.graph.input if i.name not in inits)


def _with_shape(original, prepared):
    """The user's model with the input shape graphselect used (for onnxruntime)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(original)
    for i in m.graph.input:
        if i.name == prepared.input_name:
            dims = i.type.tensor_type.shape.dim
            for d, v in zip(dims, prepared.input_shape):
                d.Clear()
                d.dim_value = int(v)
    return m


def _model_name(model, proto) -> str:
    if isinstance(model, (str, os.PathLike)):
        return Path(model).stem
    return proto.graph.name or "model"
