"""The timing protocol's three figures (measure.jobs.sample): cold (weights and output flushed,
the input warm), warm, and in-cold (every argument flushed, the input too)."""
import numpy as np
import tvm
from tvm import te

from graphselect.measure.builder import compile_func
from graphselect.measure.jobs import FLUSH_ALL, TimingConfig, sample
from graphselect.target import parse_target

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1, incold_repeat=3)


def _kernel():
    a = te.placeholder((256, 1024), name="a")
    w = te.placeholder((1024,), name="w")
    b = te.compute((256, 1024), lambda i, j: a[i, j] * w[j], name="b")
    func = te.create_prim_func([a, w, b]).with_attr("global_symbol", "main")
    mod = compile_func(func, parse_target("llvm").tvm_target())
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.ones(s, "float32"), dev) for s in ((256, 1024), (1024,), (256, 1024))]
    return [(mod, args)], dev


def test_sample_gives_cold_warm_and_in_cold():
    kernels, dev = _kernel()
    cold, warm, incold = sample(kernels, dev, QUICK)
    assert cold > 0 and warm > 0 and incold >= cold
    # the preprocessor that flushes every argument is registered here, and takes the kernel's arguments
    flush = tvm.get_global_func(FLUSH_ALL)
    flush(*kernels[0][1])
    out = kernels[0][1][-1].numpy()
    assert np.all(out == 1.0)           # the kernel ran on its arguments (ones times ones)


def test_without_the_preprocessor_the_cold_time_stands_in():
    kernels, dev = _kernel()
    cold, _, incold = sample(kernels, dev, QUICK, local=False)     # an RPC device: no Python there
    assert incold == cold
    from dataclasses import replace
    cold, _, incold = sample(kernels, dev, replace(QUICK, incold_repeat=0))
    assert incold == cold
