"""Per-layer table for MobileNetV2's depthwise convs (224 input, 3x3 pad 1, bias + ReLU6 fused):
every ``depthwise`` candidate timed, the best NCHW and the best channel-blocked one reported
with GB/s (input + output + weights + bias bytes over the time), next to onnxruntime running a
single-node Conv(group=C) + Clip model.

Usage: python bench/layers_dw.py [--threads 2] [--rounds 7] [--layers 0,3,9] [--regnet]

With ``--regnet``: RegNetX-400MF's grouped 3x3 convs (group width 16, bias + ReLU) instead, the
``direct`` candidates as the NCHW ones and ``nchwc`` as the blocked ones.

TVM: ``time_evaluator`` with ``number`` chosen so one repeat takes >= 1 ms, 5 repeats per round,
rounds interleaved over the candidates; the median over all repeats. onnxruntime
(intra_op_num_threads=threads, all graph optimisations): it runs the conv as an NCHWc kernel
with the Clip fused, between ReorderInput/ReorderOutput nodes that a network keeps out of its
convs, so the peer number is that node's own time from onnxruntime's profiler: the median of
the blocks' medians, and the best block's median; the whole session.run (reorders and call
overhead included) is reported as well.
TVM and onnxruntime are timed in alternating blocks with a pause between them (each runtime's
idle worker threads spin for a while after a call and would steal the cores from the other:
with a 50 ms pause, onnxruntime's times doubled), 50 warm-up runs at the start of each
onnxruntime block. The CPU time other processes took during the run is printed:
two cores are easily shared, and then every number is too slow.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# (channels, input size, stride) of MobileNetV2-1.0 at 224x224
LAYERS = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2),
          (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1)]
# (channels, input size, stride) of RegNetX-400MF's grouped 3x3 convs (group width 16) at 224x224
REGNET = [(32, 112, 2), (64, 56, 2), (64, 28, 1), (160, 28, 2), (160, 14, 1), (400, 14, 2), (400, 7, 1)]


def spec_of(c, hw, s, groups=None):
    """MobileNetV2's depthwise conv + bias + ReLU6 (``groups=None``), or a grouped one + bias + ReLU."""
    from graphselect.graph.layers import ConvSpec
    if groups is None:
        return ConvSpec(1, c, hw, hw, c, (3, 3), (s, s), (1, 1, 1, 1), groups=c, bias=True, clip_lo=0.0, clip_hi=6.0)
    return ConvSpec(1, c, hw, hw, c, (3, 3), (s, s), (1, 1, 1, 1), groups=groups, bias=True, clip_lo=0.0)


