"""What every switch driver must do; run against each registered driver."""

from __future__ import annotations

import json

import pytest

from controller.drivers.file import FileDriver
from controller.drivers.interface import Driver, known_drivers, load_driver
from controller.errors import DriverError, DriverRejected, DriverTimeout, DriverUnavailable
from controller.model.clos import PRESETS, build
from controller.routes.entries import Entry
from controller.routes.plan import Add, Delete, Replace
from sim.driver import EmulatedDriver
from sim.switches import EmulatedFabric, Fault, SwitchTimeout

FABRIC = build(PRESETS["tiny"])
SWITCH = "rtsw-p0-r0"


def entry(n: int, c: int = 0, owner: str = "fabric-te") -> Entry:
    return Entry(SWITCH, FABRIC.access_link(n), 2 + n % 2, FABRIC.rack_link(0, c), owner)


@pytest.fixture(params=["emulated", "file"])
def driver(request, tmp_path):
    if request.param == "emulated":
        made = load_driver("emulated", fabric="tiny")
    else:
        made = load_driver("file", directory=tmp_path / "tables", fabric=FABRIC)
    yield made
    made.close()


def test_registry_lists_builtins_and_rejects_unknown_names():
    assert {"emulated", "file"} <= set(known_drivers())
    with pytest.raises(DriverError, match="known: .*emulated.*file"):
        load_driver("netconf-9000")
    with pytest.raises(DriverError, match="bad options"):
        load_driver("emulated", colour="blue")


def test_is_a_driver_and_lists_switches(driver):
    assert isinstance(driver, Driver)
    switches = driver.switches()
    assert SWITCH in switches and "atsw-c0-a0" in switches
    assert len(set(switches)) == len(switches) == 4 + 8 + 4


def test_reads_back_what_was_applied(driver):
    assert driver.read(SWITCH) == ()
    batch = [Add(entry(3, 1)), Add(entry(0, 2)), Add(entry(1, 3, owner="ops"))]
    driver.apply(SWITCH, batch, timeout=1.0)
    assert driver.read(SWITCH) == (entry(0, 2), entry(1, 3, owner="ops"), entry(3, 1))
    assert driver.read("rtsw-p0-r1") == ()


def test_reapplying_a_batch_is_idempotent(driver):
    batch = [Add(entry(0)), Replace(entry(1), entry(1, 2)), Delete(entry(2))]
    driver.apply(SWITCH, batch)
    first = driver.read(SWITCH)
    driver.apply(SWITCH, batch)
    assert driver.read(SWITCH) == first == (entry(0), entry(1, 2))


def test_replace_and_delete(driver):
    driver.apply(SWITCH, [Add(entry(0)), Add(entry(1))])
    driver.apply(SWITCH, [Replace(entry(0), entry(0, 3)), Delete(entry(1))])
    assert driver.read(SWITCH) == (entry(0, 3),)


def test_a_rejected_batch_changes_nothing(driver):
    driver.apply(SWITCH, [Add(entry(0))])
    bad = Entry(SWITCH, FABRIC.access_link(1), 2, FABRIC.rack_link(1, 0))  # not its link
    with pytest.raises(DriverRejected):
        driver.apply(SWITCH, [Add(entry(1)), Delete(entry(0)), Add(bad)])
    assert driver.read(SWITCH) == (entry(0),)
    with pytest.raises(DriverRejected):
        driver.apply(SWITCH, [Add(Entry("rtsw-p0-r1", 4, 0, FABRIC.rack_link(1, 0)))])
    assert driver.read("rtsw-p0-r1") == ()


def test_close_makes_the_driver_unusable(driver):
    with driver as same:
        assert same is driver
    with pytest.raises(DriverError):
        driver.read(SWITCH)
    with pytest.raises(DriverError):
        driver.apply(SWITCH, [Add(entry(0))])


# ---- driver specifics ------------------------------------------------------------------
def test_emulated_errors_keep_their_cause():
    em = EmulatedFabric(FABRIC)
    driver = EmulatedDriver(emulated=em)
    em.inject(SWITCH, Fault("timeout", delay=0.0))
    with pytest.raises(DriverTimeout) as info:
        driver.apply(SWITCH, [Add(entry(0))])
    assert isinstance(info.value.__cause__, SwitchTimeout)
    em.inject(SWITCH, Fault("die_halfway"))
    with pytest.raises(DriverUnavailable):
        driver.apply(SWITCH, [Add(entry(0)), Add(entry(1))])
    with pytest.raises(DriverUnavailable):
        driver.read(SWITCH)
    with pytest.raises(DriverError, match="fabric"):
        EmulatedDriver()


def test_file_tables_are_readable_json_written_atomically(tmp_path):
    driver = FileDriver(tmp_path, fabric=FABRIC)
    driver.apply(SWITCH, [Add(entry(0, 1))])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"{SWITCH}.json"]  # no temporary files left behind
    doc = json.loads((tmp_path / f"{SWITCH}.json").read_text())
    assert doc["entries"][0]["next_hop_name"] == "rtsw-p0-r0:ctsw-p0-c1"
    (tmp_path / "rtsw-p0-r1.json").write_text("{not json")
    with pytest.raises(DriverError, match="corrupt"):
        driver.read("rtsw-p0-r1")
    bare = FileDriver(tmp_path)
    assert bare.switches() == (SWITCH, "rtsw-p0-r1")
    assert bare.read(SWITCH) == (entry(0, 1),)
    with pytest.raises(DriverRejected):
        bare.read("../etc")
