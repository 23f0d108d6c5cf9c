"""Solver fixtures: a random alive candidate path per flow, a concrete routing to check
bounds against."""

from __future__ import annotations

import numpy as np
import pytest

from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import flow_class, num_paths, path_alive, path_arcs


def _random_alive_paths(
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


def _random_instance(
    spec: str, n_flows: int, seed: int, failures: int, equal: bool = False
) -> tuple[Fabric, LinkHealth, FlowSet]:
    """A preset fabric with `failures` random rack links down and `n_flows` random flows
    between NICs of different hosts: all 400G when `equal`, else 50-400G."""
    fabric = build(PRESETS[spec])
    rng = np.random.default_rng(seed)
    src = rng.integers(0, fabric.num_nics, n_flows)
    dst = rng.integers(0, fabric.num_nics, n_flows)
    same = fabric.host_of_nic(src) == fabric.host_of_nic(dst)
    dst[same] = (dst[same] + fabric.nics_per_host) % fabric.num_nics
    demand = 400.0 if equal else rng.choice([50.0, 100.0, 200.0, 400.0], n_flows)
    links = fabric.rack_base + rng.choice(fabric.num_rack_links, failures, replace=False)
    return fabric, LinkHealth.all_up(fabric).down(links.tolist()), FlowSet.build(src, dst, demand)


@pytest.fixture(scope="session")
def random_instance():  # type: ignore[no-untyped-def]
    """`(spec, n_flows, seed, failures, equal=False) -> (fabric, health, flows)`;
    session-scoped for hypothesis."""
    return _random_instance


@pytest.fixture(scope="session")
def random_alive_paths():  # type: ignore[no-untyped-def]
    """`(fabric, health, flows, seed) -> paths or None`; session-scoped for hypothesis."""
    return _random_alive_paths
