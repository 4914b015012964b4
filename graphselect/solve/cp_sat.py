"""Exact selection with OR-tools CP-SAT.

Variables: one Boolean per usable (node, choice), exactly one per node; per node the layout
one-hots are sums of those. Each edge whose two ends both have a layout decision gets
z[p][q] over (producer out layout p, consumer in layout q) with the marginals
sum_q z[p][q] = out[p] and sum_p z[p][q] = in[q] (the local marginal polytope: its LP is exact on
chains), and pays transform[p, q] * z[p][q]; an impossible pair has no variable. Costs are
milliseconds scaled to integers with a resolution of ``RESOLUTION_MS`` (0.1 us), so "optimal"
means optimal for the rounded costs: within ``RESOLUTION_MS / 2`` per cost term of the exact
optimum. The returned ``Assignment.cost`` is ``problem.evaluate`` of the choice, unrounded.
Building the model (~0.4 s per 1000 nodes) is not interrupted; CP-SAT gets what remains of
``time_limit``.

Residency (``Problem.cache_bytes`` set) is solved once per residency level with the level fixed,
which the prototype (shared/examples/cpsat_selection) found much faster than a big-M or enforced
formulation: R=1 with warm times and the knapsack sum(weight + workspace bytes) <= cache_bytes -
activation_bytes; one solve per ``Problem.partial`` step with its blended times and its cap as
the knapsack; and R=0 with cold times and no constraint. The best by ``problem.evaluate`` wins.
A level may pick an assignment whose footprint falls in a warmer level: its true cost is then no
higher than its objective as long as warm <= cold, so the set of solves is exact. If some choice
is slower warm than cold, each level is also bounded below (its footprint must exceed the cap
of the level before), to stay exact. A level whose times PBQP's reductions minimize exactly (no
heuristic step) with a minimizer inside the level's footprint bounds needs no CP-SAT solve: that
minimizer is the level's optimum (always the case for the unbounded cold level of a graph that
reduces). A level stopped by the time limit whose bound reaches the best cost found still counts
as proven.

An error budget (``Problem.error_budget``) is one more knapsack row in every level: the chosen
choices' errors, in units of ``ERROR_UNIT`` (errors rounded up, the budget down, so the rounded
constraint never admits an assignment the exact one refuses); the PBQP shortcut is skipped while
it binds, since its reductions do not see it.
"""
from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from costmodels.problem import Assignment, Problem
from graphselect.errors import GraphSelectError, Infeasible

from . import greedy
from ._consistency import consistent_domains

RESOLUTION_MS = 1e-4
ERROR_UNIT = 1e-7               # resolution of the error budget (relative output error)
_MAX_OBJECTIVE = 2 ** 53       # keep scaled sums exact in a double and far from int64 overflow

# Measured on synthetic 200-node chain/residual/branching graphs (2 cores): the default
# portfolio left 5-19% gaps after 10 s, the LP-heavy 'max_lp' worker proves optimality in ~0.6 s
# (num_workers=1 with linearization_level=2: 0.8-1.5 s, and gaps at 1000 nodes). A greedy
# solution hint made it slower (1000-node branching: open after 10 s vs closed in ~6 s).
# CP-SAT's presolve finds nothing to do after our own arc-consistency pruning and costs ~35-45%
# of the time: 1000-node chain / residual / branching 3.8 / 4.0 / 5.7 s -> 2.2 / 2.7 / 3.9 s,
# residual with the cache term 8.7 -> 5.5 s, same optima.
PARAMETERS = {"num_workers": 2, "subsolvers": ["max_lp"], "cp_model_presolve": False}


