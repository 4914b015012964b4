"""End-to-end timing of whole networks, TVM and onnxruntime in one process.

Each runtime's idle worker threads keep spinning for a while after a call and steal the cores
from the other, so single calls are never alternated: each side runs a block of calls (after a
warm-up call), blocks alternate with a pause between them that outlasts either runtime's spinning
(TVM's worker kept spinning tens of ms after a block and doubled onnxruntime's first calls), and
the result is the median of all calls.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np


def time_calls(fn: Callable[[], object], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


PAUSE_S = 0.5


def compare(fns: dict[str, Callable[[], object]], *, runs: int = 30, blocks: int = 3,
            pause: float = PAUSE_S) -> dict[str, list[float]]:
    """Per-call milliseconds for every function: ``runs`` calls each, in ``blocks`` alternating
    blocks, ``pause`` seconds of idle before each block."""
    per = max(1, -(-runs // blocks))
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(blocks):
        for k, fn in fns.items():
            time.sleep(pause)
            out[k].extend(time_calls(fn, per))
    return out


def median(ts: list[float]) -> float:
    return float(np.median(ts)) if ts else float("nan")


def vm_runner(executable, x: np.ndarray):
    """A zero-argument callable running the compiled network on ``x`` (result synchronised)."""
    import tvm
    from tvm import relax
    dev = tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    xt = tvm.runtime.tensor(x, dev)
    f = vm["main"]
    return lambda: f(xt)


def ort_session(model_bytes: bytes, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def ort_runner(sess, input_name: str, x: np.ndarray):
    feed = {input_name: x}
    return lambda: sess.run(None, feed)
