"""DeepSparse as a benchmark peer, run in DeepSparse's own environment (numpy < 2, onnx 1.14):
never imported by graphselect. Started by ``bench/peers/__init__.py:deepsparse_runner`` as

    PYTHON bench/peers/deepsparse_worker.py MODEL.onnx INPUTS.npz THREADS

it compiles the model (``deepsparse.Engine``, batch from the inputs, THREADS cores), prints one
JSON line ``{"ready": ..., "version": ..., "out": [first outputs' shapes]}``, then serves
requests on stdin, one JSON per line:

    {"block": N, "warmup": W, "warmup_s": S}  -> {"ms": [N per-call milliseconds]}
    {"outputs": "PATH.npz"}                   -> {"saved": PATH}   (the outputs on the inputs)
    {"quit": true}

Calls are timed here, in the worker (the parent's pipe round trip is not in them), with the same
warm-up rule as graphselect.measure.e2e.time_calls.
"""
import json
import sys
import time

import numpy as np


def main():
    model, inputs, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import deepsparse
    feed = [a for _, a in sorted(np.load(inputs).items())]
    eng = deepsparse.Engine(model=model, batch_size=feed[0].shape[0], num_cores=threads)
    out = eng.run(feed)
    print(json.dumps({"ready": True, "version": deepsparse.__version__,
                      "out": [list(o.shape) for o in out]}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if "outputs" in req:
            np.savez(req["outputs"], *eng.run(feed))
            print(json.dumps({"saved": req["outputs"]}), flush=True)
            continue
        t0, n = time.perf_counter(), 0
        while n < req.get("warmup", 1) or (time.perf_counter() - t0 < req.get("warmup_s", 0.0) and n < 200):
            eng.run(feed)
            n += 1
        ms = []
        for _ in range(req["block"]):
            t = time.perf_counter()
            eng.run(feed)
            ms.append((time.perf_counter() - t) * 1e3)
        print(json.dumps({"ms": ms}), flush=True)


if __name__ == "__main__":
    main()
