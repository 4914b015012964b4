"""Measuring through TVM's RPC tracker: a tracker and two servers on loopback, as a user runs them."""
import logging
import subprocess
import sys

import numpy as np
import pytest

import graphselect
import models
from graphselect.errors import GraphSelectError
from graphselect.measure import rpc
from graphselect.measure.jobs import TimingConfig
from graphselect.measure.store import RecordStore
from tests.rpc_servers import Cluster

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(str(tmp_path))
    try:
        yield c
    finally:
        c.close()


def _device_records(store_path, report):
    st = RecordStore(store_path)
    try:
        return [r for r in st.records() if r["cpu"] == report["cpu"]]
    finally:
        st.close()


def test_optimize_on_two_servers_matches_onnxruntime_and_files_records_by_device(cluster, tmp_path):
    cluster.server("cpu")
    cluster.server("cpu")
    assert rpc.servers(rpc.parse_tracker(cluster.address, "cpu")) == 2
    store = tmp_path / "records.sqlite"
    r = graphselect.optimize(models.build("tiny"), cache=store, rpc_tracker=cluster.address, rpc_key="cpu",
                             rpc_sessions=2, benchmark_runs=5, timing=QUICK)
    rep = r.report
    assert rep["runner"] == {"kind": "rpc", "tracker": cluster.address, "key": "cpu", "sessions": 2}
    assert rep["max_rel_err"] <= 1e-4           # verified on the device against onnxruntime here
    assert rep["measured_e2e_ms"] > 0 and rep["onnxruntime_ms"] is None
    # records are filed under what the server reported (its CPU, triple and thread count)
    assert rep["cpu"].endswith("rpc)") and rep["threads"] == 1
    recs = _device_records(store, rep)
    rec = rep["records"]
    assert rec["reused"] == 0 and len(recs) == rec["new"] + rec["retimed"] == rec["jobs"] - len(rec["pruned"]) > 0
    assert all(x["threads"] == 1 for x in recs)
    # the exported library is the device's; a second run reuses every record
    paths = r.export(tmp_path / "out")
    assert paths["library"].stat().st_size > 0
    r2 = graphselect.optimize(models.build("tiny"), cache=store, rpc_tracker=cluster.address, rpc_key="cpu",
                              benchmark_runs=0, timing=QUICK)
    # every record but those flagged warm-above-cold, which a second run re-times once
    from graphselect.measure.jobs import WARM_FLAG
    warm_flagged = sum(1 for x in recs if (x.get("flag") or "").startswith(WARM_FLAG))
    assert r2.report["records"]["reused"] == len(recs) - warm_flagged
    # with the first run's records the parameter model may now predict that a candidate it pruned can
    # win: such a candidate is timed (and stored) by the second run
    now = len(_device_records(store, rep))
    assert now == len(recs) + r2.report["records"]["new"]
    x = np.random.default_rng(0).standard_normal(r.input_shape).astype("float32")
    assert np.allclose(r.run(x), r2.run(x), atol=1e-5)      # same device arch as here: runs here too
    # the device's records are re-timed on the device
    p = subprocess.run([sys.executable, "-m", "graphselect.cli", "records", "retime", "tiny", "--match", "conv2d",
                        "--rpc-tracker", cluster.address, "--rpc-key", "cpu", "--cache", str(store)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    n = int(p.stderr.rsplit("re-timed ", 1)[1].split()[0])
    assert 0 < n <= now and len(_device_records(store, rep)) == now


def test_a_server_that_dies_mid_measure_loses_nothing(cluster, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="graphselect.measure.rpc")
    cluster.server("cpu")
    doomed = cluster.server("cpu")
    killed = []

    def progress(stage, done, total, msg):
        if stage == "measure" and done >= 8 and not killed:
            cluster.kill(doomed)          # the server and the session it is serving
            killed.append(done)

    store = tmp_path / "records.sqlite"
    r = graphselect.optimize(models.build("tiny"), cache=store, rpc_tracker=cluster.address, rpc_key="cpu",
                             rpc_sessions=2, benchmark_runs=0, timing=QUICK, progress=progress)
    assert killed and killed[0] < r.report["records"]["jobs"]
    assert "died" in caplog.text and "its work goes to another" in caplog.text   # the retry path ran
    assert r.report["max_rel_err"] <= 1e-4
    recs = _device_records(store, r.report)
    rec = r.report["records"]
    assert len(recs) == rec["jobs"] - len(rec["pruned"])    # every job not pruned was measured and kept
    assert all(x["error"] is None for x in recs)
    assert rpc.servers(rpc.parse_tracker(cluster.address, "cpu")) == 1


def test_unreachable_tracker_and_empty_key_are_clear_errors(cluster):
    from tests.rpc_servers import free_port
    with pytest.raises(GraphSelectError, match="cannot reach the RPC tracker"):
        graphselect.optimize(models.build("tiny"), cache=None, rpc_tracker=f"127.0.0.1:{free_port()}",
                             rpc_key="cpu")
    with pytest.raises(GraphSelectError, match="no RPC server is registered under key 'nobody'"):
        graphselect.optimize(models.build("tiny"), cache=None, rpc_tracker=cluster.address, rpc_key="nobody")
    with pytest.raises(GraphSelectError, match="HOST:PORT"):
        graphselect.optimize(models.build("tiny"), cache=None, rpc_tracker="localhost", rpc_key="cpu")
    with pytest.raises(GraphSelectError, match="needs --rpc-key"):
        graphselect.optimize(models.build("tiny"), cache=None, rpc_tracker=cluster.address)
    with pytest.raises(GraphSelectError, match="--rpc-load-timeout must be a positive"):
        graphselect.optimize(models.build("tiny"), cache=None, rpc_tracker=cluster.address, rpc_key="cpu",
                             rpc_load_timeout=0)


def test_a_device_that_stops_answering_fails_in_seconds():
    """A network load that does not return is an error naming the device after the load
    timeout, not a wait for the server's session timeout (600 s)."""
    import threading
    import time
    from graphselect.measure.rpc import RemoteNetwork, within
    assert within(1.0, lambda: 7, "never") == 7
    with pytest.raises(ZeroDivisionError):                 # the call's own error comes through
        within(1.0, lambda: 1 / 0, "never")
    hang = threading.Event()

    class HungSession:                                     # a session whose server never answers
        def upload(self, *_a):
            hang.wait(30)

    t0 = time.perf_counter()
    with pytest.raises(GraphSelectError, match="the device did not load the network within 0.5 s"):
        RemoteNetwork(HungSession(), None, None, library=__file__, timeout=0.5)
    assert time.perf_counter() - t0 < 5
    hang.set()


def test_a_finished_run_leaves_the_single_server_free(cluster):
    """The device's one server is free as soon as optimize returns: a finished run's sessions are
    released, not left to the garbage collector (the next run's request waited 600 s for them)."""
    import gc
    cluster.server("one")
    gc.disable()               # as in a process that allocates little after the run: no collection
    try:
        r = graphselect.optimize(models.build("tiny"), cache=None, rpc_tracker=cluster.address, rpc_key="one",
                                 benchmark_runs=2, timing=QUICK)
        assert r.report["max_rel_err"] <= 1e-4
        cfg = rpc.parse_tracker(cluster.address, "one")
        sess = rpc.within(20.0, lambda: rpc.open_session(cfg), "the server was still held by the finished run")
        assert rpc.alive(sess)
        del sess
    finally:
        gc.enable()
