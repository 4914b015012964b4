"""The reference a built network is checked against: onnxruntime on the user's model; where
onnxruntime cannot run it (an old opset, an op version it has no kernel for), onnxruntime on the
model converted to a newer opset; where that fails too, onnx's own reference evaluator (exact,
slow, never timed). The report names which one was used."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..errors import BuildError

log = logging.getLogger(__name__)

CONVERT_TO = 17          # an opset every onnxruntime since 1.13 runs
TOLERANCE = 1e-4         # max |tvm - onnxruntime| / max |onnxruntime| of an fp32 network


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
        raise BuildError("no reference could run the model to check the result (" + "; ".join(tried) +
                         "); pass --no-verify to skip the check") from None
    log.warning("onnxruntime cannot run this model (%s); checked against onnx's reference evaluator", tried[0])
    return Reference("onnx reference evaluator", None, tuple(np.asarray(o) for o in out), "; ".join(tried))


def compare_outputs(got: list, want, names, label: str, ref_name: str, tolerance: float = TOLERANCE) -> float:
    """The max relative error over all outputs (each against its own largest magnitude);
    BuildError when the outputs' number or shapes differ or an error exceeds ``tolerance``
    (``math.inf``: only a non-finite error)."""
    want = [np.asarray(w) for w in want]
    if len(got) != len(want):
        raise BuildError(f"the {label} selection returns {len(got)} output(s), {ref_name} {len(want)}")
    worst = 0.0
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape:
            raise BuildError(f"output '{name}' of the {label} selection has shape {g.shape}, {ref_name}'s {w.shape}")
        if w.size == 0:
            continue
        e = float(np.abs(g.astype(np.float64) - w).max() / max(float(np.abs(w).max()), 1e-30))
        if not np.isfinite(e) or e > tolerance:
            raise BuildError(f"output '{name}' of the {label} selection differs from {ref_name}: max relative "
                         f"error {e:.2e} > {tolerance:g}")
        worst = max(worst, e)
    return worst
