"""Every candidate of every family, built and run, against a numpy convolution."""
import numpy as np
import pytest

import tvm  # a hard dependency: a broken install must fail, not skip

from graphselect import candidates
from graphselect.graph.layers import ConvSpec
from graphselect.candidates import winograd
from graphselect.target import parse_target
from tests.reference import conv2d_nchw, rel_err, run_candidate

TARGET = parse_target("llvm", threads=2).tvm_target()

SPECS = [
    # 3x3 stride 1 with every epilogue fused, spatial size no tile divides evenly
    ConvSpec(1, 16, 13, 13, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0),
    # stem-like: 3 input channels, 7x7 stride 2, ReLU6
    ConvSpec(1, 3, 20, 20, 16, (7, 7), (2, 2), (3, 3, 3, 3), bias=True, clip_lo=0.0, clip_hi=6.0),
    # 1x1 stride 2 downsample, no epilogue at all
    ConvSpec(1, 32, 8, 8, 64, (1, 1), (2, 2), (0, 0, 0, 0)),
    # asymmetric padding, rectangular input, non-square kernel
    ConvSpec(2, 8, 9, 12, 16, (3, 1), (1, 1), (1, 0, 0, 0), bias=True),
    # ShuffleNet-like 1x1 with 58 channels (flattened-pixel direct with a 29-channel tile), residual
    ConvSpec(1, 58, 12, 12, 58, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, residual=True, clip_lo=0.0),
    # MobileNet-like projection to 24 channels (nchwc computes a padded 32-lane tile), residual
    ConvSpec(1, 16, 14, 14, 24, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, residual=True),
    # 40 output channels (padded to 48 or 64), stride 2, odd size, ReLU6
    ConvSpec(1, 3, 15, 15, 40, (3, 3), (2, 2), (1, 1, 1, 1), bias=True, clip_lo=0.0, clip_hi=6.0),
]


def _run(cand, spec, x, w, b, r):
    return run_candidate(cand, spec, x, w, b, r, TARGET)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_every_candidate_matches_numpy(spec):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = rng.standard_normal((spec.out_channels, spec.in_channels) + spec.kernel).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    ref = conv2d_nchw(x, w, stride=spec.stride, padding=spec.padding, bias=b, residual=r,
                      lo=spec.clip_lo, hi=spec.clip_hi)
    cands = candidates.propose(spec)
    wino = spec.kernel == (3, 3) and spec.stride == (1, 1) and spec.out_channels % 16 == 0
    # pointwise: a 1x1 stride-1 conv whose channels are whole AVX-512 vectors, or 24 (one
    # NCHW24c block computed in two vectors)
    pw = (spec.kernel == (1, 1) and spec.stride == (1, 1)
          and all(ch % 16 == 0 or ch == 24 for ch in (spec.in_channels, spec.out_channels)))
    want = {"direct", "nchwc"} | ({"winograd"} if wino else set()) | ({"pointwise"} if pw else set())
    assert {c.family for c in cands} == want
    for c in cands:
        got, f = _run(c, spec, x, w, b, r)
        assert got.shape == ref.shape
        assert rel_err(got, ref) < getattr(candidates.family(c), "TOLERANCE", 1e-5), c.key
        attrs = f.attrs
        assert attrs["graphselect.family"] == c.family
        assert attrs["graphselect.in_layout"] == c.in_layout
        assert attrs["graphselect.out_layout"] == c.out_layout
        assert int(attrs["op_pattern"]) == 8


@pytest.mark.parametrize("spec", SPECS[:3], ids=lambda s: s.describe())
def test_weight_bytes_are_the_packed_constants(spec):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((spec.out_channels, spec.in_channels) + spec.kernel).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    for c in candidates.propose(spec):
        packed = candidates.family(c).pack(c, spec, w, b)
        assert c.weight_bytes == sum(a.nbytes for a in packed), c.key


