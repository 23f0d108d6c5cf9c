"""Where the controller's inputs live: one small key-value interface, and its embedded backend.

A `Store` holds records (bytes) under string keys, each with the store revision of its last
change (its mod revision). Every write is one key, guarded: `commit(key, value, expect)`
succeeds only if the key's mod revision is still `expect` (0: absent), so two writers can
never lose each other's update (StoreConflict tells the loser to re-read). `follow` streams
other writers' changes; `leadership` elects the one replica that pushes to the switches.

Two backends, chosen by URL (`open_store`):

    dir:PATH                 embedded: one file per key in a local directory (this module)
    etcd://HOST:PORT[,..]/P  etcd v3, for replicas (controller.service.etcd)

The directory backend: `PATH/format.json` names the format version and the fabric; each key
is a file `<quoted key>.rec` (a long key: its first part and a digest) holding one JSON object
{format, key, revision, crc32, value}.
A write goes to a temporary file, is fsynced, renamed over the old one and the directory is
fsynced, so a reader sees the old record or the new one. A file that does not parse, whose
checksum does not match (a disk that lost part of a write), or that names another format or
fabric is reported as StoreCorrupt and the store refuses to open: state is never half-read.
A deleted key leaves a tombstone so that revisions only grow; only the newest is kept (a
service that creates and deletes jobs for months keeps one file per live key, and one).
One process at a time: the directory is locked (flock) while open.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from urllib.parse import quote

from controller.errors import InputError, StoreConflict, StoreCorrupt, StoreUnavailable

log = logging.getLogger("fabric_te.store")
FORMAT = 1  # version of the stored layout and records; bumped on incompatible change
STORES_GROUP = "fabric_te.stores"  # entry points: scheme -> Store class with from_url
NAME_MAX = 255  # bytes in a file name on the file systems a store lives on (ext4, xfs, tmpfs)
# (key, value or None for a delete, mod revision): one change seen by `follow`
Change = tuple[str, bytes | None, int]


@dataclass(frozen=True)
class Loaded:
    """Every record of a store at one revision."""

    revision: int
    records: dict[str, tuple[bytes, int]]  # key -> (value, mod revision)


class Leadership(ABC):
    """Which replica pushes. `check` asks the store itself (not a cached belief) and raises
    Fenced unless this replica holds leadership right now."""

    replica: str = ""

    @abstractmethod
    def is_leader(self) -> bool:
        """This replica's current belief (refreshed in the background)."""

    @abstractmethod
    def leader(self) -> str:
        """The leader's replica id, '' if none known."""

    @abstractmethod
    def check(self) -> None:
        """Raise Fenced unless the store confirms this replica's leadership now."""

    def guard(self) -> tuple[str, int] | None:
        """(election key, its create revision) for store writes only a leader may make."""
        return None

    def start(self, on_change: Callable[[bool], None]) -> None:
        """Campaign in the background; `on_change(is_leader)` on every change of role."""
        on_change(self.is_leader())

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Resign and stop campaigning."""


class Solo(Leadership):
    """The only replica (a private store): always the leader."""

    def __init__(self, replica: str = "solo") -> None:
        self.replica = replica

    def is_leader(self) -> bool:
        return True

    def leader(self) -> str:
        return self.replica

    def check(self) -> None:
        return None


class Store(ABC):
    """Guarded single-key writes, a consistent load, and a stream of others' changes."""

    url: str = ""

    @abstractmethod
    def load(self) -> Loaded:
        """Every record, consistently at one revision."""

    def get(self, key: str) -> tuple[bytes | None, int, int]:
        """(value or None, its mod revision or 0, the store's revision) of one key."""
        loaded = self.load()
        value, rev = loaded.records.get(key, (None, 0))
        return value, rev, loaded.revision

    @abstractmethod
    def commit(
        self,
        key: str,
        value: bytes | None,
        expect: int | None,
        fence: tuple[str, int] | None = None,
    ) -> int:
        """Put `value` at `key` (None: delete) if its mod revision is `expect` (0: absent,
        None: no check) and, with `fence`, if that election key still has that create
        revision; returns the new revision. StoreConflict if a guard failed, Fenced if the
        fence did, StoreUnavailable if the store cannot be reached."""

    def follow(  # noqa: B027 - a private store has no other writers
        self, after: int, apply: Callable[[list[Change]], None]
    ) -> None:
        """Call `apply` with the changes of other writers after revision `after`, in order,
        from a background thread, until `close`. A private store has none."""

    def leadership(self, replica: str, ttl: float) -> Leadership:
        """The election among the replicas sharing this store."""
        return Solo(replica)

    @property
    def healthy(self) -> bool:
        """False while the store cannot be reached."""
        return True

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the store; unusable afterwards."""


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/fabric-te (default ~/.local/state/fabric-te)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "fabric-te"


def open_store(url: str, fabric_name: str) -> Store:
    """The store named by `url`: dir:PATH (built in), or SCHEME://... for a store class
    registered under the `fabric_te.stores` entry point group by that scheme (etcd://
    HOST:PORT[,HOST:PORT..]/PREFIX ships), built by its `from_url(url, fabric_name)`."""
    if url.startswith("dir:") and not url[4:].strip():
        raise InputError("--store: dir: needs a path (dir:PATH)")
    if url.startswith("dir:"):
        return DirStore(Path(url[4:]).expanduser(), fabric_name)
    scheme = url.partition("://")[0] if "://" in url else ""
    found = [ep for ep in entry_points(group=STORES_GROUP) if ep.name == scheme]
    if found:
        return found[0].load().from_url(url, fabric_name)  # type: ignore[no-any-return]
    raise InputError(f"--store: {url!r} is none of memory (nothing kept across a restart), "
                     "dir:PATH and etcd://HOST:PORT[,..]/PREFIX")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirStore(Store):
    """The embedded store: one checksummed, atomically replaced file per key."""

    def __init__(self, path: Path, fabric_name: str) -> None:
        self.path = path
        self.url = f"dir:{path}"
        self.fabric_name = fabric_name
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise StoreUnavailable(f"{self.url}: cannot open: {err}") from err
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise StoreUnavailable(
                f"{self.url}: in use by another controller (its lock is held); give each "
                "controller its own state directory, or share state through etcd"
            ) from None
        self._mutex = threading.Lock()
        self._refused = ""  # why the last write failed ("": it did not)
        self._revs: dict[str, int] = {}
        self._revision = 0
        self._tombstone: tuple[str, Path] | None = None  # (key, file) of the newest
        try:
            self._open_format()
            self._records = self._read_all()
        except BaseException:
            self.close()
            raise

    @property
    def healthy(self) -> bool:
        """False while writes are refused: from a write that failed until one succeeds;
        while so, each call tries one (the format marker written again as it is), so that
        the store reads as ok again once it takes writes, not only at the next input."""
        if self._refused:
            with self._mutex:
                try:
                    self._write_file(self.path / "format.json", self._marker())
                except StoreUnavailable:
                    pass
        return not self._refused

    def _marker(self) -> str:
        return json.dumps({"format": FORMAT, "fabric": self.fabric_name})

    def _open_format(self) -> None:
        marker = self.path / "format.json"
        records = [p for p in self.path.iterdir() if p.suffix == ".rec"]
        if not marker.exists():
            if records:
                raise StoreCorrupt(
                    f"{self.url}: records without format.json: written by an older format "
                    f"(this controller reads format {FORMAT}); move the directory aside"
                )
            self._write_file(marker, self._marker())
            return
        try:
            doc = json.loads(marker.read_text())
            fmt, fabric = doc["format"], doc["fabric"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise StoreCorrupt(f"{marker}: unreadable format marker: {err}") from err
        if fmt != FORMAT:
            raise StoreCorrupt(
                f"{self.url}: written in format {fmt}, this controller reads format {FORMAT}"
            )
        if fabric != self.fabric_name:
            raise StoreCorrupt(
                f"{self.url}: holds the state of fabric {fabric!r}, not {self.fabric_name!r}"
            )

    def _read_all(self) -> dict[str, tuple[bytes, int]]:
        for tmp in self.path.glob(".*.tmp"):  # a write cut short: never renamed, never acked
            tmp.unlink(missing_ok=True)
        records: dict[str, tuple[bytes, int]] = {}
        tombstones: list[tuple[int, Path]] = []
        for path in sorted(self.path.glob("*.rec")):
            key, value, revision = self._read_record(path)
            self._revision = max(self._revision, revision)
            self._revs[key] = revision
            if value is None:
                tombstones.append((revision, path))
            else:
                records[key] = (value, revision)
        for _, path in sorted(tombstones)[:-1]:  # the newest keeps the revision counter
            path.unlink(missing_ok=True)
        if tombstones:
            newest = max(tombstones)[1]
            self._tombstone = (self._read_record(newest)[0], newest)
        return records

    def _read_record(self, path: Path) -> tuple[str, bytes | None, int]:
        try:
            doc = json.loads(path.read_bytes())
            fmt = doc["format"]
            key, revision, crc, text = doc["key"], int(doc["revision"]), doc["crc32"], doc["value"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise StoreCorrupt(f"{path}: truncated or corrupt record ({err}); not read") from err
        if fmt != FORMAT:
            raise StoreCorrupt(f"{path}: record of format {fmt}, this controller reads {FORMAT}")
        value = None if text is None else text.encode()
        if crc != zlib.crc32(value or b""):
            raise StoreCorrupt(f"{path}: checksum mismatch (a partial write?); not read")
        if self._file(key) != path:
            raise StoreCorrupt(f"{path}: holds key {key!r} of another file")
        return key, value, revision

    def _file(self, key: str) -> Path:
        """`<quoted key>.rec`; a key whose quoted name (or its `.NAME.tmp`) would pass the
        file system's 255 bytes (a 128-character job id of '/' or of non-ASCII letters is
        up to 1,536) is named by its first part and a digest of it instead."""
        name = f"{quote(key, safe='')}.rec"
        if len(name) + len("..tmp") > NAME_MAX:
            digest = hashlib.sha256(key.encode()).hexdigest()[:40]
            name = f"{quote(key, safe='')[:180]}~{digest}.rec"
        return self.path / name

    def _write_file(self, path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
            _fsync_dir(self.path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            why = f"{self.url}: cannot write {path.name}: {err}"
            if not self._refused:
                log.warning("store refusing writes: %s", why)
            self._refused = why
            raise StoreUnavailable(why) from err
        if self._refused:
            log.info("store takes writes again: %s", self.url)
            self._refused = ""

    def load(self) -> Loaded:
        with self._mutex:
            return Loaded(self._revision, dict(self._records))

    def commit(
        self,
        key: str,
        value: bytes | None,
        expect: int | None,
        fence: tuple[str, int] | None = None,
    ) -> int:
        with self._mutex:
            current = self._records.get(key, (b"", 0))[1]
            if expect is not None and current != expect:
                raise StoreConflict(f"{key}: changed at revision {current}, not {expect}")
            revision = self._revision + 1
            text = None if value is None else value.decode()
            doc = {
                "format": FORMAT, "key": key, "revision": revision,
                "crc32": zlib.crc32(value or b""), "value": text,
            }  # fmt: skip
            path = self._file(key)
            self._write_file(path, json.dumps(doc))
            self._revision = revision
            if value is None:
                self._records.pop(key, None)
                before, self._tombstone = self._tombstone, (key, path)
                if before is not None and before[1] != path and before[0] not in self._records:
                    before[1].unlink(missing_ok=True)  # the new one keeps the revision counter
            else:
                self._records[key] = (value, revision)
                if self._tombstone is not None and self._tombstone[0] == key:
                    self._tombstone = None  # its file holds the live record now
            return revision

    def close(self) -> None:
        fd, self._lock_fd = getattr(self, "_lock_fd", -1), -1
        if fd >= 0:
            os.close(fd)  # releases the lock
