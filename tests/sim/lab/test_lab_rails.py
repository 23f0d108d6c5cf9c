"""A rail-optimized fabric built for real in network namespaces: NIC n of every host on
leaf n of its rack, TE entries through the linux driver, checked with real packets. Needs
root (CI runs as root); the lab has a name unique to this run and is removed afterwards."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from controller.drivers.linux import LinuxDriver
from controller.drivers.linux_plan import LabPlan
from controller.errors import LabError
from controller.model.clos import ClosSpec, build
from controller.model.health import LinkHealth, parse_health
from controller.model.inventory import Device, fabric_from_cables
from sim.lab import build as lab
from sim.lab import lldp
from sim.lab.cli import install, solved
from sim.lab.links import set_link
from sim.lab.shared import unique_name
from sim.lab.traffic import LabIO, verify
from sim.lab.underlay import UNDERLAY_PRIORITY

SHAPE = {"name": "rail-lab", "pods": 1, "racks_per_pod": 3, "hosts_per_rack": 2,
         "nics_per_host": 4, "rtsws_per_rack": 4, "ctsws_per_pod": 4}
RAIL = build(ClosSpec(**SHAPE))  # type: ignore[arg-type]


def test_a_lab_of_several_rtsws_a_rack_is_one_pod_with_the_static_underlay() -> None:
    with pytest.raises(LabError, match="--underlay static only"):
        lab.check_size(RAIL, "frr")
    with pytest.raises(LabError, match="one pod"):
        lab.check_size(build(ClosSpec(pods=2, nics_per_host=4, rtsws_per_rack=4,
                                      ctsws_per_pod=4, atsws_per_plane=1, taper=1.0)), "static")
    lab.check_size(RAIL, "static")


@pytest.mark.skipif(os.geteuid() != 0, reason="lab tests need root to make network namespaces "
                    "(CI runs as root)")  # fmt: skip
def test_rail_traffic_stays_on_its_rail_with_real_packets(tmp_path: Path) -> None:
    name = unique_name("lr")
    source = tmp_path / "rail-lab.json"  # the restorer loads the fabric again from here
    source.write_text(json.dumps(SHAPE))
    lab.up(RAIL, name, str(source), underlay="static")
    driver = io = None
    try:
        plan = LabPlan(RAIL, name)
        # every CTSW keeps a packet on the rail it came up: one rule a port from an RTSW
        rules = subprocess.run(["ip", "-n", plan.netns("ctsw-p0-c1"), "rule", "show", "priority",
                                str(UNDERLAY_PRIORITY)], capture_output=True, text=True)
        assert len(rules.stdout.splitlines()) == RAIL.rtsws_per_pod * RAIL.rack_links
        driver = LinuxDriver(fabric=RAIL, lab=name)
        io = LabIO(plan)
        for seed in (1, 2):
            assignment, routes = solved(RAIL, seed=seed, fill=1.0)
            install(driver, RAIL, routes)
            rows = np.flatnonzero(assignment.routed)
            assert rows.size
            # the rail of each flow: both ends on one slot
            flows = assignment.flows
            assert np.array_equal(RAIL.rtsw_of_nic(flows.src_nic) % 4,
                                  RAIL.rtsw_of_nic(flows.dst_nic) % 4)  # fmt: skip
            report = verify(io, assignment, rows.tolist(), packets=5)
            assert report.ok, report.summary()
        # a link down: the solve around it, still on its rail
        down = "rtsw-p0-r0-s1:ctsw-p0-c2"
        set_link(plan, RAIL.link_by_name(down), "down")
        health = parse_health(RAIL, [down], LinkHealth.all_up(RAIL))
        assignment, routes = solved(RAIL, seed=3, fill=1.0, health=health)
        install(driver, RAIL, routes)
        report = verify(io, assignment, np.flatnonzero(assignment.routed).tolist(), packets=5)
        assert report.ok, report.summary()
    finally:
        if io is not None:
            io.close()
        if driver is not None:
            driver.clear()
            driver.close()
        lab.down(name)


@pytest.mark.skipif(os.geteuid() != 0, reason="lab tests need root to make network namespaces "
                    "(CI runs as root)")  # fmt: skip
@pytest.mark.skipif(lldp.missing() is not None, reason=f"{lldp.missing()} (CI installs it: "
                    "the Makefile's DEBS)")  # fmt: skip
def test_discovery_reads_the_rails_off_a_running_lab(tmp_path: Path) -> None:
    """lldpd in every namespace; the neighbour tables give back the rail layout: 4 RTSWs a
    rack, the same names and the same links."""
    from controller.cli.discover import from_lab
    from controller.model.discovery import discover

    name = unique_name("lq")
    source = tmp_path / "rail-lab.json"
    source.write_text(json.dumps(SHAPE))
    lab.up(RAIL, name, str(source), underlay="static", lldp=True)
    try:
        tables, unreadable = from_lab(name, 10, 8)
        found = discover(tables, 400, unreadable)
        assert found.ok, found.problems
        role = {d: d.split("-")[0] for d in found.devices}
        fabric = fabric_from_cables("rails", [Device(d, role[d]) for d in found.devices],
                                    list(found.cables))  # fmt: skip
        assert (fabric.rtsws_per_rack, fabric.planes) == (4, 1)
        assert fabric.node_names[: RAIL.num_hosts] == RAIL.node_names[: RAIL.num_hosts]
        assert fabric.link_names == RAIL.link_names  # the lab's ports are the plan's names
    finally:
        lab.down(name)
