"""The timing thread kept off the TVM pool workers' cores (measure.affinity)."""
import os

import numpy as np
import pytest
import tvm

from graphselect.measure.affinity import CallPin, _cpu_list, pinned, worker_cpus

needs_two = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2
                               or tvm.runtime.num_threads() < 2, reason="needs 2 cores and a TVM pool of 2 threads")


def test_cpu_lists_parse():
    assert _cpu_list("0-2,5") == {0, 1, 2, 5} and _cpu_list("1") == {1} and _cpu_list("") == set()
    assert _cpu_list("x") == set()


@needs_two
def test_pinned_keeps_the_caller_off_the_workers_cores_and_restores_its_mask():
    before = os.sched_getaffinity(0)
    workers = worker_cpus()
    if not workers:     # TVM binds its pool's workers one core each, unless the cores it names are not ours
        pytest.skip("no TVM pool worker is bound to a core in this process")
    assert workers <= before
    with pinned():
        inside = os.sched_getaffinity(0)
        assert inside == before - workers and inside
        with pinned():                            # nested: stays as it is
            assert os.sched_getaffinity(0) == inside
    assert os.sched_getaffinity(0) == before
    # forced onto a worker's core first (what the scheduler did on its own), it is moved off it
    os.sched_setaffinity(0, before)
    try:
        with pinned():
            assert not os.sched_getaffinity(0) & workers
    finally:
        os.sched_setaffinity(0, before)


@needs_two
def test_a_users_call_runs_off_the_workers_cores_and_returns_the_result():
    pin = CallPin()
    seen = []

    def f(x):
        seen.append(os.sched_getaffinity(0))
        return x + 1

    before = os.sched_getaffinity(0)
    if not worker_cpus():
        pytest.skip("no TVM pool worker is bound to a core in this process")
    assert pin(f, np.float32(1)) == 2 and pin(f, np.float32(2)) == 3
    assert all(not s & worker_cpus() for s in seen)
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ZeroDivisionError):        # the mask comes back when the call fails too
        pin(lambda: 1 / 0)
    assert os.sched_getaffinity(0) == before
