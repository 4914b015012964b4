"""Command line: ``graphselect optimize MODEL``, ``graphselect zoo list|build``."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from .errors import GraphSelectError
from .fsutil import probe_write


def _own(stream):
    """A stream of its own on ``stream``'s descriptor (a copy of it), so that progress still shows
    while a build silences the process's stderr (``stages.build.silence_stderr``); ``stream``
    itself when it has no descriptor."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    return os.fdopen(os.dup(fd), "w", buffering=1, encoding=getattr(stream, "encoding", None) or "utf-8")


class _Progress:
    """One updating line on a terminal; a line per stage change and every ~10% otherwise."""

    def __init__(self, stream=sys.stderr):
        self.stream = _own(stream)
        self.tty = self.stream.isatty()
        self.last_stage = None
        self.last_pct = -1
        self.t0 = time.perf_counter()

    def __call__(self, stage: str, done: int, total: int, msg: str) -> None:
        el = time.perf_counter() - self.t0
        pct = int(100 * done / total) if total else 100
        line = f"[{el:6.1f}s] {stage:9s} {done}/{total} {msg}"
        if self.tty:
            self.stream.write("\r\033[K" + line[:150])
            self.stream.flush()
        elif stage != self.last_stage or pct // 10 != self.last_pct // 10 or done == total:
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last_stage, self.last_pct = stage, pct

    def close(self):
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _parse_shape(texts):
    """``--input-shape`` values (repeatable): NAME:1,3,224,224 each, or one bare 1,3,224,224."""
    if not texts:
        return None
    named, bare = {}, []
    for text in texts:
        name, _, dims = text.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise GraphSelectError(f"--input-shape {text!r}: expected NAME:1,3,224,224 or 1,3,224,224") from None
        if any(d <= 0 for d in shape):
            raise GraphSelectError(f"--input-shape {text!r}: every dimension must be a positive integer")
        if name:
            if name in named:
                raise GraphSelectError(f"--input-shape gives input {name!r} twice")
            named[name] = shape
        else:
            bare.append(shape)
    if bare and (named or len(bare) > 1):
        raise GraphSelectError("--input-shape without a NAME: only once, for a one-input model; "
                               "name each input otherwise (NAME:1,3,224,224)")
    return bare[0] if bare else named


def _resolve_model(arg: str, sparsity: float = 0.0, qdq: bool = False):
    """A path to an .onnx file, or the name of a zoo model (optionally pruned, or quantized to QDQ)."""
    p = Path(arg)
    if p.exists():
        if sparsity:
            raise GraphSelectError("--sparsity prunes zoo models only; prune your own model before exporting it")
        if qdq:
            raise GraphSelectError("--qdq quantizes zoo models only; quantize your own model (onnxruntime's "
                                   "quantize_static, QDQ format) before passing it")
        return str(p), p.stem
    import models
    if arg in models.ZOO:
        if not 0.0 <= sparsity < 1.0:
            raise GraphSelectError(f"--sparsity must be in [0, 1), got {sparsity}")
        m = models.build(arg, sparsity=sparsity)
        if qdq:
            m = models.quantize_qdq(m)
        return m, arg + (f"-sp{round(sparsity * 100)}" if sparsity else "") + ("-qdq" if qdq else "")
    if p.suffix.lower() == ".onnx" or os.sep in arg:
        raise GraphSelectError(f"model file not found: {arg}")
    raise GraphSelectError(f"{arg!r} is neither a file nor a zoo model; zoo models: {', '.join(models.ZOO)}")


def _parse_budget(text: str):
    if text in ("auto", "off"):
        return text
    try:
        return int(float(text))
    except ValueError:
        raise GraphSelectError(f"--cache-budget {text!r}: expected auto, off or a number of bytes") from None


