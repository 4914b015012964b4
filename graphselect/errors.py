"""The exceptions a user must act on. Expected failures inside a stage are values, not exceptions."""


class GraphSelectError(Exception):
    """Base class for every error graphselect raises on purpose."""


class UnsupportedModel(GraphSelectError):
    """The model cannot be optimized as given (malformed, an unsupported op, a dynamic shape...)."""


class Infeasible(GraphSelectError):
    """No assignment satisfies the constraints (every candidate of some layer failed)."""


class MeasurementError(GraphSelectError):
    """Measuring failed in a way that leaves no usable result."""


class BuildError(GraphSelectError):
    """The selected module could not be built, or its outputs disagree with the reference."""
