"""A real etcd on 127.0.0.1 (random free ports, a temporary data directory), for the store
and replica tests; skipped with the reason when the etcd binary is missing."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Etcd:
    """One etcd member; `stop`/`start` to cut it off and bring it back (same data)."""

    def __init__(self, data: Path) -> None:
        self.binary = shutil.which("etcd") or "/usr/bin/etcd"
        self.data = data
        self.port, self.peer = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        client, peer = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer}"
        self.proc = subprocess.Popen(
            [self.binary, "--name", "t", "--data-dir", str(self.data),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"t={peer}", "--heartbeat-interval", "50",
             "--election-timeout", "500", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as reply:
                    if b"true" in reply.read():
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("etcd did not become healthy")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    if shutil.which("etcd") is None and not Path("/usr/bin/etcd").exists():
        pytest.skip("etcd is not installed (Debian package etcd-server; make system-deps)")
    server = Etcd(tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.stop()
