"""Candidate families. Each is a module with ``propose``, ``build`` and ``pack`` (see base.py)."""
from __future__ import annotations

from functools import lru_cache

from ..codehash import source_hash
from ..graph.layers import ConvSpec
from . import base, depthwise, direct, nchwc, sparse_csr, winograd
from .base import Candidate

FAMILIES = {m.FAMILY: m for m in (direct, nchwc, depthwise, winograd, sparse_csr)}


def propose(spec: ConvSpec, families=None, weight=None, isa=None) -> list[Candidate]:
    """Every candidate of every enabled family for one conv layer (families that exploit the
    weights' values, like ``sparse_csr``, need ``weight``), on grids that follow the target's
    vector unit ``isa`` (a ``target.VectorIsa``; default AVX-512's)."""
    from ..target import AVX512
    isa = isa or AVX512
    unknown = set(families or ()) - set(FAMILIES)
    if unknown:
        from ..errors import GraphSelectError
        raise GraphSelectError(f"unknown candidate famil{'ies' if len(unknown) > 1 else 'y'} "
                               f"{', '.join(sorted(unknown))}; known: {', '.join(FAMILIES)}")
    out = []
    for name in families or FAMILIES:
        out.extend(FAMILIES[name].propose(spec, weight, isa))
    return out


def family(cand: Candidate):
    return FAMILIES[cand.family]


@lru_cache(maxsize=None)
def code_version(name: str) -> str:
    """The version of the code that generates a family's kernels (part of the record key)."""
    return source_hash(FAMILIES[name], base)


__all__ = ["Candidate", "FAMILIES", "propose", "family", "code_version"]
