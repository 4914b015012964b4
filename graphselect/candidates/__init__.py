"""Candidate families. Each is a module with ``propose``, ``build`` and ``pack`` (see base.py)."""
from __future__ import annotations

from functools import lru_cache

from ..codehash import source_hash
from ..graph.layers import ConvSpec
from . import base, depthwise, direct, dwpw, nchwc, nchwc_bf16, nchwc_int8, pointwise, sparse_csr, winograd, winograd_bf16
from .base import Candidate

FAMILIES = {m.FAMILY: m for m in (direct, nchwc, pointwise, depthwise, winograd, sparse_csr, nchwc_bf16,
                                   winograd_bf16, nchwc_int8, dwpw)}


def precision_of(name: str) -> str:
    """What a family computes in: fp32 unless its module says otherwise (``PRECISION``)."""
    return getattr(FAMILIES[name], "PRECISION", "fp32")


def propose(spec: ConvSpec, families=None, weight=None, isa=None, precisions=("fp32",)) -> list[Candidate]:
    """Every candidate of every enabled family for one conv layer (families that exploit the
    weights' values, like ``sparse_csr``, need ``weight``), on grids that follow the target's
    vector unit ``isa`` (a ``target.VectorIsa``; default AVX-512's); families computing in a
    precision not in ``precisions`` propose nothing."""
    from ..target import AVX512
    isa = isa or AVX512
    unknown = set(families or ()) - set(FAMILIES)
    if unknown:
        from ..errors import GraphSelectError
        raise GraphSelectError(f"unknown candidate famil{'ies' if len(unknown) > 1 else 'y'} "
                               f"{', '.join(sorted(unknown))}; known: {', '.join(FAMILIES)}")
    out = []
    for name in families or FAMILIES:
        if precision_of(name) in precisions:
            out.extend(FAMILIES[name].propose(spec, weight, isa))
    return out


def family(cand: Candidate):
    return FAMILIES[cand.family]


@lru_cache(maxsize=None)
def code_version(name: str) -> str:
    """The version of the code that generates a family's kernels (part of the record key)."""
    fam = FAMILIES[name]
    return source_hash(fam, base, *getattr(fam, "DEPENDS", ()))


__all__ = ["Candidate", "FAMILIES", "propose", "family", "code_version", "precision_of"]
