"""A lab of irregular wiring: `tiny` with two RTSW-CTSW cables missing and one host absent,
built for real (no veth for a missing cable, no namespace for the absent host), with the
static underlay and with FRR, TE routes checked with real packets, and LLDP discovery giving
back the very fabric. The routing plans themselves are checked without root."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.drivers.linux import LinuxDriver
from controller.drivers.linux_plan import LabPlan
from controller.errors import FabricError, LabError
from controller.formats.fabric_file import load_fabric, parse_fabric
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric, Wiring
from controller.model.health import LinkHealth
from controller.routes.tables import RouteSet
from sim.lab import build as lab
from sim.lab import frr, lldp, netns
from sim.lab.cli import install, solved
from sim.lab.gaps import gapped_cable_list
from sim.lab.links import lab_health, set_link
from sim.lab.shared import unique_name
from sim.lab.traffic import LabIO, verify
from sim.lab.underlay import Reach, static_routes

MISSING = ("rtsw-p0-r0:ctsw-p0-c1", "rtsw-p1-r1:ctsw-p1-c3")
ABSENT = "host-p1-r1-h1"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="lab tests need root to make "
                                "network namespaces (CI runs as root)")  # fmt: skip


@pytest.fixture(scope="module")
def gaps(tmp_path_factory: pytest.TempPathFactory, tiny: Fabric) -> tuple[str, Fabric]:
    """(fabric file, fabric): `tiny` with MISSING cables and ABSENT host left out."""
    path = tmp_path_factory.mktemp("gaps") / "tiny-gaps.json"
    path.write_text(json.dumps(gapped_cable_list(tiny, "tiny-gaps", MISSING, [ABSENT])))
    return str(path), load_fabric(str(path))


def _route_devs(lines: list[str]) -> dict[tuple[str, str], frozenset[str]]:
    """(destination, table) -> the devices of its next hops, from `ip -batch` route lines."""
    out = {}
    for line in lines:
        m = re.match(r"route replace (?:unreachable )?(\S+) proto \S+ (?:table (\d+) )?(.*)",
                     line)  # fmt: skip
        assert m, line
        out[(m.group(1), m.group(2) or "main")] = frozenset(re.findall(r"dev (\S+)", m[3]))
    return out


def _via(routes: dict[tuple[str, str], frozenset[str]], address: str) -> frozenset[str] | None:
    """The next-hop devices a main table of `routes` takes to `address`."""
    return routes.get((address + "/32", "main"), routes.get(("10.1.0.0/16", "main")))


def _te_flows_on_their_paths(fabric: Fabric, name: str, assignment: Assignment,
                             routes: RouteSet, *, clear: bool = False) -> None:
    """`routes` installed in lab `name` and every routed flow of `assignment` checked with
    real packets: each leaves every switch by its planned port."""
    rows = np.flatnonzero(assignment.routed)
    assert len(routes) > 0 and rows.size
    with LinuxDriver(fabric=fabric, lab=name) as driver:
        install(driver, fabric, routes)
        io = LabIO(LabPlan(fabric, name))
        try:
            report = verify(io, assignment, rows.tolist(), packets=5)
        finally:
            io.close()
        if clear:
            driver.clear()
    assert report.ok and report.checked == rows.size, report.problems


def test_the_plan_leaves_out_missing_cables_and_absent_hosts(gaps: tuple[str, Fabric]) -> None:
    _, fabric = gaps
    plan = LabPlan(fabric, "x")
    assert ABSENT not in plan.hosts and len(plan.hosts) == 7 and len(plan.switches) == 16
    veths = lab.veth_lines(plan)
    assert len(veths) == int(fabric.installed.sum()) == fabric.num_links - 4  # 2 + 2 NICs
    lines = lab.port_lines(plan)
    assert set(lines) == set(plan.hosts + plan.switches)
    # every host's loopback is its own fabric id's, absent ones leaving a hole
    for host in plan.hosts:
        assert f"addr add {plan.host_address(fabric.host_by_name(host))}/32 dev lo" in lines[host]
    routes = static_routes(plan)
    for node, batch in routes.items():  # next hops only over ports that exist
        ports = {plan.port(node, link).ifname for link in plan.node_links[node]}
        for devs in _route_devs(batch).values():
            assert devs and devs <= ports, (node, devs - ports)
    # rtsw-p0-r0 lost its cable to ctsw-p0-c1: the other racks do not go up through c1 to it
    far = _route_devs(routes["rtsw-p1-r0"])
    assert _via(far, plan.host_address(0)) == {"c0", "c2", "c3"}
    assert _via(far, plan.host_address(2)) == {"c0", "c1", "c2", "c3"}
    assert _via(far, plan.host_address(6)) == {"c0", "c1", "c2"}  # rtsw-p1-r1 lost c3
    assert Reach.of(plan).unreachable_pairs() == []


def test_a_lab_refuses_what_it_cannot_build(gaps: tuple[str, Fabric]) -> None:
    _, fabric = gaps
    lab.check_size(fabric, "static")
    lab.check_size(fabric, "frr")
    lab.check_size(fabric, "groups", "ovs")  # bridges build it too (tests/sim/lab/test_lab_ovs)


def test_host_pairs_no_cable_joins_are_named_and_not_waited_for(tiny: Fabric) -> None:
    """A rack whose every uplink is missing (no inventory loads one, so made by hand): its
    hosts reach each other only; the static underlay routes nobody else to them, FRR's
    convergence expects no route to them, and the pairs are named."""
    installed = tiny.installed.copy()
    cut = tiny.rack_uplinks()[0].ravel()  # rtsw-p0-r0's
    installed[cut] = False
    wiring = Wiring(tiny.node_names, ("",) * tiny.num_links, ("",) * tiny.num_links,
                    installed, np.ones(tiny.num_nodes, dtype=bool))  # fmt: skip
    island = replace(tiny, name="island", wiring=wiring)
    plan = LabPlan(island, "x")
    pairs = Reach.of(plan).unreachable_pairs()
    inside = {"host-p0-r0-h0", "host-p0-r0-h1"}
    assert len(pairs) == 2 * 2 * 6
    assert all((a in inside) != (b in inside) for a, b in pairs)
    assert {("host-p0-r0-h0", "host-p1-r1-h1"), ("host-p1-r1-h1", "host-p0-r0-h0")} <= set(pairs)
    lost = {plan.host_address(h) for h in (0, 1)}
    routes = static_routes(plan)
    for node, batch in routes.items():
        if node != "rtsw-p0-r0" and node not in inside:
            assert not {dst for dst, _ in _route_devs(batch)} & {a + "/32" for a in lost}, node
    expected = frr.expected_paths(plan)
    assert all(not set(want) & lost for sw, want in expected.items() if sw != "rtsw-p0-r0")
    assert expected["rtsw-p0-r0"] == {}  # its own hosts are cabled to it; nobody else reached
    # and the solver leaves the flows between the two sides unrouted (so verify skips them)
    assignment, _ = solved(island, seed=1, fill=1.0)
    src = island.host_of_nic(assignment.flows.src_nic)
    dst = assignment.flows.dst_host(island)
    across = (island.rack_of_host(src) == 0) != (island.rack_of_host(dst) == 0)
    assert across.any() and not assignment.routed[across].any()
    assert assignment.routed[~across].all()


def test_lab_up_says_what_it_left_out() -> None:
    from sim.lab.cli import wiring_text

    record = lab.LabRecord("x", "f", "static", [], 36, not_installed=1, unreachable=10,
                           unreachable_shown=["a>b", "b>a"])  # fmt: skip
    assert wiring_text(record) == (
        "  1 link not installed: no veth for a missing cable, no namespace for an absent host "
        "or switch\n  10 host pairs with no cabled path: a>b, b>a and 8 more\n")
    assert wiring_text(lab.LabRecord("x", "f", "static", [], 40)) == ""


def test_a_missing_cable_cannot_be_set(gaps: tuple[str, Fabric]) -> None:
    _, fabric = gaps
    with pytest.raises(LabError, match="rtsw-p0-r0:ctsw-p0-c1 is not installed"):
        set_link(LabPlan(fabric, "x"), fabric.link_by_name(MISSING[0]), "down")


@needs_root
@pytest.mark.skipif(lldp.missing() is not None, reason=f"{lldp.missing()} (CI installs it: "
                    "the Makefile's DEBS)")  # fmt: skip
def test_static_lab_of_gaps_steers_real_packets_and_discovers_itself(
    gaps: tuple[str, Fabric], capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli.main import main

    source, fabric = gaps
    name = unique_name("lg")
    record = lab.up(fabric, name, source, underlay="static", lldp=True)
    try:
        plan = LabPlan(fabric, name)
        assert len(record.namespaces) == 23 and record.links == 36
        assert record.not_installed == 4 and record.unreachable == 0
        assert plan.netns(ABSENT) not in netns.existing()
        status = lab.status(name)
        assert status.namespaces_present == 23 and status.ports_up == status.ports == 72
        assert lab_health(plan).changed(fabric).size == 0  # missing cables are not faults
        # TE routes pushed, every routed flow on its path with real packets
        assignment, routes = solved(fabric, seed=1, fill=1.0)
        _te_flows_on_their_paths(fabric, name, assignment, routes, clear=True)
        # LLDP gives back the fabric itself: names, cables, ports, what is missing
        assert main(["fabric", "discover", "--lab", name, "--json", "--force-gbps",
                     "--gbps", "400", "--name", "tiny-gaps"]) == 0  # fmt: skip
        found = parse_fabric(json.loads(capsys.readouterr().out), "discovered")
        assert found.fingerprint == fabric.fingerprint
        assert np.array_equal(found.installed, fabric.installed)
        assert found.node_names == fabric.node_names and found.link_names == fabric.link_names
        assert found.capacity.tobytes() == fabric.capacity.tobytes()
        shown = subprocess.run(["ip", "-n", plan.netns("rtsw-p0-r0"), "link", "show", "c1"],
                               capture_output=True, text=True)  # fmt: skip
        assert shown.returncode != 0  # no port for the missing cable
    finally:
        lab.down(name)
    assert not set(record.namespaces) & netns.existing()


@needs_root
@pytest.mark.skipif(not frr.installed(), reason="FRR not installed (CI installs it: the "
                    "Makefile's DEBS)")  # fmt: skip
def test_frr_lab_of_gaps_converges_on_the_cables_there_and_carries_te(
    gaps: tuple[str, Fabric]
) -> None:
    """No BGP neighbour on a missing cable; convergence waits for the routes that can exist,
    and then BGP's next hops are exactly the static underlay's shortest paths."""
    source, fabric = gaps
    name = unique_name("lh")
    lab.up(fabric, name, source, underlay="frr")
    try:
        plan = LabPlan(fabric, name)
        assert "10.128.0.51 peer-group" not in frr.config(plan, "rtsw-p0-r0")
        assert frr.wait_converged(plan, timeout=60) < 60
        static = static_routes(plan)
        for switch in plan.switches:
            shown = subprocess.run(["ip", "-n", plan.netns(switch), "-j", "route", "show",
                                    "proto", "bgp"], capture_output=True, text=True).stdout
            bgp = {r["dst"] + "/32": {h["dev"] for h in r.get("nexthops", [r])}
                   for r in json.loads(shown or "[]")}  # fmt: skip
            planned = _route_devs(static[switch])
            for dst, devs in bgp.items():
                if dst.startswith("10.1."):
                    want = _via(planned, dst.removesuffix("/32"))
                    assert devs == want, (switch, dst, devs, want)
        assignment, routes = solved(fabric, seed=2, fill=1.0, health=LinkHealth.all_up(fabric))
        _te_flows_on_their_paths(fabric, name, assignment, routes)
    finally:
        lab.down(name)


def test_gapped_cable_list_names_what_it_does_not_know(tiny: Fabric) -> None:
    with pytest.raises(FabricError, match="unknown link"):
        gapped_cable_list(tiny, "x", ["rtsw-p0-r0:nowhere"])
    with pytest.raises(FabricError, match="unknown node"):
        gapped_cable_list(tiny, "x", absent=["host-p9-r9-h9"])
    doc = gapped_cable_list(tiny, "x", MISSING)
    assert len(doc["cables"]) == tiny.num_links - 2


@needs_root
def test_a_rail_only_lab_builds_its_planes_as_missing_cables(tmp_path: Path) -> None:
    """Planes: each rail's leaves cabled to their own spines only (the cross-plane links are
    not installed), one pod, static underlay: every routed flow on its path. Two spines a
    rail, so that a leaf has a choice and TE entries (with one, ECMP's one uplink is the
    path and no entry is installed: controller.routes.entries)."""
    shape = {"name": "rail-only", "racks_per_pod": 3, "hosts_per_rack": 2, "nics_per_host": 4,
             "rtsws_per_rack": 4, "ctsws_per_pod": 8, "planes": 4}  # fmt: skip
    source = tmp_path / "rail-only.json"
    source.write_text(json.dumps(shape))
    fabric = load_fabric(str(source))
    name = unique_name("lp")
    record = lab.up(fabric, name, str(source), underlay="static")
    try:
        assert record.links == int(fabric.installed.sum()) == 24 + 24
        assert record.not_installed == 72 and record.unreachable == 0
        assignment, routes = solved(fabric, seed=1, fill=1.0)
        _te_flows_on_their_paths(fabric, name, assignment, routes)
    finally:
        lab.down(name)


@needs_root
@pytest.mark.skipif(lldp.missing() is not None, reason=f"{lldp.missing()} (CI installs it: the "
                    "Makefile's DEBS)")  # fmt: skip
def test_a_lab_of_an_inventory_has_its_port_names_and_discovers_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's names all the way down: the lab's interfaces are the inventory's
    ports (Ethernet<i>, eth<n>), the linux driver steers real packets over them, and LLDP
    gives the inventory back, ports included."""
    from controller.cli.main import main

    doc = {"preset": "tiny", "names": {"host": "gpu-{pod_letter}{rack}{host}",
                                       "rtsw": "leaf-{pod_letter}{rack}"},
           "ports": {"host": "eth{nic}", "rtsw_down": "Ethernet{i}", "rtsw_up": "Ethernet{i}",
                     "ctsw_down": "swp{i}", "ctsw_up": "swp{i}", "atsw_down": "Ethernet{i}"}}
    source = tmp_path / "named.json"
    source.write_text(json.dumps(doc))
    fabric = load_fabric(str(source))
    name = unique_name("ln")
    record = lab.up(fabric, name, str(source), underlay="static", lldp=True)
    try:
        plan = LabPlan(fabric, name)
        assert record.own_ports == "" and plan.why_own_ports == ""
        shown = subprocess.run(["ip", "-n", plan.netns("leaf-a0"), "-j", "link", "show"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        have = {ln["ifname"] for ln in json.loads(shown)} - {"lo"}
        want = {fabric.port_at("leaf-a0", link) for link in plan.node_links["leaf-a0"]}
        assert have == want and "Ethernet0" in have
        assignment, routes = solved(fabric, seed=1, fill=1.0)
        _te_flows_on_their_paths(fabric, name, assignment, routes, clear=True)
        assert main(["fabric", "discover", "--lab", name, "--json", "--force-gbps",
                     "--gbps", "400", "--name", fabric.name]) == 0  # fmt: skip
        found = parse_fabric(json.loads(capsys.readouterr().out), "discovered")
        assert found.fingerprint == fabric.fingerprint  # names, cables and ports
        assert [found.ports(k) for k in range(found.num_links)] == [
            fabric.ports(k) for k in range(fabric.num_links)]
    finally:
        lab.down(name)
