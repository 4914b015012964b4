"""The TIR pipeline every graphselect kernel is compiled with (``tvm.compile(..., tir_pipeline=NAME)``).

It is TVM 0.27's default CPU pipeline (``tvm.s_tir.pipeline.default_s_tir_pipeline``), pass for
pass, with one addition: a Winograd kernel (``graphselect.family`` winograd or winograd_bf16) has
its unrolled loops unrolled and simplified *before* ``VectorizeLoop`` instead of after it.

Why: a Winograd transform's coefficients are Selects on the unrolled index among constants
(``candidates.winograd._comb``). Unrolled first, each folds to a scalar constant, and constant
folding drops the zero terms and the multiplications by one. Vectorized first, it folds only to a
broadcast constant that the simplifier multiplies by, zeros and ones included: an F(4x4) kernel
lowers to 1.46x the TIR and about 10% more instructions (2026-12-07, Zen 4). Until then the
Selects chose among whole linear combinations, and the default pipeline carried every alternative
through every pass (an F(6x6) kernel spent 2.1 s of its 2.7 s compile in TIR simplification); with
that form the machine code of both pipelines was the same (``bench/pipeline_ab.py``,
``bench/results/pipeline-ab-20261207.md``) and this one compiled F(6x6) 2.4x faster.
The pass list is a copy of TVM 0.27's (TVM builds it inside a closure, with no hook between
``LoopPartition`` and ``VectorizeLoop``); ``tests/tvm/test_pipeline.py`` checks that a
non-Winograd kernel lowers structurally equal under both, so a TVM whose default drifts fails it.
"""
from __future__ import annotations

NAME = "graphselect"
EARLY_UNROLL = frozenset({"winograd", "winograd_bf16"})   # families unrolled before vectorizing


def _early_unroll():
    import tvm
    from tvm import tirx

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="graphselect.EarlyUnroll")
    def early(func, mod, ctx):  # noqa: ARG001
        fam = func.attrs.get("graphselect.family") if func.attrs is not None else None
        if fam is None or str(fam) not in EARLY_UNROLL:
            return func
        one = tvm.IRModule({"main": func})
        one = tirx.transform.StmtSimplify()(tirx.transform.UnrollLoop()(one))
        return one["main"]
    return early


def _pipeline_factory():
    import tvm
    from tvm import s_tir, tirx
    from tvm.s_tir.pipeline import finalize_device_passes, finalize_host_passes

    @tvm.transform.module_pass(opt_level=0, name="graphselect.Pipeline")
    def pipeline(mod, _ctx):
        config = tvm.transform.PassContext.current().config
        passes = [
            s_tir.transform.CanonicalizeLoop(),
            s_tir.transform.LowerCrossThreadReduction(),
            s_tir.transform.LowerInitBlock(),
            s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
            s_tir.transform.ConvertBlocksToOpaque(),
            s_tir.transform.LiftThreadBinding(),
            s_tir.transform.ManifestSharedMemoryLocalStage(),
            s_tir.transform.CompactBufferAllocation(),
            s_tir.transform.LowerAutoCopy(),
            s_tir.transform.UnifyThreadBinding(),
            s_tir.transform.LowerMatchBuffer(),
            s_tir.transform.StmtSimplify(),
            s_tir.transform.InjectPermutedLayout(),
            s_tir.transform.AnnotateIrregularLoop(),
            s_tir.transform.InjectSoftwarePipeline(),
            s_tir.transform.TransformMmaBufferLayout(),
            s_tir.transform.LowerOpaqueBlock(),
            tirx.transform.FlattenBuffer(),
            tirx.transform.BF16ComputeLegalize(),
            tirx.transform.NarrowDataType(32),
            s_tir.transform.LoopPartition(),
            _early_unroll(),                                   # the one addition
            tirx.transform.VectorizeLoop(not bool(config.get("tirx.disable_vectorize", False))),
            s_tir.transform.InjectVirtualThread(),
            s_tir.transform.InjectDoubleBuffer(),
        ]
        if not bool(config.get("tirx.disable_storage_rewrite", False)):
            passes.append(tirx.transform.StorageRewrite())
        if config.get("tirx.use_async_copy", False):
            passes.append(s_tir.transform.LowerAsyncDMA())
        passes += [
            s_tir.transform.HoistIfThenElse(),
            tirx.transform.UnrollLoop(),
            s_tir.transform.RenormalizeSplitPattern(),
            tirx.transform.StmtSimplify(),
            tirx.transform.RemoveNoOp(),
            s_tir.transform.RewriteUnsafeSelect(),
        ]
        if bool(config.get("tirx.instrument_bound_checkers", False)):
            passes.append(s_tir.transform.InstrumentBoundCheckers())
        if not bool(config.get("tirx.disable_cse_tir", False)):
            passes.append(tirx.transform.CommonSubexprElim())
        passes += [
            tirx.transform.FP8ComputeLegalize(),
            s_tir.transform.VerifyVTCMLimit(),
            s_tir.transform.LowerVtcmAlloc(),
            tirx.transform.VerifyMemory(),
            tirx.transform.AnnotateEntryFunc(),
            s_tir.transform.ThreadSync("shared"),
            s_tir.transform.ThreadSync("shared.dyn"),
            s_tir.transform.ThreadSync("warp"),
            s_tir.transform.InferFragment(),
            s_tir.transform.LowerThreadAllreduce(),
            s_tir.transform.MergeSharedMemoryAllocations(),
            tirx.transform.SplitHostDevice(),
            tirx.transform.MakePackedAPI(),
            tirx.transform.FP8StorageLegalize(),
            tirx.transform.BF16StorageLegalize(),
        ]
        return tvm.ir.transform.Sequential(passes)(mod)

    return pipeline, finalize_host_passes, finalize_device_passes


def tir_pipeline() -> str:
    """The pipeline's name for ``tvm.compile(..., tir_pipeline=...)``, registered on first use."""
    from tvm.tirx import compilation_pipeline as cp
    if NAME not in cp.PIPELINE_MAP:
        cp.register_tir_pipeline(NAME, _pipeline_factory)
    return NAME
