"""ONNX -> Relax: ``tvm.relax.frontend.onnx.from_onnx`` with constants bound, then the
inference-only simplifications every later stage expects (constant bias reshapes folded,
any BatchNormalization not folded at the ONNX level decomposed into multiply/add)."""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedModel


def importer_ops() -> frozenset[str]:
    """The ONNX ops (default domain) TVM's Relax importer converts."""
    from tvm.relax.frontend.onnx import onnx_frontend
    return frozenset(onnx_frontend._get_convert_map())


def import_onnx(model, shapes: dict[str, tuple[int, ...]]):
    """``shapes``: every input's fixed shape, by name (``Prepared.shapes``)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    model = _without_upsample(model)
    try:
        mod = from_onnx(model, shape_dict={k: list(v) for k, v in shapes.items()})
    except Exception as e:  # noqa: BLE001 - the importer raises many types; the user needs its message
        msg = str(e).strip().splitlines()
        given = ", ".join(f"'{k}' {list(v)}" for k, v in shapes.items())
        raise UnsupportedModel(f"TVM's ONNX importer rejected the model with input(s) {given}: "
                               f"{msg[-1] if msg else type(e).__name__}; if a shape was given with --input-shape, "
                               f"check it") from e
    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod = fold_in_numpy(mod)
    seq = tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
                                    relax.transform.DeadCodeElimination()])
    return seq(mod)


# Ops on constants evaluated in numpy before FoldConstant, which builds every folded call with
# LLVM (~30 ms each: MobileNetV2's 156 bias reshapes and 140 clip-bound isnan/where took 6.1 s
# of a 6.4 s import). Exact in float32: layout ops copy, isnan/where select, and the arithmetic
# is IEEE single precision either way. Anything else is left to FoldConstant.
_NUMPY_FOLD = {   # None: a reshape (the value kept, the call's shape given)
    "relax.reshape": None, "relax.expand_dims": None, "relax.squeeze": None,
    "relax.isnan": np.isnan, "relax.where": np.where,
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide, "relax.sqrt": np.sqrt, "relax.negative": np.negative,
}


def fold_in_numpy(mod):
    """``mod`` with calls of :data:`_NUMPY_FOLD` ops whose arguments are all constants replaced
    by their value (a constant of the call's dtype and shape); FoldConstant gives the same module
    (``tests/tvm/test_import_fold.py``)."""
    import tvm
    from tvm import relax
    from ..graph.layers import _is_const, const_value

    @relax.expr_functor.mutator
    class Fold(relax.PyExprMutator):
        def visit_call_(self, orig):
            call = super().visit_call_(orig)
            name = getattr(call.op, "name", None)
            if name not in _NUMPY_FOLD:
                return call
            reshape = _NUMPY_FOLD[name] is None
            args = [self._const(a) for a in call.args[:1 if reshape else None]]
            if any(a is None for a in args):
                return call
            sinfo = getattr(orig, "ty", None) or orig.struct_info
            shape = getattr(sinfo, "shape", None)
            try:
                shape = tuple(int(v) for v in shape)
            except (TypeError, ValueError):
                return call
            if reshape:
                out = args[0].reshape(shape)
            else:
                with np.errstate(all="ignore"):
                    out = np.asarray(_NUMPY_FOLD[name](*args))
                if str(out.dtype) != str(sinfo.dtype) or out.shape != shape:
                    return call       # numpy promoted or broadcast otherwise than Relax: leave it
            # np.array, not ascontiguousarray: that makes a 0-d value 1-d
            return relax.const(np.array(out, order="C"), str(sinfo.dtype))

        def _const(self, e):
            if isinstance(e, relax.Var):
                e = self.lookup_binding(e)
            return const_value(e) if e is not None and _is_const(e) else None

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function):
            out[gv] = Fold().visit_expr(f)
    return out


def _without_upsample(model):
    """TVM 0.27's Upsample converter reads opset 7's ``scales`` attribute even at opset 9 (where
    the scales are an input) and rounds nearest neighbours where ONNX floors; onnx's version
    converter turns Upsample into the equivalent Resize, which TVM converts correctly. Models
    without Upsample are imported as given."""
    import onnx
    if not any(n.op_type == "Upsample" for n in model.graph.node):
        return model
    try:
        return onnx.version_converter.convert_version(model, 13)
    except Exception as e:  # noqa: BLE001 - the converter raises its own types
        raise UnsupportedModel(f"Upsample could not be converted to Resize for TVM's importer: "
                               f"{' '.join(str(e).split())[:200]}; export the model at opset 11 or later") from e
