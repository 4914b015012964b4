"""What a user gets wrong, one row each: exit code 2, one line on stderr that names the problem,
no traceback, nothing written under the output folder's final names."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from graphselect import cli


def _conv_model(x_shape=(1, 3, 8, 8)):
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, 8, 6, 6] if x_shape == (1, 3, 8, 8) else ["N", 8, "h", "w"])],
                          [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _external(tmp, location):
    d = tmp / "ext"
    d.mkdir()
    onnx.save_model(_conv_model(), str(d / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    m = onnx.load(str(d / "m.onnx"), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save(m, str(d / "bad.onnx"))
    return d / "bad.onnx"


def _write(tmp, name, data):
    p = tmp / name
    p.write_bytes(data) if isinstance(data, bytes) else p.write_text(data)
    return p


def m_truncated(tmp):
    raw = _conv_model().SerializeToString()
    return [str(_write(tmp, "trunc.onnx", raw[: len(raw) // 2]))]


def m_text(tmp):
    return [str(_write(tmp, "notes.onnx", "this is not a model\n"))]


def m_missing(tmp):
    return [str(tmp / "nope.onnx")]


def m_directory(tmp):
    (tmp / "adir.onnx").mkdir()
    return [str(tmp / "adir.onnx")]


def m_unsupported(tmp):
    m = _conv_model()
    m.graph.node.append(helper.make_node("MyOp", ["y"], ["z"], name="custom", domain="com.example"))
    m.graph.output[0].name = "z"
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    p = tmp / "custom.onnx"
    onnx.save(m, str(p))
    return [str(p)]


def m_dynamic(tmp):
    p = tmp / "dyn.onnx"
    onnx.save(_conv_model(("N", 3, "H", "W")), str(p))
    return [str(p)]


def m_outside(tmp):
    return [str(_external(tmp, "../../../etc/passwd"))]


def m_ext_missing(tmp):
    return [str(_external(tmp, "gone.bin"))]


def m_ok(tmp):
    p = tmp / "ok.onnx"
    onnx.save(_conv_model(), str(p))
    return [str(p)]


# (id, model, extra args, env, words the message must contain)
ROWS = [
    ("truncated", m_truncated, [], {}, ["cannot load", "trunc.onnx"]),
    ("text file", m_text, [], {}, ["cannot load", "notes.onnx"]),
    ("missing file", m_missing, [], {}, ["not found", "nope.onnx"]),
    ("directory", m_directory, [], {}, ["folder", "adir.onnx"]),
    ("unsupported op", m_unsupported, [], {}, ["com.example.MyOp", "custom"]),
    ("dynamic shape", m_dynamic, [], {}, ["dynamic shape", "--input-shape x:"]),
    ("external data outside", m_outside, [], {}, ["outside"]),
    ("external data missing", m_ext_missing, [], {}, ["gone.bin"]),
    ("unknown target", m_ok, ["--target", "cuda"], {}, ["target", "cuda"]),
    ("unknown family", m_ok, ["--families", "direct,fft"], {}, ["fft", "direct"]),
    ("unwritable output", m_ok, ["-o", "/proc/graphselect-nope/out"], {}, ["output folder", "-o"]),
    ("bad hardware file", m_ok, [], {"GRAPHSELECT_HARDWARE": "BADFILE"}, ["GRAPHSELECT_HARDWARE", "unset"]),
    ("negative budget", m_ok, ["--cache-budget", "-1"], {}, ["cache budget", ">= 0"]),
    ("threads 0", m_ok, ["--threads", "0"], {}, ["threads", ">= 1"]),
    ("shape rank mismatch", m_ok, ["--input-shape", "x:1,3,8"], {}, ["rank 4", "[1, 3, 8]"]),
    ("shape of unknown input", m_ok, ["--input-shape", "images:1,3,8,8"], {}, ["'images'", "'x'"]),
    ("shape that does not fit", m_ok, ["--input-shape", "x:1,4,8,8"], {}, ["channel", "[1, 4, 8, 8]", "--input-shape"]),
    ("dp on a graph with a residual", lambda tmp: ["tiny"], ["--solver", "dp", "--cache-budget", "off"], {},
     ["dp", "cp-sat"]),
    ("dp with the cache term", m_ok, ["--solver", "dp"], {}, ["dp", "--cache-budget off"]),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_clear_line(row, tmp_path, monkeypatch, capsys):
    _id, make, extra, env, words = row
    out = tmp_path / "out"
    for k, v in env.items():
        bad = tmp_path / "hw.json"
        bad.write_text("{not json")
        monkeypatch.setenv(k, str(bad) if v == "BADFILE" else v)
    argv = ["optimize", *make(tmp_path), "--no-cache", "--runs", "0"]
    if "-o" not in extra:
        argv += ["-o", str(out)]
    rc = cli.main(argv + extra)
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("error:")]
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not out.exists() or not any(out.iterdir())


def test_unwritable_cache_falls_back_to_memory(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "graphselect.cli", "optimize", *m_ok(tmp_path), "--cache",
                        "/proc/graphselect-nope/records.sqlite", "--runs", "0", "--families", "direct", "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "in memory" in r.stderr and "/proc/graphselect-nope" in r.stderr
    assert (out / "model.so").exists()


def test_ctrl_c_during_measurement_keeps_records(tmp_path):
    """SIGINT while kernels are being timed: exit 130, the message says the records are kept, no
    output written; the rerun reuses what was measured."""
    model = tmp_path / "m.onnx"
    models.save("resnet18_half", model)
    out = tmp_path / "out"
    env = dict(os.environ, GRAPHSELECT_CACHE=str(tmp_path))
    cmd = [sys.executable, "-m", "graphselect.cli", "optimize", str(model), "-o", str(out), "--runs", "0",
           "--families", "direct"]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    t0 = time.time()
    for line in p.stderr:                   # progress lines: "measure  k/N ..." once a few are stored
        seen.append(line)
        parts = line.split()
        if len(parts) > 3 and parts[2] == "measure" and "/" in parts[3] and int(parts[3].split("/")[0]) >= 3:
            break
        assert time.time() - t0 < 300, "".join(seen)
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    assert p.wait(timeout=120) == 130, "".join(seen) + rest
    assert "interrupted" in rest and "kept" in rest and "Traceback" not in rest
    assert not out.exists() or not any(out.iterdir())
    from graphselect.measure.store import RecordStore
    store = RecordStore(tmp_path / "records.sqlite")
    kept = len(store.records(None))
    store.close()
    assert kept >= 3
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    import json
    rec = json.loads((out / "report.json").read_text())["records"]
    assert rec["reused"] >= 3
