"""This CPU's float32 peak, measured with a kernel TVM builds for the target, and what a kernel
call costs the runtime (:func:`measure_launch_ms`).

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
    tvm.target.Target for this machine's CPU). The accumulators are vectors of the target's own
    width, as many as its registers hold beside the two operands (until 2026-12 they were 16
    lanes wide everywhere: on AVX2, 24 registers' worth in 16 registers, which spilled and
    reported 62 GFLOP/s on a Zen 3 VM)."""
    import numpy as np
    import tvm
    from ..target import isa_of
    isa = isa_of(target)
    lanes, acc = isa.lanes, min(ACCUMULATORS, isa.registers - 4)
    func = fma_kernel(threads, lanes, acc).with_attr("global_symbol", "peak")
    mod = tvm.compile(tvm.IRModule({"peak": func}), target=target).mod
    dev = tvm.cpu()
    c = tvm.runtime.tensor(np.stack([np.full(lanes, 0.999999, "float32"), np.full(lanes, 1e-6, "float32")]), dev)
    out = tvm.runtime.tensor(np.zeros((threads, acc * lanes), "float32"), dev)
    for _ in range(3):                                         # warm-up (and thread start)
        mod["peak"](c, out)
    f = mod.time_evaluator("peak", dev, number=1, repeat=repeats)
    from .affinity import pinned
    with pinned():
        best = min(f(c, out).results)
    return flops(threads, lanes, acc) / best / 1e9


LAUNCH_CALLS = 64


def _add_one(threads: int, n: int = 256):
    """A kernel that does almost nothing in parallel: one task per thread, each adding 1 to
    ``n`` floats (the thread pool wakes and joins)."""
    import tvm
    from tvm import te
    a = te.placeholder((threads, n), name="a")
    b = te.compute((threads, n), lambda i, j: a[i, j] + 1.0, name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    sch.parallel(sch.get_loops(sch.get_sblock("b"))[0])
    return sch.mod["main"]


def measure_floor_ms(target, threads: int, *, rounds: int = 15, pause_s: float = 0.1) -> tuple[float, float, float]:
    """What the isolated timing protocol (``graphselect.measure.jobs.sample``) reads for a kernel
    that does almost nothing, (cold, warm, in-cold) ms: the packed call and the thread pool's
    fork and join, which every isolated timing carries (1.5-1.9 us on a Zen 5 VM). In a network
    that cost is the VM's per-call launch, so the calibration takes the floor off every isolated
    timing (``costmodels.calibration._unfloor``) and counts the launch once. The median of
    ``rounds`` rounds ``pause_s`` apart: one 5-round probe read a quarter of the usual figure,
    a short state of the machine that the spread outlasts."""
    import time

    import numpy as np
    import tvm

    from .jobs import TimingConfig, sample
    n = 256
    mod = tvm.compile(tvm.IRModule({"main": _add_one(threads, n)}), target=target).mod
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.zeros((threads, n), "float32")) for _ in range(2)]
    for _ in range(3):
        mod["main"](*args)
    from .affinity import pinned
    got = []
    for i in range(rounds):
        if i:
            time.sleep(pause_s)
        with pinned():           # as every isolated timing is (measure.local)
            got.append(sample([(mod, args)], dev, TimingConfig()))
    return tuple(float(v) for v in np.median(np.array(got), axis=0))


def _launch_vm(target, threads: int, calls: int):
    """A Relax VM function of ``calls`` calls of :func:`_add_one`, and its input."""
    import numpy as np
    import tvm
    from tvm import relax
    n = 256
    bb = relax.BlockBuilder()
    ty = relax.TensorType((threads, n), "float32")
    x = relax.Var("x", ty)
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.add_func(_add_one(threads, n).with_attr("global_symbol", "add_one"), "add_one")
            y = x
            for _ in range(calls):
                y = bb.emit(relax.call_tir(gv, [y], ty))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    f = relax.VirtualMachine(tvm.compile(bb.get(), target=target), tvm.cpu())["main"]
    xt = tvm.runtime.tensor(np.zeros((threads, n), "float32"))
    return f, xt


def _per_call_ms(f, xt, calls: int, repeats: int, warmup: int) -> float:
    """Per kernel call, the lower decile of ``repeats`` runs of ``f(xt)`` after ``warmup``, the
    calling thread pinned as the networks' timings are (``measure.e2e.time_calls``)."""
    import numpy as np
    from .e2e import time_calls
    return float(np.percentile(time_calls(lambda: f(xt), repeats, warmup=warmup), 10)) / calls


def measure_launch_ms(target, threads: int, *, calls: int = LAUNCH_CALLS, repeats: int = 300) -> float:
    """What one kernel call costs a Relax VM beyond the kernel: a network of ``calls`` calls of a
    kernel that does almost nothing (one parallel task per thread, each adding 1 to 256 floats:
    the thread pool wakes and joins, the VM allocates each output), per call, the lower decile
    of ``repeats`` runs after a warm-up (a quiet reading, as the kernels' records are). This is
    the calibration's launch cost before any network of the machine has been timed."""
    f, xt = _launch_vm(target, threads, calls)
    return _per_call_ms(f, xt, calls, repeats, 30)


class HandoffProbe:
    """The launch probe's network compiled once, read again and again: what a kernel call costs
    the thread pool right now. On a 2-vCPU Zen 5 VM it read 1.7-2.0 us for hours and 0.55 us for
    others, with the same FMA peak: the hand-off between the two vCPUs, which a mobile network of
    90-120 small kernels pays hundreds of times per call (ShuffleNetV2 2.0 against 1.0 ms).
    The closed loop reads it around every in-place timing session (``Round.handoff_us``)."""

    def __init__(self, target, threads: int, calls: int = LAUNCH_CALLS):
        self.calls = calls
        self._f, self._xt = _launch_vm(target, threads, calls)

    def __call__(self, repeats: int = 40) -> float:
        """Microseconds per call now (lower decile of ``repeats`` runs, a few ms in all)."""
        return _per_call_ms(self._f, self._xt, self.calls, repeats, 5) * 1e3
