"""A real etcd on 127.0.0.1 (random free ports, a temporary data directory), for the store
and replica tests; skipped with the reason when the etcd binary is missing."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.etcd_server import EtcdServer, etcd_binary
from sim.processes import free_port


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    if etcd_binary() is None:
        pytest.skip("etcd is not installed (Debian package etcd-server; make system-deps)")
    server = EtcdServer(tmp_path / "etcd")
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
            [sys.executable, "-m", "controller.cli.main", "serve", "--insecure", "--listen",
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
