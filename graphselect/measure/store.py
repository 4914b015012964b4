"""Measurement records in an embedded SQLite database, reused across runs.

Every key field changes a timing (TensorRT's timing cache keeps the same): workload, candidate,
the version of the code that generates the kernel (``graphselect.codehash``), target, CPU model,
thread count and TVM version. One row per measurement, committed as soon as it is taken, so an
interrupted run keeps what it measured; WAL mode lets a reader and a writer coexist. The schema
version is part of the table names.

Beside the isolated records the store keeps what built networks showed (``networks_v3``: one
row per built network, its other kernels by kind and the thread pool's hand-off read around
its timing since 2026-12-03; ``innet_v2``: its conv
kernels' in-network times), from which
``costmodels.calibration.fit`` calibrates this machine; they are keyed by the same context, so
another CPU, thread count or TVM version starts uncalibrated. ``pruned_v1`` keeps, per workload,
the candidates the last run pruned (``measure.scouts``, ``.twins``) and a digest of the records
that decision was made from: a later run prunes them again while those records are unchanged.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from costmodels.calibration import KernelObservation, NetworkObservation

TABLE = "records_v4"          # v4: in-cold times (2026-12)
NETWORKS = "networks_v3"
INNET = "innet_v2"
PRUNED = "pruned_v1"        # what one run pruned of a workload, and the records it was decided from
KEEP_NETWORKS = 60          # per context: the newest built networks the calibration reads


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
    version: str = ""       # the code version that generated the kernel
    load: float = 1.0       # reference kernel's time while this was timed / its quiet time
    flag: str | None = None  # why the timing is not trusted (re-timed on the next run), or None
    incold_ms: float | None = None   # every argument flushed, the input too (None: as cold)

    @property
    def incold(self) -> float:
        return self.cold_ms if self.incold_ms is None else self.incold_ms

    @property
    def ok(self) -> bool:
        return self.error is None


def _kinds(text) -> dict:
    """A stored network's other kernels by kind (none for a row stored before they were kept)."""
    try:
        d = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): tuple(v) for k, v in d.items() if isinstance(v, list) and len(v) == 6}


def default_path() -> Path:
    env = os.environ.get("GRAPHSELECT_CACHE")
    if env:
        return Path(env) / "records.sqlite"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphselect" / "records.sqlite"


def _finite(v):
    return None if v is None or v == float("inf") else v      # SQLite has no infinity


def _inf(v):
    return float("inf") if v is None else float(v)


