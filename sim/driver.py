"""The emulated driver: programs the in-process switches of sim.emulated.

Build a fresh emulated fabric with `load_driver("emulated", fabric="tiny")` (a preset name,
a fabric file or a Fabric), or share an existing one with `EmulatedDriver(emulated=...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from controller.drivers.interface import Driver, split_ops
from controller.errors import (
    DriverError,
    DriverRejected,
    DriverTimeout,
    DriverUnavailable,
    FabricError,
)
from controller.model.fabric import Fabric
from controller.routes.plan import Batch, Op
from controller.routes.tables import Entry, Table
from sim.switches import (
    EmulatedFabric,
    SwitchDown,
    SwitchError,
    SwitchRejected,
    SwitchTimeout,
)


class EmulatedDriver(Driver):
    """Driver for an `EmulatedFabric`, built from a fabric (or preset name) or given one."""

    name = "emulated"
    concurrent = False  # in-process switches: threads would only share the interpreter

    def __init__(
        self,
        fabric: Fabric | str | None = None,
        emulated: EmulatedFabric | None = None,
        capacity: int | Mapping[str, int] | None = None,
        seed: int = 0,
    ) -> None:
        if emulated is None:
            if fabric is None:
                raise DriverError("emulated driver needs a fabric or an emulated fabric")
            if isinstance(fabric, str):
                from controller.formats.fabric_file import load_fabric

                try:
                    fabric = load_fabric(fabric)
                except FabricError as err:
                    raise DriverError(f"emulated driver: {err}") from err
            emulated = EmulatedFabric(fabric, capacity=capacity, seed=seed)
        self.emulated = emulated
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise DriverUnavailable("emulated driver is closed")

    def switches(self) -> tuple[str, ...]:
        self._check_open()
        return self.emulated.names()

    def read(self, switch: str) -> tuple[Entry, ...]:
        return self.read_table(switch).entries()

    def read_table(self, switch: str) -> Table:
        self._check_open()
        try:
            return self.emulated.read_table(switch)
        except SwitchDown as err:
            raise DriverUnavailable(str(err)) from err
        except SwitchRejected as err:
            raise DriverError(str(err)) from err

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self._check_open()
        install, remove = split_ops(switch, ops)
        self._program(lambda: self.emulated.program(switch, install, remove, timeout=timeout))

    def apply_batch(self, batch: Batch, timeout: float | None = None) -> None:
        """The batch's tables as they are (no object per entry)."""
        self._check_open()
        self._program(
            lambda: self.emulated.program_tables(batch.switch, batch.put, batch.drop, timeout)
        )

    def apply_batches(
        self, batches: Sequence[Batch], timeout: float | None = None
    ) -> list[DriverError | None]:
        """The batches as they are, checked all at once, applied one by one (through
        `apply_batch` where a subclass overrides it)."""
        if type(self).apply_batch is not EmulatedDriver.apply_batch:
            return super().apply_batches(batches, timeout)
        self._check_open()
        outcomes = self.emulated.program_many([(b.switch, b.put, b.drop) for b in batches], timeout)
        return [None if err is None else _driver_error(err) for err in outcomes]

    @staticmethod
    def _program(call: Callable[[], None]) -> None:
        try:
            call()
        except SwitchError as err:
            raise _driver_error(err) from err

    def close(self) -> None:
        self._closed = True


def _driver_error(err: SwitchError) -> DriverError:
    """The driver's error for a switch's (the switch's kept as the cause)."""
    kind = {SwitchTimeout: DriverTimeout, SwitchRejected: DriverRejected,
            SwitchDown: DriverUnavailable}.get(type(err), DriverError)  # fmt: skip
    out = kind(str(err))
    out.__cause__ = err
    return out
