"""Resolve the user's target string to a TVM target that really uses the CPU it runs on.

TVM 0.27 rejects option strings ("llvm -mcpu=native") and silently turns
{"kind": "llvm", "mcpu": "native"} into a generic CPU, so "llvm" is resolved here to the host's
LLVM CPU name with a dict target.

A target for another CPU (``-mtriple=aarch64-linux-gnu``, or another x86 ``-mcpu``) is
cross-compiled and can only be measured on that device, through an RPC runner
(``measure.rpc``); :func:`parse_target` refuses it otherwise. :func:`vector_isa` gives the
vector width and register count the candidate grids follow.
"""
from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from functools import lru_cache

from .errors import GraphSelectError


@dataclass(frozen=True)
class VectorIsa:
    """What the candidate grids assume of the target's SIMD unit."""
    lanes: int           # float32 lanes of one vector register
    registers: int       # vector registers
    # lower-precision units, named as lscpu names them: avx512_bf16, avx512_vnni, amx_bf16, amx_int8
    features: frozenset = frozenset()


AVX512 = VectorIsa(16, 32)       # what the grids assume when no target is given


def arch_of(triple: str) -> str:
    """A triple's architecture: aarch64-linux-gnu -> aarch64."""
    return triple.split("-", 1)[0]


@dataclass(frozen=True)
class TargetSpec:
    mcpu: str
    threads: int
    mattr: tuple[str, ...] = ()
    mtriple: str | None = None      # None: this machine's

    def tvm_target(self):
        import tvm
        d = {"kind": "llvm", "mcpu": self.mcpu, "num-cores": self.threads}
        if self.mtriple:
            d["mtriple"] = self.mtriple
        if self.mattr:
            d["mattr"] = list(self.mattr)
        return tvm.target.Target(d)

    @property
    def key(self) -> str:
        """Everything about the target that changes a timing (for the record store)."""
        return (f"llvm -mcpu={self.mcpu}" + (f" -mtriple={self.mtriple}" if self.mtriple else "")
                + (f" -mattr={','.join(self.mattr)}" if self.mattr else ""))

    @property
    def arch(self) -> str:
        """The triple's architecture (x86_64, aarch64, ...)."""
        return arch_of(self.mtriple or host_triple())

    @property
    def foreign(self) -> bool:
        """Whether this machine cannot run the target's code (another arch or another CPU)."""
        return self.arch != arch_of(host_triple()) or self.mcpu != host_cpu()

    @property
    def isa(self) -> VectorIsa:
        return isa_of(self.tvm_target())


# x86 CPUs LLVM knows with AVX-512 (16 float lanes, 32 registers) or AVX2 (8 lanes, 16 registers)
_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "icelake", "sapphirerapids", "emeraldrapids",
                "graniterapids", "tigerlake", "rocketlake", "znver4", "znver5", "x86-64-v4")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "znver1", "znver2",
              "znver3", "x86-64-v3")


def vector_isa(arch: str, mcpu: str, mattr=()) -> VectorIsa:
    """The SIMD unit of a target: AArch64's NEON (4 lanes, 32 registers), x86's AVX-512 (16, 32),
    AVX2 (8, 16) or SSE (4, 16), from the CPU name and -mattr."""
    attrs = {a.lstrip("+") for a in mattr if not a.startswith("-")}
    if arch in ("aarch64", "arm64"):
        return VectorIsa(4, 32)
    if arch not in ("x86_64", "i686", "i386"):
        return VectorIsa(4, 16)
    if any(a.startswith("avx512") for a in attrs) or mcpu.startswith(_AVX512_CPUS):
        return AVX512
    if "avx2" in attrs or mcpu.startswith(_AVX2_CPUS):
        return VectorIsa(8, 16)
    return VectorIsa(4, 16)


def isa_of(target) -> VectorIsa:
    """The SIMD unit of a ``tvm.target.Target`` (llvm), from its triple, CPU and -mattr, with the
    lower-precision units it has (:func:`precision_units`)."""
    import dataclasses
    attrs = target.attrs
    triple = str(attrs["mtriple"]) if "mtriple" in attrs else host_triple()
    mcpu = str(attrs["mcpu"]) if "mcpu" in attrs else host_cpu()
    mattr = tuple(str(a) for a in attrs["mattr"]) if "mattr" in attrs else ()
    isa = vector_isa(arch_of(triple), mcpu, mattr)
    return dataclasses.replace(isa, features=precision_units(target, here=arch_of(triple) == arch_of(host_triple())
                                                             and mcpu == host_cpu()))


# LLVM's feature names of the lower-precision units -> the names lscpu (and graphselect) use
_UNITS = {"avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni", "amx-bf16": "amx_bf16", "amx-int8": "amx_int8"}


def precision_units(target, here: bool) -> frozenset:
    """The lower-precision units of an x86 ``target`` as LLVM knows its CPU and -mattr. For this
    machine (``here``) only those the kernel also lists in /proc/cpuinfo: a hypervisor may hide a
    unit the CPU model has (AMX tile data needs the OS's consent too)."""
    import tvm.target.codegen as cg
    if str(target.kind.name) != "llvm":
        return frozenset()
    units = {ours for llvm, ours in _UNITS.items() if cg.target_has_features(llvm, target)}
    if here and units:
        units &= cpu_flags()
    return frozenset(units)


@lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """This machine's CPU flags (/proc/cpuinfo), empty where they cannot be read."""
    return frozenset((_cpuinfo("flags") or "").split())


def _cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in /proc/cpuinfo (None where it cannot be read); the key
    matches whole (``model`` is not ``model name``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return None


@lru_cache(maxsize=None)
def host_triple() -> str:
    import tvm.target.codegen as cg
    return str(cg.llvm_get_system_triple())


def cross_compiler(spec: TargetSpec, cc: str | None = None) -> str | None:
    """The C compiler that links libraries for ``spec``: ``cc`` if given, None (the host's) for
    this machine's architecture, else ``<triple>-gcc`` found on PATH (``aarch64-linux-gnu-gcc``)."""
    import shutil
    if cc:
        if shutil.which(cc) is None:
            raise GraphSelectError(f"cross compiler {cc!r} not found on PATH")
        return cc
    if spec.arch == arch_of(host_triple()):
        return None
    parts = spec.mtriple.split("-")
    names = [spec.mtriple + "-gcc"]
    if len(parts) == 4:                      # aarch64-unknown-linux-gnu -> aarch64-linux-gnu-gcc
        names.append("-".join([parts[0]] + parts[2:]) + "-gcc")
    for n in names:
        if shutil.which(n):
            return n
    raise GraphSelectError(f"no cross compiler for {spec.mtriple} found on PATH (tried {', '.join(names)}); "
                           f"install one (Debian: gcc-{parts[0].replace('_', '-')}-linux-gnu) or pass --cross-cc")


@lru_cache(maxsize=None)
def host_cpu() -> str:
    import tvm.target.codegen as cg
    return str(cg.llvm_get_system_cpu())


def cpu_model() -> str:
    """The CPU's marketing name (part of the record key: the same mcpu covers many chips)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_id() -> str:
    """The marketing name with the x86 family and model where /proc/cpuinfo has them: what the
    machine probes that do not depend on the target (BLAS throughput, copy bandwidth, cache
    residency; ``hardware.json``) are kept under. "AMD EPYC" alone names Zen 3, 4 and 5 alike.

    >>> cpu_id().startswith(cpu_model())
    True
    """
    fam, model = _cpuinfo("cpu family"), _cpuinfo("model")
    return f"{cpu_model()} (family {fam} model {model})" if fam and model else cpu_model()


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


def parse_target(target: str | dict = "llvm", *, threads: int | None = None, remote: bool = False) -> TargetSpec:
    """Parse ``llvm``, ``llvm -mcpu=NAME [-mtriple=T] [-mattr=a,b]`` or a JSON/dict llvm target.

    Only CPU (llvm) targets are supported. One this machine cannot run (another CPU or
    architecture) needs ``remote``: graphselect measures every candidate on the device itself.
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
        mtriple = target.get("mtriple")
        mattr = target.get("mattr", ())
        mattr = tuple(mattr.split(",")) if isinstance(mattr, str) else tuple(mattr)
    else:
        parts = str(target).split()
        if not parts:
            raise GraphSelectError("empty target; use --target llvm")
        kind, mcpu, mattr, mtriple = parts[0], "native", (), None
        for p in parts[1:]:
            if p.startswith("-mcpu="):
                mcpu = p.split("=", 1)[1]
            elif p.startswith("-mtriple="):
                mtriple = p.split("=", 1)[1] or None
            elif p.startswith("-mattr="):
                mattr = tuple(a for a in p.split("=", 1)[1].split(",") if a)
            elif p.startswith("-num-cores="):
                threads = int(p.split("=", 1)[1])
            else:
                raise GraphSelectError(f"unknown target option {p!r} in {target!r}; "
                                       "supported: -mcpu=NAME, -mtriple=TRIPLE, -mattr=a,b, -num-cores=N")
    if kind != "llvm":
        raise GraphSelectError(f"target kind {kind!r} is not supported: graphselect selects CPU "
                               "kernels and measures them on this machine; use --target llvm")
    host = host_cpu()
    other_arch = mtriple is not None and arch_of(mtriple) != arch_of(host_triple())
    if mcpu in ("native", "host", None):
        mcpu = "generic" if other_arch else host
    spec = TargetSpec(mcpu=mcpu, threads=threads, mattr=mattr, mtriple=mtriple)
    if spec.foreign and not remote:
        # timings from this chip would select for the wrong one: measure on the device instead
        what = f"architecture {spec.arch!r}" if other_arch else f"CPU {mcpu!r}"
        raise GraphSelectError(f"target {what} is not this machine's ({host_triple()}, {host!r}): graphselect "
                               "measures on the device it selects for; start a TVM RPC server there and pass "
                               "--rpc-tracker HOST:PORT --rpc-key KEY, or use --target llvm for this machine")
    return spec
