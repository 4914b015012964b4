"""The host's state over time: the thread pool's hand-off per kernel call
(``graphselect.measure.peak.HandoffProbe``) read every few seconds beside the networks it slows,
graphselect's and onnxruntime's, and the compute-bound load probe's reference kernel.

On a 2-vCPU Zen 5 VM the hand-off read 1.7-2.0 us for hours and 0.55 us for others with the same
FMA peak, and ShuffleNetV2's network ran 2.0 ms in one state and 1.0 ms in the other. This bench
says how long the states last, whether the probe tells them apart, and whether onnxruntime moves
with them.

  python bench/handoff.py [MODEL ...] [--minutes 15] [--every 5]      (default: shufflenet_v2 resnet18)

Networks as ``graphselect.optimize`` builds them from the record store at hand (no closed loop,
no check: ``benchmark_runs=0``); each sample: a hand-off reading, then per network a block of
graphselect calls and a block of onnxruntime calls (a pause before each runtime's block, as
``measure.e2e.compare`` does), then the reference kernel. Results under bench/results/handoff-STAMP.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["shufflenet_v2", "resnet18"])
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--block", type=int, default=10)
    a = ap.parse_args()
    from graphselect.target import default_threads
    os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))
    import tvm
    from tvm import relax

    import graphselect
    import models
    from graphselect.measure.affinity import pinned
    from graphselect.measure.e2e import ort_session, time_calls
    from graphselect.measure.local import LoadProbe
    from graphselect.measure.peak import HandoffProbe
    from graphselect.stages.settings import settings
    from results_io import cpu_line, save

    s = settings()
    threads = s.spec.threads
    handoff = HandoffProbe(s.target, threads)
    probe = LoadProbe(s.target)
    nets = {}
    for name in a.models:
        m = models.build(name)
        r = graphselect.optimize(m, benchmark_runs=0)
        f = relax.VirtualMachine(r.build(), tvm.cpu())["main"]
        xn = np.random.default_rng(0).standard_normal(r.input_shape).astype("float32")
        x = tvm.runtime.tensor(xn)
        sess = ort_session(m.SerializeToString(), threads)
        feed = {sess.get_inputs()[0].name: xn}
        nets[name] = ((lambda f, x: lambda: f(x))(f, x), (lambda sess, feed: lambda: sess.run(None, feed))(sess, feed))

    def block(fn):
        """Median ms of a block of calls after one warm-up, the calling thread pinned as
        ``measure.e2e.compare`` pins it for both runtimes."""
        return float(np.median(time_calls(fn, a.block, warmup=1)))

    rows = []
    t0 = time.time()
    while time.time() - t0 < a.minutes * 60:
        start = time.time()
        row = {"t_s": round(start - t0, 1), "handoff_us": handoff()}
        for name, (gs, ort) in nets.items():
            row[f"{name} graphselect ms"] = block(gs)
            time.sleep(0.6)                 # TVM's spinning workers outlast a call by ~0.55 s
            row[f"{name} onnxruntime ms"] = block(ort)
            time.sleep(0.3)
        with pinned():
            row["reference kernel ms"] = probe.time()
        row["handoff_us after"] = handoff()
        rows.append(row)
        print(" ".join(f"{k}={v:.3f}" for k, v in row.items()), flush=True)
        time.sleep(max(0.0, a.every - (time.time() - start)))

    keys = [k for k in rows[0] if k != "t_s"]
    hand = np.array([(r["handoff_us"] + r["handoff_us after"]) / 2 for r in rows])
    cut = float(np.median(hand))
    lines = [f"CPU: {cpu_line()}", "",
             f"`python bench/handoff.py {' '.join(a.models)} --minutes {a.minutes:g} --every {a.every:g}`: "
             f"{len(rows)} samples over {rows[-1]['t_s'] / 60:.1f} min, {threads} threads.", "",
             "| figure | min | median | max | correlation of its log with the hand-off's |", "|---|---|---|---|---|"]
    lh = np.log(hand)
    for k in keys:
        v = np.array([r[k] for r in rows])
        corr = float(np.corrcoef(np.log(v), lh)[0, 1]) if np.std(v) > 0 and np.std(lh) > 0 else float("nan")
        lines.append(f"| {k} | {v.min():.3f} | {np.median(v):.3f} | {v.max():.3f} | {corr:+.2f} |")
    low = hand <= 1.0
    lines += ["", f"Samples with the hand-off at or below 1.0 us: {int(low.sum())} of {len(rows)}; the state changed "
                  f"{int(np.sum(low[1:] != low[:-1]))} times (median hand-off {cut:.2f} us)."]
    if low.any() and (~low).any():
        lines += ["", "| figure | median, hand-off <= 1 us | median, > 1 us | ratio |", "|---|---|---|---|"]
        for k in keys:
            v = np.array([r[k] for r in rows])
            lo, hi = float(np.median(v[low])), float(np.median(v[~low]))
            lines.append(f"| {k} | {lo:.3f} | {hi:.3f} | {hi / lo:.2f} |")
    save("handoff", "\n".join(lines) + "\n", rows)


if __name__ == "__main__":
    main()
