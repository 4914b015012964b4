"""The rewrite under arbitrary assignments: whatever the solver picks must build and match
onnxruntime, with layout transforms exactly where layouts change."""
import numpy as np
import pytest

import tvm  # a hard dependency: a broken install must fail, not skip

import models
from graphselect import candidates
from graphselect.frontend import onnx_prep
from graphselect.frontend.relax_import import import_onnx
from graphselect.graph.layers import extract
from graphselect.measure.e2e import ort_session
from graphselect.rewrite.apply import apply, count_transforms
from graphselect.codegen.lower import build
from graphselect.target import parse_target
from tests.reference import rel_err

TARGET = parse_target("llvm", threads=2).tvm_target()


def _graph(name, **kw):
    m = models.build(name, **kw)
    p = onnx_prep.prepare(m)
    mod = import_onnx(p.model, p.shapes)
    lg = extract(mod)
    lg.extra["module"] = mod
    return m, p, lg


def _check(m, p, lg, sel):
    from tvm import relax
    amod = apply(lg, sel, TARGET)
    ex = build(amod, TARGET)
    x = np.random.default_rng(0).standard_normal(p.input_shape).astype("float32")
    ref = ort_session(m.SerializeToString(), 2).run(None, {p.input_name: x})[0]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    assert rel_err(got, ref) < 1e-4
    return amod


def test_tiny_graph_structure():
    _, p, lg = _graph("tiny")
    convs = lg.convs
    assert len(convs) == 3 and p.folded_bn == 3
    assert [c.conv.epilogue for c in convs] == ["bias+relu", "bias+res+relu", "bias+relu"]
    # the residual conv has two inputs: data, and the residual in its output layout
    assert convs[1].inputs == ("conv0", "conv0")
    kinds = {l.op for l in lg.layers.values() if l.kind == "agnostic"}
    assert "relax.nn.max_pool2d" in kinds and "relax.mean" in kinds


@pytest.mark.parametrize("seed", range(4))
def test_random_assignments_match_onnxruntime(seed):
    m, p, lg = _graph("tiny_concat" if seed % 2 else "tiny")
    rng = np.random.default_rng(seed)
    sel = {}
    for l in lg.layers.values():
        if l.kind == "conv":
            cs = candidates.propose(l.conv)
            sel[l.name] = cs[rng.integers(len(cs))]
        elif l.kind == "agnostic":
            sel[l.name] = l.layouts[rng.integers(len(l.layouts))]
    amod = _check(m, p, lg, sel)
    # one transform per (tensor, extra layout it is needed in)
    needed = set()
    produced = {"input": "NCHW"}
    for l in lg.layers.values():
        if l.kind == "conv":
            produced[l.name] = sel[l.name].out_layout
        elif l.kind == "agnostic":
            produced[l.name] = sel[l.name]
        elif l.kind != "input":
            produced[l.name] = "NCHW"
    for l in lg.layers.values():
        for port, src in enumerate(l.inputs):
            if l.kind == "conv":
                want = sel[l.name].in_layout if port == 0 else sel[l.name].out_layout
            else:
                want = produced[l.name] if l.kind == "agnostic" else "NCHW"
            if want != produced[src]:
                needed.add((src, want))
    assert count_transforms(amod) == len(needed)


def test_uniform_layout_needs_transforms_only_at_the_ends():
    m, p, lg = _graph("tiny")
    sel = {}
    for l in lg.layers.values():
        if l.kind == "conv":
            cs = [c for c in candidates.propose(l.conv, ["nchwc"]) if c.out_layout == "NCHW16c"
                  and (c.in_layout == "NCHW16c" or l.conv.in_channels == 3)]
            sel[l.name] = cs[0]
        elif l.kind == "agnostic":
            sel[l.name] = "NCHW16c"
    amod = _check(m, p, lg, sel)
    # input NCHW -> NCHW3c for the stem, and NCHW16c -> NCHW before the flatten
    assert count_transforms(amod) == 2
    funcs = [f for _, f in amod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
             and f.attrs is not None and "graphselect.family" in f.attrs]
    assert len(funcs) == 3
    assert {str(f.attrs["graphselect.out_layout"]) for f in funcs} == {"NCHW16c"}
