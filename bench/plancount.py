"""How many unique jobs a model's measurement plan has, by kind (what a fresh run compiles and
times before pruning).

  python bench/plancount.py MODEL [MODEL...]

MODEL: a zoo model name. Prints the layer count, the unique jobs per kind (conv jobs by family) and
how many of the layout ops and transforms a fresh store prices from their timed neighbours in
channel count instead of timing them (``graphselect.measure.sizes``). No timing: safe to run
beside anything.
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def count(name: str) -> tuple[int, collections.Counter, int]:
    import models
    from graphselect.measure import plan as plan_mod
    from graphselect.stages.load import load
    from graphselect.stages.settings import settings
    s = settings(cache=False)
    imp = load(models.build(name), s)
    plan = plan_mod.make_plan(imp.lg, s.target, s.families, s.precisions)
    kinds: collections.Counter = collections.Counter()
    for w, c in dict.fromkeys(j.key for j in plan.jobs):
        k = w.split()[0]
        kinds["conv:" + c.split("(")[0] if k == "conv2d" else k] += 1
    from graphselect.stages.measure import _to_predict
    return len(imp.lg.layers), kinds, len(_to_predict(plan.jobs, set(), {}))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip())
        return 2
    for name in argv:
        layers, kinds, priced = count(name)
        print(f"{name}: {layers} layers, {sum(kinds.values())} unique jobs ({priced} priced from their sizes "
              f"on a fresh store): " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
