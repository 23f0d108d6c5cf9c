"""A throwaway etcd member on 127.0.0.1 (free ports, its own data directory), for the replica
tests and the state benchmarks. Tuned for short leases: heartbeat 50 ms and election timeout
500 ms, so that etcd grants a 1 s TTL (with its defaults the minimum is 2 s)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from sim.processes import free_port


def etcd_binary() -> str | None:
    """The etcd executable, or None when it is not installed."""
    return shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)


class EtcdServer:
    """One etcd member; `stop` (kill -9 by default) and `start` again keep its data."""

    def __init__(self, data: Path) -> None:
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("etcd is not installed (Debian package etcd-server)")
        self.binary = binary
        self.data = data
        self.port, self.peer = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        client, peer = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer}"
        self.proc = subprocess.Popen(
            [self.binary, "--name", "t", "--data-dir", str(self.data),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"t={peer}", "--heartbeat-interval", "50",
             "--election-timeout", "500", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with status {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as reply:
                    if b"true" in reply.read():
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("etcd did not become healthy")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None
