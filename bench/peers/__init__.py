"""Other runtimes a user would pick instead of graphselect, for the benchmarks only (never
dependencies of graphselect): each runner is a zero-argument callable running the model once on
fixed inputs, tagged with its ``runtime`` for graphselect.measure.e2e.compare, or None (with a
message) where the peer is not installed."""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEEPSPARSE_VENV = Path.home() / ".cache" / "graphselect" / "deepsparse-venv"


def openvino_runner(model, x, threads: int, precision: str | None = "f32"):
    """OpenVINO's CPU plugin on ``x`` (latency hint, ``threads`` inference threads), computing in
    ``precision`` (``INFERENCE_PRECISION_HINT``), or with None in what OpenVINO picks by default
    for this CPU (bf16 where it has AMX or AVX512-BF16); ``fn.precision`` says which it ran."""
    try:
        import openvino as ov
    except ImportError:
        print("openvino is not installed: no OpenVINO column", file=sys.stderr)
        return None
    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.onnx"
        path.write_bytes(model.SerializeToString())
        compiled = core.compile_model(str(path), "CPU", config)
    req = compiled.create_infer_request()
    fn = lambda: req.infer({0: x})  # noqa: E731
    fn.runtime = "openvino"
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")          # an ov.Type: bf16, f32, f16
    fn.precision = getattr(hint, "type_name", str(hint))
    fn.outputs = lambda: [np.asarray(v) for v in req.infer({0: x}).values()]
    return fn


def deepsparse_python(given: str | None = None) -> str | None:
    """The interpreter of DeepSparse's environment: ``given``, else $GRAPHSELECT_DEEPSPARSE_PYTHON,
    else the one bench/peers/setup_deepsparse.sh makes; None if there is none."""
    for p in (given, os.environ.get("GRAPHSELECT_DEEPSPARSE_PYTHON"), DEEPSPARSE_VENV / "bin" / "python"):
        if p and Path(p).exists():
            return str(p)
    return None


class DeepSparse:
    """DeepSparse (its own environment, a worker subprocess: peers/deepsparse_worker.py) on fixed
    inputs. Calling it runs the model once (a pipe round trip included); ``time_block`` has the
    worker time a block of calls itself, which is what compare uses."""

    runtime = "deepsparse"

    def __init__(self, model, inputs: list[np.ndarray], threads: int, python: str):
        self._dir = tempfile.TemporaryDirectory()
        d = Path(self._dir.name)
        (d / "model.onnx").write_bytes(model.SerializeToString())
        np.savez(d / "inputs.npz", **{f"x{i:03d}": a for i, a in enumerate(inputs)})
        self._p = subprocess.Popen([python, str(HERE / "deepsparse_worker.py"), str(d / "model.onnx"),
                                    str(d / "inputs.npz"), str(threads)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self._read()
        if not hello.get("ready"):
            raise RuntimeError(f"deepsparse worker did not start: {hello}")
        self.version = hello["version"]
        atexit.register(self.close)

    def _read(self) -> dict:
        while True:
            line = self._p.stdout.readline()
            if not line:
                raise RuntimeError(f"deepsparse worker exited (rc {self._p.poll()})")
            if line.startswith("{"):
                return json.loads(line)

    def _ask(self, req: dict) -> dict:
        self._p.stdin.write(json.dumps(req) + "\n")
        self._p.stdin.flush()
        return self._read()

    def __call__(self):
        return self._ask({"block": 1, "warmup": 0})

    def time_block(self, runs: int, warmup: int = 1, warmup_s: float = 0.0) -> list[float]:
        return self._ask({"block": runs, "warmup": warmup, "warmup_s": warmup_s})["ms"]

    def outputs(self) -> list[np.ndarray]:
        path = Path(self._dir.name) / "outputs.npz"
        self._ask({"outputs": str(path)})
        with np.load(path) as z:
            return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]

    def close(self):
        if self._p.poll() is None:
            try:
                self._p.stdin.write(json.dumps({"quit": True}) + "\n")
                self._p.stdin.close()
                self._p.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._p.kill()
        self._dir.cleanup()


def deepsparse_runner(model, inputs, threads: int, python: str | None = None):
    """DeepSparse 1.8 on ``inputs`` (an array or a list, in the model's input order) with
    ``threads`` cores, or None where its environment is missing."""
    py = deepsparse_python(python)
    if py is None:
        print("no DeepSparse environment (bash bench/peers/setup_deepsparse.sh): no DeepSparse column",
              file=sys.stderr)
        return None
    inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    return DeepSparse(model, inputs, threads, py)
