"""Route fixtures: random conflict-free assignments to build, diff and push."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.paths import flow_class, num_paths
from controller.routes.entries import route_conflicts

RandomAssignment = Callable[..., Assignment]


def _random_assignment(
    fabric: Fabric, rng: np.random.Generator, n: int, flows: FlowSet | None = None
) -> Assignment:
    """Random paths (some unrouted) for `flows` or n random flows, with conflicting flows
    unrouted."""
    if flows is None:
        src = rng.integers(0, fabric.num_nics, n)
        dst = rng.integers(0, fabric.num_nics, n)
        keep = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
        flows = FlowSet.build(src[keep], dst[keep], 100.0)
    counts = np.array(num_paths(fabric))[flow_class(fabric, flows.src_nic, flows.dst_nic)]
    path = (rng.random(len(flows)) * counts).astype(np.int64)
    path[rng.random(len(flows)) < 0.1] = UNROUTED
    a = Assignment(flows, path)
    return Assignment(flows, np.where(route_conflicts(fabric, a), UNROUTED, path))


@pytest.fixture(scope="session")
def random_assignment() -> RandomAssignment:
    """random_assignment(fabric, rng, n, flows=None): see _random_assignment."""
    return _random_assignment
