"""This CPU's float32 peak, measured with a kernel TVM builds for the target.

A BLAS GEMM through numpy is not the figure to hold TVM's kernels against: the BLAS numpy ships
may not know the CPU and run narrower vectors than the target has (OpenBLAS on AMD Zen 5 ran its
AVX2 kernels: 235 GFLOP/s on 2 vCPUs where graphselect's own AVX-512 convs reach 500). The probe
here is what the target can issue: each thread keeps ``ACCUMULATORS`` independent vectors of
fused multiply-adds in registers (enough to cover the FMA latency on every x86 core we met:
4 cycles x 2 pipes) for ``STEPS`` steps, with no memory traffic in the loop; the best of a few
repeats, over ``threads`` threads.
"""
from __future__ import annotations

ACCUMULATORS = 12
STEPS = 1_000_000


def fma_kernel(threads: int, lanes: int = 16, accumulators: int = ACCUMULATORS, steps: int = STEPS):
    """The probe PrimFunc: ``out[t, :]`` gets thread ``t``'s accumulators; ``c`` holds the
    multiplier and the addend (runtime values, so nothing folds)."""
    from tvm.script import tirx as T
    width = accumulators * lanes

    @T.prim_func
    def peak(c: T.Buffer((2, lanes), "float32"), out: T.Buffer((threads, width), "float32")):
        T.func_attr({"tirx.noalias": True})
        for t in T.parallel(threads):
            acc = T.alloc_buffer((width,), "float32", scope="local")
            for v in T.unroll(accumulators):
                for l in T.vectorized(lanes):
                    acc[v * lanes + l] = c[1, l] + T.Cast("float32", v)
            for _ in range(steps):
                for v in T.unroll(accumulators):
                    for l in T.vectorized(lanes):
                        acc[v * lanes + l] = acc[v * lanes + l] * c[0, l] + c[1, l]
            for v in T.unroll(accumulators):
                for l in T.vectorized(lanes):
                    out[t, v * lanes + l] = acc[v * lanes + l]
    return peak


def flops(threads: int, lanes: int = 16, accumulators: int = ACCUMULATORS, steps: int = STEPS) -> int:
    return 2 * threads * steps * accumulators * lanes


def measure_peak_gflops(target, threads: int, *, repeats: int = 10) -> float:
    """Best of ``repeats`` runs of the probe, GFLOP/s over ``threads`` threads (``target``: a
    tvm.target.Target for this machine's CPU)."""
    import numpy as np
    import tvm
    func = fma_kernel(threads).with_attr("global_symbol", "peak")
    mod = tvm.compile(tvm.IRModule({"peak": func}), target=target).mod
    dev = tvm.cpu()
    c = tvm.runtime.tensor(np.stack([np.full(16, 0.999999, "float32"), np.full(16, 1e-6, "float32")]), dev)
    out = tvm.runtime.tensor(np.zeros((threads, ACCUMULATORS * 16), "float32"), dev)
    for _ in range(3):                                         # warm-up (and thread start)
        mod["peak"](c, out)
    f = mod.time_evaluator("peak", dev, number=1, repeat=repeats)
    best = min(f(c, out).results)
    return flops(threads) / best / 1e9
