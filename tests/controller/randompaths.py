"""A random alive candidate path per flow: a concrete routing for checking bounds against.

A helper module, not a test: pytest puts this directory on the path for the tests in it.
"""

from __future__ import annotations

import numpy as np

from controller.fabric import Fabric
from controller.flows import FlowSet
from controller.health import LinkHealth
from controller.paths import flow_class, num_paths, path_alive, path_arcs


def random_alive_paths(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, seed: int
) -> np.ndarray | None:
    """One path index per flow, drawn from its alive candidates; None if a flow has none."""
    rng = np.random.default_rng(seed)
    cls = flow_class(fabric, flows.src_nic, flows.dst_nic)
    counts = np.array(num_paths(fabric))[cls]
    cap = health.arc_capacity(fabric)
    path = np.zeros(len(flows), np.int64)
    for f in range(len(flows)):
        options = np.arange(counts[f])
        rows = path_arcs(fabric, np.full(counts[f], flows.src_nic[f]),
                         np.full(counts[f], flows.dst_nic[f]), options)  # fmt: skip
        alive = options[path_alive(rows, cap)]
        if alive.size == 0:
            return None
        path[f] = rng.choice(alive)
    return path
