"""Switch drivers: one small interface, found by name through entry points.

A driver programs TE entries into switches. It reads a switch's table, applies one batch of
our operations (controller.routes.plan.Add/Replace/Delete) to one switch all or nothing, and closes.
Applying the same batch twice leaves the same table (Add and Replace set an entry, Delete
removes it if present), so a batch whose answer was lost can be retried.

Pushes and read-backs go through `apply_batch` and `read_table`, which by default use
`apply` (the batch's operations one by one) and `read`. A driver that can take and give a
switch's table as columns (`controller.routes.tables.Table`, `controller.routes.plan.Batch`)
overrides them and skips one Python object per entry; the conformance suite checks that both
ways agree.

Drivers register under the entry-point group "fabric_te.drivers"; `load_driver(name, ...)`
builds one. Every failure is raised as a DriverError of `controller.errors` (DriverTimeout,
DriverRejected or DriverUnavailable where it is one of those), with the lower-layer error kept
as the cause. `controller.drivers.conformance` is the suite every driver must pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from controller.errors import DriverError, DriverRejected
from controller.model.fabric import Fabric
from controller.routes.plan import Batch, Delete, Op
from controller.routes.tables import Entry, Table

GROUP = "fabric_te.drivers"


class Driver(ABC):
    """Reads and programs the TE tables of a set of switches."""

    name: ClassVar[str] = "driver"
    # whether batches to different switches gain from being applied on threads at once
    # (calls that wait on remote agents); a driver that does the work in this process says
    # False, and `push` applies its batches one after the other in the caller's thread
    concurrent: ClassVar[bool] = True

    @abstractmethod
    def switches(self) -> tuple[str, ...]:
        """Names of the switches this driver can program."""

    @abstractmethod
    def read(self, switch: str) -> tuple[Entry, ...]:
        """The switch's installed entries, sorted by (in_port, dst_host, qp)."""

    @abstractmethod
    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        """Apply a batch to one switch, all or nothing, within `timeout` seconds."""

    def read_table(self, switch: str) -> Table:
        """The switch's installed entries as a table (by default from `read`)."""
        return Table.of(switch, self.read(switch))

    def apply_batch(self, batch: Batch, timeout: float | None = None) -> None:
        """Apply a batch to its switch, all or nothing (by default its ops through `apply`)."""
        self.apply(batch.switch, batch.ops, timeout)

    def apply_batches(
        self, batches: Sequence[Batch], timeout: float | None = None
    ) -> list[DriverError | None]:
        """Apply batches for different switches, each all or nothing, one after the other;
        how each went (None: applied). By default `apply_batch` for each; a driver that
        can check many at once overrides it (`push` calls it when not `concurrent`)."""
        errors: list[DriverError | None] = []
        for batch in batches:
            try:
                self.apply_batch(batch, timeout)
            except DriverError as err:
                errors.append(err)
            else:
                errors.append(None)
        return errors

    @abstractmethod
    def close(self) -> None:
        """Release connections; the driver is unusable afterwards."""

    @classmethod
    def for_conformance(cls, fabric: Fabric, workdir: Path) -> Driver:
        """A fresh driver for `fabric`, for the conformance suite; state goes under
        `workdir`. Override where the constructor needs more; call `pytest.skip` with the
        reason where this environment cannot have one."""
        return cls(fabric=fabric)  # type: ignore[call-arg]

    def __enter__(self) -> Driver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def split_ops(switch: str, ops: Sequence[Op]) -> tuple[list[Entry], list[tuple[int, int, int]]]:
    """(entries to set, keys (in_port, dst_host, qp) to remove) of a batch; DriverRejected
    if an op is for another switch."""
    install: list[Entry] = []
    remove: list[tuple[int, int, int]] = []
    for op in ops:
        if op.entry.switch != switch:
            raise DriverRejected(f"batch for {switch} holds an entry for {op.entry.switch}")
        if isinstance(op, Delete):
            remove.append(op.entry.match)
        else:
            install.append(op.entry)
    return install, remove


def known_drivers() -> tuple[str, ...]:
    """Names registered under the entry-point group."""
    return tuple(sorted({ep.name for ep in entry_points(group=GROUP)}))


def driver_class(name: str) -> type[Driver]:
    """The driver class registered as `name`."""
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        raise DriverError(
            f"unknown driver {name!r}; known: {', '.join(known_drivers()) or '(none)'}"
        )
    try:
        cls = found[0].load()
    except (ImportError, AttributeError) as err:
        raise DriverError(f"driver {name!r} cannot be loaded: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverError(f"driver {name!r} does not implement controller.drivers.interface.Driver")
    return cls


def load_driver(name: str, **options: Any) -> Driver:
    """Build the driver registered as `name` with `options`."""
    cls = driver_class(name)
    try:
        driver = cls(**options)
    except TypeError as err:
        raise DriverError(f"driver {name!r}: bad options: {err}") from err
    if not isinstance(driver, Driver):
        raise DriverError(f"driver {name!r} does not implement controller.drivers.interface.Driver")
    return driver
