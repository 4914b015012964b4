"""Activation layouts: "NCHW" and channel-blocked "NCHW{b}c" (channels split into C/b blocks of b)."""
from __future__ import annotations

import re

import numpy as np

NCHW = "NCHW"
_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def blocked(b: int) -> str:
    return f"NCHW{b}c"


def block_of(layout: str) -> int | None:
    """The channel block of a layout (None for plain NCHW)."""
    if layout == NCHW:
        return None
    m = _BLOCKED.match(layout)
    if not m:
        raise ValueError(f"unknown layout {layout!r}")
    return int(m.group(1))


def shape_in(shape4, layout: str) -> tuple[int, ...]:
    n, c, h, w = (int(s) for s in shape4)
    b = block_of(layout)
    if b is None:
        return (n, c, h, w)
    if c % b:
        raise ValueError(f"{c} channels cannot be blocked by {b}")
    return (n, c // b, h, w, b)


def fits(channels: int, layout: str) -> bool:
    b = block_of(layout)
    return b is None or channels % b == 0


def pack(x: np.ndarray, layout: str) -> np.ndarray:
    """NCHW array -> layout (numpy, for tests and constants)."""
    b = block_of(layout)
    if b is None:
        return x
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def unpack(x: np.ndarray, layout: str) -> np.ndarray:
    b = block_of(layout)
    if b is None:
        return x
    n, cc, h, w, bb = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cc * bb, h, w))


def index_map(src: str, dst: str):
    """A Relax ``layout_transform`` index map from ``src`` to ``dst`` (one pass, no NCHW detour)."""
    a, b = block_of(src), block_of(dst)
    if a is None and b is not None:
        return lambda n, c, h, w: (n, c // b, h, w, c % b)
    if a is not None and b is None:
        return lambda n, cc, h, w, cb: (n, cc * a + cb, h, w)
    if a is not None and b is not None:
        return lambda n, cc, h, w, cb: (n, (cc * a + cb) // b, h, w, (cc * a + cb) % b)
    raise ValueError("no transform needed between equal plain layouts")
