"""graphselect's TIR pipeline (codegen.pipeline): Winograd kernels unrolled before they are
vectorized compute what TVM's default pipeline computes, bit for bit, and other kernels lower
exactly as under the default pipeline."""
import numpy as np
import pytest

import tvm

from graphselect import candidates
from graphselect.candidates import nchwc, winograd
from graphselect.codegen.pipeline import tir_pipeline
from graphselect.graph.layers import ConvSpec
from graphselect.measure.jobs import arg_arrays
from graphselect.target import parse_target

TARGET = parse_target("llvm", threads=2).tvm_target()
SPEC = ConvSpec(1, 16, 11, 9, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0)


@tvm.instrument.pass_instrument
class _Grab:
    """The module as MakePackedAPI gets it (every lowering pass done)."""
    def __init__(self):
        self.mod = None

    def run_before_pass(self, mod, info):
        if info.name == "tirx.MakePackedAPI":
            self.mod = mod


def _lowered(func, pipeline):
    grab = _Grab()
    with tvm.transform.PassContext(opt_level=3, instruments=[grab]):
        tvm.tirx.build(tvm.IRModule({"main": func}), target=TARGET, pipeline=pipeline)
    return grab.mod


@pytest.mark.parametrize("m", [2, 4, 6])
def test_winograd_outputs_equal_the_default_pipelines(m):
    cands = [c for c in winograd.propose(SPEC) if c.param("m") == m]
    assert cands
    rng = np.random.default_rng(m)
    for cand in cands[:2] + [c for c in cands if "nchw" in c.key][:1]:
        f = winograd.build(cand, SPEC, TARGET, "k")
        host = arg_arrays(f, rng)
        outs = []
        for pipe in ("default", tir_pipeline()):
            lib = tvm.tirx.build(tvm.IRModule({"main": f}), target=TARGET, pipeline=pipe)
            args = [tvm.runtime.tensor(x, tvm.cpu()) for x in host]
            lib["k"](*args)
            outs.append(args[-1].numpy())
        assert np.abs(outs[0]).max() > 0
        np.testing.assert_array_equal(outs[0], outs[1], err_msg=cand.key)


def test_winograd_unrolled_before_vectorizing_folds_its_coefficients():
    # a transform coefficient is a Select on the unrolled index among constants
    # (candidates.winograd._comb): vectorized first, it folds only to a broadcast constant, which
    # TIR's simplifier then multiplies by (zeros and ones included); unrolled first, to a scalar
    # constant, whose zero terms and multiplications by one constant folding drops
    cand = next(c for c in winograd.propose(SPEC) if c.param("m") == 4 and "nchw" not in c.key)
    f = winograd.build(cand, SPEC, TARGET, "k")
    default, ours = (_lowered(f, p).script() for p in ("default", tir_pipeline()))
    for kept in ("* T.Broadcast(T.float32(0.0)", "* T.Broadcast(T.float32(1.0)"):
        assert kept in default
        assert kept not in ours
    assert "T.Select" not in ours
    assert len(ours) < len(default) * 0.8


def test_other_kernels_lower_as_under_the_default_pipeline():
    cand = candidates.propose(SPEC, ["nchwc"])[0]
    f = nchwc.build(cand, SPEC, TARGET, "k")
    default, ours = (_lowered(f, p) for p in ("default", tir_pipeline()))
    tvm.ir.assert_structural_equal(default, ours)
