"""In-network timing (measure.innet) and the compiler workers (measure.builder.Builder)."""
import numpy as np
import pytest

import graphselect
import models
from graphselect.measure.innet import BUILTIN_PREFIX, quiet_rounds, time_networks
from graphselect.measure.builder import Builder
from graphselect.measure.jobs import TimingConfig

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)


def test_every_kernel_call_is_timed_in_place():
    r = graphselect.optimize(models.build("tiny"), cache=None, benchmark_runs=0, timing=QUICK)
    ex = r.build()
    x = np.random.default_rng(0).standard_normal(r.input_shape).astype("float32")
    t = time_networks({"a": ex, "b": ex}, x, rounds=4)
    for name in ("a", "b"):
        nt = t[name]
        symbols = [c.symbol for c in nt.calls]
        convs = {f"{n}_{c.family}" for n, c in r.extra["selection"].by_label(r.extra["selection"].label).selection.items()
                 if r.extra["lg"].layers[n].kind == "conv"}
        assert convs <= set(symbols)                       # every conv kernel, by its PrimFunc's symbol
        assert not any(s.startswith(BUILTIN_PREFIX) for s in symbols)
        assert all(c.ms >= 0 for c in nt.calls) and nt.overhead_ms >= 0 and nt.e2e_ms > 0
        assert nt.kernel_ms > 0 and 1 <= nt.rounds <= 4
        assert nt.loaded_rounds == 0 and not nt.loaded          # no probe: no round is known loaded
    # a probe that always says loaded: its waits run out, every round is known loaded, and the
    # timing is flagged (the loop shows it but neither stores nor fits it); one that says quiet: none
    asked = []
    loaded = time_networks({"a": ex}, x, rounds=3, quiet=lambda: asked.append(1) or False, waits=2)["a"]
    assert loaded.loaded and loaded.loaded_rounds == loaded.rounds and len(asked) == 2 + 3
    calm = time_networks({"a": ex}, x, rounds=3, quiet=lambda: True)["a"]
    assert not calm.loaded and calm.loaded_rounds == 0


def test_the_hooks_overhead_is_taken_out_against_the_plain_time():
    from graphselect.measure.innet import _summarize
    symbols = ["vm.builtin.alloc_storage", "conv0_nchwc", "vm.builtin.null_value", "fused_relu", "conv1_direct"]
    # per round, per call of the block, per position: each kernel interval carries 0.004 ms of hook
    true = [0.0, 0.100, 0.0, 0.020, 0.050]
    floor = [0.0003, 0, 0.0003, 0, 0]
    call = [t + (0.004 if not s.startswith("vm.") else floor[i]) for i, (s, t) in enumerate(zip(symbols, true))]
    rounds = [[call, call], [call, call]]
    nt = _summarize(symbols, rounds, [0.170 + 0.0, 0.170], [0.2, 0.2])
    assert [c.symbol for c in nt.calls] == ["conv0_nchwc", "fused_relu", "conv1_direct"]
    assert nt.overhead_ms == pytest.approx(0.004, abs=1e-9)
    assert [c.ms for c in nt.calls] == pytest.approx([0.100, 0.020, 0.050])
    assert nt.builtin_ms == pytest.approx(0.0) and nt.e2e_ms == pytest.approx(0.170)


def test_quiet_rounds_drop_the_slow_spells():
    e2e = {"a": [1.0, 1.6, 1.0, 1.7, 1.05, 1.0], "b": [2.0, 3.1, 2.1, 3.3, 2.0, 2.0]}
    keep = quiet_rounds(e2e)
    assert 1 not in keep and 3 not in keep and len(keep) >= 3


def _kernel(target):
    from graphselect.candidates import nchwc
    from graphselect.graph.layers import ConvSpec
    spec = ConvSpec(1, 16, 8, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, clip_lo=0.0)
    return nchwc.build(nchwc.propose(spec)[0], spec, target, "main")


def _run(mod, func):
    import tvm
    args = [tvm.runtime.tensor(np.random.default_rng(0).standard_normal([int(s) for s in p.ty.shape])
                               .astype("float32")) for p in func.params]
    mod["main"](*args)
    return args[-1].numpy()


def test_workers_compile_what_this_process_would():
    from graphselect.target import parse_target
    target = parse_target("llvm").tvm_target()
    f = _kernel(target)
    with Builder(target, workers=2) as remote:
        a, b = remote.compile_all([f, f])
    local = Builder(target, workers=1).compile_all([f])[0]
    assert np.array_equal(_run(a, f), _run(local, f)) and np.array_equal(_run(b, f), _run(local, f))


def test_a_dead_compiler_is_replaced_and_the_kernel_tried_again():
    from graphselect.target import parse_target
    target = parse_target("llvm").tvm_target()
    f = _kernel(target)
    with Builder(target, workers=2) as builder:
        builder.compile_all([f])
        for w in builder._all:
            w.proc.kill()
            w.proc.wait()
        out = builder.compile_all([f, f])
        assert not any(isinstance(o, Exception) for o in out)


def test_a_compiler_that_always_dies_makes_failed_kernels_not_a_dead_run(monkeypatch):
    from graphselect.measure import builder as local
    from graphselect.target import parse_target
    target = parse_target("llvm").tvm_target()
    f = _kernel(target)
    monkeypatch.setattr(local._Worker, "COMMAND", ("-c", "import sys; sys.exit(3)"))
    with Builder(target, workers=2) as builder:
        out = builder.compile_all([f, f, f])
    assert all(isinstance(o, RuntimeError) and "crashed" in str(o) for o in out)
