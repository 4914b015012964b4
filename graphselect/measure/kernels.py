"""Compiled kernels kept beside the record store, so that a network build links the object file
measurement compiled instead of compiling the same PrimFunc again (DESIGN.md, "Build").

A kernel is identified by its PrimFunc (structural hash, the attributes that only name it or
describe it to Relax's fusion left out), the target and TVM's version: two PrimFuncs with one key
compile to the same code. Measurement compiles each job's PrimFunc under the symbol
``gsk_<key>`` (TVM also emits the entry alias ``main`` for a one-function module, which the
runners call) and keeps the object file as ``kernels/<key>.o``. A network build
(:func:`link_measured`) swaps every ``call_tir`` whose PrimFunc has an object for a
``call_dps_packed`` of the PrimFunc's own symbol, drops the PrimFunc from the module, and links
the objects into the network's library with the linker defining the PrimFunc's symbol as the
kernel's (``--defsym``), so the VM, its instrument and the report see the names they always did.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

# attributes that name a PrimFunc or describe it to Relax's fusion (AnnotateTIROpPattern) and
# do not change the code it compiles to
_NAMING = ("global_symbol", "op_pattern")
PREFIX = "gsk_"


def normalized(func):
    """``func`` without the attributes of :data:`_NAMING`."""
    for k in _NAMING:
        if func.attrs is not None and k in func.attrs:
            func = func.without_attr(k)
    return func


def kernel_key(func, target) -> str:
    """The key of ``func`` compiled for ``target`` (see the module's docstring)."""
    import tvm
    import tvm_ffi
    what = f"{tvm_ffi.structural_hash(normalized(func))}|{target}|{tvm.__version__}"
    return hashlib.sha1(what.encode()).hexdigest()[:24]


def symbol(key: str) -> str:
    return PREFIX + key


def kernel_dir(cache: Path | None, foreign: bool = False, remote: bool = False) -> Path | None:
    """Where compiled kernels are kept: beside the record store, for this machine's CPU only
    (a cross-compiled object links into no library built here; an RPC device's networks are
    built as they always were)."""
    if cache is None or foreign or remote:
        return None
    return cache.parent / "kernels"


def keep_object(mod, path: Path) -> Path | None:
    """Write ``mod``'s object file at ``path`` (atomically; never fails the measurement): the
    path when the object is there (written now or before), else None."""
    if path.exists():
        return path
    try:
        if mod.kind != "llvm" or list(mod.imports):
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial.o")
        mod.write_to_file(str(tmp))
        os.replace(tmp, path)
        return path
    except Exception as e:  # noqa: BLE001 - the kept object is an optimisation
        log.debug("could not keep kernel object %s: %s", path, e)
        return None


def link_measured(mod, kdir: Path | None, target):
    """``mod`` (a lowered module) with every PrimFunc whose compiled object ``kdir`` holds
    replaced by that object: (module, objects to link, linker options). Nothing changes without
    ``kdir``, when no object is there, or when a call to such a PrimFunc is not a plain
    ``call_tir(func, args)``."""
    if kdir is None or not kdir.is_dir():
        return mod, [], []
    import tvm
    from tvm import relax as rx, tirx
    swap: dict = {}            # GlobalVar -> the PrimFunc's symbol
    objects: dict = {}         # GlobalVar -> its object file
    for gv, f in mod.functions_items():
        if not isinstance(f, tirx.PrimFunc):
            continue
        key = kernel_key(f, target)
        obj = kdir / f"{key}.o"
        if obj.exists():
            swap[gv] = (str(f.attrs["global_symbol"]) if f.attrs is not None and "global_symbol" in f.attrs
                        else gv.name_hint)
            objects[gv] = (key, obj)
    if not swap:
        return mod, [], []
    call_tir = tvm.ir.Op.get("relax.call_tir")
    odd = []                   # calls to a swapped PrimFunc that are not call_tir(func, args)

    @rx.expr_functor.mutator
    class _Swap(rx.PyExprMutator):
        def visit_call_(self, call):
            if call.op.same_as(call_tir) and len(call.args) == 2 and call.args[0] in swap:
                out = call.ty_args[0]
                out = list(out.fields) if isinstance(out, rx.TupleType) else out
                return rx.call_dps_packed(rx.ExternFunc(swap[call.args[0]]), self.visit_expr(call.args[1]), out)
            return super().visit_call_(call)

        def visit_global_var_(self, gv):
            if gv in swap:
                odd.append(gv)
            return gv

    out = {}
    for gv, f in mod.functions_items():
        if gv not in swap:
            out[gv] = _Swap().visit_expr(f) if isinstance(f, rx.Function) else f
    if odd:
        log.debug("kernel objects not linked: %d PrimFunc(s) called otherwise than call_tir(func, args)", len(odd))
        return mod, [], []
    log.debug("network: %d of %d PrimFuncs linked from the kernels measurement compiled", len(swap),
             sum(1 for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)))
    new = tvm.IRModule(out, attrs=mod.attrs) if mod.attrs is not None else tvm.IRModule(out)
    defs = [f"-Wl,--defsym,__tvm_ffi_{name}=__tvm_ffi_{symbol(objects[gv][0])}" for gv, name in swap.items()]
    return new, sorted({str(o) for _, o in objects.values()}), defs
