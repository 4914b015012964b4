#!/usr/bin/env python3
"""How CP-SAT scales with the graph: time to a proven optimum (or the gap reached) and how far
the per-layer-fastest greedy is from it, on synthetic chain / residual / branching problems with
~20 candidates per conv (graphselect.solve.synthetic). Single process, 2 CP-SAT workers.

    python bench/solver_scaling.py                 # 50, 200, 1000 nodes, 30 s limit
    python bench/solver_scaling.py --sizes 200 --structs residual --time-limit 10
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from graphselect.solve import solve, synthetic  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000])
    ap.add_argument("--structs", nargs="+", default=list(synthetic.GENERATORS),
                    choices=list(synthetic.GENERATORS))
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    print(f"{'graph':10s} {'nodes':>5s} {'edges':>5s} {'choices':>7s} | {'cp-sat ms':>10s} "
          f"{'status':8s} {'seconds':>7s} {'gap':>8s} | {'greedy ms':>10s} {'greedy/opt':>10s}")
    for n in args.sizes:
        for struct in args.structs:
            p = synthetic.GENERATORS[struct](n, seed=args.seed + n, n_candidates=args.candidates)
            exact = solve(p, method="cp-sat", time_limit=args.time_limit)
            base = solve(p, method="greedy")
            print(f"{struct:10s} {len(p.nodes):5d} {len(p.edges):5d} "
                  f"{sum(len(x.choices) for x in p.nodes):7d} | {exact.cost:10.4f} "
                  f"{'optimal' if exact.optimal else 'feasible':8s} {exact.seconds:7.2f} "
                  f"{exact.gap:8.2%} | {base.cost:10.4f} {base.cost / exact.cost:10.4f}", flush=True)


if __name__ == "__main__":
    main()