@pytest.mark.parametrize("spec", SPECS[-2:], ids=lambda s: s.describe())
def test_nchwc_pads_output_channels_that_only_half_vectors_divide(spec):
    """24 and 40 output channels: besides the 8-lane blocks, full-width tiles over the channels
    padded with zero weights (24 -> 32; 40 -> 48, not 64: under two thirds real), written as
    NCHW8c; their packed weights hold the padded rows."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((spec.out_channels, spec.in_channels) + spec.kernel).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32")
    padded = [c for c in candidates.propose(spec, ["nchwc"]) if dict(c.params).get("oc_pad")]
    want = {24: {16, 32}, 40: {16}}[spec.out_channels]
    assert {c.param("oc_pad") for c in padded} == want
    for c in padded:
        assert c.out_layout == "NCHW8c" and c.param("oc_bn") == 8
        packed = candidates.family(c).pack(c, spec, w, b)
        assert packed[0].shape[-1] == c.param("oc_pad")
        assert c.weight_bytes == sum(a.nbytes for a in packed), c.key
    # channels a vector divides need no padding
    assert not [c for c in candidates.propose(ConvSpec(1, 16, 8, 8, 32, (1, 1), (1, 1), (0, 0, 0, 0)), ["nchwc"])
                if dict(c.params).get("oc_pad")]


def test_nchwc_stems_also_read_their_padding_as_guarded_loads():
    """A padded conv with at most 4 input channels gets a pad_inline twin of every plain
    candidate (no padded copy: no workspace); wider or unpadded convs do not."""
    stem = SPECS[1]
    cands = candidates.propose(stem, ["nchwc"])
    inline = [c for c in cands if dict(c.params).get("pad_inline")]
    plain = [c for c in cands if not dict(c.params).get("pad_inline") and not dict(c.params).get("oc_pad")]
    assert inline and len(inline) == len(plain)
    assert all(c.workspace_bytes == 0 for c in inline) and all(c.workspace_bytes > 0 for c in plain)
    for spec in (SPECS[0], SPECS[2]):        # 16 input channels; no padding
        assert not [c for c in candidates.propose(spec, ["nchwc"]) if dict(c.params).get("pad_inline")]


def test_nchwc_blocks_follow_channel_divisors():
    spec = ConvSpec(1, 24, 8, 8, 40, (3, 3), (1, 1), (1, 1, 1, 1))
    for c in candidates.propose(spec, ["nchwc"]):
        assert 24 % c.param("ic_bn") == 0 and 40 % c.param("oc_bn") == 0
        assert c.in_layout == f"NCHW{c.param('ic_bn')}c"


def test_grouped_conv_gets_group_aware_candidates_only():
    """A groups=4 conv: direct and nchwc with blocks inside one group; no Winograd, no depthwise."""
    spec = ConvSpec(1, 16, 8, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1), groups=4)
    cands = candidates.propose(spec)
    assert cands and {c.family for c in cands} == {"direct", "nchwc"}
    for c in cands:
        if c.family == "nchwc":
            assert 4 % c.param("ic_bn") == 0 and 4 % c.param("oc_bn") == 0


WINO_SPECS = [
    # odd output sizes: the last tiles hang over the edge (5x7 outputs, tiles of 2, 4, 6)
    ConvSpec(1, 16, 5, 7, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0),
    # no padding, 32-channel blocks in, ReLU6
    ConvSpec(1, 32, 11, 9, 16, (3, 3), (1, 1), (0, 0, 0, 0), bias=True, clip_lo=0.0, clip_hi=6.0),
    # asymmetric padding, batch 2, no epilogue
    ConvSpec(2, 16, 8, 8, 16, (3, 3), (1, 1), (2, 0, 0, 1)),
]


@pytest.mark.parametrize("spec", WINO_SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_winograd_every_tile_and_layout(spec):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = (rng.standard_normal((spec.out_channels, spec.in_channels, 3, 3)) / np.sqrt(9 * spec.in_channels)).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    ref = conv2d_nchw(x, w, stride=spec.stride, padding=spec.padding, bias=b, residual=r,
                      lo=spec.clip_lo, hi=spec.clip_hi)
    cands = candidates.propose(spec, ["winograd"])
    assert {c.param("m") for c in cands} == {2, 4, 6}
    assert "NCHW" in {c.in_layout for c in cands}
    errs = {}
    for c in cands:
        got, _ = _run(c, spec, x, w, b, r)
        errs[c.key] = rel_err(got, ref)
        assert errs[c.key] < winograd.TOLERANCE, c.key
    # larger tiles trade accuracy for fewer multiplications
    by_m = {m: max(e for k, e in errs.items() if f"m={m}," in k) for m in (2, 6)}
    assert by_m[2] < by_m[6]


def test_winograd_weight_bytes_grow_with_the_tile():
    spec = ConvSpec(1, 64, 14, 14, 64, (3, 3), (1, 1), (1, 1, 1, 1))
    direct = 64 * 64 * 9 * 4
    for c in candidates.propose(spec, ["winograd"]):
        m = c.param("m")
        assert c.weight_bytes == direct * (m + 2) ** 2 // 9


def test_winograd_nchw_workspace_counts_the_packed_input():
    # a plain-NCHW F(4x4) kernel copies its padded input into NCHW16c first (winograd.packs):
    # its workspace is the blocked kernel's plus that copy; F(2x2) gathers and adds nothing
    spec = ConvSpec(1, 32, 13, 11, 32, (3, 3), (1, 1), (1, 1, 1, 1))
    cands = candidates.propose(spec, ["winograd"])
    for m in (2, 4):
        nchw = next(c for c in cands if c.param("m") == m and c.in_layout == "NCHW")
        blocked = next(c for c in cands if c.param("m") == m and c.in_layout == "NCHW16c" and c.param("oc_bn") == 16)
        f = winograd.build(nchw, spec, TARGET, "k")
        copies = [b for b in f.body.block.alloc_buffers if b.name == "data_pad"]
        extra = nchw.workspace_bytes - blocked.workspace_bytes
        if winograd.packs(m):
            assert len(copies) == 1 and extra == 4 * np.prod([int(d) for d in copies[0].shape]) > 0
        else:
            assert copies == [] and extra == 0


def test_winograd_only_for_3x3_stride_1():
    assert candidates.propose(ConvSpec(1, 16, 8, 8, 16, (3, 3), (2, 2), (1, 1, 1, 1)), ["winograd"]) == []
    assert candidates.propose(ConvSpec(1, 16, 8, 8, 16, (1, 1), (1, 1), (0, 0, 0, 0)), ["winograd"]) == []


KEY_SPECS = [
    ConvSpec(1, 64, 56, 56, 64, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, clip_lo=0.0),
    ConvSpec(1, 32, 14, 14, 128, (3, 3), (1, 1), (1, 1, 1, 1)),
    ConvSpec(1, 128, 28, 28, 256, (1, 1), (2, 2), (0, 0, 0, 0), bias=True),
    ConvSpec(1, 3, 224, 224, 64, (7, 7), (2, 2), (3, 3, 3, 3), bias=True, clip_lo=0.0),
    ConvSpec(1, 96, 56, 56, 96, (3, 3), (2, 2), (1, 1, 1, 1), groups=96, bias=True, clip_lo=0.0, clip_hi=6.0),
    ConvSpec(1, 64, 28, 28, 64, (3, 3), (1, 1), (1, 1, 1, 1), groups=4, bias=True, clip_lo=0.0),
]


@pytest.mark.parametrize("spec", KEY_SPECS, ids=lambda s: s.describe())
def test_candidate_keys_are_unique_per_layer(spec):
    """The key names a candidate's measurement record: two kernels sharing one would share a timing."""
    import numpy as np
    w = np.random.default_rng(0).standard_normal(
        (spec.out_channels, spec.in_channels // spec.groups, *spec.kernel)).astype("float32")
    w[np.abs(w) < 1.0] = 0.0          # sparse too
    keys = [c.key for c in candidates.propose(spec, weight=w)]
    assert keys and len(keys) == len(set(keys))


def test_direct_applies_to_every_conv():
    """Channel counts no tile of 4 or 8 divides (ShuffleNet's 58) still get a direct candidate,
    and a 1x1 one a wide tile (29 channels) as well; both correct."""
    spec = ConvSpec(1, 58, 6, 6, 58, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, clip_lo=0.0)
    cands = candidates.propose(spec, ["direct"])
    assert [c.param("oc_tile") for c in cands] == [2, 29]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = rng.standard_normal((58, 58, 1, 1)).astype("float32")
    b = rng.standard_normal(58).astype("float32")
    for c in cands:
        got, _ = _run(c, spec, x, w, b, None)
        assert rel_err(got, conv2d_nchw(x, w, bias=b, lo=0.0)) < 1e-5, c.key


def test_direct_flattens_the_pixels_of_1x1_stride_1_convs():
    """1x1 stride-1 convs also get the flattened-pixel schedule: 16-float vectors along the pixels
    (rows of 12 or 28 are not vectors) and channel tiles up to 29 (58 = 2 x 29 channels)."""
    spec = ConvSpec(1, 58, 12, 12, 58, (1, 1), (1, 1), (0, 0, 0, 0))
    flat = [c for c in candidates.propose(spec) if dict(c.params).get("flat")]
    assert [(c.param("oc_tile"), c.param("vec")) for c in flat] == [(29, 16)]
    assert not [c for c in candidates.propose(ConvSpec(1, 58, 7, 7, 58, (1, 1), (1, 1), (0, 0, 0, 0)))
                if dict(c.params).get("flat")]           # 49 pixels: no full vectors
    assert not [c for c in candidates.propose(ConvSpec(1, 16, 8, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1)))
                if dict(c.params).get("flat")]           # 3x3: not a matrix product over pixels


PW_SPECS = [
    # positions no tile divides (7x7 = 49), every fused epilogue, ReLU6
    ConvSpec(1, 32, 7, 7, 48, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, residual=True, clip_lo=0.0, clip_hi=6.0),
    # batch 2, a rectangular map, no epilogue at all
    ConvSpec(2, 16, 5, 9, 32, (1, 1), (1, 1), (0, 0, 0, 0)),
    # fewer positions than a tile (3), residual without bias
    ConvSpec(1, 32, 1, 3, 16, (1, 1), (1, 1), (0, 0, 0, 0), residual=True),
    # SiLU and HardSwish as EfficientNet's and MobileNetV3's 1x1 convs fuse them
    ConvSpec(1, 16, 6, 6, 64, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, act="silu"),
    ConvSpec(1, 16, 6, 5, 16, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, act="hardswish"),
]


def _pw_inputs(spec: ConvSpec, seed: int):
    """Input, 1x1 weights, bias and residual (None where ``spec`` has none) for a pointwise test."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = rng.standard_normal((spec.out_channels, spec.in_channels, 1, 1)).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    return x, w, b, r


@pytest.mark.parametrize("spec", PW_SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
@pytest.mark.parametrize("isa_name", ["avx2", "avx512"])
def test_pointwise_every_tile_and_epilogue(spec, isa_name):
    from graphselect.candidates.base import activation_np
    from graphselect.target import AVX512, VectorIsa
    isa = VectorIsa(8, 16) if isa_name == "avx2" else AVX512
    x, w, b, r = _pw_inputs(spec, 1)
    ref = activation_np(conv2d_nchw(x, w, bias=b, residual=r, lo=spec.clip_lo, hi=spec.clip_hi), spec.act)
    cands = candidates.propose(spec, ["pointwise"], isa=isa)
    assert cands, spec.describe()
    positions = spec.out_h * spec.out_w
    assert all(c.param("reg_n") <= positions for c in cands)
    for c in cands:
        got, f = _run(c, spec, x, w, b, r)
        assert rel_err(got, ref) < 1e-5, c.key
        assert f.attrs["graphselect.family"] == "pointwise"


@pytest.mark.parametrize("isa_name,spec", [
    # AVX-512: MobileNetV2's 24-channel projection with its residual, and the expand reading it;
    # 7x5 positions no tile divides, ReLU6
    ("avx512", ConvSpec(1, 48, 7, 5, 24, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, residual=True)),
    ("avx512", ConvSpec(1, 24, 5, 7, 32, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, clip_lo=0.0, clip_hi=6.0)),
    ("avx512", ConvSpec(2, 24, 3, 3, 24, (1, 1), (1, 1), (0, 0, 0, 0))),
    # AVX2: 12 channels, one and a half vectors of 8
    ("avx2", ConvSpec(1, 16, 6, 5, 12, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, residual=True, clip_lo=0.0)),
])
def test_pointwise_whole_block_of_one_and_a_half_vectors(isa_name, spec):
    """24 channels on AVX-512 (12 on AVX2), which no whole vector divides, get one NCHW24c block
    computed in two whole vectors: the weights padded with zero channels, the padded lanes never
    stored (a store past them would overwrite the next position's channels)."""
    from graphselect.target import AVX512, VectorIsa
    isa = VectorIsa(8, 16) if isa_name == "avx2" else AVX512
    x, w, b, r = _pw_inputs(spec, 2)
    ref = conv2d_nchw(x, w, bias=b, residual=r, lo=spec.clip_lo, hi=spec.clip_hi)
    cands = candidates.propose(spec, ["pointwise"], isa=isa)
    whole = 1.5 * isa.lanes
    odd = [c for c in cands if whole in (c.param("oc_bn"), c.param("ic_bn"))]
    assert odd, [c.key for c in cands]
    for c in odd:
        if c.param("oc_bn") == whole:
            assert c.param("wide") == 2 * isa.lanes and c.out_layout == f"NCHW{int(whole)}c"
            assert c.param("reg_n") <= (isa.registers - 3) // 2
        got, _ = _run(c, spec, x, w, b, r)
        assert rel_err(got, ref) < 1e-5, c.key


def test_pointwise_only_for_unpadded_1x1_stride_1():
    from graphselect.target import VectorIsa
    AVX2 = VectorIsa(8, 16)
    ok = ConvSpec(1, 16, 8, 8, 16, (1, 1), (1, 1), (0, 0, 0, 0))
    assert candidates.propose(ok, ["pointwise"], isa=AVX2)
    for spec in (ConvSpec(1, 16, 8, 8, 16, (1, 1), (2, 2), (0, 0, 0, 0)),      # stride 2
                 ConvSpec(1, 16, 8, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1)),      # 3x3
                 ConvSpec(1, 16, 8, 8, 16, (1, 1), (1, 1), (1, 1, 1, 1)),      # padded
                 ConvSpec(1, 16, 8, 8, 16, (1, 1), (1, 1), (0, 0, 0, 0), groups=2),
                 ConvSpec(1, 10, 8, 8, 16, (1, 1), (1, 1), (0, 0, 0, 0))):     # no block divides 10
        assert not candidates.propose(spec, ["pointwise"], isa=AVX2), spec.describe()
    # the tile follows the vector unit: two vectors on AVX2 leave room for 6 positions, one for 12
    assert {(c.param("oc_bn"), c.param("reg_n")) for c in candidates.propose(ok, ["pointwise"], isa=AVX2)} == \
        {(8, 12), (16, 4), (16, 5), (16, 6)}
