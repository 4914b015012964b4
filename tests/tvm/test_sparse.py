"""Sparse CSR candidates: numerics of every variant, and the fused / unfused (opaque kernel,
separate epilogue) forms inside a whole network against onnxruntime."""
import numpy as np
import pytest

import tvm  # a hard dependency: a broken install must fail, not skip

import models
from models.prune import prune_blocks
from graphselect import candidates
from graphselect.candidates import sparse_csr
from graphselect.frontend import onnx_prep
from graphselect.frontend.relax_import import import_onnx
from graphselect.graph.layers import ConvSpec, extract
from graphselect.measure.e2e import ort_session
from graphselect.rewrite.apply import apply
from graphselect.codegen.lower import build, lower
from graphselect.target import parse_target
from tests.reference import conv2d_nchw, rel_err

TARGET = parse_target("llvm", threads=2).tvm_target()

SPECS = [
    ConvSpec(1, 16, 13, 11, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0),
    ConvSpec(1, 32, 10, 9, 16, (3, 3), (2, 2), (1, 1, 1, 1), bias=True, clip_lo=0.0, clip_hi=6.0),
    ConvSpec(1, 3, 20, 20, 16, (7, 7), (2, 2), (3, 3, 3, 3), bias=True, clip_lo=0.0),
    ConvSpec(1, 64, 8, 8, 32, (1, 1), (2, 2), (0, 0, 0, 0)),
]


def _pruned(shape, sparsity, rng, block=1):
    w = rng.standard_normal(shape).astype("float32")
    if block > 1:          # blocks of `block` output channels at one (input channel, tap)
        return prune_blocks(w, sparsity, block)
    w[np.abs(w) < np.quantile(np.abs(w), sparsity)] = 0
    return w


@pytest.mark.parametrize("block", [1, 4])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe() + " " + s.epilogue)
def test_every_sparse_variant_matches_numpy(spec, block):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = _pruned((spec.out_channels, spec.in_channels) + spec.kernel, 0.9, rng, block)
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual else None
    full = conv2d_nchw(x, w, stride=spec.stride, padding=spec.padding, bias=b, residual=r,
                       lo=spec.clip_lo, hi=spec.clip_hi)
    bare = conv2d_nchw(x, w, stride=spec.stride, padding=spec.padding)
    cands = candidates.propose(spec, ["sparse_csr"], w)
    assert {c.param("fused") for c in cands} == {0, 1}
    # block-sparse variants exactly where the zeros come in blocks (4 and, filled half, 8)
    assert {dict(c.params).get("R", 1) for c in cands} == ({1} if block == 1 else {1, 4, 8})
    for c in cands:
        fused = c.fuses(spec)
        f = sparse_csr.build(c, spec, TARGET, "main")
        assert int(f.attrs["op_pattern"]) == 8
        ex = tvm.compile(tvm.IRModule({"main": f}), target=TARGET)
        args = [x] + sparse_csr.pack(c, spec, w, b) + ([r] if r is not None and fused else [])
        out = tvm.runtime.tensor(np.zeros(spec.out_shape, "float32"))
        ex["main"](*[tvm.runtime.tensor(a) for a in args], out)
        assert rel_err(out.numpy(), full if fused else bare) < 1e-5, c.key
        R = dict(c.params).get("R", 1)
        assert c.weight_bytes >= 4 * (np.count_nonzero(w) + sparse_csr.blocks(w, R)), c.key


def test_no_sparse_candidates_for_dense_weights():
    spec = SPECS[0]
    w = np.ones((spec.out_channels, spec.in_channels, 3, 3), "float32")
    assert candidates.propose(spec, ["sparse_csr"], w) == []
    assert candidates.propose(spec, ["sparse_csr"]) == []


def test_pattern_is_part_of_the_key():
    spec = SPECS[3]
    rng = np.random.default_rng(1)
    a = _pruned((32, 64, 1, 1), 0.9, rng)
    b = _pruned((32, 64, 1, 1), 0.9, rng)
    ka = {c.key for c in candidates.propose(spec, ["sparse_csr"], a)}
    kb = {c.key for c in candidates.propose(spec, ["sparse_csr"], b)}
    assert not ka & kb


@pytest.mark.parametrize("fused", [1, 0])
def test_sparse_conv_with_relu_and_residual_in_a_network(fused):
    m = models.build("tiny", sparsity=0.8)
    p = onnx_prep.prepare(m)
    mod = import_onnx(p.model, p.shapes)
    lg = extract(mod)
    lg.extra["module"] = mod
    sel = {}
    for l in lg.layers.values():
        if l.kind == "conv":
            cs = [c for c in candidates.propose(l.conv, ["sparse_csr"], l.weight) if c.param("fused") == fused]
            sel[l.name] = cs[0]
        elif l.kind == "agnostic":
            sel[l.name] = "NCHW"
    # conv0: bias+relu, conv1: bias+residual+relu: both epilogue kinds, fused or not
    assert [lg.layers[n].conv.epilogue for n in ("conv0", "conv1")] == ["bias+relu", "bias+res+relu"]
    amod = apply(lg, sel, TARGET)
    lowered = lower(amod, TARGET)
    kernels = [f for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
               and f.attrs is not None and "graphselect.family" in f.attrs]
    assert len(kernels) == 3 and all(int(f.attrs["op_pattern"]) == 8 for f in kernels)
    others = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
              and (f.attrs is None or "graphselect.family" not in f.attrs)]
    if not fused:      # the epilogues became their own (fused, scheduled) elementwise kernels
        assert sum("add" in n or "maximum" in n for n in others) >= 2
    ex = build(amod, TARGET)
    from tvm import relax
    x = np.random.default_rng(0).standard_normal(p.input_shape).astype("float32")
    ref = ort_session(m.SerializeToString(), 2).run(None, {p.input_name: x})[0]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert rel_err(got, ref) < 1e-4


def test_unfused_sparse_conv_with_activations_in_a_network():
    """SiLU, HardSwish and Sigmoid after an opaque sparse kernel run as separate Relax ops."""
    m = models.build("mobile_tiny", sparsity=0.8)
    p = onnx_prep.prepare(m)
    mod = import_onnx(p.model, p.shapes)
    lg = extract(mod)
    lg.extra["module"] = mod
    sel, acts = {}, set()
    for l in lg.layers.values():
        if l.kind == "conv":
            sparse = [c for c in candidates.propose(l.conv, ["sparse_csr"], l.weight) if c.param("fused") == 0]
            if sparse and l.conv.act:
                sel[l.name] = sparse[0]
                acts.add(l.conv.act)
            else:
                sel[l.name] = candidates.propose(l.conv, ["direct", "depthwise"])[0]
        elif l.kind == "agnostic":
            sel[l.name] = "NCHW"
    assert {"silu", "hardswish", "sigmoid"} <= acts
    ex = build(apply(lg, sel, TARGET), TARGET)
    from tvm import relax
    x = np.random.default_rng(0).standard_normal(p.input_shape).astype("float32")
    ref = ort_session(m.SerializeToString(), 2).run(None, {p.input_name: x})[0]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert rel_err(got, ref) < 1e-4
