"""cp-sat hands back the best assignment of the other residency state as an alternative, so the
pipeline can time both instead of trusting the cache model."""
from graphselect.solve import solve, synthetic


def test_alternatives_are_distinct_finite_and_of_the_other_state():
    seen = 0
    for seed in range(120):
        p = synthetic.random_problem(seed, residency=True)
        try:
            a = solve(p, method="cp-sat", time_limit=10)
        except Exception:  # noqa: BLE001 - infeasible random problems are part of the generator
            continue
        for alt in a.alternatives:
            seen += 1
            assert tuple(alt) != tuple(a.choice)
            assert p.evaluate(alt) >= a.cost - 1e-9            # the returned choice is the best
            assert p.evaluate(alt) < float("inf")
        assert len(set(map(tuple, a.alternatives))) == len(a.alternatives)
    assert seen >= 5


def test_no_cache_term_no_alternatives():
    a = solve(synthetic.residual(30, seed=1), method="cp-sat", time_limit=10)
    assert a.alternatives == ()
