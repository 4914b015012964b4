#!/usr/bin/env python3
"""How the solvers scale with the graph: CP-SAT's time to a proven optimum (or the gap reached),
PBQP's time and distance from it (and whether its reductions stayed exact), DP's time on chains
(the only structure it covers; not with a cache term), and how far the per-layer-fastest greedy
is; on synthetic chain / residual / branching problems with ~20 candidates per conv
(graphselect.solve.synthetic), with ``--residency`` also the cache term (warm/cold timings,
weight bytes, a cache budget). Single process, 2 CP-SAT workers.

    python bench/solver_scaling.py                 # 50, 200, 1000 nodes, 30 s limit
    python bench/solver_scaling.py --sizes 50 200 1000 5000 --residency
    python bench/solver_scaling.py --sizes 200 --structs residual --time-limit 10
    python bench/solver_scaling.py --blocks        # with candidate blocks over conv -> conv pairs
                                                   # (graph column: blocks chosen / offered)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from graphselect.solve import pbqp, solve, synthetic  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000])
    ap.add_argument("--structs", nargs="+", default=list(synthetic.GENERATORS),
                    choices=list(synthetic.GENERATORS))
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--residency", action="store_true", help="add the cache term to every problem")
    ap.add_argument("--no-pbqp", action="store_true")
    ap.add_argument("--blocks", action="store_true",
                    help="add candidate blocks over half the conv -> conv pairs (costmodels.blocks)")
    args = ap.parse_args(argv)

    print(f"{'graph':10s} {'nodes':>5s} {'edges':>5s} {'choices':>7s} | {'cp-sat ms':>10s} "
          f"{'status':8s} {'seconds':>7s} {'gap':>8s} | {'pbqp/opt':>8s} {'seconds':>7s} {'reductions':10s} "
          f"| {'dp/opt':>6s} {'seconds':>7s} | {'greedy ms':>10s} {'greedy/opt':>10s}")
    for n in args.sizes:
        for struct in args.structs:
            p = synthetic.GENERATORS[struct](n, seed=args.seed + n, n_candidates=args.candidates,
                                             residency=args.residency)
            nblocks = 0
            if args.blocks:
                p, blocks = synthetic.with_random_blocks(p, seed=args.seed + n)
                nblocks = len(blocks)
            exact = solve(p, method="cp-sat", time_limit=args.time_limit)
            base = solve(p, method="greedy")
            pb = "—", "—", "—"
            if not args.no_pbqp:
                t = time.perf_counter()
                a, info = pbqp.solve_with_info(p)
                pb = (f"{a.cost / exact.cost:8.4f}", f"{time.perf_counter() - t:7.2f}",
                      "exact" if not info["rn_reductions"] else f"{info['rn_reductions']} RN")
            dp = "—", "—"
            if struct == "chain" and not args.residency and not args.blocks:
                t = time.perf_counter()
                d = solve(p, method="dp")
                dp = f"{d.cost / exact.cost:6.4f}", f"{time.perf_counter() - t:7.2f}"
            if args.blocks:
                from costmodels.blocks import chosen
                struct_name = f"{struct}+{len(chosen(p, exact.choice, blocks))}/{nblocks}b"
            else:
                struct_name = struct
            print(f"{struct_name:10s} {len(p.nodes):5d} {len(p.edges):5d} "
                  f"{sum(len(x.choices) for x in p.nodes):7d} | {exact.cost:10.4f} "
                  f"{'optimal' if exact.optimal else 'feasible':8s} {exact.seconds:7.2f} "
                  f"{exact.gap:8.2%} | {pb[0]:>8s} {pb[1]:>7s} {pb[2]:10s} | {dp[0]:>6s} {dp[1]:>7s} "
                  f"| {base.cost:10.4f} {base.cost / exact.cost:10.4f}", flush=True)


if __name__ == "__main__":
    main()
