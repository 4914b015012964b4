"""Render the selection report (the dict of ``report.json``) as one self-contained HTML page.

Inline CSS, inline SVG plots, ``<details>`` for the per-layer candidate lists; no JavaScript and
no external resources. Every string taken from the report goes through :func:`html.escape`; a
missing value (None, NaN, infinity, empty string) renders as an em dash.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

DASH = "—"

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1400px;
 padding:0 1em;color:#222}
h1{margin:0 0 .2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.meta{color:#555}.meta span{margin-right:1.4em}
.summary{display:grid;grid-template-columns:max-content 1fr;gap:.25em 1.2em;background:#f6f8fa;
 border:1px solid #d0d7de;border-radius:6px;padding:.8em 1.2em;margin:1em 0}
.summary dt{font-weight:600;color:#444}.summary dd{margin:0}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f0f3f6;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.differs td{background:#fff4d6}tr.chosen td{background:#e3f2e1}tr.failed td{color:#999}
tr.chosen.fastest td{background:#d4ecd0}
.tag{font-size:11px;border-radius:3px;padding:0 .3em;margin-left:.3em;background:#eee}
.tag.diff{background:#f5c542}
details{margin:.2em 0}summary{cursor:pointer}
.empty{color:#888;font-style:italic}.note{color:#666;font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .grid{stroke:#e5e5e5}
svg .bar-conv{fill:#4e79a7}svg .bar-other{fill:#bab0ac}svg .bar-differs{fill:#f28e2b}
svg .marker{stroke:#000;stroke-width:2}svg .chosen{fill:none;stroke:#000;stroke-width:1.5}
"""


class Markup(str):
    """Already-rendered HTML: table cells and summary values insert it as is."""


# ---------------------------------------------------------------------------------------------
# formatting

def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt(v, nd: int = 3) -> str:
    """Plain text for a report value; DASH for anything missing."""
    if v is None or v == "":
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if math.isfinite(v) else DASH
    if isinstance(v, (list, tuple)):
        return "×".join(fmt(x, nd) for x in v) if v else DASH
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt(x, nd)}" for k, x in v.items()) if v else DASH
    return str(v)


def esc(v, nd: int = 3) -> str:
    """Escaped text for a value; Markup passes through unchanged."""
    return v if isinstance(v, Markup) else html.escape(fmt(v, nd), quote=True)


def unit(v, suffix: str, nd: int = 3) -> str:
    return f"{v:.{nd}f} {suffix}" if is_num(v) else DASH


def nbytes(v) -> str:
    if not is_num(v):
        return DASH
    for u in ("B", "KiB", "MiB"):
        if abs(v) < 1024:
            return f"{v:.0f} {u}" if u == "B" else f"{v:.1f} {u}"
        v /= 1024
    return f"{v:.1f} GiB"


def counts(d) -> str:
    return ", ".join(f"{k} ×{n}" for k, n in d.items()) if isinstance(d, dict) and d else DASH


def seconds(d) -> str:
    if not isinstance(d, dict) or not d:
        return DASH
    return ", ".join(f"{k} {v:.2f} s" if is_num(v) else f"{k} {DASH}" for k, v in d.items())


def clip(s, n: int) -> str:
    s = fmt(s)
    return s if len(s) <= n else s[: n - 1] + "…"


def num_label(v) -> str:
    """Three significant digits (axis ticks, GFLOP); DASH when missing."""
    return f"{v:.3g}" if is_num(v) else DASH


# ---------------------------------------------------------------------------------------------
# report accessors

def conv_layers(report: dict) -> list[dict]:
    return [l for l in report.get("layers") or [] if l.get("kind") == "conv"]


def other_layers(report: dict) -> list[dict]:
    return [l for l in report.get("layers") or [] if l.get("kind") != "conv"]


def candidates(layer: dict) -> list[dict]:
    return list(layer.get("candidates") or [])


def differs(layer: dict) -> bool:
    """The whole-graph choice is not the candidate that is fastest on its own."""
    fa, ch = layer.get("fastest_alone"), layer.get("chosen")
    return fa is not None and ch is not None and fa != ch


def fastest_ms(layer: dict):
    times = [c.get("cold_ms") for c in candidates(layer) if c.get("key") == layer.get("fastest_alone")]
    return next((t for t in times if is_num(t)), None)


