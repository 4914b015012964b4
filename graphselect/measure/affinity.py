"""Where the calling thread runs while TVM kernels are timed (or run for a user).

TVM's thread pool binds each worker thread to one core of its own and leaves the calling thread,
which runs task 0 of every parallel kernel itself, free to go anywhere. Found on a 2-vCPU Zen 5
VM (2026-12-03): once the calling thread had waited on something (a compile subprocess, a sleep),
the scheduler often woke it on the worker's core, and there it stayed, for seconds or for good:
both halves of every kernel on one core. The load probe's reference kernel then ran at 1.7x its
quiet time (0.28 ms against 0.165 ms, 300 readings each way, nothing else running), the probe read
that as load, and the tests' fresh stores flagged most records "timed under load"; a network timed
in that state ran 1.7x its time (a MobileNetV2 network 2.46 ms in the loop, 1.44 ms minutes later).
onnxruntime's pool threads are not bound, so the scheduler spreads them: it was not affected.

:func:`pinned` binds the calling thread to the cores no pool worker is bound to for the duration,
then restores its mask. Threads created meanwhile inherit the mask, so nothing that starts
threads or processes of its own (the builder, an onnxruntime session) is created inside it.
"""
from __future__ import annotations

import contextlib
import os
import threading


def worker_cpus() -> set[int]:
    """The cores this process's threads other than the caller are bound to, one core each (TVM's
    pool workers: ``tvm.runtime.num_threads()`` starts the calling thread's pool first)."""
    import tvm
    tvm.runtime.num_threads()            # the pool is per calling thread and starts lazily
    me = threading.get_native_id()
    cpus: set[int] = set()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return cpus
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                line = next((l for l in f if l.startswith("Cpus_allowed_list:")), "")
        except OSError:
            continue
        mask = _cpu_list(line.split(":", 1)[-1].strip())
        if len(mask) == 1:
            cpus |= mask
    return cpus


def _cpu_list(s: str) -> set[int]:
    """``"0-2,5"`` -> {0, 1, 2, 5}."""
    out: set[int] = set()
    for part in filter(None, s.split(",")):
        lo, _, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return set()
    return out


def free_cpus() -> set[int]:
    """The cores the calling thread may use that no pool worker is bound to (empty: none, or
    no way to tell)."""
    if not hasattr(os, "sched_getaffinity"):
        return set()
    return set(os.sched_getaffinity(0)) - worker_cpus()


def _bind(free: set[int] | None) -> set[int] | None:
    """Bind the calling thread to ``free``: its mask before, or None where nothing changed (no
    free core known, the thread already there, or ``free`` no longer within its mask)."""
    if not free or not hasattr(os, "sched_setaffinity"):
        return None
    before = set(os.sched_getaffinity(0))
    if before == free or not free <= before:
        return None
    try:
        os.sched_setaffinity(0, free)
    except OSError:
        return None
    return before


@contextlib.contextmanager
def pinned():
    """Bind the calling thread to the cores no TVM pool worker is bound to, restored on exit;
    a no-op where the platform has no affinity calls, where every allowed core has a worker, or
    inside another :func:`pinned`."""
    before = _bind(free_cpus())
    try:
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


class CallPin:
    """``pin(fn, *args)``: ``fn(*args)`` with the calling thread bound to the cores no pool worker
    of its own is bound to, its mask restored after (what a user's call of a compiled network
    gets: 1.3 us of affinity calls on a Zen 5 VM, against 1.7x when the caller shares the worker's
    core). The free cores are found once per calling thread (TVM's pool is per thread)."""

    def __init__(self):
        self._free: dict[int, set[int]] = {}

    def __call__(self, fn, *args):
        tid = threading.get_ident()
        free = self._free.get(tid)
        if free is None:
            free = self._free[tid] = free_cpus()
        before = _bind(free)
        try:
            return fn(*args)
        finally:
            if before is not None:
                os.sched_setaffinity(0, before)
