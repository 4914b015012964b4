"""The import's numpy constant folding (``relax_import.fold_in_numpy``) gives the module TVM's
FoldConstant alone gives, on zoo models, PyTorch exports, a QDQ model and a BatchNormalization
left unfolded, and leaves no foldable call for FoldConstant to build."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm  # a hard dependency: a broken install must fail, not skip
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import models
from graphselect.frontend import onnx_prep
from graphselect.frontend.relax_import import _NUMPY_FOLD, fold_affine, fold_in_numpy, import_onnx
from graphselect.graph.layers import _is_const

DATA = Path(__file__).resolve().parents[1] / "data"


def _bn_on_input():
    """A BatchNormalization no conv precedes (prepare cannot fold it): Relax decomposes it into
    arithmetic on its constant statistics."""
    rng = np.random.default_rng(0)
    c = 5
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in
             [("g", rng.uniform(0.5, 2, c)), ("b", rng.normal(size=c)), ("m", rng.normal(size=c)),
              ("v", rng.uniform(0.1, 3, c)), ("w", rng.normal(size=(4, c, 3, 3)))]]
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node("Conv", ["n", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


CASES = {
    "mobile_tiny": lambda: models.build("mobile_tiny"),
    "tiny_concat": lambda: models.build("tiny_concat"),
    "tiny-qdq": lambda: models.quantize_qdq(models.build("tiny")),
    "torch_mobile": lambda: onnx.load(str(DATA / "torch_mobile.onnx")),
    "torch_tiny": lambda: onnx.load(str(DATA / "torch_tiny.onnx")),
    "bn_on_input": _bn_on_input,
}


def _relax(model):
    dynamic = {i.name: (1, 3, 32, 32) for i in model.graph.input if i.name == "images"}   # the torch exports
    p = onnx_prep.prepare(model, input_shapes=dynamic or None)
    raw = from_onnx(p.model, shape_dict={k: list(v) for k, v in p.shapes.items()})
    return p, relax.transform.DecomposeOpsForInference()(raw)


def _foldable_calls(mod):
    """Calls of the numpy-folded ops whose tensor arguments are all constants (or variables bound
    to constants)."""
    consts, found = set(), []

    def const(a):
        return _is_const(a) or (isinstance(a, relax.Var) and a in consts)

    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if const(v):
                consts.add(b.var)
            elif isinstance(v, relax.Call) and getattr(v.op, "name", None) in _NUMPY_FOLD:
                args = v.args[:1] if _NUMPY_FOLD[v.op.name] is None else v.args
                if all(const(a) for a in args):
                    found.append(v.op.name)
    return found


def _tvm_fold(mod):
    """What the import runs after the numpy folding: TVM's FoldConstant and clean-up alone."""
    return tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
                                     relax.transform.DeadCodeElimination()])(mod)


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_fold_gives_foldconstants_module(name):
    p, mod = _relax(CASES[name]())
    want = fold_affine(_tvm_fold(mod))
    tvm.ir.assert_structural_equal(import_onnx(p.model, p.shapes), want)


def test_numpy_fold_removes_the_constant_calls():
    _, mod = _relax(_bn_on_input())
    before = _foldable_calls(relax.transform.CanonicalizeBindings()(mod))
    after = _foldable_calls(relax.transform.CanonicalizeBindings()(fold_in_numpy(mod)))
    assert before and not after, (before, after)


def _ops(mod):
    return [getattr(b.value.op, "name", None) for blk in mod["main"].body.blocks for b in blk.bindings
            if isinstance(b.value, relax.Call)]


def _run_relax(mod, x):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _chain_model(ops, conv_first=False, reader_at=None):
    """x -> [conv] -> the per-channel ops of ``ops`` ((onnx op, constant first) each) -> Relu;
    with ``reader_at`` = k, step k's output is also an output of its own (a second reader)."""
    rng = np.random.default_rng(1)
    c = 4
    inits, nodes, cur = [], [], "x"
    if conv_first:
        inits.append(numpy_helper.from_array(rng.normal(size=(c, c, 1, 1)).astype(np.float32), "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["cv"]))
        cur = "cv"
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 5, 5])]
    for k, (op, first) in enumerate(ops):
        name = f"k{k}"
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 2.0, (c, 1, 1)).astype(np.float32), name))
        nodes.append(helper.make_node(op, [name, cur] if first else [cur, name], [f"t{k}"]))
        cur = f"t{k}"
        if k == reader_at:
            outs.append(helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, c, 5, 5]))
    nodes.append(helper.make_node("Relu", [cur], ["y"]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 5, 5])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _ort(model, x):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def test_affine_chain_folds_to_one_multiply_and_add_with_onnxruntimes_numbers():
    """A BatchNormalization on the input (four ops after decomposition), and a chain with a
    constant first (c - x, c * x): one multiply and one add each, numerics as onnxruntime's."""
    x = np.random.default_rng(2).normal(size=(1, 5, 6, 6)).astype(np.float32)
    bn = _bn_on_input()
    p = onnx_prep.prepare(bn)
    mod = import_onnx(p.model, p.shapes)
    assert _ops(mod) == ["relax.multiply", "relax.add", "relax.nn.conv2d", "relax.nn.relu"], _ops(mod)
    want = _ort(bn, x)[0]
    got = _run_relax(mod, x)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    m = _chain_model([("Sub", True), ("Mul", True), ("Div", False), ("Add", False), ("Sub", False)])
    p = onnx_prep.prepare(m)
    mod = import_onnx(p.model, p.shapes)
    assert _ops(mod) == ["relax.multiply", "relax.add", "relax.nn.relu"], _ops(mod)
    x = np.random.default_rng(3).normal(size=(1, 4, 5, 5)).astype(np.float32)
    want = _ort(m, x)[0]
    assert np.abs(_run_relax(mod, x) - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("case", ["short", "after_conv", "second_reader", "c_over_x"])
def test_affine_chains_left_alone(case):
    """Two ops cannot get shorter; a conv's bias add is its epilogue; an intermediate another op
    reads stays (only the ops after it fold, when three or more); c / x is not affine."""
    m = {"short": lambda: _chain_model([("Sub", False), ("Mul", False)]),
         "after_conv": lambda: _chain_model([("Add", False), ("Mul", False), ("Add", False)], conv_first=True),
         "second_reader": lambda: _chain_model([("Sub", False), ("Div", False), ("Mul", False), ("Add", False)],
                                               reader_at=1),
         "c_over_x": lambda: _chain_model([("Sub", False), ("Div", True), ("Add", False)])}[case]()
    raw = _tvm_fold(_relax(m)[1])
    assert _ops(fold_affine(raw)) == _ops(raw)