def families(convs: list[dict]) -> list[str]:
    seen = {str(c.get("family")) for l in convs for c in candidates(l)}
    seen |= {str(f) for l in convs for f in (l.get("best_by_family_ms") or {})}
    return sorted(seen)


# ---------------------------------------------------------------------------------------------
# HTML building blocks

def table(headers, rows, *, num_cols=(), row_classes=None, cls: str = "") -> str:
    """One table from headers and rows of values (escaped) or Markup; ``num_cols`` right-aligned."""
    num = set(num_cols)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        rc = row_classes[i] if row_classes else ""
        tr = f'<tr class="{esc(rc)}">' if rc else "<tr>"
        tds = "".join(f'<td class="num">{esc(c)}</td>' if j in num else f"<td>{esc(c)}</td>"
                      for j, c in enumerate(row))
        body.append(f"{tr}{tds}</tr>")
    c = f' class="{esc(cls)}"' if cls else ""
    return f"<table{c}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def definitions(pairs) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
    return f'<dl class="summary">{items}</dl>'


def section(title: str, content: str, note: str = "") -> str:
    n = f'<p class="note">{esc(note)}</p>' if note else ""
    return f"<section><h2>{esc(title)}</h2>{n}{content}</section>"


def empty(text: str) -> str:
    return f'<p class="empty">{esc(text)}</p>'


def tag(text: str, cls: str = "") -> str:
    return f'<span class="tag {esc(cls)}">{esc(text)}</span>'


# ---------------------------------------------------------------------------------------------
# page sections

def header(r: dict) -> str:
    ins = r.get("inputs") or ([r["input"]] if r.get("input") else [])
    outs = r.get("outputs") or []
    meta = [("input" + ("s" if len(ins) > 1 else ""), "; ".join(f"{fmt(i.get('name'))} {fmt(i.get('shape'))}" for i in ins)
             or DASH),
            ("output" + ("s" if len(outs) > 1 else ""), "; ".join(f"{fmt(o.get('name'))} {fmt(o.get('shape'))}"
                                                               for o in outs) or DASH),
            ("target", r.get("target")),
            ("CPU", r.get("cpu")), ("threads", r.get("threads")), ("TVM", r.get("tvm_version"))]
    spans = "".join(f"<span><b>{esc(k)}</b> {esc(v)}</span>" for k, v in meta)
    return f'<header><h1>{esc(r.get("model"))}</h1><div class="meta">{spans}</div></header>'


def ratio_text(r: dict) -> str:
    ratio = r.get("ratio_to_onnxruntime")
    if not is_num(ratio):
        return DASH
    word = "faster" if ratio < 1 else "slower" if ratio > 1 else "equal"
    user = r.get("ratio_to_onnxruntime_user")
    return (f"{ratio:.3f}× (measured / onnxruntime; {word})"
            + (f"; as a user calls it (numpy in, outputs copied): {unit(r.get('measured_user_ms'), 'ms')}, "
               f"{user:.3f}×" if is_num(user) else ""))


def solver_text(r: dict) -> str:
    s = r.get("solver") or {}
    opt = "optimal" if s.get("optimal") else "not proven optimal" if s.get("optimal") is False else DASH
    gap = f"{s['gap']:.3g}" if is_num(s.get("gap")) else DASH
    return f"{fmt(s.get('method'))}, {opt}, {unit(s.get('seconds'), 's', 2)}, gap {gap}"


def greedy_text(r: dict) -> str:
    g, p = (r.get("greedy") or {}).get("predicted_ms"), r.get("predicted_e2e_ms")
    if is_num(g) and is_num(p) and g > 0:
        return f"{unit(g, 'ms')} (whole-graph selection saves {100 * (g - p) / g:.1f}%)"
    return unit(g, "ms")


def records_text(r: dict) -> str:
    from .terminal import records_summary
    rec = r.get("records") or {}
    return records_summary(rec, fmt) + f" (store: {fmt(rec.get('store'))})"


def pct(v) -> str:
    return f"{100 * v:+.1f}%" if is_num(v) else DASH


