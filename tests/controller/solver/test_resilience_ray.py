"""The resilience sweep on a real local Ray cluster (a head and a second node, in a network
namespace of this test's own with only loopback) gives the local sweep's arrays byte for
byte. Needs root (the namespace) and Ray (the `ray` extra); skips and says why otherwise."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.ray_cluster import in_ns, local_cluster, usable

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(usable() is not None, reason=str(usable()))


@pytest.fixture
def cluster() -> Iterator[tuple[str, str]]:
    """(namespace, address) of a two-node Ray cluster started for this test."""
    with local_cluster(nodes=2, cpus=1, object_store=200_000_000) as where:
        yield where


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
    out = in_ns(ns, [sys.executable, "-c", DRIVER, address], env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SAME" in out.stdout, out.stdout
    assert "workers 2" in out.stdout  # one actor per node's CPU: both nodes took part
