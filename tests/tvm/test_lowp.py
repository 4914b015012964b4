"""bf16 kernels (AVX512-BF16, fp32 accumulation) against numpy, and who may propose them."""
import numpy as np
import pytest

import tvm  # noqa: F401 - a hard dependency: a broken install must fail, not skip

from graphselect import candidates
from graphselect.candidates import lowp, nchwc_bf16, winograd_bf16
from graphselect.errors import GraphSelectError
from graphselect.graph.layers import ConvSpec
from graphselect.target import AVX512, VectorIsa, parse_target
from tests.reference import conv2d_nchw, rel_err, run_candidate

HOST = parse_target("llvm", threads=2)
TARGET = HOST.tvm_target()
HAS_BF16 = lowp.BF16 in HOST.isa.features
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason=f"this CPU ({HOST.mcpu}) has no AVX512-BF16 unit: "
                                                     "the bf16 kernels cannot run here")
BF16_ISA = VectorIsa(16, 32, frozenset({lowp.BF16}))

SPECS = [
    # 3x3 stride 1, every epilogue, a spatial size no register tile but 13 divides
    ConvSpec(1, 32, 13, 13, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0),
    # unpadded 1x1 stride 2 (the conversion pass reads every other pixel), no epilogue, odd size
    ConvSpec(1, 32, 9, 9, 64, (1, 1), (2, 2), (0, 0, 0, 0)),
    # asymmetric padding, rectangular input, non-square kernel, batch 2
    ConvSpec(2, 16, 9, 12, 16, (3, 1), (1, 1), (1, 0, 0, 0), bias=True),
    # 7x7 stride 2 with SiLU and ReLU6-like clamp order, 48 output channels (16-lane blocks only)
    ConvSpec(1, 16, 17, 17, 48, (7, 7), (2, 2), (3, 3, 3, 3), bias=True, act="silu"),
    # dilated 3x3
    ConvSpec(1, 32, 12, 12, 32, (3, 3), (1, 1), (2, 2, 2, 2), dilation=(2, 2), bias=True, clip_lo=0.0, clip_hi=6.0),
    # an RGB stem: 3 input channels in one block, computed as 4 (a zero channel completes the pair)
    ConvSpec(1, 3, 23, 23, 32, (7, 7), (2, 2), (3, 3, 3, 3), bias=True, clip_lo=0.0),
]


def _data(spec, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = (rng.standard_normal((spec.out_channels, spec.in_channels) + spec.kernel)
         / np.sqrt(spec.in_channels * spec.kernel[0] * spec.kernel[1])).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    return x, w, b, r


def _ref(spec, x, w, b, r):
    from graphselect.candidates.base import reference
    return reference(spec, x, w, b, r)


def _bf16(a):
    return lowp.from_bf16_bits(lowp.to_bf16_bits(a))


def test_bf16_rounding_is_round_to_nearest_even():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(10000).astype("float32") * 10.0 ** rng.integers(-8, 8, 10000),
                        np.float32([0.0, -0.0, 1.0, 1.00390625, 1.01171875, -2.0 ** -130, 3.0e38])])
    want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(lowp.to_bf16_bits(x), want)
    assert np.array_equal(lowp.from_bf16_bits(want), x.astype(ml_dtypes.bfloat16).astype("float32"))


@needs_bf16
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_bf16_kernels_match_numpy(spec):
    """Every candidate equals the float64 convolution of the bf16-rounded input and weights (the
    products are exact in fp32; only the accumulation order differs), and stays within the family's
    tolerance of the fp32 convolution."""
    x, w, b, r = _data(spec)
    exact = _ref(spec, x, w, b, r)
    rounded = _ref(spec, _bf16(x), _bf16(w), b, r)
    cands = candidates.propose(spec, ["nchwc_bf16"], None, HOST.isa, ("fp32", "bf16"))
    assert cands, spec.describe()
    for c in cands:
        got, f = run_candidate(c, spec, x, w, b, r, TARGET)
        assert rel_err(got, rounded) < 2e-5, c.key
        e = rel_err(got, exact)
        assert 1e-5 < e < nchwc_bf16.TOLERANCE, (c.key, e)       # really bf16, and no worse than bf16
        assert f.attrs["graphselect.family"] == "nchwc_bf16" and int(f.attrs["op_pattern"]) == 8


WINO_SPECS = [
    # 3x3 stride 1 with bias, residual and ReLU, a size no tile divides (partial tiles)
    ConvSpec(1, 32, 13, 13, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0),
    # 16 input channels, 48 outputs, asymmetric padding, no epilogue, batch 2
    ConvSpec(2, 16, 10, 9, 48, (3, 3), (1, 1), (1, 1, 0, 1)),
]