def calibration_text(r: dict) -> str:
    c = r.get("calibration") or {}
    if not c.get("networks"):
        return ("none yet: isolated cold timings as measured, "
                f"{unit(c.get('launch_ms'), 'ms', 4)} per kernel call (the machine's launch probe)")
    fam = ", ".join(f"{k} ×{v:.2f}" for k, v in (c.get("family_scale") or {}).items()) or DASH
    return (f"from {c.get('networks')} built network(s) and {c.get('kernels')} kernel times; warm share at best "
            f"{fmt(c.get('warm_max'), 2)}, cache capacity ×{fmt(c.get('capacity'), 2)} the budget, input miss "
            f"{fmt(c.get('input_miss'), 2)} of the in-cold penalty, {unit(c.get('launch_ms'), 'ms', 4)} per kernel "
            f"call, machine scale ×{fmt(c.get('scale'), 2)}, family scales {fam}, "
            f"other kernels ×{fmt(c.get('other_scale'), 2)}")


def summary(r: dict) -> str:
    err = r.get("max_rel_err")
    ref = r.get("reference") or {}
    pr = r.get("prediction") or {}
    pairs = [
        ("Chosen by", r.get("chosen_by")),
        ("Predicted before it was built", f"{unit(pr.get('predicted_ms'), 'ms')} (round {fmt(pr.get('round'))}; "
                                          f"the calibration had seen: {fmt(pr.get('basis'))})"),
        ("Prediction error", ("none: an earlier run had timed this network" if pr.get("basis") == "timed before" else
                              f"{pct(r.get('prediction_error'))} against the median of all calls, "
                              f"{pct(pr.get('error_vs_quiet'))} against the quiet rounds "
                              f"({unit(r.get('measured_quiet_ms'), 'ms')})")),
        ("Final calibrated objective", f"{unit(r.get('predicted_e2e_ms'), 'ms')}, agreeing to "
                                       f"{pct(r.get('calibrated_agreement'))} (fitted to this network's own run: "
                                       f"agreement, not a prediction); "
                                       f"{unit(r.get('isolated_predicted_e2e_ms'), 'ms')} from isolated timings"),
        ("Calibration", calibration_text(r)),
        ("of which layout transforms", unit(r.get("predicted_transform_ms"), "ms")),
        ("Measured end-to-end", unit(r.get("measured_e2e_ms"), "ms")),
        ("onnxruntime", unit(r.get("onnxruntime_ms"), "ms")),
        ("Ratio to onnxruntime", ratio_text(r)),
        ("Greedy baseline (predicted)", greedy_text(r)),
        ("Cache", cache_text(r)),
        ("Solver", solver_text(r)),
        ("Layout transforms in the network", r.get("layout_transforms")),
        ("Max relative error vs the reference", (f"{err:.2e}" if is_num(err) else DASH)
         + f" against {fmt(ref.get('name') or 'onnxruntime')}" + (f" ({ref['why']})" if ref.get("why") else "")),
        ("Precision", precision_text(r.get("precision") or {})),
        ("Machine", machine_text(r.get("hardware") or {})),
        ("Conv layers", r.get("conv_layers")),
        ("Families chosen", counts(r.get("families_chosen"))),
        ("Stage seconds", seconds(r.get("stage_seconds"))),
        ("Records", records_text(r)),
        ("Folded batch norms", r.get("folded_batchnorm")),
        ("Preparation notes", "; ".join(map(str, r.get("prepare_notes") or [])) or None),
    ]
    return definitions(pairs)


def precision_text(p: dict) -> str | None:
    """What the network computes in and how far from fp32 that takes it (lower precision only)."""
    if not p or p.get("mode", "fp32") == "fp32":
        return "fp32" if p else None
    sm = p.get("samples") or {}
    within = {True: "within", False: "over"}.get(p.get("within_tolerance"), DASH)
    err = f"{p['max_rel_err']:.2e}" if is_num(p.get("max_rel_err")) else DASH
    text = (f"{p['mode']}: conv layers {counts(p.get('layers'))}; max relative error against fp32 {err}, "
            f"{within} the tolerance {p.get('tolerance')}")
    if is_num(sm.get("max_rel_error")):
        text += f"; over {sm['inputs']} random inputs at worst {sm['max_rel_error']:.2e}"
    if sm.get("top1_total"):
        text += f", top-1 equal to fp32 on {sm['top1_agree']} of {sm['top1_total']}"
    return text + f"; conversions: {p.get('conversions', DASH)}"


