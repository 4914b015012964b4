"""The cache residency term: Problem semantics, every solver against brute force, the tree DP,
and cache-size detection."""
import json
import math
import random

import pytest

from costmodels.hardware import DEFAULTS, Hardware, detect, parse_size, residency_budget
from costmodels.problem import Choice, Edge, Node, Problem
from graphselect.errors import Infeasible
from graphselect.solve import METHODS, RESTRICTED, brute, cp_sat, dp, greedy, solve, synthetic

SEEDS = range(200)


def _chain(*convs, cache_bytes=None, activation_bytes=0, transform=None):
    """input -> convs... -> output, all NCHW; each conv a list of (cold, warm, weight_bytes)."""
    nodes = [Node("input", (Choice("input", 0.0, (), "NCHW"),))]
    for i, cands in enumerate(convs):
        nodes.append(Node(f"conv{i}", tuple(Choice(f"c{k}", cold, ("NCHW",), "NCHW", warm_cost=warm,
                                                   weight_bytes=wb)
                                            for k, (cold, warm, wb) in enumerate(cands))))
    nodes.append(Node("output", (Choice("output", 0.0, ("NCHW",), None),)))
    edges = tuple(Edge(i, i + 1, 0, dict(transform or {})) for i in range(len(nodes) - 1))
    return Problem(tuple(nodes), edges, cache_bytes=cache_bytes, activation_bytes=activation_bytes)


BIG, SMALL = (3.0, 1.0, 100), (3.0, 1.5, 40)       # per-layer warm-fastest overflows; small fits


def test_evaluate_and_resident_semantics():
    p = _chain([BIG, SMALL], [BIG, SMALL], cache_bytes=100)
    assert p.footprint((0, 0, 0, 0)) == 200 and not p.resident((0, 0, 0, 0))
    assert p.evaluate((0, 0, 0, 0)) == 6.0                     # overflow: cold times
    assert p.resident((0, 1, 1, 0)) and p.evaluate((0, 1, 1, 0)) == 3.0
    assert not p.resident((0, 0, 1, 0)) and p.evaluate((0, 0, 1, 0)) == 6.0
    # the budget is inclusive, activations count, no budget means cold
    assert _chain([SMALL], cache_bytes=40).resident((0, 0, 0))
    assert not _chain([SMALL], cache_bytes=40, activation_bytes=1).resident((0, 0, 0))
    assert _chain([SMALL], cache_bytes=50, activation_bytes=10).evaluate((0, 0, 0)) == 1.5
    nocache = _chain([BIG, SMALL], [BIG, SMALL])
    assert not nocache.resident((0, 1, 1, 0)) and nocache.evaluate((0, 1, 1, 0)) == 6.0
    # warm_cost None falls back to cost; an unusable choice stays unusable; workspace counts
    q = Problem((Node("a", (Choice("x", 2.0, (), "L", weight_bytes=5, workspace_bytes=5),
                            Choice("y", math.inf, (), "L", warm_cost=1.0))),), (), cache_bytes=10)
    assert q.resident((0,)) and q.evaluate((0,)) == 2.0
    assert q.evaluate((1,)) == math.inf
    assert not Problem(q.nodes, (), cache_bytes=9).resident((0,))
    # edges are unchanged by residency
    t = _chain([(2.0, 1.0, 0)], cache_bytes=0, transform={("NCHW", "NCHW8c"): 9.0})
    assert t.evaluate((0, 0, 0)) == 1.0
    with pytest.raises(ValueError):
        Problem((), (), cache_bytes=-1)
    with pytest.raises(ValueError):
        Problem((), (), activation_bytes=-1)


def test_exact_solvers_keep_the_cache_greedy_overflows_it():
    p = _chain([BIG, SMALL], [BIG, SMALL], cache_bytes=100)
    g = solve(p, method="greedy")
    assert g.choice == (0, 0, 0, 0) and g.cost == 6.0 and g.resident is False
    for method in ("cp-sat", "brute"):
        a = solve(p, method=method)
        assert a.choice == (0, 1, 1, 0) and a.cost == 3.0 and a.optimal and a.resident is True
    with pytest.raises(ValueError, match="use cp-sat"):
        solve(p, method="dp")


def test_cp_sat_is_exact_when_warm_is_slower_than_cold():
    # the R=0 optimum (c0) fits and is slower warm; the best overflowing one (c1) is the answer
    p = _chain([(1.0, 5.0, 10), (1.2, 1.2, 200)], cache_bytes=100)
    assert p.evaluate((0, 0, 0)) == 5.0 and p.evaluate((0, 1, 0)) == 1.2
    for method in ("cp-sat", "brute"):
        a = solve(p, method=method)
        assert a.choice == (0, 1, 0) and a.optimal and a.resident is False


