"""The reference a built network is checked against: onnxruntime on the user's model; where
onnxruntime cannot run it (an old opset, an op version it has no kernel for), onnxruntime on the
model converted to a newer opset; where that fails too, onnx's own reference evaluator (exact,
slow, never timed). The report names which one was used."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

CONVERT_TO = 17          # an opset every onnxruntime since 1.13 runs


@dataclass(frozen=True)
class Reference:
    name: str                    # "onnxruntime", "onnxruntime (opset 6 converted to 17)", "onnx reference evaluator"
    session: object              # the onnxruntime session, None for the reference evaluator
    outputs: tuple               # the reference's outputs on the feeds it was made with
    why: str = ""                # why onnxruntime on the model as given was not used

    @property
    def timeable(self) -> bool:
        """onnxruntime runs the model (as given or converted): it can be timed as the peer."""
        return self.session is not None


def _session(model_bytes: bytes, threads: int):
    from .e2e import ort_session
    return ort_session(model_bytes, threads)


def _short(e: Exception) -> str:
    text = " ".join(str(e).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def reference(model, feeds: dict, threads: int) -> Reference:
    """The first of onnxruntime, onnxruntime after opset conversion, and onnx's reference
    evaluator that runs ``model`` (an onnx.ModelProto with fixed input shapes) on ``feeds``."""
    import onnx
    tried = []
    try:
        sess = _session(model.SerializeToString(), threads)
        return Reference("onnxruntime", sess, tuple(sess.run(None, feeds)))
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for unsupported models
        tried.append(f"onnxruntime: {_short(e)}")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < CONVERT_TO:
        try:
            conv = onnx.version_converter.convert_version(model, CONVERT_TO)
            sess = _session(conv.SerializeToString(), threads)
            out = tuple(sess.run(None, feeds))
            return Reference(f"onnxruntime (opset {opset} converted to {CONVERT_TO})", sess, out, tried[0])
        except Exception as e:  # noqa: BLE001
            tried.append(f"opset conversion: {_short(e)}")
    from onnx.reference import ReferenceEvaluator
    try:
        out = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:  # noqa: BLE001
        tried.append(f"onnx reference evaluator: {_short(e)}")
        from ..errors import BuildError
        raise BuildError("no reference could run the model to check the result (" + "; ".join(tried) +
                         "); pass --no-verify to skip the check") from None
    log.warning("onnxruntime cannot run this model (%s); checked against onnx's reference evaluator", tried[0])
    return Reference("onnx reference evaluator", None, tuple(np.asarray(o) for o in out), "; ".join(tried))