def cmd_optimize(a) -> int:
    from .api import optimize
    from .report.terminal import summary_table
    model, name = _resolve_model(a.model, a.sparsity, a.qdq)
    outdir = Path(a.output or os.path.join("graphselect-out", name))
    _check_writable_folder(outdir)          # before minutes of measurement, not after
    cache = None if a.no_cache else (a.cache or True)
    prog = _Progress()
    try:
        res = optimize(model, target=a.target, threads=a.threads, input_shape=_parse_shape(a.input_shape),
                       solver=a.solver, families=a.families.split(",") if a.families else None, cache=cache,
                       time_limit=a.time_limit, verify=not a.no_verify, benchmark_runs=a.runs,
                       progress=prog, name=name, cache_budget=_parse_budget(a.cache_budget),
                       rpc_tracker=a.rpc_tracker, rpc_key=a.rpc_key, rpc_sessions=a.rpc_sessions,
                       rpc_timeout=a.rpc_timeout, rpc_load_timeout=a.rpc_load_timeout,
                       cross_cc=a.cross_cc, precision=a.precision, tolerance=a.tolerance, time_all=a.time_all)
    finally:
        prog.close()
    paths = res.export(outdir)
    print(summary_table(res.report))
    print()
    for k, p in paths.items():
        print(f"{k:12s} {p}")
    return 0


def _check_writable_folder(outdir: Path) -> None:
    """Raise GraphSelectError unless files can be created in ``outdir`` (which is left as found)."""
    made = []
    try:
        if outdir.exists() and not outdir.is_dir():
            raise OSError(f"{outdir} exists and is not a folder")
        missing = []
        d = outdir
        while not d.exists():
            missing.append(d)
            d = d.parent
        for m in reversed(missing):
            m.mkdir()
            made.append(m)
        probe_write(outdir)
    except OSError as e:
        raise GraphSelectError(f"cannot write the output folder {outdir}: {e.strerror or e}; "
                               f"pass -o with a writable folder") from None
    finally:
        for m in reversed(made):
            try:
                m.rmdir()
            except OSError:
                pass


def _store_path(a) -> Path:
    from .measure.store import default_path
    return Path(a.cache) if a.cache else default_path()


def _this_machine(threads):
    """The record context optimize would use here with these threads."""
    import tvm
    from .measure.store import Context
    from .target import cpu_model, parse_target, runtime_tag
    spec = parse_target("llvm", threads=threads)
    return Context(target=spec.key, cpu=cpu_model(), threads=spec.threads, tvm=runtime_tag(tvm.__version__))


def cmd_records(a) -> int:
    from .measure.store import RecordStore
    path = _store_path(a)
    if a.records_cmd != "retime" and not path.exists():
        raise GraphSelectError(f"no record store at {path}; run `graphselect optimize` first or pass --cache")
    if a.records_cmd == "retime":
        return _retime(a, path)
    store = RecordStore(path)
    try:
        ctx = None if a.all else _this_machine(a.threads)
        if a.records_cmd == "list":
            rows = store.records(ctx, match=a.match, flagged=a.flagged)
            for r in rows[: a.limit or None]:
                cold = "-" if r["cold_ms"] is None else f"{r['cold_ms']:.4f}"
                warm = "-" if r["warm_ms"] is None else f"{r['warm_ms']:.4f}"
                note = r["error"] or r["flag"] or ""
                print(f"{r['workload'][:64]:64s}  {r['candidate'][:44]:44s}  {cold:>9s} {warm:>9s}  {note[:60]}")
            nets, _ = store.networks(ctx) if ctx is not None else ([], [])
            print(f"{len(rows)} record(s)" + (f", {len(nets)} built network(s) for the calibration" if ctx else "")
                  + f" in {path}", file=sys.stderr)
            return 0
        if a.records_cmd == "drop":
            if not (a.match or a.flagged or a.calibration or a.everything):
                raise GraphSelectError("say what to drop: --match TEXT, --flagged, --calibration or --everything")
            n = store.delete(ctx, match=a.match, flagged=a.flagged) if (a.match or a.flagged or a.everything) else 0
            k = store.forget_networks(ctx) if (a.calibration or a.everything) else 0
            d = store.forget_pruned(ctx) if a.everything else 0
            print(f"dropped {n} record(s) and {k} built network(s)" + (f" and {d} workload(s)' pruning" if d else "")
                  + f" from {path}")
            return 0
    finally:
        store.close()
    return 2


