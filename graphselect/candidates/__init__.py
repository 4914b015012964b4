"""Candidate families. Each is a module with ``propose``, ``build`` and ``pack`` (see base.py)."""
from __future__ import annotations

from ..graph.layers import ConvSpec
from . import direct, nchwc, winograd
from .base import Candidate

FAMILIES = {direct.FAMILY: direct, nchwc.FAMILY: nchwc, winograd.FAMILY: winograd}


def propose(spec: ConvSpec, families=None) -> list[Candidate]:
    """Every candidate of every enabled family for one conv workload."""
    out = []
    for name in families or FAMILIES:
        out.extend(FAMILIES[name].propose(spec))
    return out


def family(cand: Candidate):
    return FAMILIES[cand.family]


__all__ = ["Candidate", "FAMILIES", "propose", "family"]