class RecordStore:
    """``RecordStore(path)``; ``path=None`` keeps records in memory only."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if self.path is None else str(self.path), timeout=30)
        if self.path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
        ctx_cols = "target TEXT, cpu TEXT, threads INTEGER, tvm TEXT"
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (workload TEXT, candidate TEXT, version TEXT, {ctx_cols}, "
            "cold_ms REAL, warm_ms REAL, error TEXT, build_s REAL, rel_err REAL, load REAL, flag TEXT, created REAL, "
            "incold_ms REAL, "
            "PRIMARY KEY (workload, candidate, version, target, cpu, threads, tvm))")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {NETWORKS} (network TEXT PRIMARY KEY, model TEXT, {ctx_cols}, "
            "footprint INTEGER, e2e_ms REAL, kernel_calls INTEGER, conv_innet_ms REAL, other_innet_ms REAL, "
            "other_cold_ms REAL, other_warm_ms REAL, content TEXT, choice TEXT, created REAL, other_incold_ms REAL, "
            "other_kinds TEXT, handoff_us REAL)")
        # stores made before the other kernels were kept by kind, or the hand-off read: their
        # rows read as no kinds and no hand-off
        have = {r[1] for r in self._db.execute(f"PRAGMA table_info({NETWORKS})")}
        for col, typ in (("other_kinds", "TEXT"), ("handoff_us", "REAL")):
            if col not in have:
                self._db.execute(f"ALTER TABLE {NETWORKS} ADD COLUMN {col} {typ}")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {INNET} (network TEXT, workload TEXT, candidate TEXT, family TEXT, "
            "cold_ms REAL, warm_ms REAL, innet_ms REAL, incold_ms REAL)")
        self._db.execute(f"CREATE INDEX IF NOT EXISTS {INNET}_net ON {INNET} (network)")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {PRUNED} (workload TEXT, {ctx_cols}, basis TEXT, pruned TEXT, "
            "created REAL, PRIMARY KEY (workload, target, cpu, threads, tvm))")
        self._db.commit()

    # isolated kernel records ------------------------------------------------------------------

    def get(self, ctx: Context, workload: str, candidate: str, version: str = "") -> Measurement | None:
        row = self._db.execute(
            f"SELECT cold_ms, warm_ms, error, build_s, rel_err, load, flag, incold_ms FROM {TABLE} WHERE workload=? AND "
            "candidate=? AND version=? AND target=? AND cpu=? AND threads=? AND tvm=?",
            (workload, candidate, version, ctx.target, ctx.cpu, ctx.threads, ctx.tvm)).fetchone()
        if row is None:
            return None
        cold, warm, err, bs, rel, load, flag, incold = row
        return Measurement(workload, candidate, _inf(cold), _inf(warm), err, bs or 0.0, rel, version,
                           1.0 if load is None else load, flag, None if incold is None else float(incold))

    def put(self, ctx: Context, m: Measurement) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO {TABLE} VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (m.workload, m.candidate, m.version, ctx.target, ctx.cpu, ctx.threads, ctx.tvm, _finite(m.cold_ms),
             _finite(m.warm_ms), m.error, m.build_s, m.rel_err, m.load, m.flag, time.time(),
             None if m.incold_ms is None else _finite(m.incold_ms)))
        self._db.commit()

    def records(self, ctx: Context | None = None, *, match: str | None = None, flagged: bool = False) -> list[dict]:
        """Rows as dicts (newest first), of one context or all, optionally only those whose
        workload or candidate contains ``match``, or only flagged ones."""
        q = f"SELECT workload, candidate, version, target, cpu, threads, tvm, cold_ms, warm_ms, error, load, flag, " \
            f"created, incold_ms FROM {TABLE}"
        cond, args = self._where(ctx, match)
        if flagged:
            cond.append("flag IS NOT NULL")
        if cond:
            q += " WHERE " + " AND ".join(cond)
        cols = ("workload", "candidate", "version", "target", "cpu", "threads", "tvm", "cold_ms", "warm_ms", "error",
                "load", "flag", "created", "incold_ms")
        return [dict(zip(cols, r)) for r in self._db.execute(q + " ORDER BY created DESC", args)]

    def delete(self, ctx: Context | None = None, *, match: str | None = None, flagged: bool = False,
               key: tuple[str, str, str] | None = None) -> int:
        """Drop records (as :meth:`records` selects them, or the one (workload, candidate,
        version) ``key``); returns how many."""
        cond, args = self._where(ctx, match)
        if flagged:
            cond.append("flag IS NOT NULL")
        if key is not None:
            cond.append("workload=? AND candidate=? AND version=?")
            args += list(key)
        q = f"DELETE FROM {TABLE}" + (" WHERE " + " AND ".join(cond) if cond else "")
        n = self._db.execute(q, args).rowcount
        self._db.commit()
        return n

    @staticmethod
    def _where(ctx, match):
        cond, args = [], []
        if ctx is not None:
            cond.append("target=? AND cpu=? AND threads=? AND tvm=?")
            args += [ctx.target, ctx.cpu, ctx.threads, ctx.tvm]
        if match:
            cond.append("(instr(workload, ?) > 0 OR instr(candidate, ?) > 0)")
            args += [match, match]
        return cond, args

    def __len__(self) -> int:
        return self._db.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]

    # what built networks showed -----------------------------------------------------------------

    def put_network(self, ctx: Context, net: NetworkObservation, kernels: list[KernelObservation], *,
                    content: str = "", choice: tuple[str, ...] = ()) -> None:
        """One built network and its conv kernels' in-network times (one transaction);
        ``content``/``choice``: which model (weights included) and which assignment it was (the
        option name of every layer: option indices differ between option lists)."""
        with self._db:
            self._db.execute(
                f"INSERT OR REPLACE INTO {NETWORKS} VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (net.network, net.model, ctx.target, ctx.cpu, ctx.threads, ctx.tvm, net.footprint_bytes, net.e2e_ms,
                 net.kernel_calls, net.conv_innet_ms, net.other_innet_ms, net.other_cold_ms, net.other_warm_ms,
                 content, json.dumps([str(c) for c in choice]) if choice else "", time.time(),
                 net.other_incold_ms, json.dumps({k: list(v) for k, v in net.other_kinds.items()}),
                 net.handoff_us))
            self._db.execute(f"DELETE FROM {INNET} WHERE network=?", (net.network,))
            self._db.executemany(
                f"INSERT INTO {INNET} VALUES (?,?,?,?,?,?,?,?)",
                [(k.network, k.key[0], k.key[1], k.family, _finite(k.cold_ms), _finite(k.warm_ms), k.innet_ms,
                  None if k.incold_ms is None else _finite(k.incold_ms)) for k in kernels])

    def networks(self, ctx: Context, limit: int = KEEP_NETWORKS) -> tuple[list[NetworkObservation], list[KernelObservation]]:
        """The newest ``limit`` built networks of this context and their kernels."""
        rows = self._db.execute(
            f"SELECT network, model, footprint, e2e_ms, kernel_calls, conv_innet_ms, other_innet_ms, other_cold_ms, "
            f"other_warm_ms, other_incold_ms, other_kinds, handoff_us FROM {NETWORKS} WHERE target=? AND cpu=? "
            "AND threads=? AND tvm=? ORDER BY created DESC LIMIT ?",
            (ctx.target, ctx.cpu, ctx.threads, ctx.tvm, limit)).fetchall()
        nets = [NetworkObservation(*r[:-2], other_kinds=_kinds(r[-2]), handoff_us=r[-1]) for r in rows]
        kernels = []
        for n in nets:
            for wl, cand, fam, cold, warm, t, incold in self._db.execute(
                    f"SELECT workload, candidate, family, cold_ms, warm_ms, innet_ms, incold_ms FROM {INNET} "
                    "WHERE network=? ORDER BY rowid", (n.network,)):
                kernels.append(KernelObservation(n.network, (wl, cand), fam, _inf(cold), _inf(warm), t,
                                                 None if incold is None else _inf(incold)))
        return nets, kernels

    def assignments(self, ctx: Context, content: str) -> list[tuple[str, ...]]:
        """The assignments of the model ``content`` built and timed before, newest first, as option
        names per layer (rows of an older format, which kept indices, are skipped)."""
        out = []
        for (c,) in self._db.execute(
                f"SELECT choice FROM {NETWORKS} WHERE content=? AND target=? AND cpu=? AND threads=? AND tvm=? "
                "ORDER BY created DESC", (content, ctx.target, ctx.cpu, ctx.threads, ctx.tvm)):
            try:
                ch = tuple(json.loads(c)) if c else ()
            except ValueError:
                continue
            if ch and all(isinstance(v, str) for v in ch) and ch not in out:
                out.append(ch)
        return out

    def forget_networks(self, ctx: Context | None = None) -> int:
        """Drop the calibration data (of one context, or all)."""
        with self._db:
            if ctx is None:
                n = self._db.execute(f"DELETE FROM {NETWORKS}").rowcount
                self._db.execute(f"DELETE FROM {INNET}")
                return n
            ids = [r[0] for r in self._db.execute(
                f"SELECT network FROM {NETWORKS} WHERE target=? AND cpu=? AND threads=? AND tvm=?",
                (ctx.target, ctx.cpu, ctx.threads, ctx.tvm))]
            self._db.executemany(f"DELETE FROM {INNET} WHERE network=?", [(i,) for i in ids])
            self._db.executemany(f"DELETE FROM {NETWORKS} WHERE network=?", [(i,) for i in ids])
            return len(ids)

    # what a run pruned ----------------------------------------------------------------------------

    def put_pruned(self, ctx: Context, decisions: dict[str, tuple[str, list[tuple[str, str, str]]]]) -> None:
        """workload -> (basis, [(candidate, version, why), ...]): what a run pruned of each workload
        and the digest (``basis``) of the records it was decided from; replaces what was kept."""
        with self._db:
            self._db.executemany(
                f"INSERT OR REPLACE INTO {PRUNED} VALUES (?,?,?,?,?,?,?,?)",
                [(w, ctx.target, ctx.cpu, ctx.threads, ctx.tvm, basis, json.dumps([list(p) for p in gone]), time.time())
                 for w, (basis, gone) in decisions.items()])

    def pruned(self, ctx: Context) -> dict[str, tuple[str, list[tuple[str, str, str]]]]:
        """The kept decisions of one context, as :meth:`put_pruned` takes them (a row that does not
        read is left out)."""
        out = {}
        for w, basis, text in self._db.execute(
                f"SELECT workload, basis, pruned FROM {PRUNED} WHERE target=? AND cpu=? AND threads=? AND tvm=?",
                (ctx.target, ctx.cpu, ctx.threads, ctx.tvm)):
            try:
                gone = [tuple(str(v) for v in p) for p in json.loads(text)]
            except (ValueError, TypeError):
                continue
            if all(len(p) == 3 for p in gone):
                out[w] = (basis, gone)
        return out

    def forget_pruned(self, ctx: Context | None = None) -> int:
        """Drop the kept pruning decisions (of one context, or all): the next run decides again."""
        cond, args = self._where(ctx, None)
        with self._db:
            return self._db.execute(f"DELETE FROM {PRUNED}" + (" WHERE " + " AND ".join(cond) if cond else ""),
                                    args).rowcount

    def close(self) -> None:
        self._db.close()
