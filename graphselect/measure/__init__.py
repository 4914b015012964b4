"""Measurement: plan, builder, runners, record store (DESIGN.md, "Measurement")."""


def protocol_version() -> str:
    """The version of what shapes every kernel and its timing besides the code that generates
    it (which each family's version covers): the layer graph and its specs (``graph.layers``,
    ``graph.layouts``), the target's vector units and grids (``target``), the builder and its
    worker process, the timing protocol and the runners (``jobs``, ``local``, ``rpc``) and where
    the timing thread runs (``affinity``), the TIR pipeline (``codegen.pipeline``). Part of
    every record's version, so a change to any of them re-times instead of reusing."""
    from .. import target
    from ..codegen import pipeline
    from ..codehash import source_hash
    from ..graph import layers, layouts
    from . import affinity, builder, compile_worker, jobs, local, rpc
    return source_hash(layers, layouts, target, builder, compile_worker, jobs, local, rpc, affinity, pipeline)
