"""Lower the annotated module and compile it: legalize the remaining Relax ops, fuse them,
schedule every PrimFunc the families did not, then compile with only the lowering passes so
nothing re-fuses the scheduled kernels."""
from __future__ import annotations

from .schedule import schedule_module


def lower(mod, target):
    import tvm
    from tvm import relax as rx
    seq = tvm.transform.Sequential([
        rx.transform.LegalizeOps(), rx.transform.AnnotateTIROpPattern(), rx.transform.FoldConstant(),
        rx.transform.FuseOps(), rx.transform.FuseTIR(), rx.transform.DeadCodeElimination()])
    with target:
        mod = seq(mod)
    return schedule_module(mod)


def compile_module(mod, target):
    """``tvm.compile`` of a lowered (scheduled) module."""
    import tvm
    from tvm import relax as rx
    from .pipeline import tir_pipeline
    passes = tvm.transform.Sequential([
        rx.transform.RewriteDataflowReshape(), rx.transform.ToNonDataflow(), rx.transform.RemovePurityChecking(),
        rx.transform.CallTIRRewrite(), rx.transform.StaticPlanBlockMemory(), rx.transform.LowerAllocTensor(),
        rx.transform.KillAfterLastUse(), rx.transform.LowerRuntimeBuiltin(), rx.transform.ComputePrimValue(),
        rx.transform.VMShapeLower(), rx.transform.AttachGlobalSymbol()])
    return tvm.compile(mod, target=target, relax_pipeline=passes, tir_pipeline=tir_pipeline())


def build(mod, target):
    """Annotated module -> VM executable."""
    return compile_module(lower(mod, target), target)
