"""Synthetic selection problems for solver tests and benchmarks (pure Python, seeded).

Costs are shaped like a CNN on a CPU: a conv costs its FLOPs at ~150 GFLOP/s times a layout
preference and noise, with occasional much faster kernels; a layout transform costs ~1 ns per
element of the tensor it converts; elementwise ops are cheap and exist in every layout.
Every cost is a multiple of ``quantum`` ms.

``random_problem(seed)`` gives small, varied problems for brute-force checks (3-5 layouts,
infinite-cost choices, missing transform pairs, so some are infeasible). ``chain``,
``residual`` and ``branching`` give large networks with ~20 candidates per conv, every conv
keeping a finite NCHW->NCHW candidate and every transform to or from NCHW existing, so they are
always feasible.

With ``residency=True`` every generator draws the same network (same seed, same cold costs)
and then adds a cache term: each conv choice gets ``warm_cost = cold * U(0.6, 0.95)``,
``weight_bytes`` scaled by its algorithm (Winograd's transformed 4x4 tiles: 16/9) and by a
random packing overhead, im2col a workspace; ``activation_bytes`` is the largest input plus
output pair; and ``cache_bytes`` falls at a random point between the smallest and the largest
possible footprint, so that about half the problems are resident at their optimum.
"""
from __future__ import annotations

import math
import random

from costmodels.problem import Choice, Edge, Node, Problem

LAYOUTS = ("NCHW", "NCHW8c", "NCHW16c", "NCHW32c", "NCHW64c")
_ALGOS = {"direct": 1.0, "im2col": 1.15, "spatial": 0.9, "winograd": 0.7}   # speed factors
_STAGES = ((56, 64), (28, 128), (14, 256), (7, 512), (4, 1024))           # (H=W, channels)


