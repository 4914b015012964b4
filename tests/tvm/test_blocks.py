"""Block candidates (``dwpw``: a depthwise conv and the 1x1 conv reading it, one kernel) from the
kernel to the built network: numerics against numpy and onnxruntime on odd shapes, the plan's
tied options, the solver's cover, the rewrite's single call."""
import numpy as np
import pytest

import tvm  # a hard dependency: a broken install must fail, not skip

from costmodels.table import Timing, build_problem
from graphselect import candidates
from graphselect.candidates import dwpw
from graphselect.codegen.lower import build
from graphselect.frontend import onnx_prep
from graphselect.frontend.relax_import import import_onnx
from graphselect.graph import layouts
from graphselect.graph.layers import ConvSpec, extract
from graphselect.measure import plan as plan_mod
from graphselect.measure.e2e import ort_session
from graphselect.rewrite.apply import apply, count_transforms
from graphselect.solve import solve
from graphselect.stages.build import conv_symbols
from graphselect.target import AVX512, VectorIsa, parse_target
from models.builder import GraphBuilder
from tests.reference import rel_err

TARGET = parse_target("llvm", threads=2).tvm_target()
AVX2 = VectorIsa(8, 16)


def _spec_pair(c, h, w, o, stride=1, k=3, residual=False, batch=1, act_pw=False):
    pad = k // 2
    dw = ConvSpec(batch, c, h, w, c, (k, k), (stride, stride), (pad,) * 4, groups=c, bias=True, clip_lo=0.0,
                  clip_hi=6.0)
    pw = ConvSpec(batch, c, dw.out_h, dw.out_w, o, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, residual=residual,
                  clip_lo=0.0 if act_pw else None)
    return dw, pw


@pytest.mark.parametrize("shape,isa", [
    ((32, 9, 11, 24, 2, 3, False, 1, False), AVX512),    # stride 2, 24 outputs: half-vector blocks, tails
    ((48, 7, 7, 32, 1, 3, True, 1, True), AVX512),       # residual add, ReLU after it
    ((16, 10, 6, 40, 1, 5, False, 2, False), AVX512),    # 5x5, batch 2, 40 outputs
    ((16, 8, 8, 24, 1, 3, True, 1, False), AVX2),        # AVX2 grid
])
def test_kernel_matches_numpy(shape, isa):
    dw, pw = _spec_pair(*shape)
    rng = np.random.default_rng(1)
    wd = rng.standard_normal((dw.out_channels, 1, *dw.kernel)).astype("float32")
    bd = rng.standard_normal(dw.out_channels).astype("float32")
    wp = rng.standard_normal((pw.out_channels, pw.in_channels, 1, 1)).astype("float32")
    bp = rng.standard_normal(pw.out_channels).astype("float32")
    x = rng.standard_normal(dw.in_shape).astype("float32")
    r = rng.standard_normal(pw.out_shape).astype("float32") if pw.residual else None
    want = dwpw.reference(dw, pw, x, wd, bd, wp, bp, r)
    cands = dwpw.propose_chain(dw, pw, ("a", "b"), isa)
    assert cands and all(c.in_layout == layouts.blocked(isa.lanes) for c in cands)
    for c in cands:
        mod = tvm.compile(dwpw.build_chain(c, dw, pw, TARGET, "main"), target=TARGET)
        ins = [layouts.pack(x, c.in_layout)] + dwpw.pack_chain(c, dw, pw, wd, bd, wp, bp) + \
            ([layouts.pack(r, c.out_layout)] if r is not None else [])
        args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in ins] + \
            [tvm.runtime.tensor(np.zeros(layouts.shape_in(pw.out_shape, c.out_layout), "float32"))]
        mod["main"](*args)
        got = layouts.unpack(args[-1].numpy(), c.out_layout)
        assert rel_err(got, want) < 1e-5, c.key


def test_not_offered_where_it_cannot_compute_the_chain():
    dw, pw = _spec_pair(32, 8, 8, 16)
    assert not dwpw.propose_chain(dw, ConvSpec(1, 32, 8, 8, 16, (1, 1), (2, 2), (0,) * 4), ("a", "b"))  # stride
    assert not dwpw.propose_chain(ConvSpec(1, 32, 8, 8, 32, (3, 3), (1, 1), (1,) * 4), pw, ("a", "b"))   # not dw
    dw24, pw24 = _spec_pair(24, 8, 8, 16)          # hidden channels no vector divides
    assert not dwpw.propose_chain(dw24, pw24, ("a", "b"))
    assert candidates.propose(dw, ["dwpw"]) == []   # nothing for one layer alone


def _chain_model(c=32, size=9, o=24, stride=2, residual=False, reader=False):
    """conv 3x3 -> depthwise 3x3 + ReLU6 -> 1x1 (+ residual) -> GAP -> Gemm; ``reader``: the
    depthwise output is also read by an Add, so no block applies."""
    g = GraphBuilder("chain", batch=1, image_size=size, seed=3, in_channels=8)
    x = g.relu(g.conv("input", "stem", c, 3, bias=True), "stem_relu")
    h = g.clip(g.conv(x, "dw", c, 3, stride=stride, bias=True, group=c), "dw_clip")
    if reader:
        h = g.add(h, g.conv(h, "side", c, 1, bias=True), "side_add")
    y = g.conv(h, "pw", o if not residual else c, 1, bias=True)
    if residual:
        y = g.add(y, x, "res_add")
    return g.finish(g.head(y, 10))


