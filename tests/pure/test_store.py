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
    from graphselect.measure.jobs import Job
    from graphselect.measure.run import measure
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


def test_the_code_version_is_part_of_the_key():
    s = RecordStore(None)
    s.put(CTX, Measurement("w", "c", 1.0, 0.5, version="aaaa"))
    assert s.get(CTX, "w", "c", "aaaa").cold_ms == 1.0
    assert s.get(CTX, "w", "c", "bbbb") is None


def test_a_changed_schedule_is_measured_again_not_reused():
    """A record filed under an older code version is never handed to a job of the new one."""
    from graphselect.measure.jobs import Job
    from graphselect.measure.run import measure
    s = RecordStore(None)
    s.put(CTX, Measurement("w", "c", 1.0, 1.0, version="old"))
    built = []

    def build():
        built.append(1)
        raise RuntimeError("not buildable")
    out = measure([Job("w", "c", build, version="old")], target=None, ctx=CTX, store=s)
    assert not built and out[("w", "c")].cold_ms == 1.0
    out = measure([Job("w", "c", build, version="new")], target=None, ctx=CTX, store=s)
    assert built and not out[("w", "c")].ok


def test_code_version_follows_the_code_not_its_comments(tmp_path, monkeypatch):
    import importlib
    import sys
    from graphselect.codehash import source_hash
    monkeypatch.syspath_prepend(str(tmp_path))
    versions = []
    for i, src in enumerate(['"""doc"""\ndef f(x):\n    return x + 1\n',
                             '"""other doc"""\n# a comment\ndef f(x):\n    """f."""\n    return x + 1\n',
                             '"""doc"""\ndef f(x):\n    return x + 2\n']):
        (tmp_path / f"fam{i}.py").write_text(src)
        versions.append(source_hash(importlib.import_module(f"fam{i}")))
        sys.modules.pop(f"fam{i}")
    assert versions[0] == versions[1] != versions[2]
    from graphselect import candidates
    assert len({candidates.code_version(f) for f in candidates.FAMILIES}) == len(candidates.FAMILIES)


def test_records_taken_under_load_are_stale():
    from graphselect.measure.jobs import AGAIN, WARM_FLAG
    from graphselect.measure.local import LOAD_FLAG, LOAD_TOLERANCE, STALE_TOLERANCE, stale
    quiet = 0.1
    # a record is held to the tolerance its samples were: taken at 1.1-1.3x the quiet time, it is
    # re-timed (until 2026-12 such records were kept for good)
    assert STALE_TOLERANCE == LOAD_TOLERANCE
    assert not stale(Measurement("w", "c", 1.0, 1.0, load=0.1 * STALE_TOLERANCE * 0.99), quiet)
    assert stale(Measurement("w", "c", 1.0, 1.0, load=0.1 * STALE_TOLERANCE * 1.01), quiet)
    assert stale(Measurement("w", "c", 1.0, 1.0, load=0.12), quiet)
    assert stale(Measurement("w", "c", 1.0, 1.0, load=0.1, flag=f"{LOAD_FLAG} (x)"), quiet)
    # warm above cold: re-timed once; confirmed by the re-time, it stands
    assert stale(Measurement("w", "c", 1.0, 3.0, load=0.1, flag=f"{WARM_FLAG}: warm 3 ms, cold 1 ms"), quiet)
    assert not stale(Measurement("w", "c", 1.0, 3.0, load=0.1, flag=f"{WARM_FLAG}: warm 3 ms, cold 1 ms{AGAIN}"),
                     quiet)
    assert not stale(Measurement("w", "c", 1.0, 1.0, load=5.0), None)     # nothing to compare with yet
    # drifted against the quiet time, but the machine is no faster now than when it was taken:
    # timed again it would come out no better; now quiet again, it is re-timed
    slow = Measurement("w", "c", 1.0, 1.0, load=0.12)
    assert not stale(slow, quiet, now_ms=0.12 / STALE_TOLERANCE * 1.01)
    assert stale(slow, quiet, now_ms=0.12 / STALE_TOLERANCE * 0.99)
    assert stale(slow, quiet, now_ms=float("inf")) is stale(slow, quiet)    # no reading yet: the quiet time
    # a flag is re-timed whatever the state
    assert stale(Measurement("w", "c", 1.0, 1.0, load=0.1, flag=f"{LOAD_FLAG} (x)"), quiet, now_ms=1.0)


def test_a_warm_flag_the_re_time_repeats_is_confirmed():
    from graphselect.measure.jobs import AGAIN, WARM_FLAG
    from graphselect.measure.local import confirmed, stale
    flag = f"{WARM_FLAG}: warm 3 ms, cold 1 ms"
    old = Measurement("w", "c", 1.0, 3.0, flag=flag)
    new = confirmed(Measurement("w", "c", 1.0, 2.9, load=0.1, flag=flag), old)
    assert new.flag == flag + AGAIN and not stale(new, 0.1)
    assert confirmed(Measurement("w", "c", 1.0, 1.0), old).flag is None            # the re-time cleared it
    assert confirmed(Measurement("w", "c", 1.0, 2.9, flag=flag), None).flag == flag  # first time: re-timed next run


def test_every_record_version_covers_what_shapes_a_kernel_or_its_timing(monkeypatch):
    """graph.layers, the target's grids, the builder and the timing protocol are in every
    record's version (measure.protocol_version), and the reference kernel has its own."""
    from graphselect import codehash, target
    from graphselect.graph import layers
    from graphselect.measure import builder, jobs, local, protocol_version
    base = protocol_version()
    real = codehash._module_hash
    for module in (layers, target, builder, jobs, local):
        monkeypatch.setattr(codehash, "_module_hash", lambda m, mod=module: "edited" if m is mod else real(m))
        assert protocol_version() != base, module.__name__
        assert local.reference_version().endswith(protocol_version())
    monkeypatch.setattr(codehash, "_module_hash", real)
    assert protocol_version() == base


