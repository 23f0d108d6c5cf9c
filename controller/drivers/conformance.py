"""The conformance suite every switch driver must pass, importable by any driver package.

A driver package runs it from one of its own test modules (pytest needed):

    import pytest
    from controller.drivers.conformance import DriverConformance

    class TestMyDriver(DriverConformance):
        @pytest.fixture
        def driver(self, tmp_path):
            made = MyDriver.for_conformance(CONFORMANCE_FABRIC, tmp_path)
            yield made
            made.close()

fabric-te's own tests run it against every driver registered under ``fabric_te.drivers``
through `conformance_driver`, which builds each with its `Driver.for_conformance` hook.
The suite uses the `tiny` preset fabric and the switch `rtsw-p0-r0`; a driver whose
environment is missing (no root, no lab) skips with the reason its hook gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.drivers.interface import Driver, driver_class
from controller.errors import DriverError, DriverRejected
from controller.model.clos import PRESETS, build
from controller.routes.plan import Add, Batch, Delete, Replace, diff
from controller.routes.tables import Entry, RouteSet, Table

CONFORMANCE_FABRIC = build(PRESETS["tiny"])
SWITCH = "rtsw-p0-r0"
__all__ = ["CONFORMANCE_FABRIC", "SWITCH", "DriverConformance", "conformance_driver"]


def conformance_driver(name: str, workdir: Path) -> Driver:
    """The registered driver `name`, built for the suite's fabric in `workdir`."""
    return driver_class(name).for_conformance(CONFORMANCE_FABRIC, workdir)


def entry(n: int, c: int = 0, owner: str = "fabric-te") -> Entry:
    """NIC n's entry on SWITCH: towards host 2 + n % 2 via the uplink to CTSW c."""
    fabric = CONFORMANCE_FABRIC
    return Entry(SWITCH, fabric.access_link(n), 2 + n % 2, fabric.rack_link(0, c), owner)


