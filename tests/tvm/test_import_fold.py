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
from graphselect.frontend.relax_import import _NUMPY_FOLD, fold_in_numpy, import_onnx
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


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_fold_gives_foldconstants_module(name):
    p, mod = _relax(CASES[name]())
    want = tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
                                     relax.transform.DeadCodeElimination()])(mod)
    tvm.ir.assert_structural_equal(import_onnx(p.model, p.shapes), want)


def test_numpy_fold_removes_the_constant_calls():
    _, mod = _relax(_bn_on_input())
    before = _foldable_calls(relax.transform.CanonicalizeBindings()(mod))
    after = _foldable_calls(relax.transform.CanonicalizeBindings()(fold_in_numpy(mod)))
    assert before and not after, (before, after)
