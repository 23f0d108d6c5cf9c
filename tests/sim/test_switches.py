"""Emulated switches: ECMP defaults, TE overrides, link state, walk outcomes and faults."""

from __future__ import annotations

import numpy as np
import pytest

from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.routes.entries import build_routes
from controller.routes.tables import Entry
from sim.switches import (
    DELIVERED,
    DROPPED,
    LOOPED,
    EmulatedFabric,
    Fault,
    SwitchDown,
    SwitchRejected,
    SwitchTimeout,
    verify,
)

WIDE = PRESETS["wide"]


@pytest.fixture(params=["tiny", "small", "wide"])
def fabric(request):
    return build(WIDE if request.param == "wide" else PRESETS[request.param])


def all_pairs(fabric):
    nics = np.arange(fabric.num_nics)
    src, dst = np.meshgrid(nics, nics, indexing="ij")
    keep = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    return src[keep], dst[keep]


def valid_walk(fabric, arcs):
    """Consecutive arcs, starting at the source NIC, up before down."""
    src, dst = fabric.arc_ends
    arcs = [a for a in arcs if a >= 0]
    for a, b in zip(arcs, arcs[1:], strict=False):
        assert dst[a] == src[b]
    directions = [a % 2 for a in arcs]
    assert directions == sorted(directions)


def test_ecmp_delivers_every_pair_on_a_valley_free_path(fabric):
    em = EmulatedFabric(fabric)
    src, dst = all_pairs(fabric)
    walks = em.forward(src, dst)
    assert (walks.status == DELIVERED).all()
    for i in range(0, src.size, 7):
        valid_walk(fabric, walks.arcs[i])
        assert fabric.arc_ends[1][walks.arcs[i][walks.arcs[i] >= 0][-1]] == fabric.node_id(
            "nic", dst[i]
        )


def test_ecmp_is_deterministic_and_seeded(small: Fabric):
    fabric = small
    src, dst = all_pairs(fabric)
    a = EmulatedFabric(fabric, seed=1).forward(src, dst).arcs
    b = EmulatedFabric(fabric, seed=1).forward(src, dst).arcs
    c = EmulatedFabric(fabric, seed=2).forward(src, dst).arcs
    assert (a == b).all()
    assert (a != c).any()


