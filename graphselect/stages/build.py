"""Stage 5: one assignment rewritten into the annotated Relax module and compiled (DESIGN.md,
"Build"); the compiled network kept beside the record store under a key of the module itself."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..errors import BuildError
from .load import Imported
from .measure import Measured
from .settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Built:
    label: str
    assignment: object                 # costmodels.problem.Assignment
    selection: dict                    # layer -> Candidate | layout (rewrite.apply's input)
    module: object                     # the annotated Relax IRModule
    executable: object                 # the compiled VM executable (or the loaded library)
    library: Path | None = None        # the exported library it was loaded from, when cached
    symbols: dict = field(default_factory=dict)   # PrimFunc symbol -> conv layer name (rewrite.apply's names)
    # how it was made: "compiled" (every PrimFunc), "linked" (the kernels measurement compiled
    # linked in, the rest compiled: measure.kernels) or "cache" (loaded from the build cache)
    origin: str = "compiled"
    linked: int = 0                    # PrimFuncs linked from measurement's objects

    @property
    def choice(self) -> tuple[int, ...]:
        return tuple(self.assignment.choice)


def build(imported: Imported, measured: Measured, label: str, assignment, s: Settings) -> Built:
    """Rewrite and compile one assignment. With a record store, the compiled library is kept
    under ``builds/`` beside it, keyed by the annotated module itself (:func:`module_key`), and
    loaded instead of compiled again by a later run that rewrites to the same module."""
    return build_all(imported, measured, [(label, assignment)], s)[0]


def build_all(imported: Imported, measured: Measured, wants, s: Settings, progress=None) -> list[Built]:
    """:func:`build` of every ``(label, assignment)`` in ``wants``, in their order. Each is rewritten
    and lowered here, one after another (Relax's BlockBuilder and TE's tag scope keep one stack for
    the process: two legalizations at once failed with "nested op_tag is not allowed"); those not in
    the build cache are then compiled in ``s.workers`` threads at once, since TVM's compiler releases
    the GIL: two ResNet-18 networks compiled in 14.6 s on two threads against 19.7 s one after the
    other on a 2-vCPU Zen 5 VM (sending each to the threads as soon as it was lowered, while the
    next was rewritten, gained nothing on 2 cores: 10.6 s against 10.4 s for four on Zen 4).
    ``progress(done, total, what)`` is called here, in the calling thread, as each finishes
    ("compiled LABEL"), and once for those loaded from the build cache. The first build that
    fails raises :class:`BuildError` once the others have finished."""
    from concurrent.futures import ThreadPoolExecutor, as_completed
    ready: dict[int, Built] = {}
    todo = []
    from ..codegen.lower import lower
    for i, (label, assignment) in enumerate(wants):
        b, cached = _rewrite(imported, measured, label, assignment, s)
        if b.executable is not None:
            ready[i] = b
        else:
            try:
                lowered = lower(b.module, s.target)
            except Exception as e:  # noqa: BLE001 - the user needs to know which selection failed
                raise _failed(b.label, e) from e
            todo.append((i, b, lowered, cached, _linked(lowered, cached, s)))
    done = len(ready)
    if progress is not None and done:
        progress(done, len(wants), "loaded from the build cache")
    failure = None
    with ThreadPoolExecutor(max(1, min(s.workers, len(todo)))) as pool:
        futures = {pool.submit(_compile, b, lowered, cached, s, linked): i for i, b, lowered, cached, linked in todo}
        for f in as_completed(futures):
            i = futures[f]
            try:
                ready[i] = f.result()
            except BuildError as e:
                failure = failure or e
                continue
            done += 1
            if progress is not None:
                progress(done, len(wants), f"compiled {ready[i].label}")
    if failure is not None:
        raise failure
    return [ready[i] for i in range(len(wants))]


def _rewrite(imported: Imported, measured: Measured, label: str, assignment, s: Settings) -> tuple[Built, Path | None]:
    """The assignment rewritten into its annotated module, with the cached library loaded when
    there is one (``executable`` None: to compile), and where its library is kept."""
    import tvm
    from ..measure import plan as plan_mod
    from ..rewrite.apply import apply
    sel = plan_mod.selection_from(imported.lg, measured.plan, assignment.choice)
    module = apply(imported.lg, sel, s.target)
    b = Built(label, assignment, sel, module, None, None, conv_symbols(imported, sel))
    cached = build_path(module, s)
    if cached is not None and cached.exists():
        try:
            return replace(b, executable=tvm.runtime.load_module(str(cached)), library=cached, origin="cache"), cached
        except Exception:  # noqa: BLE001 - a damaged cache file is rebuilt
            log.info("cached build %s could not be loaded; rebuilding", cached)
    return b, cached


def _failed(label: str, e: Exception) -> BuildError:
    return BuildError(f"the {label} selection did not compile: {str(e).strip().splitlines()[-1][:300]}")


def _linked(lowered, cached: Path | None, s: Settings):
    """``lowered`` with the kernels measurement compiled swapped in (``measure.kernels``):
    (module, objects, linker options), or None when none is kept (or the build is not kept in a
    file, which linking them needs)."""
    from ..measure.kernels import link_measured
    from .measure import kernel_dir
    if cached is None:
        return None
    mod, objects, options = link_measured(lowered, kernel_dir(s), s.target)
    return (mod, objects, options) if objects else None


def _compile(b: Built, lowered, cached: Path | None, s: Settings, linked=None) -> Built:
    """``b``'s ``lowered`` module compiled, and kept at ``cached`` (thread-safe: its passes are
    TVM's own, and TVM's target and pass contexts are per thread). With ``linked`` (from
    :func:`_linked`) the kernels measurement compiled are linked in instead of compiled again;
    should that fail, the whole module is compiled as before."""
    from ..codegen.lower import compile_module
    if linked is not None:
        try:
            return _compile_linked(b, cached, s, *linked)
        except Exception as e:  # noqa: BLE001 - linking is an optimisation: compile it all instead
            from ..measure.jobs import last_line
            log.warning("linking the measured kernels into the %s network failed (%s); compiling them again",
                        b.label, last_line(e))
    try:
        ex = compile_module(lowered, s.target)
    except Exception as e:  # noqa: BLE001 - the user needs to know which selection failed
        raise _failed(b.label, e) from e
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = _partial(cached)
            _export(ex, tmp)
            os.replace(tmp, cached)
        except OSError as e:       # the cache is an optimisation: never fail the run for it
            log.warning("could not keep the build in %s: %s", cached.parent, e)
    return replace(b, executable=ex)


def _compile_linked(b: Built, cached: Path, s: Settings, mod, objects, options) -> Built:
    """:func:`_compile` of ``mod``, whose measured kernels are ``objects``: compiled, linked with
    them into ``cached`` and loaded from there (the VM finds the kernels in the library only)."""
    import tvm
    from ..codegen.lower import compile_module
    ex = compile_module(mod, s.target)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial(cached)
    try:
        _export(ex, tmp, addons=list(objects), options=list(options))
        lib = tvm.runtime.load_module(str(tmp))
        from tvm import relax
        relax.VirtualMachine(lib, tvm.cpu())        # every kernel resolved now, not at the first call
        os.replace(tmp, cached)
    finally:
        if tmp.exists():
            tmp.unlink()
    return replace(b, executable=lib, library=cached, origin="linked", linked=len(options))


def _partial(cached: Path) -> Path:
    """This thread's temporary name for a library to be renamed ``cached`` once written."""
    return cached.with_name(f".{cached.stem}.{os.getpid()}.{threading.get_ident()}.partial.so")


