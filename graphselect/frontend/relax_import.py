"""ONNX -> Relax: ``tvm.relax.frontend.onnx.from_onnx`` with constants bound, then the
inference-only simplifications every later stage expects (constant bias reshapes folded,
any BatchNormalization not folded at the ONNX level decomposed into multiply/add)."""
from __future__ import annotations

from ..errors import UnsupportedModel


def importer_ops() -> frozenset[str]:
    """The ONNX ops (default domain) TVM's Relax importer converts."""
    from tvm.relax.frontend.onnx import onnx_frontend
    return frozenset(onnx_frontend._get_convert_map())


def import_onnx(model, shapes: dict[str, tuple[int, ...]]):
    """``shapes``: every input's fixed shape, by name (``Prepared.shapes``)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    model = _without_upsample(model)
    try:
        mod = from_onnx(model, shape_dict={k: list(v) for k, v in shapes.items()})
    except Exception as e:  # noqa: BLE001 - the importer raises many types; the user needs its message
        msg = str(e).strip().splitlines()
        given = ", ".join(f"'{k}' {list(v)}" for k, v in shapes.items())
        raise UnsupportedModel(f"TVM's ONNX importer rejected the model with input(s) {given}: "
                               f"{msg[-1] if msg else type(e).__name__}; if a shape was given with --input-shape, "
                               f"check it") from e
    seq = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(), relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
                                    relax.transform.DeadCodeElimination()])
    return seq(mod)


def _without_upsample(model):
    """TVM 0.27's Upsample converter reads opset 7's ``scales`` attribute even at opset 9 (where
    the scales are an input) and rounds nearest neighbours where ONNX floors; onnx's version
    converter turns Upsample into the equivalent Resize, which TVM converts correctly. Models
    without Upsample are imported as given."""
    import onnx
    if not any(n.op_type == "Upsample" for n in model.graph.node):
        return model
    try:
        return onnx.version_converter.convert_version(model, 13)
    except Exception as e:  # noqa: BLE001 - the converter raises its own types
        raise UnsupportedModel(f"Upsample could not be converted to Resize for TVM's importer: "
                               f"{' '.join(str(e).split())[:200]}; export the model at opset 11 or later") from e
