"""Plain-text summary of the selection report for the CLI: no colours, ASCII only.

Missing values print as "-"; column widths come from the content and shrink (cells cut with
"...") to keep table lines within ``width`` where the headers allow it.
"""
from __future__ import annotations

import math
import textwrap

MISSING = "-"
SEP = "  "
MIN_COL = 8          # a shrinkable column is never cut below this (or its header, if shorter)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _ms(v, nd: int = 3) -> str:
    return f"{v:.{nd}f} ms" if _num(v) else MISSING


def _s(v) -> str:
    return MISSING if v is None or v == "" else str(v)


def _cut(s: str, w: int) -> str:
    return s if len(s) <= w else (s[: w - 3] + "..." if w > 3 else s[:w])


def _fit(widths: list[int], shrinkable: list[bool], mins: list[int], width: int) -> list[int]:
    """Narrow the widest shrinkable columns, one character at a time, until the line fits."""
    widths = list(widths)
    excess = sum(widths) + len(SEP) * (len(widths) - 1) - width
    while excess > 0:
        cands = [i for i, w in enumerate(widths) if shrinkable[i] and w > mins[i]]
        if not cands:
            break
        i = max(cands, key=lambda j: widths[j])
        widths[i] -= 1
        excess -= 1
    return widths


def columns(headers: list[str], rows: list[list[str]], *, width: int, right=(), shrink=()) -> list[str]:
    """Aligned text table: header, rule, rows. ``right``/``shrink``: column indices."""
    n = len(headers)
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i]) for i in range(n)]
    mins = [min(widths[i], max(MIN_COL, len(headers[i]))) for i in range(n)]
    widths = _fit(widths, [i in shrink for i in range(n)], mins, width)

    def line(cells):
        out = [(_cut(c, w).rjust(w) if i in right else _cut(c, w).ljust(w))
               for i, (c, w) in enumerate(zip(cells, widths))]
        return SEP.join(out).rstrip()
    return [line(headers), SEP.join("-" * w for w in widths)] + [line(r) for r in rows]


def _f3(v) -> str:
    return f"{v:.3f}" if _num(v) else MISSING


def _conv_rows(report: dict) -> list[list[str]]:
    rows = []
    for l in report.get("layers") or []:
        if l.get("kind") != "conv":
            continue
        fa, ch = l.get("fastest_alone"), l.get("chosen")
        other = "" if fa == ch and fa is not None else _s(fa)
        rows.append([_s(l.get("name")), _s(l.get("shape")), _s(ch), _f3(l.get("isolated_cold_ms")),
                     _f3(l.get("innet_ms")), _f3(l.get("cost_ms")), other])
    return rows


def _pct(v) -> str:
    return f"{100 * v:+.1f}%" if _num(v) else MISSING


def _loop_rows(report: dict) -> list[list[str]]:
    rows = []
    for r in (report.get("loop") or {}).get("rounds") or []:
        for n in r.get("networks") or []:
            if not _num(n.get("measured_ms")) or n.get("new") is False:   # only predictions made before the build
                continue
            rows.append([str(r.get("round")), _s(n.get("label")), _ms(n.get("predicted_ms")),
                         _ms(n.get("measured_ms")), _pct(n.get("error")) if n.get("basis") != "timed before"
                         else "in sample", _s(n.get("basis"))])
    return rows


def _ratio(report: dict) -> str:
    r = report.get("ratio_to_onnxruntime")
    if not _num(r):
        return MISSING
    return f"{r:.2f}x ({'faster' if r < 1 else 'slower' if r > 1 else 'same'} than onnxruntime)"


def _solver(report: dict) -> str:
    s = report.get("solver") or {}
    opt = {True: "optimal", False: "not proven optimal"}.get(s.get("optimal"), MISSING)
    secs = f"{s['seconds']:.2f} s" if _num(s.get("seconds")) else MISSING
    gap = f", gap {s['gap']:g}" if _num(s.get("gap")) and s.get("gap") else ""
    return f"{_s(s.get('method'))}, {opt}, {secs}{gap}"


def _stages(report: dict) -> str:
    st = report.get("stage_seconds") or {}
    return ", ".join(f"{k} {v:.2f} s" if _num(v) else f"{k} {MISSING}" for k, v in st.items()) or MISSING


def records_summary(rec: dict, show=None) -> str:
    """A report's ``records`` as one line: reused, measured, pruned and priced jobs, each value
    through ``show`` (the terminal's by default; the HTML report passes its own)."""
    show = show or _s
    jobs, reused = rec.get("jobs"), rec.get("reused")
    pruned, priced = len(rec.get("pruned") or ()), len(rec.get("predicted") or ())
    measured = jobs - reused - pruned - priced if _num(jobs) and _num(reused) else None
    return f"{show(reused)} reused, {show(measured)} measured" + (f", {pruned} pruned (could not win)" if pruned else "") \
        + (f", {priced} priced from their timed sizes" if priced else "")


