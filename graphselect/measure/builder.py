"""The builder: PrimFuncs to kernels, in ``workers`` compiler processes in parallel.

Each PrimFunc is compiled for the target and linked into a shared library (with ``cc`` when the
target is another architecture's: a cross compiler); a compiler that fails, crashes or hangs
makes an exception in that func's place, never a dead run. Only the library file comes back: a
local runner loads it (``files=False``), a remote runner uploads it (``files=True``).
No timing happens while the workers compile.
"""
from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import TimeoutError as FutureTimeout

COMPILE_TIMEOUT_S = 300.0  # one kernel's compile; beyond it the compiler is taken as hung


def compile_executable(func, target, symbol: str = "main"):
    """One PrimFunc compiled in this process under ``symbol`` with graphselect's TIR pipeline
    (``codegen.pipeline``): TVM's Executable, its runtime module ``.mod`` (callable as ``main``
    whatever the symbol: TVM's entry alias of a one-function module)."""
    import tvm
    from ..codegen.pipeline import tir_pipeline
    func = func.with_attr("global_symbol", symbol)
    return tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=tir_pipeline())


def compile_func(func, target, symbol: str = "main"):
    """One PrimFunc as a runtime module, in this process, under ``symbol``."""
    return compile_executable(func, target, symbol).mod


def export(mod, path: str, cc: str | None = None) -> str:
    """Link a compiled module into a shared library (with cross compiler ``cc``)."""
    if cc:
        from tvm.support import cc as tcc
        mod.export_library(path, fcompile=tcc.cross_compiler(cc))
    else:
        mod.export_library(path)
    return path


def export_kept(ex, path: str, obj: str | None, cc: str | None = None) -> str:
    """Link a compiled kernel into a shared library at ``path``; with ``obj``, keep its object
    file there first (``measure.kernels``) and link the library from it, so LLVM emits the
    object once instead of once for the library and once for the kept file (0.2 s of a Winograd
    kernel's 0.6 s on Zen 4)."""
    if obj is None or cc:
        return export(ex, path, cc)
    from pathlib import Path
    from .kernels import keep_object
    kept = keep_object(ex.mod, Path(obj))
    if kept is None:
        return export(ex, path, cc)
    from tvm.support import cc as tcc
    tcc.create_shared(path, [str(kept)])
    return path


class _Dead(Exception):
    """The compiler process exited."""


class _Worker:
    """One compiler process (``measure.compile_worker``) and its line protocol."""
    COMMAND = ("-m", "graphselect.measure.compile_worker")     # after the interpreter

    def __init__(self):
        import subprocess
        import sys
        self.proc = subprocess.Popen([sys.executable, *self.COMMAND],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1, env={**os.environ, "TVM_NUM_THREADS": "1"})

    def request(self, func_path: str, target: dict, out: str, timeout: float, cc: str | None = None,
                symbol: str = "main", obj: str | None = None) -> str:
        import json
        import select
        from .compile_worker import MARK
        try:
            self.proc.stdin.write(json.dumps({"func": func_path, "target": target, "out": out, "cc": cc,
                                              "symbol": symbol, "obj": obj}) + "\n")
            self.proc.stdin.flush()
        except OSError:                  # the process is gone (broken pipe)
            raise _Dead() from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FutureTimeout()
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                raise _Dead()
            if line.startswith(MARK):
                answer = json.loads(line[len(MARK):])
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                return answer["ok"]

    def close(self):
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            pass


def _plain(v):
    """A TVM Map/Array (a target's export) as JSON-able Python."""
    if hasattr(v, "items"):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    try:
        return [_plain(x) for x in v]
    except TypeError:
        return str(v)


