"""ONNX -> Relax: ``tvm.relax.frontend.onnx.from_onnx`` with constants bound, then the
inference-only simplifications every later stage expects (constant bias reshapes folded,
any BatchNormalization not folded at the ONNX level decomposed into multiply/add)."""
from __future__ import annotations

from ..errors import UnsupportedModel


def import_onnx(model, input_name: str, input_shape: tuple[int, ...]):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    try:
        mod = from_onnx(model, shape_dict={input_name: list(input_shape)})
    except Exception as e:  # noqa: BLE001 - the importer raises many types; the user needs its message
        msg = str(e).strip().splitlines()
        raise UnsupportedModel(f"TVM's ONNX importer rejected the model: {msg[-1] if msg else type(e).__name__}") from e
    seq = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(), relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
                                    relax.transform.DeadCodeElimination()])
    return seq(mod)
