import math

from graphselect.measure.store import Context, Measurement, RecordStore

CTX = Context(target="llvm -mcpu=znver4", cpu="AMD EPYC", threads=2, tvm="0.27.0")


def test_roundtrip_and_reuse_across_connections(tmp_path):
    path = tmp_path / "sub" / "records.sqlite"
    s = RecordStore(path)
    m = Measurement("conv2d n1 c64", "nchwc(ic_bn=16)", 0.51, 0.42, None, 0.2)
    s.put(CTX, m)
    s.close()
    s2 = RecordStore(path)
    assert s2.get(CTX, "conv2d n1 c64", "nchwc(ic_bn=16)") == m
    assert len(s2) == 1


def test_every_key_field_separates_records(tmp_path):
    s = RecordStore(tmp_path / "r.sqlite")
    s.put(CTX, Measurement("w", "c", 1.0, 0.5))
    for other in (Context("llvm -mcpu=skylake", CTX.cpu, 2, CTX.tvm), Context(CTX.target, "Intel", 2, CTX.tvm),
                  Context(CTX.target, CTX.cpu, 1, CTX.tvm), Context(CTX.target, CTX.cpu, 2, "0.26.0")):
        assert s.get(other, "w", "c") is None
    assert s.get(CTX, "w", "other") is None
    assert s.get(CTX, "other", "c") is None


def test_infinite_costs_survive_sqlite():
    s = RecordStore(None)
    s.put(CTX, Measurement("w", "c", math.inf, math.inf, "did not build"))
    got = s.get(CTX, "w", "c")
    assert got.cold_ms == math.inf and got.error == "did not build" and not got.ok


def test_replace_keeps_one_row():
    s = RecordStore(None)
    s.put(CTX, Measurement("w", "c", 1.0, 1.0))
    s.put(CTX, Measurement("w", "c", 2.0, 1.5))
    assert len(s) == 1 and s.get(CTX, "w", "c").cold_ms == 2.0


def test_jobs_sharing_a_workload_are_measured_once():
    from graphselect.measure.local import Job, measure
    built = []
    s = RecordStore(None)
    s.put(CTX, Measurement("w", "c1", 1.0, 1.0))

    def build():
        built.append(1)
        raise RuntimeError("not buildable")
    jobs = [Job("w", "c1", build), Job("w", "c2", build), Job("w", "c2", build)]
    out = measure(jobs, target=None, ctx=CTX, store=s)
    assert len(built) == 1                       # c1 from the store, c2 once
    assert out[("w", "c1")].cold_ms == 1.0 and not out[("w", "c2")].ok
    assert s.get(CTX, "w", "c2") is None         # build failures are not cached


def test_runtime_tag_keys_records_by_the_thread_pool_spin_count(monkeypatch, tmp_path):
    from graphselect.target import runtime_tag
    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    assert runtime_tag("0.27.0") == "0.27.0"
    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "1000000")
    tagged = runtime_tag("0.27.0")
    assert tagged == "0.27.0 spin=1000000"
    store = RecordStore(tmp_path / "r.sqlite")
    store.put(Context(CTX.target, CTX.cpu, 2, "0.27.0"), Measurement("w", "c", 2.0, 1.0))
    assert store.get(Context(CTX.target, CTX.cpu, 2, tagged), "w", "c") is None
    assert store.get(Context(CTX.target, CTX.cpu, 2, "0.27.0"), "w", "c").cold_ms == 2.0
