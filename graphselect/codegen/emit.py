"""Emit one layer into a Relax BlockBuilder in a chosen layout. Used both by the whole-graph
rewrite and by measurement, so what is timed is exactly what is built."""
from __future__ import annotations

import numpy as np

from ..graph import layouts
from ..graph.layers import FAKE_QUANT, SPATIAL_REDUCTIONS, Layer, _is_const, _op_name, clamp_of, const_value


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


DENSE_MAX_ROWS = 16       # a matmul by a constant with at most this many rows runs as a GEMV


def dense_kernel(M: int, K: int, N: int, cw: int):
    """y[m, n] = sum_k x[m, k] * w[k, n] with ``w`` packed as [N / cw, K, cw]: each parallel task
    streams one contiguous chunk of the weights (cw columns) with cw-lane accumulators. Unpacked
    [K, N] weights are read as short runs from K rows apart: a 1280x1000 classifier in a network
    (weights cold) streamed at ~34 GB/s, a 25088x4096 one at 38-41 against 73 packed."""
    from tvm.script import tirx as T

    @T.prim_func
    def dense(x: T.Buffer((M, K), "float32"), w: T.Buffer((N // cw, K, cw), "float32"),
              y: T.Buffer((M, N), "float32")):
        T.func_attr({"tirx.noalias": True})
        for c in T.parallel(N // cw):
            for m in range(M):
                acc = T.alloc_buffer((cw,), "float32", scope="local")
                for l in T.vectorized(cw):
                    acc[l] = T.float32(0)
                for k in range(K):
                    for l in T.vectorized(cw):
                        acc[l] = acc[l] + x[m, k] * w[c, k, l]
                for l in T.vectorized(cw):
                    y[m, c * cw + l] = acc[l]
    return dense.with_attr("tir.is_scheduled", True)


def emit_dense(bb, expr, env):
    """A matmul of a few rows by a constant [K, N] matrix as a call_tir to :func:`dense_kernel`
    with the weights packed; None for any other expression (or a width that does not split)."""
    rx = _rx()
    if _op_name(expr) != "relax.matmul" or len(expr.args) != 2 or not _is_const(expr.args[1]):
        return None
    a = expr.args[0]
    x = env.get(a, a) if isinstance(a, rx.Var) else None
    ty = getattr(x, "ty", None)
    if type(ty).__name__ != "TensorType" or getattr(ty, "shape", None) is None or str(ty.dtype) != "float32":
        return None
    shape = [int(d) for d in ty.shape]
    w = const_value(expr.args[1])
    if w.ndim != 2 or w.dtype != np.float32 or len(shape) != 2 or shape[1] != w.shape[0] \
            or shape[0] > DENSE_MAX_ROWS:
        return None
    from .schedule import chunk_width
    (M, K), N = shape, int(w.shape[1])
    cw = chunk_width(N)
    if cw is None:
        return None
    gv = bb.add_func(dense_kernel(M, K, N, cw), "dense_gemv")
    packed = np.ascontiguousarray(w.reshape(K, N // cw, cw).transpose(1, 0, 2))
    return bb.emit(rx.call_tir(gv, [x, rx.const(packed)], rx.TensorType((M, N), "float32")))


def emit_agnostic(bb, layer: Layer, expr, layout: str, env):
    """Emit the layout-agnostic op ``expr`` with its inputs (through ``env``) already in ``layout``
    (a fixed op: in NCHW; a matmul by a constant as a packed GEMV, :func:`emit_dense`)."""
    rx = _rx()
    if layer.op == FAKE_QUANT:           # a QDQ pair by scalars: the same in any layout
        return emit_fake_quant(bb, next(iter(env.values())), layer.quant)
    if layout == layouts.NCHW:
        dense = emit_dense(bb, expr, env)
        return dense if dense is not None else bb.emit(subst(expr, env))
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
    if name in SPATIAL_REDUCTIONS:          # axes as imported may count from the end (-2, -1)
        op = {"relax.mean": rx.op.mean, "relax.sum": rx.op.sum, "relax.max": rx.op.max,
              "relax.min": rx.op.min}[name]
        return bb.emit(op(env[expr.args[0]], axis=[2, 3], keepdims=True))
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


def emit_fake_quant(bb, x, q):
    """``relax.quantize`` then ``relax.dequantize`` of ``x`` by the scalars of ``q`` (``layers.Quant``)."""
    rx = _rx()
    s, z = rx.const(np.float32(q.scale)), rx.const(np.array(q.zero_point, q.dtype))
    v = bb.emit(rx.op.quantize(x, s, z, axis=-1, out_dtype=q.dtype))
    return bb.emit(rx.op.dequantize(v, s, z, axis=-1, out_dtype="float32"))


def _made(memo, key, make):
    """``make()``, kept in ``memo`` (a dict, or None: not kept) under ``key``."""
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]


def emit_conv(bb, layer: Layer, cand, prim_name: str, target, data, residual, memo=None):
    """call_tir to the candidate's scheduled PrimFunc, weights pre-packed as constants; an
    epilogue the candidate cannot fuse follows as ordinary Relax ops (fused among themselves,
    never into the opaque kernel). ``memo`` (a dict) keeps the PrimFunc and constants of each
    (layer, candidate, target, name) for the next network of the same graph."""
    rx = _rx()
    from .. import candidates
    fam = candidates.family(cand)
    spec = layer.conv
    fused = cand.fuses(spec)
    func, consts = _made(memo, (layer.name, cand, str(target), prim_name), lambda: (
        fam.build(cand, spec, target, prim_name),
        [rx.const(a) for a in fam.pack(cand, spec, layer.weight, layer.bias)]))
    gv = bb.add_func(func, prim_name)
    args = [data] + consts + ([residual] if residual is not None and fused else [])
    out_ty = rx.TensorType(layouts.shape_in(spec.out_shape, cand.out_layout), "float32")
    y = bb.emit(rx.call_tir(gv, args, out_ty))
    if fused:
        return y
    return emit_epilogue(bb, y, spec, layer.bias, residual, cand.out_layout)


def emit_block(bb, first: Layer, last: Layer, cand, prim_name: str, target, data, residual, memo=None):
    """call_tir to a ``dwpw`` block computing ``first`` (the depthwise conv) and ``last`` (the 1x1
    conv reading it) in one kernel, both epilogues inside, the weights of both pre-packed
    (``memo``: as in :func:`emit_conv`)."""
    rx = _rx()
    from ..candidates import dwpw
    dw, pw = first.conv, last.conv
    func, consts = _made(memo, (first.name, last.name, cand, str(target), prim_name), lambda: (
        dwpw.build_chain(cand, dw, pw, target, prim_name),
        [rx.const(a) for a in dwpw.pack_chain(cand, dw, pw, first.weight, first.bias, last.weight, last.bias)]))
    gv = bb.add_func(func, prim_name)
    args = [data] + consts + ([residual] if residual is not None else [])
    return bb.emit(rx.call_tir(gv, args, rx.TensorType(layouts.shape_in(pw.out_shape, cand.out_layout), "float32")))


def emit_epilogue(bb, y, spec, bias, residual, layout: str):
    """bias add, residual add, clamp and activation as separate Relax ops on ``y`` (in ``layout``)."""
    rx = _rx()
    if spec.bias:
        b = np.asarray(bias, "float32").reshape(1, -1, 1, 1)
        y = bb.emit(rx.op.add(y, rx.const(layouts.pack(b, layout))))
    if spec.quant_pre is not None:
        y = emit_fake_quant(bb, y, spec.quant_pre)
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
    if spec.quant is not None:
        y = emit_fake_quant(bb, y, spec.quant)
    return y
