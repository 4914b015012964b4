"""Round-by-round comparison of end-to-end timings (graphselect.measure.e2e)."""
from graphselect.measure.e2e import Rounds, compare


def test_ratio_and_fastest_ignore_a_slow_spell_between_rounds():
    # b is 10% slower than a in every round; the machine is 2x slower in rounds 1 and 2, and the
    # spell hits a's blocks of round 3 too (state flipped inside the round)
    a = [[1.0] * 3, [2.0] * 3, [2.0] * 3, [2.0] * 3, [1.0] * 3]
    b = [[1.1] * 3, [2.2] * 3, [2.2] * 3, [1.1] * 3, [1.1] * 3]
    r = Rounds({"a": a, "b": b})
    # medians over all calls say b is faster (1.1 < 2.0); round by round a wins
    assert r.median("b") < r.median("a")
    assert abs(r.ratio("b", "a") - 1.1) < 1e-9
    assert r.fastest(["a", "b"]) == "a"
    assert r.fastest(["b", "a"]) == "a"
    assert r.calls("a") == [t for blk in a for t in blk]


def test_compare_runs_interleaved_rounds_in_alternating_order():
    log = []
    fns = {k: (lambda k=k: log.append(k)) for k in ("x", "y", "z")}
    r = compare(fns, runs=6, block=2, pause=0, warmup_s=0)
    # 3 rounds of 2 calls (+1 warm-up) each, the order reversed every other round
    assert [len(r.ms[k]) for k in fns] == [3, 3, 3]
    assert all(len(blk) == 2 for k in fns for blk in r.ms[k])
    # blocks x y z | z y x | x y z, adjacent blocks of one function run together
    order = [k for i, k in enumerate(log) if i == 0 or log[i - 1] != k]
    assert order == ["x", "y", "z", "y", "x", "y", "z"]
    assert len(log) == 9 * 3


def test_compare_pauses_only_when_the_runtime_changes(monkeypatch):
    import graphselect.measure.e2e as e2e
    events = []
    monkeypatch.setattr(e2e.time, "sleep", lambda s: events.append(("pause", s)))
    fns = {k: (lambda k=k: events.append(k)) for k in ("t1", "t2", "ort")}
    for k, runtime in (("t1", "tvm"), ("t2", "tvm"), ("ort", "ort")):
        fns[k].runtime = runtime
    compare(fns, runs=3, block=1, pause=0.7)
    blocks = [e for i, e in enumerate(events) if i == 0 or events[i - 1] != e]
    # rounds t1 t2 ort | ort t2 t1 | t1 t2 ort: a pause first, then only at tvm <-> ort switches
    assert blocks == [("pause", 0.7), "t1", "t2", ("pause", 0.7), "ort", ("pause", 0.7), "t2", "t1",
                      "t2", ("pause", 0.7), "ort"]


def test_blocks_of_a_fast_function_warm_up_for_a_while():
    from graphselect.measure.e2e import time_calls
    calls = []
    ts = time_calls(lambda: calls.append(1), 3, warmup=1, warmup_s=0.002)
    assert len(ts) == 3 and 4 < len(calls) <= 203          # many warm-up calls, capped at 200
    calls.clear()
    time_calls(lambda: calls.append(1), 3, warmup=2, warmup_s=0)
    assert len(calls) == 5


def test_compare_takes_a_block_from_a_function_that_times_its_own_calls():
    # a runtime in another process (bench's DeepSparse worker) times its blocks itself
    class Remote:
        runtime = "remote"

        def __init__(self):
            self.asked = []

        def __call__(self):
            raise AssertionError("called one by one")

        def time_block(self, runs, warmup=1, warmup_s=0.0):
            self.asked.append((runs, warmup, warmup_s))
            return [3.0] * runs

    remote = Remote()
    r = compare({"local": lambda: None, "remote": remote}, runs=4, block=2, pause=0, warmup_s=0.005)
    assert remote.asked == [(2, 1, 0.005)] * 3
    assert r.ms["remote"] == [[3.0, 3.0]] * 3
    assert r.ratio("remote", "remote") == 1.0 and r.median("remote") == 3.0
