"""measure.scouts: variants, the parameter model, which members scout and which are pruned."""
import itertools
import math

import numpy as np
import pytest

from graphselect.measure import scouts as S


def test_a_variant_is_the_family_and_its_algorithm_parameters_not_its_blockings():
    assert S.variant("winograd(ic_bn=16,m=4,oc_bn=32,pt=7)") == S.variant("winograd(ic_bn=32,m=4,oc_bn=16,pt=4)")
    assert S.variant("winograd(ic_bn=16,m=4,oc_bn=32,pt=7)") != S.variant("winograd(ic_bn=16,m=6,oc_bn=32,pt=7)")
    assert S.variant("winograd(ic_bn=16,m=4,oc_bn=16,pt=7)") != S.variant("winograd(ic_bn=16,m=4,nchw=1,oc_bn=16,pt=7)")
    assert S.variant("nchwc(ic_bn=3,oc_bn=16,reg_n=14)") != S.variant("nchwc(ic_bn=3,oc_bn=16,pad_inline=1,reg_n=14)")
    assert S.variant("nchwc(ic_bn=16,oc_bn=16,reg_n=7)") != S.variant("pointwise(ic_bn=16,oc_bn=16,reg_n=7)")


def _synthetic(workloads, seed=0):
    """Exactly multiplicative timings: workload level x variant level x per-value blocking factors."""
    rng = np.random.default_rng(seed)
    ic = {"16": 1.0, "32": 1.12}
    oc = {"16": 1.07, "32": 1.0}
    pt = {"4": 1.3, "5": 1.05, "7": 1.0}
    level = {"2": 1.0, "4": 0.8, "6": 1.4}
    out = {}
    for w in workloads:
        base = float(rng.uniform(0.1, 1.0))
        wl = {m: v * float(rng.uniform(0.7, 1.4)) for m, v in level.items()}   # the variant level moves per workload
        for m, i, o, p in itertools.product(level, ic, oc, pt):
            c = f"winograd(ic_bn={i},m={m},oc_bn={o},pt={p})"
            t = base * wl[m] * ic[i] * oc[o] * pt[p]
            out[(w, c)] = (t, 0.9 * t)
    return out


def test_the_parameter_model_recovers_blocking_factors_fitted_on_other_workloads():
    data = _synthetic(["a", "b", "c"])
    model = S.ParamModel.fit((w, c, *t) for (w, c), t in data.items())
    cold, warm = model.factor("winograd(ic_bn=32,m=4,oc_bn=16,pt=4)", "winograd(ic_bn=16,m=4,oc_bn=32,pt=7)")
    assert cold == pytest.approx(1.12 * 1.07 * 1.3, rel=1e-6)
    assert warm == pytest.approx(cold, rel=1e-6)
    # a value never seen counts as no change; another variant's data says nothing about this one
    assert model.factor("winograd(ic_bn=64,m=4,oc_bn=32,pt=7)", "winograd(ic_bn=16,m=4,oc_bn=32,pt=7)") == \
        pytest.approx((1.0, 1.0))
    empty = S.ParamModel.fit([("a", "winograd(ic_bn=16,m=4,oc_bn=32,pt=7)", 1.0, 1.0)])   # one member: no data
    assert empty.effects == {} and empty.rank("winograd(ic_bn=32,m=4,oc_bn=16,pt=4)") == 0


def test_a_workload_has_one_scout_per_variant_and_the_scouts_spread_over_layout_pairs():
    cands = [k for w, k in _synthetic(["z"])]
    lay = lambda c: tuple(S.parse(c)[1][p] for p in ("ic_bn", "oc_bn"))  # noqa: E731
    picked = S.scouts(cands, {}, lay, S.ParamModel())
    assert sorted(S.variant(c) for c in picked) == sorted({S.variant(c) for c in cands})
    assert len({lay(c) for c in picked}) == len(picked)          # no model: ties, so distinct layout pairs
    # a variant with a timing already is not scouted again
    some_m4 = next(c for c in cands if "m=4" in c)
    assert all("m=4" not in c for c in S.scouts(cands, {some_m4: (1.0, 1.0)}, lay, S.ParamModel()))
    # with a model, each variant's scout is the member it ranks first
    data = _synthetic(["a", "b"])
    model = S.ParamModel.fit((w, c, *t) for (w, c), t in data.items())
    for c in S.scouts(cands, {}, lay, model):
        assert S.parse(c)[1]["pt"] == "7"


def test_pruning_keeps_what_is_predicted_within_the_margin_and_one_per_layout_pair():
    lay = lambda c: S.parse(c)[1].get("ic_bn", "NCHW")   # noqa: E731
    timed = {"w(ic_bn=16,m=2)": (1.0, 1.0), "w(ic_bn=16,m=4)": (1.5, 1.5), "d(vec=8)": (3.0, 3.0)}
    rest = ["w(ic_bn=32,m=2)", "w(ic_bn=32,m=4)", "w(ic_bn=64,m=4)", "d(vec=16)", "x(ic_bn=16)"]
    keep, gone = S.prune(rest, timed, lay, S.ParamModel(), margin=0.25)
    # m=2's other member is predicted at its scout's 1.0x; x has no timed member of its variant;
    # w(ic_bn=32,m=4) is the best predicted of layout pair "32" -> dropped only because m=2 covers 32;
    # ic_bn=64 is a layout pair nothing timed covers: its best predicted member is kept
    assert keep == ["w(ic_bn=32,m=2)", "w(ic_bn=64,m=4)", "x(ic_bn=16)"]
    why = dict(gone)
    assert set(why) == {"w(ic_bn=32,m=4)", "d(vec=16)"}
    assert why["d(vec=16)"] == "predicted 3.00x the fastest (w(ic_bn=16,m=2)) from d(vec=8) timed at 3.00x"
    # warm alone within the margin keeps it
    keep, gone = S.prune(["d(vec=16)"], {**timed, "d(vec=8)": (3.0, 1.2)}, lay, S.ParamModel(), margin=0.25)
    assert keep == ["d(vec=16)"] and gone == []
    # nothing finite timed: everything is timed
    assert S.prune(rest, {"w(ic_bn=16,m=2)": (math.inf, math.inf)}, lay, S.ParamModel()) == (rest, [])


@pytest.mark.parametrize("seed", range(6))
def test_with_an_exact_model_the_fastest_candidate_is_always_timed(seed):
    """Scouting then pruning on a workload the model has not seen finds its true fastest, for
    timings that follow the model's form, whatever each variant's level on the workload."""
    data = _synthetic(["a", "b", "target"], seed)
    train = [(w, c, *t) for (w, c), t in data.items() if w != "target"]
    model = S.ParamModel.fit(train)
    cands = [c for (w, c) in data if w == "target"]
    lay = lambda c: (S.parse(c)[1]["ic_bn"], S.parse(c)[1]["oc_bn"])   # noqa: E731
    first = S.scouts(cands, {}, lay, model)
    timed = {c: data[("target", c)] for c in first}
    keep, gone = S.prune([c for c in cands if c not in timed], timed, lay, model, margin=0.05)
    timed.update({c: data[("target", c)] for c in keep})
    best = min(cands, key=lambda c: data[("target", c)][0])
    assert best in timed
    assert gone, "nothing pruned"
    assert {lay(c) for c in timed} == {lay(c) for c in cands}
    assert len(timed) + len(gone) == len(cands)
