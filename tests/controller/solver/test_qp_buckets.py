"""QP-bucket splitting: hand-derived bounds, folding, and invariants on random failures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.formats.route_file import dump_routes, parse_routes
from controller.model.assignment import Assignment
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.health import LinkHealth, parse_health, random_failures
from controller.model.jobs import jobs_flows
from controller.model.paths import path_alive
from controller.routes.entries import build_routes
from controller.solver.certificate import CertifyOptions
from controller.solver.greedy import utilisation
from controller.solver.problem import Problem
from controller.solver.qp_buckets import split_flows, split_overloaded, spray
from controller.solver.solve import SolveOptions, solve
from sim.jobmix import random_jobs, ring_jobs
from sim.switches import EmulatedFabric, verify

LINE = 400.0


@pytest.fixture
def pair_of_racks():
    """Rack 0 sends one line-rate flow per NIC (4) to rack 1; its uplink to CTSW 3 is down,
    so 4 flows share 3 uplinks."""
    fabric = build(ClosSpec(name="pair", racks_per_pod=2, hosts_per_rack=1, nics_per_host=4,
                            ctsws_per_pod=4))  # fmt: skip
    flows = FlowSet.build(np.arange(4), np.arange(4, 8), LINE)
    health = parse_health(fabric, ["rtsw-p0-r0:ctsw-p0-c3"])
    return fabric, flows, health


def test_split_flows_keeps_order_and_demand() -> None:
    flows = FlowSet.build([0, 1, 2], [5, 6, 7], [400.0, 100.0, 200.0])
    out, parent = split_flows(flows, np.array([1]), 4)
    assert parent.tolist() == [0, 1, 1, 1, 1, 2]
    assert out.qp.tolist() == [ALL_QPS, 0, 1, 2, 3, ALL_QPS]
    assert out.demand.tolist() == [400.0, 25.0, 25.0, 25.0, 25.0, 200.0]
    with pytest.raises(ValueError, match="qps must be >= 2"):
        split_flows(flows, np.array([0]), 1)


@pytest.mark.parametrize(("qps", "mlu"), [(16, 22 / 16), (4, 6 / 4), (2, 3 / 2)])
def test_split_reaches_the_bucket_bound(pair_of_racks, qps: int, mlu: float) -> None:
    fabric, flows, health = pair_of_racks
    whole = solve(fabric, health, flows, options=SolveOptions(qps=1))
    assert whole.mlu == pytest.approx(2.0)  # two flows on one uplink
    res = solve(fabric, health, flows, options=SolveOptions(qps=qps))
    # 4 * qps buckets on 3 uplinks: one carries ceil(4 qps / 3) buckets of LINE / qps
    assert res.bound.value == pytest.approx(mlu) and res.bound.name.endswith(f"-{qps}qp")
    assert res.mlu == pytest.approx(mlu)
    assert res.ratio == pytest.approx(1.0)
    rows = res.assignment.flows
    # each split flow is exactly its qps buckets; whole flows kept one row
    for f in range(len(flows)):
        mine = rows.qp[res.parent == f]
        if f in res.split_flows:
            assert sorted(mine.tolist()) == list(range(qps))
        else:
            assert mine.tolist() == [ALL_QPS]
    assert np.allclose(np.bincount(res.parent, weights=rows.demand), flows.demand)


def test_nothing_to_gain_leaves_flows_whole(two_rack_pod) -> None:
    fabric = two_rack_pod
    flows = FlowSet.build([0, 1], [2, 3], LINE)
    # one uplink left: splitting cannot spread anything
    health = parse_health(fabric, ["rtsw-p0-r0:ctsw-p0-c1"])
    assert (
        split_overloaded(
            Problem(fabric, health, flows),
            solve(fabric, health, flows, options=SolveOptions(qps=1)).assignment.path,
        )
        is None
    )
    res = solve(fabric, health, flows)
    assert res.mlu == pytest.approx(2.0) and not res.assignment.flows.split
    # nothing overloaded: nothing split
    res = solve(fabric, LinkHealth.all_up(fabric), flows)
    assert res.mlu == pytest.approx(1.0) and not res.assignment.flows.split


def test_split_routes_forward_every_bucket_on_its_path(pair_of_racks) -> None:
    fabric, flows, health = pair_of_racks
    res = solve(fabric, health, flows)
    routes = build_routes(fabric, res.assignment)
    assert any(e.qp != ALL_QPS for e in routes)
    em = EmulatedFabric(fabric, down_links=health.down_links().tolist())
    for sw in routes.switches():
        em.program(sw, routes.table(sw))
    assert verify(fabric, em, res.assignment).ok
    # a packet of a split flow without its own bucket entry takes the all-buckets entry
    split = res.assignment.flows.qp != ALL_QPS
    walks = em.forward(flows.src_nic[res.split_flows], flows.dst_nic[res.split_flows])
    assert (walks.status == 0).all()
    # the route file keeps buckets of flows and entries
    doc = dump_routes(fabric, res.assignment, routes)
    back, back_routes = parse_routes(fabric, doc)
    assert back.flows.qp.tolist() == res.assignment.flows.qp.tolist()
    assert back.path.tolist() == res.assignment.path.tolist()
    assert list(back_routes) == list(routes)
    assert split.any()


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_split_invariants_on_random_failures(seed: int, failures: int) -> None:
    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, ring_jobs(fabric, 4, seed=seed))
    health = random_failures(fabric, failures, seed)
    off = CertifyOptions(enabled=False)  # the solver's routing, before any job is handed back
    whole = solve(fabric, health, flows, options=SolveOptions(qps=1, certify=off))
    res = solve(fabric, health, flows, options=SolveOptions(certify=off))
    again = solve(fabric, health, flows, options=SolveOptions(certify=off))
    rows = res.assignment.flows
    # deterministic, demand kept per flow, every routed row on an alive path
    assert np.array_equal(res.assignment.path, again.assignment.path)
    assert np.array_equal(rows.qp, again.assignment.flows.qp)
    assert np.allclose(np.bincount(res.parent, weights=rows.demand, minlength=len(flows)),
                       flows.demand)  # fmt: skip
    routed = res.assignment.routed
    arcs = res.assignment.arcs(fabric)[routed]
    assert path_alive(arcs, health.arc_capacity(fabric)).all()
    # never worse than one path per flow, never below the bound for bucket routings
    assert res.mlu <= whole.mlu + 1e-9
    assert res.mlu >= res.bound.value * (1 - 1e-9)
    assert res.bound.value <= whole.bound.value + 1e-9
    mlu = float(utilisation(fabric, health, Assignment(rows, res.assignment.path)).max())
    assert mlu == pytest.approx(res.mlu)
    # the routes carry every row on its path
    routes = build_routes(fabric, res.assignment)
    em = EmulatedFabric(fabric, down_links=health.down_links().tolist())
    for sw in routes.switches():
        em.program(sw, routes.table(sw))
    assert verify(fabric, em, res.assignment).ok


def test_spray_spreads_every_flow_evenly_over_the_planes() -> None:
    """3 flows of 2/3 line rate leave a rack with 2 uplinks: whole flows put two on one
    uplink (MLU 4/3); 16 buckets each, 8 per plane, load both uplinks to exactly 1."""
    fabric = build(ClosSpec(name="three", racks_per_pod=2, hosts_per_rack=1, nics_per_host=3,
                            ctsws_per_pod=2))  # fmt: skip
    flows = FlowSet.build([0, 1, 2], [3, 4, 5], LINE * 2 / 3)
    health = LinkHealth.all_up(fabric)
    whole = solve(fabric, health, flows, options=SolveOptions(qps=1))
    assert whole.mlu == pytest.approx(4 / 3)
    out = spray(Problem(fabric, health, flows), qps=16)
    assert out is not None and out.split.tolist() == [0, 1, 2]
    a = Assignment(out.flows, out.path)
    assert float(utilisation(fabric, health, a).max()) == pytest.approx(1.0)
    planes = out.path  # same pod, one link per pair: the path index is the plane
    for f in range(3):
        assert np.bincount(planes[out.parent == f], minlength=2).tolist() == [8, 8]
    routes = build_routes(fabric, a)
    # per flow: one entry for all buckets plus the 8 buckets on the other plane
    assert len(routes) == 3 * (1 + 8)
    em = EmulatedFabric(fabric)
    for sw in routes.switches():
        em.program(sw, routes.table(sw))
    assert verify(fabric, em, a).ok


def test_spray_places_buckets_of_dead_planes_elsewhere(pair_of_racks) -> None:
    fabric, flows, health = pair_of_racks
    out = spray(Problem(fabric, health, flows), qps=16)
    assert out is not None
    a = Assignment(out.flows, out.path)
    assert path_alive(a.arcs(fabric), health.arc_capacity(fabric)).all()
    assert float(utilisation(fabric, health, a).max()) <= 22 / 16 + 1e-9


@pytest.mark.parametrize("seed", [3])
def test_solver_sprays_a_mix_it_cannot_pack_whole(small, seed: int) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=seed))
    health = LinkHealth.all_up(small)
    whole = solve(small, health, flows, options=SolveOptions(qps=1))
    res = solve(small, health, flows)
    assert whole.mlu > 1.3  # unequal flows: one path each overloads some link
    assert res.method.endswith("qp-spray")
    assert res.mlu == pytest.approx(res.bound.value) == pytest.approx(1.0)
    assert np.allclose(np.bincount(res.parent, weights=res.assignment.flows.demand),
                       flows.demand)  # fmt: skip
    # a budget the sprayed tables do not fit keeps flows whole
    budgeted = solve(small, health, flows, options=SolveOptions(table_budget=8))
    assert not budgeted.method.endswith("qp-spray")


def test_moved_pairs_compares_every_bucket() -> None:
    from controller.model.assignment import moved_pairs

    whole = FlowSet.build([0, 1, 2], [5, 6, 7], LINE)
    old = Assignment(whole, np.array([0, 1, 2]))
    split, _ = split_flows(whole, np.array([1]), 2)
    # flow 0 same path; flow 1 split over paths 1 and 3; flow 2 moved
    new = Assignment(split, np.array([0, 1, 3, 0]))
    assert moved_pairs(old, new).tolist() == [1 * 8 + 6, 2 * 8 + 7]
    assert moved_pairs(new, new).size == 0
    # no pair routed in both (another job set entirely, or nothing before): none moved
    other = Assignment(FlowSet.build([3], [4], LINE), np.array([0]))
    assert moved_pairs(new, other).size == moved_pairs(other, new).size == 0
    empty = Assignment(FlowSet.build([], [], LINE), np.zeros(0, np.int64))
    assert moved_pairs(new, empty).size == moved_pairs(empty, new).size == 0


def test_resolve_with_split_previous_moves_nothing(pair_of_racks) -> None:
    fabric, flows, health = pair_of_racks
    first = solve(fabric, health, flows)
    assert first.assignment.flows.split
    again = solve(fabric, health, flows, previous=first.assignment)
    assert again.churn == 0
    assert np.array_equal(again.assignment.path, first.assignment.path)
