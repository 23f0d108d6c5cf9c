"""Route entries per tier, aggregation, conflicts, determinism and table capacity."""

from __future__ import annotations

import numpy as np
import pytest

from controller.errors import RouteConflict, RouteError
from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.routes.budget import fit_tables, table_usage, tables_fit
from controller.routes.checks import entry_problem, entry_role, switch_ports
from controller.routes.entries import (
    ATSW_DOWN,
    CTSW_DOWN,
    CTSW_UP,
    RTSW_UP,
    align_entries,
    build_routes,
    route_conflicts,
)
from controller.routes.tables import OWNER, Entry, RouteSet

WIDE = PRESETS["wide"]


def index(fabric, c=0, ku=0, j=0, mu=0, md=0, kd=0, cross=False):
    """Structured path index (see controller.model.paths)."""
    k, a, m = fabric.rack_links, fabric.atsws_per_plane, fabric.agg_links
    if not cross:
        return (c * k + ku) * k + kd
    return ((((c * k + ku) * a + j) * m + mu) * m + md) * k + kd


def assign(src, dst, path, demand=100.0):
    return Assignment(FlowSet.build(src, dst, demand), np.array(path, dtype=np.int64))


def named(fabric, routes):
    """Entries as readable (switch, in_port, dst host, next hop) names."""
    return [
        (e.switch, fabric.link_name(e.in_port), fabric.host_name(e.dst_host),
         fabric.link_name(e.next_hop))
        for e in routes
    ]  # fmt: skip


def test_same_pod_flow_on_tiny_needs_one_rtsw_entry(tiny: Fabric):
    fabric = tiny
    dst = fabric.nic_id(2, 0)  # rack 1 of pod 0
    routes = build_routes(fabric, assign([0], [dst], [index(fabric, c=3)]))
    assert named(fabric, routes) == [
        ("rtsw-p0-r0", "host-p0-r0-h0/nic0:rtsw-p0-r0", "host-p0-r1-h0", "rtsw-p0-r0:ctsw-p0-c3")
    ]
    assert next(iter(routes)).owner == OWNER


def test_cross_pod_flow_on_tiny_needs_only_the_rtsw_entry(tiny: Fabric):
    fabric = tiny  # A = L = K = 1: no choice above the RTSW
    dst = fabric.nic_id(4, 1)
    routes = build_routes(fabric, assign([1], [dst], [index(fabric, c=2, cross=True)]))
    assert routes.switches() == ("rtsw-p0-r0",)


def test_cross_pod_flow_on_wide_fabric_gets_an_entry_per_tier():
    fabric = build(WIDE)
    dst = fabric.nic_id(6, 1)  # pod 1, rack 3
    p = index(fabric, c=1, ku=1, j=0, mu=1, md=0, kd=1, cross=True)
    routes = build_routes(fabric, assign([0], [dst], [p]))
    assert named(fabric, routes) == [
        ("atsw-c1-a0", "ctsw-p0-c1:atsw-c1-a0#1", "host-p1-r1-h0", "ctsw-p1-c1:atsw-c1-a0#0"),
        ("ctsw-p0-c1", "rtsw-p0-r0:ctsw-p0-c1#1", "host-p1-r1-h0", "ctsw-p0-c1:atsw-c1-a0#1"),
        ("ctsw-p1-c1", "ctsw-p1-c1:atsw-c1-a0#0", "host-p1-r1-h0", "rtsw-p1-r1:ctsw-p1-c1#1"),
        ("rtsw-p0-r0", "host-p0-r0-h0/nic0:rtsw-p0-r0", "host-p1-r1-h0", "rtsw-p0-r0:ctsw-p0-c1#1"),
    ]
    roles = {e.switch: entry_role(fabric, e) for e in routes}
    assert roles == {"rtsw-p0-r0": RTSW_UP, "ctsw-p0-c1": CTSW_UP, "atsw-c1-a0": ATSW_DOWN,
                     "ctsw-p1-c1": CTSW_DOWN}  # fmt: skip


def test_same_pod_flow_with_parallel_links_gets_a_ctsw_down_entry():
    fabric = build(WIDE)
    dst = fabric.nic_id(2, 0)
    routes = build_routes(fabric, assign([0], [dst], [index(fabric, c=0, ku=1, kd=0)]))
    assert named(fabric, routes) == [
        ("ctsw-p0-c0", "rtsw-p0-r0:ctsw-p0-c0#1", "host-p0-r1-h0", "rtsw-p0-r1:ctsw-p0-c0#0"),
        ("rtsw-p0-r0", "host-p0-r0-h0/nic0:rtsw-p0-r0", "host-p0-r1-h0", "rtsw-p0-r0:ctsw-p0-c0#1"),
    ]


