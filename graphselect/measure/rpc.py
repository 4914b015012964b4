"""The RPC runner: times built kernels on devices registered with a TVM RPC tracker under a key.

A user starts a tracker (``python -m tvm.exec.rpc_tracker``) and, on each device, a server
(``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY``). The runner holds up to
``sessions`` sessions at once, one thread each; every thread takes the next artifact from one
queue, uploads its libraries, runs each kernel once (checking the output against the host's
reference), then times it with the local protocol (``jobs.sample``: cold with the cache flushed
before each run, then warm) for ``timing.rounds`` rounds, and hands the Measurement back, so the
caller stores it as it arrives. A device is taken as dedicated: there is no load probe.

A session that dies (the server stopped, the network dropped, a kernel crashed the server) gives
its artifact back to the queue for another session and ends its thread; when every thread has
ended with artifacts left, fresh sessions are asked for (as many as the tracker has servers under
the key). An artifact whose session died twice becomes a failed measurement, never a dead run.

The built network runs on the device too (:class:`RemoteNetwork`): a Relax VM over RPC is driven
with ``set_input``/``invoke_stateful``/``get_outputs`` (calling ``vm["main"]`` with remote
tensors fails, apache/tvm#18108) and timed by the device's own ``time_evaluator``.
"""
from __future__ import annotations

import gc
import itertools
import logging
import os
import queue
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..errors import GraphSelectError
from .jobs import Artifact, TimingConfig, last_line, load_and_check, sample, warm_flag
from .store import Measurement

log = logging.getLogger(__name__)

DEATHS = 2                 # an artifact whose session died this many times is a failed measurement
# A network's upload and load take seconds even under qemu; a session that has not loaded it by
# then is hung (one that never answered held the aarch64 test for the server's whole 600 s
# session timeout), and the run stops with an error naming the device instead of waiting.
LOAD_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RpcConfig:
    host: str
    port: int
    key: str
    sessions: int = 1
    session_timeout: float = 600.0   # the server ends a session after this long (a hung kernel; --rpc-timeout)
    priority: int = 1
    load_timeout: float = LOAD_TIMEOUT_S   # a network's upload and load on the device, at most (--rpc-load-timeout)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_tracker(text: str, key: str | None, sessions: int = 1, session_timeout: float = 600.0,
                  load_timeout: float = LOAD_TIMEOUT_S) -> RpcConfig:
    """``HOST:PORT`` and a key as an :class:`RpcConfig` (GraphSelectError when malformed)."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GraphSelectError(f"--rpc-tracker must be HOST:PORT, got {text!r}")
    if not key:
        raise GraphSelectError("--rpc-tracker needs --rpc-key KEY: the key the device's servers registered with")
    if sessions < 1:
        raise GraphSelectError(f"--rpc-sessions must be >= 1, got {sessions}")
    for name, v in (("--rpc-timeout", session_timeout), ("--rpc-load-timeout", load_timeout)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise GraphSelectError(f"{name} must be a positive number of seconds, got {v!r}")
    return RpcConfig(host, int(port), key, int(sessions), float(session_timeout), load_timeout=float(load_timeout))


@dataclass(frozen=True)
class Device:
    """What a device's server reports about itself (the record key of its measurements)."""
    cpu: str          # LLVM's name of its CPU
    triple: str
    threads: int      # its TVM thread pool

    @property
    def name(self) -> str:
        return f"{self.cpu} ({self.triple}, rpc)"


def tracker(cfg: RpcConfig):
    """A tracker session; GraphSelectError at once when nothing listens there (TVM's own connect
    retries for a minute)."""
    import socket
    from tvm import rpc
    try:
        socket.create_connection((cfg.host, cfg.port), timeout=5).close()
        return rpc.connect_tracker(cfg.host, cfg.port)
    except Exception as e:  # noqa: BLE001 - OSError, or TVM's RuntimeError after its retries
        raise GraphSelectError(f"cannot reach the RPC tracker at {cfg.address}: {last_line(e)}; start one with "
                               f"python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port {cfg.port}") from None


