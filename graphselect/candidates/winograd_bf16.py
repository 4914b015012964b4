"""``winograd_bf16``: ``winograd``'s F(m x m, 3x3) with its batched GEMM in bf16 (AVX512-BF16).

The transforms stay fp32; the transformed input V is rounded to bf16 as it is written, the
transformed weights U = G w G^T are stored as bf16 (packed (alpha, alpha, K/ob, C/2, ob, 2)),
and the GEMM runs as ``vdpbf16ps`` into fp32 accumulators (``lowp``). The same layouts and tiles
as ``winograd``; half its weight bytes. The rounding happens after the input transform, whose
sums grow with m, so the error grows with the tile (F(2x2) about direct bf16's, F(4x4) 5-8x more;
F(6x6) is not proposed): each candidate's own measured error is what ``--precision auto`` budgets.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..graph.layers import ConvSpec
from ..target import AVX512
from . import lowp, winograd
from .base import Candidate

FAMILY = "winograd_bf16"
PRECISION = "bf16"
DEPENDS = (lowp, winograd)
TOLERANCE = 6e-2           # rejects a broken kernel: F(2x2) measures 3-4e-3 on unit-scale data, F(4x4) 2-3e-2
# F(6x6)'s input transform grows the values so much that bf16 V loses 5-11% (measured on 13x13 and
# 10x9 layers, Zen 4): never a candidate
TILES = (2, 4)


def propose(spec: ConvSpec, weight: np.ndarray | None = None, isa=AVX512) -> list[Candidate]:
    if lowp.BF16 not in isa.features:
        return []
    out = []
    for c in winograd.propose(spec, weight, isa):
        if c.param("m") not in TILES or c.param("ic_bn") % 2 or c.param("oc_bn") % 16:
            continue
        welems = (c.weight_bytes - (4 * spec.out_channels if spec.bias else 0)) // 4
        C, K = spec.in_channels, spec.out_channels      # V (C channels) is bf16 between the stages, M fp32
        out.append(dataclasses.replace(c, family=FAMILY, weight_bytes=c.weight_bytes - 2 * welems,
                                       workspace_bytes=c.workspace_bytes - c.workspace_bytes * C // (2 * (C + K)),
                                       weight_layout=c.weight_layout + "bf16"))
    return out


def build(cand: Candidate, spec: ConvSpec, target, name: str = "conv"):
    return winograd.build(cand, spec, target, name, bf16=True)


def pack(cand: Candidate, spec: ConvSpec, weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    U, *rest = winograd.pack(cand, spec, weight, bias)
    a, _, KB, C, ob = U.shape
    return [np.ascontiguousarray(lowp.to_bf16_bits(U.reshape(a, a, KB, C // 2, 2, ob).transpose(0, 1, 2, 3, 5, 4)))] \
        + rest