def _records(report: dict) -> str:
    return records_summary(report.get("records") or {})


def _e2e(report: dict) -> list[tuple[str, str]]:
    err = report.get("max_rel_err")
    ref = report.get("reference") or {}
    greedy = (report.get("greedy") or {}).get("predicted_ms")
    cal = report.get("calibration") or {}
    calib = (f"{cal.get('networks')} network(s), warm share at best {_s(cal.get('warm_max'))}, capacity "
             f"x{_s(cal.get('capacity'))}, input miss {_s(cal.get('input_miss'))}, scale x{_s(cal.get('scale'))}, "
             f"{_ms(cal.get('launch_ms'), 4)} per kernel call"
             if cal.get("networks") else f"none (isolated cold timings, {_ms(cal.get('launch_ms'), 4)} per kernel call "
                                         "from the launch probe)")
    pr = report.get("prediction") or {}
    if _num(pr.get("predicted_ms")):
        before = (f"{_ms(pr.get('predicted_ms'))} before it was built (round {_s(pr.get('round'))}, "
                  f"{_s(pr.get('basis'))}); ")
    else:
        before = ""
    if pr.get("basis") == "timed before":
        pred_err = "no prediction: an earlier run timed this network"
    else:
        pred_err = f"prediction error {_pct(report.get('prediction_error'))}"
    return [
        ("chosen by", _s(report.get("chosen_by"))),
        ("predicted", f"{before}{_ms(report.get('predicted_e2e_ms'))} by the final calibrated objective, "
                      f"{_ms(report.get('isolated_predicted_e2e_ms'))} from isolated timings (greedy {_ms(greedy)}, "
                      f"layout transforms {_ms(report.get('predicted_transform_ms'))})"),
        ("measured", f"{_ms(report.get('measured_e2e_ms'))} (quiet rounds {_ms(report.get('measured_quiet_ms'))}; "
                     f"{pred_err}; the final objective, fitted to this run, agrees to "
                     f"{_pct(report.get('calibrated_agreement'))})"
                     if _num(report.get("measured_e2e_ms")) else MISSING),
        ("calibration", calib),
        ("onnxruntime", f"{_ms(report.get('onnxruntime_ms'))}, ratio {_ratio(report)}"
                        + (f"; as a user calls it (numpy in, outputs copied) {_ms(report.get('measured_user_ms'))}, "
                           f"ratio {report['ratio_to_onnxruntime_user']:.2f}x"
                           if _num(report.get("ratio_to_onnxruntime_user")) else "")),
        *([("host state", "thread pool hand-off {:.2f} / {:.2f} us per kernel call before / after the timing "
                          "(it moves small-kernel networks and onnxruntime up to 2x on shared VMs)"
            .format(*report["check_handoff_us"]))] if _num_pair(report.get("check_handoff_us")) else []),
        ("solver", _solver(report)),
        ("transforms", f"{_s(report.get('layout_transforms'))} layout_transform ops"),
        *([("blocks", _blocks(report))] if report.get("blocks") else []),
        ("max rel err", (f"{err:.2e}" if _num(err) else MISSING)
         + (f" (every output, against {ref['name']})" if ref.get("name") else "")),
        *([("precision", _precision(report))] if (report.get("precision") or {}).get("mode", "fp32") != "fp32"
          or set((report.get("precision") or {}).get("layers") or {}) - {"fp32"} else []),
        ("in place", _breakdown(report)),
        ("stages", _stages(report)),
        ("records", _records(report)),
    ]


def _blocks(report: dict) -> str:
    """The chosen blocks: how many, the hidden traffic they save, their time against the per-layer
    kernels' (the fastest alone of each member, summed)."""
    bs = report.get("blocks") or []
    saved = sum(b.get("traffic_saved_bytes") or 0 for b in bs)
    cold = sum(b.get("cold_ms") or 0 for b in bs)
    alone = sum(b.get("per_layer_best_cold_ms") or 0 for b in bs)
    return (f"{len(bs)} chosen ({', '.join('+'.join(b['members']) for b in bs[:4])}{', ...' if len(bs) > 4 else ''}), "
            f"{saved / 2**20:.1f} MiB of hidden traffic saved; cold {_ms(cold)} against {_ms(alone)} for the "
            f"fastest per-layer kernels alone")