def _export(ex, path: Path, **kw) -> None:
    """``ex.export_library(path, **kw)``, TVM's warnings silenced. Exports of one round run at
    once: each took 2.4 s for a 150 MB ResNet-18 library (its Winograd weights packed into an
    object, then linked), and one at a time they were most of a round's 13 s build on Zen 4."""
    with silence_stderr():
        ex.export_library(str(path), **kw)


def module_key(module, s: Settings) -> str:
    """What identifies a compiled network: the annotated module's structural hash (its PrimFuncs,
    graph and bound constants, weights included) and its script, the code that lowers and compiles
    it, the target and TVM. Whatever option list, family set or rewrite produced the module, two
    modules share a key only when they are the same module."""
    import tvm_ffi
    from .. import codegen
    script = hashlib.sha1(module.script(show_meta=False).encode()).hexdigest()
    what = f"{tvm_ffi.structural_hash(module)}|{script}|{codegen.code_version()}|{s.ctx.target}|{s.ctx.tvm}"
    return hashlib.sha1(what.encode()).hexdigest()[:24]


def build_path(module, s: Settings) -> Path | None:
    """Where the compiled network of ``module`` is kept (None: no record store, or a library for
    another CPU, which cannot be loaded back here)."""
    if s.cache is None or s.spec.foreign:
        return None
    return s.cache.parent / "builds" / f"{module_key(module, s)}.so"


def conv_symbols(imported: Imported, selection: dict) -> dict[str, str]:
    """PrimFunc symbol -> conv layer name, for the kernels of ``selection`` (see rewrite.apply)."""
    return {f"{name}_{c.family}": name for name, c in selection.items()
            if imported.lg.layers[name].kind == "conv"}


_SILENT = threading.Lock()
_silent = {"depth": 0, "saved": None}      # threads inside silence_stderr, and the fd 2 they replaced


@contextlib.contextmanager
def silence_stderr():
    """TVM logs a harmless "Scope Saving" warning per function while exporting. The process's
    fd 2 points at /dev/null while any thread is inside (threads may overlap; the last one out
    puts it back); the CLI's progress writes to its own copy of the descriptor."""
    import sys
    with _SILENT:
        if _silent["depth"] == 0:
            sys.stderr.flush()
            _silent["saved"] = os.dup(2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            os.close(null)
        _silent["depth"] += 1
    try:
        yield
    finally:
        with _SILENT:
            _silent["depth"] -= 1
            if _silent["depth"] == 0:
                os.dup2(_silent["saved"], 2)
                os.close(_silent["saved"])
                _silent["saved"] = None


class LocalNetwork:
    """A built network on this machine, with the interface of ``measure.rpc.RemoteNetwork``."""

    def __init__(self, executable):
        import tvm
        from tvm import relax
        self.executable = executable
        self.vm = relax.VirtualMachine(executable, tvm.cpu())

    def run(self, xs) -> list[np.ndarray]:
        from ..runtime import call
        return call(self.vm, xs)

    def runner(self, xs):
        """The bare call: inputs converted once beforehand, outputs left on the device."""
        from ..measure.e2e import vm_runner
        return vm_runner(self.executable, xs)

    def user_runner(self, xs):
        """A user's call: numpy inputs converted, every output copied back (``OptimizeResult.run``)."""
        from ..measure.e2e import vm_user_runner
        return vm_user_runner(self.executable, xs)


def networks(built: list[Built], s: Settings) -> dict:
    """label -> the built network loaded where it runs: this machine, or an RPC device."""
    if not s.remote:
        return {b.label: LocalNetwork(b.executable) for b in built}
    from ..measure.rpc import RemoteNetwork, open_session
    sess = open_session(s.rpc)
    where = f"the RPC device under key {s.rpc.key!r}"
    return {b.label: RemoteNetwork(sess, b.executable, s.cc, b.library, s.rpc.load_timeout, where) for b in built}
