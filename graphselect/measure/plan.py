"""What to measure for a LayerGraph, and the Problem the measurements make.

Conv layers get one job per candidate, layout-agnostic ops one per layout, fixed ops one (so the
predicted end-to-end time covers the whole network), and every edge whose two ends may disagree
one job per (from, to) layout pair: the ``layout_transform`` the rewrite would insert there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodels.problem import Choice, Edge, Node, Problem

from .. import candidates as cand_mod
from ..graph import layouts
from ..graph.layers import Layer, LayerGraph, _is_const, _shape
from .local import Check, Job
from .store import Measurement


@dataclass(frozen=True)
class Plan:
    jobs: tuple[Job, ...]
    options: dict            # layer name -> list of (choice name, workload, candidate key, Candidate|layout)
    transforms: dict         # (src, dst, port) -> {(a, b): (workload, candidate key)}


def _lower_snippet(build_body, target, base_module, params):
    """Relax function (params -> body) lowered exactly as the full build lowers; its PrimFuncs."""
    import tvm
    from tvm import relax as rx, tirx
    from ..rewrite.build import lower
    base = tvm.IRModule({gv: f for gv, f in base_module.functions_items() if isinstance(f, tirx.PrimFunc)}) \
        if base_module is not None else tvm.IRModule({})
    bb = rx.BlockBuilder(base)
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build_body(bb))
        bb.emit_func_output(out)
    mod = lower(bb.get(), target)
    called = []
    for b in mod["main"].body.blocks:
        for bind in b.bindings:
            v = bind.value
            if isinstance(v, rx.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                called.append(mod[v.args[0]])
    return [f for f in called if isinstance(f, tirx.PrimFunc)]


def _op_workload(layer: Layer, expr, in_shapes) -> str:
    attrs = getattr(expr, "attrs", None)
    a = " ".join(str(attrs).split()) if attrs is not None else ""
    tail = ""
    from ..graph.layers import clamp_of
    from tvm import relax as rx
    cl = clamp_of(expr, rx) if isinstance(expr, rx.Call) else None
    if cl is not None:
        tail = f" clamp={cl}"
    return f"{layer.op} in={in_shapes} out={layer.out_shape} {a}{tail}"


def make_plan(lg: LayerGraph, target, families=None) -> Plan:
    from tvm import relax as rx
    func = lg.func
    bindings = list(func.body.blocks[0].bindings)
    var_of = {"input": func.params[0]}
    for l in lg.layers.values():
        if l.binding >= 0:
            var_of[l.name] = bindings[l.binding].var
    module = lg.extra.get("module")

    jobs: list[Job] = []
    options: dict = {}
    refs: dict = {}
    for layer in lg.layers.values():
        if layer.kind == "conv":
            opts = []
            spec = layer.conv
            for c in cand_mod.propose(spec, families, layer.weight):
                fam = cand_mod.family(c)
                jobs.append(Job(spec.key, c.key,
                                (lambda fam=fam, c=c, s=spec: [fam.build(c, s, target, "main")]),
                                check=(lambda c=c, layer=layer: _conv_check(c, layer, refs))))
                opts.append((c.key, spec.key, c.key, c))
                if not c.fuses(spec):
                    jobs.append(_epilogue_job(layer, c.out_layout, target))
            if not opts:
                from ..errors import GraphSelectError
                raise GraphSelectError(
                    f"conv layer {layer.name} ({spec.describe()}{', ' + layer.onnx_name if layer.onnx_name else ''}) "
                    f"has no candidate in the families {', '.join(families or cand_mod.FAMILIES)}; "
                    f"include 'direct' (it applies to every conv)")
            options[layer.name] = opts
        elif layer.kind in ("agnostic", "fixed"):
            expr = bindings[layer.binding].value
            in_shapes = [lg.layers[s].out_shape for s in layer.inputs]
            wl = _op_workload(layer, expr, in_shapes)
            opts = []
            for lay in layer.layouts:
                def body(bb, params=None, layer=layer, expr=expr, lay=lay):
                    from ..rewrite.emit import emit_agnostic
                    env = dict(zip([var_of[s] for s in layer.inputs], params))
                    return emit_agnostic(bb, layer, expr, lay, env)
                if not isinstance(expr, rx.Call) or any(s is None for s in in_shapes):
                    opts.append((lay, wl, f"layout={lay}", lay))     # no kernel: tuple plumbing
                    continue

                def build(layer=layer, lay=lay, body=body, in_shapes=in_shapes):
                    ps = [rx.Var(f"in{i}", rx.TensorType(layouts.shape_in(s, lay) if len(s) == 4 else s, "float32"))
                          for i, s in enumerate(in_shapes)]
                    return _lower_snippet(lambda bb: body(bb, ps), target, module, ps)
                jobs.append(Job(wl, f"layout={lay}", build))
                opts.append((lay, wl, f"layout={lay}", lay))
            options[layer.name] = opts
    # layout transforms on edges
    transforms: dict = {}
    for src, dst, port in lg.edges():
        shape = lg.layers[src].out_shape
        outs = {_out_layout(o) for o in options.get(src, [])} or {layouts.NCHW}
        ins = {_in_layout(o, port, lg.layers[dst]) for o in options.get(dst, [])} or {layouts.NCHW}
        pairs = {}
        for a in outs:
            for b in ins:
                if a != b and shape is not None and len(shape) == 4:
                    wl = f"layout_transform {tuple(shape)}"
                    key = f"{a}->{b}"

                    def build(a=a, b=b, shape=shape):
                        from ..rewrite.emit import transform
                        p = rx.Var("x", rx.TensorType(layouts.shape_in(shape, a), "float32"))
                        return _lower_snippet(lambda bb: transform(bb, p, a, b), target, None, [p])
                    jobs.append(Job(wl, key, build))
                    pairs[(a, b)] = (wl, key)
        transforms[(src, dst, port)] = pairs
    return Plan(tuple(jobs), options, transforms)


def _conv_check(cand, layer: Layer, refs: dict) -> Check:
    """The layer's own weights on a fixed random input, against the float64 direct convolution
    (without the epilogue for a candidate that leaves it to separate ops)."""
    from ..candidates.base import TOLERANCE, reference
    spec = layer.conv
    fused = cand.fuses(spec)
    key = (layer.name, fused)       # per layer: layers with one workload have different weights
    if key not in refs:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(spec.in_shape).astype("float32")
        r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual and fused else None
        y = reference(spec, x, layer.weight, layer.bias, r) if fused else reference(spec.bare(), x, layer.weight,
                                                                                   None, None)
        refs[key] = (x, r, y)
    x, r, y = refs[key]
    fam = cand_mod.family(cand)
    inputs = [layouts.pack(x, cand.in_layout)] + fam.pack(cand, spec, layer.weight, layer.bias) + \
        ([layouts.pack(r, cand.out_layout)] if r is not None else [])
    return Check(inputs, layouts.pack(y.astype("float32"), cand.out_layout), getattr(fam, "TOLERANCE", TOLERANCE))


def _epilogue_workload(spec, layout: str) -> tuple[str, str]:
    return f"epilogue {spec.key}", f"layout={layout}"


def _epilogue_job(layer: Layer, layout: str, target) -> Job:
    """The epilogue a candidate cannot fuse, as the separate ops the rewrite emits."""
    from tvm import relax as rx
    spec = layer.conv

    def build():
        from ..rewrite.emit import emit_epilogue
        ty = rx.TensorType(layouts.shape_in(spec.out_shape, layout), "float32")
        y = rx.Var("y", ty)
        ps = [y] + ([rx.Var("res", ty)] if spec.residual else [])
        return _lower_snippet(lambda bb: emit_epilogue(bb, y, spec, layer.bias, ps[1] if spec.residual else None,
                                                       layout), target, None, ps)
    return Job(*_epilogue_workload(spec, layout), build)


def _out_layout(opt) -> str:
    obj = opt[3]
    return obj.out_layout if isinstance(obj, cand_mod.Candidate) else obj


def _in_layout(opt, port: int, layer: Layer) -> str:
    obj = opt[3]
    if isinstance(obj, cand_mod.Candidate):
        return obj.in_layout if port == 0 else obj.out_layout      # port 1: the residual
    return obj


def make_problem(lg: LayerGraph, plan: Plan, meas: dict[tuple[str, str], Measurement],
                 cache_bytes: int | None = None, partial: tuple[tuple[int, float], ...] = ()) -> Problem:
    """Node costs are the cold-weight timings (their sum predicted ResNet-18 end to end within 1%
    on this machine, where the warm sum missed by 14%: 46 MB of weights do not stay in a 32 MB
    L3) and the warm ones; with ``cache_bytes`` the solver decides which apply: warm when the
    chosen weights and workspaces plus the live activations fit the budget, and a share of the
    difference in each ``partial`` step beyond it (``costmodels.hardware.residency``)."""
    index = {name: i for i, name in enumerate(lg.layers)}
    nodes = []
    for name, layer in lg.layers.items():
        if layer.kind == "input":
            nodes.append(Node(name, (Choice("input", 0.0, (), layouts.NCHW),)))
            continue
        if layer.kind == "output":
            nodes.append(Node(name, (Choice("output", 0.0, (layouts.NCHW,), None),)))
            continue
        choices = []
        nports = len(layer.inputs)
        for cname, wl, ckey, obj in plan.options[name]:
            m = meas.get((wl, ckey))
            cold = m.cold_ms if m is not None else 0.0
            warm = m.warm_ms if m is not None else 0.0
            if isinstance(obj, cand_mod.Candidate):
                ins = (obj.in_layout,) + ((obj.out_layout,) if layer.conv.residual else ())
                if not obj.fuses(layer.conv):      # the epilogue runs as its own kernel
                    e = meas.get(_epilogue_workload(layer.conv, obj.out_layout))
                    cold += e.cold_ms if e is not None else math.inf
                    warm += e.warm_ms if e is not None else math.inf
                choices.append(Choice(cname, cold, ins, obj.out_layout, warm_cost=warm,
                                      weight_bytes=obj.weight_bytes, workspace_bytes=obj.workspace_bytes))
            else:
                choices.append(Choice(cname, cold, (obj,) * nports, obj, warm_cost=warm,
                                      weight_bytes=const_bytes(lg, layer)))
        nodes.append(Node(name, tuple(choices)))
    edges = []
    for (src, dst, port), pairs in plan.transforms.items():
        tr = {}
        for ab, key in pairs.items():
            m = meas.get(key)
            tr[ab] = m.cold_ms if m is not None and m.ok else math.inf
        edges.append(Edge(index[src], index[dst], port, tr))
    return Problem(tuple(nodes), tuple(edges), cache_bytes=cache_bytes, activation_bytes=activation_bytes(lg),
                   partial=tuple(partial) if cache_bytes is not None else ())


def const_bytes(lg: LayerGraph, layer: Layer) -> int:
    """Bytes of the constants a non-conv layer reads on every run (a classifier's Gemm weights:
    VGG-11's are 470 MB), which compete for the cache like conv weights do."""
    if layer.binding < 0 or lg.func is None:
        return 0
    from tvm import relax as rx
    total, stack = 0, [lg.func.body.blocks[0].bindings[layer.binding].value]
    while stack:
        e = stack.pop()
        if _is_const(e):
            total += int(np.prod(_shape(e) or (1,))) * 4
        elif isinstance(e, rx.Call):
            stack.extend(e.args)
        elif isinstance(e, rx.Tuple):
            stack.extend(e.fields)
    return total


def activation_bytes(lg: LayerGraph) -> int:
    """Live activations while the network runs: the largest input-plus-output of any layer
    (float32), the working set between two layers' weights."""
    best = 0
    for layer in lg.layers.values():
        shapes = [lg.layers[s].out_shape for s in layer.inputs] + [layer.out_shape]
        best = max(best, sum(4 * int(np.prod(sh)) for sh in shapes if sh))
    return best


def selection_from(lg: LayerGraph, plan: Plan, choice: tuple[int, ...]) -> dict:
    """Assignment indices -> the selection ``rewrite.apply`` takes."""
    sel = {}
    for i, (name, layer) in enumerate(lg.layers.items()):
        if name in plan.options:
            sel[name] = plan.options[name][choice[i]][3]
    return sel
