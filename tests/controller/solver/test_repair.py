"""Incremental repair touches only the flows a failure hit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import Assignment
from controller.model.clos import PRESETS, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import path_alive
from controller.solver.greedy import assign_paths
from controller.solver.repair import affected_flows, repair


def test_single_failure_moves_only_its_flow(two_rack_pod):
    fabric = two_rack_pod
    flows = FlowSet.build([0], [2], 400.0)
    a = Assignment(flows, np.array([0]))
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(0, 0)])
    res = repair(fabric, health, a)
    assert res.assignment.path.tolist() == [1]
    assert res.churn.tolist() == [0]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3), st.sampled_from(["tiny", "small"]))
def test_repair_changes_only_affected(seed, failures, name):
    fabric = build(PRESETS[name])
    rng = np.random.default_rng(seed)
    n = 30
    src = rng.integers(0, fabric.num_nics, n)
    dst = (src + fabric.nics_per_host * rng.integers(1, fabric.num_hosts, n)) % fabric.num_nics
    flows = FlowSet.build(src, dst, rng.choice([100.0, 400.0], n))
    health = LinkHealth.all_up(fabric)
    before = assign_paths(fabric, health, flows).assignment
    arcs = before.arcs(fabric)
    core = arcs[:, 1:][arcs[:, 1:] >= 0] // 2
    core = core[core >= fabric.rack_base]
    links = rng.choice(np.unique(core), min(failures, np.unique(core).size), replace=False)
    new = health.down(links.tolist())
    hit = affected_flows(fabric, new, before)
    res = repair(fabric, new, before)
    changed = np.flatnonzero(res.assignment.path != before.path)
    assert set(changed.tolist()) <= set(hit.tolist())
    routed = res.assignment.routed
    assert path_alive(res.assignment.arcs(fabric)[routed], new.arc_capacity(fabric)).all()
    assert set(np.flatnonzero(~routed).tolist()) == set(res.unroutable.tolist())
    again = repair(fabric, new, before)
    assert np.array_equal(again.assignment.path, res.assignment.path)


def test_repair_uses_least_loaded(two_rack_pod):
    fabric = two_rack_pod
    # flow 0 on CTSW 0, flow 1 on CTSW 1; CTSW 0's uplink from rack 0 fails
    flows = FlowSet.build([0, 1], [2, 3], 100.0)
    a = Assignment(flows, np.array([0, 1]))
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(0, 0)])
    res = repair(fabric, health, a)
    assert res.assignment.path.tolist() == [1, 1]
    assert res.mlu == 0.5 or res.mlu == 100.0 / 400.0 * 2


def test_nothing_hit_nothing_changes(small):
    flows = FlowSet.build([0, 5], [40, 70], 400.0)
    a = assign_paths(small, LinkHealth.all_up(small), flows).assignment
    unused = [
        link for link in range(small.rack_base, small.agg_base)
        if not (a.arcs(small) // 2 == link).any()
    ][:1]  # fmt: skip
    res = repair(small, LinkHealth.all_up(small).down(unused), a)
    assert res.churn.size == 0
    assert np.array_equal(res.assignment.path, a.path)
