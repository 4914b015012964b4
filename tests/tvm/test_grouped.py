"""Depthwise and grouped convolutions: every proposed candidate of every family, built and run,
against the float64 reference, with every fused epilogue."""
import numpy as np
import pytest

import tvm  # a hard dependency: a broken install must fail, not skip

from graphselect import candidates
from graphselect.candidates import base, depthwise
from graphselect.graph import layouts
from graphselect.graph.layers import ConvSpec
from graphselect.target import parse_target
from tests.reference import run_candidate

TARGET = parse_target("llvm", threads=2).tvm_target()
RELU6 = dict(clip_lo=0.0, clip_hi=6.0)

DW_SPECS = [
    # MobileNet block: 3x3 stride 1, bias + ReLU6, 5x7 spatial (no register tile divides 7 evenly but 7)
    ConvSpec(1, 32, 5, 7, 32, (3, 3), (1, 1), (1, 1, 1, 1), groups=32, bias=True, **RELU6),
    # stride 2 on odd sizes, bias + residual, batch 2, 48 channels (blocks 8 and 16)
    ConvSpec(2, 48, 9, 7, 48, (3, 3), (2, 2), (1, 1, 1, 1), groups=48, bias=True, residual=True),
    # EfficientNet: 5x5 stride 2, asymmetric padding, SiLU
    ConvSpec(1, 16, 11, 10, 16, (5, 5), (2, 2), (2, 1, 1, 2), groups=16, bias=True, act="silu"),
    # 5x5 stride 1 with hardswish, no padding on the left/bottom
    ConvSpec(1, 64, 7, 6, 64, (5, 5), (1, 1), (2, 0, 0, 2), groups=64, bias=True, act="hardswish"),
    # 3x3 stride 1, sigmoid, no bias; 24 channels (only block 8)
    ConvSpec(2, 24, 6, 5, 24, (3, 3), (1, 1), (1, 1, 1, 1), groups=24, act="sigmoid"),
]

GROUPED_SPECS = [
    # RegNet-style: group width 16, stride 1, bias + ReLU
    ConvSpec(1, 32, 5, 7, 32, (3, 3), (1, 1), (1, 1, 1, 1), groups=2, bias=True, clip_lo=0.0),
    # group width 16, stride 2, batch 2, bias + residual + ReLU6... residual needs stride 2 output
    ConvSpec(2, 48, 9, 7, 48, (3, 3), (2, 2), (1, 1, 1, 1), groups=3, bias=True, residual=True, **RELU6),
    # group width 8 in, 16 out, asymmetric padding, SiLU
    ConvSpec(1, 32, 6, 5, 64, (3, 3), (1, 1), (0, 1, 2, 0), groups=4, bias=True, act="silu"),
    # group width 4 (blocks smaller than 8), hardswish
    ConvSpec(1, 16, 5, 5, 16, (3, 3), (2, 2), (1, 1, 1, 1), groups=4, act="hardswish"),
]