@pytest.mark.parametrize("cache", [0, 10 ** 12, None])
def test_budget_that_nothing_or_everything_fits(cache):
    p = synthetic.random_problem(3, residency=True)
    p = Problem(p.nodes, p.edges, cache_bytes=cache, activation_bytes=p.activation_bytes)
    ref, a = brute.solve(p), cp_sat.solve(p, time_limit=10)
    assert a.optimal and a.cost == pytest.approx(ref.cost, rel=1e-6, abs=1e-9)
    assert a.resident is ref.resident is (None if cache is None else cache > 0)


def _slower_warm(p, seed):
    """The same problem with warm times anywhere in [0.8, 1.3] x cold."""
    rng = random.Random(seed)
    nodes = tuple(Node(n.name, tuple(Choice(c.name, c.cost, c.in_layouts, c.out_layout,
                                            warm_cost=round(c.cost * rng.uniform(0.8, 1.3), 3),
                                            weight_bytes=c.weight_bytes,
                                            workspace_bytes=c.workspace_bytes)
                                     if c.warm_cost is not None else c for c in n.choices))
                  for n in p.nodes)
    return Problem(nodes, p.edges, cache_bytes=p.cache_bytes, activation_bytes=p.activation_bytes,
                   partial=p.partial)


def _check_against_brute(p):
    try:
        ref = brute.solve(p)
    except Infeasible:
        for method in METHODS:
            with pytest.raises(Infeasible):
                solve(p, method=method)
        return None
    exact = cp_sat.solve(p, time_limit=10)
    for a in (ref, exact):
        assert a.cost == p.evaluate(a.choice) < math.inf
        assert a.resident == p.resident(a.choice)
    assert ref.optimal and exact.optimal and exact.gap == 0
    assert exact.cost == pytest.approx(ref.cost, rel=1e-6, abs=1e-9)
    g = greedy.solve(p)
    assert g.cost == p.evaluate(g.choice) and g.resident == p.resident(g.choice)
    assert g.cost >= ref.cost - 1e-9
    return ref, g


def test_random_residency_problems_against_brute_force():
    seen = {"resident": 0, "cold": 0, "greedy overflows a resident optimum": 0}
    for seed in SEEDS:
        p = synthetic.random_problem(seed, residency=True)
        assert p.cache_bytes is not None
        got = _check_against_brute(p)
        if got:
            ref, g = got
            seen["resident" if ref.resident else "cold"] += 1
            seen["greedy overflows a resident optimum"] += ref.resident and not g.resident
    # both branches exercised: roughly half the feasible problems are resident at their optimum
    assert all(k >= 20 for k in seen.values()), seen


def test_random_problems_with_slower_warm_times_against_brute_force():
    for seed in range(0, 200, 4):
        _check_against_brute(_slower_warm(synthetic.random_problem(seed, residency=True), seed))


def _graded(p, seed):
    """The same problem with 1-3 partial-residency steps between the budget and the largest
    footprint (caps increasing, shares decreasing)."""
    rng = random.Random(seed)
    most = p.activation_bytes + sum(max(c.weight_bytes + c.workspace_bytes for c in n.choices) for n in p.nodes)
    span = max(3, most - p.cache_bytes)
    caps = sorted(rng.sample(range(p.cache_bytes + 1, p.cache_bytes + span + 1), rng.randint(1, 3)))
    shares = sorted((round(rng.uniform(0.05, 0.95), 2) for _ in caps), reverse=True)
    return Problem(p.nodes, p.edges, cache_bytes=p.cache_bytes, activation_bytes=p.activation_bytes,
                   partial=tuple(zip(caps, shares)))


