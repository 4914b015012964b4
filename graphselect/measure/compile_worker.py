"""A compiler process for :class:`graphselect.measure.builder.Builder`: reads one request per line
on stdin (a PrimFunc as TVM JSON in a file, the target, where to write the library, the C compiler
that links it, the kernel's symbol, where to keep its object file), compiles it
and answers one line on stdout. Started as ``python -m graphselect.measure.compile_worker``, so
it never imports the user's main module (as multiprocessing's spawn would) and never inherits
the parent's threads (as fork would)."""
from __future__ import annotations

import json
import sys

MARK = "@@graphselect "       # answer lines start with it: anything else on stdout is not ours


def main() -> int:
    import tvm
    from .builder import compile_executable, export_kept
    from .jobs import last_line
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            with open(req["func"]) as f:
                func = tvm.ir.load_json(f.read())
            ex = compile_executable(func, tvm.target.Target(req["target"]), req.get("symbol", "main"))
            # the object kept for network builds to link (measure.kernels), the library linked from it
            export_kept(ex, req["out"], req.get("obj"), req.get("cc"))
            answer = {"ok": req["out"]}
        except Exception as e:  # noqa: BLE001 - every failure goes back as a message
            answer = {"error": last_line(e)}
        sys.stdout.write(MARK + json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
