"""int8 kernels (AVX512-VNNI) of QDQ models' convs against numpy, the fake-quant epilogue, and who
may propose them."""
import dataclasses

import numpy as np
import pytest

import tvm  # noqa: F401 - a hard dependency: a broken install must fail, not skip

from graphselect import candidates
from graphselect.candidates import base, nchwc_int8
from graphselect.graph.layers import ConvSpec, Quant, int8_weights
from graphselect.measure.jobs import Artifact, Check, NumericalError, check_output
from graphselect.target import AVX512, VectorIsa, parse_target
from tests.reference import run_candidate

HOST = parse_target("llvm", threads=2)
TARGET = HOST.tvm_target()
HAS_VNNI = nchwc_int8.VNNI in HOST.isa.features
needs_vnni = pytest.mark.skipif(not HAS_VNNI, reason=f"this CPU ({HOST.mcpu}) has no AVX512-VNNI unit: "
                                                     "the int8 kernels cannot run here")
VNNI_ISA = VectorIsa(16, 32, frozenset({nchwc_int8.VNNI}))
U8 = Quant(0.05, 128, "uint8")

SPECS = [
    # 3x3, bias, uint8 input with a zero point in the middle (padding is the quantized zero)
    ConvSpec(1, 16, 13, 13, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, qdq=U8),
    # an RGB stem on an int8 input (shifted into uint8 for vpdpbusd), stride 2, fake-quantized output
    ConvSpec(1, 3, 15, 15, 16, (3, 3), (2, 2), (1, 1, 1, 1), bias=True, qdq=Quant(0.02, -3, "int8"),
             quant=Quant(0.03, 0, "uint8")),
    # a QDQ ResNet's second conv: quantized before the residual add, ReLU, quantized after
    ConvSpec(1, 32, 7, 7, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0, qdq=U8,
             quant_pre=Quant(0.1, 10, "uint8"), quant=Quant(0.07, 0, "uint8")),
    # unpadded strided 1x1 (the conversion reads every other pixel), odd size, batch 2
    ConvSpec(2, 64, 9, 9, 32, (1, 1), (2, 2), (0, 0, 0, 0), qdq=U8),
]


def _data(spec, seed=0):
    """Grid inputs and dequantized int8 weights, as a QDQ model feeds the conv."""
    rng = np.random.default_rng(seed)
    q = spec.qdq
    x = ((rng.integers(q.qmin, q.qmax + 1, spec.in_shape) - q.zero_point) * np.float32(q.scale)).astype("float32")
    s = rng.uniform(0.002, 0.02, spec.out_channels).astype("float32")
    wq = rng.integers(-127, 128, (spec.out_channels, spec.in_channels) + spec.kernel)
    wq[:, 0, 0, 0] = 127                                   # the largest magnitude: 127 steps, as quantizers write
    w = (wq * s[:, None, None, None]).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    return x, w, b, r


def _check(spec, got, want):
    """The check measurement applies: at most one grid step where a fake-quant rounds."""
    chk = Check([], want.astype("float32"), base.TOLERANCE, base.quant_step(spec))
    art = Artifact(job=None, funcs=[], compiled=[], build_s=0.0, check=chk)
    return check_output(art, tvm.runtime.tensor(np.ascontiguousarray(got), tvm.cpu()))


@needs_vnni
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_int8_kernel_matches_numpy(spec):
    x, w, b, r = _data(spec)
    want = base.reference(spec, x, w, b, r)
    cands = nchwc_int8.propose(spec, w, HOST.isa)
    assert cands
    for cand in cands[:2]:
        got, _ = run_candidate(cand, spec, x, w, b, r, TARGET)
        assert _check(spec, got, want) <= base.TOLERANCE, cand.key
        if spec.quant is None and spec.quant_pre is None:     # no rounding after the sum: exact but for float32 scaling
            assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-6


@needs_vnni
def test_int8_kernel_runs_vpdpbusd():
    spec = SPECS[0]
    f = nchwc_int8.build(nchwc_int8.propose(spec, None, HOST.isa)[0], spec, TARGET, "main")
    asm = tvm.compile(tvm.IRModule({"main": f}), target=TARGET).mod.inspect_source("asm")
    assert "vpdpbusd" in asm


def test_int8_proposed_only_for_quantized_convs_on_vnni():
    spec = SPECS[0]
    assert nchwc_int8.propose(spec, None, VNNI_ISA)
    assert nchwc_int8.propose(spec, None, AVX512) == []                           # no VNNI unit
    assert nchwc_int8.propose(dataclasses.replace(spec, qdq=None), None, VNNI_ISA) == []   # a float conv
    assert nchwc_int8.propose(dataclasses.replace(spec, groups=16, out_channels=16), None, VNNI_ISA) == []
    names = {c.family for c in candidates.propose(spec, isa=VNNI_ISA, precisions=("fp32", "int8"))}
    assert "nchwc_int8" in names and "nchwc" in names
    assert "nchwc_int8" not in {c.family for c in candidates.propose(spec, isa=VNNI_ISA, precisions=("fp32",))}


def test_weight_scales_recover_a_quantizers_integers_and_refuse_float_weights():
    rng = np.random.default_rng(1)
    s = rng.uniform(1e-3, 1e-1, 8).astype("float32")
    q = rng.integers(-127, 128, (8, 5, 3, 3))
    q[:, 2, 1, 1] = -127
    w = (q * s[:, None, None, None]).astype("float32")
    got = int8_weights(w)
    assert got is not None and np.allclose(got[1], s, rtol=1e-6)
    wq, s2 = got
    assert np.array_equal(wq, q) and wq.dtype == np.int8
    assert int8_weights(rng.standard_normal((8, 5, 3, 3)).astype("float32")) is None
    zero = w.copy()
    zero[3] = 0.0                                         # a pruned channel is on every grid
    assert int8_weights(zero) is not None


def test_fake_quant_rounds_half_to_even_and_saturates_like_onnx():
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    q = Quant(0.5, 3, "uint8")
    x = np.array([0.25, 0.75, -1.25, -1.75, 1000.0, -1000.0, 0.0, 1.2], "float32")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "fq", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [8])],
                          [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.uint8(3), "z")])
    want = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])).run(None, {"x": x})[0]
    assert np.array_equal(q.fake_np(x), want)


def test_check_allows_rare_one_step_flips_only():
    spec = SPECS[1]
    step = spec.quant.scale
    want = np.arange(1000, dtype="float32") * step
    got = want.copy()
    got[::200] += step                                    # 0.5%: values that rounded the other way
    assert _check(spec, got, want) <= base.TOLERANCE
    got[::50] += step                                     # 2.5%: not rounding, a wrong kernel
    with pytest.raises(NumericalError):
        _check(spec, got, want)
    got = want.copy()
    got[7] += 2 * step                                    # two steps away is never a rounding flip
    with pytest.raises(NumericalError):
        _check(spec, got, want)
