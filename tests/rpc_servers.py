"""A TVM RPC tracker and servers on loopback, as a user starts them (``python -m tvm.exec...``),
for the RPC tests; ``python`` may be another interpreter (the aarch64 one under qemu)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


class Cluster:
    """A tracker and any number of servers; ``close()`` stops them all (process groups: a server
    forks a child per session)."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.tracker = self._start([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                                    "--port", str(self.port), "--port-end", str(self.port + 1)], "tracker")
        _wait_port(self.port, self.tracker, 60)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, cmd, name, env=None):
        log = open(os.path.join(self.log_dir, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, **(env or {})})
        self.procs.append(p)
        return p

    def server(self, key: str, *, python=(sys.executable,), threads: int = 1, timeout: float = 120.0,
               env=None) -> subprocess.Popen:
        """Start a server under ``key`` and wait until the tracker lists it."""
        from graphselect.measure import rpc
        port = free_port()
        before = rpc.servers(rpc.RpcConfig("127.0.0.1", self.port, key))
        p = self._start([*python, "-m", "tvm.exec.rpc_server", "--tracker", self.address, "--key", key,
                         "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1)],
                        f"server-{key}-{port}", {"TVM_NUM_THREADS": str(threads), **(env or {})})
        deadline = time.monotonic() + timeout
        while rpc.servers(rpc.RpcConfig("127.0.0.1", self.port, key)) <= before:
            if p.poll() is not None:
                raise RuntimeError(f"the RPC server exited with {p.returncode} (see {self.log_dir})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the RPC server did not register within {timeout} s")
            time.sleep(0.3)
        return p

    @staticmethod
    def kill(p: subprocess.Popen) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                self.kill(p)
