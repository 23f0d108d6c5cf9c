"""The naming and addressing plan of lab fabrics: pure, no root needed."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest

from controller.drivers.linux_plan import (
    BUCKET_SLOTS,
    IFNAMSIZ,
    MAX_BUCKETS,
    TABLE_BASE,
    LabPlan,
    check_lab_name,
    sport_range,
)
from controller.errors import DriverRejected
from controller.model.clos import PRESETS, build
from controller.model.flows import ALL_QPS


@pytest.mark.parametrize("preset", ["tiny", "small", "wide"])
def test_ports_fit_the_kernel_and_are_unique_per_node(preset):
    fabric = build(PRESETS[preset])
    plan = LabPlan(fabric, "lab-x")
    addresses = set()
    for node, links in plan.node_links.items():
        names = [plan.port(node, link).ifname for link in links]
        assert len(set(names)) == len(names), node
        assert all(0 < len(n) <= IFNAMSIZ for n in names)
    for link in range(fabric.num_links):
        lo, hi = plan.ends(link)
        net = ipaddress.ip_network(f"{lo.address}/31")
        assert ipaddress.ip_address(hi.address) in net and lo.peer_address == hi.address
        addresses |= {lo.address, hi.address}
    hosts = {plan.host_address(h) for h in range(fabric.num_hosts)}
    assert len(addresses) == 2 * fabric.num_links and not hosts & addresses
    assert len(set(plan.namespaces())) == fabric.num_hosts + len(plan.switches)
    assert all(ns.startswith("lab-x-") for ns in plan.namespaces())


def test_tables_invert_and_buckets_map_to_disjoint_port_ranges(tiny):
    plan = LabPlan(tiny, "t")
    switch = "rtsw-p0-r0"
    seen = set()
    for link in plan.node_links[switch]:
        for qp in (ALL_QPS, 0, 5, MAX_BUCKETS - 1):
            table = plan.table(switch, link, qp)
            assert TABLE_BASE <= table and plan.table_key(switch, table) == (link, qp)
            seen.add(table)
    assert len(seen) == 4 * len(plan.node_links[switch])
    assert max(seen) < TABLE_BASE + len(plan.node_links[switch]) * BUCKET_SLOTS
    assert sport_range(0) == (49152, 49215) and sport_range(MAX_BUCKETS - 1)[1] == 65535
    with pytest.raises(DriverRejected, match="QP bucket"):
        plan.table(switch, plan.node_links[switch][0], MAX_BUCKETS)
    with pytest.raises(DriverRejected, match="not one of its ports"):
        plan.table(switch, plan.node_links["rtsw-p0-r1"][0], ALL_QPS)


@pytest.mark.parametrize("bad", ["", "Lab", "1lab", "lab_x", "much-too-long-name"])
def test_bad_lab_names_are_refused(bad):
    with pytest.raises(ValueError, match="bad lab name"):
        check_lab_name(bad)


def test_a_lab_of_an_inventory_names_its_ports_as_the_inventory_does() -> None:
    """The operator's port names (Ethernet48, eth0) are the lab's interfaces when every one
    is a kernel name unique on its node; one that is not keeps the lab's own, and says why."""
    from controller.formats.fabric_file import parse_fabric

    ports = {"host": "eth{nic}", "rtsw_down": "Ethernet{i}", "rtsw_up": "Ethernet{i}",
             "ctsw_down": "swp{i}", "ctsw_up": "swp{i}", "atsw_down": "Ethernet{i}"}  # fmt: skip
    named = parse_fabric({"preset": "tiny", "names": {"rtsw": "leaf-{pod_letter}{rack}"},
                          "ports": ports})  # fmt: skip
    plan = LabPlan(named, "inv")
    assert plan.why_own_ports == ""
    for node, links in plan.node_links.items():
        names = [plan.port(node, link).ifname for link in links]
        assert len(set(names)) == len(names), node
    for link in np.flatnonzero(named.installed).tolist():
        lo, hi = plan.ends(link)
        assert (lo.ifname, hi.ifname) == named.ports(link)
    assert plan.port("leaf-a0", 0).ifname.startswith("Ethernet")
    assert plan.port(named.host_name(0), 0).ifname == "eth0"
    # a name the kernel does not take: every port keeps the lab's names
    slashed = parse_fabric({"preset": "tiny", "ports": {**ports, "ctsw_up": "Ethernet1/{i}"}})
    plan = LabPlan(slashed, "inv")
    why = plan.why_own_ports
    assert "'Ethernet1/2' of ctsw-p0-c0 (ctsw-p0-c0:atsw-c0-a0) is not a Linux" in why
    assert plan.port("rtsw-p0-r0", 0).ifname == "h0n0"
    assert "a preset" in LabPlan(build(PRESETS["tiny"]), "t").why_own_ports


def test_the_linux_driver_refuses_a_lab_of_open_vswitch_bridges(tiny, tmp_path, monkeypatch):
    """`serve --driver linux --lab NAME` on a `--switch ovs` lab served on, every switch
    unreadable (no namespace of its own); the ovs driver already refuses the other way."""
    from controller.drivers import linux_plan
    from controller.drivers.linux import LinuxDriver
    from controller.errors import DriverUnavailable

    monkeypatch.setattr(linux_plan, "LAB_STATE_ROOT", tmp_path)
    (tmp_path / "ov" / "ovs").mkdir(parents=True)
    with pytest.raises(DriverUnavailable, match=r"lab 'ov' has Open vSwitch bridges for "
                       r"switches .*--driver ovs"):  # fmt: skip
        LinuxDriver(fabric=tiny, lab="ov")