class DriverConformance:
    """What every driver must do; needs a `driver` fixture (a fresh driver, closed after)."""

    def test_is_a_driver_and_lists_switches(self, driver: Driver) -> None:
        assert isinstance(driver, Driver)
        switches = driver.switches()
        assert SWITCH in switches and "atsw-c0-a0" in switches
        assert len(set(switches)) == len(switches) == 4 + 8 + 4

    def test_reads_back_what_was_applied(self, driver: Driver) -> None:
        assert driver.read(SWITCH) == ()
        batch = [Add(entry(3, 1)), Add(entry(0, 2)), Add(entry(1, 3, owner="ops"))]
        driver.apply(SWITCH, batch, timeout=1.0)
        assert driver.read(SWITCH) == (entry(0, 2), entry(1, 3, owner="ops"), entry(3, 1))
        assert driver.read("rtsw-p0-r1") == ()

    def test_reapplying_a_batch_is_idempotent(self, driver: Driver) -> None:
        batch: list[Add | Replace | Delete] = [
            Add(entry(0)), Replace(entry(1), entry(1, 2)), Delete(entry(2))
        ]
        driver.apply(SWITCH, batch)
        first = driver.read(SWITCH)
        driver.apply(SWITCH, batch)
        assert driver.read(SWITCH) == first == (entry(0), entry(1, 2))

    def test_replace_and_delete(self, driver: Driver) -> None:
        driver.apply(SWITCH, [Add(entry(0)), Add(entry(1))])
        driver.apply(SWITCH, [Replace(entry(0), entry(0, 3)), Delete(entry(1))])
        assert driver.read(SWITCH) == (entry(0, 3),)

    def test_bucket_entries_sit_beside_the_whole_flow_entry(self, driver: Driver) -> None:
        whole = entry(0, 1)
        bucket = Entry(SWITCH, whole.in_port, whole.dst_host, CONFORMANCE_FABRIC.rack_link(0, 2),
                       whole.owner, qp=5)  # fmt: skip
        driver.apply(SWITCH, [Add(whole), Add(bucket)])
        assert driver.read(SWITCH) == (whole, bucket)
        driver.apply(SWITCH, [Delete(bucket)])
        assert driver.read(SWITCH) == (whole,)

    def test_a_rejected_batch_changes_nothing(self, driver: Driver) -> None:
        fabric = CONFORMANCE_FABRIC
        driver.apply(SWITCH, [Add(entry(0))])
        bad = Entry(SWITCH, fabric.access_link(1), 2, fabric.rack_link(1, 0))  # not its link
        with pytest.raises(DriverRejected):
            driver.apply(SWITCH, [Add(entry(1)), Delete(entry(0)), Add(bad)])
        assert driver.read(SWITCH) == (entry(0),)
        with pytest.raises(DriverRejected):
            driver.apply(SWITCH, [Add(Entry("rtsw-p0-r1", 4, 0, fabric.rack_link(1, 0)))])
        assert driver.read("rtsw-p0-r1") == ()

    def test_takes_planned_batches_of_tables_and_reads_them_back(self, driver: Driver) -> None:
        fabric = CONFORMANCE_FABRIC
        wanted = RouteSet({SWITCH: Table.of(SWITCH, [entry(3, 1), entry(0, 2), entry(1, 3)])})
        for _, batch in diff(RouteSet(), wanted, fabric).batches():
            driver.apply_batch(batch, timeout=1.0)
        assert driver.read_table(SWITCH) == driver.read(SWITCH) == wanted.table(SWITCH)
        driver.apply(SWITCH, [Add(entry(2, 1, owner="ops"))])
        installed = RouteSet({SWITCH: driver.read_table(SWITCH)})
        now = RouteSet({SWITCH: Table.of(SWITCH, [entry(0, 3), entry(3, 1)])})
        plan = diff(installed, now, fabric)
        assert plan.counts() == {"add": 0, "replace": 1, "delete": 1}
        for _, batch in plan.batches():
            driver.apply_batch(batch)
            driver.apply_batch(batch)  # idempotent
        expected = (entry(0, 3), entry(2, 1, owner="ops"), entry(3, 1))
        assert driver.read(SWITCH) == expected and driver.read_table(SWITCH) == expected
        assert driver.read_table("rtsw-p0-r1") == ()

    def test_a_rejected_batch_of_tables_changes_nothing(self, driver: Driver) -> None:
        fabric = CONFORMANCE_FABRIC
        driver.apply_batch(Batch.of_ops(SWITCH, [Add(entry(0))]))
        bad = Entry(SWITCH, fabric.access_link(1), 2, fabric.rack_link(1, 0))  # not its link
        with pytest.raises(DriverRejected):
            driver.apply_batch(Batch.of_ops(SWITCH, [Add(entry(1)), Delete(entry(0)), Add(bad)]))
        assert driver.read_table(SWITCH) == (entry(0),)

    def test_batches_for_many_switches_each_all_or_nothing(self, driver: Driver) -> None:
        fabric = CONFORMANCE_FABRIC
        other = "rtsw-p0-r1"
        theirs = Entry(other, fabric.access_link(4), 0, fabric.rack_link(1, 2))
        bad = Entry(SWITCH, fabric.access_link(1), 2, fabric.rack_link(1, 0))  # not its link
        batches = [
            Batch.of_ops(SWITCH, [Add(entry(0)), Add(bad)]),
            Batch.of_ops(other, [Add(theirs)]),
            Batch.of_ops("ctsw-p0-c0", []),
        ]
        errors = driver.apply_batches(batches, timeout=1.0)
        assert isinstance(errors[0], DriverRejected) and errors[1:] == [None, None]
        assert driver.read_table(SWITCH) == () and driver.read(other) == (theirs,)
        errors = driver.apply_batches([Batch.of_ops(SWITCH, [Add(entry(0))])])
        assert errors == [None] and driver.read(SWITCH) == (entry(0),)

    def test_close_makes_the_driver_unusable(self, driver: Driver) -> None:
        with driver as same:
            assert same is driver
        with pytest.raises(DriverError):
            driver.read(SWITCH)
        with pytest.raises(DriverError):
            driver.apply(SWITCH, [Add(entry(0))])
        with pytest.raises(DriverError):
            driver.read_table(SWITCH)
        with pytest.raises(DriverError):
            driver.apply_batch(Batch.of_ops(SWITCH, [Add(entry(0))]))
