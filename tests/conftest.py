"""Shared fixtures: the preset fabrics (tiny ones small enough to check by hand)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric

if TYPE_CHECKING:
    from controller.drivers.redis_server import RedisServer

# Fabrics are immutable (frozen, read-only capacities), so each is built once per session.
# Module constants built from presets remain only where a fixture cannot serve: hypothesis
# strategies, parametrisation and data a module builds at import time.


def pytest_sessionstart(session: pytest.Session) -> None:
    """Labs left by a run that was killed (their owner is gone) are removed first; this run
    exits through its hooks on SIGTERM and SIGHUP too, so its own labs go with it."""
    from sim.lab.shared import exit_on_signals

    exit_on_signals()
    if os.geteuid() == 0:
        from sim.lab.build import reap

        for gone in reap():
            print(f"removed orphaned lab {gone.lab} ({len(gone.namespaces)} namespaces)")


@pytest.fixture(scope="session")
def tiny() -> Fabric:
    """2 pods x 2 racks x 2 hosts x 2 NICs, 4 CTSWs per pod, 1 ATSW per plane, 1:2 taper."""
    return build(PRESETS["tiny"])


@pytest.fixture(scope="session")
def small() -> Fabric:
    return build(PRESETS["small"])


@pytest.fixture(scope="session")
def wide() -> Fabric:
    return build(PRESETS["wide"])


@pytest.fixture(scope="session")
def pod() -> Fabric:
    """The default preset: one pod of 192 racks (3,072 GPUs)."""
    return build(PRESETS["pod"])


@pytest.fixture(scope="session")
def two_rack_pod() -> Fabric:
    """One pod, 2 racks x 1 host x 2 NICs, 2 CTSWs: the smallest 1:1 pod."""
    return build(
        ClosSpec(name="two-rack", pods=1, racks_per_pod=2, hosts_per_rack=1, nics_per_host=2,
                 ctsws_per_pod=2)
    )


@pytest.fixture(scope="session")
def nic_speeds() -> Callable[[Fabric, Mapping[int, float]], Fabric]:
    """`nic_speeds(fabric, {host: gbps})`: the fabric with those hosts' NIC links (every
    NIC, both directions) at those speeds, as an operator's mixed 200G/400G/800G cables."""

    def at(fabric: Fabric, speeds: Mapping[int, float]) -> Fabric:
        cap = fabric.capacity.copy()
        for host, gbps in speeds.items():
            arcs = fabric.up(host * fabric.nics_per_host + np.arange(fabric.nics_per_host))
            cap[arcs] = cap[arcs ^ 1] = gbps
        return replace(fabric, capacity=cap)

    return at


@pytest.fixture(autouse=True, scope="session")
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`tectl serve` keeps its inputs under $XDG_STATE_HOME by default: a private one here,
    inherited by every controller a test starts."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))

# The operator's rack and pod of each leaf and spine of docs/examples/tiny-cables.yaml.
PLACES = {"leaf-a0": ("A01", None), "leaf-a1": ("A02", None), "leaf-b0": ("B01", None),
          "leaf-b1": ("B02", None), "spine-a0": (None, "Hall-A"), "spine-b3": (None, "Hall-B")}


@pytest.fixture(scope="session")
def named_tiny(tmp_path_factory: pytest.TempPathFactory) -> Fabric:
    """docs/examples/tiny-cables.yaml with the racks and pods its devices stand in."""
    from pathlib import Path

    import yaml

    from controller.formats.fabric_file import load_fabric

    doc = yaml.safe_load((Path(__file__).parents[1] / "docs" / "examples"
                          / "tiny-cables.yaml").read_text())  # fmt: skip
    for device in doc["devices"]:
        rack, pod = PLACES.get(device["name"], (None, None))
        device.update({k: v for k, v in (("rack", rack), ("pod", pod)) if v})
    path = tmp_path_factory.mktemp("named") / "named.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_fabric(str(path))


@pytest.fixture
def redis_server() -> Iterator[Callable[[int], RedisServer]]:
    """Start a redis-server of N databases on a unix socket of its own (stopped and removed
    after the test); skips when redis-server or the redis package is missing."""
    import shutil
    import tempfile
    from pathlib import Path

    from controller.drivers.redis_server import RedisServer, redis_binary

    if redis_binary() is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    pytest.importorskip("redis", reason="the redis package (the 'sonic' extra)")
    made: list[tuple[RedisServer, Path]] = []

    def start(databases: int) -> RedisServer:
        directory = Path(tempfile.mkdtemp(prefix="fte-redis-"))  # short: a socket path
        made.append((RedisServer(directory, databases=databases), directory))
        return made[-1][0]

    yield start
    for server, directory in made:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
