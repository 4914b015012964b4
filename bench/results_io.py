"""Where benchmark scripts write: bench/results/STEM-STAMP.{md,json}."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def save(stem: str, md: str, data) -> Path:
    """Print ``md`` and write it and ``data`` (as JSON) under a time stamp; returns the .md path."""
    print(md)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}-{stamp}.json").write_text(json.dumps(data, indent=1, default=str))
    path = RESULTS / f"{stem}-{stamp}.md"
    path.write_text(md)
    return path


def cpu_line() -> str:
    """The CPU a figure came from, as ``lscpu`` names it: one marketing name ("AMD EPYC") covers
    Zen 3 to Zen 5, so the family and model go with it."""
    from graphselect.target import cpu_id
    return cpu_id()