def servers(cfg: RpcConfig) -> int:
    """How many servers are registered under the key right now."""
    info = tracker(cfg).summary()
    return sum(1 for s in info.get("server_info", []) if str(s.get("key", "")).split(":", 1)[-1] == cfg.key)


def open_session(cfg: RpcConfig):
    try:
        return tracker(cfg).request(cfg.key, priority=cfg.priority, session_timeout=cfg.session_timeout,
                                    max_retry=2)
    except GraphSelectError:
        raise
    except Exception as e:  # noqa: BLE001
        raise GraphSelectError(f"the tracker at {cfg.address} gave no session for key {cfg.key!r}: "
                               f"{last_line(e)}") from None


def device(cfg: RpcConfig) -> Device:
    """Ask one of the key's servers what it is; GraphSelectError when none is registered."""
    if servers(cfg) == 0:
        raise GraphSelectError(f"no RPC server is registered under key {cfg.key!r} at the tracker {cfg.address}; "
                               f"start one on the device: python -m tvm.exec.rpc_server --tracker {cfg.address} "
                               f"--key {cfg.key}")
    sess = open_session(cfg)
    try:
        return Device(str(sess.get_function("target.llvm_get_system_cpu")()),
                      str(sess.get_function("target.llvm_get_system_triple")()),
                      int(sess.get_function("runtime.NumThreads")()))
    finally:
        del sess
        release_sessions()


def release_sessions() -> None:
    """Free the RPC sessions no one holds any more, now. A device's server serves one session at
    a time, and a session the garbage collector has not reached yet (a finished check's networks
    sit in reference cycles) keeps it busy: in the aarch64 tests the next run's request waited
    for the server's 600 s session timeout, until a collection in the test process freed it."""
    gc.collect()


def alive(sess) -> bool:
    try:
        sess.get_function("runtime.NumThreads")()
        return True
    except Exception:  # noqa: BLE001
        return False


class SessionDied(Exception):
    """The session's server went away while an artifact ran on it."""


class RpcRunner:
    """Times artifacts (library files) on the devices of ``cfg`` (see the module's docstring)."""
    files = True               # takes library files from the builder
    remote = True
    probe = None

    def __init__(self, cfg: RpcConfig):
        self.cfg = cfg
        self.prefix = uuid.uuid4().hex[:8]
        self._names = itertools.count()   # every upload its own file: dlopen caches a library by path

    def run(self, artifacts: list[Artifact], timing: TimingConfig) -> Iterator[tuple[Artifact, object]]:
        """(artifact, Measurement or the exception that stopped it), as each is done."""
        todo: queue.Queue = queue.Queue()
        for a in artifacts:
            todo.put((a, 0))
        results: queue.Queue = queue.Queue()
        left = len(artifacts)
        idle = 0                  # rounds of sessions that finished nothing
        while left:
            n = min(self.cfg.sessions, servers(self.cfg), left)
            if n == 0 or idle >= 2:
                while left:       # no server left under the key: what remains fails, the run goes on
                    a, _ = todo.get()
                    left -= 1
                    yield a, RuntimeError(f"no RPC server left under key {self.cfg.key!r}")
                return
            before = left
            threads = [threading.Thread(target=self._serve, args=(todo, results, timing, i), daemon=True)
                       for i in range(n)]
            for t in threads:
                t.start()
            while left and any(t.is_alive() for t in threads) or not results.empty():
                try:
                    item = results.get(timeout=0.5)
                except queue.Empty:
                    continue
                left -= 1
                yield item
            for t in threads:
                t.join()
            idle = idle + 1 if left == before else 0

    def _serve(self, todo: queue.Queue, results: queue.Queue, timing: TimingConfig, index: int) -> None:
        try:
            sess = open_session(self.cfg)
        except GraphSelectError as e:
            log.warning("%s", e)
            return
        try:
            self._serve_with(sess, todo, results, timing, index)
        finally:
            del sess
            release_sessions()

    def _serve_with(self, sess, todo: queue.Queue, results: queue.Queue, timing: TimingConfig, index: int) -> None:
        rng = np.random.default_rng(index)
        while True:
            try:
                a, deaths = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results.put((a, self._one(sess, a, timing, rng)))
            except SessionDied as e:
                deaths += 1
                if deaths >= DEATHS:
                    results.put((a, RuntimeError(f"the device's session died twice running it: {e}")))
                else:
                    todo.put((a, deaths))
                log.info("an RPC session under %r died (%s); its work goes to another", self.cfg.key, e)
                return
            except Exception as e:  # noqa: BLE001 - the kernel failed on the device: a value
                # without its traceback, whose frames hold the session (and would keep it open)
                results.put((a, e.with_traceback(None)))

    def _one(self, sess, a: Artifact, timing: TimingConfig, rng):
        def load(path: str):
            name = f"gs{self.prefix}_{next(self._names)}.so"
            sess.upload(path, name)
            return sess.load_module(name)

        try:
            dev = sess.cpu()
            kernels, rel = load_and_check(a, dev, rng, load)
            ss = [sample(kernels, dev, timing, local=False) for _ in range(max(1, timing.rounds))]
        except Exception as e:
            if not alive(sess):
                raise SessionDied(last_line(e)) from None
            raise
        cold = float(np.median([x[0] for x in ss]))
        warm = float(np.median([x[1] for x in ss]))
        flag = warm_flag(cold, warm)
        j = a.job
        # no in-cold time on a device (its preprocessor is registered here only): the cold one stands in
        return Measurement(j.workload, j.candidate, cold, warm, None, a.build_s, rel, j.version, 0.0, flag, cold)


