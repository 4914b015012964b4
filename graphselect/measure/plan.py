"""What to measure for a LayerGraph, and the tables of options costmodels prices
(``costmodels.table.build_problem``).

Conv layers get one job per candidate, layout-agnostic ops one per layout, fixed ops one (so the
predicted end-to-end time covers the whole network), and every edge whose two ends may disagree
one job per (from, to) layout pair: the ``layout_transform`` the rewrite would insert there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.table import EdgeTable, LayerTable, Option, option_keys

from .. import candidates as cand_mod
from ..candidates import dwpw
from .. import codegen
from ..graph import layouts
from ..graph.layers import Layer, LayerGraph, _is_const, _shape, input_layer
from ..target import isa_of
from . import protocol_version
from .jobs import Check, Job


@dataclass(frozen=True)
class Plan:
    """What to measure for a LayerGraph, and what each option of each layer is.

    ``layers``/``edges`` are costmodels' view (options with the records they cost, layout
    transforms per edge); ``impls[layer][k]`` is what option ``k`` runs (a Candidate, or the
    layout a non-conv layer runs in), for the rewrite."""
    jobs: tuple[Job, ...]
    layers: tuple[LayerTable, ...]            # one per LayerGraph layer, in its order
    edges: tuple[EdgeTable, ...]
    impls: dict                               # layer name -> tuple of Candidate | layout, per option
    activation_bytes: int = 0

    def table(self, name: str) -> LayerTable:
        return self.layers[self.index[name]]

    @property
    def index(self) -> dict[str, int]:
        return {lt.name: i for i, lt in enumerate(self.layers)}

    def keys(self) -> set[tuple[str, str]]:
        return option_keys(self.layers, self.edges)


def _lower_snippet(build_body, target, base_module, params):
    """Relax function (params -> body) lowered exactly as the full build lowers; its PrimFuncs."""
    import tvm
    from tvm import relax as rx, tirx
    from ..codegen.lower import lower
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
    if layer.quant is not None:
        tail += f" q={layer.quant.key}"
    return f"{layer.op} in={in_shapes} out={layer.out_shape} {a}{tail}"


def make_plan(lg: LayerGraph, target, families=None, precisions=("fp32",)) -> Plan:
    from tvm import relax as rx
    func = lg.func
    bindings = list(func.body.blocks[0].bindings)
    var_of = {input_layer(k): v for k, v in enumerate(func.params)}
    for l in lg.layers.values():
        if l.binding >= 0:
            var_of[l.name] = bindings[l.binding].var
    module = lg.extra.get("module")
    proto = protocol_version()         # what shapes every kernel and its timing (measure.protocol_version)
    ops_version = f"{codegen.code_version()}.{proto}"
    isa = isa_of(target)               # the candidate grids follow the target's vector unit

    jobs: list[Job] = []
    tables: list[LayerTable] = []
    impls: dict = {}
    refs: dict = {}
    for layer in lg.layers.values():
        if layer.kind == "input":
            tables.append(LayerTable(layer.name, layer.kind, (Option("input", (), layouts.NCHW),)))
            continue
        if layer.kind == "output":
            tables.append(LayerTable(layer.name, layer.kind,
                                     (Option("output", (layouts.NCHW,) * len(layer.inputs), None),)))
            continue
        opts, objs = [], []
        if layer.kind == "conv":
            spec = layer.conv
            for c in cand_mod.propose(spec, families, layer.weight, isa, precisions):
                fam = cand_mod.family(c)
                jobs.append(Job(spec.key, c.key,
                                (lambda fam=fam, c=c, s=spec: [fam.build(c, s, target, "main")]),
                                check=(lambda c=c, layer=layer: _conv_check(c, layer, refs)),
                                version=f"{cand_mod.code_version(c.family)}.{proto}"))
                extra = ()
                if not c.fuses(spec):                  # the epilogue runs as its own kernel
                    ep = _epilogue_job(layer, c.out_layout, target, ops_version)
                    jobs.append(ep)
                    extra = ((ep.workload, ep.candidate),)
                ins = (c.in_layout,) + ((c.out_layout,) if spec.residual else ())
                opts.append(Option(c.key, ins, c.out_layout, (spec.key, c.key), extra, c.family,
                                   c.weight_bytes, c.workspace_bytes, cand_mod.precision_of(c.family)))
                objs.append(c)
            if not opts:
                from ..errors import GraphSelectError
                raise GraphSelectError(
                    f"conv layer {layer.name} ({spec.describe()}{', ' + layer.onnx_name if layer.onnx_name else ''}) "
                    f"has no candidate in the families {', '.join(families or cand_mod.FAMILIES)}; "
                    + ("include 'depthwise'" if spec.depthwise and not spec.dilated
                       else "include 'direct' (it applies to every other conv)"))
        else:
            expr = bindings[layer.binding].value
            in_shapes = [lg.layers[s].out_shape for s in layer.inputs]
            wl = _op_workload(layer, expr, in_shapes)
            nports = len(layer.inputs)
            wbytes = const_bytes(lg, layer)
            if isinstance(expr, rx.Call):
                for s, shp in zip(layer.inputs, in_shapes):
                    ty = getattr(var_of.get(s), "ty", None)
                    if shp is None and type(ty).__name__ == "TensorType":
                        from ..errors import UnsupportedModel
                        raise UnsupportedModel(
                            f"layer {layer.name} ({layer.op}) reads {s}, whose shape is not static after import "
                            f"({ty}): it could not be measured, and costing it as free would be wrong; fix the "
                            f"input shapes (--input-shape) or fold the shape computation into constants")
            for lay in layer.layouts:
                def body(bb, params=None, layer=layer, expr=expr, lay=lay):
                    from ..codegen.emit import emit_agnostic
                    env = dict(zip([var_of[s] for s in layer.inputs], params))
                    return emit_agnostic(bb, layer, expr, lay, env)
                kernel = None
                if isinstance(expr, rx.Call) and all(s is not None for s in in_shapes):
                    def build(layer=layer, lay=lay, body=body, in_shapes=in_shapes):
                        ps = [rx.Var(f"in{i}", rx.TensorType(layouts.shape_in(s, lay) if len(s) == 4 else s, "float32"))
                              for i, s in enumerate(in_shapes)]
                        return _lower_snippet(lambda bb: body(bb, ps), target, module, ps)
                    jobs.append(Job(wl, f"layout={lay}", build, version=ops_version))
                    kernel = (wl, f"layout={lay}")
                # else no kernel: tuple plumbing (TupleGetItem, a tuple of tensors), no compute
                opts.append(Option(lay, (lay,) * nports, lay, kernel, weight_bytes=wbytes))
                objs.append(lay)
        tables.append(LayerTable(layer.name, layer.kind, tuple(opts)))
        impls[layer.name] = tuple(objs)
    index = {lt.name: i for i, lt in enumerate(tables)}
    if families is None or dwpw.FAMILY in families:
        jobs += _add_blocks(lg, tables, index, impls, target, isa, refs, proto)
    # layout transforms on edges (none to or from a block's token: only its members use it)
    edges = []
    for src, dst, port in lg.edges():
        shape = lg.layers[src].out_shape
        outs = {o.out_layout for o in tables[index[src]].options} or {layouts.NCHW}
        ins = {o.in_layouts[port] for o in tables[index[dst]].options} or {layouts.NCHW}
        pairs = {}
        for a in sorted(outs):
            for b in sorted(ins):
                if a != b and shape is not None and len(shape) == 4 and not _token(a) and not _token(b):
                    wl = f"layout_transform {tuple(shape)}"
                    key = f"{a}->{b}"

                    def build(a=a, b=b, shape=shape):
                        from ..codegen.emit import transform
                        p = rx.Var("x", rx.TensorType(layouts.shape_in(shape, a), "float32"))
                        return _lower_snippet(lambda bb: transform(bb, p, a, b), target, None, [p])
                    jobs.append(Job(wl, key, build, version=ops_version))
                    pairs[(a, b)] = (wl, key)
        edges.append(EdgeTable(index[src], index[dst], port, pairs))
    return Plan(tuple(jobs), tuple(tables), tuple(edges), impls, activation_bytes(lg))


def _token(layout) -> bool:
    return isinstance(layout, str) and layout.startswith(dwpw.TOKEN)


def chains(lg: LayerGraph) -> list[tuple[Layer, Layer]]:
    """(depthwise conv, 1x1 conv) pairs a ``dwpw`` block can compute: the 1x1 conv reads the
    depthwise conv's output on its data port and nothing else reads it."""
    readers: dict[str, list] = {}
    for src, dst, port in lg.edges():
        readers.setdefault(src, []).append((dst, port))
    out = []
    for l in lg.layers.values():
        if l.kind != "conv" or l.name == lg.output:
            continue
        rs = readers.get(l.name, [])
        if len(rs) != 1 or rs[0][1] != 0:
            continue
        nxt = lg.layers[rs[0][0]]
        if nxt.kind == "conv" and dwpw.applies(l.conv, nxt.conv):
            out.append((l, nxt))
    return out


