"""The conformance suite against every registered driver, and what is specific to ours."""

from __future__ import annotations

import json

import pytest

from controller.drivers.conformance import (
    CONFORMANCE_FABRIC,
    SWITCH,
    DriverConformance,
    conformance_driver,
    entry,
)
from controller.drivers.file import FileDriver
from controller.drivers.interface import known_drivers, load_driver
from controller.errors import DriverError, DriverRejected, DriverTimeout, DriverUnavailable
from controller.routes.plan import Add
from sim.driver import EmulatedDriver
from sim.switches import EmulatedFabric, Fault, SwitchTimeout

FABRIC = CONFORMANCE_FABRIC


@pytest.fixture(params=known_drivers())
def driver(request, tmp_path):
    """Every driver registered under fabric_te.drivers, built by its conformance hook."""
    made = conformance_driver(request.param, tmp_path)
    yield made
    made.close()


class TestEveryRegisteredDriver(DriverConformance):
    """The importable suite, once per registered driver."""


def test_registry_lists_builtins_and_rejects_unknown_names():
    assert {"emulated", "file"} <= set(known_drivers())
    with pytest.raises(DriverError, match="known: .*emulated.*file"):
        load_driver("netconf-9000")
    with pytest.raises(DriverError, match="bad options"):
        load_driver("emulated", colour="blue")


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
