"""The file driver: one JSON table per switch in a directory, for review or hand-off.

    <directory>/<switch>.json = {"switch": "rtsw-p0-r0", "entries": [
        {"in_port": 3, "dst_host": 12, "next_hop": 41, "owner": "fabric-te", "qp": -1,
         "in_port_name": "...", "dst_host_name": "...", "next_hop_name": "..."}, ...]}

`qp` is the QP bucket an entry matches (-1, or absent: every bucket).

The *_name fields are written when the driver knows the fabric and are ignored on reading.
A switch without a file has an empty table. Each apply rewrites one file atomically (a
temporary file in the same directory, then rename), so a reader sees the old table or the
new one, never half of each. With a fabric, entries are checked against the switch's links.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from controller.drivers.interface import Driver, split_ops
from controller.errors import DriverError, DriverRejected, DriverUnavailable
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.routes.entries import Entry, entry_problem, switch_ports
from controller.routes.plan import Op

FIELDS = ("in_port", "dst_host", "next_hop", "owner", "qp")


class FileDriver(Driver):
    """Driver writing per-switch JSON tables under `directory`."""

    name = "file"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        fabric: Fabric | None = None,
        switches: Iterable[str] | None = None,
        capacity: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.fabric = fabric
        self.capacity = capacity
        self._ports = switch_ports(fabric) if fabric is not None else None
        if switches is not None:
            self._switches: tuple[str, ...] | None = tuple(sorted(switches))
        elif self._ports is not None:
            self._switches = tuple(sorted(self._ports))
        else:
            self._switches = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DriverUnavailable(f"cannot create {self.directory}: {err}") from err
        self._closed = False

    @classmethod
    def for_conformance(cls, fabric: Fabric, workdir: Path) -> FileDriver:
        return cls(workdir / "tables", fabric=fabric)

    def _path(self, switch: str) -> Path:
        if not switch or "/" in switch or switch.startswith(".") or os.sep in switch:
            raise DriverRejected(f"bad switch name {switch!r}")
        if self._switches is not None and switch not in self._switches:
            raise DriverRejected(f"unknown switch {switch!r}")
        return self.directory / f"{switch}.json"

    def _check_open(self) -> None:
        if self._closed:
            raise DriverUnavailable("file driver is closed")

    def switches(self) -> tuple[str, ...]:
        self._check_open()
        if self._switches is not None:
            return self._switches
        return tuple(sorted(p.stem for p in self.directory.glob("*.json")))

    def read(self, switch: str) -> tuple[Entry, ...]:
        self._check_open()
        path = self._path(switch)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return ()
        except OSError as err:
            raise DriverUnavailable(f"cannot read {path}: {err}") from err
        try:
            doc = json.loads(text)
            entries = [
                Entry(switch, int(e["in_port"]), int(e["dst_host"]), int(e["next_hop"]),
                      str(e["owner"]), int(e.get("qp", ALL_QPS)))
                for e in doc["entries"]
            ]  # fmt: skip
        except (ValueError, KeyError, TypeError) as err:
            raise DriverError(f"{path}: corrupt table: {err}") from err
        return tuple(sorted(entries, key=lambda e: e.match))

    def _row(self, entry: Entry) -> dict[str, Any]:
        row: dict[str, Any] = {name: getattr(entry, name) for name in FIELDS}
        if self.fabric is not None:
            row["in_port_name"] = self.fabric.link_name(entry.in_port)
            row["dst_host_name"] = self.fabric.host_name(entry.dst_host)
            row["next_hop_name"] = self.fabric.link_name(entry.next_hop)
        return row

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self._check_open()
        path = self._path(switch)
        install, remove = split_ops(switch, ops)
        if self.fabric is not None and self._ports is not None:
            for entry in install:
                problem = entry_problem(self.fabric, self._ports, entry)
                if problem:
                    raise DriverRejected(problem)
        table = {e.match: e for e in self.read(switch)}
        for entry in install:
            table[entry.match] = entry
        for key in remove:
            table.pop(key, None)
        if self.capacity is not None and len(table) > self.capacity:
            raise DriverRejected(
                f"{switch}: table would hold {len(table)} entries, capacity {self.capacity}"
            )
        doc = {"switch": switch, "entries": [self._row(table[k]) for k in sorted(table)]}
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{switch}.", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "w") as out:
                    json.dump(doc, out, indent=1)
                    out.write("\n")
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:
            raise DriverUnavailable(f"cannot write {path}: {err}") from err

    def close(self) -> None:
        self._closed = True
