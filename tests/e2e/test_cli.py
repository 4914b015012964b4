"""The command line on small models, as a user runs it."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import models


def run(*args, cwd=None, env_extra=None):
    env = dict(os.environ, GRAPHSELECT_CACHE=str(cwd or "."), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "graphselect.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_zoo_list_and_build(tmp_path):
    r = run("zoo", "list")
    assert r.returncode == 0
    for name in ("resnet18", "resnet50", "vgg11", "squeezenet1_1", "inception", "tiny"):
        assert name in r.stdout
    out = tmp_path / "m" / "tiny.onnx"
    r = run("zoo", "build", "tiny", "-o", str(out))
    assert r.returncode == 0, r.stderr
    onnx.checker.check_model(onnx.load(out))
    assert not list(out.parent.glob(".*partial*"))


def test_optimize_writes_library_module_and_report(tmp_path):
    model = tmp_path / "tiny.onnx"
    models.save("tiny", model)
    out = tmp_path / "out"
    r = run("optimize", str(model), "--target", "llvm", "-o", str(out), "--runs", "5", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for f in ("model.so", "module.py", "report.json", "report.html"):
        assert (out / f).stat().st_size > 0, f
    rep = json.loads((out / "report.json").read_text())
    assert rep["conv_layers"] == 3
    assert rep["max_rel_err"] <= 1e-4
    assert rep["measured_e2e_ms"] > 0 and rep["onnxruntime_ms"] > 0
    assert "conv0" in r.stdout and "predicted" in r.stdout
    assert "measure" in r.stderr          # progress was shown
    assert "graphselect.family" in (out / "module.py").read_text()
    # the compiled library loads and runs on its own
    code = ("import tvm, numpy as np; from tvm import relax; ex = tvm.runtime.load_module(%r); "
            "vm = relax.VirtualMachine(ex, tvm.cpu()); "
            "print(vm['main'](tvm.runtime.tensor(np.zeros((1,3,32,32),'float32'))).numpy().shape)" % str(out / "model.so"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "(1, 10)" in p.stdout, p.stderr
    # a second run reuses every record it trusts and re-times the others: all those flagged when
    # taken (timed under load: on a busy CI machine most of them were), and of those taken while
    # the reference kernel ran slower than the quiet time stored at the end of the first run, the
    # ones the machine is now fast enough to time better (its state now is read by the second run)
    untrusted = _untrusted(tmp_path / "records.sqlite")
    flagged = _untrusted(tmp_path / "records.sqlite", now_ms=1e9)
    stored = _stored(tmp_path / "records.sqlite")
    r2 = run("optimize", str(model), "-o", str(out), "--runs", "0", "--no-verify", cwd=tmp_path)
    assert r2.returncode == 0, r2.stderr
    rep2 = json.loads((out / "report.json").read_text())
    rec = rep2["records"]
    assert rec["jobs"] == rep["records"]["jobs"]
    # every job is accounted for: a record reused or re-timed, timed anew, or pruned (measure.scouts)
    assert rec["reused"] + rec["retimed"] + rec["new"] + len(rec["pruned"]) == rec["jobs"]
    assert rec["reused"] + rec["retimed"] == stored - 1        # every record the first run stored but the reference
    assert flagged <= rec["retimed"] <= untrusted, rec


def _stored(path):
    from graphselect.measure.store import RecordStore
    store = RecordStore(path)
    try:
        return len(store.records())
    finally:
        store.close()


def _untrusted(path, now_ms=None):
    """How many of a store's records the next run must re-time, by the store's own quiet time and
    the reference's time ``now_ms`` (None: the quiet time alone; huge: flagged records only)."""
    from graphselect.measure.local import REFERENCE, reference_version, stale
    from graphselect.measure.store import Measurement, RecordStore
    store = RecordStore(path)
    try:
        rows = store.records()
        ref = [r for r in rows if (r["workload"], r["candidate"], r["version"]) == (*REFERENCE, reference_version())]
        assert len(ref) == 1, "the first run stores the reference kernel's quiet time"
        quiet = ref[0]["cold_ms"]
        return sum(stale(Measurement(r["workload"], r["candidate"], r["cold_ms"], r["warm_ms"], r["error"],
                                     load=r["load"], flag=r["flag"]), quiet, now_ms)
                   for r in rows if r["workload"] != REFERENCE[0])
    finally:
        store.close()


def test_zoo_build_qdq_writes_a_quantized_model_and_files_are_not_requantized(tmp_path):
    out = tmp_path / "tiny-qdq.onnx"
    r = run("zoo", "build", "tiny", "--qdq", "-o", str(out))
    assert r.returncode == 0, r.stderr
    m = onnx.load(out)
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("QuantizeLinear") > 0 and ops.count("DequantizeLinear") > ops.count("QuantizeLinear")
    assert "BatchNormalization" not in ops                # folded into the convs before quantizing
    r = run("optimize", str(out), "--qdq")
    assert r.returncode == 2 and "zoo models only" in r.stderr and "Traceback" not in r.stderr


def test_missing_file_is_a_clear_error(tmp_path):
    r = run("optimize", str(tmp_path / "nope.onnx"))
    assert r.returncode == 2
    assert "model file not found" in r.stderr and "Traceback" not in r.stderr