def test_partial_residency_semantics():
    p = _chain([BIG, SMALL], [BIG, SMALL], cache_bytes=100, )
    g = Problem(p.nodes, p.edges, cache_bytes=100, partial=((140, 0.75), (200, 0.5)))
    assert g.levels() == ((None, 100, 1.0), (100, 140, 0.75), (140, 200, 0.5), (200, None, 0.0))
    assert g.warm_share((0, 1, 1, 0)) == 1.0 and g.evaluate((0, 1, 1, 0)) == 3.0      # 80 bytes: warm
    assert g.warm_share((0, 0, 1, 0)) == 0.75                                          # 140: first step
    assert g.evaluate((0, 0, 1, 0)) == pytest.approx(3.0 - 0.75 * 2.0 + 3.0 - 0.75 * 1.5)
    assert g.warm_share((0, 0, 0, 0)) == 0.5 and g.evaluate((0, 0, 0, 0)) == pytest.approx(4.0)
    assert g.share_at(201) == 0.0 and p.share_at(101) == 0.0 and p.share_at(100) == 1.0
    assert Problem(p.nodes, p.edges).levels() == ((None, None, 0.0),)
    # blends: an unusable warm time is unusable whenever any share of it is taken
    c = Choice("c", 2.0, (), "L", warm_cost=math.inf)
    assert c.blend(0.0) == 2.0 and c.blend(0.5) == math.inf and c.blend(1.0) == math.inf
    assert Choice("d", 2.0, (), "L").blend(0.5) == 2.0
    for bad in [dict(partial=((90, 0.5),)), dict(partial=((150, 0.5), (150, 0.4))),
                dict(partial=((150, 0.5), (160, 0.6))), dict(partial=((150, 1.5),))]:
        with pytest.raises(ValueError):
            Problem(p.nodes, p.edges, cache_bytes=100, **bad)
    with pytest.raises(ValueError):
        Problem(p.nodes, p.edges, partial=((150, 0.5),))


def test_partial_residency_changes_the_optimum():
    """Past the budget but inside the first step, the per-layer warm-fastest pair keeps most of
    its warm advantage: the exact solvers take it, where the plain budget would not."""
    p = _chain([BIG, SMALL], [BIG, SMALL], cache_bytes=140)
    plain = brute.solve(p)                                  # 200 bytes would run cold: 6.0 ms
    assert plain.choice == (0, 0, 1, 0) and plain.cost == 2.5
    g = Problem(p.nodes, p.edges, cache_bytes=140, partial=((200, 0.9),))
    for method in ("brute", "cp-sat", "pbqp"):
        a = solve(g, method=method)
        assert a.choice == (0, 0, 0, 0) and a.cost == pytest.approx(2 * (3.0 - 0.9 * 2.0))   # 2.4 < 2.5


def test_random_partial_residency_problems_against_brute_force():
    seen = {"warm": 0, "partial": 0, "cold": 0}
    for seed in range(0, 200, 2):
        p = _graded(synthetic.random_problem(seed, residency=True), seed)
        got = _check_against_brute(p)
        if got:
            share = p.warm_share(got[0].choice)
            seen["warm" if share == 1 else "cold" if share == 0 else "partial"] += 1
            for method in ("pbqp",):
                assert solve(p, method=method).cost >= got[0].cost - 1e-9
    assert all(v >= 10 for v in seen.values()), seen


def test_random_partial_residency_with_slower_warm_times_against_brute_force():
    for seed in range(1, 200, 4):
        _check_against_brute(_slower_warm(_graded(synthetic.random_problem(seed, residency=True), seed), seed))


def test_residency_generator_keeps_the_network():
    for seed in range(20):
        a, b = synthetic.random_problem(seed), synthetic.random_problem(seed, residency=True)
        assert a.cache_bytes is None and a.edges == b.edges
        assert [[c.cost for c in n.choices] for n in a.nodes] == [[c.cost for c in n.choices] for n in b.nodes]
        for c in (c for n in b.nodes for c in n.choices if c.warm_cost is not None):
            assert c.warm_cost <= c.cost and c.weight_bytes > 0


def test_cp_sat_with_residency_on_a_residual_network():
    p = synthetic.residual(60, seed=2, residency=True)
    a = solve(p, method="cp-sat", time_limit=30)
    assert a.optimal and a.cost == p.evaluate(a.choice) and a.resident == p.resident(a.choice)
    assert solve(p, method="greedy").cost >= a.cost - 1e-9


def test_levels_solved_by_reductions_match_cp_sat(monkeypatch):
    """A level PBQP's reductions solve exactly inside its footprint bounds skips its CP-SAT solve;
    the optimum is the same as with every level solved by CP-SAT, on random problems and on
    residual networks, and the shortcut is taken on some of them."""
    used = []
    real = cp_sat._by_reductions

    def spy(*a):
        r = real(*a)
        used.append(r is not None)
        return r
    problems = [synthetic.random_problem(s, residency=True) for s in SEEDS[:60]]
    problems += [synthetic.residual(n, seed=n, residency=True) for n in (30, 60, 120)]
    for p in problems:
        monkeypatch.setattr(cp_sat, "_by_reductions", spy)
        try:
            fast = solve(p, method="cp-sat", time_limit=30)
        except Infeasible:
            continue
        monkeypatch.setattr(cp_sat, "_by_reductions", lambda *a: None)
        full = solve(p, method="cp-sat", time_limit=30)
        assert fast.optimal and full.optimal
        assert abs(fast.cost - full.cost) <= 1e-3 * max(1.0, full.cost), (fast.cost, full.cost)
        assert fast.cost == p.evaluate(fast.choice)
    assert sum(used) >= 20 and not all(used)


