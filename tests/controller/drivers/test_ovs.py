"""The ovs driver against Open vSwitch daemons of the test's own (userspace datapath): the
conformance suite, the flows it writes, and bundles applied all or nothing."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from controller.drivers import linux_plan
from controller.drivers.conformance import CONFORMANCE_FABRIC, SWITCH, DriverConformance, entry
from controller.drivers.ovs import OvsDriver
from controller.errors import DriverError, DriverRejected, DriverUnavailable
from controller.routes.plan import Add, Delete
from controller.routes.tables import Entry

FABRIC = CONFORMANCE_FABRIC
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def driver(tmp_path):
    made = OvsDriver.for_conformance(FABRIC, tmp_path)
    yield made
    made.close()


class TestOvsDriver(DriverConformance):
    """The importable suite, on an Open vSwitch of the test's own."""


def test_registered_under_the_driver_entry_points():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["fabric_te.drivers"]["ovs"] == (
        "controller.drivers.ovs:OvsDriver"
    )


def test_a_driver_given_neither_lab_nor_rundir_says_so(tmp_path):
    """It said "give its lab or its rundir, not both" where neither was given."""
    with pytest.raises(DriverError, match="one of them: neither was given"):
        OvsDriver(FABRIC)
    with pytest.raises(DriverError, match="one of them: not both"):
        OvsDriver(FABRIC, rundir=tmp_path, lab="x")


@pytest.mark.parametrize("lab", ["../x", "Bad_Name", "averyveryverylongname"])
def test_a_bad_lab_name_is_a_driver_error_naming_it(lab):
    """It was a ValueError out of the lab's naming plan: a traceback from `tectl serve`."""
    with pytest.raises(DriverError, match="bad lab name"):
        OvsDriver(FABRIC, lab=lab)


def test_a_lab_without_open_vswitch_is_named_as_such(tmp_path, monkeypatch):
    """A lab of Linux namespaces, or no lab at all, was 'no Open vSwitch running in
    .../ovs (no db.sock)', where `solve --apply ovs` names the driver to use."""
    monkeypatch.setattr(linux_plan, "LAB_STATE_ROOT", tmp_path)
    (tmp_path / "lx").mkdir()
    with pytest.raises(DriverUnavailable, match="'lx' has no Open vSwitch.*linux driver"):
        OvsDriver(FABRIC, lab="lx")
    with pytest.raises(DriverUnavailable, match="no lab 'gone' on this machine.*--switch ovs"):
        OvsDriver(FABRIC, lab="gone")


@pytest.mark.parametrize("said", ["Broken pipe", "End of file", "Connection reset by peer",
                                  "Connection refused"])  # fmt: skip
def test_ovs_vswitchd_gone_mid_call_is_unavailable_not_a_refusal(tmp_path, monkeypatch, said):
    """ovs-vswitchd killed while a bundle was sent made ovs-ofctl say 'Broken pipe': that
    was a DriverRejected ('the switch refused the bundle'), never retried by a push."""
    (tmp_path / "db.sock").touch()
    made = OvsDriver(FABRIC, rundir=tmp_path)
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 1, "", f"ovs-ofctl: talking to unix:{tmp_path}/te1.mgmt ({said})\n"))
    with pytest.raises(DriverUnavailable, match="bridge unreachable"):
        made.bundle(SWITCH, ["add priority=100,ip,actions=drop"])


def test_flows_match_port_destination_and_bucket_source_ports(driver):
    whole = entry(0, 1)
    part = Entry(SWITCH, whole.in_port, whole.dst_host, FABRIC.rack_link(0, 2), qp=5)
    driver.apply(SWITCH, [Add(whole), Add(part)])
    flows = sorted(line.split(" actions")[0].split(", ", 1)[1] + " actions" +
                   line.split(" actions")[1] for line in
                   driver._ofctl(SWITCH, "dump-flows", options=["--no-stats"]).splitlines()
                   if "cookie=0xfe7e" in line)  # fmt: skip
    assert flows == [
        "priority=100,ip,in_port=1,nw_dst=10.1.0.2 actions=output:6",
        "priority=101,udp,in_port=1,nw_dst=10.1.0.2,tp_src=0xc140/0xffc0,tp_dst=4791 "
        "actions=output:7",
    ]


def test_a_bundle_the_switch_refuses_changes_nothing(driver):
    driver.apply(SWITCH, [Add(entry(0))])
    good = driver._flow(SWITCH, entry(1))
    bad = "add priority=100,ip,in_port=2,nw_dst=10.1.0.9,actions=group:99"  # no such group
    with pytest.raises(DriverRejected, match="refused the bundle"):
        driver.bundle(SWITCH, [good, bad])
    assert driver.read(SWITCH) == (entry(0),)
    driver.apply(SWITCH, [Delete(entry(0)), Delete(entry(3))])
    assert driver.read(SWITCH) == ()


def test_flows_of_others_are_left_alone(driver):
    driver.bundle(SWITCH, ["add priority=100,ip,in_port=1,nw_dst=10.1.0.2,actions=drop"])
    assert driver.read(SWITCH) == ()  # no cookie of ours: not a TE flow
    driver.apply(SWITCH, [Add(entry(1))])
    dump = driver._ofctl(SWITCH, "dump-flows", options=["--no-stats"])
    assert "actions=drop" in dump and driver.read(SWITCH) == (entry(1),)


def test_a_delete_leaves_a_foreign_flow_of_the_same_match(driver):
    """`delete_strict` matches whatever the cookie: a delete of an entry the switch does not
    hold removed another's flow of that very match."""
    driver.bundle(SWITCH, [f"add cookie=0x1,{driver._match(SWITCH, entry(0))},actions=drop"])
    driver.apply(SWITCH, [Delete(entry(0))])
    assert "cookie=0x1," in driver._ofctl(SWITCH, "dump-flows", options=["--no-stats"])
    driver.apply(SWITCH, [Add(entry(1))])  # ours still go
    driver.apply(SWITCH, [Delete(entry(1))])
    assert driver.read(SWITCH) == ()


@pytest.mark.parametrize("flow", [
    "priority=100,ip,in_port=3,nw_dst=10.1.0.6,actions=drop",
    "priority=300,ip,in_port=4,nw_dst=10.1.0.7,actions=output:6",
])  # fmt: skip
def test_a_flow_with_our_cookie_we_did_not_write_fails_the_read(driver, flow):
    """Our mark on a flow the driver cannot have written (another action or priority) may
    steer what TE entries steer: the read fails naming it, instead of skipping it (never
    seen) or reading it as an entry (repaired at every reconcile, never matched)."""
    driver.bundle(SWITCH, [f"add cookie={0xFE7E << 48 | 1:#x},{flow}"])
    with pytest.raises(DriverError, match="a flow with fabric-te's cookie that it does not "
                       "write"):  # fmt: skip
        driver.read(SWITCH)


def test_a_match_set_and_removed_in_one_batch_ends_removed(driver):
    driver.apply(SWITCH, [Add(entry(1))])
    driver.apply(SWITCH, [Add(entry(0)), Delete(entry(0)), Add(entry(1, 2)), Delete(entry(1))])
    assert driver.read(SWITCH) == ()