def within(seconds: float, fn, message: str):
    """``fn()``, or GraphSelectError(message) when it has not returned after ``seconds`` (it is
    left running in a daemon thread: an RPC call cannot be interrupted)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise GraphSelectError(message)
    if "error" in box:
        raise box["error"]
    return box["value"]


class RemoteNetwork:
    """A compiled Relax executable on a device (``sess``, one session of the tracker's: networks
    share it, since a server serves one session at a time): ``run(xs)`` returns every output as
    numpy, and ``runner()`` a callable for ``measure.e2e.compare`` whose ``time_block`` the
    device times."""

    def __init__(self, sess, executable, cc: str | None, library=None, timeout: float = LOAD_TIMEOUT_S,
                 where: str = "the device"):
        from tvm import relax
        from .builder import export
        self.sess = sess
        name = f"gsnet_{uuid.uuid4().hex[:8]}.so"
        with tempfile.TemporaryDirectory(prefix="graphselect-net-") as d:
            path = str(library) if library is not None else export(executable, os.path.join(d, "net.so"), cc)

            def load():
                self.sess.upload(path, name)
                self.dev = self.sess.cpu()
                return relax.VirtualMachine(self.sess.load_module(name), self.dev)

            self.vm = within(timeout, load, f"{where} did not load the network within {timeout:g} s (its server "
                                            f"may be hung: restart it, or raise --rpc-load-timeout)")

    def _set(self, xs) -> None:
        from ..runtime import device_args
        self.vm.set_input("main", *device_args(xs, self.dev))

    def run(self, xs) -> list[np.ndarray]:
        from ..runtime import outputs
        self._set(xs)
        self.vm.invoke_stateful("main")
        return outputs(self.vm.get_outputs("main"))

    def runner(self, xs):
        self._set(xs)
        timer = self.vm.time_evaluator("invoke_stateful", self.dev, number=1, repeat=1)

        def call():
            self.vm.invoke_stateful("main")

        def time_block(runs: int, warmup: int = 1, warmup_s: float = 0.0) -> list[float]:
            for _ in range(max(1, warmup)):
                timer("main")
            return [float(timer("main").mean) * 1e3 for _ in range(runs)]

        call.runtime = "tvm"
        call.time_block = time_block
        return call
