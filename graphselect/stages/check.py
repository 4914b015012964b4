"""Stage 7: every output of every built network against the reference, and the end-to-end
timing against each other and onnxruntime (DESIGN.md, "Check")."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..measure.reference import TOLERANCE, compare_outputs
from .build import Built, networks
from .load import Imported, inputs, quantized, reference_for
from .measure import load_probe
from .settings import Settings

# A QDQ (quantized) model: a value within rounding error of a rounding boundary of a fake-quant
# goes either way, and the step propagates; two correct executions of the same QDQ model differ by
# a few output steps (onnxruntime's own, optimized (int8 kernels) against unoptimized (float32 ops):
# 7.8e-3 on a QDQ ResNet-18, bench/results/int8-20261202.md)
QDQ_TOLERANCE = 3e-2

@dataclass(frozen=True)
class Checked:
    errors: dict                       # label -> max relative error against the reference, over all outputs
    rounds: object                     # measure.e2e.Rounds of the built networks (None without timing)
    versus_ort: object                 # measure.e2e.Rounds of the returned one and onnxruntime (None: not timed)
    measured_ms: dict                  # label (and "onnxruntime") -> median ms
    reference: str = ""                # what the outputs were checked against (measure.reference)
    reference_note: str = ""           # why onnxruntime on the model as given was not the reference
    samples: dict | None = None        # lower precision: the returned network on SAMPLES inputs (agreement())
    user_ms: float | None = None       # the returned network as a user calls it (numpy in, outputs copied)
    user_ratio: float | None = None    # ... against onnxruntime's run (which converts and copies too)
    # the thread pool's hand-off per kernel call read before and after the timing (us; None: not
    # read here): the host's state, which moves mobile networks and onnxruntime up to 2x
    handoff_us: tuple[float, float] | None = None


USER = "user call"    # the returned network timed as a user calls it, beside the bare call
CHECK_SECONDS = 3.0    # the built networks are compared for at least this long (pauses not counted)


def check(imported: Imported, built: list[Built], chosen: str, s: Settings, store=None) -> Checked:
    """:func:`checked`; on an RPC device, its session released at once afterwards."""
    try:
        return checked(imported, built, chosen, s, store)
    finally:
        if s.remote:
            from ..measure.rpc import release_sessions
            release_sessions()


def checked(imported: Imported, built: list[Built], chosen: str, s: Settings, store=None) -> Checked:
    """Every output of every built network against the reference (onnxruntime, or what
    ``measure.reference`` falls back to); then the built networks timed against each other (one
    runtime: no pauses, so many rounds), and the returned one against onnxruntime (pauses at every
    switch, so ``benchmark_runs`` calls). On an RPC device the networks run and are timed there
    (the reference still runs here), and onnxruntime, which runs here, is not timed against them."""
    prep = imported.prepared
    xs = inputs(imported)
    feeds = dict(zip(prep.input_names, xs))
    errs: dict[str, float] = {}
    ref = None
    if s.verify or s.benchmark_runs:
        s.progress("verify", 0, 1, "running the reference")
        ref = reference_for(imported, s, xs)
    nets = networks(built, s) if s.verify or s.benchmark_runs else {}
    samples = None
    if s.verify:
        where = f" on the RPC device ({s.rpc.key})" if s.remote else ""
        s.progress("verify", 0, 1, f"comparing every output{where} with {ref.name}")
        # a lower-precision network is held to --tolerance by the selection (auto) or reported
        # against it (bf16); here only a gross error is a failure
        tol = TOLERANCE if s.precision == "fp32" else LOWP_SANITY
        if quantized(imported.lg):
            tol = max(tol, QDQ_TOLERANCE)
        for b in built:
            got = nets[b.label].run(xs)
            errs[b.label] = compare_outputs(got, ref.outputs, prep.output_names, b.label, ref.name, tol)
        if s.precision != "fp32":
            samples = agreement(nets[chosen], imported, s)
    if not s.benchmark_runs:
        return Checked(errs, None, None, {}, ref.name if ref else "", ref.why if ref else "", samples)
    from ..measure.e2e import compare, ort_runner
    from ..measure.peak import HandoffProbe
    versus = ref.timeable and not s.remote
    s.progress("benchmark", 0, 1, f"timing end to end ({len(built)} network(s)"
               + (", then against onnxruntime)" if versus else ")"))
    probe = load_probe(s, store) if store is not None else None
    quiet = probe.quiet if probe is not None else None
    fns = {b.label: nets[b.label].runner(xs) for b in built}
    handoff = None if s.remote else HandoffProbe(s.target, s.spec.threads)
    hand = handoff() if handoff is not None else None
    ts = compare(fns, runs=s.benchmark_runs, quiet=quiet, waits=6, seconds=CHECK_SECONDS) \
        if len(fns) > 1 or not versus else None
    vs = None
    if versus:
        # blocks of 10: half the runtime switches, each of which costs a 1 s pause
        # the bare call (inputs converted beforehand, outputs left in TVM tensors) and a user's
        # call (numpy in, every output copied out, as onnxruntime's run does)
        vs = compare({chosen: fns[chosen], USER: nets[chosen].user_runner(xs),
                      "onnxruntime": ort_runner(ref.session, feeds)},
                     runs=s.benchmark_runs, block=10, quiet=quiet, waits=6)
    measured = {k: ts.median(k) for k in fns} if ts is not None else {chosen: vs.median(chosen)}
    if vs is not None:
        measured["onnxruntime"] = vs.median("onnxruntime")
    user = (vs.median(USER), vs.ratio(USER, "onnxruntime")) if vs is not None else (None, None)
    hands = (hand, handoff()) if handoff is not None else None
    return Checked(errs, ts if ts is not None else vs, vs, measured, ref.name, ref.why, samples, *user, hands)


SAMPLES = 8            # inputs a lower-precision network's error and top-1 agreement are measured on
LOWP_SANITY = 0.5      # a lower-precision network further than this from the reference is broken


def agreement(net, imported: Imported, s: Settings) -> dict:
    """A network against the fp32 reference on :data:`SAMPLES` random inputs (seeds 1..): the
    largest relative error over them and every output, and how often the first output's arg max
    over its last axis (top-1, for a classifier) is the reference's."""
    from ..runtime import random_inputs
    prep = imported.prepared
    worst, same, total = 0.0, 0, 0
    ref = None
    for seed in range(1, SAMPLES + 1):
        xs = random_inputs(prep.input_shapes, seed=seed)
        if ref is None or ref.session is None:      # the evaluator has no session to run again
            ref = reference_for(imported, s, xs)
            want = ref.outputs
        else:                                        # the same session, the next input
            want = tuple(ref.session.run(None, dict(zip(prep.input_names, xs))))
        got = net.run(xs)
        worst = max(worst, compare_outputs(got, want, prep.output_names, "", ref.name, math.inf))
        g, w = np.asarray(got[0]), np.asarray(want[0])
        if g.ndim >= 1 and g.shape[-1] > 1:
            a, b = g.reshape(-1, g.shape[-1]).argmax(-1), w.reshape(-1, w.shape[-1]).argmax(-1)
            same += int((a == b).sum())
            total += a.size
    return {"inputs": SAMPLES, "max_rel_error": worst, "top1_agree": same, "top1_total": total,
            "top1_agreement": same / total if total else None}


