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


class Served:
    """One `tectl serve` process and a client of it."""

    def __init__(self, args: list[str], port: int) -> None:
        import sys

        import grpc

        from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc

        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli.main", "serve", "--listen",
             f"127.0.0.1:{port}", "--metrics-port", "0", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.TrafficEngineeringStub(self.channel)

    def ready(self, timeout: float = 60) -> Served:
        import grpc

        grpc.channel_ready_future(self.channel).result(timeout=timeout)
        return self

    def status(self):  # type: ignore[no-untyped-def]
        from controller.api.fabric_te.v1 import te_pb2 as pb

        return self.stub.Status(pb.StatusRequest(), timeout=5)

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def serve() -> Iterator[object]:
    """serve(args) -> Served; every process is killed at the end of the test."""
    started: list[Served] = []

    def start(args: list[str]) -> Served:
        served = Served(args, free_port())
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
