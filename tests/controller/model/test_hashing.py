"""The fabric's own routing: capacity-aware WCMP, and the data plane of a partial TE routing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import ClosSpec, build
from controller.model.dataplane import carried
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.hashing import (
    WcmpTables,
    _Bandwidth,
    eecmp,
    hashed,
    hashed_routes,
    wcmp,
)
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD, decode, flow_class
from controller.routes.entries import build_routes
from sim.switches import EmulatedFabric

# Every digit of the path numbering is exercised: K = 2 rack links, A = 2 ATSWs, L = 2.
WIDE = build(
    ClosSpec(name="wide", pods=2, racks_per_pod=2, hosts_per_rack=1, nics_per_host=2,
             ctsws_per_pod=2, rack_links=2, atsws_per_plane=2, agg_links=2, taper=1.0)
)  # fmt: skip


def _all_pairs(fabric: Fabric) -> FlowSet:
    nics = np.arange(fabric.num_nics)
    src, dst = np.meshgrid(nics, nics, indexing="ij")
    src, dst = src.ravel(), dst.ravel()
    keep = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    return FlowSet.build(src[keep], dst[keep], 100.0)


def _uplink_counts(fabric: Fabric, health: LinkHealth, kind: str) -> np.ndarray:
    """Subflows of every pair on each uplink of rack 0, over many seeds."""
    flows = _all_pairs(fabric)
    flows = flows.take(np.flatnonzero(fabric.rack_of_nic(flows.src_nic) == 0))
    counts = np.zeros(fabric.ctsws_per_pod * fabric.rack_links)
    for seed in range(40):
        _, a, _ = hashed(kind, fabric, flows, health, seed, 16)
        up = a.arcs(fabric)[:, 1]
        for i, (c, k) in enumerate(np.ndindex(fabric.ctsws_per_pod, fabric.rack_links)):
            counts[i] += (up == fabric.up(fabric.rack_link(0, c, k))).sum()
    return counts / counts.sum()


def test_wcmp_weighs_next_hops_by_the_capacity_left_behind_them() -> None:
    healthy = LinkHealth.all_up(WIDE)
    even = _uplink_counts(WIDE, healthy, "wcmp")
    assert np.allclose(even, 0.25, atol=0.03)  # four equal uplinks
    # an uplink at a fifth of its speed draws about a fifth of the share of the others
    slow = healthy.with_factors({WIDE.rack_link(0, 0, 0): 0.2})
    share = _uplink_counts(WIDE, slow, "wcmp")
    assert share[0] < 0.09 and share[0] > 0.03
    # E-ECMP ignores capacity
    assert _uplink_counts(WIDE, slow, "eecmp")[0] > 0.2
    # capacity lost behind CTSW 1 (both its downlinks to rack 1 at half speed) moves traffic
    # to CTSW 0 for flows to rack 1, though the uplinks themselves are healthy
    behind = healthy.with_factors({WIDE.rack_link(1, 1, 0): 0.5, WIDE.rack_link(1, 1, 1): 0.5})
    flows = FlowSet.build(np.arange(0, 2), np.arange(2, 4), 100.0)  # rack 0 -> rack 1
    on_c1 = [
        (decode(WIDE, flow_class(WIDE, s.src_nic, s.dst_nic), a.path)["c"] == 1).mean()
        for s, a, _ in (wcmp(WIDE, flows, behind, seed, 16) for seed in range(60))
    ]
    assert 0.25 < float(np.mean(on_c1)) < 0.42  # a third, against half for E-ECMP


@settings(max_examples=30, deadline=None)
@given(st.sets(st.integers(0, WIDE.num_links - 1), max_size=10), st.integers(0, 2**32))
def test_wcmp_uses_only_live_links_and_routes_what_ecmp_routes(down: set[int], seed: int) -> None:
    flows = _all_pairs(WIDE)
    health = LinkHealth.all_up(WIDE).down(sorted(down))
    _, w, _ = wcmp(WIDE, flows, health, seed, 2)
    _, e, _ = eecmp(WIDE, flows, health, seed, 2)
    arcs = w.arcs(WIDE)
    assert (health.arc_capacity(WIDE)[arcs[arcs >= 0]] > 0).all()
    assert np.array_equal(w.routed, e.routed)
    assert np.array_equal(w.path, wcmp(WIDE, flows, health, seed, 2)[1].path)


def test_without_te_rows_the_data_plane_is_the_hashing_itself() -> None:
    flows = _all_pairs(WIDE)
    health = LinkHealth.all_up(WIDE).with_factors({3: 0.0, 20: 0.5})
    none = Assignment(flows, np.full(len(flows), UNROUTED, np.int64))
    for kind in ("eecmp", "wcmp"):
        plane = carried(WIDE, health, none, np.arange(len(flows)), kind=kind, seed=5, qps=4)
        sub, ref, parent = hashed(kind, WIDE, flows, health, 5, 4)
        assert np.array_equal(plane.arcs, ref.arcs(WIDE))
        assert np.array_equal(plane.parent, parent)
        assert np.allclose(plane.flows.demand, sub.demand)
        assert plane.walked == len(sub) and (plane.weight == 1).all()


def test_a_row_without_entries_follows_the_entries_it_meets_like_the_switches() -> None:
    # One uplink per rack: every flow from rack 0 enters its CTSW on the same link, so a TE
    # row's CTSW and ATSW entries for a destination host steer every packet to that host.
    fabric = build(ClosSpec(name="one-up", pods=2, racks_per_pod=1, hosts_per_rack=2,
                            nics_per_host=2, ctsws_per_pod=1, rack_links=1, atsws_per_plane=2,
                            agg_links=2, taper=1.0))  # fmt: skip
    health = LinkHealth.all_up(fabric)
    # NICs 0 and 1 (host 0, rack 0 of pod 0) send to host 2 (pod 1)
    flows = FlowSet.build([0, 1], [4, 5], 100.0)
    assert (flow_class(fabric, flows.src_nic, flows.dst_nic) == CROSS_POD).all()
    for p in range(8):
        te = Assignment(flows, np.array([p, UNROUTED]))
        plane = carried(fabric, health, te, np.arange(2), kind="eecmp", seed=1, qps=3)
        walked = plane.arcs[1:]
        assert plane.walked == 3
        # the TE row's entries take the walked QPs to its own switches, hop by hop
        assert (walked[:, 1:5] == plane.arcs[0, 1:5]).all()
        # as the emulated switches forward them
        em = EmulatedFabric(fabric)
        routes = build_routes(fabric, te)
        for sw in routes.switches():
            em.program(sw, routes.table(sw))
        walk = em.forward([1], [5])
        assert (walk.arcs[0, 1:5] == plane.arcs[0, 1:5]).all()


def test_bucket_rows_without_a_path_ride_as_one_qp_each() -> None:
    flows = FlowSet(np.array([0, 0]), np.array([6, 6]), np.array([25.0, 25.0]),
                    np.zeros(2, np.int64), ("j",), np.array([3, ALL_QPS]))  # fmt: skip
    plane = carried(WIDE, LinkHealth.all_up(WIDE),
                    Assignment(flows, np.full(2, UNROUTED, np.int64)), np.array([0, 0]),
                    kind="eecmp", seed=2, qps=4)  # fmt: skip
    assert plane.walked == 5 and plane.flows.qp.tolist() == [3, 0, 1, 2, 3]
    assert np.allclose(plane.flows.demand, [25.0, 6.25, 6.25, 6.25, 6.25])


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.sampled_from([1, 2, 4]),
    st.integers(1, 4), st.integers(1, 2), st.integers(1, 2), st.integers(1, 2),
    st.sampled_from([1, 2]), st.sampled_from(["eecmp", "wcmp"]), st.integers(0, 2**32),
)  # fmt: skip
def test_with_every_link_up_every_flow_has_a_hashed_path(
    pods: int, racks: int, hosts: int, nics: int, ctsws: int, rack_links: int, atsws: int,
    agg_links: int, slots: int, kind: str, seed: int,
) -> None:  # fmt: skip
    """What lets a solve skip the walk naming hashed flows with no path (solver.solve's
    `_placed_around`): with every link's factor above 0, the fabric's hashing routes every
    flow; a fabric with links not installed (planes) has a factor 0 in every health."""
    if nics % slots:
        slots = 1
    if pods > 1 and slots > 1:  # a shape the fabric refuses (Fabric's own check)
        rack_links = 1
    spec = ClosSpec(name="up", pods=pods, racks_per_pod=racks, hosts_per_rack=hosts,
                    nics_per_host=nics, ctsws_per_pod=ctsws * slots, rack_links=rack_links,
                    atsws_per_plane=atsws if pods > 1 else 0, agg_links=agg_links,
                    taper=1.0 if pods > 1 else None, rtsws_per_rack=slots)  # fmt: skip
    fabric = build(spec)
    health = LinkHealth.all_up(fabric)
    assert (health.factor > 0).all()
    flows = _all_pairs(fabric)
    path, _ = hashed_routes(kind, fabric, flows, health, seed, 2)
    assert (path >= 0).all()
    if slots == 2:  # two planes: the cross-plane cables are not installed
        planes = build(replace(spec, planes=2))
        assert (LinkHealth.all_up(planes).factor == 0).any()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4),
       st.sampled_from([1, 2, 7, 8, 9, 16]), st.integers(1, 2),
       st.integers(0, 2**32 - 1))  # fmt: skip
def test_wcmp_tables_of_another_health_equal_the_tables_made_whole(
    pods: int, racks: int, ctsws: int, atsws: int, links: int, seed: int
) -> None:
    """WcmpTables.of (only the cells whose inputs differ summed again) against
    kernel_tables made whole, to the bit: a few links down or degraded, and one in every
    tier at once, over ATSW counts on both sides of numpy's 8-wide pairwise sums."""
    spec = ClosSpec(pods=pods + 1, racks_per_pod=racks, hosts_per_rack=1, nics_per_host=2,
                    ctsws_per_pod=ctsws, atsws_per_plane=atsws, agg_links=links,
                    taper=1.0)  # fmt: skip
    fab = build(spec)
    rng = np.random.default_rng(seed)
    base = LinkHealth(rng.choice([1.0, 1.0, 0.5, 0.0], size=fab.num_links))
    kept = WcmpTables(fab, base)
    for count in (1, 2, fab.num_links // 3):
        factor = base.factor.copy()
        at = rng.choice(fab.num_links, size=count, replace=False)
        factor[at] = rng.choice([0.0, 0.3, 1.0], size=count)
        health = LinkHealth(factor)
        got, want = kept.of(health), _Bandwidth.of(fab, health).kernel_tables()
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and np.array_equal(g, w)


def test_wcmp_tables_of_each_single_failure_equal_the_tables_made_whole() -> None:
    """Every link down alone (the sweep's case: few cells differ, so they are summed again
    alone) on a fabric with 8 ATSWs a plane and two links to each."""
    fab = build(ClosSpec(pods=4, racks_per_pod=4, hosts_per_rack=1, nics_per_host=2,
                         ctsws_per_pod=4, atsws_per_plane=8, agg_links=2, taper=1.0))  # fmt: skip
    base = LinkHealth.all_up(fab)
    kept = WcmpTables(fab, base)
    total = fab.pods * fab.num_rtsws * fab.ctsws_per_pod
    partial = 0
    for link in range(fab.num_links):
        factor = base.factor.copy()
        factor[link] = 0.0
        health = LinkHealth(factor)
        got, want = kept.of(health), _Bandwidth.of(fab, health).kernel_tables()
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        partial += int((got[3] != kept.tables[3]).sum() * 4 <= total)
    assert partial == fab.num_links  # the cells changed are few for each