def _add_blocks(lg: LayerGraph, tables: list, index: dict, impls: dict, target, isa, refs: dict, proto: str) -> list[Job]:
    """Every ``dwpw`` block of ``lg``: one job per block candidate, and one more option on each
    member layer, tied by the block's token (``costmodels.blocks``: chosen on both or neither).
    ``tables``/``impls`` are extended in place; the jobs are returned."""
    import dataclasses
    jobs = []
    version = f"{cand_mod.code_version(dwpw.FAMILY)}.{proto}"
    for dl, pl in chains(lg):
        for c in dwpw.propose_chain(dl.conv, pl.conv, (dl.name, pl.name), isa):
            jobs.append(Job(c.workload, c.key,
                            (lambda c=c, dl=dl, pl=pl: [dwpw.build_chain(c, dl.conv, pl.conv, target, "main")]),
                            check=(lambda c=c, dl=dl, pl=pl: _block_check(c, dl, pl, refs)), version=version))
            inner, last = dwpw.parts(c)
            di, pi = index[dl.name], index[pl.name]
            tables[di] = dataclasses.replace(tables[di], options=tables[di].options + (
                Option(c.key, (c.in_layout,), inner.out_layout),))
            ins = (inner.out_layout,) + ((c.out_layout,) if pl.conv.residual else ())
            tables[pi] = dataclasses.replace(tables[pi], options=tables[pi].options + (
                Option(c.key, ins, c.out_layout, (c.workload, c.key), (), dwpw.FAMILY, c.weight_bytes,
                       c.workspace_bytes),))
            impls[dl.name] = impls[dl.name] + (inner,)
            impls[pl.name] = impls[pl.name] + (last,)
    return jobs


