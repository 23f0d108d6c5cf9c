"""Baselines route like switches: valid loop-free paths, alive links only, seeded hashing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED
from controller.model.clos import ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import flow_class, num_paths, path_alive, path_arcs
from controller.model.rates import simulate
from sim.baselines import ecmp, eecmp, flow_hash, pinning, split_qps

# Every digit of the path numbering is exercised: K = 2 rack links, A = 2 ATSWs, L = 2.
WIDE = build(
    ClosSpec(name="wide", pods=2, racks_per_pod=2, hosts_per_rack=1, nics_per_host=2,
             ctsws_per_pod=2, rack_links=2, atsws_per_plane=2, agg_links=2, taper=1.0)
)  # fmt: skip


def _all_pairs(fabric: Fabric) -> FlowSet:
    """One flow between every pair of NICs on different hosts."""
    nics = np.arange(fabric.num_nics)
    src, dst = np.meshgrid(nics, nics, indexing="ij")
    src, dst = src.ravel(), dst.ravel()
    keep = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    return FlowSet.build(src[keep], dst[keep], 100.0)


def _ring(fabric: Fabric, racks: np.ndarray) -> FlowSet:
    """Every NIC of racks[i] sends to the same NIC index of racks[i+1] (cyclically)."""
    per_rack = fabric.hosts_per_rack * fabric.nics_per_host
    src = (racks[:, None] * per_rack + np.arange(per_rack)).ravel()
    dst = (np.roll(racks, -1)[:, None] * per_rack + np.arange(per_rack)).ravel()
    return FlowSet.build(src, dst, 400.0)


def _assert_valid_paths(fabric: Fabric, flows: FlowSet, arcs: np.ndarray) -> None:
    """Each routed row walks from the source NIC to the destination NIC, visiting no node twice."""
    tail, head = fabric.arc_ends
    for f, row in enumerate(arcs):
        hops = [int(a) for a in row if a >= 0]
        if not hops:
            continue
        nodes = [int(tail[hops[0]])] + [int(head[a]) for a in hops]
        assert nodes[0] == fabric.node_id("nic", flows.src_nic[f])
        assert nodes[-1] == fabric.node_id("nic", flows.dst_nic[f])
        for a, b in zip(hops, hops[1:], strict=False):
            assert head[a] == tail[b]
        assert len(set(nodes)) == len(nodes)


def _any_alive(fabric: Fabric, flows: FlowSet, health: LinkHealth) -> np.ndarray:
    """Brute force: does any candidate path of each flow survive?"""
    cap = health.arc_capacity(fabric)
    counts = num_paths(fabric)
    cls = flow_class(fabric, flows.src_nic, flows.dst_nic)
    out = np.zeros(len(flows), dtype=bool)
    for f in range(len(flows)):
        n = counts[cls[f]]
        rows = path_arcs(
            fabric, np.full(n, flows.src_nic[f]), np.full(n, flows.dst_nic[f]), np.arange(n)
        )
        out[f] = path_alive(rows, cap).any()
    return out


def test_hash_is_deterministic_and_seeded() -> None:
    src, dst = np.arange(1000), np.arange(1000)[::-1]
    a = flow_hash(7, src, dst, 0, 0)
    assert a.dtype == np.uint64
    assert np.array_equal(a, flow_hash(7, src, dst, 0, 0))
    for other in (
        flow_hash(8, src, dst, 0, 0),
        flow_hash(7, src, dst, 1, 0),
        flow_hash(7, src, dst, 0, 1),
    ):
        assert (a != other).mean() > 0.99
    # low bits are balanced: usable modulo small next-hop counts
    assert abs((a % np.uint64(2)).mean() - 0.5) < 0.06


def test_ecmp_deterministic_and_seed_sensitive() -> None:
    flows = _all_pairs(WIDE)
    health = LinkHealth.all_up(WIDE)
    a = ecmp(WIDE, flows, health, seed=1)
    assert np.array_equal(a.path, ecmp(WIDE, flows, health, seed=1).path)
    assert (a.path != ecmp(WIDE, flows, health, seed=2).path).mean() > 0.5
    assert (a.path >= 0).all()
    _assert_valid_paths(WIDE, flows, a.arcs(WIDE))


def test_ecmp_spreads_over_all_uplinks() -> None:
    _, a, _ = eecmp(WIDE, _all_pairs(WIDE), LinkHealth.all_up(WIDE), seed=3, qps=16)
    uplink = a.arcs(WIDE)[:, 1]
    rack_ups = [
        WIDE.up(WIDE.rack_link(r, c, k)) for r in range(4) for c in range(2) for k in range(2)
    ]
    # 192 subflows per rack over 4 uplinks: each gets 48 on average
    counts = np.array([(uplink == arc).sum() for arc in rack_ups])
    assert counts.min() > 24 and counts.max() < 72


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, WIDE.num_links - 1), max_size=12), st.integers(0, 2**64 - 1))
def test_ecmp_avoids_down_links_and_routes_whenever_a_path_lives(down: set[int], seed: int) -> None:
    flows = _all_pairs(WIDE)
    health = LinkHealth.all_up(WIDE).down(sorted(down))
    a = ecmp(WIDE, flows, health, seed)
    arcs = a.arcs(WIDE)
    cap = health.arc_capacity(WIDE)
    assert (cap[arcs[arcs >= 0]] > 0).all()
    assert np.array_equal(a.routed, _any_alive(WIDE, flows, health))
    _assert_valid_paths(WIDE, flows, arcs)


def test_ecmp_keeps_degraded_links() -> None:
    flows = _all_pairs(WIDE)
    degraded = WIDE.rack_link(0, 0, 0)
    health = LinkHealth.all_up(WIDE).with_factors({degraded: 0.1})
    arcs = ecmp(WIDE, flows, health, seed=0).arcs(WIDE)
    assert (arcs == WIDE.up(degraded)).any()


def test_ecmp_unroutes_flows_from_a_cut_off_nic(two_rack_pod: Fabric) -> None:
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    health = LinkHealth.all_up(two_rack_pod).down([two_rack_pod.access_link(0)])
    assert ecmp(two_rack_pod, flows, health, 0).path.tolist()[0] == UNROUTED
    assert ecmp(two_rack_pod, flows, health, 0).path.tolist()[1] != UNROUTED


def test_eecmp_splits_every_flow_into_qps() -> None:
    flows = FlowSet.build(
        [0, 1, 2], [6, 7, 4], [400.0, 200.0, 100.0], job=[0, 1, 1], job_ids=("a", "b")
    )
    health = LinkHealth.all_up(WIDE)
    sub, a, parent = eecmp(WIDE, flows, health, seed=5, qps=16)
    assert len(sub) == len(a.flows) == 48
    assert np.bincount(parent).tolist() == [16, 16, 16]
    assert np.allclose(np.bincount(parent, weights=sub.demand), flows.demand)
    assert np.array_equal(sub.src_nic, flows.src_nic[parent])
    assert np.array_equal(sub.job, flows.job[parent]) and sub.job_ids == flows.job_ids
    # queue pairs hash apart: one flow's 16 subflows take more than one path
    assert len(set(a.path[parent == 0].tolist())) > 1
    _assert_valid_paths(WIDE, sub, a.arcs(WIDE))
    # qp 0 is hashed exactly as plain ECMP hashes the flow
    assert np.array_equal(a.path[::16], ecmp(WIDE, flows, health, seed=5).path)


def test_split_qps_one_is_identity() -> None:
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    sub, parent, qp = split_qps(flows, 1)
    assert np.array_equal(sub.demand, flows.demand)
    assert parent.tolist() == [0, 1] and qp.tolist() == [0, 0]


def test_pinning_collision_free_on_full_pod_ring() -> None:
    pod = build(
        ClosSpec(
            name="pod8", pods=1, racks_per_pod=8, hosts_per_rack=2, nics_per_host=4, ctsws_per_pod=8
        )
    )
    flows = _ring(pod, np.arange(8))
    health = LinkHealth.all_up(pod)
    report = simulate(pod, health, pinning(pod, flows, health))
    assert report.collided_links == 0 and report.max_flows_per_link == 1
    assert report.worst_flow_share == 1.0
    # ECMP on the same traffic collides (and the seed does not matter much)
    assert simulate(pod, health, ecmp(pod, flows, health, seed=0)).collided_links > 0


def test_pinning_collision_free_with_parallel_rack_links() -> None:
    pod = build(
        ClosSpec(
            name="pod4k2",
            pods=1,
            racks_per_pod=4,
            hosts_per_rack=2,
            nics_per_host=4,
            ctsws_per_pod=4,
            rack_links=2,
        )
    )
    flows = _ring(pod, np.arange(4))
    health = LinkHealth.all_up(pod)
    assert simulate(pod, health, pinning(pod, flows, health)).collided_links == 0


def test_pinning_breaks_with_fragmented_jobs_and_failures() -> None:
    pod = build(
        ClosSpec(
            name="pod8", pods=1, racks_per_pod=8, hosts_per_rack=2, nics_per_host=4, ctsws_per_pod=8
        )
    )
    health = LinkHealth.all_up(pod)
    # host 0 and host 1 of rack 0 both send NIC index 0 traffic to different racks:
    # destinations with the same in-rack index share uplink c = 0
    flows = FlowSet.build([0, 4], [8, 16], 400.0)
    assert simulate(pod, health, pinning(pod, flows, health)).collided_links == 1
    # a failed uplink pushes its flows onto the next one, colliding with what is pinned there
    ring = _ring(pod, np.arange(8))
    broken = health.down([pod.rack_link(0, 0)])
    a = pinning(pod, ring, broken)
    assert a.routed.all()
    cap = broken.arc_capacity(pod)
    arcs = a.arcs(pod)
    assert (cap[arcs[arcs >= 0]] > 0).all()
    report = simulate(pod, broken, a)
    assert report.collided_links >= 1 and report.worst_flow_share == 0.5


def test_pinning_cross_pod_is_valid_and_avoids_down_links() -> None:
    flows = _all_pairs(WIDE)
    health = LinkHealth.all_up(WIDE).down(
        [WIDE.agg_link(0, 0, 0, 0), WIDE.rack_link(1, 1, 1), WIDE.agg_link(1, 1, 1, 1)]
    )
    a = pinning(WIDE, flows, health)
    assert a.routed.all()
    assert np.array_equal(a.path, pinning(WIDE, flows, health).path)
    arcs = a.arcs(WIDE)
    assert (health.arc_capacity(WIDE)[arcs[arcs >= 0]] > 0).all()
    _assert_valid_paths(WIDE, flows, arcs)


def test_empty_flows(tiny: Fabric) -> None:
    health = LinkHealth.all_up(tiny)
    assert len(ecmp(tiny, FlowSet.empty(), health, 0).path) == 0
    assert len(pinning(tiny, FlowSet.empty(), health).path) == 0
