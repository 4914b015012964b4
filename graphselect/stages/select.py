"""Stage 6, the selection, a closed loop: solve, build, time every kernel inside the running
network, calibrate, solve again, until the solver's assignment is one that has been measured
(DESIGN.md, "Closed loop").

Round 0 solves with the calibration this machine's earlier builds left in the record store (none
on a fresh machine: isolated timings as they are) and builds the solver's assignment, the best
of the other residency levels and the warm-cache greedy one. Every built network is timed plainly
and kernel by kernel (``measure.innet``) in interleaved rounds; the observations go to the store
and the calibration is fitted again (``costmodels.calibration.fit``). Each later round solves the
recalibrated Problem; a new assignment is built and timed beside the incumbent (the built network
that round's objective ranks first; the others keep their last timing), the same one ends the
loop. After ``max_rounds`` the best measured assignment under the final objective is returned.
So the final objective's terms, for every kernel of the returned assignment, come from that
assignment's own run: its value for it agrees with the measurement by construction, and only the
figure predicted before a network was built (``Selection.before``) is a prediction.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from ..errors import GraphSelectError
from ..measure.reference import compare_outputs
from .build import Built, build, build_all, networks
from .load import Imported, inputs, reference_for
from .machine import Machine
from .measure import Measured, keep_quiet, load_probe
from .settings import Settings

log = logging.getLogger(__name__)

MAX_ALTERNATIVES = 2     # other residency levels' best assignments built in round 0
# ... on a machine whose store holds networks timed in place (the objective is calibrated), only
# those predicted within this of the solver's pick: round 0's errors on a model new to a
# calibrated machine have reached 14-15% (bench/results/tuning-time-20261206.md and -20261207.md),
# so a level predicted further off would need an error beyond any seen to win
ALT_MARGIN = 0.15
# A new assignment is built only when predicted faster than the best measured one by more than
# this, and round 0 takes an assignment an earlier run of this model timed in place when it is
# predicted within this of the optimum (an unchanged rerun then times nothing): below it the
# in-place timing's noise decides. On a Zen 4 VM one network ran 10.9 and 12.3 ms in two sessions
# seconds apart, and five new networks of the loop predicted 2-4% faster than the best timed one
# ran from 10% slower to 4% faster than it in the same session (bench/results/tuning-time-20261207.md);
# at 1% the loop used up its rounds chasing that noise.
CONVERGED = 0.03
TIE = 1e-6               # a built network within this of the final solve's cost ties with its pick
INNET_SECONDS = 3.0     # an in-place timing session runs at least this long (up to 40 rounds)
ERROR_ROUNDS = 3        # --precision auto without in-place timing: solves to bring the error within tolerance


@dataclass(frozen=True)
class Round:
    index: int
    calibration: dict                  # Calibration.as_dict() the round solved with
    solution: str                      # label of the solver's assignment
    predicted_ms: dict                 # label -> prediction under this round's Problem (built ones)
    measured_ms: dict                  # label -> plain end-to-end ms, networks timed after this round's solve
    new: tuple[str, ...]               # labels built in this round
    error_budget: float | None = None  # the estimated-error budget this round solved with (--precision auto)
    errors: dict = field(default_factory=dict)   # label -> measured relative error against fp32 (new ones)
    # the thread pool's hand-off per kernel call around the round's in-place timing (us; the
    # mean of a reading before and one after; None: not timed here): the host's state
    handoff_us: float | None = None


@dataclass(frozen=True)
class Prediction:
    """What the objective predicted for a network before the network was built and timed: the
    only prediction an error may be reported for (DESIGN.md, "Closed loop")."""
    round: int                         # the round that built it
    ms: float
    # what the calibration it was made with had seen: "new model" (no network of this model timed
    # on this machine before), "new network" (other networks of the model were, earlier or in this
    # run), "timed before" (this very network, by an earlier run: in sample, not a prediction)
    basis: str

    @property
    def out_of_sample(self) -> bool:
        return self.basis != "timed before"


@dataclass(frozen=True)
class Selection:
    isolated: object                   # the Problem of isolated timings (greedy's and the report's baseline)
    problem: object                    # the final calibrated Problem
    calibration: object                # costmodels.calibration.Calibration (final)
    solution: object                   # the returned Assignment
    label: str                         # its label among ``built``
    greedy: object                     # warm-cache greedy Assignment (on the isolated Problem)
    built: tuple[Built, ...]
    innet: dict                        # label -> measure.innet.NetworkTiming (latest)
    rounds: tuple[Round, ...]
    converged: bool
    accuracy: object = None            # _Accuracy: measured errors of the built networks (lower precision)
    chosen_by: str = ""                # the rule that picked the returned network, as it was applied
    before: dict = field(default_factory=dict)   # label -> Prediction made before it was built
    unfitted: tuple = ()               # labels timed in place under load: not stored, not fitted

    def by_label(self, label: str) -> Built:
        return next(b for b in self.built if b.label == label)


@dataclass
class _Accuracy:
    """The built networks' errors against the fp32 reference, and what they say of the error
    model: an assignment's estimated error is the sum of its kernels' errors alone
    (``Problem.error``), and ``ratio`` is the largest measured / estimated seen (1 until a
    network has been measured). With ``--precision auto`` the budget is tolerance / ratio."""
    s: Settings
    xs: list
    ref: object                        # measure.reference.Reference on xs
    errors: dict = field(default_factory=dict)       # label -> measured relative error
    estimated: dict = field(default_factory=dict)    # label -> Problem.error of its choice
    ratios: list = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return max(self.ratios) if self.ratios else 1.0

    def budget(self) -> float | None:
        return self.s.tolerance / self.ratio if self.s.precision == "auto" else None

    def measure(self, imported: Imported, b: Built, isolated) -> float:
        got = networks([b], self.s)[b.label].run(self.xs)
        e = compare_outputs(got, self.ref.outputs, imported.prepared.output_names, b.label, self.ref.name,
                                     math.inf)
        est = isolated.error(b.choice)
        self.errors[b.label], self.estimated[b.label] = e, est
        if est > 0:
            self.ratios.append(e / est)
        return e

    def ok(self, label: str) -> bool:
        """Whether a built network may be returned: within tolerance (auto), or any (bf16)."""
        return self.s.precision != "auto" or self.errors[label] <= self.s.tolerance


def select(imported: Imported, measured: Measured, m: Machine, s: Settings, store) -> Selection:
    from costmodels.calibration import Calibration
    from costmodels.problem import Assignment
    isolated = problem(imported, measured, m)
    greedy = _greedy(isolated, s)
    nets, kobs = store.networks(s.ctx) if s.max_rounds else ([], [])
    # without the loop (an RPC device, or no timing) the isolated timings decide as measured, with
    # the residency budget the user or the cache probe gave
    cal = _fit(nets, kobs, measured, m) if s.max_rounds else Calibration()
    known = _indices(measured.plan, store.assignments(s.ctx, imported.content_key)) if s.max_rounds else []
    timed_before = set(map(tuple, known))
    model_seen = any(n.model == imported.model_key for n in nets)
    before: dict = {}
    unfitted: set = set()              # labels whose latest in-place timing was taken under load

    def basis(choice, r):
        if tuple(choice) in timed_before:
            return "timed before"
        return "new network" if model_seen or (r > 0 and s.max_rounds) else "new model"
    built: list[Built] = []
    innet: dict = {}
    rounds: list[Round] = []
    converged = False
    x = inputs(imported)
    probe = load_probe(s, store) if s.max_rounds else None
    handoff = _handoff_probe(s) if s.max_rounds else None
    acc = _Accuracy(s, x, reference_for(imported, s, x)) if s.precision != "fp32" else None
    if acc is not None:
        known = [c for c in known if isolated.error(c) <= (acc.budget() or float("inf"))]
    limit = max(1, s.max_rounds, ERROR_ROUNDS if s.precision == "auto" else 0)
    for r in range(limit):
        budget = acc.budget() if acc is not None else None
        prob = problem(imported, measured, m, cal, budget)
        used = cal.as_dict()            # what this round solves and predicts with (refitted at its end)
        sol = solve(prob, s.solver, s.time_limit)
        if r == 0 and known:
            sol = _timed_earlier(prob, sol, known)
        have = {b.choice: b for b in built}
        label = have[tuple(sol.choice)].label if tuple(sol.choice) in have else \
            (s.solver if r == 0 else f"{s.solver} (round {r})")
        s.progress("solve", r, max(1, s.max_rounds), f"round {r}: {s.solver} predicts {sol.cost:.3f} ms "
                   f"({'optimal' if sol.optimal else 'not proven optimal'})")
        usable = [b for b in built if acc is None or acc.ok(b.label)]
        best = min(usable, key=lambda b: prob.evaluate(b.choice)) if usable else None
        close = best is not None and prob.evaluate(best.choice) <= sol.cost * (1 + CONVERGED)
        want = [] if tuple(sol.choice) in have or close else [(label, sol)]
        # an unchanged rerun: the assignment to take was timed in place by an earlier run and the
        # calibration is already fitted on that timing, so the loop has nothing to learn; it is
        # loaded (its build is cached) and checked, and no round is timed
        again = r == 0 and s.max_rounds and acc is None and tuple(sol.choice) in timed_before
        if r == 0 and s.max_rounds and not again:
            # the other residency levels' best as checks while this model is new to the machine;
            # warm-cache greedy always
            want += _alternatives(prob, sol, greedy, s, levels=not known, margin=ALT_MARGIN if nets else None)
        seen, unique = set(have), []
        for lb, a in want:                   # one build per distinct assignment
            if tuple(a.choice) not in seen:
                seen.add(tuple(a.choice))
                unique.append((lb, a))
        want = unique
        predicted = {b.label: prob.evaluate(b.choice) for b in built}
        predicted.update({lb: prob.evaluate(a.choice) for lb, a in want})
        if not want:
            converged = True
            rounds.append(Round(r, used, label, predicted, {}, (), budget))
            break
        errors = {}
        for lb, a in want:
            before[lb] = Prediction(r, predicted[lb], basis(a.choice, r))
        s.progress("build", 0, len(want), f"compiling the {', '.join(lb for lb, _ in want)} selection"
                   f"{'s' if len(want) > 1 else ''}")
        made = build_all(imported, measured, want, s, lambda d, n, what: s.progress("build", d, n, what))
        built.extend(made)
        if acc is not None:
            for k, b in enumerate(made):
                errors[b.label] = acc.measure(imported, b, isolated)
                s.progress("accuracy", k + 1, len(want), f"{b.label}: max relative error {errors[b.label]:.2e} against "
                           f"the fp32 reference (estimated {acc.estimated[b.label]:.2e}, tolerance {s.tolerance:g})")
        if again:
            converged = True
            rounds.append(Round(r, used, label, predicted, {}, tuple(lb for lb, _ in want), budget, errors))
            s.progress("loop", r, s.max_rounds, "round 0: the assignment was timed in place by an earlier run; "
                       "nothing new to time")
            break
        if not s.max_rounds:            # no in-network timing: the isolated objective decides
            rounds.append(Round(r, used, label, predicted, {}, tuple(lb for lb, _ in want), budget, errors))
            if acc is None or acc.ok(want[0][0]):     # want[0]: the solver's own
                break
            continue                    # auto: the solver's network missed the tolerance; solve again, tighter
        # round 0 times all it built; a later round only its new networks beside the incumbent (the
        # built one this round's objective ranks first): the others keep their last in-place timing,
        # which the store and the fit already hold
        session = built if r == 0 or best is None else [best] + made
        s.progress("loop", r, s.max_rounds, f"round {r}: timing {len(session)} network(s) kernel by kernel")
        hand = handoff() if handoff is not None else None
        timed = _time(session, x, s, probe)
        hand = (hand + handoff()) / 2 if handoff is not None else None
        innet.update(timed)
        stored = False
        for b in session:
            if timed[b.label].loaded:
                # timed under load: shown, but neither stored nor fitted (it would teach the
                # calibration a slow spell of the machine)
                unfitted.add(b.label)
                continue
            unfitted.discard(b.label)
            net, ks = _observe(imported, measured, isolated, b, timed[b.label], s, hand)
            store.put_network(s.ctx, net, ks, content=imported.content_key, choice=_names(measured.plan, b.choice))
            stored = True
        # what the store now holds, in its order (newest first): the fit is order-sensitive (each
        # kernel's and model's newest observations), and the next run fits on the store's order, so
        # an unchanged rerun's round 0 solves the problem this run's final solve did. Prepending this
        # round's networks in session order instead reversed them against the store, and an
        # unchanged ResNet-18 rerun solved to another assignment (10.585 ms against 10.654 ms) and
        # built and timed it
        nets, kobs = store.networks(s.ctx) if stored else (nets, kobs)
        cal = _fit(nets, kobs, measured, m)
        rounds.append(Round(r, used, label, predicted, {lb: t.e2e_ms for lb, t in timed.items()},
                            tuple(lb for lb, _ in want), budget, errors, hand))
    if probe is not None:
        keep_quiet(s, store, probe)
    prob = problem(imported, measured, m, cal, acc.budget() if acc is not None else None)
    final = solve(prob, s.solver, s.time_limit) if s.max_rounds else None
    if acc is not None and not any(acc.ok(b.label) for b in built):
        # no network within the tolerance: the all-fp32 one (error budget 0) is
        fp32 = solve(problem(imported, measured, m, cal, 0.0), s.solver, s.time_limit)
        lb = f"{s.solver} (fp32)"
        before[lb] = Prediction(len(rounds), prob.evaluate(fp32.choice), basis(fp32.choice, len(rounds)))
        s.progress("build", 0, 1, f"compiling the {lb} selection: no lower-precision network met the tolerance")
        built.append(build(imported, measured, lb, fp32, s))
        acc.measure(imported, built[-1], isolated)
    usable = [b for b in built if acc is None or acc.ok(b.label)]
    have = {b.choice: b for b in usable}
    among = " within the tolerance" if acc is not None and s.precision == "auto" else ""
    proven = "optimum" if final is not None and final.optimal else "best found (not proven optimal)"
    # the best built network under the final objective; one that costs what the final solve's pick
    # costs is an optimum of that solve too (equal-cost options make ties; the solver names one)
    own = tied = best = None
    if final is not None:
        best = min(usable, key=lambda b: prob.evaluate(b.choice)) if usable else None
        own = have.get(tuple(final.choice))
        if own is None and best is not None and prob.evaluate(best.choice) <= final.cost * (1 + TIE):
            own = tied = best
    if own is not None:
        chosen = own
        converged = True
        rule = (f"the final {final.method} solve's {proven} under the calibrated objective (built and timed"
                + (", tied in cost with the assignment the solver named)" if tied is not None else ")"))
    elif final is not None:             # the best measured one (within CONVERGED, or rounds used up)
        chosen = best
        converged = converged or prob.evaluate(chosen.choice) <= final.cost * (1 + CONVERGED)
        gap = (prob.evaluate(chosen.choice) - final.cost) / final.cost if final.cost > 0 else 0.0
        rule = (f"the best of the {len(usable)} built network(s){among} under the final calibrated objective, "
                f"{gap:+.1%} against the final {final.method} solve's {proven}, which was not built "
                + ("(within the convergence margin)" if gap <= CONVERGED else "(closed-loop rounds used up)"))
    elif acc is not None and not acc.ok(built[0].label):
        chosen = usable[-1]
        rule = (f"the all-fp32 {s.solver} assignment: no lower-precision network met the tolerance"
                if chosen.label == f"{s.solver} (fp32)" else
                f"the {s.solver} solve of round {before[chosen.label].round} with a tighter error budget: the "
                f"first network missed the tolerance")
    else:
        chosen = built[0]
        rule = f"the {chosen.assignment.method} solve on isolated timings (no closed loop)"
    cost = prob.evaluate(chosen.choice)
    if final is not None:     # optimal when it is the final solve's own choice, else its gap to it
        exact = chosen is own             # the solve's pick, or a network tied with it
        sol = Assignment(chosen.choice, cost, final.method, final.optimal and exact, final.seconds,
                         final.gap if exact else max(0.0, (cost - final.cost) / cost),
                         prob.resident(chosen.choice) if prob.cache_bytes is not None else None)
    else:
        sol = Assignment(chosen.choice, cost, chosen.assignment.method, chosen.assignment.optimal,
                         chosen.assignment.seconds, chosen.assignment.gap,
                         prob.resident(chosen.choice) if prob.cache_bytes is not None else None)
    return Selection(isolated, prob, cal, sol, chosen.label, greedy, tuple(built), innet, tuple(rounds), converged,
                     acc, rule, before, tuple(sorted(unfitted)))


def problem(imported: Imported, measured: Measured, m: Machine, calibration=None, error_budget=None):
    """The Problem of this model on this machine (``calibration``: see costmodels.calibration;
    ``error_budget``: the most estimated relative output error lower precision may add)."""
    from costmodels.table import MissingMeasurement, build_problem
    plan = measured.plan
    try:
        return build_problem(plan.layers, plan.edges, measured.timings, cache_bytes=m.budget, partial=m.steps,
                             activation_bytes=plan.activation_bytes, calibration=calibration,
                             model=imported.model_key, error_budget=error_budget)
    except MissingMeasurement as e:
        raise GraphSelectError(str(e)) from None


def check_solver(imported: Imported, s: Settings) -> None:
    """Refuse, before any measurement, a solver that cannot take this graph."""
    if s.solver == "brute":
        from ..measure import plan as plan_mod
        from ..solve.brute import MAX_COMBINATIONS
        plan = plan_mod.make_plan(imported.lg, s.target, s.families, s.precisions)
        size = math.prod(len(lt.options) for lt in plan.layers)
        if size > MAX_COMBINATIONS:
            raise GraphSelectError(f"brute force would try {size:.3g} assignments of this model (at most "
                                   f"{MAX_COMBINATIONS} are allowed); use cp-sat (exact) or fewer --families")
        return
    if s.solver != "dp":
        return
    from collections import Counter
    uses = Counter(src for src, _dst, _port in imported.lg.edges())
    many = [n for n, k in uses.items() if k > 1]
    if many:
        raise GraphSelectError(f"the dp solver takes chains and trees only; layer {many[0]} is read "
                               f"{uses[many[0]]} times ({len(many)} such layer(s)); use cp-sat (exact on any graph)")


def solve(problem_, method: str, time_limit: float):
    from .. import solve as solve_mod
    try:
        return solve_mod.solve(problem_, method=method, time_limit=time_limit)
    except ValueError as e:        # e.g. dp on a graph that is not a tree: the user picked it
        raise GraphSelectError(str(e)) from None


def _names(plan, choice) -> tuple[str, ...]:
    """An assignment as the option name of every layer (what the store keeps)."""
    return tuple(lt.options[k].name for lt, k in zip(plan.layers, choice))


def _indices(plan, named) -> list[tuple[int, ...]]:
    """Stored assignments (option names) as choice indices of ``plan``; those naming an option the
    plan lacks (another family set, precision or code) are dropped."""
    index = [{o.name: k for k, o in enumerate(lt.options)} for lt in plan.layers]
    out = []
    for names in named:
        if len(names) == len(index) and all(nm in ix for nm, ix in zip(names, index)):
            out.append(tuple(ix[nm] for nm, ix in zip(names, index)))
    return out


def _timed_earlier(prob, sol, known):
    """``sol``, or the best of ``known`` (assignments an earlier run timed in place) under ``prob``
    where that is predicted within :data:`CONVERGED` of ``sol``: its build is cached and its kernels
    were measured in place, and a smaller predicted gain is inside the timing's noise."""
    from costmodels.problem import Assignment
    prev = min(known, key=prob.evaluate)
    c = prob.evaluate(prev)
    if tuple(prev) == tuple(sol.choice) or c > sol.cost * (1 + CONVERGED):
        return sol
    return Assignment(tuple(prev), c, sol.method, False, sol.seconds, max(0.0, (c - sol.cost) / c),
                      prob.resident(prev) if prob.cache_bytes is not None else None, sol.alternatives)


