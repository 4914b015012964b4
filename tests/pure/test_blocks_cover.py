"""Blocks (candidates spanning a chain of layers) in the whole-graph problem: every layer is
computed by exactly one chosen candidate, and the solver takes a block only where it pays."""
import itertools
import math

import numpy as np
import pytest

from costmodels.blocks import Block, chosen, with_blocks
from costmodels.problem import Choice, Edge, Node, Problem
from graphselect.solve import solve

T = {("X", "Y"): 0.5, ("Y", "X"): 0.5}


def _problem(rng=None):
    """input -> a -> b -> c -> output, and a's output also into c's port 1 (a residual)."""
    r = (lambda: float(rng.uniform(0.5, 1.5))) if rng is not None else (lambda: 1.0)
    nodes = (
        Node("input", (Choice("input", 0.0, (), "X"),)),
        Node("a", (Choice("aX", r(), ("X",), "X"), Choice("aY", r(), ("X",), "Y"))),
        Node("b", (Choice("bX", r(), ("X",), "X"), Choice("bY", r(), ("Y",), "Y"))),
        Node("c", (Choice("cX", r(), ("X", "X"), "X"), Choice("cY", r(), ("Y", "Y"), "Y"))),
        Node("d", (Choice("dX", r(), ("X",), "X"), Choice("dY", r(), ("Y",), "Y"))),
        Node("output", (Choice("output", 0.0, ("X",), None),)),
    )
    edges = (Edge(0, 1, 0, T), Edge(1, 2, 0, T), Edge(2, 3, 0, T), Edge(1, 3, 1, T), Edge(3, 4, 0, T),
             Edge(4, 5, 0, T))
    return Problem(nodes, edges)


# b -> c -> d: c's residual (port 1) comes from a, outside the block, in the block's output layout
BCD = dict(name="bcd", members=(2, 3, 4), out_layout="Y", ports={(0, 0): "Y", (1, 1): "Y"})


def _brute(p):
    best = None
    for choice in itertools.product(*[range(len(n.choices)) for n in p.nodes]):
        v = p.evaluate(choice)
        if best is None or v < best[0]:
            best = (v, choice)
    return best


@pytest.mark.parametrize("method", ["cp-sat", "brute", "pbqp", "greedy"])
def test_a_cheaper_block_is_chosen_on_all_its_members(method):
    p = with_blocks(_problem(), [Block(cost=1.2, **BCD)])
    a = solve(p, method=method)
    assert [b.name for b in chosen(p, a.choice, [Block(cost=1.2, **BCD)])] == ["bcd"]
    if method in ("cp-sat", "brute"):
        # a in Y (its output feeds the block's Y ports), the block, one transform Y -> X to the output
        assert a.cost == pytest.approx(1.0 + 1.2 + 0.5)


@pytest.mark.parametrize("method", ["cp-sat", "brute", "pbqp"])
def test_a_slower_block_is_left_to_per_layer_kernels(method):
    blocks = [Block(cost=3.5, **BCD)]
    p = with_blocks(_problem(), blocks)
    a = solve(p, method=method)
    assert chosen(p, a.choice, blocks) == []
    assert a.cost == pytest.approx(4.0)          # every layer in X, no transform


@pytest.mark.parametrize("seed", range(40))
def test_cover_every_layer_once_and_the_optimum_matches_brute_force(seed):
    """Random costs, one or two overlapping candidate blocks: CP-SAT's optimum equals the brute
    force one over every assignment, and no assignment of finite cost uses a block partly."""
    rng = np.random.default_rng(seed)
    base = _problem(rng)
    blocks = [Block(cost=float(rng.uniform(1.0, 4.0)), **BCD)]
    if seed % 2:
        blocks.append(Block("ab", (1, 2), "X", float(rng.uniform(0.8, 2.5)), ports={(0, 0): "X"}))
    # "ab" would leave a's output to c's residual port: refused, so only chains whose inner outputs
    # stay inside can be blocks
    if len(blocks) == 2:
        with pytest.raises(ValueError, match="outside the chain"):
            with_blocks(base, blocks)
        blocks = blocks[:1]
    p = with_blocks(base, blocks)
    best = _brute(p)
    a = solve(p, method="cp-sat")
    assert a.optimal and a.cost == pytest.approx(best[0], abs=1e-3)
    for choice in itertools.product(*[range(len(n.choices)) for n in p.nodes]):
        on = [p.nodes[v].choices[choice[v]].name == "bcd" for v in BCD["members"]]
        if any(on) and not all(on):
            assert p.evaluate(choice) == math.inf
    # with the block's cost above the per-layer optimum of its members the answer is the base one
    costly = with_blocks(base, [Block(cost=100.0, **BCD)])
    assert solve(costly, method="cp-sat").cost == pytest.approx(_brute(base)[0], abs=1e-3)


def test_block_prices_its_weights_on_the_last_member_and_keeps_the_residency_term():
    b = Block(cost=1.2, warm_cost=0.6, weight_bytes=1000, workspace_bytes=24, **BCD)
    p = with_blocks(_problem(), [b])
    last = p.nodes[4].choices[-1]
    assert (last.name, last.cost, last.warm_cost, last.weight_bytes, last.workspace_bytes) == \
        ("bcd", 1.2, 0.6, 1000, 24)
    for v in (2, 3):
        ch = p.nodes[v].choices[-1]
        assert (ch.cost, ch.weight_bytes, ch.out_layout) == (0.0, 0, "~bcd")
    assert p.nodes[3].choices[-1].in_layouts == ("~bcd", "Y")


def test_malformed_blocks_are_refused():
    base = _problem()
    with pytest.raises(ValueError, match="outside the chain"):       # a also feeds b
        with_blocks(base, [Block("ad", (1, 4), "X", 1.0, ports={(0, 0): "X", (1, 0): "X"})])
    with pytest.raises(ValueError, match="no edge"):                  # the output feeds nothing
        with_blocks(base, [Block("oa", (5, 1), "X", 1.0, ports={(0, 0): "X", (1, 0): "X"})])
    with pytest.raises(ValueError, match="no layout"):
        with_blocks(base, [Block("bcd", (2, 3, 4), "Y", 1.0, ports={(0, 0): "Y"})])
    with pytest.raises(ValueError, match="distinct"):
        with_blocks(base, [Block("b", (2,), "Y", 1.0, ports={(0, 0): "Y"})])
    with pytest.raises(ValueError, match="named"):
        with_blocks(base, [Block(cost=1.0, **BCD), Block(cost=2.0, **BCD)])