class _Builder:
    """Mutable scratch space for one problem; only the frozen Problem leaves this module."""

    def __init__(self, rng, layouts, *, quantum, p_inf, p_missing, keep_nchw, transform_scale=1.0):
        self.rng, self.layouts, self.quantum = rng, layouts, quantum
        self.p_inf, self.p_missing, self.keep_nchw = p_inf, p_missing, keep_nchw
        self.nodes, self.edges, self.shape = [], [], []
        self.pref = {l: f for l, f in zip(layouts, (1.3, 1.0, 0.9, 0.95, 1.05))}
        self.tf = {(p, q): rng.uniform(0.3, 1.2) * transform_scale
                   for p in layouts for q in layouts if p != q}           # ns per element

    def ms(self, x):
        return round(x / self.quantum) * self.quantum

    def add(self, kind, choices, shape, preds):
        v = len(self.nodes)
        self.nodes.append(Node(f"{kind}{v}", tuple(choices)))
        self.shape.append(shape)
        for port, u in enumerate(preds):
            h, c = self.shape[u]
            table = {}
            for (p, q), f in self.tf.items():
                if self.rng.random() < self.p_missing and not (self.keep_nchw and LAYOUTS[0] in (p, q)):
                    continue
                table[p, q] = self.ms(h * h * c * f * self.rng.lognormvariate(0, 0.15) * 1e-6)
            self.edges.append(Edge(u, v, port, table))
        return v

    def input(self, shape):
        return self.add("input", [Choice("input", 0.0, (), LAYOUTS[0])], shape, [])

    def output(self, u):
        return self.add("output", [Choice("output", 0.0, (LAYOUTS[0],), None)], self.shape[u], [u])

    def conv(self, u, cout, k=3, stride=1, n_cand=20, nchw_direct=True):
        rng = self.rng
        hin, cin = self.shape[u]
        hout = max(1, hin // stride)
        base = 2.0 * hout * hout * cin * cout * k * k / 150e9 * 1e3      # ms
        pref = {l: self.pref[l] * rng.lognormvariate(0, 0.15) for l in self.layouts}
        algos = [a for a in _ALGOS if a != "winograd" or k == 3]
        fast = set(rng.sample(range(n_cand), min(n_cand, rng.randint(2, 3)))) if rng.random() < 0.3 else set()
        choices = []
        for i in range(n_cand):
            if i == 0 and nchw_direct:
                li = lo = LAYOUTS[0]
                algo = "direct"
            else:
                li = rng.choice(self.layouts)
                lo = li if rng.random() < 0.6 else rng.choice(self.layouts)
                algo = rng.choice(algos)
            cost = base * _ALGOS[algo] * 0.5 * (pref[li] + pref[lo]) * rng.lognormvariate(0, 0.2)
            if i in fast:
                cost *= rng.uniform(0.35, 0.6)
            if rng.random() < self.p_inf and not (i == 0 and nchw_direct):
                cost = math.inf
            choices.append(Choice(f"{algo}_{li}_{lo}_{i}", max(self.quantum, self.ms(cost)) if cost < math.inf
                                  else math.inf, (li,), lo, weight_bytes=4 * cin * cout * k * k))
        return self.add("conv", choices, (hout, cout), [u])

    def op(self, kind, preds, shape=None):
        """Layout-agnostic op (relu, add, concat, pool): one choice per layout, all ports alike."""
        shape = shape or self.shape[preds[0]]
        h, c = shape
        choices = []
        for layout in self.layouts:
            cost = h * h * c * len(preds) * 0.05e-6 * (1 + 0.3 * self.rng.random())
            if layout != LAYOUTS[0] and self.rng.random() < self.p_inf:
                cost = math.inf
            choices.append(Choice(f"{kind}_{layout}", max(self.quantum, self.ms(cost)) if cost < math.inf
                                  else math.inf, (layout,) * len(preds), layout))
        return self.add(kind, choices, shape, preds)

    def problem(self, residency=False):
        if not residency:
            return Problem(tuple(self.nodes), tuple(self.edges))
        rng, nodes = self.rng, []
        for node in self.nodes:
            choices = []
            for ch in node.choices:
                if ch.weight_bytes:       # a conv
                    algo = ch.name.split("_")[0]
                    wb = round(ch.weight_bytes * (16 / 9 if algo == "winograd" else 1.0)
                               * rng.choice((1.0, 1.0, 1.25, 2.0)))
                    ws = round(ch.weight_bytes * rng.uniform(0.5, 2.0)) if algo == "im2col" else 0
                    warm = (max(self.quantum, self.ms(ch.cost * rng.uniform(0.6, 0.95)))
                            if ch.cost < math.inf else None)
                    ch = Choice(ch.name, ch.cost, ch.in_layouts, ch.out_layout, warm_cost=warm,
                                weight_bytes=wb, workspace_bytes=ws)
                choices.append(ch)
            nodes.append(Node(node.name, tuple(choices)))
        sizes = [[c.weight_bytes + c.workspace_bytes for c in n.choices if c.cost < math.inf] or [0]
                 for n in nodes]
        lo, hi = sum(map(min, sizes)), sum(map(max, sizes))
        preds = {}
        for e in self.edges:
            preds.setdefault(e.dst, []).append(e.src)
        act = max((4 * sum(h * h * c for h, c in [self.shape[v]] + [self.shape[u] for u in preds.get(v, [])])
                   for v in range(len(nodes))), default=0)
        cache = act + round(lo + (hi - lo) * rng.uniform(-0.1, 0.7))
        return Problem(tuple(nodes), tuple(self.edges), cache_bytes=max(0, cache), activation_bytes=act)


def random_problem(seed: int, *, max_nodes: int = 9, residency: bool = False) -> Problem:
    """A small random network (3 to ``max_nodes`` nodes) built from convs, elementwise ops,
    residual blocks (Add) and concat blocks, between an NCHW input and an NCHW output.

    Conv candidates take random (in, out) layouts (no guaranteed NCHW kernel), choices may be
    infinite, transform pairs may be missing, and costs are multiples of 1e-3 ms.
    ``residency=True``: the same network plus a cache term (see the module docstring).
    """
    rng = random.Random(seed)
    layouts = LAYOUTS[:rng.randint(3, 5)]
    b = _Builder(rng, layouts, quantum=1e-3, p_inf=rng.choice((0.0, 0.1, 0.25)),
                 p_missing=rng.choice((0.0, 0.15, 0.4)), keep_nchw=False,
                 transform_scale=rng.choice((0.5, 2.0, 8.0)))
    size = rng.randint(3, max_nodes)
    u = b.input((rng.choice((28, 56)), 64))

    def conv(u):
        return b.conv(u, 64, k=rng.choice((1, 3)), n_cand=rng.randint(2, 4), nchw_direct=False)

    while (room := size - 1 - len(b.nodes)) > 0:          # keep one node for the output
        kind = rng.choice(("conv", "conv", "op", "residual", "concat"))
        if kind == "residual" and room >= 3:
            skip = conv(u) if room >= 4 and rng.random() < 0.3 else u
            u = b.op("add", [skip, conv(conv(u))])
        elif kind == "concat" and room >= 3:
            u = b.op("concat", [conv(u) for _ in range(rng.randint(2, min(3, room - 1)))])
        elif kind == "op":
            u = b.op("relu", [u])
        else:
            u = conv(u)
    b.output(u)
    return b.problem(residency)


def _large(seed, p_inf, p_missing):
    rng = random.Random(seed)
    return rng, _Builder(rng, LAYOUTS, quantum=1e-4, p_inf=p_inf, p_missing=p_missing, keep_nchw=True)


def chain(n: int, *, seed: int = 0, n_candidates: int = 20, p_inf: float = 0.05,
          p_missing: float = 0.05, residency: bool = False) -> Problem:
    """A plain conv chain (VGG-like) of about ``n`` nodes with some ReLU-like ops."""
    rng, b = _large(seed, p_inf, p_missing)
    u = b.conv(b.input((224, 3)), 64, k=7, stride=4, n_cand=n_candidates)
    stage = 0
    while len(b.nodes) < n - 1:
        s = min(len(_STAGES) - 1, len(_STAGES) * len(b.nodes) // n)
        if s != stage:
            stage = s
            u = b.conv(u, _STAGES[s][1], 3, 2, n_cand=n_candidates)
        elif rng.random() < 0.12:
            u = b.op("relu", [u])
        else:
            u = b.conv(u, _STAGES[s][1], rng.choice((1, 3, 3)), n_cand=n_candidates)
    b.output(u)
    return b.problem(residency)


def residual(n: int, *, seed: int = 0, n_candidates: int = 20, p_inf: float = 0.05,
             p_missing: float = 0.05, residency: bool = False) -> Problem:
    """A ResNet-like stack of about ``n`` nodes: two convs plus a skip into an Add per block."""
    rng, b = _large(seed, p_inf, p_missing)
    u = b.conv(b.input((224, 3)), 64, k=7, stride=4, n_cand=n_candidates)
    stage = 0
    while len(b.nodes) < n - 5:
        s = min(len(_STAGES) - 1, len(_STAGES) * len(b.nodes) // n)
        c = _STAGES[s][1]
        if s != stage:
            stage = s
            main = b.conv(b.conv(u, c, 3, 2, n_cand=n_candidates), c, 3, n_cand=n_candidates)
            u = b.op("add", [b.conv(u, c, 1, 2, n_cand=n_candidates), main])
        else:
            main = b.conv(b.conv(u, c, 3, n_cand=n_candidates), c, 3, n_cand=n_candidates)
            u = b.op("add", [u, main])
    u = b.op("pool", [u], (1, b.shape[u][1]))
    b.output(u)
    return b.problem(residency)


def branching(n: int, *, seed: int = 0, n_candidates: int = 20, p_inf: float = 0.05,
              p_missing: float = 0.05, residency: bool = False) -> Problem:
    """An Inception-like stack of about ``n`` nodes: four branches (1 to 3 convs, one behind a
    pool) joined by a Concat per block."""
    rng, b = _large(seed, p_inf, p_missing)
    u = b.conv(b.input((224, 3)), 64, k=7, stride=4, n_cand=n_candidates)
    stage = 0
    while len(b.nodes) < n - 11:
        s = min(len(_STAGES) - 1, len(_STAGES) * len(b.nodes) // n)
        c = _STAGES[s][1]
        if s != stage:
            stage = s
            h = b.shape[u][0]
            u = b.op("pool", [u], (max(1, h // 2), b.shape[u][1]))

        def conv(v, cout, k):
            return b.conv(v, cout, k, n_cand=n_candidates)

        b1 = conv(u, c // 4, 1)
        b2 = conv(conv(u, c // 8, 1), c // 4, 3)
        b3 = conv(conv(conv(u, c // 16, 1), c // 8, 3), c // 4, 3)
        b4 = conv(b.op("pool", [u]), c // 4, 1)
        u = b.op("concat", [b1, b2, b3, b4], (b.shape[b1][0], c))
    u = b.op("pool", [u], (1, b.shape[u][1]))
    b.output(u)
    return b.problem(residency)


GENERATORS = {"chain": chain, "residual": residual, "branching": branching}


def with_random_blocks(problem: Problem, *, seed: int = 0, share: float = 0.5):
    """``problem`` with candidate blocks (``costmodels.blocks``) over about ``share`` of its conv ->
    conv pairs whose first conv feeds only the second: each costs the pair's fastest per-layer
    kernels times U(0.6, 1.3), reads a layout the first conv reads and writes one the second
    writes. Returns (the problem with the blocks, the blocks)."""
    from costmodels.blocks import Block, with_blocks
    rng = random.Random(seed)
    outs: dict[int, list] = {}
    for e in problem.edges:
        outs.setdefault(e.src, []).append(e)
    used, blocks = set(), []
    for e in problem.edges:
        u, v = e.src, e.dst
        nu, nv = problem.nodes[u], problem.nodes[v]
        if not (nu.name.startswith("conv") and nv.name.startswith("conv")) or len(outs[u]) != 1 \
                or u in used or v in used or rng.random() >= share:
            continue
        fu = [c for c in nu.choices if c.cost < math.inf]
        fv = [c for c in nv.choices if c.cost < math.inf]
        cost = (min(c.cost for c in fu) + min(c.cost for c in fv)) * rng.uniform(0.6, 1.3)
        blocks.append(Block(f"blk{u}_{v}", (u, v), rng.choice(fv).out_layout, round(cost, 4),
                            ports={(0, 0): rng.choice(fu).in_layouts[0]}))
        used.update((u, v))
    return with_blocks(problem, blocks), blocks