def solve(problem: Problem, *, time_limit: float = 30.0) -> Assignment:
    """Minimize total node plus layout-transform cost with CP-SAT.

    Choices with infinite cost get no variable and choices that cannot meet a finite
    transform on some edge are dropped first (arc consistency); a node left with one choice is
    a constant. ``optimal`` is True only when CP-SAT proves it; otherwise ``gap`` is the
    relative distance to CP-SAT's lower bound. If CP-SAT finds nothing within the limit, the
    greedy assignment is returned (``optimal=False``, with its gap).

    With a cache budget the time limit is split between the resident (R=1) and the cold (R=0)
    solve (the second gets what the first left); ``optimal`` needs both proven, ``gap`` is
    measured against the lower of the two bounds, and ``resident`` says which state the
    returned choice runs in. A budget that no assignment fits, or that every assignment fits,
    needs only one solve.

    Raises :class:`~graphselect.errors.Infeasible` when no finite-cost assignment exists, and
    :class:`~graphselect.errors.GraphSelectError` when none was found within ``time_limit``
    seconds (raise it).

    Examples
    --------
    >>> from graphselect.solve import synthetic
    >>> solve(synthetic.residual(50, seed=0), time_limit=10).optimal
    True
    """
    return _solve(problem, time_limit, PARAMETERS)


def _solve(problem: Problem, time_limit: float, parameters: dict) -> Assignment:
    t0 = time.perf_counter()
    domains = consistent_domains(problem)
    branches = _branches(problem, domains)
    runs = []                         # (status, choice or None, lower bound in ms)
    for k, (share, lo, hi) in enumerate(branches):
        quick = _by_reductions(problem, share, lo, hi) if len(branches) > 1 and not _budget_binds(problem, domains) \
            else None
        if quick is not None:
            runs.append(quick)
            continue
        left = (time_limit - (time.perf_counter() - t0)) / (len(branches) - k)
        runs.append(_branch(problem, domains, share, lo, hi, max(0.01, left), parameters))
    if all(status == cp_model.INFEASIBLE for status, _, _ in runs):
        raise Infeasible("no combination of choices has finite layout-transform costs on every edge")
    found = [choice for _, choice, _ in runs if choice is not None]
    if found:
        choice = min(found, key=problem.evaluate)
    else:                             # no solution within the limit; fall back to greedy
        try:
            choice = greedy.solve(problem).choice
        except Infeasible:
            raise GraphSelectError(f"CP-SAT found no assignment within time_limit={time_limit} s; "
                                   f"raise the time limit") from None
    cost = float(problem.evaluate(choice))
    # a level stopped by the time limit cannot hold anything better once its bound reaches cost
    optimal = bool(found) and all(status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) or bound >= cost
                                  for status, _, bound in runs)
    bound = min(b for _, _, b in runs)
    gap = 0.0 if optimal or cost <= 0 else max(0.0, (cost - bound) / cost)
    others = tuple(dict.fromkeys(tuple(c) for c in found if tuple(c) != tuple(choice)))
    return Assignment(choice=choice, cost=cost, method="cp-sat", optimal=optimal,
                      seconds=time.perf_counter() - t0, gap=gap,
                      resident=problem.resident(choice) if problem.cache_bytes is not None else None,
                      alternatives=others)


def _branches(problem: Problem, domains) -> list[tuple[float, int | None, int | None]]:
    """The solves to run: (warm share, footprint low exclusive or None, high inclusive or None),
    one per residency level some assignment can reach; bounds only where they cut."""
    sizes = [[_bytes(problem.nodes[v].choices[c]) for c in dom] for v, dom in enumerate(domains)]
    least = problem.activation_bytes + sum(map(min, sizes))
    most = problem.activation_bytes + sum(map(max, sizes))
    reachable = [(lo, hi, share) for lo, hi, share in problem.levels()
                 if (lo is None or lo < most) and (hi is None or hi >= least)]
    slower_warm = any(problem.nodes[v].choices[c].time(True) > problem.nodes[v].choices[c].cost
                      for v, dom in enumerate(domains) for c in dom)
    out = []
    for lo, hi, share in reachable:
        lo = lo if slower_warm and lo is not None and lo >= least else None
        hi = hi if hi is not None and hi < most else None
        out.append((share, lo, hi))
    return out