def _retime(a, path) -> int:
    from .stages import measure, settings
    model, _ = _resolve_model(a.model)
    s = settings.settings(target=a.target, threads=a.threads, cache=path, progress=_Progress(),
                          rpc_tracker=a.rpc_tracker, rpc_key=a.rpc_key, rpc_sessions=a.rpc_sessions,
                          rpc_timeout=a.rpc_timeout, rpc_load_timeout=a.rpc_load_timeout, cross_cc=a.cross_cc)
    with settings.open_store(s) as store:
        rows = measure.retime(model, s, store, match=a.match, flagged_only=a.flagged,
                              input_shape=_parse_shape(a.input_shape))
    fmt = lambda m: "-" if m is None or not m.ok else f"{m.cold_ms:.4f}/{m.warm_ms:.4f}"  # noqa: E731
    for wl, cand, old, new in rows:
        print(f"{wl[:64]:64s}  {cand[:44]:44s}  {fmt(old):>17s} -> {fmt(new):>17s}"
              + (f"  {new.flag}" if new is not None and new.flag else ""))
    print(f"re-timed {len(rows)} record(s) (cold/warm ms, before -> after)", file=sys.stderr)
    return 0


def _device_options(p, target: bool = True) -> None:
    """Where kernels are measured: this machine, or the devices behind a TVM RPC tracker."""
    if target:
        p.add_argument("--target", default="llvm", help="the target the records are filed under (as for optimize)")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT",
                   help="measure, verify and time on the devices registered with this TVM RPC tracker")
    p.add_argument("--rpc-key", metavar="KEY", help="the key the device servers registered under")
    p.add_argument("--rpc-sessions", type=int, default=1, metavar="N",
                   help="devices to measure on at once (default 1)")
    p.add_argument("--rpc-timeout", type=float, default=600.0, metavar="S",
                   help="the device's server ends a session after this many seconds (default 600)")
    p.add_argument("--rpc-load-timeout", type=float, default=30.0, metavar="S",
                   help="stop with an error when a device has not loaded a network after this many seconds "
                        "(default 30)")
    p.add_argument("--cross-cc", metavar="CC",
                   help="C compiler that links libraries for the target (default: TRIPLE-gcc for another arch)")