def test_same_rack_and_unrouted_flows_need_nothing(tiny: Fabric):
    fabric = tiny
    routes = build_routes(fabric, assign([0, 1], [fabric.nic_id(1, 0), 6], [0, UNROUTED]))
    assert len(routes) == 0


def test_flows_sharing_key_and_next_hop_share_one_entry():
    fabric = build(WIDE)
    # Two NICs of host 0 to host 5 on the same CTSW uplink member: the CTSW, ATSW and
    # destination CTSW entries are keyed the same and agree.
    p = index(fabric, c=1, ku=0, j=1, mu=0, md=1, kd=0, cross=True)
    routes = build_routes(fabric, assign([0, 1], [10, 11], [p, p]))
    assert routes.counts() == {"atsw-c1-a1": 1, "ctsw-p0-c1": 1, "ctsw-p1-c1": 1,
                               "rtsw-p0-r0": 2}  # fmt: skip


def test_conflicting_flows_are_reported_and_can_be_unrouted():
    fabric = build(WIDE)
    p1 = index(fabric, c=1, j=1, md=0, cross=True)
    p2 = index(fabric, c=1, j=1, md=1, cross=True)  # same ATSW key, other down member
    a = assign([0, 1, 2], [10, 11, 11], [p1, p2, p1])
    with pytest.raises(RouteConflict, match="flows 0 and 1 both reach atsw-c1-a1"):
        build_routes(fabric, a)
    mask = route_conflicts(fabric, a)
    assert mask.tolist() == [False, True, False]
    fixed = Assignment(a.flows, np.where(mask, UNROUTED, a.path))
    assert len(build_routes(fabric, fixed)) > 0


def test_same_nic_to_same_host_on_two_paths_conflicts_at_the_rtsw(tiny: Fabric):
    fabric = tiny
    a = assign([0, 0], [fabric.nic_id(2, 0), fabric.nic_id(2, 1)], [0, 1])
    assert route_conflicts(fabric, a).tolist() == [False, True]


def test_routes_are_deterministic_and_independent_of_flow_order(small: Fabric):
    fabric = small
    rng = np.random.default_rng(3)
    src = np.arange(fabric.num_nics)
    dst = (src + fabric.nics_per_host * fabric.hosts_per_rack * 3) % fabric.num_nics
    cross = fabric.pod_of_rack(fabric.rack_of_nic(src)) != (
        fabric.pod_of_rack(fabric.rack_of_nic(dst))
    )
    n_pod, n_cross = fabric.ctsws_per_pod, fabric.ctsws_per_pod * fabric.atsws_per_plane
    path = np.where(cross, rng.integers(0, n_cross, src.size), rng.integers(0, n_pod, src.size))
    a = assign(src, dst, path)
    a = Assignment(a.flows, np.where(route_conflicts(fabric, a), UNROUTED, a.path))
    first = build_routes(fabric, a)
    perm = rng.permutation(src.size)
    shuffled = Assignment(a.flows.take(perm), a.path[perm])
    assert build_routes(fabric, shuffled) == first == build_routes(fabric, a)
    assert list(first) == sorted(first, key=lambda e: (e.switch, e.in_port, e.dst_host))


def test_capacity_overflow_and_fit_tables_unroute_whole_flows():
    fabric = build(WIDE)
    src = [0, 1, 2]
    dst = [10, 11, 12]
    p = [index(fabric, c=0, ku=0, j=0, cross=True), index(fabric, c=1, ku=1, j=1, cross=True),
         index(fabric, c=0, ku=0, j=0, cross=True)]  # fmt: skip
    a = Assignment(FlowSet.build(src, dst, [10.0, 50.0, 20.0]), np.array(p))
    routes = build_routes(fabric, a)
    assert routes.overflow(1) == {"atsw-c0-a0": 2, "ctsw-p0-c0": 2, "ctsw-p1-c0": 2,
                                  "rtsw-p0-r0": 3}  # fmt: skip
    assert routes.overflow({"rtsw-p0-r0": 5}) == {}
    capacity = {"rtsw-p0-r0": 2, "ctsw-p0-c0": 1}
    fitted = fit_tables(fabric, a, capacity)
    assert fitted.path.tolist() == [UNROUTED, p[1], p[2]]  # larger demands first
    assert build_routes(fabric, fitted).overflow(capacity) == {}
    assert fit_tables(fabric, a, 100) is a


