"""Route diffs and their order: every state between two route sets forwards every flow."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import PRESETS, build
from controller.model.flows import FlowSet
from controller.routes.checks import entry_role
from controller.routes.entries import CTSW_DOWN, RTSW_UP, build_routes
from controller.routes.plan import STAGE_NAMES, Add, Delete, Plan, Replace, diff, plan_update
from controller.routes.tables import Entry, RouteSet
from sim.driver import EmulatedDriver
from sim.switches import DELIVERED, LOOPED, EmulatedFabric, verify

WIDE = PRESETS["wide"]
FABRICS = {"tiny": build(PRESETS["tiny"]), "small": build(PRESETS["small"]), "wide": build(WIDE)}


def install(em, routes):
    for switch in routes.switches():
        em.program(switch, routes.table(switch))


def cross_pod_move(fabric):
    """One wide-fabric flow moved to another path at every tier: (old, new)."""
    flows = FlowSet.build([0], [fabric.nic_id(6, 1)], 100.0)
    return Assignment(flows, np.array([0])), Assignment(flows, np.array([63]))


def test_install_from_empty_goes_downstream_first():
    fabric = FABRICS["wide"]
    _, new = cross_pod_move(fabric)
    plan = diff(RouteSet(), build_routes(fabric, new), fabric)
    order = [(stage, b.switch) for stage, b in plan.batches()]
    assert order == [(0, "ctsw-p1-c1"), (1, "atsw-c1-a1"), (2, "ctsw-p0-c1"), (3, "rtsw-p0-r0")]
    assert all(isinstance(op, Add) for op in plan.ops())
    assert plan.counts() == {"add": 4, "replace": 0, "delete": 0}


def test_removal_goes_upstream_first():
    fabric = FABRICS["wide"]
    old, _ = cross_pod_move(fabric)
    plan = diff(build_routes(fabric, old), RouteSet(), fabric)
    roles = [entry_role(fabric, op.entry) for op in plan.ops()]
    assert roles == sorted(roles)
    assert all(isinstance(op, Delete) for op in plan.ops())


def test_move_installs_new_hops_then_switches_then_removes_old():
    fabric = FABRICS["wide"]
    old, new = cross_pod_move(fabric)
    plan = diff(build_routes(fabric, old), build_routes(fabric, new), fabric)
    kinds = [(STAGE_NAMES[s], type(op).__name__) for s, b in plan.batches() for op in b.ops]
    assert kinds == [
        ("install ctsw-down", "Add"), ("install atsw-down", "Add"), ("install ctsw-up", "Add"),
        ("rtsw-up", "Replace"),
        ("remove ctsw-up", "Delete"), ("remove atsw-down", "Delete"),
        ("remove ctsw-down", "Delete"),
    ]  # fmt: skip
    assert len(diff(build_routes(fabric, new), build_routes(fabric, new), fabric)) == 0


def test_foreign_entries_are_left_alone_and_block_their_keys():
    fabric = FABRICS["wide"]
    _, new = cross_pod_move(fabric)
    wanted = build_routes(fabric, new)
    rtsw = wanted.table("rtsw-p0-r0")[0]
    foreign = Entry(rtsw.switch, rtsw.in_port, rtsw.dst_host, rtsw.next_hop, owner="ops")
    other = Entry("ctsw-p0-c0", fabric.rack_link(0, 0), 3, fabric.rack_link(1, 0), owner="ops")
    plan = diff(RouteSet.from_entries([foreign, other]), wanted, fabric)
    assert plan.blocked == (rtsw,)
    assert all(op.entry.owner != "ops" for op in plan.ops())
    assert "rtsw-p0-r0" not in plan.switches()


def test_plan_update_reports_flows_left_on_ecmp():
    fabric = FABRICS["tiny"]
    flows = FlowSet.build([0, 1, 2], [4, 5, 6], [10.0, 30.0, 20.0])
    a = Assignment(flows, np.array([0, 1, UNROUTED]))
    plan, wanted = plan_update(fabric, RouteSet(), a, capacity=1)
    assert plan.ecmp_flows.tolist() == [0, 2]
    assert len(wanted) == 1 and len(plan) == 1
    assert isinstance(Plan(), Plan) and len(Plan()) == 0


def test_replace_carries_old_and_new():
    fabric = FABRICS["tiny"]
    flows = FlowSet.build([0], [4], 100.0)
    old = build_routes(fabric, Assignment(flows, np.array([0])))
    new = build_routes(fabric, Assignment(flows, np.array([2])))
    (op,) = diff(old, new, fabric).ops()
    assert isinstance(op, Replace) and op.old == next(iter(old)) and op.entry == next(iter(new))


def check_state(em, src, dst, baseline):
    """No loops; nothing dropped that ECMP alone would have delivered."""
    walks = em.forward(src, dst)
    assert not (walks.status == LOOPED).any()
    dropped = np.flatnonzero(walks.status != DELIVERED)
    assert set(dropped.tolist()) <= baseline


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(FABRICS)),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 48),
    same_flows=st.booleans(),
    failures=st.integers(0, 2),
)
def test_every_intermediate_state_is_loop_and_black_hole_free(
    random_assignment, name, seed, n, same_flows, failures
):
    fabric = FABRICS[name]
    rng = np.random.default_rng(seed)
    old = random_assignment(fabric, rng, n)
    new = random_assignment(fabric, rng, n, flows=old.flows if same_flows else None)
    core = np.arange(fabric.rack_base, fabric.num_links)
    down = rng.choice(core, size=failures, replace=False) if failures else []
    em = EmulatedFabric(fabric, seed=seed % 5, down_links=down)
    src = np.concatenate([old.flows.src_nic, new.flows.src_nic])
    dst = np.concatenate([old.flows.dst_nic, new.flows.dst_nic])
    baseline = set(np.flatnonzero(em.forward(src, dst).status != DELIVERED).tolist())
    install(em, build_routes(fabric, old))
    check_state(em, src, dst, baseline)
    plan = diff(em.routes(), build_routes(fabric, new), fabric)
    driver = EmulatedDriver(emulated=em)
    stages = [s for s, _ in plan.batches()]
    assert stages == sorted(stages)
    # Make before break: once a flow's new RTSW entry is in, its whole new path is ready.
    moved = {
        (op.entry.in_port, op.entry.dst_host)
        for op in plan.ops()
        if entry_role(fabric, op.entry) == RTSW_UP and not isinstance(op, Delete)
    }
    rtsw_key = list(
        zip(
            fabric.access_link(new.flows.src_nic).tolist(),
            new.flows.dst_host(fabric).tolist(),
            strict=True,
        )
    )
    watch = np.array([k in moved for k in rtsw_key], dtype=bool) & new.routed
    wanted_arcs = new.arcs(fabric)
    for _, batch in plan.batches():
        driver.apply(batch.switch, batch.ops)
        check_state(em, src, dst, baseline)
        if failures or not watch.any():
            continue
        live = {
            (e.in_port, e.dst_host, e.next_hop) for e in em.routes() if e.switch.startswith("rtsw")
        }
        arcs = em.forward(new.flows.src_nic, new.flows.dst_nic).arcs[:, : wanted_arcs.shape[1]]
        for f in np.flatnonzero(watch):
            if (*rtsw_key[f], int(wanted_arcs[f, 1] // 2)) in live:
                assert (arcs[f] == wanted_arcs[f]).all()
    assert em.routes() == build_routes(fabric, new)
    report = verify(fabric, em, new)
    if not failures:
        assert report.ok, report.summary()
    else:
        alive = np.repeat(em.alive, 2)
        arcs = new.arcs(fabric)
        broken = ~np.where(arcs >= 0, alive[np.maximum(arcs, 0)], True).all(axis=1)
        assert set(report.off_path.tolist()) <= set(np.flatnonzero(broken).tolist())


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_diff_stage_roles(random_assignment, name):
    fabric = FABRICS[name]
    rng = np.random.default_rng(7)
    old = random_assignment(fabric, rng, 60)
    new = random_assignment(fabric, rng, 60, flows=old.flows)
    plan = diff(build_routes(fabric, old), build_routes(fabric, new), fabric)
    for stage, batch in plan.batches():
        for op in batch.ops:
            role = entry_role(fabric, op.entry)
            want = CTSW_DOWN + role if isinstance(op, Delete) else CTSW_DOWN - role
            assert stage == want
            assert op.entry.switch == batch.switch