def cmd_zoo(a) -> int:
    import models
    if a.zoo_cmd == "list":
        for name, desc in models.list_models():
            print(f"{name:16s} {desc}")
        return 0
    if a.name not in models.ZOO:
        raise GraphSelectError(f"unknown zoo model {a.name!r}; known: {', '.join(models.ZOO)}")
    out = Path(a.output or f"{a.name}.onnx")
    tmp = out.with_name("." + out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not 0.0 <= a.sparsity < 1.0:
        raise GraphSelectError(f"--sparsity must be in [0, 1), got {a.sparsity}")
    models.save(a.name, tmp, batch=a.batch, image_size=a.image_size, seed=a.seed, sparsity=a.sparsity)
    if a.qdq:
        import onnx
        onnx.save(models.quantize_qdq(onnx.load(tmp), seed=a.seed), tmp)
    os.replace(tmp, out)
    print(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="graphselect", description=__doc__)
    ap.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("optimize", help="measure, select and build an ONNX CNN for this CPU")
    o.add_argument("model", help="path to an .onnx file, or a zoo model name (see `graphselect zoo list`)")
    o.add_argument("--target", default="llvm",
                   help="llvm (this CPU, default; with --rpc-tracker the device's), or 'llvm -mcpu=NAME "
                        "[-mtriple=TRIPLE] [-mattr=...]' (another CPU needs --rpc-tracker)")
    _device_options(o, target=False)
    o.add_argument("--sparsity", type=float, default=0.0, help="prune a zoo model's convs to this sparsity first")
    o.add_argument("--qdq", action="store_true",
                   help="quantize a zoo model to int8 first (onnxruntime's static quantizer, QDQ format)")
    o.add_argument("-o", "--output", help="output folder (default graphselect-out/MODEL)")
    o.add_argument("--threads", type=int, default=None, help="threads (default: all CPUs available)")
    o.add_argument("--input-shape", action="append",
                   help="fix a dynamic input shape: NAME:1,3,224,224 (repeat for several inputs)")
    o.add_argument("--solver", default="cp-sat", choices=["cp-sat", "greedy", "dp", "brute", "pbqp"],
                   help="cp-sat (default, exact), greedy (warm per-layer fastest), dp (chains/trees), brute")
    o.add_argument("--cache-budget", default="auto",
                   help="bytes of cache the weights may stay resident in (auto: from the CPU; off: always cold)")
    o.add_argument("--families", help="comma-separated candidate families (default: all)")
    o.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"],
                   help="fp32 (default, exact); bf16: bf16 kernels (fp32 accumulation) wherever they are faster, "
                        "on CPUs with AVX512-BF16; auto: per layer, keeping the network within --tolerance")
    o.add_argument("--tolerance", type=float, default=None,
                   help="largest relative output error against fp32 a lower-precision network may have "
                        "(max |y - y_fp32| / max |y_fp32|; default 2e-2)")
    o.add_argument("--cache", help="record store path (default: the user's cache folder)")
    o.add_argument("--no-cache", action="store_true", help="keep measurements in memory only")
    o.add_argument("--time-limit", type=float, default=30.0, help="solver time limit in seconds")
    o.add_argument("--runs", type=int, default=30, help="end-to-end timing runs (0 to skip)")
    o.add_argument("--no-verify", action="store_true", help="skip the comparison with onnxruntime")
    o.add_argument("--time-all", action="store_true",
                   help="time every candidate (default: only those that can still win, as predicted from "
                        "one timed member of each variant or from the conv's twin with another epilogue; layout "
                        "ops and transforms between timed channel counts priced from those)")
    o.set_defaults(func=cmd_optimize)
    r = sub.add_parser("records", help="list, re-time or drop measurement records")
    rs = r.add_subparsers(dest="records_cmd", required=True)
    for name, text in (("list", "list records (of this machine unless --all)"),
                       ("drop", "drop records or calibration data"),
                       ("retime", "re-time the records a model uses, now")):
        p = rs.add_parser(name, help=text)
        p.add_argument("--cache", help="record store path (default: the user's cache folder)")
        p.add_argument("--match", help="only records whose workload or candidate contains this text")
        p.add_argument("--flagged", action="store_true",
                       help="only records flagged when taken (timed under load, warm above cold)")
        p.add_argument("--threads", type=int, default=None, help="the thread count the records are filed under")
        if name != "retime":
            p.add_argument("--all", action="store_true", help="every machine, thread count and TVM, not only this")
        if name == "list":
            p.add_argument("--limit", type=int, default=0, help="print at most this many (newest first)")
        if name == "drop":
            p.add_argument("--calibration", action="store_true",
                           help="drop the built-network observations the calibration is fitted on")
            p.add_argument("--everything", action="store_true", help="drop every record and observation, and what was pruned")
        if name == "retime":
            p.add_argument("model", help="an .onnx file or a zoo model name")
            _device_options(p)
            p.add_argument("--input-shape", action="append",
                           help="fix a dynamic input shape: NAME:1,3,224,224 (repeat for several inputs)")
    r.set_defaults(func=cmd_records)
    z = sub.add_parser("zoo", help="built-in models")
    zs = z.add_subparsers(dest="zoo_cmd", required=True)
    zs.add_parser("list", help="list the models")
    zb = zs.add_parser("build", help="write a model as ONNX")
    zb.add_argument("name")
    zb.add_argument("-o", "--output", help="file to write (default NAME.onnx)")
    zb.add_argument("--batch", type=int, default=1)
    zb.add_argument("--image-size", type=int, default=None)
    zb.add_argument("--seed", type=int, default=0)
    zb.add_argument("--sparsity", type=float, default=0.0, help="magnitude-prune every conv to this sparsity")
    zb.add_argument("--qdq", action="store_true",
                    help="quantize to int8 (onnxruntime's static quantizer, QDQ format, calibrated on random inputs)")
    z.set_defaults(func=cmd_zoo)
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(a.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return a.func(a)
    except KeyboardInterrupt:
        print("\ninterrupted: measurements taken so far are kept in the record store (a rerun reuses them); "
              "nothing was written to the output folder", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every failure: one line, the traceback with -v
        if a.verbose:
            logging.getLogger("graphselect").exception("traceback")
        text = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, GraphSelectError):
            print(f"error: {text}", file=sys.stderr)
            return 2
        if isinstance(e, OSError):          # a full disk, a folder that vanished, permissions
            print(f"error: {text}; check the paths given and the free disk space", file=sys.stderr)
            return 2
        print(f"internal error: {type(e).__name__}: {text} (this is a graphselect bug; rerun with -v "
              f"for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