def _graph(m):
    p = onnx_prep.prepare(m)
    mod = import_onnx(p.model, p.shapes)
    lg = extract(mod)
    lg.extra["module"] = mod
    return p, lg


def _block_selection(lg, plan):
    """The first block candidate on its members; every other conv its first candidate that reads
    what its producer gives (NCHW16c everywhere else), agnostic ops in NCHW16c."""
    sel = {}
    for name, objs in plan.impls.items():
        layer = lg.layers[name]
        if layer.kind == "conv":
            blk = [c for c in objs if isinstance(c, dwpw.BlockCandidate)]
            sel[name] = blk[0] if blk else next(c for c in objs if c.out_layout == "NCHW16c" and (
                c.in_layout == "NCHW16c" or layer.inputs[0] == "input"))
        else:
            sel[name] = "NCHW16c" if "NCHW16c" in layer.layouts else objs[0]
    return sel


@pytest.mark.parametrize("residual", [False, True])
def test_block_in_a_network_matches_onnxruntime(residual):
    from tvm import relax
    m = _chain_model(residual=residual, stride=1 if residual else 2)
    p, lg = _graph(m)
    plan = plan_mod.make_plan(lg, TARGET)
    dl, pl = lg.layers["conv1"], lg.layers["conv2"]
    assert [(a.name, b.name) for a, b in plan_mod.chains(lg)] == [(dl.name, pl.name)]
    sel = _block_selection(lg, plan)
    amod = apply(lg, sel, TARGET)
    calls = [f for gv, f in amod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
             and "graphselect.family" in f.attrs and str(f.attrs["graphselect.family"]) == "dwpw"]
    assert len(calls) == 1 and str(calls[0].attrs["graphselect.members"]) == f"{dl.name},{pl.name}"
    assert not any(str(f.attrs.get("graphselect.family", "")) == "depthwise" for _, f in amod.functions_items()
                   if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None)
    # the block's kernel is timed in place as the last member's (the symbol the rewrite gives it)
    assert conv_symbols(type("I", (), {"lg": lg})(), sel)[f"{pl.name}_dwpw"] == pl.name
    ex = build(amod, TARGET)
    x = np.random.default_rng(0).standard_normal(p.input_shape).astype("float32")
    ref = ort_session(m.SerializeToString(), 2).run(None, {p.input_name: x})[0]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    assert rel_err(got, ref) < 1e-4
    # layouts are paid at the block's boundary only: as many transforms as the two layers computed
    # by per-layer kernels in the block's outer layouts (its input's for the depthwise conv)
    blk = sel[pl.name]
    per_layer = dict(sel)
    per_layer[dl.name] = next(c for c in plan.impls[dl.name] if c.family == "depthwise"
                              and c.in_layout == c.out_layout == blk.in_layout)
    per_layer[pl.name] = next(c for c in plan.impls[pl.name] if c.family in ("pointwise", "nchwc")
                              and c.in_layout == blk.in_layout and c.out_layout == blk.out_layout)
    assert count_transforms(amod) == count_transforms(apply(lg, per_layer, TARGET))


def test_plan_ties_the_members_and_the_solver_covers_each_layer_once():
    m = _chain_model()
    _, lg = _graph(m)
    plan = plan_mod.make_plan(lg, TARGET)
    dl, pl = plan_mod.chains(lg)[0]
    dt, pt = plan.table(dl.name), plan.table(pl.name)
    blocks = [o for o in pt.options if o.family == "dwpw"]
    assert blocks and len([o for o in dt.options if o.name.startswith("dwpw(")]) == len(blocks)
    for o in blocks:
        inner = next(d for d in dt.options if d.name == o.name)
        assert inner.kernel is None and inner.out_layout.startswith(dwpw.TOKEN) and o.in_layouts[0] == inner.out_layout
    # no layout transform to or from a token is planned
    for e in plan.edges:
        assert not any(a.startswith(dwpw.TOKEN) or b.startswith(dwpw.TOKEN) for a, b in e.transforms)
    keys = plan.keys()

    def solved(block_ms):
        def ms(k):     # transforms cheap, so the layouts do not decide
            return block_ms if k[0].startswith("block ") else 1e-4 if k[0].startswith("layout_transform") else 0.01
        t = {k: Timing(ms(k), ms(k)) for k in keys}
        prob = build_problem(plan.layers, plan.edges, t)
        sol = solve(prob, method="cp-sat", time_limit=10)
        i, j = plan.index[dl.name], plan.index[pl.name]
        return dt.options[sol.choice[i]].name, pt.options[sol.choice[j]].name, pt.options[sol.choice[j]].family

    a, b, fam = solved(0.001)        # the block is faster than the two kernels it replaces
    assert a == b and fam == "dwpw"
    a, b, fam = solved(0.1)          # slower: per-layer kernels on both
    assert fam != "dwpw" and not a.startswith("dwpw(")


def test_no_block_where_the_hidden_tensor_has_another_reader():
    _, lg = _graph(_chain_model(reader=True))
    assert plan_mod.chains(lg) == []