def _handoff_probe(s: Settings):
    """``measure.peak.HandoffProbe`` where the networks are timed here (None on an RPC device)."""
    if s.remote:
        return None
    from ..measure.peak import HandoffProbe
    return HandoffProbe(s.target, s.spec.threads)


def _time(session: list[Built], x, s: Settings, probe) -> dict:
    """label -> measure.innet.NetworkTiming of each network in ``session`` (one interleaved session)."""
    from ..measure.innet import time_networks
    return time_networks({b.label: b.executable for b in session}, x, rounds=s.innet_rounds,
                         quiet=probe.quiet if probe is not None else None, seconds=INNET_SECONDS)


def _greedy(problem, s: Settings):
    try:
        return solve(problem, "greedy", s.time_limit)
    except GraphSelectError:       # greedy can dead-end on reconvergent graphs; it is only a baseline
        return solve(problem, s.solver if s.solver != "greedy" else "cp-sat", s.time_limit)


def _alternatives(prob, sol, greedy, s: Settings, levels: bool = True, margin: float | None = None):
    """The best assignments of other residency levels (the one that fits the budget, and the
    predicted fastest of the rest; with ``margin``, only those predicted within it of ``sol``)
    and warm-cache greedy: checks, and data for the calibration."""
    from costmodels.problem import Assignment
    out = []
    others = sorted(sol.alternatives, key=prob.evaluate) if levels else []
    if margin is not None:
        others = [c for c in others if prob.evaluate(c) <= sol.cost * (1 + margin)]
    fits = [c for c in others if prob.resident(c)][:1]
    taken = set()
    for c in fits + [c for c in others if c not in fits][:MAX_ALTERNATIVES - len(fits)]:
        share = prob.warm_share(c)
        state = "resident" if share >= 1 else f"{share:.0%} warm" if share > 0 else "cold"
        label = f"{s.solver} ({state})"
        if label in taken:                      # two levels can land in one state: labels stay unique
            label = f"{s.solver} ({state}, {prob.footprint(c) / 2**20:.0f} MiB)"
        taken.add(label)
        out.append((label, Assignment(tuple(c), prob.evaluate(c), sol.method, sol.optimal,
                                                         seconds=sol.seconds, resident=prob.resident(c))))
    # greedy can dead-end; then the baseline is another solver's, and its label says so
    out.append(("greedy" if greedy.method == "greedy" else f"{greedy.method} (greedy dead-ended)", greedy))
    return out


