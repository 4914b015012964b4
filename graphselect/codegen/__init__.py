"""What measurement and the whole-graph rewrite share, below both: emitting one layer into a
Relax BlockBuilder in a chosen layout (``emit``), the generic schedule of every PrimFunc the
conv families do not schedule (``schedule``), and lowering and compiling (``lower``). Measuring a
layer alone and building the network go through the same code, so what is timed is what runs."""


def code_version() -> str:
    """The version of the code that emits, schedules and lowers every non-conv kernel (part of
    the record key of op, epilogue and layout-transform measurements)."""
    from ..codehash import source_hash
    from ..graph import layouts
    from . import emit, lower, schedule
    return source_hash(emit, schedule, lower, layouts)
