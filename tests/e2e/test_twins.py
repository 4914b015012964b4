"""A conv's twin (the same conv with another epilogue) has only the candidates that can win timed
(measure.twins; issue 24, items 1 and 3): checked through optimize on a residual block."""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import graphselect
from graphselect.measure import scouts, twins
from graphselect.measure.jobs import TimingConfig

QUICK = TimingConfig(rounds=1, cold_repeat=3, warm_number=2, warm_repeat=1)
RNG = np.random.default_rng(5)


def _block():
    """x -> conv3x3+bias -> relu -> conv3x3+bias -> + x -> relu: two convs equal but for the epilogue."""
    def w(name, shape):
        return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype("float32"), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 12, 12])  # noqa: E731
    g = helper.make_graph(nodes, "block", [t("x")], [t("y")],
                          [w("w1", (16, 16, 3, 3)), w("b1", (16,)), w("w2", (16, 16, 3, 3)), w("b2", (16,))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, path, **kw):
    return graphselect.optimize(model, cache=path, benchmark_runs=0, timing=QUICK, families=["direct", "nchwc"], **kw)


def test_the_later_twin_times_only_what_can_win_and_the_rest_is_never_chosen(tmp_path, monkeypatch):
    monkeypatch.setattr(twins, "MARGIN", 0.0)          # only each layout pair's fastest, and the fastest
    monkeypatch.setattr(scouts, "MIN_CANDIDATES", 10 ** 6)   # the twin rule alone (no conv scouted)
    m = _block()
    res = _run(m, tmp_path / "a.sqlite")
    plan = res.extra["plan"]
    first, later = plan.table("conv0"), plan.table("conv1")
    w0 = first.options[0].kernel[0]
    w1 = later.options[0].kernel[0]
    assert w1 != w0 and twins.twin_key(w0) == twins.twin_key(w1)
    pruned = res.report["records"]["pruned"]
    assert pruned, "nothing pruned"
    assert {p["workload"] for p in pruned} == {w1}
    assert all(p["why"].startswith(f"its twin {w0} ran it ") for p in pruned)
    gone = {p["candidate"] for p in pruned}
    # every layout pair of the later twin keeps a candidate; the pruned are never chosen
    pairs = lambda lt, names: {(o.in_layouts, o.out_layout) for o in lt.options if o.name in names}  # noqa: E731
    assert pairs(later, {o.name for o in later.options}) == pairs(later, {o.name for o in later.options} - gone)
    assert res.assignment["conv1"] not in gone
    assert len(gone) + sum(1 for o in later.options if o.name not in gone) == len(later.options)
    x = RNG.standard_normal((1, 16, 12, 12)).astype("float32")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(res.run(x), want, rtol=1e-4, atol=1e-5)
    # the report's candidate table says why each was not timed
    rows = {r["name"]: r for r in res.report["layers"]}
    assert {c["key"] for c in rows["conv1"]["candidates"] if (c["error"] or "").startswith("pruned: its twin")} == gone
    # time_all times them: nothing pruned, every candidate of the later twin has a finite timing
    full = _run(m, tmp_path / "a.sqlite", time_all=True)
    assert full.report["records"]["pruned"] == []
    rows = {r["name"]: r for r in full.report["layers"]}
    assert all(c["error"] is None and c["cold_ms"] > 0 for c in rows["conv1"]["candidates"])


def _single(bias: bool):
    """x -> conv3x3 (with or without bias) -> relu: the block's convs with another epilogue."""
    def w(name, shape):
        return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype("float32"), name)
    ins = ["x", "w1"] + (["b1"] if bias else [])
    nodes = [helper.make_node("Conv", ins, ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["y"])]
    t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 12, 12])  # noqa: E731
    inits = [w("w1", (16, 16, 3, 3))] + ([w("b1", (16,))] if bias else [])
    g = helper.make_graph(nodes, "single", [t("x")], [t("y")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_conv_whose_twin_another_model_timed_times_only_what_can_win(tmp_path, monkeypatch):
    """Another model's conv with another epilogue (an export without the zero bias) is a twin
    in the record store: only what it ran fastest is timed, the rest pruned with that reason, and
    the network still matches onnxruntime; the first model's candidates pruned there are not
    timed again either."""
    monkeypatch.setattr(twins, "MARGIN", 0.0)
    path = tmp_path / "a.sqlite"
    first = _run(_block(), path)
    w_first = {first.extra["plan"].table(n).options[0].kernel[0] for n in ("conv0", "conv1")}
    m = _single(bias=False)
    res = _run(m, path)
    plan = res.extra["plan"]
    mine = plan.table("conv0").options[0].kernel[0]
    assert mine not in w_first and twins.twin_key(mine) == twins.twin_key(next(iter(w_first)))
    pruned = res.report["records"]["pruned"]
    assert pruned and {p["workload"] for p in pruned} == {mine}
    assert all(p["why"].startswith("its twin ") and any(w in p["why"] for w in w_first) for p in pruned)
    gone = {p["candidate"] for p in pruned}
    lt = plan.table("conv0")
    assert res.assignment["conv0"] not in gone
    pairs = lambda names: {(o.in_layouts, o.out_layout) for o in lt.options if o.name in names}  # noqa: E731
    every = {o.name for o in lt.options}
    assert pairs(every) == pairs(every - gone)
    x = RNG.standard_normal((1, 16, 12, 12)).astype("float32")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(res.run(x), want, rtol=1e-4, atol=1e-5)
    # time_all: the store's twin decides nothing
    full = _run(m, tmp_path / "a.sqlite", time_all=True)
    assert full.report["records"]["pruned"] == []