def _precision(report: dict) -> str:
    p = report.get("precision") or {}
    layers = ", ".join(f"{n} {k}" for k, n in sorted((p.get("layers") or {}).items())) or MISSING
    sm = p.get("samples") or {}
    top1 = (f"; top-1 equal to fp32 on {sm['top1_agree']}/{sm['top1_total']} sample inputs"
            if _num(sm.get("top1_total")) and sm.get("top1_total") else "")
    worst = f", {sm['max_rel_error']:.2e} at worst over {sm['inputs']} inputs" if _num(sm.get("max_rel_error")) else ""
    if p.get("mode") == "fp32":       # a QDQ model's int8 convs: its own arithmetic, no tolerance spent
        return f"fp32: {layers} conv layers (int8: the QDQ model's quantized convs, computed in integers)"
    within = {True: "within", False: "OVER"}.get(p.get("within_tolerance"), MISSING)
    return (f"{_s(p.get('mode'))}: {layers} conv layers; error {within} the tolerance {_s(p.get('tolerance'))}"
            f"{worst}{top1}")


def _num_pair(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 2 and all(_num(x) for x in v)


def _breakdown(report: dict) -> str:
    b = report.get("breakdown")
    if not b:
        return MISSING
    parts = ", ".join(f"{p['part']} {_ms(p['ms'])}" for p in b.get("parts") or [])
    return (f"{parts} of {_ms(b.get('e2e_ms'))} ({b.get('kernel_calls')} kernel calls; conv kernels alone "
            f"{_ms(b.get('conv_isolated_cold_ms'))} cold, {_ms(b.get('conv_isolated_warm_ms'))} warm)")


def _labelled(pairs: list[tuple[str, str]], width: int) -> list[str]:
    lw = max(len(k) for k, _ in pairs) + 2
    out = []
    for k, v in pairs:
        out += textwrap.wrap(v, width=max(width, lw + 20), initial_indent=k.ljust(lw),
                             subsequent_indent=" " * lw, break_on_hyphens=False) or [k]
    return out


def summary_table(report: dict, *, width: int = 120) -> str:
    """Per-conv-layer table, then the end-to-end numbers, as one string (no trailing newline).

    Columns: the chosen candidate's cold time alone (weights flushed), its time in place in the
    built network, and the calibrated cost the solver used (ms). The "fastest" column (fastest alone) is
    blank where the chosen candidate is the fastest on its own (weights cold).
    """
    report = report or {}
    ins = report.get("inputs") or ([report["input"]] if report.get("input") else [])
    shape = ", ".join("x".join(map(str, i.get("shape") or [])) for i in ins) or MISSING
    title = (f"{_s(report.get('model'))}  input{'s' if len(ins) > 1 else ''} {shape}  target {_s(report.get('target'))}  "
             f"threads {_s(report.get('threads'))}")
    rows = _conv_rows(report)
    lines = [_cut(title, width)]
    runner = report.get("runner") or {}
    if runner.get("kind") == "rpc":
        lines.append(_cut(f"device {_s(report.get('cpu'))}  via the RPC tracker {_s(runner.get('tracker'))}, key "
                          f"{_s(runner.get('key'))}", width))
    lines.append("")
    if rows:
        lines += columns(["layer", "shape", "chosen", "cold", "in net", "cost", "fastest"], rows,
                         width=width, right={3, 4, 5}, shrink={0, 1, 2, 6})
    else:
        lines.append("no conv layers")
    lines.append("")
    lines += _labelled(_e2e(report), width)
    loop = _loop_rows(report)
    if loop:
        lines += ["", "closed loop: each round's prediction of the networks it built, made before they ran:"]
        lines += columns(["round", "assignment", "predicted", "in place", "error", "calibration had seen"], loop,
                         width=width, right={2, 3, 4}, shrink={1, 5})
    alts = [a for a in report.get("alternatives") or [] if _num(a.get("measured_ms"))]
    if len(alts) > 1:
        lines += ["", "assignments built and timed end to end (chosen by: see above):"]
        lines += columns(["assignment", "predicted", "measured", "/ chosen", ""],
                         [[_s(a.get("label")), _ms(a.get("predicted_ms")), _ms(a.get("measured_ms")),
                           f"{a['relative_to_chosen']:.3f}x" if _num(a.get("relative_to_chosen")) else MISSING,
                           "chosen" if a.get("chosen") else ""] for a in alts],
                         width=width, right={1, 2, 3}, shrink={0})
    vg = report.get("versus_greedy") or {}
    if vg.get("changes"):
        lines += ["", _cut("versus warm-cache greedy: " + _s(vg.get("summary")), width * 3)]
        rows = [[_s(c.get("name")), _s(c.get("reason")), _s(c.get("baseline")), _s(c.get("chosen")),
                 f"{c['saved_ms']:.3f}" if _num(c.get("saved_ms")) else MISSING]
                for c in vg["changes"][:MAX_CHANGES]]
        lines += columns(["layer", "why", "greedy", "chosen", "saves ms"], rows, width=width, right={4},
                         shrink={0, 2, 3})
        if len(vg["changes"]) > MAX_CHANGES:
            lines.append(f"... {len(vg['changes']) - MAX_CHANGES} more in report.json / report.html")
    return "\n".join(lines)


MAX_CHANGES = 12