class Builder:
    """Compiles PrimFuncs: in ``workers`` compiler processes when more than one (each to a shared
    library), else in this process. ``files``: return library files (kept until ``close``), not
    loaded modules; ``cc``: the C compiler that links them (a cross compiler); ``keep``: the
    folder where each kernel's object file is kept for network builds to link
    (``measure.kernels``; this machine's CPU only, never with ``cc``)."""

    def __init__(self, target, workers: int = 1, *, cc: str | None = None, files: bool = False,
                 keep=None):
        self.target = target
        self.workers = workers if target is not None else 1
        self.cc = cc
        self.files = files
        self.keep = keep if cc is None and target is not None else None
        self._free = None
        self._all: list[_Worker] = []
        self._dir = None
        self._n = 0
        self._pool = None                # the threads that hand PrimFuncs to the compiler processes
        self._target = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for w in self._all:
            w.close()
        self._all = []
        self._free = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def _path(self) -> str:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="graphselect-build-")
        self._n += 1
        return os.path.join(self._dir.name, f"k{self._n}")

    def _start(self):
        import queue
        if self._free is None:
            self._free = queue.Queue()
            for _ in range(self.workers):
                w = _Worker()
                self._all.append(w)
                self._free.put(w)

    def _named(self, func) -> tuple[str, str | None]:
        """The symbol to compile ``func`` under and where to keep its object file: its kernel
        symbol and ``keep/<key>.o`` with ``keep``, else ``main`` and None."""
        if self.keep is None:
            return "main", None
        from .kernels import kernel_key, symbol
        key = kernel_key(func, self.target)
        return symbol(key), str(self.keep / f"{key}.o")

    def _one(self, func, target: dict, base: str):
        import tvm
        sym, obj = self._named(func)
        with open(base + ".json", "w") as f:
            f.write(tvm.ir.save_json(func))
        for attempt in range(2):          # a process that died is replaced and the kernel tried once more
            w = self._free.get()
            if w.proc.poll() is not None:   # found dead before use: replace it, no attempt spent
                w = self._replace(w)
            try:
                path = w.request(base + ".json", target, base + ".so", COMPILE_TIMEOUT_S, self.cc, sym, obj)
                self._free.put(w)
                return path if self.files else tvm.runtime.load_module(path)
            except (FutureTimeout, _Dead) as e:
                self._free.put(self._replace(w))      # hung or dead: a fresh process takes its place
                if isinstance(e, FutureTimeout):
                    return RuntimeError(f"the compiler did not finish within {COMPILE_TIMEOUT_S:.0f} s")
            except RuntimeError as e:
                self._free.put(w)
                return e
        return RuntimeError("the compiler process crashed (twice)")

    def _replace(self, w: _Worker) -> _Worker:
        w.close()
        fresh = _Worker()
        self._all.append(fresh)
        return fresh

    def _here(self, func):
        try:
            sym, obj = self._named(func)
            mod = compile_func(func, self.target, sym)
            if self.files:
                return export_kept(mod, self._path() + ".so", obj, self.cc)
            if obj is not None:
                from pathlib import Path
                from .kernels import keep_object
                keep_object(mod, Path(obj))
            return mod
        except Exception as e:  # noqa: BLE001 - a failing compile is a value
            return e

    def submit(self, funcs: list) -> list:
        """Per PrimFunc (in order), a future of what :meth:`compile_all` gives for it: compiling
        starts at once in a free compiler process, so a caller can make its next PrimFuncs meanwhile.
        With one worker each is compiled here before this returns."""
        from concurrent.futures import Future, ThreadPoolExecutor
        if self.workers <= 1:
            out = []
            for f in funcs:
                fut = Future()
                fut.set_result(self._here(f))
                out.append(fut)
            return out
        self._start()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers)
            self._target = _plain(self.target.export())
        return [self._pool.submit(self._one, f, self._target, self._path()) for f in funcs]

    def compile_all(self, funcs: list) -> list:
        """Per PrimFunc (in order): a runtime module (a library file with ``files``) or the exception."""
        return [f.result() for f in self.submit(funcs)]