def machine_text(hw: dict) -> str | None:
    parts = []
    if is_num(hw.get("peak_gflops")):
        parts.append(f"peak {hw['peak_gflops']:.0f} GFLOP/s (the target's FMAs"
                     + (f"; numpy's BLAS GEMM {hw['blas_gflops']:.0f}" if is_num(hw.get("blas_gflops")) else "") + ")")
    if is_num(hw.get("bandwidth_gbs")):
        parts.append(f"copy {hw['bandwidth_gbs']:.0f} GB/s")
    for k, label in (("l2_bytes", "L2"), ("l3_bytes", "L3")):
        if is_num(hw.get(k)):
            parts.append(f"{label} {nbytes(hw[k])}")
    return ", ".join(parts) or None


def peak_text(l: dict, peak) -> str | None:
    g = l.get("gflops_warm")
    if not is_num(g):
        return None
    return f"{g:.0f} ({100 * g / peak:.0f}%)" if is_num(peak) and peak > 0 else f"{g:.0f}"


def conv_row(l: dict, fams: list[str], peak=None) -> list:
    best = l.get("best_by_family_ms") or {}
    layouts = f"{fmt(l.get('in_layout'))} → {fmt(l.get('out_layout'))}, w {fmt(l.get('weight_layout'))}"
    diff = Markup(tag("differs", "diff")) if differs(l) else ("no" if l.get("fastest_alone") else None)
    return [l.get("name"), l.get("onnx_name"), l.get("shape"), l.get("epilogue"), num_label(l.get("gflop")),
            l.get("chosen"), layouts, l.get("isolated_cold_ms"), l.get("isolated_warm_ms"), peak_text(l, peak),
            l.get("innet_ms"),
            l.get("cost_ms"), l.get("fastest_alone"), diff, *[best.get(f) for f in fams], nbytes(l.get("weight_bytes"))]


def conv_table(convs: list[dict], peak=None) -> str:
    """``peak``: the target's FMA peak, GFLOP/s (the report's hardware section)."""
    if not convs:
        return empty("no conv layers")
    fams = families(convs)
    headers = ["Layer", "ONNX node", "Shape", "Epilogue", "GFLOP", "Chosen", "Layouts (in → out, weight)",
               "Cold ms (alone)", "Warm ms (alone)", "GFLOP/s warm (of peak)", "In network ms", "Calibrated ms",
               "Fastest alone", "Differs", *[f"best {f} ms" for f in fams], "Weights"]
    num = {4, 7, 8, 9, 10, 11, *range(14, 14 + len(fams)), 14 + len(fams)}
    return table(headers, [conv_row(l, fams, peak) for l in convs], num_cols=num,
                 row_classes=["differs" if differs(l) else "" for l in convs], cls="conv")


def other_table(others: list[dict]) -> str:
    if not others:
        return empty("no other layers")
    rows = [[l.get("name"), l.get("kind"), l.get("op"), l.get("onnx_name"), l.get("out_shape"),
             l.get("layout", l.get("chosen")), l.get("cost_ms")] for l in others]
    return table(["Layer", "Kind", "Op", "ONNX node", "Output shape", "Layout", "Cost ms"], rows,
                 num_cols={6}, cls="other")


def candidate_rows(l: dict):
    cands = sorted(candidates(l), key=lambda c: (not is_num(c.get("cold_ms")), c.get("cold_ms") or 0))
    rows, classes = [], []
    for c in cands:
        k = c.get("key")
        notes = [n for n, hit in (("chosen", k == l.get("chosen")), ("fastest alone", k == l.get("fastest_alone")),
                                  ("greedy", k == l.get("greedy"))) if hit]
        rows.append([k, c.get("family"), c.get("cold_ms"), c.get("warm_ms"), ", ".join(notes), c.get("error")])
        cls = ["chosen" if k == l.get("chosen") else "", "fastest" if k == l.get("fastest_alone") else "",
               "failed" if not is_num(c.get("cold_ms")) else ""]
        classes.append(" ".join(x for x in cls if x))
    return rows, classes


def candidate_details(convs: list[dict]) -> str:
    out = []
    for l in convs:
        rows, classes = candidate_rows(l)
        failed = sum(1 for c in candidates(l) if not is_num(c.get("cold_ms")))
        head = (f"<b>{esc(l.get('name'))}</b> {esc(l.get('shape'))} — chosen {esc(l.get('chosen'))} "
                f"({len(rows)} candidates, {failed} failed)")
        body = table(["Candidate", "Family", "Cold ms", "Warm ms", "Role", "Error"], rows, num_cols={2, 3},
                     row_classes=classes, cls="cands") if rows else empty("no candidates")
        out.append(f"<details><summary>{head}</summary>{body}</details>")
    return "".join(out) or empty("no conv layers")