def _error_units(error: float) -> int:
    return math.ceil(error / ERROR_UNIT - 1e-6)


def _budget_binds(problem: Problem, domains) -> bool:
    """Whether the error budget can refuse some assignment of ``domains``."""
    if problem.error_budget is None:
        return False
    worst = sum(max(problem.nodes[v].choices[c].error for c in dom) for v, dom in enumerate(domains))
    return worst > problem.error_budget


def _by_reductions(problem: Problem, share: float, lo: int | None, hi: int | None):
    """A level's optimum without CP-SAT, when PBQP's reductions minimize the level's times
    exactly (no heuristic RN step) and the minimizer already meets the level's footprint bounds;
    else None. The cold level has no bound, so it is solved this way whenever the graph reduces
    (synthetic 1000-node residual graph with the cache term: 5.4 -> 0.2 s, both levels this way)."""
    from .pbqp import _reduce
    choice, info = _reduce(problem, share)
    if info["rn_reductions"]:
        return None
    fp = problem.footprint(choice)
    if (lo is not None and fp <= lo) or (hi is not None and fp > hi):
        return None
    cost = problem.evaluate_at(choice, share)
    if not math.isfinite(cost):
        return None
    return cp_model.OPTIMAL, tuple(choice), float(cost)


def _bytes(ch) -> int:
    return ch.weight_bytes + ch.workspace_bytes


