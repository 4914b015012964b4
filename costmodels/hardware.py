"""The CPU's cache sizes, read from Linux sysfs (no TVM, no lscpu), and the residency budget.

``detect()`` reads ``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,
coherency_line_size}``; an override JSON file (argument, or the ``GRAPHSELECT_HARDWARE``
environment variable) replaces any subset of the fields, for machines whose sysfs is missing or
wrong (containers, VMs) or to study a different cache size.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
ENV = "GRAPHSELECT_HARDWARE"


@dataclass(frozen=True)
class Hardware:
    l1d_bytes: int       # per core
    l2_bytes: int        # per L2 instance (per core on current x86 and Arm server parts)
    l3_bytes: int        # per L3 instance seen by cpu0 (0: no L3)
    line_bytes: int
    cores: int           # logical CPUs this process may run on
    source: str          # where the values came from: "sysfs", "defaults", "+override:PATH"


# A typical current x86 server core, used when sysfs cannot be read.
DEFAULTS = Hardware(l1d_bytes=32 * 1024, l2_bytes=1024 * 1024, l3_bytes=8 * 1024 * 1024,
                    line_bytes=64, cores=1, source="defaults")

_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


def parse_size(text: str | int) -> int:
    """Bytes from a sysfs size such as ``"48K"``, ``"32768K"``, ``"32M"`` or a plain integer."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot read a cache size from {text!r}; expected e.g. 48K, 32M or 1048576")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _from_sysfs(root: Path) -> dict:
    found = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text().strip())
            line = int((index / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        key = {(1, "Data"): "l1d_bytes", (2, "Unified"): "l2_bytes", (3, "Unified"): "l3_bytes"}.get((level, kind))
        if key:
            found[key] = size
            found.setdefault("line_bytes", line)
    return found


def detect(override: str | Path | None = None, *, sysfs: str | Path = SYSFS_CACHE) -> Hardware:
    """This machine's caches: sysfs, else :data:`DEFAULTS`, then the override file on top.

    Parameters
    ----------
    override : path, optional
        JSON object with any subset of ``l1d_bytes, l2_bytes, l3_bytes, line_bytes, cores``
        (integers, or size strings such as ``"32M"``). Defaults to ``$GRAPHSELECT_HARDWARE``.
    sysfs : path
        The cache directory to read (tests point it elsewhere).

    Raises
    ------
    ValueError
        The override file is not a JSON object, names an unknown field, or has a bad size.
    OSError
        The override file cannot be read.

    Examples
    --------
    >>> hw = detect()
    >>> hw.l1d_bytes > 0 and hw.line_bytes > 0
    True
    """
    found = _from_sysfs(Path(sysfs))
    if {"l1d_bytes", "l2_bytes"} <= found.keys():
        hw = replace(DEFAULTS, source="sysfs", cores=_cores(), **{"l3_bytes": 0, **found})
    else:
        hw = replace(DEFAULTS, cores=_cores())
    override = override if override is not None else os.environ.get(ENV) or None
    if override is None:
        return hw
    data = json.loads(Path(override).read_text())
    allowed = {f.name for f in fields(Hardware)} - {"source"}
    if not isinstance(data, dict) or not data.keys() <= allowed:
        extra = sorted(set(data) - allowed) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{override}: expected a JSON object with fields among {sorted(allowed)}, "
                         f"got {extra}")
    values = {k: parse_size(v) for k, v in data.items()}
    return replace(hw, source=f"{hw.source}+override:{override}", **values)


def residency_budget(hw: Hardware) -> int:
    """Bytes of cache a network's weights, workspaces and live activations may count on.

    ``0.75 * L3 + L2`` (``L2`` alone when there is no L3). L2 counts once, not per core: the
    threads of one layer read the same weights, so the private L2s hold copies rather than
    distinct data; it counts at all because current L3s (Intel since Skylake-SP, AMD Zen) are
    non-inclusive victim caches, so L2 adds to the capacity instead of duplicating L3. A quarter
    of L3 is held back for what the budget does not model: code, the runtime's own data,
    streaming misses, conflict misses of a set-associative cache with imperfect LRU, and other
    processes sharing the last-level cache.

    Examples
    --------
    >>> residency_budget(Hardware(32768, 1 << 20, 32 << 20, 64, 2, "example")) == 25 << 20
    True
    """
    if hw.l3_bytes <= 0:
        return hw.l2_bytes
    return int(0.75 * hw.l3_bytes) + hw.l2_bytes


@dataclass(frozen=True)
class Throughput:
    """What this machine sustains: float32 GEMM FLOP/s and copy bandwidth (read + write)."""
    peak_gflops: float
    bandwidth_gbs: float
    threads: int
    cpu: str


def measure_throughput(threads: int, cpu: str, *, repeats: int = 5) -> Throughput:
    """Best of ``repeats``: a 2048^3 float32 GEMM (BLAS through numpy) and a 256 MiB copy."""
    import time

    import numpy as np
    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    c = a @ b                                   # warm-up (and BLAS thread start)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t)
    gflops = 2 * n ** 3 / best / 1e9
    src = np.ones(64 << 20, np.float32)         # 256 MiB, far beyond any cache
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return Throughput(round(gflops, 1), round(2 * src.nbytes / best / 1e9, 1), threads, cpu)


def throughput(store: str | Path, *, threads: int, cpu: str) -> Throughput:
    """The stored measurement for (cpu, threads) from the JSON file ``store``, measured and
    added to it the first time (written to a temporary file and renamed: never half-written)."""
    return Throughput(**_stored(store, f"{cpu}|{threads}", lambda: measure_throughput(threads, cpu).__dict__))


def fma_peak(store: str | Path, *, threads: int, cpu: str, isa: str, measure) -> float:
    """The stored float32 FMA peak (GFLOP/s) for (cpu, threads, isa) from the JSON file
    ``store``, ``measure()`` the first time (graphselect.measure.peak: a kernel TVM builds for
    the target, which the BLAS figure of :func:`throughput` is not). Filed as ``fma2``: the
    probe before 2026-12 spilled registers on AVX2, and its figures are not reused."""
    return float(_stored(store, f"{cpu}|{threads}|fma2|{isa}", lambda: {"gflops": round(measure(), 1)})["gflops"])


def launch_cost(store: str | Path, *, threads: int, cpu: str, isa: str, measure) -> float:
    """The stored runtime cost of one kernel call (ms) for (cpu, threads, isa) from the JSON file
    ``store``, ``measure()`` the first time (graphselect.measure.peak.measure_launch_ms)."""
    return float(_stored(store, f"{cpu}|{threads}|launch|{isa}", lambda: {"ms": round(measure(), 5)})["ms"])


def timing_floor(store: str | Path, *, threads: int, cpu: str, isa: str, measure) -> tuple[float, float, float]:
    """The stored (cold, warm, in-cold) ms the isolated timing protocol reads for a kernel that
    does nothing, for (cpu, threads, isa) from the JSON file ``store``, ``measure()``
    (graphselect.measure.peak.measure_floor_ms) the first time."""
    def probe():
        c, w, ic = measure()
        return {"cold_ms": round(c, 6), "warm_ms": round(w, 6), "incold_ms": round(ic, 6)}
    got = _stored(store, f"{cpu}|{threads}|floor|{isa}", probe)
    return float(got["cold_ms"]), float(got["warm_ms"]), float(got["incold_ms"])


# Footprints, as multiples of the residency budget, at which the partial-residency steps end.
RESIDENCY_CAPS = (1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


@dataclass(frozen=True)
class Residency:
    """How much of the warm-cold difference survives a footprint past the budget.

    ``steps``: ``(cap bytes, warm share)`` for ``Problem.partial``: a footprint up to ``cap``
    keeps ``share`` of the gap between warm-weight and cold-weight timings (the share measured
    at the cap, the least in its range). ``warm_gbs``/``cold_gbs``: the probe's read rate over
    half the budget and over a buffer far beyond the cache.
    """
    budget_bytes: int
    steps: tuple[tuple[int, float], ...]
    warm_gbs: float
    cold_gbs: float
    threads: int
    cpu: str


class _Stream:
    """A float32 buffer of about ``nbytes`` streamed by a matrix-vector product (BLAS gemv: every
    byte read once per pass, little arithmetic per byte, the way a network reads its weights
    once per inference)."""

    def __init__(self, nbytes: int):
        import numpy as np
        cols = 1024
        self.a = np.ones((max(1, nbytes // (4 * cols)), cols), np.float32)
        self.x = np.ones(cols, np.float32)
        self.y = np.empty(self.a.shape[0], np.float32)

    def gbs(self, passes: int) -> float:
        """GB/s of the median of ``passes`` passes, after one warm-up pass."""
        import time

        import numpy as np
        np.matmul(self.a, self.x, out=self.y)
        times = []
        for _ in range(passes):
            t = time.perf_counter()
            np.matmul(self.a, self.x, out=self.y)
            times.append(time.perf_counter() - t)
        return self.a.nbytes / sorted(times)[len(times) // 2] / 1e9


def measure_residency(budget: int, threads: int, cpu: str, *, caps=RESIDENCY_CAPS,
                      rounds: int = 5, passes: int = 5) -> Residency:
    """Read rates at half the budget (warm), at each cap and at max(256 MiB, 8 x budget) (cold),
    interleaved over ``rounds`` (the last-level cache of a shared machine changes with its
    neighbours' load) and the median taken. The share at a cap is where its time per byte lies
    between cold and warm, forced to not increase with the footprint; steps with no share
    left are dropped. About two seconds."""
    sizes = [max(1, budget // 2)] + [int(budget * m) for m in caps] + [max(256 << 20, 8 * budget)]
    streams = [_Stream(n) for n in sizes]
    rates = [[] for _ in sizes]
    for _ in range(rounds):
        for s, out in zip(streams, rates):
            out.append(s.gbs(passes))
    med = [sorted(r)[len(r) // 2] for r in rates]
    warm, cold = med[0], med[-1]
    steps, last = [], 1.0
    for cap, r in zip(sizes[1:-1], med[1:-1]):
        share = (1 / cold - 1 / r) / (1 / cold - 1 / warm) if warm > cold else 0.0
        last = round(min(last, max(0.0, share)), 3)
        if last <= 0:
            break
        steps.append((cap, last))
    return Residency(budget, tuple(steps), round(warm, 1), round(cold, 1), threads, cpu)


def residency(store: str | Path, budget: int, *, threads: int, cpu: str) -> Residency:
    """The stored :class:`Residency` for (cpu, threads, budget) in the JSON file ``store``,
    measured the first time (about two seconds)."""
    d = _stored(store, f"residency|{cpu}|{threads}|{budget}",
                lambda: measure_residency(budget, threads, cpu).__dict__)
    return Residency(**{**d, "steps": tuple(tuple(s) for s in d["steps"])})


def _stored(store: str | Path, key: str, measure) -> dict:
    """``store[key]`` from the JSON file, else ``measure()`` added to it (written to a temporary
    file and renamed: never half-written)."""
    store = Path(store)
    try:
        data = json.loads(store.read_text())
    except (OSError, ValueError):
        data = {}
    if key in data:
        return data[key]
    data[key] = value = measure()
    store.parent.mkdir(parents=True, exist_ok=True)
    tmp = store.with_name(store.name + ".partial")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, store)
    return value
