"""Static int8 quantization of zoo models into QDQ form, as a user would quantize their own:
onnxruntime's pre-processing (shape inference, BatchNormalization folded into the convs), then its
quantizer (``quantize_static``, QDQ format, per-channel symmetric int8 weights, uint8
activations) calibrated on seeded random images."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx


def quantize_qdq(model: onnx.ModelProto, *, samples: int = 8, seed: int = 0) -> onnx.ModelProto:
    """``model`` (one float input) quantized to QDQ by onnxruntime, calibrated (min/max) on
    ``samples`` standard-normal inputs."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    inp = model.graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(seed)
            self.it = iter([{inp.name: rng.standard_normal(shape).astype("float32")} for _ in range(samples)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, pre, dst = Path(d) / "float.onnx", Path(d) / "pre.onnx", Path(d) / "qdq.onnx"
        onnx.save(model, src)
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)   # static shapes: no sympy needed
        quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)
