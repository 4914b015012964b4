"""graphselect: whole-graph algorithm selection for CNN inference on CPUs, built on Apache TVM.

>>> import graphselect                                              # doctest: +SKIP
>>> result = graphselect.optimize("model.onnx", target="llvm")      # doctest: +SKIP
"""
from .errors import BuildError, GraphSelectError, Infeasible, MeasurementError, UnsupportedModel

__version__ = "0.1.0"


def optimize(model, **kwargs):
    """See :func:`graphselect.api.optimize` (imported lazily: TVM takes a while to load)."""
    from .api import optimize as _optimize
    return _optimize(model, **kwargs)


__all__ = ["optimize", "GraphSelectError", "UnsupportedModel", "Infeasible", "MeasurementError", "BuildError"]