def _block_check(cand, dl: Layer, pl: Layer, refs: dict) -> Check:
    """The block on its layers' own weights and a fixed random input, against the float64 chain."""
    from ..candidates.base import TOLERANCE
    dw, pw = dl.conv, pl.conv
    key = (dl.name, pl.name, "block")
    if key not in refs:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(dw.in_shape).astype("float32")
        r = rng.standard_normal(pw.out_shape).astype("float32") if pw.residual else None
        refs[key] = (x, r, dwpw.reference(dw, pw, x, dl.weight, dl.bias, pl.weight, pl.bias, r))
    x, r, y = refs[key]
    inputs = [layouts.pack(x, cand.in_layout)] + dwpw.pack_chain(cand, dw, pw, dl.weight, dl.bias, pl.weight,
                                                                 pl.bias) + \
        ([layouts.pack(r, cand.out_layout)] if r is not None else [])
    return Check(inputs, layouts.pack(y.astype("float32"), cand.out_layout), TOLERANCE)


def _conv_check(cand, layer: Layer, refs: dict) -> Check:
    """The layer's own weights on a fixed random input, against the float64 direct convolution
    (without the epilogue for a candidate that leaves it to separate ops)."""
    from ..candidates.base import TOLERANCE, quant_step, reference
    spec = layer.conv
    fused = cand.fuses(spec)
    key = (layer.name, fused)       # per layer: layers with one workload have different weights
    if key not in refs:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(spec.in_shape).astype("float32")
        if spec.qdq is not None:    # the input a QDQ model feeds it: values on its grid
            q = spec.qdq
            x = ((rng.integers(q.qmin, q.qmax + 1, spec.in_shape) - q.zero_point) * np.float32(q.scale)).astype("float32")
        r = rng.standard_normal(spec.out_shape).astype("float32") if spec.residual and fused else None
        y = reference(spec, x, layer.weight, layer.bias, r) if fused else reference(spec.bare(), x, layer.weight,
                                                                                   None, None)
        refs[key] = (x, r, y)
    x, r, y = refs[key]
    fam = cand_mod.family(cand)
    inputs = [layouts.pack(x, cand.in_layout)] + fam.pack(cand, spec, layer.weight, layer.bias) + \
        ([layouts.pack(r, cand.out_layout)] if r is not None else [])
    return Check(inputs, layouts.pack(y.astype("float32"), cand.out_layout), getattr(fam, "TOLERANCE", TOLERANCE),
                 quant_step(spec) if fused else 0.0)


def _epilogue_workload(spec, layout: str) -> tuple[str, str]:
    return f"epilogue {spec.key}", f"layout={layout}"


def _epilogue_job(layer: Layer, layout: str, target, version: str) -> Job:
    """The epilogue a candidate cannot fuse, as the separate ops the rewrite emits."""
    from tvm import relax as rx
    spec = layer.conv

    def build():
        from ..codegen.emit import emit_epilogue
        ty = rx.TensorType(layouts.shape_in(spec.out_shape, layout), "float32")
        y = rx.Var("y", ty)
        ps = [y] + ([rx.Var("res", ty)] if spec.residual else [])
        return _lower_snippet(lambda bb: emit_epilogue(bb, y, spec, layer.bias, ps[1] if spec.residual else None,
                                                       layout), target, None, ps)
    return Job(*_epilogue_workload(spec, layout), build, version=version)


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
    for i, name in enumerate(lg.layers):
        if name in plan.impls:
            sel[name] = plan.impls[name][choice[i]]
    return sel