def _data(spec, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = rng.standard_normal((spec.out_channels, spec.in_channels // spec.groups) + spec.kernel).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    return x, w, b, r


def _run(cand, spec, x, w, b, r):
    return run_candidate(cand, spec, x, w, b, r, TARGET)


def _rel_err(got, ref):
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _check_all(spec, cands, seed):
    x, w, b, r = _data(spec, seed)
    ref = base.reference(spec, x, w, b, r)
    for c in cands:
        got, f = _run(c, spec, x, w, b, r)
        assert got.shape == ref.shape, c.key
        assert _rel_err(got, ref) <= base.TOLERANCE, (c.key, _rel_err(got, ref))
        assert f.attrs["graphselect.family"] == c.family
        assert f.attrs["graphselect.in_layout"] == c.in_layout
        assert f.attrs["graphselect.out_layout"] == c.out_layout
        assert c.fuses(spec)
        packed = candidates.family(c).pack(c, spec, w, b)
        assert c.weight_bytes == sum(a.nbytes for a in packed), c.key


@pytest.mark.parametrize("spec", DW_SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_depthwise_every_candidate(spec):
    cands = candidates.propose(spec)
    assert {c.family for c in cands} == {"depthwise"}       # direct/nchwc leave depthwise alone
    assert 2 <= len(cands) <= 8
    assert len({c.key for c in cands}) == len(cands)
    blocks = {layouts.block_of(c.in_layout) for c in cands}
    assert None in blocks and blocks - {None} == set(depthwise._blocks(spec.in_channels))
    assert all(c.in_layout == c.out_layout for c in cands)
    _check_all(spec, cands, seed=0)


@pytest.mark.parametrize("spec", GROUPED_SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_grouped_every_candidate(spec):
    cands = candidates.propose(spec, ["direct", "nchwc"])
    assert {c.family for c in cands} == {"direct", "nchwc"}
    ig, og = spec.in_channels // spec.groups, spec.out_channels // spec.groups
    for c in cands:
        if c.family == "nchwc":     # one output block reads one group's input blocks
            assert ig % c.param("ic_bn") == 0 and og % c.param("oc_bn") == 0, c.key
    assert candidates.propose(spec, ["depthwise"]) == []
    _check_all(spec, cands, seed=1)


def test_depthwise_blocks_and_tiles_follow_the_shape():
    # MobileNetV2's 144-channel layer: blocks 8 and 16 (not 32); 56 columns: tiles 8 and 14
    spec = ConvSpec(1, 144, 56, 56, 144, (3, 3), (1, 1), (1, 1, 1, 1), groups=144, bias=True, **RELU6)
    cands = candidates.propose(spec, ["depthwise"])
    blocked = {(c.param("bn"), c.param("reg_n")) for c in cands if c.in_layout != "NCHW"}
    assert blocked == {(8, 8), (8, 14), (16, 8), (16, 14)}
    # 960 channels at 7x7: blocks 16, 32, 64, one 7-column tile each (64 lanes: one column)
    spec = ConvSpec(1, 960, 7, 7, 960, (3, 3), (1, 1), (1, 1, 1, 1), groups=960, bias=True, **RELU6)
    blocked = {(c.param("bn"), c.param("reg_n")) for c in candidates.propose(spec, ["depthwise"])
               if c.in_layout != "NCHW"}
    assert blocked == {(16, 7), (32, 7), (64, 1)}


def test_weight_bytes_exact():
    spec = ConvSpec(1, 96, 14, 14, 96, (3, 3), (2, 2), (1, 1, 1, 1), groups=96, bias=True, **RELU6)
    for c in candidates.propose(spec):
        assert c.weight_bytes == 4 * (96 * 9 + 96), c.key
        if c.in_layout != "NCHW":
            assert c.workspace_bytes == 0, c.key      # padding is a guarded load, no copy
        else:
            assert 0 < c.workspace_bytes < spec.padded_input_bytes, c.key   # padded rows per task
    spec = ConvSpec(1, 64, 14, 14, 64, (3, 3), (1, 1), (1, 1, 1, 1), groups=4)   # group width 16, no bias
    for c in candidates.propose(spec):
        assert c.weight_bytes == 4 * 64 * 16 * 9, c.key
        # direct pads into a copy; grouped nchwc guards its loads instead
        assert c.workspace_bytes == (spec.padded_input_bytes if c.family == "direct" else 0), c.key


def test_non_depthwise_gets_no_depthwise_candidates():
    assert candidates.propose(ConvSpec(1, 16, 8, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1)), ["depthwise"]) == []
    # channel multiplier 2 (groups == in channels, twice the outputs) is grouped, not depthwise
    spec = ConvSpec(1, 16, 6, 6, 32, (3, 3), (1, 1), (1, 1, 1, 1), groups=16, bias=True)
    assert candidates.propose(spec, ["depthwise"]) == []
    _check_all(spec, candidates.propose(spec), seed=2)