def _observe(imported: Imported, measured: Measured, isolated, b: Built, timing, s: Settings,
             handoff_us: float | None = None):
    """What one timed network tells the calibration: the network and its conv kernels
    (``handoff_us``: the hand-off read around its timing session)."""
    from dataclasses import replace
    from costmodels.calibration import KernelObservation, NetworkObservation, op_kind
    from costmodels.table import kinds_total, other_costs_by_kind
    plan = measured.plan
    symbols = b.symbols
    kernels, conv_ms = [], 0.0
    innet_kinds: dict[str, list] = {}          # kind -> [in-network ms, calls] of the other kernels
    for call in timing.calls:
        name = symbols.get(call.symbol)
        if name is None:
            p = innet_kinds.setdefault(op_kind(call.symbol), [0.0, 0])
            p[0] += call.ms
            p[1] += 1
            continue
        opt = plan.table(name).options[b.choice[plan.index[name]]]
        t = measured.timings[opt.kernel]
        kernels.append(KernelObservation("", tuple(opt.kernel), opt.family, t.cold_ms, t.warm_ms, call.ms,
                                         t.incold_ms))
        conv_ms += call.ms
    iso_kinds = other_costs_by_kind(plan.layers, plan.edges, measured.timings, b.choice)
    kinds = {k: tuple(iso_kinds.get(k, (0.0, 0.0, 0.0, 0))) + tuple(innet_kinds.get(k, (0.0, 0)))
             for k in sorted(set(iso_kinds) | set(innet_kinds))}
    other_cold, other_warm, other_incold = kinds_total(iso_kinds)
    net_id = f"{imported.model_key}:{abs(hash(b.choice)) % 10**12}:{time.time_ns()}"
    net = NetworkObservation(net_id, imported.model_key, isolated.footprint(b.choice), timing.e2e_ms,
                             len(timing.calls), conv_ms, timing.kernel_ms - conv_ms, other_cold, other_warm,
                             other_incold, kinds, handoff_us)
    return net, [replace(k, network=net_id) for k in kernels]


def _fit(nets, kobs, measured: Measured, m: Machine):
    """Fit on every observation, with today's isolated timings where the record is in this run;
    with none, the prior (isolated cold timings, the machine's probed launch cost)."""
    from dataclasses import replace
    from costmodels.calibration import fit, prior
    if not nets:
        return prior(m.launch_ms, m.floor)
    fresh = []
    for k in kobs:
        t = measured.timings.get(tuple(k.key))
        fresh.append(replace(k, cold_ms=t.cold_ms, warm_ms=t.warm_ms, incold_ms=t.incold_ms) if t is not None else k)
    cal = fit(fresh, nets, budget=m.budget, steps=m.steps, floor=m.floor)
    return cal if cal.networks else prior(m.launch_ms, m.floor)