# --- dp ----------------------------------------------------------------------------------------

def _random_tree(seed):
    """A random in-tree: 1-3 inputs each through a few convs/ops, merged by adds and concats."""
    rng = random.Random(seed)
    layouts = ("A", "B", "C")[:rng.randint(2, 3)]
    nodes, edges = [], []

    def add(name, choices, preds):
        v = len(nodes)
        nodes.append(Node(f"{name}{v}", tuple(choices)))
        for port, u in enumerate(preds):
            t = {(p, q): round(rng.uniform(0.1, 2.0), 3) for p in layouts for q in layouts
                 if p != q and rng.random() > 0.2}
            edges.append(Edge(u, v, port, t))
        return v

    def conv(u):
        return add("conv", [Choice(f"k{k}", math.inf if rng.random() < 0.1 else round(rng.uniform(0.5, 3), 3),
                                   (rng.choice(layouts),), rng.choice(layouts))
                            for k in range(rng.randint(1, 3))], [u])

    def branch(depth):
        u = add("input", [Choice("in", 0.0, (), layouts[0])], [])
        for _ in range(rng.randint(0, depth)):
            u = conv(u)
        return u

    heads = [branch(3) for _ in range(rng.randint(1, 3))]
    while len(heads) > 1:
        k = rng.randint(2, len(heads))
        merged = add("add", [Choice(f"add_{l}", 0.1, (l,) * k, l) for l in layouts], heads[:k])
        heads = [conv(merged)] + heads[k:]
    add("output", [Choice("out", 0.0, (layouts[0],), None)], heads)
    return Problem(tuple(nodes), tuple(edges))


def _is_tree(p):
    outs = [0] * len(p.nodes)
    for e in p.edges:
        outs[e.src] += 1
    return max(outs, default=0) <= 1


def test_dp_matches_brute_force_on_trees_and_chains():
    checked = 0
    problems = [_random_tree(s) for s in range(150)] + [synthetic.random_problem(s) for s in SEEDS]
    for p in filter(_is_tree, problems):
        try:
            ref = brute.solve(p)
        except Infeasible:
            with pytest.raises(Infeasible):
                dp.solve(p)
            continue
        a = solve(p, method="dp")
        assert a.optimal and a.method == "dp" and a.resident is None
        assert a.cost == p.evaluate(a.choice) == pytest.approx(ref.cost, rel=1e-9, abs=1e-9)
        checked += 1
    assert checked >= 100
    big = synthetic.chain(80, seed=4)
    assert dp.solve(big).cost == pytest.approx(cp_sat.solve(big, time_limit=20).cost, rel=1e-6)


def test_dp_refuses_reconvergence_and_cache_terms():
    reconvergent = synthetic.residual(20, seed=0)
    with pytest.raises(ValueError, match="dp is exact on chains and trees without a cache term; use cp-sat"):
        solve(reconvergent, method="dp")
    with pytest.raises(ValueError, match="use cp-sat"):
        dp.solve(synthetic.chain(20, seed=0, residency=True))
    assert "dp" in RESTRICTED and "dp" not in METHODS


# --- hardware ----------------------------------------------------------------------------------

def test_detect_reads_this_machines_sysfs():
    hw = detect()
    assert hw.line_bytes > 0 and hw.cores >= 1
    if not hw.source.startswith("sysfs"):
        pytest.skip(f"no cache sizes in sysfs here ({hw.source})")
    assert hw.l3_bytes > hw.l2_bytes > hw.l1d_bytes > 0
    assert residency_budget(hw) == int(0.75 * hw.l3_bytes) + hw.l2_bytes


def _fake_sysfs(root, entries):
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size), ("coherency_line_size", 64)):
            (d / name).write_text(f"{value}\n")
    return root