def test_unsupported_op_names_the_op(tmp_path):
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1], name="c0"),
                           helper.make_node("Det", ["c"], ["y"], name="det0")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(np.ones((4, 4, 1, 1), "float32"), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "det.onnx")        # Det: valid ONNX that TVM's importer does not take
    r = run("optimize", str(tmp_path / "det.onnx"), cwd=tmp_path)
    assert r.returncode == 2
    assert "Det" in r.stderr and "det0" in r.stderr and "Traceback" not in r.stderr


def test_dynamic_shape_needs_input_shape(tmp_path):
    m = models.build("tiny")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, tmp_path / "dyn.onnx")
    r = run("optimize", str(tmp_path / "dyn.onnx"), "--no-cache", cwd=tmp_path)
    assert r.returncode == 2 and "--input-shape" in r.stderr
    r = run("optimize", str(tmp_path / "dyn.onnx"), "--input-shape", "input:1,3,32,32", "--runs", "0",
            "-o", str(tmp_path / "o"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o" / "report.json").read_text())["input"]["shape"] == [1, 3, 32, 32]


def test_foreign_target_is_refused():
    r = run("optimize", "tiny", "--target", "cuda")
    assert r.returncode == 2 and "llvm" in r.stderr


def test_pytorch_exported_model(tmp_path):
    """A file written by PyTorch's exporter (tests/data/make_torch_fixture.py): dynamic batch,
    Constant nodes feeding Clip (ReLU6), unfolded BN, Dropout removed at export, Flatten + Gemm."""
    model = os.path.join(os.path.dirname(__file__), "..", "data", "torch_tiny.onnx")
    r = run("optimize", model, "--no-cache", cwd=tmp_path)
    assert r.returncode == 2 and "images:1,3,32,32" in r.stderr
    r = run("optimize", model, "--input-shape", "images:1,3,32,32", "--runs", "0", "-o", str(tmp_path / "o"),
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["conv_layers"] == 3 and rep["folded_batchnorm"] == 3
    assert rep["max_rel_err"] <= 1e-4
    convs = {l["name"]: l for l in rep["layers"] if l["kind"] == "conv"}
    assert convs["conv0"]["epilogue"] == "bias+clip(0.0,6.0)"     # ReLU6 fused into the stem conv
    assert convs["conv2"]["epilogue"] == "bias+res+relu"


def test_dp_solver_refuses_graphs_that_are_not_trees(tmp_path):
    r = run("optimize", "tiny", "--solver", "dp", "--cache-budget", "off", "--no-cache", "--runs", "0", cwd=tmp_path)
    assert r.returncode == 2 and "dp solver takes chains and trees" in r.stderr
    assert "measure" not in r.stderr            # refused before anything was measured


def test_optimize_refuses_a_thread_pool_of_another_size():
    """Timings filed under threads=N must be taken with N threads: a pool already started with
    another count is refused with a clear message (checked in a fresh process)."""
    import subprocess
    import sys
    code = ("import os; os.environ['TVM_NUM_THREADS'] = '1'\n"
            "import tvm; assert tvm.get_global_func('runtime.NumThreads')() == 1\n"
            "import graphselect, models\n"
            "try:\n"
            "    graphselect.optimize(models.build('tiny'), threads=2, cache=None, benchmark_runs=0)\n"
            "except graphselect.GraphSelectError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "refused: TVM's thread pool already runs 1 thread(s)" in out.stdout
    assert "TVM_NUM_THREADS=2" in out.stdout


def test_records_list_retime_and_drop(tmp_path):
    r = run("optimize", "tiny", "-o", str(tmp_path / "out"), "--runs", "0", "--no-verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ls = run("records", "list", cwd=tmp_path)
    assert ls.returncode == 0, ls.stderr
    n = int(ls.stderr.split(" record(s)")[0].split()[-1])
    assert n >= 20 and "conv2d n1 c16" in ls.stdout
    # --flagged lists the flagged records only: each with its flag (how many a real run flags
    # depends on the machine's load, so only the filter is checked, not a count)
    fl = run("records", "list", "--flagged", cwd=tmp_path)
    k = int(fl.stderr.split(" record(s)")[0].split()[-1])
    assert fl.returncode == 0 and k < n
    assert len(fl.stdout.splitlines()) == k and all(line[133:].strip() for line in fl.stdout.splitlines())
    rt = run("records", "retime", "tiny", "--match", "s2x2", cwd=tmp_path)
    assert rt.returncode == 0, rt.stderr
    lines = [l for l in rt.stdout.splitlines() if "->" in l]
    assert lines and all("s2x2" in l for l in lines)
    assert "re-timed" in rt.stderr
    dr = run("records", "drop", "--match", "s2x2", cwd=tmp_path)
    assert dr.returncode == 0 and f"dropped {len(lines)} record(s)" in dr.stdout
    assert "s2x2" not in run("records", "list", cwd=tmp_path).stdout
    bad = run("records", "drop", cwd=tmp_path)
    assert bad.returncode == 2 and "say what to drop" in bad.stderr
    missing = run("records", "list", "--cache", str(tmp_path / "none.sqlite"), cwd=tmp_path)
    assert missing.returncode == 2 and "no record store" in missing.stderr
