"""Magnitude pruning of conv weights: the pruned variants of the zoo models."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def prune(model: onnx.ModelProto, sparsity: float) -> onnx.ModelProto:
    """A copy of ``model`` whose every Conv weight has its ``sparsity`` fraction of smallest-magnitude
    entries set to zero (per layer, as unstructured magnitude pruning leaves a trained network)."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if sparsity == 0.0:
        return m
    weights = {n.input[1] for n in m.graph.node if n.op_type == "Conv"}
    for init in m.graph.initializer:
        if init.name not in weights:
            continue
        w = numpy_helper.to_array(init)
        k = int(round(sparsity * w.size))
        if k == 0:
            continue
        # ties at the threshold are broken by position, so exactly k entries become zero
        order = np.argsort(np.abs(w), axis=None, kind="stable")
        flat = w.reshape(-1).copy()
        flat[order[:k]] = 0
        init.CopyFrom(numpy_helper.from_array(flat.reshape(w.shape).astype(w.dtype), init.name))
    m.graph.name = f"{m.graph.name}_sp{int(round(sparsity * 100))}"
    return m
