"""bench/layers_vs_ort.py compares graphselect's kernels with onnxruntime running "the same conv
and epilogue": its one-layer ONNX model must compute exactly what graphselect's reference does."""
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from graphselect.candidates.base import reference
from graphselect.graph.layers import ConvSpec, Layer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from layers_vs_ort import conv_model  # noqa: E402

SPECS = [
    ConvSpec(1, 8, 9, 9, 16, (3, 3), (2, 2), (1, 1, 1, 1), bias=True, clip_lo=0.0),
    ConvSpec(1, 8, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, residual=True, clip_lo=0.0),
    ConvSpec(1, 8, 8, 8, 8, (3, 3), (1, 1), (2, 2, 2, 2), groups=8, clip_lo=0.0, clip_hi=6.0, dilation=(2, 2)),
    ConvSpec(1, 4, 8, 8, 8, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, act="silu"),
    ConvSpec(1, 4, 8, 8, 8, (1, 1), (1, 1), (0, 0, 0, 0), act="hardswish"),
    ConvSpec(1, 4, 8, 8, 8, (1, 1), (1, 1), (0, 0, 0, 0), bias=True, act="sigmoid"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.describe()} {s.epilogue}")
def test_one_layer_model_matches_the_reference(spec):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((spec.out_channels, spec.in_channels // spec.groups, *spec.kernel)).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32") if spec.bias else None
    layer = Layer("conv0", "conv", "conv2d", ("input",), spec.out_shape, conv=spec, weight=w, bias=b)
    x = rng.standard_normal(spec.in_shape).astype("float32")
    feed = {"x": x}
    r = None
    if spec.residual:
        r = rng.standard_normal(spec.out_shape).astype("float32")
        feed["r"] = r
    got = ort.InferenceSession(conv_model(layer).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, reference(spec, x, w, b, r), rtol=1e-4, atol=1e-4)
