"""Magnitude pruning of conv weights: the pruned variants of the zoo models."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def prune(model: onnx.ModelProto, sparsity: float, block: int = 1) -> onnx.ModelProto:
    """A copy of ``model`` whose every Conv weight has its ``sparsity`` fraction of smallest-magnitude
    entries set to zero (per layer, as unstructured magnitude pruning leaves a trained network).
    ``block`` > 1: block pruning instead, blocks of ``block`` consecutive output channels at one
    input channel and tap zeroed together, the blocks of least L2 norm first (convs whose output
    channels do not split into such blocks, and grouped convs, are pruned unstructured)."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if sparsity == 0.0:
        return m
    groups = {n.input[1]: next((a.i for a in n.attribute if a.name == "group"), 1)
              for n in m.graph.node if n.op_type == "Conv"}
    weights = set(groups)
    for init in m.graph.initializer:
        if init.name not in weights:
            continue
        w = numpy_helper.to_array(init)
        if block > 1 and w.shape[0] % block == 0 and groups[init.name] == 1:
            init.CopyFrom(numpy_helper.from_array(prune_blocks(w, sparsity, block), init.name))
            continue
        k = int(round(sparsity * w.size))
        if k == 0:
            continue
        # ties at the threshold are broken by position, so exactly k entries become zero
        order = np.argsort(np.abs(w), axis=None, kind="stable")
        flat = w.reshape(-1).copy()
        flat[order[:k]] = 0
        init.CopyFrom(numpy_helper.from_array(flat.reshape(w.shape).astype(w.dtype), init.name))
    m.graph.name = f"{m.graph.name}_sp{int(round(sparsity * 100))}" + (f"b{block}" if block > 1 else "")
    return m


def prune_blocks(w: np.ndarray, sparsity: float, block: int) -> np.ndarray:
    """``w`` (output channels first, a multiple of ``block`` of them) with the ``sparsity``
    fraction of its blocks zeroed: a block is ``block`` consecutive output channels at one input
    channel and tap, the blocks of least L2 norm first (ties broken by position)."""
    blocks = w.reshape(w.shape[0] // block, block, -1)
    norm = np.sqrt((blocks.astype(np.float64) ** 2).sum(axis=1)).reshape(-1)
    keep = np.ones(norm.size, bool)
    keep[np.argsort(norm, kind="stable")[:int(round(sparsity * norm.size))]] = False
    return (blocks * keep.reshape(blocks.shape[0], 1, -1)).reshape(w.shape).astype(w.dtype)