# ---------------------------------------------------------------------------------------------
# SVG plots

@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    x0: float
    x1: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.x0 + f * (self.x1 - self.x0)

    def ticks(self) -> list[float]:
        if self.log:
            decades = range(round(math.log10(self.lo)), round(math.log10(self.hi)) + 1)
            mult = (1, 2, 5) if len(decades) <= 3 else (1,)
            return [m * 10.0 ** d for d in decades for m in mult if m * 10.0 ** d <= self.hi * (1 + 1e-9)]
        step = nice(self.hi / 5)
        return [i * step for i in range(int(self.hi / step + 1e-9) + 1)]


def nice(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5, 10 times a power of ten that is at least ``x``."""
    p = 10.0 ** math.floor(math.log10(x))
    return next(m * p for m in (1, 2, 2.5, 5, 10) if m * p >= x * (1 - 1e-9))


def make_axis(values, x0: float, x1: float, allow_log: bool = False):
    vals = [v for v in values if is_num(v) and v > 0]
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    if allow_log and hi / lo > 20:
        return Axis(10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi)), x0, x1, True)
    return Axis(0.0, nice(hi), x0, x1)


def svg(width: float, height: float, parts, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(label)}">'
            + "".join(parts) + "</svg>")


def text(x: float, y: float, s, anchor: str = "start", title=None) -> str:
    t = f"<title>{esc(title)}</title>" if title is not None else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{t}{esc(s)}</text>'


def grid(axis: Axis, top: float, bottom: float, unit_label: str) -> list[str]:
    parts = []
    for t in axis.ticks():
        x = axis(t)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"/>')
        parts.append(text(x, top - 4, num_label(t), "middle"))
    parts.append(text(axis.x1, top - 16, unit_label, "end"))
    return parts


LABEL_W, PLOT_W, RIGHT_W, ROW_H, TOP = 210, 560, 130, 16, 34


def bar_row(i: int, l: dict, axis: Axis) -> list[str]:
    y = TOP + i * ROW_H
    name, cost = l.get("name"), l.get("cost_ms")
    parts = [text(LABEL_W - 6, y + 12, clip(name, 32), "end", title=name)]
    kind = "differs" if differs(l) else "conv" if l.get("kind") == "conv" else "other"
    if is_num(cost):
        w = max(axis(cost) - axis.x0, 0.5)
        parts.append(f'<rect class="bar-{kind}" x="{axis.x0:.1f}" y="{y + 2}" width="{w:.1f}" height="{ROW_H - 4}">'
                     f"<title>{esc(name)}: chosen {esc(l.get('chosen'))} {esc(unit(cost, 'ms'))}</title></rect>")
    fast = fastest_ms(l)
    if is_num(fast):
        x = axis(fast)
        parts.append(f'<line class="marker" x1="{x:.1f}" y1="{y + 1}" x2="{x:.1f}" y2="{y + ROW_H - 1}">'
                     f"<title>fastest alone {esc(l.get('fastest_alone'))}: {esc(unit(fast, 'ms'))}</title></line>")
    parts.append(text(axis.x1 + 6, y + 12, unit(cost, "ms")))
    return parts


def legend(items, x: float, y: float) -> list[str]:
    """``items``: (svg snippet drawing a 10px swatch at (0, 0), label); laid out left to right."""
    parts = []
    for swatch, label in items:
        parts.append(f'<g transform="translate({x:.1f},{y:.1f})">{swatch}</g>')
        parts.append(text(x + 14, y + 9, label))
        x += 24 + 7 * len(label)
    return parts


def cost_chart(layers: list[dict]) -> str:
    axis = make_axis([l.get("cost_ms") for l in layers] + [fastest_ms(l) for l in layers],
                     LABEL_W, LABEL_W + PLOT_W)
    if axis is None:
        return empty("no per-layer costs")
    bottom = TOP + len(layers) * ROW_H
    parts = grid(axis, TOP, bottom, "ms")
    for i, l in enumerate(layers):
        parts += bar_row(i, l, axis)
    parts += legend([('<rect class="bar-conv" width="10" height="10"/>', "conv (chosen)"),
                     ('<rect class="bar-differs" width="10" height="10"/>', "conv, differs from fastest alone"),
                     ('<rect class="bar-other" width="10" height="10"/>', "other layer"),
                     ('<line class="marker" x1="5" y1="0" x2="5" y2="10"/>', "fastest alone")],
                    LABEL_W, bottom + 10)
    return svg(LABEL_W + PLOT_W + RIGHT_W, bottom + 30, parts, "per-layer cost")


def spread_row(i: int, l: dict, axis: Axis, colour: dict) -> list[str]:
    y = TOP + i * ROW_H + ROW_H / 2
    name = l.get("name")
    parts = [text(LABEL_W - 6, y + 4, clip(name, 32), "end", title=name),
             f'<line class="grid" x1="{axis.x0:.1f}" y1="{y:.1f}" x2="{axis.x1:.1f}" y2="{y:.1f}"/>']
    failed = 0
    for c in candidates(l):
        t = c.get("cold_ms")
        if not is_num(t) or t <= 0:
            failed += 1
            continue
        x, fill = axis(t), colour.get(str(c.get("family")), "#888")
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{fill}" fill-opacity="0.65">'
                     f"<title>{esc(c.get('key'))}: {esc(unit(t, 'ms'))}</title></circle>")
        if c.get("key") == l.get("chosen"):
            parts.append(f'<circle class="chosen" cx="{x:.1f}" cy="{y:.1f}" r="6"/>')
    if failed:
        parts.append(text(axis.x1 + 6, y + 4, f"{failed} failed"))
    return parts


def spread_chart(convs: list[dict]) -> str:
    axis = make_axis([c.get("cold_ms") for l in convs for c in candidates(l)], LABEL_W, LABEL_W + PLOT_W,
                     allow_log=True)
    if axis is None:
        return empty("no measured candidates")
    colour = {f: PALETTE[i % len(PALETTE)] for i, f in enumerate(families(convs))}
    bottom = TOP + len(convs) * ROW_H
    parts = grid(axis, TOP, bottom, "cold ms" + (" (log scale)" if axis.log else ""))
    for i, l in enumerate(convs):
        parts += spread_row(i, l, axis, colour)
    items = [(f'<circle cx="5" cy="5" r="4" fill="{c}"/>', f) for f, c in colour.items()]
    items.append(('<circle class="chosen" cx="5" cy="5" r="5"/>', "chosen"))
    parts += legend(items, LABEL_W, bottom + 10)
    return svg(LABEL_W + PLOT_W + RIGHT_W, bottom + 30, parts, "candidate cold times per conv layer")


def cache_text(r: dict) -> str:
    c = r.get("cache") or {}
    if c.get("budget_bytes") is None:
        return "no cache budget (cold timings)"
    share = c.get("warm_share")
    state = ("fits: warm timings" if c.get("resident") else
             f"does not fit: {100 * share:.0f}% of the warm-cold difference kept" if is_num(share) and share > 0
             else "does not fit: cold timings")
    return f"footprint {nbytes(c.get('footprint_bytes'))} of a {nbytes(c.get('budget_bytes'))} budget; {state}"


def alternatives(r: dict) -> str:
    alts = r.get("alternatives") or []
    if not alts:
        return empty("no assignment was timed end to end")
    rows = []
    for a in alts:
        m = a.get("measured_ms")
        rel = a.get("relative_to_chosen")
        e = a.get("max_rel_err")          # 1e-7 (fp32) to 1e-2 (bf16): three decimals would show 0.000
        err = "in sample" if a.get("basis") == "timed before" else pct(a.get("prediction_error"))
        rows.append([a.get("label"), a.get("predicted_before_ms"), a.get("predicted_ms"), m,
                     f"{rel:.3f}x" if is_num(rel) else None, err,
                     f"{e:.2e}" if is_num(e) else None, a.get("bf16_layers"), "chosen" if a.get("chosen") else ""])
    return table(["assignment", "predicted before built, ms", "final objective, ms", "measured ms",
                  "time / chosen (per round)", "prediction error", "max rel err", "bf16 layers", ""], rows,
                 num_cols=(1, 2, 3, 4, 5, 6, 7), row_classes=["differs" if a.get("chosen") else "" for a in alts])


def loop_table(r: dict) -> str:
    rows, classes = [], []
    for rd in (r.get("loop") or {}).get("rounds") or []:
        for n in rd.get("networks") or []:
            if not is_num(n.get("measured_ms")):
                continue
            new = n.get("label") in (rd.get("new") or [])
            kind = ("new: predicted before it was built" + (f" ({n['basis']})" if n.get("basis") else "")
                    if new else "timed in an earlier round: agreement")
            rows.append([rd.get("round"), n.get("label"), n.get("predicted_ms"), n.get("measured_ms"),
                         pct(n.get("error")) if n.get("basis") != "timed before" else "in sample", kind])
            classes.append("differs" if n.get("label") == rd.get("solution") else "")
    if not rows:
        return empty("no network was timed in place (end-to-end timing off)")
    lp = r.get("loop") or {}
    head = (f"<p>{'Converged' if lp.get('converged') else 'Stopped at the round limit'}; returned: "
            f"{esc(lp.get('chosen'))}; fastest in the end-to-end check: {esc(lp.get('fastest_measured'))}.</p>")
    return head + table(["round", "assignment", "predicted ms", "measured ms (in place)", "error", ""], rows,
                        num_cols=(2, 3, 4), row_classes=classes)


SC_W, SC_H, SC_PAD = 460, 380, 46


def scatter(r: dict) -> str:
    pts = [p for p in r.get("kernels") or [] if is_num(p.get("innet_ms")) and p.get("innet_ms") > 0]
    if not pts:
        return empty("no kernel was timed in place")
    vals = [p.get(k) for p in pts for k in ("innet_ms", "calibrated_ms", "isolated_cold_ms")]
    lo = min(v for v in vals if is_num(v) and v > 0)
    hi = max(v for v in vals if is_num(v))
    x = Axis(10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi)), SC_PAD, SC_W - 10, True)
    y = Axis(x.lo, x.hi, SC_H - SC_PAD, 10, True)
    parts = [f'<line class="grid" x1="{x(x.lo):.1f}" y1="{y(x.lo):.1f}" x2="{x(x.hi):.1f}" y2="{y(x.hi):.1f}"/>']
    for t in x.ticks():
        parts.append(text(x(t), SC_H - SC_PAD + 14, num_label(t), "middle"))
        parts.append(text(SC_PAD - 4, y(t) + 4, num_label(t), "end"))
    parts.append(text((SC_W + SC_PAD) / 2, SC_H - 8, "measured in the network, ms", "middle"))
    parts.append(text(4, 12, "predicted, ms"))
    for p in pts:
        m = p["innet_ms"]
        for key, colour in (("isolated_cold_ms", "#bab0ac"), ("calibrated_ms", "#4e79a7")):
            v = p.get(key)
            if is_num(v) and v > 0:
                parts.append(f'<circle cx="{x(m):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}" fill-opacity="0.7">'
                             f"<title>{esc(p.get('network'))} {esc(p.get('layer'))} {esc(p.get('candidate'))}: "
                             f"{esc(key)} {esc(unit(v, 'ms', 4))}, in network {esc(unit(m, 'ms', 4))}</title></circle>")
    parts += legend([('<circle cx="5" cy="5" r="4" fill="#bab0ac"/>', "isolated, weights cold"),
                     ('<circle cx="5" cy="5" r="4" fill="#4e79a7"/>', "calibrated")], SC_PAD, SC_H - 30)
    return svg(SC_W, SC_H + 10, parts, "predicted against measured kernel times")


def versus_greedy(r: dict) -> str:
    vg = r.get("versus_greedy") or {}
    changes = vg.get("changes") or []
    if not changes:
        return empty("the selection equals warm-cache greedy")
    rows = [[c.get("name"), c.get("reason"), c.get("baseline"), c.get("chosen"), c.get("baseline_ms"),
             c.get("chosen_ms"), c.get("baseline_transform_ms"), c.get("chosen_transform_ms"),
             nbytes(c.get("baseline_weight_bytes")), nbytes(c.get("chosen_weight_bytes")), c.get("text")]
            for c in changes]
    head = ["layer", "why", "greedy", "selected", "greedy ms", "selected ms", "greedy transforms ms",
            "selected transforms ms", "greedy weights", "selected weights", "explanation"]
    return f"<p>{esc(vg.get('summary'))}</p>" + table(head, rows, num_cols=(4, 5, 6, 7))


# ---------------------------------------------------------------------------------------------

def breakdown_table(r: dict) -> str:
    b = r.get("breakdown")
    if not b:
        return empty("not timed in place (no closed loop in this run)")
    e2e = b.get("e2e_ms")
    rows = [[p.get("part"), p.get("calls"), p.get("ms"),
             f"{100 * p['ms'] / e2e:.1f}%" if is_num(p.get("ms")) and is_num(e2e) and e2e else DASH]
            for p in b.get("parts") or []]
    rows.append(["network, end to end", b.get("kernel_calls"), e2e, "100%"])
    rows.append(["conv kernels alone, cold / warm", None,
                 f"{fmt(b.get('conv_isolated_cold_ms'))} / {fmt(b.get('conv_isolated_warm_ms'))}", DASH])
    return table(["part", "calls", "ms", "share"], rows, num_cols=(1, 2, 3))


def blocks_table(r: dict) -> str:
    bs = r.get("blocks") or []
    if not bs:
        return empty("no block chosen: every layer runs as its own kernel")
    rows = []
    for b in bs:
        pl = b.get("per_layer_innet") or {}
        rows.append([" + ".join(b.get("members") or []), " → ".join(b.get("shapes") or []), b.get("kernel"),
                     nbytes(b.get("traffic_saved_bytes")), b.get("cold_ms"), b.get("per_layer_best_cold_ms"),
                     b.get("innet_ms"), pl.get("innet_ms"), pl.get("network")])
    return table(["Layers", "Shapes", "Kernel", "Traffic saved", "Cold ms", "Per-layer best cold ms (sum)",
                  "In network ms", "Per-layer in network ms", "in network"], rows, num_cols=(4, 5, 6, 7))


def render_html(report: dict) -> str:
    """The whole page for one report dict (as returned by ``make_report`` or read from report.json)."""
    r = report or {}
    layers, convs, others = list(r.get("layers") or []), conv_layers(r), other_layers(r)
    body = [
        header(r),
        summary(r),
        section("Conv layers", conv_table(convs, (r.get("hardware") or {}).get("peak_gflops")),
                "Highlighted rows: the whole-graph choice differs from the candidate fastest on its own."),
        section("Blocks", blocks_table(r),
                "A block computes a chain of layers in one kernel (a depthwise conv and the 1x1 conv reading "
                "it), its hidden tensor in a task's buffer instead of memory: chosen by the same whole-graph "
                "optimisation, on all its layers or none. Traffic saved: the hidden tensor written and read "
                "back by the per-layer kernels. Per-layer: the fastest kernel alone of each member, summed, and "
                "the members' in-place time in a network of this run that computed them one by one."),
        section("Closed loop", loop_table(r),
                "Each round solves with the calibration the networks timed so far give, builds what it "
                "has not measured yet, and times every built network plainly and kernel by kernel; the "
                "prediction shown is the round's, made before it timed the network: for a new network a "
                "prediction, for one an earlier round timed an agreement."),
        section("Predicted against measured", scatter(r),
                "Every conv kernel timed in place in a built network: its isolated cold time and its "
                "calibrated cost against its time in the network (log scales; the line is equality)."),
        section("Where the time goes, in place", breakdown_table(r),
                "The returned network timed kernel by kernel inside the running network (the VM's instrument "
                "hook, its own cost taken out). A kernel's in-place time includes its thread-pool launch and "
                "join; conv kernels alone (cold: weights flushed; warm) show what running in the network adds."),
        section("Assignments built and timed", alternatives(r),
                "The solver's assignments of each loop round, the best assignments of other cache-residency "
                "levels and warm-cache greedy's, each built and timed end to end in interleaved rounds as a "
                "check; the rule that picked the returned one is the summary's Chosen by. Time / chosen is the median over rounds of "
                "the ratio to the returned assignment's time in the same round, which a slow spell of the "
                "machine does not move."),
        section("Versus warm-cache greedy", versus_greedy(r),
                "Greedy takes each layer's fastest candidate with warm weights. Why: cache = greedy's "
                "choice is fast warm but greedy's whole selection overflows the cache budget and runs "
                "cold; faster = the selected choice is faster in the network; layout = it saves layout "
                "transforms on its edges; neighbours = it suits the choices around it."),
        section("Per-layer cost", cost_chart(layers),
                "Bar: cost of the chosen implementation; black tick: cold time of the fastest candidate alone."),
        section("Candidate spread", spread_chart(convs),
                "Every candidate's cold time per conv layer; ringed: the chosen one."),
        section("Other layers", other_table(others)),
        section("Candidates per conv layer", candidate_details(convs)),
    ]
    title = f"graphselect report: {fmt(r.get('model'))}"
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
