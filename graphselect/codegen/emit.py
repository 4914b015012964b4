"""Emit one layer into a Relax BlockBuilder in a chosen layout. Used both by the whole-graph
rewrite and by measurement, so what is timed is exactly what is built."""
from __future__ import annotations

import numpy as np

from ..graph import layouts
from ..graph.layers import Layer, _is_const, _op_name, clamp_of, const_value


def _rx():
    from tvm import relax
    return relax


def transform(bb, var, src: str, dst: str):
    rx = _rx()
    return bb.emit(rx.op.layout_transform(var, index_map=layouts.index_map(src, dst)))


def _pack_channel_const(c, layout: str):
    rx = _rx()
    v = const_value(c)
    if v.size == 1:
        return c
    b = layouts.block_of(layout)
    v = v.reshape(1, -1, 1, 1)
    return rx.const(np.ascontiguousarray(layouts.pack(v, layout)) if b else v)


def subst(e, env):
    """``e`` with every Relax var replaced through ``env`` (var -> new expr)."""
    rx = _rx()
    if isinstance(e, rx.Var):
        return env.get(e, e)
    if isinstance(e, rx.Call):
        return rx.Call(e.op, [subst(a, env) for a in e.args], e.attrs, e.ty_args)
    if isinstance(e, rx.Tuple):
        return rx.Tuple([subst(a, env) for a in e.fields])
    if isinstance(e, rx.TupleGetItem):
        return rx.TupleGetItem(subst(e.tuple_value, env), e.index)
    return e


def emit_agnostic(bb, layer: Layer, expr, layout: str, env):
    """Emit the layout-agnostic op ``expr`` with its inputs (through ``env``) already in ``layout``."""
    rx = _rx()
    if layout == layouts.NCHW:
        return bb.emit(subst(expr, env))
    from tvm import topi
    name = _op_name(expr)
    cl = clamp_of(expr, rx)
    if name == "relax.call_tir" and cl is not None:      # importer's clamp PrimFunc is 4-D only
        x = env[expr.args[1].fields[0]]
        op = rx.op.maximum if cl[0] == "max" else rx.op.minimum
        return bb.emit(op(x, rx.const(np.float32(cl[1]))))
    if name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        a = expr.attrs
        return bb.emit_te(topi.nn.pool2d, env[expr.args[0]], [int(v) for v in a.pool_size],
                          [int(v) for v in a.strides], [int(v) for v in a.dilation],
                          [int(v) for v in a.padding], "max" if "max" in name else "avg",
                          bool(a.ceil_mode), layout, bool(a.count_include_pad),
                          primfunc_name_hint=f"{name.split('.')[-1]}_{layout}")
    args = []
    for a in expr.args:
        if isinstance(a, rx.Var):
            args.append(env[a])
        elif isinstance(a, rx.Tuple):
            args.append(rx.Tuple([env[f] for f in a.fields]))
        elif _is_const(a):
            args.append(_pack_channel_const(a, layout))
        else:
            args.append(a)
    return bb.emit(rx.Call(expr.op, args, expr.attrs, expr.ty_args))


def emit_conv(bb, layer: Layer, cand, prim_name: str, target, data, residual):
    """call_tir to the candidate's scheduled PrimFunc, weights pre-packed as constants; an
    epilogue the candidate cannot fuse follows as ordinary Relax ops (fused among themselves,
    never into the opaque kernel)."""
    rx = _rx()
    from .. import candidates
    fam = candidates.family(cand)
    spec = layer.conv
    fused = cand.fuses(spec)
    func = fam.build(cand, spec, target, prim_name)
    gv = bb.add_func(func, prim_name)
    consts = [rx.const(a) for a in fam.pack(cand, spec, layer.weight, layer.bias)]
    args = [data] + consts + ([residual] if residual is not None and fused else [])
    out_ty = rx.TensorType(layouts.shape_in(spec.out_shape, cand.out_layout), "float32")
    y = bb.emit(rx.call_tir(gv, args, out_ty))
    if fused:
        return y
    return emit_epilogue(bb, y, spec, layer.bias, residual, cand.out_layout)


def emit_epilogue(bb, y, spec, bias, residual, layout: str):
    """bias add, residual add, clamp and activation as separate Relax ops on ``y`` (in ``layout``)."""
    rx = _rx()
    if spec.bias:
        b = np.asarray(bias, "float32").reshape(1, -1, 1, 1)
        y = bb.emit(rx.op.add(y, rx.const(layouts.pack(b, layout))))
    if spec.residual:
        y = bb.emit(rx.op.add(y, residual))
    if spec.clip_lo is not None:
        y = bb.emit(rx.op.maximum(y, rx.const(np.float32(spec.clip_lo))))
    if spec.clip_hi is not None:
        y = bb.emit(rx.op.minimum(y, rx.const(np.float32(spec.clip_hi))))
    if spec.act == "sigmoid":
        y = bb.emit(rx.op.sigmoid(y))
    elif spec.act == "silu":
        y = bb.emit(rx.op.multiply(y, bb.emit(rx.op.sigmoid(y))))
    elif spec.act == "hardswish":
        h = bb.emit(rx.op.clip(bb.emit(rx.op.add(y, rx.const(np.float32(3.0)))), 0.0, 6.0))
        y = bb.emit(rx.op.multiply(y, bb.emit(rx.op.divide(h, rx.const(np.float32(6.0))))))
    elif spec.act is not None:
        raise ValueError(f"unknown activation {spec.act!r}")
    return y