def test_entry_checks_and_route_set_helpers(tiny: Fabric):
    fabric = tiny
    ports = switch_ports(fabric)
    assert ports["rtsw-p0-r0"] == frozenset([0, 1, 2, 3, *range(16, 20)])
    good = Entry("rtsw-p0-r0", 0, 2, fabric.rack_link(0, 1))
    assert entry_problem(fabric, ports, good) is None
    assert "not a switch" in entry_problem(fabric, ports, Entry("rtsw-x", 0, 2, 16))
    assert "in_port" in entry_problem(fabric, ports, Entry("rtsw-p0-r0", 5, 2, 16))
    assert "dst_host" in entry_problem(fabric, ports, Entry("rtsw-p0-r0", 0, 99, 16))
    with pytest.raises(RouteError, match="two entries"):
        RouteSet.from_entries([good, Entry("rtsw-p0-r0", 0, 2, fabric.rack_link(0, 2))])
    routes = RouteSet.from_entries([good, good])
    assert len(routes) == 1 and routes.only(["ctsw-p0-c0"]).switches() == ()


def bucket_flows(src, dst, qp, path, demand=25.0):
    flows = FlowSet.build(src, dst, demand)
    flows = FlowSet(flows.src_nic, flows.dst_nic, flows.demand, flows.job, flows.job_ids,
                    np.array(qp, dtype=np.int64))  # fmt: skip
    return Assignment(flows, np.array(path, dtype=np.int64))


def test_qp_buckets_fold_into_one_entry_plus_the_odd_buckets(tiny: Fabric):
    fabric = tiny
    dst = fabric.nic_id(2, 0)  # rack 1 of pod 0: one RTSW entry per bucket key
    # buckets 0-2 via CTSW 3, bucket 3 via CTSW 1
    a = bucket_flows([0] * 4, [dst] * 4, [0, 1, 2, 3], [index(fabric, c=c) for c in (3, 3, 3, 1)])
    routes = build_routes(fabric, a)
    got = [(e.qp, fabric.link_name(e.next_hop)) for e in routes]
    assert got == [(-1, "rtsw-p0-r0:ctsw-p0-c3"), (3, "rtsw-p0-r0:ctsw-p0-c1")]
    # a tie between next hops goes to the smaller link id
    a = bucket_flows([0] * 2, [dst] * 2, [0, 1], [index(fabric, c=2), index(fabric, c=1)])
    got = [(e.qp, fabric.link_name(e.next_hop)) for e in build_routes(fabric, a)]
    assert got == [(-1, "rtsw-p0-r0:ctsw-p0-c1"), (0, "rtsw-p0-r0:ctsw-p0-c2")]


def test_whole_flow_and_a_bucket_of_its_key_must_agree(tiny: Fabric):
    fabric = tiny
    dst = fabric.nic_id(2, 0)
    a = bucket_flows([0, 0], [dst, dst], [-1, 5], [index(fabric, c=0), index(fabric, c=2)])
    assert route_conflicts(fabric, a).tolist() == [False, True]
    with pytest.raises(RouteConflict, match="flows 0 and 1"):
        build_routes(fabric, a)
    # agreeing: the bucket needs no entry of its own
    a = bucket_flows([0, 0], [dst, dst], [-1, 5], [index(fabric, c=2), index(fabric, c=2)])
    assert [e.qp for e in build_routes(fabric, a)] == [-1]


def test_buckets_are_told_apart_at_the_source_rtsw_only():
    fabric = build(WIDE)
    # two buckets of one flow on the same uplink must agree after it (the CTSW does not see
    # the bucket)
    p1 = index(fabric, c=1, j=0, cross=True)
    p2 = index(fabric, c=1, j=1, cross=True)
    a = bucket_flows([0, 0], [10, 10], [0, 1], [p1, p2])
    assert route_conflicts(fabric, a).tolist() == [False, True]


def test_entries_model(tiny):
    # one cross-pod flow: an RTSW entry (C*K = 4 > 1) and a CTSW entry (A*L = 1: none)
    flows = FlowSet.build([0], [tiny.num_nics - 1], 400.0)
    a = Assignment(flows, np.array([0]))
    per = table_usage(tiny, a)
    assert per.sum() == 1
    assert per[tiny.node_id("rtsw", 0)] == 1


def test_align_entries_shares_next_hops(small):
    # two flows from one rack to one host on the same uplink must pick the same ATSW
    dst_host = small.num_hosts - 1
    flows = FlowSet.build([0, 1], [dst_host * 4, dst_host * 4 + 1], 100.0)
    a_paths = np.array([0, 1])  # index = c*A + j: same c, different j (A = 2, L = K = 1)
    aligned = align_entries(small, flows, a_paths)
    assert aligned[0] == aligned[1] == 0


