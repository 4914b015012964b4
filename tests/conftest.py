"""One TVM thread count for the whole test process: TVM's pool starts with the first kernel that
runs and keeps its size, and ``graphselect.optimize`` refuses to time under a pool whose size
differs from the thread count it files records under. Without this, a tests/tvm kernel run
before the first optimize call would start the pool at TVM's own default (1 on a 2-vCPU VM)."""
import os

from graphselect.target import default_threads

os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))


import json  # noqa: E402

import pytest  # noqa: E402

_FACTS: dict = {}      # this machine's probes (peak, floor, launch cost, residency), gathered once


@pytest.fixture(autouse=True)
def _machine_facts(request):
    """A test's fresh record store starts with the machine probes earlier tests took (the
    ``hardware.json`` beside the store: a few seconds of probing each, and a fact of the
    machine, not of the store), and gives back what it probed of this CPU (tests that file
    made-up probes under made-up CPU names keep them to themselves)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    hw = request.getfixturevalue("tmp_path") / "hardware.json"
    if _FACTS and not hw.exists():
        hw.write_text(json.dumps(_FACTS))
    yield
    try:
        got = json.loads(hw.read_text())
    except (OSError, ValueError):
        return
    from graphselect.target import cpu_id, cpu_model
    _FACTS.update({k: v for k, v in got.items() if {cpu_model(), cpu_id()} & set(k.split("|"))})
