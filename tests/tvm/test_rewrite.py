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


def _uniform(lg, layout):
    """Every conv an nchwc candidate in ``layout`` (the stem reading its own), every agnostic op in it."""
    sel = {}
    for l in lg.layers.values():
        if l.kind == "conv":
            sel[l.name] = next(c for c in candidates.propose(l.conv, ["nchwc"]) if c.out_layout == layout
                               and (c.in_layout == layout or l.conv.in_channels == 3))
        elif l.kind == "agnostic":
            sel[l.name] = layout
    return sel


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
    amod = _check(m, p, lg, _uniform(lg, "NCHW16c"))
    # input NCHW -> NCHW3c for the stem, and NCHW16c -> NCHW before the flatten
    assert count_transforms(amod) == 2
    funcs = [f for _, f in amod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
             and f.attrs is not None and "graphselect.family" in f.attrs]
    assert len(funcs) == 3
    assert {str(f.attrs["graphselect.out_layout"]) for f in funcs} == {"NCHW16c"}


def _se_model(op: str, opset: int, axes: list[int]):
    """conv -> reduce over H, W (keepdims) -> 1x1 -> relu -> 1x1 -> sigmoid -> scale * conv -> 1x1:
    a squeeze-and-excitation block whose pooling is written as a reduction, as PyTorch's dynamo
    exporter writes ``adaptive_avg_pool2d(x, 1)`` (axes counted from the end, opset 18: an input)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    c = 32
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w0", (c, 3, 3, 3)), ("w1", (16, c, 1, 1)), ("w2", (c, 16, 1, 1)), ("w3", (16, c, 1, 1)))]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["a"], pads=[1, 1, 1, 1])]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        nodes.append(helper.make_node(op, ["a", "axes"], ["m"], keepdims=1))
    else:
        nodes.append(helper.make_node(op, ["a"], ["m"], axes=axes, keepdims=1))
    nodes += [helper.make_node("Conv", ["m", "w1"], ["s1"]), helper.make_node("Relu", ["s1"], ["s2"]),
              helper.make_node("Conv", ["s2", "w2"], ["s3"]), helper.make_node("Sigmoid", ["s3"], ["s4"]),
              helper.make_node("Mul", ["a", "s4"], ["y"]), helper.make_node("Conv", ["y", "w3"], ["output"])]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("op,opset,axes", [("ReduceMean", 17, [2, 3]), ("ReduceMean", 18, [-1, -2]),
                                           ("ReduceMean", 17, [-2, 3]), ("ReduceSum", 18, [2, 3]),
                                           ("ReduceMax", 17, [-1, -2]), ("ReduceMin", 18, [3, -2])])
def test_spatial_reductions_stay_in_the_blocked_layout(op, opset, axes):
    """A reduction over H and W however written runs in a blocked layout like GlobalAveragePool,
    so a squeeze-and-excitation block needs no transform around its pooling."""
    m = _se_model(op, opset, axes)
    p = onnx_prep.prepare(m)
    mod = import_onnx(p.model, p.shapes)
    lg = extract(mod)
    lg.extra["module"] = mod
    red = [l for l in lg.layers.values() if l.op.startswith("relax.") and l.op.split(".")[1] in ("mean", "sum", "max", "min")]
    assert len(red) == 1 and red[0].kind == "agnostic" and "NCHW16c" in red[0].layouts
    sel = _uniform(lg, "NCHW16c")
    amod = _check(m, p, lg, sel)
    stem = sel[lg.convs[0].name]
    # only at the ends: the image into the stem's layout (unless it reads NCHW) and the output out
    assert count_transforms(amod) == 1 + (stem.in_layout != "NCHW")


def test_a_graphs_later_rewrites_reuse_its_kernels_and_equal_fresh_ones():
    """The networks of one graph share each (layer, candidate)'s PrimFunc and packed weights
    (``rewrite.apply._EMITTED``); a rewrite that reuses them is the module a fresh one makes, and
    a layer whose candidate changed gets its own kernel."""
    import tvm_ffi
    from graphselect.rewrite import apply as apply_mod
    _, p, lg = _graph("tiny")
    a = _uniform(lg, "NCHW16c")
    other = next(c for c in candidates.propose(lg.layers["conv1"].conv, ["nchwc"]) if c != a["conv1"]
                 and (c.in_layout, c.out_layout) == (a["conv1"].in_layout, a["conv1"].out_layout))
    first = apply(lg, a, TARGET)
    again = apply(lg, a, TARGET)
    name = next(gv for gv, f in first.functions_items() if gv.name_hint.startswith("conv1"))
    assert again[name.name_hint].same_as(first[name])          # the kernel was not made again
    mixed = dict(a, conv1=other)
    reused = apply(lg, mixed, TARGET)
    apply_mod._EMITTED.pop(lg)
    fresh = apply(lg, mixed, TARGET)
    tvm.ir.assert_structural_equal(reused, fresh)
    assert not tvm_ffi.structural_equal(reused, first)
