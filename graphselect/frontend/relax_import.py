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
    return fold_affine(seq(mod))


# Chains of per-channel arithmetic by constants (a BatchNormalization no conv precedes, as
# DecomposeOpsForInference writes it: subtract the mean, divide by the deviation, multiply by
# gamma, add beta) become one multiply and one add (issue 24: DenseNet-121's 120 such chains
# were 480 layers, each measured in every layout, and 240 kernels in the network).
_AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")
AFFINE_MIN = 3          # a chain this long or longer is folded (two ops cannot get shorter)


def _affine_step(call, rx):
    """(tensor variable, op, constant, constant first) when ``call`` is x op c or c op x by one
    float32 constant and is affine in x (c / x is not); None otherwise."""
    from ..graph.layers import _is_const, _op_name, const_value
    name = _op_name(call)
    if name not in _AFFINE or len(call.args) != 2:
        return None
    a, b = call.args
    if isinstance(a, rx.Var) and _is_const(b):
        x, c, first = a, b, False
    elif isinstance(b, rx.Var) and _is_const(a) and name != "relax.divide":
        x, c, first = b, a, True
    else:
        return None
    v = const_value(c)
    if str(v.dtype) != "float32":
        return None
    return x, name, v.astype(np.float64), first


def _compose(scale, shift, name, c, first):
    """(scale, shift) of ``op(scale*x + shift, c)`` (or ``op(c, ...)`` when ``first``)."""
    if name == "relax.add":
        return scale, shift + c
    if name == "relax.subtract":
        return (-scale, c - shift) if first else (scale, shift - c)
    if name == "relax.multiply":
        return scale * c, shift * c
    return scale / c, shift / c                     # divide, by the constant


def fold_affine(mod):
    """``mod`` with every chain of :data:`AFFINE_MIN` or more per-element ops by constants
    (add, subtract, multiply, divide), each intermediate read by the next alone, replaced by
    ``x * scale + shift`` (two ops, the constants composed in float64, then rounded to float32).
    A chain that reads a conv's output is left alone (its bias add is the conv's epilogue), and so
    is one whose composed constants would broadcast ``x`` to another shape."""
    from tvm import relax as rx
    from ..graph.layers import _op_name, _shape, _vars_in
    func = mod["main"] if "main" in [gv.name_hint for gv in mod.get_global_vars()] else None
    if func is None or not isinstance(func, rx.Function):
        return mod
    bindings = [b for blk in func.body.blocks for b in blk.bindings]
    users: dict = {}
    for b in bindings:
        for v in _vars_in(b.value, rx):
            users[v] = users.get(v, 0) + 1
    for v in _vars_in(func.body.body, rx):
        users[v] = users.get(v, 0) + 2               # an output is never folded away
    value = {b.var: b.value for b in bindings}
    step = {b.var: s for b in bindings if isinstance(b.value, rx.Call) and (s := _affine_step(b.value, rx))}
    stepped = {s[0] for s in step.values()}          # the variables some step reads
    drop, ends = set(), {}
    for v in step:
        if users.get(v, 0) == 1 and v in stepped and isinstance(v, rx.DataflowVar):
            continue                                  # not a chain's end: the next step reads it alone
        chain = [v]
        while (x := step[chain[-1]][0]) in step and users.get(x, 0) == 1 and isinstance(x, rx.DataflowVar):
            chain.append(x)
        chain.reverse()
        base = step[chain[0]][0]
        if len(chain) < AFFINE_MIN or _op_name(value.get(base)) == "relax.nn.conv2d":
            continue
        scale, shift = np.ones((), np.float64), np.zeros((), np.float64)
        for u in chain:
            _, name, c, first = step[u]
            scale, shift = _compose(scale, shift, name, c, first)
        xs, out = _shape(base), _shape(v)
        if xs is None or xs != out or np.broadcast_shapes(xs, scale.shape, shift.shape) != xs:
            continue
        drop.update(chain[:-1])
        ends[v] = (base, scale.astype(np.float32), shift.astype(np.float32))
    if not ends:
        return mod

    @rx.expr_functor.mutator
    class Fold(rx.PyExprMutator):
        def visit_var_binding_(self, binding):
            if binding.var in drop:
                return
            if binding.var in ends:
                base, scale, shift = ends[binding.var]
                x = self.visit_expr(base)
                y = self.builder_.emit(rx.op.multiply(x, rx.const(np.array(scale, order="C"), "float32")))
                z = rx.op.add(y, rx.const(np.array(shift, order="C"), "float32"))
                hint = binding.var.name
                new = self.builder_.emit(z, hint) if isinstance(binding.var, rx.DataflowVar) \
                    else self.builder_.emit_output(z, hint)
                self.set_var_remap(binding.var, new)
                return
            super().visit_var_binding_(binding)

    import tvm
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    out["main"] = Fold().visit_expr(func)
    return out


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
