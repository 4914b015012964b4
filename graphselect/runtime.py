"""Calling a compiled network: inputs in, every output back as numpy (shared by measurement, the
check and the API, so none of them assumes one input or one output)."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def random_inputs(shapes: Sequence[tuple[int, ...]], seed: int = 0) -> list[np.ndarray]:
    """Standard-normal float32 arrays, one per input shape, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(s)).astype("float32") for s in shapes]


def as_list(x) -> list[np.ndarray]:
    """One array or a sequence of arrays -> a list of contiguous float32 arrays."""
    xs = [x] if isinstance(x, np.ndarray) else list(x)
    return [np.ascontiguousarray(a, dtype="float32") for a in xs]


def device_args(x, dev=None) -> list:
    """The inputs as TVM tensors on ``dev`` (default: the CPU)."""
    import tvm
    dev = dev or tvm.cpu()
    return [tvm.runtime.tensor(a, dev) for a in as_list(x)]


def outputs(ret) -> list[np.ndarray]:
    """What a Relax VM call returned (a tensor, or a tuple of them, nested or not), as a flat list."""
    if hasattr(ret, "numpy"):
        return [ret.numpy()]
    out: list[np.ndarray] = []
    for r in ret:
        out.extend(outputs(r))
    return out


def call(vm, x) -> list[np.ndarray]:
    """Run ``vm["main"]`` on ``x`` (one array or several) and return every output."""
    return outputs(vm["main"](*device_args(x)))
