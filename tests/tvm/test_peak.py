"""The FMA peak probe (graphselect.measure.peak): it computes what it claims to, so its FLOP count
is the work done, and the figure is stored per CPU, threads and ISA."""
import numpy as np
import pytest
import tvm

from costmodels.hardware import fma_peak
from graphselect.measure import peak
from graphselect.target import parse_target


def test_probe_kernel_does_every_step_of_its_recurrence():
    steps, acc = 50, 3
    f = peak.fma_kernel(2, accumulators=acc, steps=steps).with_attr("global_symbol", "peak")
    mod = tvm.compile(tvm.IRModule({"peak": f}), target=parse_target("llvm", threads=2).tvm_target()).mod
    dev = tvm.cpu()
    a, b = np.float32(0.9), np.float32(0.5)
    c = np.stack([np.full(16, a, "float32"), np.full(16, b, "float32")])
    out = tvm.runtime.tensor(np.zeros((2, acc * 16), "float32"), dev)
    mod["peak"](tvm.runtime.tensor(c, dev), out)
    want = np.empty(acc * 16, np.float64)
    for v in range(acc):
        x = np.float64(b) + v
        for _ in range(steps):
            x = x * np.float64(a) + np.float64(b)
        want[v * 16:(v + 1) * 16] = x
    np.testing.assert_allclose(out.numpy(), np.tile(want, (2, 1)), rtol=1e-5)
    assert peak.flops(2, accumulators=acc, steps=steps) == 2 * 2 * steps * acc * 16


def test_measured_peak_is_stored_once_per_cpu_threads_and_isa(tmp_path):
    store = tmp_path / "hardware.json"
    calls = []

    def measure():
        calls.append(1)
        return 123.45

    assert fma_peak(store, threads=2, cpu="cpuA", isa="llvm -mcpu=x", measure=measure) == 123.5
    assert fma_peak(store, threads=2, cpu="cpuA", isa="llvm -mcpu=x", measure=measure) == 123.5
    assert len(calls) == 1
    fma_peak(store, threads=1, cpu="cpuA", isa="llvm -mcpu=x", measure=measure)
    fma_peak(store, threads=2, cpu="cpuA", isa="llvm -mcpu=y", measure=measure)
    assert len(calls) == 3


def test_peak_of_this_machine_is_plausible():
    g = peak.measure_peak_gflops(parse_target("llvm", threads=1).tvm_target(), 1, repeats=3)
    # one core issues at least one 4-lane FMA per ns at any clock we run on, and not 64x that
    assert 8 < g < 8 * 64


def test_launch_probe_is_plausible_and_stored_once(tmp_path):
    from costmodels.hardware import launch_cost
    ms = peak.measure_launch_ms(parse_target("llvm", threads=2).tvm_target(), 2, calls=16, repeats=40)
    assert 1e-5 < ms < 1.0            # between 10 ns and 1 ms per call
    calls = []

    def measure():
        calls.append(1)
        return 0.0031234

    store = tmp_path / "hardware.json"
    assert launch_cost(store, threads=2, cpu="cpuA", isa="x", measure=measure) == 0.00312
    assert launch_cost(store, threads=2, cpu="cpuA", isa="x", measure=measure) == 0.00312
    launch_cost(store, threads=1, cpu="cpuA", isa="x", measure=measure)
    assert len(calls) == 2


def test_floor_probe_is_plausible_and_stored_once(tmp_path):
    """The isolated protocol's reading of a kernel that does nothing: microseconds, in-cold not
    below warm by much; stored once per (cpu, threads, isa)."""
    from costmodels.hardware import timing_floor
    c, w, ic = peak.measure_floor_ms(parse_target("llvm", threads=2).tvm_target(), 2, rounds=2, pause_s=0.0)
    for v in (c, w, ic):
        assert 1e-5 < v < 1.0
    calls = []

    def measure():
        calls.append(1)
        return 0.0012344, 0.0011, 0.0015

    store = tmp_path / "hardware.json"
    assert timing_floor(store, threads=2, cpu="cpuA", isa="x", measure=measure) == (0.001234, 0.0011, 0.0015)
    assert timing_floor(store, threads=2, cpu="cpuA", isa="x", measure=measure) == (0.001234, 0.0011, 0.0015)
    timing_floor(store, threads=1, cpu="cpuA", isa="x", measure=measure)
    assert len(calls) == 2


def test_handoff_probe_reads_the_launch_probes_network_again_and_again():
    """Compiled once, read in a few milliseconds: microseconds per kernel call, the same quantity
    as the launch probe (both read the quiet lower decile of one network; loose bounds only)."""
    target = parse_target("llvm", threads=2).tvm_target()
    h = peak.HandoffProbe(target, 2, calls=16)
    reads = [h(repeats=20) for _ in range(3)]
    assert all(0 < r < 1000 for r in reads)
    launch_us = peak.measure_launch_ms(target, 2, calls=16, repeats=40) * 1e3
    assert 0.1 < min(reads) / launch_us < 10


def test_compare_labels_each_round_with_the_state_probe():
    """``e2e.compare(state=...)`` reads the probe as each round begins; ratios can be taken over
    the rounds of one state."""
    from graphselect.measure.e2e import compare
    reads = iter([0.5, 2.0, 0.6, 1.9, 0.5, 2.1])
    calls = {"a": 0}

    def fa():
        calls["a"] += 1
    r = compare({"a": fa, "b": lambda: None}, runs=6, block=1, pause=0.0, state=lambda: next(reads))
    assert r.state == (0.5, 2.0, 0.6, 1.9, 0.5, 2.1)
    fast, slow = r.by_state(1.0)
    assert fast == [0, 2, 4] and slow == [1, 3, 5]
    assert r.ratio("a", "b", fast) > 0 and len(r.ms["a"]) == 6
    assert compare({"a": fa}, runs=3, block=1, pause=0.0).state is None
