"""graphselect: whole-graph algorithm selection for CNN inference on CPUs, built on Apache TVM.

>>> import graphselect                                              # doctest: +SKIP
>>> result = graphselect.optimize("model.onnx", target="llvm")      # doctest: +SKIP
"""
import os

from .errors import BuildError, GraphSelectError, Infeasible, MeasurementError, UnsupportedModel

# TVM's worker threads go to sleep soon after a kernel ends, and a network of many small kernels
# pays the wake-up on nearly every call: ShuffleNetV2 ran at 4.4-5.6 ms with TVM's default spin
# count and 3.5-3.6 ms with this one (onnxruntime's threads spin between ops too). Read when TVM
# creates its thread pool, so it must be set before the first kernel runs; a value the user set
# wins. Programs that load an exported model.so without importing graphselect should set it too.
SPIN_COUNT = "1000000"
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", SPIN_COUNT)

__version__ = "0.1.0"


def optimize(model, **kwargs):
    """See :func:`graphselect.api.optimize` (imported lazily: TVM takes a while to load)."""
    from .api import optimize as _optimize
    return _optimize(model, **kwargs)


__all__ = ["optimize", "GraphSelectError", "UnsupportedModel", "Infeasible", "MeasurementError", "BuildError"]
