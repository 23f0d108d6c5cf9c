"""Bipartite edge colouring and the collision-free colouring of a 1:1 pod."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED
from controller.model.clos import ClosSpec, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import path_alive
from controller.solver.colouring import (
    _vertex_slots,
    collision_count,
    colour_assign,
    edge_colouring,
)
from controller.solver.problem import Problem


def _proper(left, right, colour) -> bool:
    ok = colour >= 0
    pairs_l = set()
    pairs_r = set()
    for u, v, x in zip(left[ok].tolist(), right[ok].tolist(), colour[ok].tolist(), strict=True):
        if (u, x) in pairs_l or (v, x) in pairs_r:
            return False
        pairs_l.add((u, x))
        pairs_r.add((v, x))
    return True


@st.composite
def multigraphs(draw):
    n = draw(st.integers(1, 8))
    delta = draw(st.integers(1, 5))
    # a random delta-bounded multigraph: union of up to delta random partial matchings
    left, right = [], []
    for _ in range(delta):
        perm = draw(st.permutations(list(range(n))))
        keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        for u, (v, k) in enumerate(zip(perm, keep, strict=True)):
            if k:
                left.append(u)
                right.append(v)
    return n, delta, np.array(left, np.int64), np.array(right, np.int64)


@settings(max_examples=150, deadline=None)
@given(multigraphs())
def test_konig_every_edge_coloured_properly(graph):
    n, delta, left, right = graph
    colour = edge_colouring(left, right, delta, num_left=n, num_right=n)
    assert (colour >= 0).all()
    assert (colour < delta).all()
    assert _proper(left, right, colour)


def test_forbidden_colours_respected():
    # 2x2, degree 2 everywhere, colour 0 forbidden at left vertex 0: still colourable
    left = np.array([0, 0, 1, 1])
    right = np.array([0, 1, 0, 1])
    forbid = np.zeros((2, 3), bool)
    forbid[0, 0] = True
    colour = edge_colouring(left, right, 3, forbid_left=forbid)
    assert (colour >= 0).all() and _proper(left, right, colour)
    assert not (colour[left == 0] == 0).any()


def test_impossible_edges_reported():
    left = np.array([0, 0, 0])
    right = np.array([0, 1, 2])
    colour = edge_colouring(left, right, 2)
    assert (colour == -1).sum() == 1
    assert _proper(left, right, colour)


def _pod(racks=4, hosts=1, nics=4, ctsws=4, k=1):
    return build(
        ClosSpec(name="t", pods=1, racks_per_pod=racks, hosts_per_rack=hosts,
                 nics_per_host=nics, ctsws_per_pod=ctsws, rack_links=k)
    )  # fmt: skip


def test_ring_in_pod_is_collision_free():
    fabric = _pod(racks=6, hosts=2, nics=4, ctsws=8)
    nics = np.arange(fabric.num_nics)
    host = nics // 4
    dst = ((host + 2) % fabric.num_hosts) * 4 + nics % 4
    flows = FlowSet.build(nics, dst, 400.0)
    out = colour_assign(Problem(fabric, LinkHealth.all_up(fabric), flows))
    assert out is not None and out.failed.size == 0
    assert collision_count(fabric, out.assignment) == 0
    load = out.assignment.link_load(fabric)
    assert np.max(load / fabric.capacity) == 1.0


@st.composite
def pod_flows(draw):
    ctsws = draw(st.integers(1, 4))
    k = draw(st.integers(1, 2))
    racks = draw(st.integers(2, 5))
    nics = ctsws * k  # 1 host per rack: the RTSW has exactly C*K NICs
    n_flows = draw(st.integers(0, racks * nics))
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, racks * nics - 1), st.integers(0, racks - 1)),
            min_size=n_flows, max_size=n_flows, unique_by=lambda t: t[0],
        )
    )  # fmt: skip
    return ctsws, k, racks, nics, pairs


@settings(max_examples=80, deadline=None)
@given(pod_flows())
def test_random_pod_flows_zero_collisions(case):
    ctsws, k, racks, nics, pairs = case
    fabric = _pod(racks=racks, hosts=1, nics=nics, ctsws=ctsws, k=k)
    src, dst = [], []
    used_dst: set[int] = set()
    for s, r in pairs:
        if r == s // nics:
            r = (r + 1) % racks
        d = r * nics + s % nics
        for _ in range(nics):  # at most one flow into each NIC: degree <= C*K
            if d not in used_dst:
                break
            d = r * nics + (d + 1) % nics
        if d in used_dst or d // nics == s // nics:
            continue
        used_dst.add(d)
        src.append(s)
        dst.append(d)
    flows = FlowSet.build(src, dst, 400.0)
    health = LinkHealth.all_up(fabric)
    out = colour_assign(Problem(fabric, health, flows))
    assert out is not None and out.failed.size == 0
    assert collision_count(fabric, out.assignment) == 0
    assert (out.assignment.path != UNROUTED).all()
    assert path_alive(out.assignment.arcs(fabric), health.arc_capacity(fabric)).all()
    again = colour_assign(Problem(fabric, health, flows))
    assert np.array_equal(again.assignment.path, out.assignment.path)


def test_down_uplink_avoided():
    fabric = _pod(racks=2, hosts=1, nics=2, ctsws=4)
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(0, 0), fabric.rack_link(1, 1)])
    out = colour_assign(Problem(fabric, health, flows))
    assert out.failed.size == 0
    assert path_alive(out.assignment.arcs(fabric), health.arc_capacity(fabric)).all()
    assert collision_count(fabric, out.assignment) == 0


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_vertex_slots_is_the_smallest_cap_that_holds_the_degree(n, links, data):
    """Against the definition, one cap at a time: the smallest s >= 1 whose
    sum(min(slots, s)) reaches the degree; a vertex no cap serves keeps its own largest
    slot count."""
    row = st.lists(st.integers(0, 9), min_size=links, max_size=links)
    slots = np.array(data.draw(st.lists(row, min_size=n, max_size=n)))
    degree = np.array(data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    want = []
    for row, d in zip(slots.tolist(), degree.tolist(), strict=True):
        caps = [c for c in range(1, max(row) + 1) if sum(min(x, c) for x in row) >= d]
        want.append(caps[0] if caps else (1 if d == 0 else max(row)))
    assert _vertex_slots(slots, degree).tolist() == want


def test_a_rack_cut_off_does_not_make_every_slot_a_colour():
    """The defect: flows of 1 Mb/s fit 400,000 to a 400G uplink; a rack whose uplinks were
    all down took the fabric's largest slot count as its cap, so the colouring peeled
    400,000 x CTSWs colour classes (a 3-flow solve took minutes; on 100 Tb/s links it never
    ended). The colours now follow what the racks with flows need."""
    fabric = _pod(racks=3, hosts=1, nics=1, ctsws=3)
    assert _vertex_slots(np.array([[400_000] * 3, [0] * 3]), np.array([1, 1])).tolist() == [1, 0]
    cut = [fabric.rack_link(1, c) for c in range(3)]
    health = LinkHealth.all_up(fabric).down(cut)
    flows = FlowSet.build([0, 1, 2], [1, 2, 0], 0.001)
    out = colour_assign(Problem(fabric, health, flows))
    assert out is not None and out.slots == 1
    assert out.failed.tolist() == [0, 1]  # to and from the rack cut off


def test_unequal_demands_not_applicable():
    fabric = _pod()
    flows = FlowSet.build([0, 1], [4, 5], [400.0, 100.0])
    assert colour_assign(Problem(fabric, LinkHealth.all_up(fabric), flows)) is None


def test_cross_pod_agg_is_equitable(small):
    # every NIC of pod 0 sends to the same NIC of the mirrored host in pod 1
    half = small.num_nics // 2
    flows = FlowSet.build(np.arange(half), np.arange(half) + half, 400.0)
    out = colour_assign(Problem(small, LinkHealth.all_up(small), flows))
    assert out.failed.size == 0
    assert collision_count(small, out.assignment) == 0
    load = out.assignment.link_load(small)
    agg = small.agg_base + np.arange(small.num_agg_links)
    up = load[2 * agg].reshape(small.pods, small.ctsws_per_pod, -1)[0]
    # per CTSW, its cross flows split evenly over its agg links (within one flow)
    assert (up.max(axis=1) - up.min(axis=1) <= 400.0).all()