def test_records_list_and_drop(tmp_path):
    s = RecordStore(tmp_path / "r.sqlite")
    s.put(CTX, Measurement("conv2d a", "nchwc(x)", 1.0, 1.0))
    s.put(CTX, Measurement("conv2d b", "direct(y)", 1.0, 1.0, flag="timed under load (reference kernel 1.5x)"))
    s.put(Context("t", "other cpu", 2, "0.27"), Measurement("conv2d a", "nchwc(x)", 2.0, 2.0))
    assert len(s.records(CTX)) == 2 and len(s.records()) == 3
    assert [r["candidate"] for r in s.records(CTX, flagged=True)] == ["direct(y)"]
    assert [r["workload"] for r in s.records(None, match="nchwc")] == ["conv2d a", "conv2d a"]
    assert s.delete(CTX, flagged=True) == 1 and len(s.records(CTX)) == 1
    assert s.delete(CTX, key=("conv2d a", "nchwc(x)", "")) == 1 and s.records(CTX) == []
    assert len(s.records()) == 1                       # the other machine's record stays


def test_network_observations_roundtrip_per_context(tmp_path):
    from costmodels.calibration import KernelObservation, NetworkObservation
    s = RecordStore(tmp_path / "r.sqlite")
    net = NetworkObservation("n1", "model", 123, 5.0, 30, 4.0, 0.9, 0.7, 0.5)
    ks = [KernelObservation("n1", ("w", "c"), "nchwc", 0.5, 0.4, 0.55),
          KernelObservation("n1", ("w2", "c2"), "winograd", float("inf"), 0.4, 0.3)]
    names = ("input", "nchwc(ic_bn=16,oc_bn=32,reg_n=7)", "NCHW16c")
    s.put_network(CTX, net, ks, content="abc", choice=names)
    s.close()
    s = RecordStore(tmp_path / "r.sqlite")
    nets, kernels = s.networks(CTX)
    assert nets == [net] and kernels == ks
    assert s.networks(Context("t", "other cpu", 2, "0.27")) == ([], [])
    assert s.assignments(CTX, "abc") == [names] and s.assignments(CTX, "other") == []
    assert s.forget_networks(CTX) == 1 and s.networks(CTX) == ([], [])


def test_network_other_kinds_and_handoff_roundtrip_and_old_rows_read_without_them(tmp_path):
    import sqlite3

    from costmodels.calibration import NetworkObservation
    from graphselect.measure.store import NETWORKS
    # a store written before the kinds were kept: the table lacks the column
    db = sqlite3.connect(tmp_path / "r.sqlite")
    db.execute(f"CREATE TABLE {NETWORKS} (network TEXT PRIMARY KEY, model TEXT, target TEXT, cpu TEXT, "
               "threads INTEGER, tvm TEXT, footprint INTEGER, e2e_ms REAL, kernel_calls INTEGER, conv_innet_ms REAL, "
               "other_innet_ms REAL, other_cold_ms REAL, other_warm_ms REAL, content TEXT, choice TEXT, created REAL, "
               "other_incold_ms REAL)")
    db.execute(f"INSERT INTO {NETWORKS} VALUES ('old','m','{CTX.target}','{CTX.cpu}',{CTX.threads},'{CTX.tvm}',1,"
               "2.0,3,1.0,0.5,0.4,0.3,'c','',1.0,0.45)")
    db.commit()
    db.close()
    s = RecordStore(tmp_path / "r.sqlite")
    kinds = {"elementwise": (0.2, 0.1, 0.3, 4, 0.5, 4), "transform": (0.05, 0.05, 0.06, 1, 0.0, 0)}
    new = NetworkObservation("new", "m", 1, 2.0, 3, 1.0, 0.5, 0.25, 0.15, 0.36, kinds, 0.55)
    s.put_network(CTX, new, [])
    nets, _ = s.networks(CTX)
    assert [n.network for n in nets] == ["new", "old"]
    assert nets[0] == new and nets[0].other_kinds == kinds
    assert nets[1].other_kinds == {} and nets[1].other_incold_ms == 0.45
    assert nets[0].handoff_us == 0.55 and nets[1].handoff_us is None


def test_pruning_decisions_roundtrip_per_context_replace_and_forget(tmp_path):
    a, b = Context("llvm", "cpu-a", 2, "0.27"), Context("llvm", "cpu-b", 2, "0.27")
    path = tmp_path / "s.sqlite"
    s = RecordStore(path)
    s.put_pruned(a, {"w1": ("h1", [("c1", "v1", "predicted 2.00x the fastest")]), "w2": ("h2", [])})
    s.put_pruned(b, {"w1": ("hb", [("c9", "v1", "why")])})
    s.close()
    s = RecordStore(path)
    assert s.pruned(a) == {"w1": ("h1", [("c1", "v1", "predicted 2.00x the fastest")]), "w2": ("h2", [])}
    assert s.pruned(b) == {"w1": ("hb", [("c9", "v1", "why")])}
    s.put_pruned(a, {"w1": ("h3", [("c2", "v1", "again")])})          # replaces w1's, keeps w2's
    assert s.pruned(a)["w1"] == ("h3", [("c2", "v1", "again")]) and "w2" in s.pruned(a)
    # a row that does not read is left out, not an error
    s._db.execute("UPDATE pruned_v1 SET pruned='not json' WHERE workload='w2'")
    assert set(s.pruned(a)) == {"w1"}
    assert s.forget_pruned(a) == 2 and s.pruned(a) == {} and set(s.pruned(b)) == {"w1"}
    assert s.forget_pruned() == 1 and s.pruned(b) == {}
