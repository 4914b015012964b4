"""How other exporters write the same network: rewrites of a zoo model's ONNX graph.

PyTorch's dynamo exporter writes ``adaptive_avg_pool2d(x, 1)`` (the global pooling of every
squeeze-and-excitation block and of the head) as ``ReduceMean`` over the last two axes with
``keepdims=1`` where the TorchScript exporter wrote ``GlobalAveragePool``: :func:`dynamo_pooling`
rewrites a model that way, so the two spellings can be compared on one network.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper


def dynamo_pooling(m: onnx.ModelProto, axes=(-1, -2)) -> onnx.ModelProto:
    """A copy of ``m`` with every ``GlobalAveragePool`` written as ``ReduceMean(axes, keepdims=1)``
    (opset 17 and below: axes as an attribute; 18 and above: as an int64 initializer)."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 17)
    g = out.graph
    nodes = []
    for k, n in enumerate(g.node):
        if n.op_type != "GlobalAveragePool":
            nodes.append(n)
            continue
        name = n.name or f"gap{k}"
        if opset >= 18:
            axes_name = f"{name}.axes"
            g.initializer.append(onnx.numpy_helper.from_array(np.array(list(axes), "int64"), axes_name))
            nodes.append(helper.make_node("ReduceMean", [n.input[0], axes_name], list(n.output),
                                          name=name, keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [n.input[0]], list(n.output), name=name,
                                          axes=list(axes), keepdims=1))
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(out)
    return out