@needs_bf16
@pytest.mark.parametrize("spec", WINO_SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_winograd_bf16_matches_numpy(spec):
    """Every tile and layout within the family's tolerance of the fp32 convolution, and less
    exact than fp32 Winograd (it is really bf16)."""
    x, w, b, r = _data(spec, seed=1)
    exact = _ref(spec, x, w, b, r)
    cands = candidates.propose(spec, ["winograd_bf16"], None, HOST.isa, ("fp32", "bf16"))
    assert {c.param("m") for c in cands} == {2, 4} and any(c.in_layout == "NCHW" for c in cands)
    for c in cands:
        got, f = run_candidate(c, spec, x, w, b, r, TARGET)
        e = rel_err(got, exact)
        assert 1e-4 < e < winograd_bf16.TOLERANCE, (c.key, e)
        assert f.attrs["graphselect.family"] == "winograd_bf16"


@needs_bf16
def test_bf16_kernel_runs_vdpbf16ps():
    spec = SPECS[1]
    c = candidates.propose(spec, ["nchwc_bf16"], None, HOST.isa, ("fp32", "bf16"))[0]
    f = nchwc_bf16.build(c, spec, TARGET, "main")
    asm = tvm.compile(tvm.IRModule({"main": f}), target=TARGET).mod.inspect_source("asm")
    assert "vdpbf16ps" in asm


@pytest.mark.parametrize("fam", [nchwc_bf16, winograd_bf16], ids=lambda f: f.FAMILY)
def test_bf16_weights_are_half_the_bytes(fam):
    """The footprint the solver counts is what the kernel reads: 2 bytes per (transformed) weight."""
    spec = SPECS[0]
    x, w, b, r = _data(spec)
    cands = fam.propose(spec, None, BF16_ISA)
    assert cands
    for c in cands:
        packed = fam.pack(c, spec, w, b)
        assert packed[0].dtype == np.uint16 and c.weight_bytes == sum(a.nbytes for a in packed), c.key
    if fam is nchwc_bf16:
        assert cands[0].weight_bytes == 2 * w.size + 4 * b.size
        stem = SPECS[-1]
        c = fam.propose(stem, None, BF16_ISA)[0]
        x, w, b, r = _data(stem)
        assert c.param("ic_bn") == 3 and c.weight_bytes == 2 * w.size // 3 * 4 + 4 * b.size
        assert c.weight_bytes == sum(a.nbytes for a in fam.pack(c, stem, w, b))


def test_no_bf16_candidates_without_the_unit_or_the_precision():
    spec = SPECS[0]
    lowp_only = ("fp32", "bf16")
    assert not [c for c in candidates.propose(spec, None, None, AVX512, lowp_only) if c.family == "nchwc_bf16"]
    assert not [c for c in candidates.propose(spec, None, None, VectorIsa(16, 32, frozenset({"avx512_vnni"})),
                                              lowp_only) if c.family == "nchwc_bf16"]
    assert not [c for c in candidates.propose(spec, None, None, BF16_ISA) if c.family == "nchwc_bf16"]
    got = [c for c in candidates.propose(spec, None, None, BF16_ISA, lowp_only) if c.family == "nchwc_bf16"]
    assert got and {c.in_layout for c in got} <= {"NCHW16c", "NCHW32c"}
    # depthwise convs and output channels that 16 lanes do not divide have none
    dw = ConvSpec(1, 32, 16, 16, 32, (3, 3), (1, 1), (1, 1, 1, 1), groups=32)
    odd = ConvSpec(1, 32, 16, 16, 24, (1, 1), (1, 1), (0, 0, 0, 0))
    assert not nchwc_bf16.propose(dw, None, BF16_ISA) and not nchwc_bf16.propose(odd, None, BF16_ISA)


def test_target_units_come_from_the_cpu_model():
    from graphselect.target import isa_of
    spr = isa_of(tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids"}))
    assert {"avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8"} <= spr.features
    assert isa_of(tvm.target.Target({"kind": "llvm", "mcpu": "znver3"})).features == frozenset()
    assert "avx512_bf16" not in isa_of(tvm.target.Target({"kind": "llvm", "mcpu": "cascadelake"})).features


def test_precision_bf16_is_refused_where_no_bf16_unit_exists():
    from graphselect.stages import settings
    # this machine's CPU with the unit switched off: what a CPU without it looks like
    with pytest.raises(GraphSelectError, match="AVX512-BF16"):
        settings.settings(target="llvm -mattr=-avx512bf16", threads=2, precision="bf16", cache=None)
    with pytest.raises(GraphSelectError, match="compute in bf16"):
        settings.settings(threads=2, families=["nchwc_bf16"], cache=None)
    with pytest.raises(GraphSelectError, match="unknown precision"):
        settings.settings(threads=2, precision="fp16", cache=None)
    with pytest.raises(GraphSelectError, match="tolerance"):
        settings.settings(threads=2, precision="auto", tolerance=0.0, cache=None)
