"""Repairs and re-optimisations keep every switch table within its entry budget."""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.routes.budget import fit_tables, switch_budget, table_usage
from controller.routes.entries import route_conflicts
from controller.solver import repair as repair_module
from controller.solver.greedy import assign_paths
from controller.solver.problem import Problem
from controller.solver.qp_buckets import split_flows
from controller.solver.repair import (
    RouteIndex,
    affected_flows,
)

# The repair's own moves, before the certificate hands any job back to hashing (the
# certificate on repairs is tested in test_certificate.py).
repair = partial(repair_module.repair, certify_options=None)
repair_indexed = partial(repair_module.repair_indexed, certify_options=None)
reoptimise = partial(repair_module.reoptimise, certify_options=None)

UNLIMITED = float("inf")


def _flows(fabric: Fabric, seed: int, n: int, split: bool) -> FlowSet:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, fabric.num_nics, n)
    dst = (src + fabric.nics_per_host * rng.integers(1, fabric.num_hosts, n)) % fabric.num_nics
    flows = FlowSet.build(src, dst, rng.choice([100.0, 200.0, 400.0], n))
    if split:  # a few flows in QP buckets: their source RTSW entries fold
        flows, _ = split_flows(flows, np.flatnonzero(rng.random(n) < 0.3), 4)
    return flows


def _placed(fabric: Fabric, health: LinkHealth, flows: FlowSet) -> Assignment:
    """A greedy assignment without route conflicts (conflicting rows unrouted)."""
    placed = assign_paths(Problem(fabric, health, flows)).assignment
    path = placed.path.copy()
    path[route_conflicts(fabric, placed)] = UNROUTED
    return Assignment(flows, path)


def _core_links(fabric: Fabric, assignment: Assignment) -> np.ndarray:
    arcs = assignment.arcs(fabric)
    core = arcs[:, 1:][arcs[:, 1:] >= 0] // 2
    return np.unique(core[core >= fabric.rack_base])


def _unlimited(fabric: Fabric) -> np.ndarray:
    return np.full(fabric.num_nodes, UNLIMITED)


def test_full_tables_send_the_remainder_to_ecmp() -> None:
    fabric = build(PRESETS["small"])
    flows = _flows(fabric, 7, 60, split=True)
    health = LinkHealth.all_up(fabric)
    before = _placed(fabric, health, flows)
    budget = table_usage(fabric, before)  # every table exactly full
    link = _core_links(fabric, before)[0]
    new = health.down([int(link)])
    free = repair(fabric, new, before, table_budget=_unlimited(fabric))
    assert (table_usage(fabric, free.assignment) > budget).any()  # the repair would overflow
    res = repair(fabric, new, before, table_budget=budget)
    assert (table_usage(fabric, res.assignment) <= budget).all()
    assert res.fallback_ecmp.size
    assert (res.assignment.path[res.fallback_ecmp] == UNROUTED).all()
    assert set(res.fallback_ecmp.tolist()) <= set(affected_flows(fabric, new, before).tolist())
    hit = affected_flows(fabric, new, before)
    kept = np.setdiff1d(np.arange(len(flows)), hit)
    assert res.assignment.path[kept].tobytes() == before.path[kept].tobytes()
    # the rows that fit are where the unlimited repair put them
    placed = np.setdiff1d(hit, res.fallback_ecmp)
    routed = placed[res.assignment.path[placed] != UNROUTED]
    assert routed.size
    assert (res.assignment.path[routed] == free.assignment.path[routed]).all()


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 10_000),
    st.integers(1, 3),
    st.integers(0, 12),
    st.sampled_from(["tiny", "small"]),
    st.booleans(),
)
def test_repair_never_exceeds_the_budget(
    seed: int, failures: int, entries: int, name: str, split: bool
) -> None:
    fabric = build(PRESETS[name])
    flows = _flows(fabric, seed, 40, split)
    health = LinkHealth.all_up(fabric)
    before = fit_tables(fabric, _placed(fabric, health, flows), entries)
    core = _core_links(fabric, before)
    if not core.size:
        return
    rng = np.random.default_rng(seed)
    links = rng.choice(core, min(failures, core.size), replace=False)
    new = health.down(links.tolist())
    limit = switch_budget(fabric, entries)
    res = repair(fabric, new, before, table_budget=entries)
    assert (table_usage(fabric, res.assignment) <= limit).all()
    assert (res.assignment.path[res.fallback_ecmp] == UNROUTED).all()
    changed = np.flatnonzero(res.assignment.path != before.path)
    hit = np.union1d(affected_flows(fabric, new, before), np.flatnonzero(~before.routed))
    assert set(changed.tolist()) <= set(hit.tolist())
    # the index keeps the table usage it counted, exactly; warm re-optimisation from it
    # keeps within the budget too
    res2, index = repair_indexed(new, RouteIndex.build(fabric, before), table_budget=entries)
    assert res2.assignment.path.tobytes() == res.assignment.path.tobytes()
    assert (index.usage == table_usage(fabric, res.assignment)).all()
    again, kept = reoptimise(new, index, table_budget=entries)
    assert (table_usage(fabric, again.assignment) <= limit).all()
    assert (kept.usage == table_usage(fabric, again.assignment)).all()
    # with no limit, or one nothing reaches, the repair is the unlimited one, byte for byte
    free = repair(fabric, new, before, table_budget=_unlimited(fabric))
    roomy = repair(fabric, new, before, table_budget=10**6)
    assert not free.fallback_ecmp.size and not roomy.fallback_ecmp.size
    assert free.assignment.path.tobytes() == roomy.assignment.path.tobytes()
    loose, _ = reoptimise(new, index, table_budget=_unlimited(fabric))
    loose_roomy, _ = reoptimise(new, index, table_budget=10**6)
    assert loose.assignment.path.tobytes() == loose_roomy.assignment.path.tobytes()
