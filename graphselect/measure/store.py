"""Measurement records in an embedded SQLite database, reused across runs.

Every key field changes a timing (TensorRT's timing cache keeps the same): workload, candidate,
target, CPU model, thread count and TVM version. One row per measurement, committed as soon as
it is taken, so an interrupted run keeps what it measured; WAL mode lets a reader and a writer
coexist. The schema version is part of the table name.
"""
from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

TABLE = "records_v2"


@dataclass(frozen=True)
class Context:
    target: str
    cpu: str
    threads: int
    tvm: str


@dataclass(frozen=True)
class Measurement:
    workload: str
    candidate: str
    cold_ms: float          # weights (every argument but the input) flushed from cache before each run
    warm_ms: float          # everything warm
    error: str | None = None
    build_s: float = 0.0
    rel_err: float | None = None   # max |out - reference| / max |reference| on the layer's weights

    @property
    def ok(self) -> bool:
        return self.error is None


def default_path() -> Path:
    env = os.environ.get("GRAPHSELECT_CACHE")
    if env:
        return Path(env) / "records.sqlite"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphselect" / "records.sqlite"


class RecordStore:
    """``RecordStore(path)``; ``path=None`` keeps records in memory only."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if self.path is None else str(self.path), timeout=30)
        if self.path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (workload TEXT, candidate TEXT, target TEXT, cpu TEXT, "
            "threads INTEGER, tvm TEXT, cold_ms REAL, warm_ms REAL, error TEXT, build_s REAL, rel_err REAL, created REAL, "
            "PRIMARY KEY (workload, candidate, target, cpu, threads, tvm))")
        self._db.commit()

    def get(self, ctx: Context, workload: str, candidate: str) -> Measurement | None:
        row = self._db.execute(
            f"SELECT cold_ms, warm_ms, error, build_s, rel_err FROM {TABLE} WHERE workload=? AND candidate=? AND target=? "
            "AND cpu=? AND threads=? AND tvm=?",
            (workload, candidate, ctx.target, ctx.cpu, ctx.threads, ctx.tvm)).fetchone()
        if row is None:
            return None
        cold, warm, err, bs, rel = row
        return Measurement(workload, candidate, float("inf") if cold is None else cold,
                           float("inf") if warm is None else warm, err, bs or 0.0, rel)

    def put(self, ctx: Context, m: Measurement) -> None:
        finite = lambda v: None if v == float("inf") else v  # noqa: E731 - SQLite has no infinity
        self._db.execute(
            f"INSERT OR REPLACE INTO {TABLE} VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (m.workload, m.candidate, ctx.target, ctx.cpu, ctx.threads, ctx.tvm, finite(m.cold_ms),
             finite(m.warm_ms), m.error, m.build_s, m.rel_err, time.time()))
        self._db.commit()

    def __len__(self) -> int:
        return self._db.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]

    def close(self) -> None:
        self._db.close()