def test_detect_parses_sizes_and_applies_an_override(tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHSELECT_HARDWARE", raising=False)
    sysfs = _fake_sysfs(tmp_path / "cache", [(1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "32M")])
    hw = detect(sysfs=sysfs)
    assert (hw.l1d_bytes, hw.l2_bytes, hw.l3_bytes, hw.line_bytes, hw.source) == \
        (48 << 10, 2 << 20, 32 << 20, 64, "sysfs")
    f = tmp_path / "hw.json"
    f.write_text(json.dumps({"l3_bytes": "8M", "cores": 4}))
    for over in (detect(f, sysfs=sysfs), (monkeypatch.setenv("GRAPHSELECT_HARDWARE", str(f)),
                                          detect(sysfs=sysfs))[1]):
        assert (over.l1d_bytes, over.l3_bytes, over.cores) == (48 << 10, 8 << 20, 4)
        assert over.source == f"sysfs+override:{f}"
    monkeypatch.delenv("GRAPHSELECT_HARDWARE")
    no_l3 = detect(sysfs=_fake_sysfs(tmp_path / "small", [(1, "Data", "32K"), (2, "Unified", "512K")]))
    assert no_l3.l3_bytes == 0 and residency_budget(no_l3) == 512 << 10
    missing = detect(sysfs=tmp_path / "nowhere")
    assert missing.source == "defaults" and missing.l2_bytes == DEFAULTS.l2_bytes
    f.write_text(json.dumps({"l4_bytes": 1}))
    with pytest.raises(ValueError, match="l4_bytes"):
        detect(f, sysfs=sysfs)


def test_parse_size_and_budget():
    assert [parse_size(s) for s in ("48K", "1024K", "32768K", "32M", "1G", "512", 7)] == \
        [48 << 10, 1 << 20, 32 << 20, 32 << 20, 1 << 30, 512, 7]
    with pytest.raises(ValueError):
        parse_size("lots")
    assert residency_budget(Hardware(32 << 10, 1 << 20, 32 << 20, 64, 2, "t")) == 25 << 20


def test_an_unusable_warm_time_is_avoided_by_every_exact_solver():
    n = (Node("in", (Choice("in", 0.0, (), "L"),)),
         Node("c", (Choice("a", 1.0, ("L",), "L", warm_cost=math.inf, weight_bytes=1),
                    Choice("b", 2.0, ("L",), "L", warm_cost=1.5, weight_bytes=1))),
         Node("d", (Choice("x", 1.0, ("L",), "L", weight_bytes=5), Choice("y", 1.0, ("L",), "L"))))
    p = Problem(n, (Edge(0, 1, 0), Edge(1, 2, 0)), cache_bytes=3)
    for method in ("cp-sat", "brute"):
        a = solve(p, method=method)
        assert a.choice == (0, 0, 0) and a.cost == 2.0 and a.optimal and a.resident is False


def test_throughput_is_measured_once_and_stored(tmp_path, monkeypatch):
    from costmodels import hardware
    calls = []
    real = hardware.measure_throughput

    def counting(threads, cpu, **kw):
        calls.append(1)
        return real(threads, cpu, repeats=1)
    monkeypatch.setattr(hardware, "measure_throughput", counting)
    store = tmp_path / "hw.json"
    a = hardware.throughput(store, threads=2, cpu="test-cpu")
    b = hardware.throughput(store, threads=2, cpu="test-cpu")
    assert a == b and len(calls) == 1
    assert a.peak_gflops > 1 and a.bandwidth_gbs > 0.5
    hardware.throughput(store, threads=1, cpu="test-cpu")      # another key measures again
    assert len(calls) == 2


def test_residency_steps_are_measured_once_and_stored(tmp_path, monkeypatch):
    from costmodels import hardware
    calls = []
    real = hardware.measure_residency

    def counting(budget, threads, cpu, **kw):
        calls.append(budget)
        return real(budget, threads, cpu, rounds=2, passes=2)
    monkeypatch.setattr(hardware, "measure_residency", counting)
    store = tmp_path / "hw.json"
    budget = 4 << 20
    a = hardware.residency(store, budget, threads=2, cpu="test-cpu")
    b = hardware.residency(store, budget, threads=2, cpu="test-cpu")
    assert a == b and calls == [budget]
    assert a.warm_gbs > 0 and a.cold_gbs > 0 and a.budget_bytes == budget
    caps = [c for c, _ in a.steps]
    shares = [s for _, s in a.steps]
    assert caps == sorted(caps) and all(c > budget for c in caps)
    assert all(0 < s <= 1 for s in shares) and shares == sorted(shares, reverse=True)
    # the steps are valid Problem.partial steps for this budget
    Problem((), (), cache_bytes=budget, partial=a.steps)
    hardware.residency(store, 2 * budget, threads=2, cpu="test-cpu")   # another budget measures again
    assert calls == [budget, 2 * budget]
    # the throughput entry shares the file without disturbing it
    assert "residency|test-cpu|2|4194304" in json.loads(store.read_text())
