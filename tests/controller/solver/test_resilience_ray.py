"""The resilience sweep on a real local Ray cluster (a head and a second node, in a network
namespace of this test's own with only loopback) gives the local sweep's arrays byte for
byte. Needs root (the namespace) and Ray (the `ray` extra); skips and says why otherwise."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.solver.sweep_runners import ray_available

ROOT = Path(__file__).resolve().parents[3]
RAY = Path(sys.executable).with_name("ray")
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a network namespace"),
    pytest.mark.skipif(not ray_available() or not RAY.exists(),
                       reason="needs Ray (pip install 'fabric-te[ray]'; make test installs it)"),
]  # fmt: skip

PORT = 6390


def _ns_run(ns: str, *cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], text=True, capture_output=True,
                          **kw)  # type: ignore[call-overload]  # fmt: skip


def _stop(ns: str) -> None:
    """Every process of the namespace (the cluster's), by PID, then the namespace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = subprocess.run(["ip", "netns", "pids", ns], text=True,
                              capture_output=True).stdout.split()  # fmt: skip
        for pid in pids:
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(1.0)
    subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.fixture
def cluster() -> Iterator[tuple[str, str]]:
    """(namespace, address) of a two-node Ray cluster started for this test."""
    ns = f"tray{secrets.token_hex(3)}"
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        common = ["--num-cpus=1", "--disable-usage-stats", "--object-store-memory=200000000"]
        head = _ns_run(ns, str(RAY), "start", "--head", "--node-ip-address=127.0.0.1",
                       f"--port={PORT}", "--include-dashboard=false", f"--temp-dir={temp}",
                       *common, timeout=120)  # fmt: skip
        assert head.returncode == 0, head.stderr[-2000:]
        node = _ns_run(ns, str(RAY), "start", f"--address=127.0.0.1:{PORT}",
                       "--node-ip-address=127.0.0.1", *common, timeout=120)  # fmt: skip
        assert node.returncode == 0, node.stderr[-2000:]
        yield ns, f"127.0.0.1:{PORT}"
    finally:
        _stop(ns)
        shutil.rmtree(temp, ignore_errors=True)


DRIVER = textwrap.dedent("""
    import sys
    import numpy as np
    from controller.model.clos import PRESETS, build
    from controller.model.health import LinkHealth
    from controller.model.jobs import jobs_flows
    from controller.solver import solve
    from controller.solver.resilience import SweepInputs
    from controller.solver.sweep_runners import run_local, run_ray
    from sim.jobmix import random_jobs

    fabric = build(PRESETS["small"])
    health = LinkHealth.all_up(fabric)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=2))
    inputs = SweepInputs(fabric, health, solve(fabric, health, flows).assignment,
                         kinds=("link", "ctsw"))
    local, _ = run_local(inputs, workers=1)
    remote, stats = run_ray(inputs, address=sys.argv[1])
    same = local.names == remote.names and all(
        x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for x, y in zip(local.digest_arrays(), remote.digest_arrays()))
    print("workers", stats.workers, "batches", stats.batches, "elements", stats.elements)
    print("SAME" if same else "DIFFERENT")
""")


def test_the_ray_sweep_equals_the_local_one_byte_for_byte(cluster: tuple[str, str]) -> None:
    ns, address = cluster
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_DISABLE_USAGE_STATS": "1"}
    out = _ns_run(ns, sys.executable, "-c", DRIVER, address, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SAME" in out.stdout, out.stdout
    assert "workers 2" in out.stdout  # one actor per node's CPU: both nodes took part
