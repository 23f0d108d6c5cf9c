"""A lab whose switches are Open vSwitch bridges (`tectl lab up --switch ovs`): the underlay
as weighted select groups, TE entries through the ovs driver, real packets, link changes,
and fail-static when the controller is killed. Needs root and openvswitch-switch; the lab
has a name unique to this run and is removed afterwards, its Open vSwitch with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from controller.cli.main import main
from controller.drivers import ovs_daemons
from controller.drivers.linux_plan import LabPlan
from controller.drivers.ovs import OvsDriver
from controller.drivers.push import push, read_back
from controller.formats.placement import dump_placement, load_jobs
from controller.model.fabric import Fabric
from controller.routes.plan import diff
from controller.routes.tables import RouteSet
from sim.lab import build as lab
from sim.lab import netns
from sim.lab.cli import solved
from sim.lab.ovs import OvsLabIO, bridge_ports, rundir
from sim.lab.shared import unique_name
from sim.lab.traffic import Streams, send_burst, verify

pytestmark = pytest.mark.skipif(
    ovs_daemons.missing() is not None or os.geteuid() != 0,
    reason=f"Open vSwitch lab: {ovs_daemons.missing()}",
)
RTSW, DST = "rtsw-p0-r0", 4  # host-p1-r0-h0: another pod, 4 uplinks to spread over


@pytest.fixture(scope="module")
def ovs_lab(tiny: Fabric):
    name = unique_name("lv")
    assert main(["lab", "up", "--fabric", "tiny", "--switch", "ovs", "--name", name,
                 "--fail", "rtsw-p1-r1:ctsw-p1-c3=0.5"]) == 0  # fmt: skip
    yield name
    if lab.lab_path(name).exists():
        lab.down(name)


def _ofctl(name: str, fabric: Fabric, switch: str, *args: str) -> str:
    bridge = ovs_daemons.switch_bridges(fabric)[switch]
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", args[0],
                           f"unix:{rundir(name) / (bridge + '.mgmt')}", *args[1:]],
                          capture_output=True, text=True, check=True,
                          env=ovs_daemons.environment(rundir(name))).stdout  # fmt: skip


def test_groups_spread_and_weigh_and_lab_verify_passes(tiny: Fabric, ovs_lab, capsys):
    plan = LabPlan(tiny, ovs_lab)
    record = lab.load_record(ovs_lab)
    assert record.switch == "ovs" and len(record.namespaces) == tiny.num_hosts
    degraded = bridge_ports(plan, "rtsw-p1-r1")[int(tiny.link_by_name("rtsw-p1-r1:ctsw-p1-c3"))]
    groups = _ofctl(ovs_lab, tiny, "rtsw-p1-r1", "dump-groups")
    assert f"weight:50,watch_port:{degraded},actions=output:{degraded}" in groups
    io = OvsLabIO(plan)
    try:
        ups = [f"c{c}" for c in range(tiny.ctsws_per_pod)]
        before = io.tx_packets(RTSW)
        for sport in range(20000, 20128):
            send_burst(io, 0, sport, DST, sport, 1)
        deadline = time.monotonic() + io.counter_lag
        while True:  # the bridges count patch-port packets a little later
            spread = np.array([io.tx_packets(RTSW)[p] - before[p] for p in ups])
            if spread.sum() >= 128 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert spread.sum() >= 128 and (spread > 0).all(), spread  # hashed on source ports
    finally:
        io.close()
    capsys.readouterr()
    assert main(["lab", "verify", "--name", ovs_lab, "--sample", "16", "--packets", "5"]) == 0
    assert "16 matched, 0 misrouted, 0 dropped" in capsys.readouterr().out
    assert main(["lab", "status", "--name", ovs_lab]) == 0
    assert "switches Open vSwitch bridges" in capsys.readouterr().out


def _taken_down(tiny: Fabric, lab: str, link: str) -> int:
    """`lab link LINK=down`; returns the link's port on its RTSW's bridge."""
    port = bridge_ports(LabPlan(tiny, lab), RTSW)[int(tiny.link_by_name(link))]
    assert main(["lab", "link", f"{link}=down", "--name", lab]) == 0
    return port


def test_a_link_down_is_solved_around_and_up_again(tiny: Fabric, ovs_lab, capsys):
    link = "rtsw-p0-r0:ctsw-p0-c1"
    port = _taken_down(tiny, ovs_lab, link)
    try:
        desc = _ofctl(ovs_lab, tiny, RTSW, "dump-ports-desc")
        assert "NO_RECV NO_FWD" in desc.split(f" {port}(")[1].split("\n")[1]
        assert f"output:{port}," not in _ofctl(ovs_lab, tiny, RTSW, "dump-groups")
        capsys.readouterr()
        assert main(["lab", "verify", "--name", ovs_lab, "--sample", "16", "--packets",
                     "5"]) == 0  # fmt: skip
        out = capsys.readouterr().out
        assert out.startswith("1 links down;") and "0 misrouted, 0 dropped" in out
    finally:
        assert main(["lab", "link", f"{link}=up", "--name", ovs_lab]) == 0
    assert "NO_FWD" not in _ofctl(ovs_lab, tiny, RTSW, "dump-ports-desc")
    assert f"output:{port}" in _ofctl(ovs_lab, tiny, RTSW, "dump-groups")


def test_a_down_link_degraded_comes_back_up(tiny: Fabric, ovs_lab, capsys):
    link = "rtsw-p0-r0:ctsw-p0-c2"
    port = _taken_down(tiny, ovs_lab, link)
    try:
        assert main(["lab", "link", f"{link}=0.5", "--name", ovs_lab]) == 0
        # up at half its weight, as the controller reads LINK=0.5: the port forwards again
        desc = _ofctl(ovs_lab, tiny, RTSW, "dump-ports-desc")
        assert "NO_FWD" not in desc.split(f" {port}(")[1].split("\n")[1]
        assert f"weight:50,watch_port:{port}," in _ofctl(ovs_lab, tiny, RTSW, "dump-groups")
        capsys.readouterr()
        assert main(["lab", "verify", "--name", ovs_lab, "--sample", "16", "--packets",
                     "5"]) == 0  # fmt: skip
        assert "0 misrouted, 0 dropped" in capsys.readouterr().out
    finally:
        assert main(["lab", "link", f"{link}=up", "--name", ovs_lab]) == 0
    assert "NO_FWD" not in _ofctl(ovs_lab, tiny, RTSW, "dump-ports-desc")


def test_fail_static_kill_the_controller(tiny: Fabric, ovs_lab, tmp_path):
    """`tectl serve --driver ovs --lab NAME` installs a job mix; kill -9 it while every flow
    streams: nothing lost, the flows stay on the bridges and still steer."""
    assignment, routes = solved(tiny, seed=1, fill=1.0)
    rows = np.flatnonzero(assignment.routed).tolist()
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(dump_placement(tiny, load_jobs(tiny, "random", seed=1, fill=1.0))))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    driver = OvsDriver(tiny, lab=ovs_lab)
    assert push(driver, diff(read_back(driver, driver.switches())[0], RouteSet(), tiny)).ok
    assert read_back(driver, driver.switches())[0] == RouteSet()  # no TE flows left over
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "tiny", "--driver",
         "ovs", "--lab", ovs_lab, "--listen", address, "--metrics-port", "0", "--insecure"],
        stderr=subprocess.PIPE, text=True)  # fmt: skip
    io = OvsLabIO(LabPlan(tiny, ovs_lab))
    try:
        assert proc.stderr is not None
        while "serving" not in proc.stderr.readline():
            assert proc.poll() is None, "tectl serve did not start"
        assert main(["job", "put", "--server", address, "--insecure", str(jobs)]) == 0
        deadline = time.monotonic() + 30
        while read_back(driver, driver.switches())[0] != routes:
            assert time.monotonic() < deadline, "the controller did not install the mix"
            time.sleep(0.1)
        streams = Streams(io, assignment, rows).start()
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(0.3)
        killed = streams.stop()
        assert killed.sent > 300 and killed.lost == 0, killed.per_flow_lost
        assert read_back(driver, driver.switches())[0] == routes  # the flows outlive it ...
        still = verify(io, assignment, rows[:8], packets=5)
        assert still.matched == still.checked > 0, still.problems  # ... and still steer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        io.close()
        driver.close()


def test_lab_down_stops_its_open_vswitch(tiny: Fabric):
    name = unique_name("lw")
    lab.up(tiny, name, "tiny", switch="ovs")
    pid = int((rundir(name) / "ovs-vswitchd.pid").read_text())
    names = lab.load_record(name).namespaces
    lab.down(name)
    assert not set(names) & netns.existing() and not lab.lab_path(name).exists()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")


def test_a_lab_of_irregular_wiring_on_bridges_routes_around_and_steers(tiny: Fabric, tmp_path):
    """`tiny` with two RTSW-CTSW cables missing and a host absent, as Open vSwitch bridges:
    no port for a missing cable, the select groups over the cables there (every flow of a
    job mix arrives with no TE entry), then TE entries through the ovs driver, every routed
    flow on its planned path."""
    from controller.formats.fabric_file import load_fabric
    from sim.lab.cli import install
    from sim.lab.gaps import gapped_cable_list

    missing = ("rtsw-p0-r0:ctsw-p0-c1", "rtsw-p1-r1:ctsw-p1-c3")
    source = tmp_path / "gaps.json"
    source.write_text(json.dumps(gapped_cable_list(tiny, "tiny-gaps", missing,
                                                   ["host-p1-r1-h1"])))  # fmt: skip
    fabric = load_fabric(str(source))
    name = unique_name("lg")
    record = lab.up(fabric, name, str(source), switch="ovs")
    io = OvsLabIO(LabPlan(fabric, name))
    driver = OvsDriver(fabric, lab=name)
    try:
        assert record.not_installed == 4 and record.unreachable == 0
        assert len(record.namespaces) == fabric.num_hosts - 1
        plan = LabPlan(fabric, name)
        cut = int(fabric.link_by_name(missing[0]))
        assert cut not in bridge_ports(plan, RTSW) and len(bridge_ports(plan, RTSW)) == 7
        groups = _ofctl(name, fabric, RTSW, "dump-groups")
        assert groups.count("group_id=") >= 3 and "bucket" in groups
        assignment, routes = solved(fabric, seed=1, fill=1.0)
        rows = np.flatnonzero(assignment.routed).tolist()
        streams = Streams(io, assignment, rows).start()  # the underlay alone
        time.sleep(0.5)
        alone = streams.stop()
        assert alone.sent > len(rows) and alone.lost == 0, alone.per_flow_lost
        install(driver, fabric, routes)
        report = verify(io, assignment, rows, packets=5)
        assert report.ok and report.checked == len(rows), report.problems
    finally:
        driver.close()
        io.close()
        lab.down(name)


def test_lab_status_names_a_dead_open_vswitch_daemon(tiny: Fabric, capsys) -> None:  # type: ignore[no-untyped-def]
    """ovs-vswitchd killed: the bridges forward nothing, and `lab status` says so and exits
    1 (it said 'up; 8/8 namespaces' and exited 0)."""
    from controller.drivers.ovs_daemons import lab_rundir, stop_rundir

    name = unique_name("ld")
    assert main(["lab", "up", "--fabric", "tiny", "--switch", "ovs", "--name", name]) == 0
    try:
        capsys.readouterr()
        assert main(["lab", "status", "--name", name]) == 0
        assert "NOT RUNNING" not in capsys.readouterr().out
        stop_rundir(lab_rundir(name), daemons=("ovs-vswitchd",))  # as a crash would leave it
        assert main(["lab", "status", "--name", name]) == 1
        assert "NOT RUNNING: ovs-vswitchd" in capsys.readouterr().out
    finally:
        lab.down(name)
