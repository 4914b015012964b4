"""Apply an assignment to the Relax module: every selected conv becomes a ``call_tir`` to its
scheduled PrimFunc (epilogue fused, weights pre-packed), layout-agnostic ops run in their chosen
layout, and ``layout_transform``s appear only where a producer's layout differs from what a
consumer needs."""
from __future__ import annotations

import logging
import weakref

from ..graph import layouts
from ..graph.layers import LayerGraph, input_layer
from ..candidates import dwpw
from ..codegen.emit import emit_agnostic, emit_block, emit_conv, transform

log = logging.getLogger(__name__)

# layer graph -> {(layer, candidate, target, name): (PrimFunc, packed constants)}: the networks of one
# run share most kernels, and scheduling a kernel and packing its weights took 1.2 of the 1.7 s a
# ResNet-18 rewrite took; kept while the graph lives
_EMITTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def apply(lg: LayerGraph, selection: dict, target):
    """Return the annotated IRModule for ``selection`` (conv layer name -> Candidate,
    agnostic layer name -> layout; other layers run in NCHW). A block's members
    (``dwpw.BlockCandidate``) are one call, emitted where its last member stands."""
    from tvm import relax as rx, tirx
    import tvm

    func = lg.func
    bindings = list(func.body.blocks[0].bindings)
    base = tvm.IRModule({gv: f for gv, f in lg.extra["module"].functions_items()
                         if isinstance(f, tirx.PrimFunc)})
    bb = rx.BlockBuilder(base)
    memo = _EMITTED.setdefault(lg, {})
    by_binding = {l.binding: l for l in lg.layers.values() if l.binding >= 0}
    params = list(func.params)
    var_of = {input_layer(k): v for k, v in enumerate(params)}   # layer name -> original relax var
    for l in lg.layers.values():
        if l.binding >= 0:
            var_of[l.name] = bindings[l.binding].var
    avail: dict[str, dict[str, object]] = {input_layer(k): {layouts.NCHW: v} for k, v in enumerate(params)}
    for name, const in lg.extra.get("constants", {}).items():   # outputs the importer computed ahead
        avail[name] = {layouts.NCHW: const}
    ntransforms = [0]

    def get(src: str, layout: str):
        have = avail[src]
        if layout in have:
            return have[layout]
        from_layout = next(iter(have))
        v = transform(bb, have[from_layout], from_layout, layout)
        ntransforms[0] += 1
        have[layout] = v
        return v

    with bb.function("main", params, attrs={"num_input": len(params)}):
        with bb.dataflow():
            for i, b in enumerate(bindings):
                layer = by_binding.get(i)
                if layer is None:
                    continue          # absorbed into a conv layer's epilogue
                if layer.kind == "conv":
                    cand = selection[layer.name]
                    if dwpw.is_inner(cand):
                        continue      # computed by its block, in the block's last member's call
                    if isinstance(cand, dwpw.BlockCandidate):
                        first = lg.layers[cand.members[0]]
                        data = get(first.inputs[0], cand.in_layout)
                        res = get(layer.inputs[1], cand.out_layout) if layer.conv.residual else None
                        v = emit_block(bb, first, layer, cand, f"{layer.name}_{cand.family}", target, data, res,
                                       memo)
                        avail[layer.name] = {cand.out_layout: v}
                        continue
                    data = get(layer.inputs[0], cand.in_layout)
                    res = get(layer.inputs[1], cand.out_layout) if layer.conv.residual else None
                    v = emit_conv(bb, layer, cand, f"{layer.name}_{cand.family}", target, data, res, memo)
                    avail[layer.name] = {cand.out_layout: v}
                    continue
                layout = selection.get(layer.name, layouts.NCHW) if layer.kind == "agnostic" else layouts.NCHW
                env = {var_of[src]: get(src, layout) for src in layer.inputs}
                v = emit_agnostic(bb, layer, b.value, layout, env)     # fixed ops: in NCHW
                avail[layer.name] = {layout: v}
            outs = [get(src, layouts.NCHW) for src in lg.layers[lg.output].inputs]
            out = bb.emit_output(outs[0] if len(outs) == 1 else rx.Tuple(outs))
        bb.emit_func_output(out)
    mod = bb.get()
    log.debug("rewrite: %d layout transforms inserted", ntransforms[0])
    return mod


def count_transforms(mod) -> int:
    return mod["main"].script().count("R.layout_transform(")
