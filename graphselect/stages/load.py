"""Stage 2: the user's ONNX model as a LayerGraph over TVM's Relax import (DESIGN.md, "What goes in")."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import GraphSelectError
from .settings import Settings

@dataclass(frozen=True)
class Imported:
    original: object                   # the user's onnx.ModelProto
    prepared: object                   # frontend.onnx_prep.Prepared
    lg: object                         # graph.layers.LayerGraph (its extra["module"]: the Relax module)
    model_key: str                     # identifies the model's structure (per-model calibration)
    name: str
    content_key: str = ""              # identifies the prepared model exactly, weights included


def load(model, s: Settings, input_shape=None) -> Imported:
    from ..frontend import onnx_prep
    from ..frontend.relax_import import import_onnx, importer_ops
    from ..graph.layers import extract
    s.progress("import", 0, 1, "loading the model")
    original = onnx_prep.load_model(model)
    if isinstance(input_shape, (tuple, list)):
        names = _inputs(original)
        if len(names) != 1:
            raise GraphSelectError(f"the model has {len(names)} inputs ({', '.join(names)}): give each shape by "
                                   f"name, --input-shape NAME:1,3,224,224 (repeated)")
        input_shape = {names[0]: tuple(int(v) for v in input_shape)}
    prepared = onnx_prep.prepare(original, input_shapes=input_shape, ops=importer_ops())
    onnx_convs = tuple(n.name or n.output[0] for n in prepared.model.graph.node if n.op_type == "Conv")
    mod = import_onnx(prepared.model, prepared.shapes)
    lg = extract(mod, onnx_conv_names=onnx_convs)
    lg.extra["module"] = mod
    key = hashlib.sha1("|".join(f"{l.name}:{l.op}:{l.out_shape}:{l.conv.key if l.conv else ''}"
                                for l in lg.layers.values()).encode()).hexdigest()[:12]
    content = hashlib.sha1(prepared.model.SerializeToString()).hexdigest()[:16]
    s.progress("import", 1, 1, f"{len(lg.convs)} conv layers, {len(lg.layers)} layers")
    return Imported(original, prepared, lg, key, s.name or _model_name(model, original), content)




def quantized(lg) -> bool:
    """Whether the model is a QDQ model (fake-quant pairs on its activations)."""
    from ..graph.layers import FAKE_QUANT
    return any(l.op == FAKE_QUANT or (l.conv is not None and (l.conv.quant or l.conv.quant_pre))
               for l in lg.layers.values())



def inputs(imported: Imported) -> list[np.ndarray]:
    """The inputs every check and in-place timing runs on (reproducible)."""
    from ..runtime import random_inputs
    return random_inputs(imported.prepared.input_shapes)


def reference_for(imported: Imported, s: Settings, xs):
    """The fp32 reference (``measure.reference``) run on the inputs ``xs``."""
    from ..measure.reference import reference
    prep = imported.prepared
    return reference(_with_shape(imported.original, prep), dict(zip(prep.input_names, xs)), s.spec.threads)


def _inputs(m) -> list[str]:
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def _with_shape(original, prepared):
    """The user's model with the input shapes graphselect used (for the reference)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(original)
    shapes = prepared.shapes
    for i in m.graph.input:
        if i.name in shapes:
            dims = i.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[i.name]):
                d.Clear()
                d.dim_value = int(v)
    return m


def _model_name(model, proto) -> str:
    if isinstance(model, (str, os.PathLike)):
        return Path(model).stem
    return proto.graph.name or "model"


