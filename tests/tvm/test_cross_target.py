"""Targets for other CPUs: parsing, the vector unit the grids follow, cross-compiled kernels."""
import shutil
import struct
import sys

import pytest

from graphselect.candidates import nchwc, propose
from graphselect.errors import GraphSelectError
from graphselect.graph.layers import ConvSpec
from graphselect.measure.builder import Builder
from graphselect.target import AVX512, VectorIsa, cross_compiler, isa_of, parse_target, vector_isa

SPEC = ConvSpec(1, 32, 14, 14, 32, (3, 3), (1, 1), (1, 1, 1, 1), bias=True, clip_lo=0.0)
HAVE_CC = shutil.which("aarch64-linux-gnu-gcc") is not None


def elf_machine(path) -> int:
    with open(path, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF"
    return struct.unpack("<H", head[18:20])[0]          # e_machine: 62 x86-64, 183 AArch64


def test_a_foreign_target_needs_a_device_and_names_the_way_there():
    with pytest.raises(GraphSelectError, match="--rpc-tracker"):
        parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")
    with pytest.raises(GraphSelectError, match="--rpc-tracker"):
        parse_target("llvm -mcpu=some-other-cpu")
    s = parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon", remote=True, threads=4)
    assert (s.arch, s.mcpu, s.threads, s.foreign) == ("aarch64", "cortex-a72", 4, True)
    assert "-mtriple=aarch64-linux-gnu" in s.key and s.key != parse_target("llvm").key
    t = s.tvm_target()
    assert str(t.attrs["mtriple"]) == "aarch64-linux-gnu" and isa_of(t) == VectorIsa(4, 32)
    assert parse_target("llvm -mtriple=aarch64-linux-gnu", remote=True).mcpu == "generic"
    assert not parse_target("llvm").foreign


def test_vector_units():
    assert vector_isa("aarch64", "cortex-a72") == VectorIsa(4, 32)
    assert vector_isa("x86_64", "znver5") == AVX512 == vector_isa("x86_64", "x86-64", ("+avx512f",))
    assert vector_isa("x86_64", "haswell") == VectorIsa(8, 16)
    assert vector_isa("x86_64", "x86-64") == VectorIsa(4, 16)


def test_grids_follow_the_vector_unit():
    neon = propose(SPEC, ["nchwc"], None, VectorIsa(4, 32))
    avx = propose(SPEC, ["nchwc"], None, AVX512)
    assert {c.param("oc_bn") for c in neon} == {4, 8}
    assert {c.param("oc_bn") for c in avx} == {16, 32}
    # register tiles: reg_n vectors of oc_bn floats within half the registers
    for c in neon:
        assert c.param("reg_n") * -(-c.param("oc_bn") // 4) <= 16
    assert {c.key for c in propose(SPEC, ["nchwc"])} == {c.key for c in avx}     # the default is AVX-512's


def test_cross_compiler_is_found_from_the_triple_or_refused():
    s = parse_target("llvm -mtriple=aarch64-linux-gnu", remote=True)
    if HAVE_CC:
        assert cross_compiler(s) == "aarch64-linux-gnu-gcc"
        assert cross_compiler(parse_target("llvm -mtriple=aarch64-unknown-linux-gnu", remote=True)) \
            == "aarch64-linux-gnu-gcc"
    with pytest.raises(GraphSelectError, match="not found"):
        cross_compiler(s, "no-such-gcc")
    assert cross_compiler(parse_target("llvm")) is None


@pytest.mark.skipif(not HAVE_CC, reason="needs aarch64-linux-gnu-gcc (.ci/run installs it)")
@pytest.mark.parametrize("workers", [1, 2])
def test_builder_links_aarch64_libraries(workers):
    s = parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72", remote=True, threads=2)
    target = s.tvm_target()
    cand = next(iter(nchwc.propose(SPEC, None, s.isa)))
    func = nchwc.build(cand, SPEC, target, "main")
    with Builder(target, workers, cc=cross_compiler(s), files=True) as b:
        out = b.compile_all([func, func])
        for path in out:
            assert isinstance(path, str), path
            assert elf_machine(path) == 183
    host = parse_target("llvm").tvm_target()
    with Builder(host, 1, files=True) as b:
        [path] = b.compile_all([nchwc.build(cand, SPEC, host, "main")])
        assert elf_machine(path) == elf_machine(sys.executable)      # this machine's
