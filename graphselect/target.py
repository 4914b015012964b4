"""Resolve the user's target string to a TVM target that really uses this CPU.

TVM 0.27 rejects option strings ("llvm -mcpu=native") and silently turns
{"kind": "llvm", "mcpu": "native"} into a generic CPU, so "llvm" is resolved here to the host's
LLVM CPU name with a dict target.
"""
from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from functools import lru_cache

from .errors import GraphSelectError


@dataclass(frozen=True)
class TargetSpec:
    mcpu: str
    threads: int
    mattr: tuple[str, ...] = ()

    def tvm_target(self):
        import tvm
        d = {"kind": "llvm", "mcpu": self.mcpu, "num-cores": self.threads}
        if self.mattr:
            d["mattr"] = list(self.mattr)
        return tvm.target.Target(d)

    @property
    def key(self) -> str:
        """Everything about the target that changes a timing (for the record store)."""
        return f"llvm -mcpu={self.mcpu}" + (f" -mattr={','.join(self.mattr)}" if self.mattr else "")


@lru_cache(maxsize=None)
def host_cpu() -> str:
    import tvm.target.codegen as cg
    return str(cg.llvm_get_system_cpu())


def cpu_model() -> str:
    """The CPU's marketing name (part of the record key: the same mcpu covers many chips)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def runtime_tag(version: str) -> str:
    """The TVM runtime a timing depends on (part of the record key): the version and the thread
    pool's spin count, which decides whether workers sleep between kernels (graphselect sets
    it on import; a user may set another)."""
    spin = os.environ.get("TVM_THREAD_POOL_SPIN_COUNT")
    return version if spin is None else f"{version} spin={spin}"


def default_threads() -> int:
    env = os.environ.get("TVM_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def parse_target(target: str | dict = "llvm", *, threads: int | None = None) -> TargetSpec:
    """Parse ``llvm``, ``llvm -mcpu=NAME [-mattr=a,b]`` or a JSON/dict llvm target.

    Only CPU (llvm) targets that this machine can run are supported: graphselect measures
    every candidate on the machine it runs on.
    """
    threads = default_threads() if threads is None else threads
    if threads < 1:
        raise GraphSelectError(f"threads must be >= 1, got {threads}")
    if isinstance(target, str) and target.strip().startswith("{"):
        try:
            target = json.loads(target)
        except json.JSONDecodeError as e:
            raise GraphSelectError(f"target {target!r} is not valid JSON: {e}") from None
    if isinstance(target, dict):
        kind = target.get("kind")
        mcpu = target.get("mcpu", "native")
        mattr = target.get("mattr", ())
        mattr = tuple(mattr.split(",")) if isinstance(mattr, str) else tuple(mattr)
    else:
        parts = str(target).split()
        if not parts:
            raise GraphSelectError("empty target; use --target llvm")
        kind, mcpu, mattr = parts[0], "native", ()
        for p in parts[1:]:
            if p.startswith("-mcpu="):
                mcpu = p.split("=", 1)[1]
            elif p.startswith("-mattr="):
                mattr = tuple(a for a in p.split("=", 1)[1].split(",") if a)
            elif p.startswith("-num-cores="):
                threads = int(p.split("=", 1)[1])
            else:
                raise GraphSelectError(f"unknown target option {p!r} in {target!r}; "
                                       "supported: -mcpu=NAME, -mattr=a,b, -num-cores=N")
    if kind != "llvm":
        raise GraphSelectError(f"target kind {kind!r} is not supported: graphselect selects CPU "
                               "kernels and measures them on this machine; use --target llvm")
    host = host_cpu()
    if mcpu in ("native", "host", None):
        mcpu = host
    if mcpu != host:
        # A foreign CPU could not be measured here (no remote runner yet); refuse rather than
        # select with timings from the wrong chip.
        raise GraphSelectError(f"target CPU {mcpu!r} is not this machine's CPU ({host!r}); "
                               "graphselect measures on the local CPU, use --target llvm")
    return TargetSpec(mcpu=mcpu, threads=threads, mattr=mattr)