def test_table_usage_counts_what_build_routes_installs(small: Fabric):
    # random bucketed assignments, conflicts removed: the count model is the routes
    fabric = small
    rng = np.random.default_rng(7)
    src = rng.integers(0, fabric.num_nics, 60)
    dst = (src + rng.integers(1, fabric.num_nics, 60) * 4) % fabric.num_nics
    qp = rng.integers(-1, 4, 60)
    ok = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    a = bucket_flows(src[ok], dst[ok], qp[ok], rng.integers(0, 16, ok.sum()))
    a = Assignment(a.flows, np.where(route_conflicts(fabric, a), UNROUTED, a.path))
    counts = build_routes(fabric, a).counts()
    usage = table_usage(fabric, a)
    assert {fabric.node_name(int(n)): int(usage[n]) for n in np.flatnonzero(usage)} == counts
    top = max(counts.values())
    assert tables_fit(fabric, a, top) and not tables_fit(fabric, a, top - 1)


def test_fit_tables_counts_folded_buckets_and_drops_a_key_whole(tiny: Fabric):
    fabric = tiny
    dst = fabric.nic_id(2, 0)  # same pod: one RTSW entry per key, nothing downstream (K=1)
    # flow 0 in 4 buckets, 3 via CTSW 3 and one via CTSW 1: folds to 2 entries, not 4
    paths = [index(fabric, c=c) for c in (3, 3, 3, 1)]
    whole = index(fabric, c=2)
    a = bucket_flows([0] * 4 + [1], [dst] * 4 + [dst + 1], [0, 1, 2, 3, -1],
                     paths + [whole], demand=[25.0] * 4 + [50.0])  # fmt: skip
    rtsw = fabric.node_id("rtsw", 0)
    assert table_usage(fabric, a)[rtsw] == 3
    assert fit_tables(fabric, a, 3) is a
    # room for 2: the split flow (100 Gbps in all) keeps its two entries, the 50 Gbps flow
    # goes to ECMP
    fitted = fit_tables(fabric, a, 2)
    assert fitted.path.tolist() == paths + [UNROUTED]
    # room for 1: the split flow's key does not fit; all its buckets leave together
    fitted = fit_tables(fabric, a, 1)
    assert fitted.path.tolist() == [UNROUTED] * 4 + [whole]
    assert fit_tables(fabric, a, {"rtsw-p0-r0": 1}).path.tolist() == fitted.path.tolist()


def test_no_entry_where_one_installed_link_is_the_only_choice() -> None:
    """A cable list with uneven parallel links: where a switch has one installed link
    towards the next tier (its twin never cabled), ECMP takes it, so no entry is spent
    there; where it has two, the entries steer as before, and every flow follows its path
    through the installed tables and the defaults."""
    from collections import Counter

    from controller.model.hashing import ecmp
    from controller.model.health import LinkHealth
    from controller.model.inventory import fabric_from_cables
    from controller.model.name_templates import named_cable_list
    from controller.routes.checks import entry_role
    from sim.switches import EmulatedFabric, verify

    shape = build(WIDE)
    devices, cables = named_cable_list(shape)
    pairs = Counter((c.a, c.b) for c in cables)
    parallel = sorted(p for p, n in pairs.items() if n == 2 and not p[0].startswith("host"))
    single = set(parallel[::2])  # every other switch pair keeps one of its two cables
    seen: set[tuple[str, str]] = set()
    kept = []
    for c in cables:
        if (c.a, c.b) in single and (c.a, c.b) in seen:
            continue
        seen.add((c.a, c.b))
        kept.append(c)
    fabric = fabric_from_cables("uneven", devices, kept)
    assert not fabric.installed.all()
    # every NIC to every other host's NICs, each flow on a hashed path over the installed
    # links, then aligned at the entry keys: every hop of both tiers is taken
    nic = np.arange(fabric.num_nics)
    src, dst = np.repeat(nic, nic.size), np.tile(nic, nic.size)
    other = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    flows = FlowSet.build(src[other], dst[other], 10.0)
    hashed = ecmp(fabric, flows, LinkHealth.all_up(fabric), seed=1)
    assignment = Assignment(flows, align_entries(fabric, flows, hashed.path))
    routes = build_routes(fabric, assignment)
    full = build_routes(shape, assignment)
    assert 0 < len(routes) < len(full)  # entries only where a choice is left
    lo, hi = fabric.link_ends
    nodes = fabric.node_index()
    for e in routes:  # each at a switch with two installed links to choose from
        node, nh = nodes[e.switch], e.next_hop
        if entry_role(fabric, e) in (RTSW_UP, CTSW_UP):  # up: any uplink of the same tier
            choice = (lo == node) & (fabric.link_kind == fabric.link_kind[nh])
        else:  # down: the parallel links to the next switch
            choice = (hi == node) & (lo == lo[nh])
        assert (choice & fabric.installed).sum() > 1, e
    em = EmulatedFabric(fabric)
    for switch in routes.switches():
        em.program(switch, routes.table(switch))
    report = verify(fabric, em, assignment)
    assert report.ok, report.summary()