def _branch(problem: Problem, domains, share: float, lo: int | None, hi: int | None, time_limit: float,
            parameters: dict):
    """One CP-SAT solve with the residency level fixed: node times blended at ``share``, the
    footprint kept in (lo, hi]: (status, choice or None, lower bound ms).

    INFEASIBLE is returned only under a footprint bound (another level may still have
    solutions); without one it is raised.
    """
    t0 = time.perf_counter()
    nodes = problem.nodes
    scale = _scale(problem, domains, share)

    def units(ms):
        return round(ms * scale)

    m = cp_model.CpModel()
    x = [{c: m.new_bool_var(f"x{v}_{c}") for c in sorted(dom)} if len(dom) > 1 else None
         for v, dom in enumerate(domains)]
    fixed = [next(iter(dom)) if len(dom) == 1 else None for dom in domains]
    for xv in x:
        if xv:
            m.add_exactly_one(xv.values())
    coef = {}                         # objective: BoolVar index -> (var, integer cost)
    const = 0

    def pay(var, cost):
        if cost:
            old = coef.get(var.index, (var, 0))[1]
            coef[var.index] = (var, old + cost)

    for v, dom in enumerate(domains):
        if x[v] is None:
            t = nodes[v].choices[fixed[v]].blend(share)
            if t == math.inf:             # a warm_cost of inf: no assignment in this branch
                m.add_bool_or([])
            else:
                const += units(t)
        else:
            for c, var in x[v].items():
                t = nodes[v].choices[c].blend(share)
                if t == math.inf:
                    m.add(var == 0)
                else:
                    pay(var, units(t))

    bounded = lo is not None or hi is not None
    if bounded:                       # relative to each node's smallest choice: small coefficients
        least = [min(_bytes(nodes[v].choices[c]) for c in dom) for v, dom in enumerate(domains)]
        base = problem.activation_bytes + sum(least)
        extra = cp_model.LinearExpr.weighted_sum(
            [var for v, xv in enumerate(x) if xv for var in xv.values()],
            [_bytes(nodes[v].choices[c]) - least[v] for v, xv in enumerate(x) if xv for c in xv])
        if hi is not None:
            m.add(extra <= hi - base)
        if lo is not None:
            m.add(extra >= lo + 1 - base)
    if _budget_binds(problem, domains):
        # fixed nodes' errors are constants; the rest one knapsack row
        fixed_err = sum(_error_units(nodes[v].choices[fixed[v]].error) for v, xv in enumerate(x) if xv is None)
        terms = [(var, _error_units(nodes[v].choices[c].error)) for v, xv in enumerate(x) if xv for c, var in xv.items()]
        # the same slack as Problem.admissible, and no unit lost to the binary rounding of the quotients
        cap = math.floor(problem.error_budget * (1 + 1e-9) / ERROR_UNIT + 1e-6)
        m.add(cp_model.LinearExpr.weighted_sum([t for t, _ in terms], [u for _, u in terms]) <= cap - fixed_err)
    one_hots = {}

    def one_hot(v, port):
        """layout -> literal (None when the layout is certain), for the output (port None) or an input."""
        key = (v, port)
        if key not in one_hots:
            groups = {}
            for c in sorted(domains[v]):
                ch = nodes[v].choices[c]
                groups.setdefault(ch.out_layout if port is None else ch.in_layouts[port], []).append(c)
            if len(groups) == 1:
                lits = {layout: None for layout in groups}
            else:
                lits = {}
                for layout, cs in groups.items():
                    if len(cs) == 1:
                        lits[layout] = x[v][cs[0]]
                    else:
                        b = m.new_bool_var(f"{'o' if port is None else f'i{port}_'}{v}_{layout}")
                        m.add(sum(x[v][c] for c in cs) == b)
                        lits[layout] = b
            one_hots[key] = lits
        return one_hots[key]

    for e in problem.edges:
        out, inp = one_hot(e.src, None), one_hot(e.dst, e.port)
        if len(out) == 1 or len(inp) == 1:       # one side certain: a linear cost on the other
            for p, lp in out.items():
                for q, lq in inp.items():
                    t, lit = e.cost(p, q), (lp if lq is None else lq)
                    if t == math.inf:             # arc consistency leaves none; kept for safety
                        if lit is None:
                            raise Infeasible(f"edge {e.src}->{e.dst}: no transform {p} -> {q}")
                        m.add(lit == 0)
                    elif lit is None:
                        const += units(t)
                    else:
                        pay(lit, units(t))
            continue
        z = {(p, q): m.new_bool_var("") for p in out for q in inp if e.cost(p, q) < math.inf}
        for p, lp in out.items():
            m.add(sum(z[p, q] for q in inp if (p, q) in z) == lp)
        for q, lq in inp.items():
            m.add(sum(z[p, q] for p in out if (p, q) in z) == lq)
        for (p, q), var in z.items():
            pay(var, units(e.cost(p, q)))

    m.minimize(cp_model.LinearExpr.weighted_sum([v for v, _ in coef.values()],
                                                [c for _, c in coef.values()]) + const)
    solver = cp_model.CpSolver()
    for key, value in parameters.items():
        if isinstance(value, list):
            getattr(solver.parameters, key).extend(value)
        else:
            setattr(solver.parameters, key, value)
    solver.parameters.max_time_in_seconds = max(0.01, time_limit - (time.perf_counter() - t0))
    status = solver.solve(m)
    if status == cp_model.INFEASIBLE:
        if not bounded:
            raise Infeasible("no combination of choices has finite layout-transform costs on every edge")
        return status, None, math.inf
    if status == cp_model.MODEL_INVALID:
        raise GraphSelectError(f"CP-SAT rejected the model: {m.validate()}")
    choice = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        choice = tuple(fixed[v] if xv is None else next(c for c, var in xv.items()
                                                        if solver.boolean_value(var))
                       for v, xv in enumerate(x))
    return status, choice, solver.best_objective_bound / scale


def _scale(problem: Problem, domains, share: float = 0.0) -> float:
    """1 / RESOLUTION_MS, coarsened by powers of ten when the worst total would not fit."""
    worst = sum(max((abs(t) for c in dom if (t := problem.nodes[v].choices[c].blend(share)) < math.inf),
                    default=0.0) for v, dom in enumerate(domains))
    worst += sum(max((abs(t) for t in e.transform.values() if t < math.inf), default=0.0)
                 for e in problem.edges)
    scale = 1.0 / RESOLUTION_MS
    while worst * scale >= _MAX_OBJECTIVE:
        scale /= 10
    return scale

