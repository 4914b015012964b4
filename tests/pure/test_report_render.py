"""The HTML page and the terminal summary rendered from a report dict (no TVM, no measurements)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from graphselect.report.html import render_html
from graphselect.report.terminal import summary_table

DASH = "—"


# ---------------------------------------------------------------------------------------------
# a fake report with the keys graphselect.report.build.make_report emits

def _cand(family, params, cold, warm=None, error=None):
    key = f"{family}(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")"
    return {"key": key, "family": family, "cold_ms": cold, "warm_ms": warm if warm is not None or cold is None
            else round(cold * 0.8, 4), "error": error}


def _conv(name, onnx_name, shape, epilogue, gflop, cands, chosen, greedy=None, in_layout="NCHW",
          out_layout="NCHW", weight_layout="OIHW", weight_bytes=0):
    ok = [c for c in cands if c["cold_ms"] is not None]
    fam_best = {}
    for c in ok:
        fam_best[c["family"]] = min(fam_best.get(c["family"], float("inf")), c["cold_ms"])
    ch = next(c for c in cands if c["key"] == chosen)
    fam = ch["family"]
    params = dict(kv.split("=") for kv in chosen[len(fam) + 1:-1].split(","))
    return {"name": name, "kind": "conv", "op": "relax.nn.conv2d", "onnx_name": onnx_name,
            "out_shape": [1, 16, 32, 32], "chosen": chosen, "greedy": greedy or chosen,
            "cost_ms": ch["cold_ms"],
            "workload": f"conv2d n1 c{shape} epi={epilogue}", "shape": shape, "epilogue": epilogue,
            "gflop": gflop, "family": fam, "params": {k: int(v) for k, v in params.items()},
            "in_layout": in_layout, "out_layout": out_layout, "weight_layout": weight_layout,
            "weight_bytes": weight_bytes, "workspace_bytes": 0, "sparsity": 0.0,
            "candidates": cands, "best_by_family_ms": fam_best,
            "fastest_alone": min(ok, key=lambda c: c["cold_ms"])["key"] if ok else None}


def _other(name, kind, op, layout, cost, onnx_name=""):
    return {"name": name, "kind": kind, "op": op, "onnx_name": onnx_name, "out_shape": [1, 16, 16, 16],
            "chosen": layout, "greedy": layout, "cost_ms": cost, "layout": layout}


def fake_report(*, measured=True, conv0_name="conv0"):
    c0 = [_cand("direct", {"oc_tile": 4, "vec": 8}, 0.2113), _cand("direct", {"oc_tile": 8, "vec": 8}, 0.1987),
          _cand("nchwc", {"ic_bn": 3, "oc_bn": 8, "reg_n": 16}, 0.1542),
          _cand("nchwc", {"ic_bn": 3, "oc_bn": 16, "reg_n": 8}, None, error="BuildError: tensorize failed")]
    c1 = [_cand("direct", {"oc_tile": 8, "vec": 8}, 0.4410),
          _cand("nchwc", {"ic_bn": 8, "oc_bn": 8, "reg_n": 16}, 0.2125),
          _cand("nchwc", {"ic_bn": 16, "oc_bn": 16, "reg_n": 8}, 0.1904)]
    c2 = [_cand("direct", {"oc_tile": 4, "vec": 4}, 0.0921),
          _cand("nchwc", {"ic_bn": 16, "oc_bn": 16, "reg_n": 4}, 0.0613),
          _cand("nchwc", {"ic_bn": 16, "oc_bn": 8, "reg_n": 4}, None, error="not measured")]
    layers = [
        # conv0: chosen is the fastest alone
        _conv(conv0_name, "/conv1/Conv", "3->16 3x3/1 32x32", "bias+relu", 0.00885, c0,
              "nchwc(ic_bn=3,oc_bn=8,reg_n=16)", in_layout="NCHW3c", out_layout="NCHW8c",
              weight_layout="OIHW3i8o", weight_bytes=1792),
        _other("maxpool0", "agnostic", "relax.nn.max_pool2d", "NCHW8c", 0.0123, "/pool/MaxPool"),
        # conv1: whole-graph choice avoids a transform, so it is not the fastest alone
        _conv("conv1", "/layer1/conv/Conv", "16->16 3x3/1 16x16", "bias+res+relu", 0.01180, c1,
              "nchwc(ic_bn=8,oc_bn=8,reg_n=16)", greedy="nchwc(ic_bn=16,oc_bn=16,reg_n=8)",
              in_layout="NCHW8c", out_layout="NCHW8c", weight_layout="OIHW8i8o", weight_bytes=9280),
        # conv2: 1x1 conv, chosen differs too
        _conv("conv2", "", "16->32 1x1/2 16x16", "bias", 0.00131, c2, "direct(oc_tile=4,vec=4)",
              weight_bytes=2176),
        _other("flatten", "fixed", "relax.reshape", "NCHW", None),
    ]
    convs = [l for l in layers if l["kind"] == "conv"]
    return {
        "schema_version": 1, "model": "tiny", "input": {"name": "input", "shape": [1, 3, 32, 32]},
        "prepare_notes": ["folded 3 BatchNormalization nodes"], "folded_batchnorm": 3,
        "target": "x86-avx2", "cpu": "Intel(R) Xeon(R) CPU @ 2.20GHz", "threads": 2, "tvm_version": "0.27.0",
        "solver": {"method": "cp-sat", "optimal": True, "seconds": 0.042, "gap": 0.0, "predicted_ms": 0.5314},
        "greedy": {"predicted_ms": 0.6021},
        "predicted_e2e_ms": 0.5314, "predicted_transform_ms": 0.0213,
        "measured_e2e_ms": 0.5871 if measured else None,
        "onnxruntime_ms": 0.7012 if measured else None,
        "ratio_to_onnxruntime": round(0.5871 / 0.7012, 4) if measured else None,
        "layout_transforms": 2, "max_rel_err": 3.2e-7 if measured else None,
        "conv_layers": len(convs), "families_chosen": {"nchwc": 2, "direct": 1},
        "records": {"jobs": 14, "reused": 9, "store": "/home/u/.cache/graphselect/records.sqlite"},
        "stage_seconds": {"import": 0.41, "measure": 12.7, "solve": 0.05, "build": 3.2, "total": 16.5},
        "layers": layers,
    }


def _convs(r):
    return [l for l in r["layers"] if l["kind"] == "conv"]


# ---------------------------------------------------------------------------------------------
# HTML

class _Checker(HTMLParser):
    """Collects start/end tags, the text, and class attributes of <tr>; checks tag balance."""
    TRACKED = {"html", "head", "body", "table", "thead", "tbody", "tr", "td", "th", "svg", "g", "details",
               "summary", "section", "dl", "text", "title", "style", "header"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.text, self.rows, self.scripts = [], [], [], [], 0
        self._row = None

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts += 1
        if tag == "tr":
            self._row = {"class": dict(attrs).get("class") or "", "text": []}
            self.rows.append(self._row)
        if tag in self.TRACKED:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag not in self.TRACKED:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> with open {self.stack[-3:]}")
        else:
            self.stack.pop()
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        self.text.append(data)
        if self._row is not None:
            self._row["text"].append(data)


def _parse(page: str) -> _Checker:
    p = _Checker()
    p.feed(page)
    p.close()
    return p


def _rows_of(p: _Checker, first_cell: str):
    return [r for r in p.rows if r["text"] and r["text"][0] == first_cell]


@pytest.mark.parametrize("measured", [True, False])
def test_html_parses_and_tags_balance(measured):
    page = render_html(fake_report(measured=measured))
    assert page.startswith("<!DOCTYPE html>")
    p = _parse(page)
    assert p.errors == [] and p.stack == []
    for tag in ("table", "svg", "details", "tr"):
        assert page.count(f"<{tag}") == page.count(f"</{tag}>"), tag
    assert page.count("<details>") == 3 and page.count("<svg") == 2
    assert p.scripts == 0
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page), "external resource"


def test_html_shows_layers_choices_and_summary():
    r = fake_report()
    text = "".join(_parse(render_html(r)).text)
    for l in r["layers"]:
        assert l["name"] in text
    for l in _convs(r):
        assert l["chosen"] in text and l["shape"] in text and l["epilogue"] in text
        for c in l["candidates"]:
            assert c["key"] in text
    for s in ("tiny", "1×3×32×32", "x86-avx2", "Intel(R) Xeon(R) CPU @ 2.20GHz", "0.27.0",
              "0.531 ms", "0.587 ms", "0.701 ms", "0.837×", "0.602 ms", "cp-sat", "optimal", "3.20e-07",
              "nchwc ×2", "direct ×1", "measure 12.70 s", "9 reused, 5 measured", "BuildError: tensorize failed",
              "relax.nn.max_pool2d", "NCHW8c", "1.8 KiB", "0.00885", "gap 0"):
        assert s in text, s


def test_html_marks_rows_where_choice_differs_from_fastest_alone():
    p = _parse(render_html(fake_report()))
    conv_rows = {n: _rows_of(p, n) for n in ("conv0", "conv1", "conv2")}
    # first matching row is the conv table's (the candidate tables start with candidate keys)
    assert "differs" not in conv_rows["conv0"][0]["class"]
    assert "differs" in conv_rows["conv1"][0]["class"]
    assert "differs" in conv_rows["conv2"][0]["class"]
    # the candidate tables mark chosen and fastest
    chosen = [r for r in p.rows if "chosen" in r["class"].split()]
    fastest = [r for r in p.rows if "fastest" in r["class"].split()]
    assert len(chosen) == 3 and len(fastest) == 3
    assert any("chosen" in r["class"] and "fastest" in r["class"] for r in p.rows)     # conv0


def test_html_missing_values_render_as_dash():
    r = fake_report(measured=False)
    p = _parse(render_html(r))
    text = "".join(p.text)
    for label in ("Measured end-to-end", "onnxruntime", "Ratio to onnxruntime", "Max relative error vs the reference"):
        i = text.index(label)
        assert text[i + len(label):].startswith(DASH), label
    failed = [r for r in p.rows if r["text"][:1] == ["nchwc(ic_bn=3,oc_bn=16,reg_n=8)"]]
    assert failed and failed[0]["text"][2:4] == [DASH, DASH] and "failed" in failed[0]["class"]
    assert _rows_of(p, "flatten")[0]["text"][-1] == DASH                 # cost None
    assert "None" not in text and "nan" not in text.lower().split()


def test_html_escapes_strings():
    evil = '<script>alert("x")</script>'
    r = fake_report(conv0_name=evil)
    r["model"] = "m<b>&"
    r["layers"][0]["candidates"][3]["error"] = "<img src=x onerror=alert(1)>"
    page = render_html(r)
    assert "<script" not in page and "<img" not in page and "m<b>&" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page and "m&lt;b&gt;&amp;" in page
    p = _parse(page)
    assert p.scripts == 0 and p.errors == [] and p.stack == []
    assert evil in "".join(p.text)


def test_html_same_from_report_json(tmp_path):
    from graphselect.report import write_reports
    r = fake_report(measured=False)
    paths = write_reports(r, tmp_path)
    loaded = json.loads(paths["report_json"].read_text())
    assert render_html(loaded) == render_html(r) == paths["report_html"].read_text()
    assert summary_table(loaded) == summary_table(r)


def test_html_survives_sparse_reports():
    for r in ({}, {"layers": []}, {"layers": [{"name": "c", "kind": "conv", "candidates": None}]},
              {"layers": [{"name": "c", "kind": "conv", "cost_ms": float("nan"),
                           "candidates": [{"key": "k", "family": "f", "cold_ms": None, "warm_ms": None,
                                           "error": "boom"}]}]}):
        p = _parse(render_html(r))
        assert p.errors == [] and p.stack == []


def test_html_all_equal_and_wide_spread_axes():
    r = fake_report()
    for l in _convs(r):
        for c in l["candidates"]:
            if c["cold_ms"] is not None:
                c["cold_ms"] = 1.0
    assert _parse(render_html(r)).errors == []
    r["layers"][0]["candidates"][0]["cold_ms"] = 0.001            # 1000x spread: log axis
    page = render_html(r)
    assert "log scale" in page and _parse(page).errors == []


# ---------------------------------------------------------------------------------------------
# terminal

def _table_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("layer"))
    end = lines.index("", start)
    return lines[start:end]


def test_terminal_summary_contents():
    r = fake_report()
    out = summary_table(r)
    for l in _convs(r):
        assert l["name"] in out and l["chosen"] in out
    assert "maxpool0" not in out                     # only conv layers are listed
    assert "0.531 ms" in out and "0.587 ms" in out and "0.701 ms" in out and "0.84x" in out
    assert "cp-sat, optimal" in out and "2 layout_transform ops" in out and "3.20e-07" in out
    assert "measure 12.70 s" in out and "9 reused, 5 measured" in out
    rows = _table_lines(out)
    conv0 = next(l for l in rows if l.startswith("conv0"))
    conv1 = next(l for l in rows if l.startswith("conv1"))
    assert conv0.rstrip().endswith("0.154")          # fastest alone not repeated when it is the choice
    assert conv1.rstrip().endswith("nchwc(ic_bn=16,oc_bn=16,reg_n=8)")
    assert "\x1b" not in out and out.isascii()


def test_terminal_summary_missing_values():
    out = summary_table(fake_report(measured=False))
    assert re.search(r"^measured\s+-$", out, re.M)
    assert re.search(r"^onnxruntime\s+-, ratio -$", out, re.M)
    assert re.search(r"^max rel err\s+-$", out, re.M)
    assert summary_table({}).count("\n") > 3


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_terminal_width(width):
    out = summary_table(fake_report(), width=width)
    rows = _table_lines(out)
    assert len(rows) == 2 + 3
    assert all(len(l) <= width for l in out.splitlines()), [l for l in out.splitlines() if len(l) > width]
    # columns are sized from content: at the default width nothing is cut
    if width >= 120:
        assert "..." not in "\n".join(rows)
        assert max(len(l) for l in rows) < width


def test_terminal_width_too_narrow_for_headers_still_renders():
    out = summary_table(fake_report(), width=20)
    assert "conv" in out and "predicted" in out


def test_renderers_do_not_import_tvm():
    code = ("import sys, graphselect.report.html, graphselect.report.terminal; "
            "assert 'tvm' not in sys.modules, 'tvm imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_versus_greedy_section_from_a_real_comparison():
    """The explanation rows come from costmodels.explain on a problem where greedy overflows the cache."""
    from costmodels.explain import compare
    from costmodels.problem import Choice, Edge, Node, Problem
    mb = 2**20
    conv = lambda n: Node(n, (Choice("wino6", 5.0, ("A",), "A", warm_cost=1.0, weight_bytes=20 * mb),  # noqa: E731
                              Choice("nchwc", 2.0, ("A",), "A", warm_cost=1.5, weight_bytes=4 * mb)))
    p = Problem((Node("input", (Choice("input", 0.0, (), "A"),)), conv("conv0"), conv("conv1"),
                 Node("output", (Choice("output", 0.0, ("A",), None),))),
                (Edge(0, 1, 0), Edge(1, 2, 0), Edge(2, 3, 0)), cache_bytes=25 * mb)
    r = fake_report()
    r["versus_greedy"] = compare(p, (0, 1, 1, 0), (0, 0, 0, 0)).as_dict()
    page = render_html(r)
    parsed = _parse(page)
    assert not parsed.errors
    rows = [r["text"] for r in _rows_of(parsed, "conv0")]
    assert any(row[1:4] == ["cache", "wino6", "nchwc"] for row in rows)
    assert "does not fit" in page
    out = summary_table(r, width=120)
    assert "versus warm-cache greedy" in out and re.search(r"conv1\s+cache\s+wino6\s+nchwc", out)


def test_assignments_built_and_timed_and_cache_state():
    """Every assignment timed end to end shows predicted and measured time, the prediction error,
    and which one was kept; the summary states the cache footprint and the warm share."""
    r = fake_report()
    r["alternatives"] = [
        {"label": "cp-sat", "predicted_ms": 0.9075, "measured_ms": 1.0284, "relative_to_chosen": 1.1325,
         "max_rel_err": 4.5e-07, "chosen": False},
        {"label": "cp-sat (67% warm)", "predicted_ms": 0.9633, "measured_ms": 0.9081, "relative_to_chosen": 1.0,
         "predicted_before_ms": 0.8635, "prediction_error": -0.0491, "basis": "new model",
         "max_rel_err": 3.1e-07, "chosen": True},
        {"label": "greedy", "predicted_ms": 0.9805, "measured_ms": 0.9979, "relative_to_chosen": 1.0989,
         "max_rel_err": 3.6e-07, "chosen": False}]
    r["cache"] = {"budget_bytes": 25 * 2**20, "activation_bytes": 0, "footprint_bytes": 28 * 2**20,
                  "resident": False, "warm_share": 0.669, "partial_steps": [[28835840, 0.669]]}
    page = render_html(r)
    parsed = _parse(page)
    assert not parsed.errors
    kept = [row["text"] for row in _rows_of(parsed, "cp-sat (67% warm)")]
    # predicted before it was built, the final objective, measured, per-round ratio, prediction error
    # (the one made before the build, not the final objective's agreement of +6.1%)
    assert kept and kept[0][1:6] == ["0.864", "0.963", "0.908", "1.000x", "-4.9%"] and kept[0][-1] == "chosen"
    # the alternatives table's rows: 9 cells, the bf16 layer count a dash where none was given
    assert [row["text"][4:8] for row in _rows_of(parsed, "greedy") if len(row["text"]) == 9] == \
        [["1.099x", DASH, "3.60e-07", DASH]]
    assert "footprint 28.0 MiB of a 25.0 MiB budget; does not fit: 67% of the warm-cold difference kept" in page
    out = summary_table(r, width=120)
    assert re.search(r"cp-sat \(67% warm\)\s+0\.963 ms\s+0\.908 ms\s+1\.000x\s+chosen", out)
    assert re.search(r"greedy\s+0\.981 ms\s+0\.998 ms\s+1\.099x", out)


def _looped_report():
    r = fake_report()
    r["calibration"] = {"warm_max": 0.4, "capacity": 1.5, "launch_ms": 0.002, "family_scale": {"nchwc": 1.1},
                        "other_scale": 1.3, "networks": 3, "kernels": 9}
    r["isolated_predicted_e2e_ms"], r["measured_quiet_ms"], r["prediction_error"] = 0.61, 0.58, -0.095
    r["loop"] = {"converged": True, "chosen": "cp-sat (round 1)", "fastest_measured": "cp-sat (round 1)",
                 "rounds": [{"round": 0, "solution": "cp-sat", "new": ["cp-sat", "greedy"], "calibration": {},
                             "networks": [{"label": "cp-sat", "predicted_ms": 0.61, "measured_ms": 0.70, "error": -0.1286},
                                          {"label": "greedy", "predicted_ms": 0.64, "measured_ms": 0.66, "error": -0.03}]},
                            {"round": 1, "solution": "cp-sat (round 1)", "new": ["cp-sat (round 1)"], "calibration": {},
                             "networks": [{"label": "cp-sat (round 1)", "predicted_ms": 0.55, "measured_ms": 0.571,
                                           "error": -0.0368}]}]}
    r["kernels"] = [{"network": "cp-sat", "layer": f"conv{i}", "candidate": "nchwc(x)", "innet_ms": v,
                     "calibrated_ms": v * 1.05, "isolated_cold_ms": v * 0.7, "isolated_warm_ms": v * 0.6}
                    for i, v in enumerate((0.01, 0.2, 0.05))]
    for l in _convs(r):
        l.update(isolated_cold_ms=0.1, isolated_warm_ms=0.08, innet_ms=0.12)
    return r


def test_html_shows_the_closed_loop_and_the_predicted_against_measured_plot():
    r = _looped_report()
    page = render_html(r)
    p = _parse(page)
    assert p.errors == [] and p.stack == []
    text = "".join(p.text)
    assert "Closed loop" in text and "Converged" in text and "-12.9%" in text and "cp-sat (round 1)" in text
    assert "Predicted against measured" in text and page.count("<svg") == 3
    assert page.count("<circle") >= 2 * len(r["kernels"])       # isolated and calibrated per kernel
    assert "from 3 built network(s)" in text and "capacity ×1.50" in text
    assert "0.120" in text                                      # a layer's in-network time


def test_terminal_shows_the_loop_rounds():
    out = summary_table(_looped_report())
    assert "closed loop" in out and "-12.9%" in out and "cp-sat (round 1)" in out
    assert "3 network(s)" in out and "-9.5%" in out


def test_the_in_place_breakdown_is_shown():
    r = _looped_report()
    r["breakdown"] = {"e2e_ms": 5.0, "kernel_calls": 28, "hook_overhead_us_per_call": 1.6,
                      "conv_isolated_cold_ms": 4.6, "conv_isolated_warm_ms": 4.1,
                      "parts": [{"part": "conv kernels", "calls": 20, "ms": 4.5},
                                {"part": "layout transforms", "calls": 5, "ms": 0.25},
                                {"part": "pooling", "calls": 1, "ms": 0.2},
                                {"part": "VM builtins", "calls": None, "ms": 0.05}]}
    p = _parse(render_html(r))
    assert p.errors == []
    assert [row["text"] for row in _rows_of(p, "layout transforms")] == [["layout transforms", "5", "0.250", "5.0%"]]
    assert _rows_of(p, "conv kernels alone, cold / warm")[0]["text"][2] == "4.600 / 4.100"
    out = summary_table(r, width=300)
    assert "conv kernels 4.500 ms, layout transforms 0.250 ms" in out and "28 kernel calls" in out
    del r["breakdown"]
    assert "not timed in place" in "".join(_parse(render_html(r)).text)


def test_conv_rows_show_throughput_against_the_peak_and_the_machine_line():
    r = fake_report()
    r["hardware"] = {"peak_gflops": 500.0, "blas_gflops": 240.0, "bandwidth_gbs": 39.0, "l2_bytes": 1 << 20,
                     "l3_bytes": 32 << 20}
    r["layers"][0]["gflops_warm"] = 400.0
    page = render_html(r)
    assert "GFLOP/s warm (of peak)" in page
    assert "400 (80%)" in page
    assert "peak 500 GFLOP/s" in page and "BLAS GEMM 240" in page and "L3 32.0 MiB" in page
    r["hardware"] = {}
    assert "400 (80%)" not in render_html(r) and ">400<" in render_html(r)


def test_precision_shown_where_lower_precision_was_allowed():
    """bf16/auto reports name the precision, the error against fp32 and whether it is within the
    tolerance, on the page and in the terminal; fp32 reports add no precision line."""
    r = fake_report()
    r["precision"] = {"mode": "auto", "tolerance": 0.02, "layers": {"bf16": 2, "fp32": 1},
                      "conversions": "inside the bf16 kernels (their input pass)", "max_rel_err": 2.6e-3,
                      "within_tolerance": True, "samples": {"inputs": 8, "max_rel_error": 3.1e-3, "top1_agree": 7,
                                                            "top1_total": 8, "top1_agreement": 0.875}}
    text = "".join(_parse(render_html(r)).text)
    assert "auto: conv layers bf16 ×2, fp32 ×1" in text and "2.60e-03, within the tolerance 0.02" in text
    assert "top-1 equal to fp32 on 7 of 8" in text
    term = summary_table(r)
    assert "precision" in term and "2 bf16, 1 fp32 conv layers" in term and "7/8 sample inputs" in term
    r["precision"].update(within_tolerance=False)
    assert "OVER the tolerance" in summary_table(r)
    r["precision"] = {"mode": "fp32", "tolerance": None, "layers": {"fp32": 3}, "conversions": "none"}
    assert "precision " not in summary_table(r)


def test_terminal_names_the_rule_and_shows_only_predictions_made_before_the_build():
    r = _looped_report()
    r["chosen_by"] = "the final cp-sat solve's optimum under the calibrated objective (built and timed)"
    r["prediction"] = {"predicted_ms": 0.55, "round": 1, "basis": "new network", "error": -0.0368}
    r["prediction_error"], r["calibrated_agreement"] = -0.0368, 0.0044
    # round 1 also re-predicts round 0's network after timing it: agreement, not a prediction
    r["loop"]["rounds"][1]["networks"].append({"label": "cp-sat", "predicted_ms": 0.69, "measured_ms": 0.70,
                                               "error": -0.0143, "new": False})
    for n in r["loop"]["rounds"][0]["networks"] + r["loop"]["rounds"][1]["networks"][:1]:
        n.update(new=True, basis="new model" if n in r["loop"]["rounds"][0]["networks"] else "new network")
    out = summary_table(r, width=160)
    assert "chosen by    the final cp-sat solve's optimum" in out
    assert "0.550 ms before it was built (round 1, new network)" in out
    assert "prediction error -3.7%" in out and "agrees to +0.4%" in out
    assert "-1.4%" not in out                          # the in-sample re-prediction is not listed
    loop = out[out.index("closed loop"):]
    assert "new model" in loop and "new network" in loop
    # a network an earlier run timed has no prediction error, whatever the figures say
    r["prediction"]["basis"] = "timed before"
    out = summary_table(r, width=160)
    assert "no prediction: an earlier run timed this network" in out and "prediction error -3.7%" not in out
    page = render_html(r)
    assert "none: an earlier run had timed this network" in page and "Chosen by" in page
    r["measured_user_ms"], r["ratio_to_onnxruntime_user"] = 0.612, 0.873
    assert "as a user calls it (numpy in, outputs copied) 0.612 ms, ratio 0.87x" in summary_table(r, width=200)
    assert "0.873×" in render_html(r)
    # the host's state during the check, when it was read
    assert "host state" not in summary_table(r, width=200)
    r["check_handoff_us"] = [0.556, 1.871]
    assert "hand-off 0.56 / 1.87 us per kernel call" in summary_table(r, width=200)
