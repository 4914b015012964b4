"""bench/peers: the DeepSparse worker's protocol, driven against a stand-in ``deepsparse`` module
(the real one lives in its own environment, which CI does not build)."""
import sys
import textwrap
from pathlib import Path

import numpy as np
from onnx import helper, TensorProto

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from peers import DeepSparse, deepsparse_python  # noqa: E402


def _fake_deepsparse(tmp_path):
    pkg = tmp_path / "fake" / "deepsparse"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import numpy as np
        __version__ = "0.0-fake"
        class Engine:
            def __init__(self, model, batch_size, num_cores):
                assert model.endswith(".onnx") and num_cores == 2
                self.batch = batch_size
            def run(self, feed):
                a, b = feed
                return [a + b, a * 2]
    """))
    return tmp_path / "fake"


def test_deepsparse_worker_serves_blocks_and_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(_fake_deepsparse(tmp_path)))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    model = helper.make_model(helper.make_graph([], "g", [x], [x]))
    a = np.arange(12, dtype="float32").reshape(3, 4)
    b = np.ones((3, 4), "float32")
    ds = DeepSparse(model, [a, b], 2, sys.executable)
    try:
        assert ds.version == "0.0-fake"
        ms = ds.time_block(7, warmup=2, warmup_s=0.0)
        assert len(ms) == 7 and all(t >= 0 for t in ms)
        outs = ds.outputs()
        np.testing.assert_array_equal(outs[0], a + b)
        np.testing.assert_array_equal(outs[1], a * 2)
    finally:
        ds.close()
    assert ds._p.poll() == 0


def test_deepsparse_python_is_none_without_an_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHSELECT_DEEPSPARSE_PYTHON", raising=False)
    monkeypatch.setattr("peers.DEEPSPARSE_VENV", tmp_path / "none")
    assert deepsparse_python() is None
    assert deepsparse_python(sys.executable) == sys.executable
