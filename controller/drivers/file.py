"""The file driver: one JSON table per switch in a directory, for review or hand-off.

    <directory>/<switch>.json = {"switch": "rtsw-p0-r0",
      "fabric": "pod", "fingerprint": "sha256:...",
      "entries": [
        {"in_port": 3, "dst_host": 12, "next_hop": 41, "owner": "fabric-te", "qp": -1,
         "in_port_name": "...", "dst_host_name": "...", "next_hop_name": "...",
         "in_port_port": "Ethernet0", "next_hop_port": "Ethernet48"}, ...]}

`qp` is the QP bucket an entry matches (-1, or absent: every bucket). The *_port fields are
the switch's own port names, written when the fabric's inventory names its ports.

The fabric's name and fingerprint and the *_name fields are written when the driver knows
the fabric, and checked on reading with one: a table written for another fabric is refused
(DriverError naming the file), never misread. A table without a fingerprint (written by an
older version) is read only if every entry carries its names and they name its ids in this
fabric; otherwise it is refused, and the message says why. Without a fabric, tables are
read by id, their structure checked.
A switch without a file has an empty table. Each apply rewrites one file atomically (a
temporary file in the same directory, then rename), so a reader sees the old table or the
new one, never half of each; temporary files left by a writer killed mid-apply are removed
when the driver starts. With a fabric, entries are checked against the switch's links.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.drivers.interface import Driver, split_ops
from controller.errors import DriverError, DriverRejected, DriverUnavailable
from controller.model import validation
from controller.model.documents import parse_text, read_text
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.plan import Op
from controller.routes.tables import Entry

FIELDS = ("in_port", "dst_host", "next_hop", "owner", "qp")
ROW_KEYS = FIELDS + ("in_port_name", "dst_host_name", "next_hop_name", "in_port_port",
                     "next_hop_port")
TABLE_KEYS = ("switch", "fabric", "fingerprint", "entries")


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
        self.orphans_removed = self._remove_orphans()
        self._closed = False

    def _remove_orphans(self) -> int:
        """Delete temporary tables left by a writer killed mid-apply (never renamed, so
        never part of any table); returns how many were removed."""
        removed = 0
        for tmp in self.directory.glob(".*.tmp"):
            try:
                fd = os.open(tmp, os.O_RDONLY)
            except FileNotFoundError:
                continue
            except OSError as err:
                raise DriverUnavailable(f"cannot open orphan {tmp}: {err}") from err
            try:  # a live writer holds its lock; a killed one's lock died with it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            finally:
                os.close(fd)
            tmp.unlink(missing_ok=True)
            removed += 1
        return removed

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
        for attempt in range(3):
            try:
                text = read_text(path, DriverError, "switch table", unreadable=DriverUnavailable)
                break
            except DriverUnavailable:
                if not path.exists():  # a switch without a file has an empty table
                    return ()
                if attempt == 2:
                    raise
                # there now, not a moment ago: another process's table write landed
                # between the failed open and this check; read it again
        doc = parse_text(text, "json", f"{path}: corrupt table", DriverError)
        try:
            entries = self._entries(switch, doc)
        except DriverError as err:
            raise DriverError(f"{path}: {err}") from None
        return tuple(sorted(entries, key=lambda e: e.match))

    def _entries(self, switch: str, doc: Any) -> list[Entry]:
        """A table's entries; with a fabric, checked against it (see the module docstring)."""
        top = validation.mapping(doc, "", DriverError)
        validation.keys(top, "top level", TABLE_KEYS, ("switch", "entries"), DriverError)
        if top["switch"] != switch:
            validation.fail(
                DriverError, "switch", f"{validation.shown(top['switch'])} is not {switch!r}"
            )
        fabric = self.fabric
        stamped = "fingerprint" in top
        if fabric is not None and stamped:
            name = validation.text(top.get("fabric"), "fabric", DriverError)
            mark = validation.text(top["fingerprint"], "fingerprint", DriverError)
            if (name, mark) != (fabric.name, fabric.fingerprint):
                raise DriverError(
                    f"written for fabric {name!r} ({mark}), not {fabric.name!r} "
                    f"({fabric.fingerprint}); refusing to read it"
                )
        rows = validation.listing(top["entries"], "entries", validation.MAX_FLOWS, DriverError)
        entries = []
        for i, value in enumerate(rows):
            where = f"entries[{i}]"
            row = validation.mapping(value, where, DriverError)
            validation.keys(row, where, ROW_KEYS, FIELDS[:4], DriverError)
            entry = Entry(
                switch,
                validation.integer(row["in_port"], f"{where}.in_port", 0, 1 << 62, DriverError),
                validation.integer(row["dst_host"], f"{where}.dst_host", 0, 1 << 62, DriverError),
                validation.integer(row["next_hop"], f"{where}.next_hop", 0, 1 << 62, DriverError),
                validation.text(row["owner"], f"{where}.owner", DriverError),
                validation.integer(row.get("qp", ALL_QPS), f"{where}.qp", ALL_QPS, 1 << 62,
                               DriverError),
            )  # fmt: skip
            if fabric is not None:
                self._check_entry(entry, row, where, named=not stamped)
            entries.append(entry)
        return entries

    def _check_entry(self, entry: Entry, row: Mapping[str, Any], where: str, named: bool) -> None:
        """The entry fits this switch, and its names (required when `named`) name its ids."""
        assert self.fabric is not None and self._ports is not None
        problem = entry_problem(self.fabric, self._ports, entry)
        if problem:
            validation.fail(DriverError, where, problem)
        for key, name_of in (("in_port", self.fabric.link_name),
                             ("dst_host", self.fabric.host_name),
                             ("next_hop", self.fabric.link_name)):  # fmt: skip
            label = f"{key}_name"
            if label not in row:
                if named:
                    validation.fail(
                        DriverError,
                        where,
                        f"no {label} and no fabric fingerprint in the table: cannot "
                        f"check it against fabric {self.fabric.name!r}; refusing it",
                    )
                continue
            expect = name_of(getattr(entry, key))
            if row[label] != expect:
                got, value = validation.shown(row[label]), getattr(entry, key)
                validation.fail(DriverError, f"{where}.{label}",
                            f"{got}, but {key} {value} is {expect!r} in fabric "
                            f"{self.fabric.name!r}: written for another fabric?")  # fmt: skip

    def _row(self, entry: Entry) -> dict[str, Any]:
        row: dict[str, Any] = {name: getattr(entry, name) for name in FIELDS}
        if self.fabric is not None:
            row["in_port_name"] = self.fabric.link_name(entry.in_port)
            row["dst_host_name"] = self.fabric.host_name(entry.dst_host)
            row["next_hop_name"] = self.fabric.link_name(entry.next_hop)
            for key in ("in_port", "next_hop"):
                port = self.fabric.port_at(entry.switch, getattr(entry, key))
                if port:
                    row[f"{key}_port"] = port
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
        doc: dict[str, Any] = {"switch": switch}
        if self.fabric is not None:
            doc |= {"fabric": self.fabric.name, "fingerprint": self.fabric.fingerprint}
        doc["entries"] = [self._row(table[k]) for k in sorted(table)]
        try:
            self.directory.mkdir(parents=True, exist_ok=True)  # removed under us: made again
            fd, tmp = tempfile.mkstemp(prefix=f".{switch}.", suffix=".tmp", dir=self.directory)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # marks the file as being written
                with os.fdopen(fd, "w") as out:
                    json.dump(doc, out, indent=1)
                    out.write("\n")
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:  # the cause, not the temporary file's name: the same each
            # time, so a switch left differing by it is not reported anew at every reconcile
            raise DriverUnavailable(f"cannot write {path}: {err.strerror or err}") from err

    def close(self) -> None:
        self._closed = True