def test_ecmp_spreads_over_all_uplinks(small: Fabric):
    fabric = small
    src, dst = all_pairs(fabric)
    walks = EmulatedFabric(fabric).forward(src, dst)
    second = walks.arcs[:, 1]
    rack_up = second[fabric.link_kind[second // 2] == 1]
    first_rack = rack_up[(rack_up // 2) < fabric.rack_link(1, 0)]
    assert np.unique(first_rack).size == fabric.ctsws_per_pod


def test_te_entry_is_followed_and_ignored_when_its_link_is_down(tiny: Fabric):
    fabric = tiny
    em = EmulatedFabric(fabric)
    src, dst = 0, fabric.nic_id(2, 0)  # rack 0 -> rack 1, same pod
    uplink = fabric.rack_link(0, 3)
    em.program("rtsw-p0-r0", [Entry("rtsw-p0-r0", fabric.access_link(src), 2, uplink)])
    assert em.walk(src, dst).arcs[1] == fabric.up(uplink)
    em.set_links([uplink], up=False)
    walk = em.walk(src, dst)
    assert walk.status == "delivered"
    assert walk.arcs[1] != fabric.up(uplink)


def test_te_entry_into_a_dead_end_is_not_followed(tiny: Fabric):
    fabric = tiny
    em = EmulatedFabric(fabric)
    src, dst = 0, fabric.nic_id(2, 0)
    uplink = fabric.rack_link(0, 3)
    em.program("rtsw-p0-r0", [Entry("rtsw-p0-r0", fabric.access_link(src), 2, uplink)])
    em.set_links([fabric.rack_link(1, 3)], up=False)  # ctsw-p0-c3 lost rack 1
    walk = em.walk(src, dst)
    assert walk.status == "delivered"
    assert walk.arcs[1] != fabric.up(uplink)


def test_unreachable_destination_is_dropped(tiny: Fabric):
    fabric = tiny
    em = EmulatedFabric(fabric)
    dst = fabric.nic_id(5, 1)
    em.set_links([fabric.access_link(dst)], up=False)
    assert em.walk(0, dst).status == "dropped"
    em.set_links([fabric.access_link(dst)], up=True)
    em.set_links([fabric.rack_link(fabric.rack_of_host(5), c) for c in range(4)], up=False)
    assert em.walk(0, dst).status == "dropped"
    assert em.forward([0], [dst]).status[0] == DROPPED


def test_bad_entries_that_bounce_are_reported_as_loops(tiny: Fabric):
    fabric = tiny
    em = EmulatedFabric(fabric)
    src, dst_host = 0, 2
    link = fabric.rack_link(0, 0)
    em.program("rtsw-p0-r0", [
        Entry("rtsw-p0-r0", fabric.access_link(src), dst_host, link),
        Entry("rtsw-p0-r0", link, dst_host, link, owner="someone"),
    ])  # fmt: skip
    em.program("ctsw-p0-c0", [Entry("ctsw-p0-c0", link, dst_host, link, owner="someone")])
    walks = em.forward([src], [fabric.nic_id(dst_host, 0)])
    assert walks.status[0] == LOOPED


def test_verify_checks_assigned_paths():
    fabric = build(WIDE)
    src = np.array([0, 1, 4])
    dst = np.array([fabric.nic_id(5, 0), fabric.nic_id(6, 1), fabric.nic_id(3, 0)])
    path = np.array([37, 50, UNROUTED])
    assignment = Assignment(FlowSet.build(src, dst, 100.0), path)
    em = EmulatedFabric(fabric)
    assert verify(fabric, em, assignment).off_path.size >= 1
    routes = build_routes(fabric, assignment)
    for switch in routes.switches():
        em.program(switch, routes.table(switch))
    report = verify(fabric, em, assignment)
    assert report.ok, report.summary()


def test_program_is_all_or_nothing_and_respects_capacity(tiny: Fabric):
    fabric = tiny
    em = EmulatedFabric(fabric, capacity=1)
    good = Entry("rtsw-p0-r0", 0, 2, fabric.rack_link(0, 1))
    bad = Entry("rtsw-p0-r0", 0, 3, fabric.rack_link(1, 1))  # not a link of rtsw-p0-r0
    with pytest.raises(SwitchRejected, match="next_hop"):
        em.program("rtsw-p0-r0", [good, bad])
    assert em.read("rtsw-p0-r0") == ()
    em.program("rtsw-p0-r0", [good])
    with pytest.raises(SwitchRejected, match="capacity"):
        em.program("rtsw-p0-r0", [Entry("rtsw-p0-r0", 1, 2, fabric.rack_link(0, 1))])
    assert em.read("rtsw-p0-r0") == (good,)


def test_faults(tiny: Fabric):
    fabric = tiny
    em = EmulatedFabric(fabric)
    name = "rtsw-p0-r0"
    entries = [Entry(name, n, 2, fabric.rack_link(0, n)) for n in range(4)]
    em.inject(name, Fault("timeout", delay=0.01))
    with pytest.raises(SwitchTimeout):
        em.program(name, entries)
    em.inject(name, Fault("reject"))
    with pytest.raises(SwitchRejected):
        em.program(name, entries)
    assert em.read(name) == ()
    em.inject(name, Fault("die_halfway"))
    with pytest.raises(SwitchDown):
        em.program(name, entries)
    with pytest.raises(SwitchDown):
        em.read(name)
    assert len(em.routes().table(name)) == 2  # the data plane kept half the batch
    em.restart(name)
    assert em.read(name) == ()
    em.program(name, entries)
    em.inject(name, Fault("restart"))
    with pytest.raises(SwitchDown):
        em.program(name, entries[:1])
    assert em.read(name) == ()
    em.inject(name, Fault("link_down", links=(fabric.rack_link(0, 0),)))
    em.program(name, entries)
    assert not em.alive[fabric.rack_link(0, 0)]
    assert len(em.read(name)) == 4
    with pytest.raises(ValueError, match="known"):
        Fault("melt")


def test_forward_is_fast_enough_for_every_flow_of_a_large_fabric(pod: Fabric):
    fabric = pod
    src = np.arange(fabric.num_nics)
    dst = (src + fabric.hosts_per_rack * fabric.nics_per_host) % fabric.num_nics
    walks = EmulatedFabric(fabric).forward(src, dst)
    assert (walks.status == DELIVERED).all()


@pytest.mark.parametrize("planes", [1, 2])
def test_a_rail_or_dual_plane_fabric_delivers_every_rail_aligned_pair_and_keeps_te(planes: int):
    """S = 4 RTSWs a rack (planes: 1 rail-optimized, 2 dual-plane): ECMP delivers NIC n to
    NIC n of every other host through the NIC's own RTSW, never across a plane, and TE
    routes are followed."""
    from controller.model.clos import ClosSpec
    from controller.model.health import LinkHealth
    from controller.model.jobs import jobs_flows
    from controller.solver.solve import solve
    from sim.jobmix import random_jobs

    fabric = build(ClosSpec(name="rails", pods=2, racks_per_pod=2, hosts_per_rack=2,
                            nics_per_host=4, rtsws_per_rack=4, planes=planes, ctsws_per_pod=4,
                            atsws_per_plane=1, taper=1.0))  # fmt: skip
    em = EmulatedFabric(fabric)
    src, dst = all_pairs(fabric)
    aligned = src % fabric.nics_per_host == dst % fabric.nics_per_host
    src, dst = src[aligned], dst[aligned]
    walks = em.forward(src, dst)
    assert (walks.status == DELIVERED).all()
    for i in range(src.size):
        valid_walk(fabric, walks.arcs[i])
        used = walks.arcs[i][walks.arcs[i] >= 0] // 2
        assert fabric.installed[used].all()
        assert fabric.arc_ends[1][2 * used[0]] == fabric.node_id("rtsw", fabric.rtsw_of_nic(src[i]))
    flows = jobs_flows(fabric, random_jobs(fabric, seed=2))
    res = solve(fabric, LinkHealth.all_up(fabric), flows)
    routes = build_routes(fabric, res.assignment)
    for switch in routes.switches():
        em.program(switch, routes.table(switch))
    report = verify(fabric, em, res.assignment)
    assert report.ok, report.summary()
