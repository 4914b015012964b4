"""Stage 3: every candidate of every layer timed, or its record reused (DESIGN.md, "Measurement")."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .load import Imported, load
from .settings import Settings

@dataclass(frozen=True)
class Measured:
    plan: object                       # measure.plan.Plan
    measurements: dict                 # (workload, candidate) -> measure.store.Measurement
    timings: dict                      # (workload, candidate) -> costmodels.table.Timing
    jobs: int
    reused: int
    retimed: int                       # records found but not trusted (flagged or stale), so re-timed
    flagged: tuple[tuple[str, str, str], ...]   # (workload, candidate, why) of records not trusted
    seconds: dict = field(default_factory=dict)  # waiting for the builder (build_s) and in the runner (run_s)
    pruned: tuple[tuple[str, str, str], ...] = ()   # (workload, candidate, why) not timed (measure.scouts, .twins)
    new: int = 0                       # jobs with no record, timed by this run
    predicted: tuple[tuple[str, str, str], ...] = ()  # (workload, candidate, why) priced from timed sizes (measure.sizes)
    # jobs = reused + retimed + new + pruned + predicted


def measure(imported: Imported, s: Settings, store) -> Measured:
    from costmodels.table import Timing
    from ..measure import plan as plan_mod
    from ..measure import scouts, twins
    from ..measure.local import REFERENCE, reference_version, stale
    from ..measure.run import measure as run
    from ..measure.store import Measurement
    plan = plan_mod.make_plan(imported.lg, s.target, s.families, s.precisions)
    keys = {j.key: j for j in plan.jobs}
    ref = store.get(s.ctx, *REFERENCE, reference_version())
    quiet = ref.cold_ms if ref is not None else None
    found = [m for k, j in keys.items() if (m := store.get(s.ctx, *k, j.version)) is not None]
    found_keys = {(m.workload, m.candidate) for m in found}
    versions = {j.version for j in plan.jobs}
    # layout ops and transforms that timed neighbours in channel count will price (measure.sizes)
    size_points = {} if s.time_all else _size_points(store, s.ctx, versions)
    later_sized = {} if s.time_all else _to_predict(plan.jobs, found_keys, size_points)
    lay = _layouts(plan)
    first_of = {} if s.time_all else twins.split(j.workload for j in plan.jobs)
    history = {} if s.time_all else _history(store, s.ctx, versions)
    # a conv with no record whose twin (the same conv, another epilogue: another model, or another
    # export of this one) the store has timed is a later twin of that one (issue 24, item 3)
    in_store = _store_twins([j.workload for j in plan.jobs], first_of, {m.workload for m in found}, history)
    for w, w2 in in_store.items():
        for x, f in list(first_of.items()):
            if f == w:
                first_of[x] = w2
        first_of[w] = w2
    # what the last run pruned of a workload is pruned again while the records it was decided from
    # are as that run left them and none is to be re-timed: a refitted parameter model would
    # otherwise decide anew, and an unchanged rerun time what its first run pruned
    kept = {} if s.time_all else store.pruned(s.ctx)
    planned = {j.workload for j in plan.jobs}
    bases = _bases(store, s.ctx, versions, {w: _depends(w, first_of) for w in kept if w in planned}) if kept else {}
    found_by_w: dict = {}
    for m in found:
        found_by_w.setdefault(m.workload, []).append(m)
    again = _again(kept, bases, keys, found_keys, found_by_w, first_of, lambda m: stale(m, quiet))
    probe = None
    if not s.remote and (len(found) + len(later_sized) + len(again) < len(keys) or any(stale(m, quiet) for m in found)):
        # the machine's state now decides which drifted records are worth timing again
        s.progress("measure", 0, len(keys), "timing the reference kernel (load detection)")
        probe = load_probe(s, store)
    now = probe.own_ms if probe is not None else None
    retimed = sum(1 for m in found if stale(m, quiet, now))
    reused = len(found) - retimed
    if probe is not None:
        again = _again(kept, bases, keys, found_keys, found_by_w, first_of, lambda m: stale(m, quiet, now))
    clock: dict = {}
    later = [j for j in plan.jobs if j.workload in first_of and j.key not in again]
    rest = [j for j in plan.jobs if j.workload not in first_of]
    # conv workloads with enough candidates are scouted (measure.scouts): one member per variant
    # first, then only what can still win
    by_w: dict = {}
    for j in rest:
        if twins.twin_key(j.workload) is not None:
            by_w.setdefault(j.workload, {}).setdefault(j.candidate, j)
    scouted = {} if s.time_all else {w: js for w, js in by_w.items() if len(js) >= scouts.MIN_CANDIDATES}
    model = scouts.ParamModel.fit((w, c, *t) for (w, c), t in history.items())
    first, pending = [], {}
    for j in rest:
        if j.workload not in scouted and j.key not in later_sized and j.key not in again:
            first.append(j)
    for w, js in scouted.items():
        js = {c: j for c, j in js.items() if j.key not in again}
        known = {c: (m.cold_ms, m.warm_ms) for m in found_by_w.get(w, ()) if (c := m.candidate) in js}
        pick = set(scouts.scouts([c for c in js if c not in known], known, lambda c, w=w: lay(w, c), model))
        first += [j for c, j in js.items() if c in pick or c in known]
        pending[w] = [j for c, j in js.items() if c not in pick and c not in known]
    from ..measure.builder import Builder
    where = runner(s, probe)
    pruned = [twins.Pruned(w, c, why) for (w, c), why in again.items()]
    if again:
        s.progress("measure", 0, len(keys), f"{len(again)} candidates pruned as the last run pruned them "
                   f"(the records that decided it unchanged)")
    with Builder(s.target, s.workers, cc=s.cc, files=where.files, keep=kernel_dir(s)) as builder:
        def accounted():
            """Distinct jobs timed, reused or pruned so far (two layers of one workload make one job,
            and a later twin's pruning can list it once per layer)."""
            return len(set(meas) | {(p.workload, p.candidate) for p in pruned})

        def timed(jobs):
            shown = accounted() if meas else 0
            return run(jobs, target=s.target, ctx=s.ctx, store=store, timing=s.timing, workers=s.workers,
                       runner=where, cc=s.cc, clock=clock, kernels=kernel_dir(s), builder=builder, known=meas,
                       progress=lambda d, n, m: s.progress("measure", shown + d, len(keys), m))
        meas: dict = {}
        meas.update(timed(first))
        # the sizes between timed ones: priced from them; one whose neighbours failed is timed
        predicted, priced_why, unpriced = _predict_sizes(later_sized, size_points, meas)
        if predicted:
            s.progress("measure", accounted(), len(keys), f"{len(predicted)} layout ops and transforms priced "
                       f"from their timed neighbours in channel count")
        meas.update(predicted)
        if unpriced:
            meas.update(timed([keys[k] for k in unpriced]))
        # the rest of each scouted workload, those with most candidates left first, a few
        # workloads to a batch (enough jobs to keep every compiler process busy): what a batch
        # times teaches the parameter model that ranks the next
        queue = sorted((w for w in pending if pending[w]), key=lambda w: -len(pending[w]))
        while queue:
            seen = dict(history)
            seen.update({k: (m.cold_ms, m.warm_ms) for k, m in meas.items()})
            model = scouts.ParamModel.fit((ww, c, *t) for (ww, c), t in seen.items())
            batch = []
            while queue and len(batch) < scouts.BATCH * max(1, s.workers):
                w = queue.pop(0)
                mine = {c: (m.cold_ms, m.warm_ms) for (ww, c), m in meas.items() if ww == w}
                keep, gone = scouts.prune([j.candidate for j in pending[w]], mine, lambda c, w=w: lay(w, c), model)
                pruned += scouts.to_pruned(w, gone)
                if gone:
                    s.progress("measure", accounted(), len(keys),
                               f"{len(gone)} candidates of {w.split(' epi=')[0]} pruned (predicted over "
                               f"{scouts.MARGIN:.0%} slower than its fastest)")
                keep = set(keep)
                batch += [j for j in pending[w] if j.candidate in keep]
            meas.update(timed(batch))
        if later:
            # a later twin's candidate with a record of its own is never pruned: it is reused (or re-timed
            # when stale) like any record; one its first twin had pruned is pruned for the same reason
            stored = {j.key for j in later if j.key in found_keys}
            gone_first = {(p.workload, p.candidate): p.why for p in pruned}
            as_first = [twins.Pruned(j.workload, j.candidate, f"as on its twin {first_of[j.workload]}: "
                                     f"{gone_first[(first_of[j.workload], j.candidate)]}")
                        for j in dict.fromkeys(later) if j.key not in stored
                        and (first_of[j.workload], j.candidate) in gone_first]
            from_store = set(in_store.values())
            theirs = {k: t for k, t in history.items() if k[0] in from_store}
            by_twin_w: dict = {}            # stored twin workload -> its candidates with a timing
            for (w2, c) in theirs:
                by_twin_w.setdefault(w2, set()).add(c)
            as_first += [twins.Pruned(j.workload, j.candidate, f"its twin {first_of[j.workload]} in the record "
                                      f"store has no timing of it (pruned or failed there)")
                         for j in later if j.key not in stored and _missing(j, first_of, by_twin_w, lay)]
            skip = {(p.workload, p.candidate) for p in as_first}
            keep, by_twin = twins.prune(list(dict.fromkeys(j.key for j in later if j.key not in stored and j.key not in skip)),
                                        first_of, {**theirs, **{k: (m.cold_ms, m.warm_ms) for k, m in meas.items()}},
                                        lay, margin=twins.MARGIN)
            keep = set(keep) | stored
            if by_twin:
                s.progress("measure", accounted(), len(keys), f"{len(by_twin)} candidates of twin convs "
                           f"pruned (their twins ran them over {twins.MARGIN:.0%} slower than the fastest)")
            pruned += as_first + by_twin
            meas.update(timed([j for j in later if j.key in keep]))
    pruned = _unique(pruned)
    gone = {(p.workload, p.candidate) for p in pruned}
    new = sum(1 for k in meas if k in keys and k not in found_keys and k not in gone and k not in predicted)
    for p in pruned:
        meas[(p.workload, p.candidate)] = Measurement(p.workload, p.candidate, math.inf, math.inf,
                                                      f"pruned: {p.why}", version=keys[(p.workload, p.candidate)].version)
    if probe is not None:
        keep_quiet(s, store, probe)
    if not s.time_all:
        decided: dict = {}
        for p in pruned:
            decided.setdefault(p.workload, []).append((p.candidate, keys[(p.workload, p.candidate)].version, p.why))
        now_bases = _bases(store, s.ctx, versions, {w: _depends(w, first_of) for w in decided})
        store.put_pruned(s.ctx, {w: (now_bases[w], gone) for w, gone in decided.items()})
    timings = {k: Timing(m.cold_ms, m.warm_ms, m.rel_err, m.incold_ms) for k, m in meas.items()}
    flagged = tuple((m.workload, m.candidate, m.flag) for m in meas.values() if m.flag)
    return Measured(plan, meas, timings, len(keys), reused, retimed, flagged,
                    {k: round(v, 2) for k, v in clock.items()},
                    tuple((p.workload, p.candidate, p.why) for p in pruned), new,
                    tuple((w, c, why) for (w, c), why in sorted(priced_why.items())))


def _size_points(store, ctx, versions) -> dict:
    """(size group, candidate, version) -> {channel count: (cold, warm, in-cold ms)}: the store's
    finite, unflagged records of layout ops and transforms made by the code versions in use (any
    model's), the newest of each (``measure.sizes``)."""
    from ..measure import sizes
    out: dict = {}
    for r in store.records(ctx, match=None):
        if r["version"] not in versions or r["flag"] or r["error"]:
            continue
        sk = sizes.size_key(r["workload"])
        if sk is None:
            continue
        cold, warm = r["cold_ms"], r["warm_ms"]
        incold = r["incold_ms"] if r["incold_ms"] is not None else cold
        if sizes.finite(cold, warm, incold):
            out.setdefault((sk[0], r["candidate"], r["version"]), {}).setdefault(sk[1], (cold, warm, incold))
    return out


def _to_predict(jobs, found_keys, points) -> dict:
    """(workload, candidate) -> (size group, channel count) of the jobs with no record that
    ``measure.sizes`` prices from timed neighbours instead of timing them (``points``: as
    :func:`_size_points` gives). A job with a record (``found_keys``) counts as timed even when
    ``points`` leaves it out for its flag: it is re-timed in the pass before the pricing, so an
    unchanged rerun prices what the run before it did."""
    from ..measure import sizes
    groups: dict = {}
    recorded: dict = {}
    for j in jobs:
        sk = sizes.size_key(j.workload)
        if sk is None:
            continue
        g = (sk[0], j.candidate, j.version)
        if j.key in found_keys:
            recorded.setdefault(g, set()).add(sk[1])
        else:
            groups.setdefault(g, {}).setdefault(sk[1], set()).add(j.key)
    out = {}
    for g, members in groups.items():
        timed = sizes.to_time(members, set(points.get(g, {})) | recorded.get(g, set()))
        for c, ks in members.items():
            if c not in timed:
                out.update({k: (g, c) for k in ks})
    return out


def _predict_sizes(later: dict, points: dict, meas: dict):
    """The Measurements of the ``later`` jobs (as :func:`_to_predict` gives) interpolated from the
    records ``points`` and this run's ``meas``; why each; and the jobs no two timed neighbours
    bracket (a neighbour failed), to be timed."""
    from ..measure import sizes
    from ..measure.store import Measurement
    pts = {g: dict(p) for g, p in points.items()}
    for (w, c), m in meas.items():
        sk = sizes.size_key(w)
        if sk is not None and m.ok and sizes.finite(m.cold_ms, m.warm_ms, m.incold):
            pts.setdefault((sk[0], c, m.version), {})[sk[1]] = (m.cold_ms, m.warm_ms, m.incold)
    out, why, unpriced = {}, {}, []
    for k, (g, ch) in later.items():
        p = sizes.predict(ch, pts.get(g, {}))
        if p is None:
            unpriced.append(k)
            continue
        out[k] = Measurement(k[0], k[1], p.cold_ms, p.warm_ms, version=g[2], incold_ms=p.incold_ms)
        why[k] = p.why
    return out, why, unpriced


def _depends(workload, first_of) -> tuple:
    """The workloads whose records decide what is pruned of ``workload``: itself and, for a later
    twin, its first twin."""
    return (workload, first_of[workload]) if workload in first_of else (workload,)


def _bases(store, ctx, versions, depends) -> dict:
    """workload -> a digest of the store's records (of the code versions in use) of the workloads
    ``depends`` names for it: every field, the time each was taken included, so a record added,
    re-timed or removed changes it."""
    import hashlib
    import json
    need = {d for ds in depends.values() for d in ds}
    rows: dict = {}
    for r in store.records(ctx):
        if r["workload"] in need and r["version"] in versions:
            rows.setdefault(r["workload"], []).append(json.dumps(
                [r[k] for k in ("candidate", "version", "cold_ms", "warm_ms", "error", "flag", "created", "incold_ms")]))
    out = {}
    for w, ds in depends.items():
        h = hashlib.sha1()
        for d in ds:
            h.update(json.dumps([d, sorted(rows.get(d, ()))]).encode())
        out[w] = h.hexdigest()
    return out


def _again(kept, bases, keys, found_keys, found_by_w, first_of, is_stale) -> dict:
    """(workload, candidate) -> why, of the kept decisions (``RecordStore.pruned``) that still hold:
    the digest of their records is the one they were decided from (``bases``), no record of theirs
    in this plan is to be re-timed (``is_stale``), and the candidate is a job of this plan, of the
    same code version, with no record."""
    out = {}
    for w, (basis, gone) in kept.items():
        if bases.get(w) != basis or any(is_stale(m) for d in _depends(w, first_of) for m in found_by_w.get(d, ())):
            continue
        for c, v, why in gone:
            j = keys.get((w, c))
            if j is not None and j.version == v and (w, c) not in found_keys:
                out[(w, c)] = why
    return out


def _unique(pruned):
    out = {}
    for p in pruned:
        out.setdefault((p.workload, p.candidate), p)
    return list(out.values())


def _store_twins(workloads, first_of, recorded, history) -> dict:
    """workload -> the store's twin of it: for each conv of ``workloads`` that is no later twin in
    ``first_of`` and has no record (``recorded``: workloads with one), the workload of ``history``
    with its twin key and most finite records, if any."""
    from ..measure import twins
    count: dict = {}
    for (w, _c) in history:             # history holds finite records only
        count[w] = count.get(w, 0) + 1
    by_key: dict = {}
    for w, n in count.items():
        k = twins.twin_key(w)
        if k is not None and n > by_key.get(k, ("", 0))[1]:
            by_key[k] = (w, n)
    out = {}
    for w in dict.fromkeys(workloads):
        k = twins.twin_key(w)
        if k is None or w in first_of or w in recorded or k not in by_key or by_key[k][0] == w:
            continue
        out[w] = by_key[k][0]
    return out


def _missing(job, first_of, timed_there, lay) -> bool:
    """Whether ``job``, of a later twin whose first twin is a workload of the store
    (``timed_there``: such a workload -> its candidates with a timing), was pruned (or failed)
    there: no timing of it, while its variant and its layout pair have one there (a variant
    never timed there, as under another family list, is timed here)."""
    from ..measure import scouts
    f = first_of.get(job.workload)
    mine = timed_there.get(f)
    if mine is None or job.candidate in mine:
        return False
    v, pair = scouts.variant(job.candidate), lay(f, job.candidate)
    return any(scouts.variant(c) == v for c in mine) and any(lay(f, c) == pair for c in mine)


def _history(store, ctx, versions) -> dict:
    """(workload, candidate) -> (cold, warm) of the store's finite conv records of this context
    made by the code versions in use (what the parameter model of ``measure.scouts`` learns from)."""
    out = {}
    for r in store.records(ctx, match="conv2d "):
        if r["version"] in versions and r["cold_ms"] is not None and r["warm_ms"] is not None and not r["flag"]:
            out.setdefault((r["workload"], r["candidate"]), (float(r["cold_ms"]), float(r["warm_ms"])))
    return out


def _layouts(plan):
    """(workload, candidate) -> its layout pair as text (``NCHW16c->NCHW32c``), from the plan's options."""
    from ..measure import twins
    out, by_twin = {}, {}
    for lt in plan.layers:
        for o in lt.options:
            if o.kernel is not None:
                text = f"{','.join(o.in_layouts)}->{o.out_layout}"
                out.setdefault(tuple(o.kernel), text)
                by_twin.setdefault((twins.twin_key(o.kernel[0]), o.kernel[1]), text)
    # a workload the plan does not have (a twin in the record store): its twin's in the plan
    return lambda w, c: out.get((w, c)) or by_twin.get((twins.twin_key(w), c), "?")


def kernel_dir(s: Settings):
    """Where compiled kernels are kept for network builds to link (``measure.kernels``)."""
    from ..measure.kernels import kernel_dir as where
    return where(s.cache, s.spec.foreign, s.remote)


def runner(s: Settings, probe=None):
    """Where kernels are timed: the tracker's devices, or this machine guarded by ``probe``."""
    if s.remote:
        from ..measure.rpc import RpcRunner
        return RpcRunner(s.rpc)
    from ..measure.local import LocalRunner
    return LocalRunner(probe)


def load_probe(s: Settings, store):
    """A :class:`measure.local.LoadProbe` that starts from the quiet reference time stored; None
    on an RPC device (taken as dedicated: the probe would time this machine)."""
    from ..measure.local import REFERENCE, LoadProbe, reference_version
    if s.remote:
        return None
    ref = store.get(s.ctx, *REFERENCE, reference_version())
    return LoadProbe(s.target, ref.cold_ms if ref is not None else None)


def keep_quiet(s: Settings, store, probe) -> None:
    """Store this run's floor of the reference kernel as the quiet time the next run starts from.
    A run judges load against the lower of it and its own floor, so the quiet time falls with a
    quieter run and rises again one run after the machine got slower for good (new neighbours on
    a shared L3) instead of calling every later run loaded; until 2026-12 it only ever fell."""
    import math
    from ..measure.local import REFERENCE, reference_version
    from ..measure.store import Measurement
    mine = probe.own_ms
    if math.isfinite(mine):
        store.put(s.ctx, Measurement(*REFERENCE, mine, mine, version=reference_version()))


def retime(model, s: Settings, store, *, match: str | None = None, flagged_only: bool = False,
           input_shape=None) -> list[tuple[str, str, object, object]]:
    """Re-time the records a model's plan uses (those whose workload or candidate contains
    ``match``; only flagged or stale ones with ``flagged_only``; a job with no record is left
    alone): (workload, candidate, old, new)."""
    from ..measure import plan as plan_mod
    from ..measure.local import REFERENCE, reference_version, stale
    from ..measure.run import measure as run
    imported = load(model, s, input_shape)
    plan = plan_mod.make_plan(imported.lg, s.target, s.families, s.precisions)
    ref = store.get(s.ctx, *REFERENCE, reference_version())
    quiet = ref.cold_ms if ref is not None else None
    jobs, old = [], {}
    for j in plan.jobs:
        if j.key in old or (match and match not in j.workload and match not in j.candidate):
            continue
        m = store.get(s.ctx, *j.key, j.version)
        if m is None or (flagged_only and not (m.flag or stale(m, quiet))):
            continue                     # no record (never measured, or pruned: measure.scouts)
        old[j.key] = m
        jobs.append(j)
    for j in jobs:
        store.delete(s.ctx, match=None, key=(j.workload, j.candidate, j.version))
    probe = load_probe(s, store) if jobs else None
    new = run(jobs, target=s.target, ctx=s.ctx, store=store, timing=s.timing, workers=s.workers,
              runner=runner(s, probe), cc=s.cc, kernels=kernel_dir(s),
              progress=lambda d, n, m: s.progress("measure", d, n, m))
    if probe is not None:
        keep_quiet(s, store, probe)
    return [(j.workload, j.candidate, old[j.key], new.get(j.key)) for j in jobs]


