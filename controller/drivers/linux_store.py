"""What each lab switch is configured to hold: its TE table, kept on disk beside the lab.

The kernel forgets a route the moment its port goes admin-down, and no route flag survives
that (plain, `onlink` and nexthop-object routes are all flushed; see docs/dataplane.md).
A switch's configuration therefore lives here, not only in the kernel, as a real switch
keeps its ACLs in its own configuration store (SONiC's CONFIG_DB): the `linux` driver
writes a switch's whole wanted table after every batch it applies, and whoever restores a
flapped port (the driver's next batch, `LinuxDriver.reconcile`, the lab's restorer process)
reads it back from here. So a controller that is killed, or never ran, loses nothing.

One file per switch, `<lab dir>/te/<switch>.npy`: rows (in_port, dst_host, qp, next_hop,
realm) of int64, realm naming the owner through the lab's owner registry. A lock file per
switch (`flock`) serialises the processes that change a switch: hold `locked(switch)` across
the kernel change and the `save` that records it. Every save writes a new file and renames
it over the old one, so a file whose inode, size and modification time are those last seen
here is the table last loaded or saved here: `load` then answers from memory.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from controller.errors import DriverError, DriverUnavailable
from controller.routes.tables import Entry

Key = tuple[int, int, int]  # (in_port, dst_host, qp)
COLUMNS = 5  # in_port, dst_host, qp, next_hop, realm


class IntentStore:
    """The wanted TE table of every switch of one lab, one file each."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: dict[str, tuple[tuple[int, int, int], dict[Key, Entry]]] = {}

    @staticmethod
    def _signature(path: Path) -> tuple[int, int, int] | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _directory(self) -> None:
        """The store's directory, made inside the lab's; a lab directory gone (the lab taken
        down) is not made again: that would leave a lab no command can remove."""
        try:
            self.directory.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise DriverUnavailable(f"{self.directory.parent} is gone (the lab taken "
                                    "down?)") from None

    def _path(self, switch: str, suffix: str) -> Path:
        return self.directory / f"{switch}{suffix}"

    @contextmanager
    def locked(self, switch: str) -> Iterator[None]:
        """Hold the switch's lock (every process that changes the switch takes it)."""
        self._directory()
        with open(self._path(switch, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def load(self, switch: str, owner: Callable[[int], str]) -> dict[Key, Entry]:
        """The switch's wanted entries by match (none if nothing was ever saved)."""
        path = self._path(switch, ".npy")
        signature = self._signature(path)
        if signature is None:
            return {}
        seen = self._seen.get(switch)
        if seen is not None and seen[0] == signature:
            return dict(seen[1])
        try:
            rows = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise DriverError(f"{path}: corrupt TE table: {err}") from err
        if rows.ndim != 2 or rows.shape[1] != COLUMNS:
            raise DriverError(f"{path}: corrupt TE table: shape {rows.shape}")
        out: dict[Key, Entry] = {}
        names: dict[int, str] = {}
        for in_port, dst, qp, next_hop, realm in rows.tolist():
            if realm not in names:
                names[realm] = owner(realm)
            out[(in_port, dst, qp)] = Entry(switch, in_port, dst, next_hop, names[realm], qp)
        self._seen[switch] = (signature, dict(out))
        return out

    def save(self, switch: str, entries: Mapping[Key, Entry], realm: Callable[[str], int]) -> None:
        """Replace the switch's wanted entries (atomically: a reader sees old or new)."""
        rows = np.array(
            [(e.in_port, e.dst_host, e.qp, e.next_hop, realm(e.owner))
             for _, e in sorted(entries.items())], dtype=np.int64,
        ).reshape(-1, COLUMNS)  # fmt: skip
        self._directory()
        tmp, path = self._path(switch, ".tmp.npy"), self._path(switch, ".npy")
        np.save(tmp, rows, allow_pickle=False)
        os.replace(tmp, path)
        signature = self._signature(path)
        if signature is not None:
            self._seen[switch] = (signature, dict(entries))
