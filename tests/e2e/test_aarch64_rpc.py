"""An aarch64 device emulated here: TVM's RPC server in an aarch64 Python under qemu-user
(``.ci/aarch64_env.sh`` builds it; CI sets GRAPHSELECT_REQUIRE_AARCH64=1 so that a missing
environment fails instead of skipping). Timing under emulation means nothing: these tests check
the flow (cross-compiled kernels measured on the device, records filed under it, the network
verified there against onnxruntime here, a library for the device exported)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphselect
import models
from graphselect.measure.jobs import TimingConfig
from tests.rpc_servers import Cluster

ENV = Path(os.environ.get("GRAPHSELECT_AARCH64")
           or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphselect" / "aarch64")
PYTHON = ENV / "python"
TARGET = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"
QUICK = TimingConfig(rounds=1, cold_repeat=2, warm_number=1, warm_repeat=1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One record store for the module: the CLI test finds what the API test measured."""
    return tmp_path_factory.mktemp("aarch64-records") / "records.sqlite"


@pytest.fixture(scope="module")
def aarch64(tmp_path_factory):
    if not PYTHON.exists():
        why = f"no aarch64 Python at {PYTHON}: run bash .ci/aarch64_env.sh"
        if os.environ.get("GRAPHSELECT_REQUIRE_AARCH64") == "1":
            pytest.fail(why)
        pytest.skip(why)
    c = Cluster(str(tmp_path_factory.mktemp("aarch64-rpc")))
    try:
        c.server("a64", python=(str(PYTHON),), threads=1, timeout=600)
        yield c
    finally:
        c.close()


def elf_machine(path) -> int:
    with open(path, "rb") as f:
        head = f.read(20)
    return int.from_bytes(head[18:20], "little")


def test_aarch64_optimize_under_qemu_matches_onnxruntime(aarch64, store, tmp_path):
    r = graphselect.optimize(models.build("tiny"), target=TARGET, rpc_tracker=aarch64.address, rpc_key="a64",
                             cache=store, benchmark_runs=2, timing=QUICK)
    rep = r.report
    assert rep["max_rel_err"] <= 1e-4                 # run on the aarch64 device, checked against onnxruntime
    assert "aarch64" in rep["cpu"] and rep["cpu"].endswith("rpc)")
    assert "-mtriple=aarch64-linux-gnu" in rep["target"]
    assert rep["records"]["jobs"] > 0 and rep["measured_e2e_ms"] > 0
    # NEON grids: channel blocks of 4 and 8 lanes, not AVX-512's 16 and 32
    nchwc = [c["key"] for L in rep["layers"] if L["kind"] == "conv" for c in L["candidates"] if c["family"] == "nchwc"]
    assert nchwc and all("oc_bn=16" not in k and "oc_bn=32" not in k for k in nchwc)
    paths = r.export(tmp_path / "out")
    assert elf_machine(paths["library"]) == 183          # EM_AARCH64
    with pytest.raises(graphselect.GraphSelectError, match="runs on that device"):
        r.run(np.zeros(r.input_shape, "float32"))


def test_aarch64_cli_over_rpc_reuses_the_device_records(aarch64, store, tmp_path):
    from graphselect.measure.jobs import WARM_FLAG
    from graphselect.measure.store import RecordStore
    st = RecordStore(store)
    try:
        mine = [x for x in st.records() if "aarch64" in x["cpu"]]
        flagged = sum(1 for x in mine if (x["flag"] or "").startswith(WARM_FLAG))
    finally:
        st.close()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "graphselect.cli", "optimize", "tiny", "--target", TARGET, "--rpc-tracker",
           aarch64.address, "--rpc-key", "a64", "--runs", "2", "-o", str(out), "--cache", str(store)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    assert elf_machine(out / "model.so") == 183
    rep = json.loads((out / "report.json").read_text())
    assert rep["records"]["jobs"] > 0
    # the API test's records, filed under the device: all reused but those it flagged warm-above-cold
    # (re-timed once by the next run)
    assert rep["records"]["reused"] == len(mine) - flagged
    assert rep["max_rel_err"] <= 1e-4 and "aarch64" in p.stdout and "via the RPC tracker" in p.stdout