def _busy():
    """(CPU seconds all processes used, CPU seconds this process used, wall seconds)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    t = os.times()
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK"), t.user + t.system, time.time()


def tvm_timers(spec, target, rng):
    import tvm
    from graphselect import candidates
    from graphselect.candidates import base
    from graphselect.graph import layouts
    x = rng.standard_normal(spec.in_shape).astype("float32")
    w = rng.standard_normal((spec.out_channels, spec.in_channels // spec.groups) + spec.kernel).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32")
    ref = base.reference(spec, x, w, b, None)
    dev = tvm.cpu()
    out = {}
    for cand in candidates.propose(spec, ["depthwise", "direct", "nchwc"]):
        fam = candidates.family(cand)
        t0 = time.time()
        f = fam.build(cand, spec, target, "main")
        ex = tvm.compile(tvm.IRModule({"main": f}), target=target)
        build_s = time.time() - t0
        args = [tvm.runtime.tensor(a, dev) for a in [layouts.pack(x, cand.in_layout)] + fam.pack(cand, spec, w, b)]
        y = tvm.runtime.tensor(np.zeros(layouts.shape_in(spec.out_shape, cand.out_layout), "float32"), dev)
        ex["main"](*args, y)
        err = float(np.abs(layouts.unpack(y.numpy(), cand.out_layout) - ref).max() / np.abs(ref).max())
        assert err <= base.TOLERANCE, (cand.key, err)
        probe = ex.mod.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=20)(*args, y).mean
        number = max(1, int(np.ceil(1e-3 / probe)))
        fe = ex.mod.time_evaluator("main", dev, number=number, repeat=5)
        out[cand] = (lambda fe=fe, args=args, y=y: list(fe(*args, y).results), build_s, ex, args, y)
    return out


def ort_model(spec, rng):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    c, (kh, kw) = spec.in_channels, spec.kernel
    inits = [numpy_helper.from_array(rng.standard_normal((spec.out_channels, c // spec.groups, kh, kw))
                                     .astype("float32"), "W"),
             numpy_helper.from_array(rng.standard_normal(spec.out_channels).astype("float32"), "B"),
             numpy_helper.from_array(np.array(spec.clip_lo, "float32"), "lo")]
    if spec.clip_hi is not None:
        inits.append(numpy_helper.from_array(np.array(spec.clip_hi, "float32"), "hi"))
    pt, pl, pb, pr = spec.padding
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], group=spec.groups, kernel_shape=[kh, kw],
                              pads=[pt, pl, pb, pr], strides=list(spec.stride)),
             helper.make_node("Clip", ["c", "lo"] + (["hi"] if spec.clip_hi is not None else []), ["y"])]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(spec.in_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(spec.out_shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


class OrtPeer:
    """One profiled onnxruntime session for a layer; ``block(runs, warm)`` times a block of runs."""

    def __init__(self, spec, threads, rng):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(os.environ.get("TMPDIR", "/tmp")) / "layers_dw_ort")
        self.sess = ort.InferenceSession(ort_model(spec, rng), so, providers=["CPUExecutionProvider"])
        self.x = {"x": rng.standard_normal(spec.in_shape).astype("float32")}
        self.block_of = []   # per run in order: its block's index, None for warm-up runs
        self.wall = []       # per block: session.run seconds of its timed runs

    def block(self, runs, warm):
        for _ in range(warm):
            self.sess.run(None, self.x)
            self.block_of.append(None)
        wall = []
        for _ in range(runs):
            t = time.perf_counter()
            self.sess.run(None, self.x)
            wall.append(time.perf_counter() - t)
            self.block_of.append(len(self.wall))
        self.wall.append(wall)

    def finish(self):
        """Per block: (conv node median µs, session.run median µs); and the op types seen."""
        prof = self.sess.end_profiling()
        with open(prof) as f:
            events = json.load(f)
        os.remove(prof)
        conv, ops = [], set()
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                op = e["args"].get("op_name", "")
                ops.add(op)
                if op in ("Conv", "FusedConv"):
                    conv.append(e["dur"])
        assert len(conv) == len(self.block_of), (len(conv), len(self.block_of))
        blocks = [(float(np.median([d for d, b in zip(conv, self.block_of) if b == i])),
                   float(np.median(w)) * 1e6) for i, w in enumerate(self.wall)]
        return blocks, sorted(ops)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ort-runs", type=int, default=500)
    ap.add_argument("--layers", default=None, help="comma-separated indices into the layer list")
    ap.add_argument("--regnet", action="store_true",
                    help="RegNetX-400MF's grouped convs instead (direct = NCHW, nchwc = blocked)")
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)
    from graphselect.graph import layouts
    from graphselect.target import parse_target
    target = parse_target("llvm", threads=a.threads).tvm_target()
    table = REGNET if a.regnet else LAYERS
    sel = [table[int(i)] for i in a.layers.split(",")] if a.layers else table

    rows = []
    b0 = _busy()
    for c, hw, s in sel:
        spec = spec_of(c, hw, s, groups=c // 16 if a.regnet else None)
        rng = np.random.default_rng(0)
        timers = tvm_timers(spec, target, rng)
        res = {cand: [] for cand in timers}
        peer = OrtPeer(spec, a.threads, rng)
        for _ in range(a.rounds):
            for cand, (fn, *_rest) in timers.items():
                fn()                                  # warm-up block call
                res[cand].extend(fn())
            # TVM's pinned worker thread keeps spinning for tens of ms after a block: measured,
            # it took one core through a whole 50 ms-later onnxruntime block (2x its time)
            time.sleep(0.5)
            peer.block(a.ort_runs // a.rounds, warm=50)
            time.sleep(0.2)                           # and onnxruntime's workers
        blocks, names = peer.finish()
        ort_node = float(np.median([b[0] for b in blocks]))
        ort_node_best = min(b[0] for b in blocks)
        ort_run = float(np.median([b[1] for b in blocks]))
        nbytes = 4 * (spec.in_channels * spec.height * spec.width + spec.out_channels * spec.out_h * spec.out_w)
        cands = []
        for cand, ts in res.items():
            us = float(np.median(ts)) * 1e6
            cands.append({"key": cand.key, "layout": cand.in_layout, "us": us,
                          "gbs": (nbytes + cand.weight_bytes) / us / 1e3, "build_s": timers[cand][1]})
        cands.sort(key=lambda r: r["us"])
        best_nchw = min((r for r in cands if r["layout"] == layouts.NCHW), key=lambda r: r["us"])
        best_blk = min((r for r in cands if r["layout"] != layouts.NCHW), key=lambda r: r["us"])
        row = {"layer": spec.describe(), "stride": s, "candidates": cands, "nchw": best_nchw, "blocked": best_blk,
               "ort_node_us": ort_node, "ort_node_best_us": ort_node_best, "ort_run_us": ort_run,
               "ort_blocks_us": blocks,
               "ort_nodes": names}
        rows.append(row)
        print(f"{spec.describe():28s} " + "  ".join(f"{r['key']} {r['us']:.1f}" for r in cands)
              + "  | ort node blocks " + " ".join(f"{b[0]:.0f}" for b in blocks), flush=True)
    b1 = _busy()
    other = ((b1[0] - b0[0]) - (b1[1] - b0[1])) / (b1[2] - b0[2])

    what = "RegNetX-400MF grouped 3x3 (group width 16) + bias + ReLU" if a.regnet else \
        "MobileNetV2 depthwise 3x3 + bias + ReLU6"
    lines = [f"{what}, batch 1, {a.threads} threads; µs are medians "
             f"(other processes used {other:.2f} cores on average during the run)", "",
             "| layer | best NCHW µs | GB/s | best blocked µs | GB/s | blocked config | ORT conv node µs "
             "(best block) | blocked / ORT (/ best block) | ORT session.run µs |", "|" + "---|" * 9]
    tot = {"nchw": 0.0, "blocked": 0.0, "ort": 0.0, "ort_best": 0.0}
    for r in rows:
        n, b = r["nchw"], r["blocked"]
        tot["nchw"] += n["us"]
        tot["blocked"] += b["us"]
        tot["ort"] += r["ort_node_us"]
        tot["ort_best"] += r["ort_node_best_us"]
        lines.append(f"| {r['layer']} | {n['us']:.1f} | {n['gbs']:.0f} | {b['us']:.1f} | {b['gbs']:.0f} | "
                     f"{b['key']} | {r['ort_node_us']:.1f} ({r['ort_node_best_us']:.1f}) | "
                     f"{b['us'] / r['ort_node_us']:.2f} ({b['us'] / r['ort_node_best_us']:.2f}) | {r['ort_run_us']:.1f} |")
    lines.append(f"| **sum** | {tot['nchw']:.1f} | | {tot['blocked']:.1f} | | | {tot['ort']:.1f} ({tot['ort_best']:.1f}) | "
                 f"{tot['blocked'] / tot['ort']:.2f} ({tot['blocked'] / tot['ort_best']:.2f}) | |")
    md = "\n".join(lines) + "\n"
    print()
    print(md)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    name = "layers_grouped" if a.regnet else "layers_dw"
    (out / f"{name}-{stamp}.md").write_text(md)
    (out / f"{name}-{stamp}.json").write_text(json.dumps({"other_load_cores": other, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
