"""The mobile zoo models and a real PyTorch mobile export through prepare() and TVM's ONNX importer,
built with TVM's plain pipeline (``tvm.compile``, no graphselect rewriting) and checked against
onnxruntime on the original model: proves that import (grouped/depthwise convs, Split, Slice,
channel shuffle, HardSwish, HardSigmoid, SE broadcasts) is right."""
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import tvm  # a hard dependency: a broken install must fail, not skip

import models
from graphselect.frontend import onnx_prep
from graphselect.frontend.relax_import import import_onnx
from tests.reference import rel_err

TORCH_MOBILE = Path(__file__).resolve().parents[1] / "data" / "torch_mobile.onnx"


def _tvm_vs_ort(model, input_shapes=None):
    from tvm import relax
    p = onnx_prep.prepare(model, input_shapes=input_shapes)
    mod = import_onnx(p.model, p.shapes)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    x = np.random.default_rng(0).standard_normal(p.input_shape).astype("float32")
    raw = model.SerializeToString() if hasattr(model, "SerializeToString") else Path(model).read_bytes()
    ref = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {p.input_name: x})[0]
    got = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    return p, mod, got, ref


def _calls(mod):
    calls = []

    def visit(e):
        if isinstance(e, tvm.relax.Call) and isinstance(e.op, tvm.ir.Op):
            calls.append(e)

    tvm.relax.analysis.post_order_visit(mod["main"], visit)
    return calls


@pytest.mark.parametrize("name", ["mobile_tiny", "mobilenet_v2", "efficientnet_b0", "shufflenet_v2",
                                  "regnet_x_400mf"])
def test_zoo_model_matches_onnxruntime(name):
    m = models.build(name, image_size=32, batch=1)
    p, mod, got, ref = _tvm_vs_ort(m)
    assert got.shape == ref.shape == (1, 10 if name == "mobile_tiny" else 1000)
    assert np.isfinite(ref).all() and ref.std() > 1e-3
    assert rel_err(got, ref) <= 1e-4
    calls = _calls(mod)
    # every conv arrives with its groups (depthwise, grouped, dense) and nothing else becomes a conv
    want = sorted(a.i for n in m.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group")
    assert sorted(int(c.attrs.groups) for c in calls if c.op.name == "relax.nn.conv2d") == want
    if name in ("mobile_tiny", "shufflenet_v2"):
        # channel split and shuffle arrive as split/reshape/permute_dims on static shapes
        assert {"relax.split", "relax.reshape", "relax.permute_dims"} <= {c.op.name for c in calls}


def test_torch_mobile_export_matches_onnxruntime():
    p, _, got, ref = _tvm_vs_ort(TORCH_MOBILE, {"images": (2, 3, 32, 32)})
    assert p.folded_bn == 10
    assert got.shape == ref.shape == (2, 10)
    assert rel_err(got, ref) <= 1e-4
    assert not np.allclose(got[0], got[1])
