"""The selection report: one dict (``report.json``) from which the HTML page and the terminal
summary are rendered."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .build import make_report

SCHEMA_VERSION = 1


def write_reports(report: dict, outdir) -> dict[str, Path]:
    """Write ``report.json`` and ``report.html`` atomically into ``outdir``."""
    from .html import render_html
    out = Path(outdir)
    paths = {"report_json": out / "report.json", "report_html": out / "report.html"}
    texts = {"report_json": json.dumps(_jsonable(report), indent=1), "report_html": render_html(report)}
    for k, p in paths.items():
        tmp = p.with_name("." + p.name + ".partial")
        tmp.write_text(texts[k])
        os.replace(tmp, p)
    return paths


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


__all__ = ["make_report", "write_reports", "SCHEMA_VERSION"]
