"""The `sonic` driver: TE entries as ACL rules with a REDIRECT action in SONiC's CONFIG_DB.

Each switch's CONFIG_DB is a Redis database (`databases`: switch -> URL, or `server`: one
server with a database per switch, in switch-name order). The driver owns one ACL table,
ACL_TABLE|FABRIC_TE, and the rules under it; names, keys and fields come from
`controller.drivers.sonic_plan`, and every hash it writes is checked first against SONiC's
YANG models (`controller.drivers.sonic_schema`, libyang).

`apply` changes only the rules a batch names: each rule is set (HSET of its fields, in place
when it exists) or deleted (DEL), never the whole table, in one MULTI/EXEC transaction per
batch, sets before deletes (orchagent consumes them in that order: make before break). A
batch is refused whole (DriverRejected, nothing written) when an entry cannot be a rule of
its switch, the schema refuses a hash, or the switch's ACL budget (`capacity`, by default
the fabric's TE entries for the switch's tier) would be exceeded. `read` parses what the
database holds. As SONiC's config patcher offers, `dry_run` says what a batch would change,
`checkpoint` keeps a copy of every switch's TE table and rules in a file, and `rollback`
brings the switches back to it, rule by rule.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from controller.drivers import sonic_schema
from controller.drivers.interface import Driver, split_ops
from controller.drivers.sonic_plan import (
    DEFAULT_PRIORITY,
    RULE_PREFIX,
    TABLE_KEY,
    Rule,
    SonicPlan,
    json_patch,
)
from controller.errors import DriverError, DriverRejected, DriverTimeout, DriverUnavailable
from controller.model.fabric import SWITCH_TIERS, Fabric
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.plan import Batch, Op
from controller.routes.tables import Entry, Table

T = TypeVar("T")
Match = tuple[int, int, int]
Hashes = dict[str, dict[str, str]]  # CONFIG_DB key -> fields
SCAN_COUNT = 5000


@dataclass(frozen=True)
class Change:
    """What a batch does to one switch: rules set (new or changed in place), keys deleted,
    and the switch's rule count before and after against its budget."""

    switch: str
    table: dict[str, str] | None  # the ACL table's hash, when it must be set
    table_stale: tuple[str, ...]  # fields of the table's hash to remove
    sets: tuple[Rule, ...]
    deletes: tuple[str, ...]
    added: int  # of `sets`, rules on a match that held none
    held: tuple[str, ...]  # keys of `sets` the switch holds already (set in place)
    rules_before: int
    rules_after: int
    budget: int | None

    def patch(self) -> list[dict[str, object]]:
        """This change as a JSON Patch for SONiC's `config apply-patch`."""
        table = None if self.table is None else (TABLE_KEY, self.table)
        return json_patch(table, self.sets, self.deletes, self.held)

    def summary(self) -> str:
        budget = "unlimited" if self.budget is None else str(self.budget)
        return (f"{self.switch}: {self.added} new, {len(self.sets) - self.added} set in place, "
                f"{len(self.deletes)} deleted; {self.rules_before} -> {self.rules_after} ACL "
                f"rules (budget {budget})")  # fmt: skip


class _Switch:
    """One switch's CONFIG_DB connection and the lock its writers take."""

    def __init__(self, name: str, client: Any) -> None:
        self.name = name
        self.client = client
        self.lock = threading.Lock()


class SonicDriver(Driver):
    """Programs TE entries as CONFIG_DB ACL rules of the switches of `fabric`."""

    name = "sonic"

    def __init__(
        self,
        fabric: Fabric,
        databases: Mapping[str, str] | None = None,
        server: str | None = None,
        capacity: int | Mapping[str, int] | None = None,
        priority: int = DEFAULT_PRIORITY,
        validate: bool = True,
        checkpoints: str | os.PathLike[str] | None = None,
        timeout: float = 5.0,
    ) -> None:
        try:
            import redis  # noqa: F401
        except ImportError:
            raise DriverUnavailable(
                "the sonic driver needs the redis package (install the 'sonic' extra)"
            ) from None
        if validate:
            missing = sonic_schema.available()
            if missing:
                raise DriverUnavailable(f"sonic driver: cannot check writes: {missing}")
        self.fabric = fabric
        self.plan = SonicPlan(fabric, priority)
        self._ports = switch_ports(fabric)
        self._switches = self.plan.switches()
        if databases is None:
            if server is None:
                raise DriverError("sonic driver needs the switches' CONFIG_DB: `databases` "
                                  "(switch -> URL) or `server` (tectl: --config-db URL|FILE)")
            databases = {sw: _with_db(server, i) for i, sw in enumerate(self._switches)}
            _enough_databases(server, len(self._switches), min(timeout, 1.0))
        unknown = sorted(set(databases) - set(self._switches))
        if unknown:
            raise DriverError(f"sonic driver: {unknown[0]!r} is not a switch of {fabric.name!r}")
        unmapped = [sw for sw in self._switches if sw not in databases]
        if unmapped:  # routes for them could never be pushed: say so now, not at a push
            raise DriverError(
                f"sonic driver: no CONFIG_DB for {len(unmapped)} of the {len(self._switches)} "
                f"switches of {fabric.name!r} that hold TE entries: {', '.join(unmapped[:5])}"
                + (f" and {len(unmapped) - 5} more" if len(unmapped) > 5 else ""))
        shared = _shared_databases(databases)
        if shared:  # rule keys name ports, not switches: one switch's rules would be another's
            raise DriverError(f"sonic driver: {' and '.join(shared[:2])} are given one CONFIG_DB "
                              f"({databases[shared[0]]}): each switch needs a database of its "
                              "own")  # fmt: skip
        self._urls = dict(databases)
        self.capacity = capacity
        self.validate = validate
        self.checkpoints = None if checkpoints is None else Path(checkpoints)
        self.timeout = timeout
        self._open: dict[str, _Switch] = {}
        self._open_lock = threading.Lock()
        self._owned: tuple[Any, Path] | None = None  # a server this driver started
        self._closed = False

    @classmethod
    def for_conformance(cls, fabric: Fabric, workdir: Path) -> SonicDriver:
        """A driver on a Redis server of its own (a database per switch), stopped on close;
        skips when redis-server, the redis package or libyang is missing."""
        import pytest

        from controller.drivers.redis_server import RedisServer, redis_binary

        missing = sonic_schema.available()
        if redis_binary() is None:
            missing = "redis-server is not installed (Debian package redis-server)"
        try:
            import redis  # noqa: F401
        except ImportError:
            missing = "the redis package is not installed (the 'sonic' extra)"
        if missing:
            pytest.skip(f"sonic driver: {missing}")
        directory = Path(tempfile.mkdtemp(prefix="fte-redis-"))  # short: a unix socket path
        server = RedisServer(directory, databases=fabric.num_rtsws + fabric.num_ctsws
                             + fabric.num_atsws)  # fmt: skip
        driver = cls(fabric, server=server.url(0).split("?")[0],
                     checkpoints=workdir / "checkpoints")  # fmt: skip
        driver._owned = (server, directory)
        return driver

    # ---- connections -------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise DriverUnavailable("sonic driver is closed")

    def _switch(self, switch: str) -> _Switch:
        self._check_open()
        url = self._urls.get(switch)
        if url is None:
            raise DriverRejected(f"unknown switch {switch!r} (no CONFIG_DB given for it)")
        with self._open_lock:
            found = self._open.get(switch)
            if found is None:
                import redis

                client = redis.Redis.from_url(url, decode_responses=True,
                                              socket_timeout=self.timeout,
                                              socket_connect_timeout=self.timeout)  # fmt: skip
                found = self._open[switch] = _Switch(switch, client)
            return found

    def _call(self, switch: str, what: str, fn: Callable[[], T]) -> T:
        """`fn()` with Redis errors raised as the driver's, naming the switch."""
        import redis

        try:
            return fn()
        except redis.TimeoutError as err:
            raise DriverTimeout(f"{switch}: CONFIG_DB {what} timed out: {err}") from err
        except redis.ConnectionError as err:
            raise DriverUnavailable(f"{switch}: CONFIG_DB unreachable ({what}): {err}") from err
        except redis.RedisError as err:
            raise DriverError(f"{switch}: CONFIG_DB {what} failed: {err}") from err

    # ---- reading -----------------------------------------------------------------
    def switches(self) -> tuple[str, ...]:
        self._check_open()
        return tuple(sw for sw in self._switches if sw in self._urls)

    def _rule_keys(self, sw: _Switch) -> list[str]:
        return self._call(sw.name, "scan", lambda: sorted(
            sw.client.scan_iter(match=_glob(RULE_PREFIX) + "*", count=SCAN_COUNT)))  # fmt: skip

    def _hashes(self, sw: _Switch, keys: Sequence[str]) -> Hashes:
        def fetch() -> list[dict[str, str]]:
            pipe = sw.client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            return list(pipe.execute())

        values = self._call(sw.name, "read", fetch) if keys else []
        return {k: v for k, v in zip(keys, values, strict=True) if v}

    def raw(self, switch: str) -> Hashes:
        """The switch's FABRIC_TE table and rules as CONFIG_DB holds them (key -> hash)."""
        sw = self._switch(switch)
        keys = [TABLE_KEY, *self._rule_keys(sw)]
        return self._hashes(sw, keys)

    def read(self, switch: str) -> tuple[Entry, ...]:
        return self.read_table(switch).entries()

    def read_table(self, switch: str) -> Table:
        """The rules the switch programs: none when FABRIC_TE's table is missing or not the
        one the driver writes (SONiC programs no rule of a missing table, and a rule only on
        the table's ports), so that a reconcile sees them missing and writes both again."""
        sw = self._switch(switch)
        keys = self._rule_keys(sw)
        hashes = self._hashes(sw, [TABLE_KEY, *keys] if keys else [])
        table = hashes.pop(TABLE_KEY, {})
        if keys and table != self.plan.table_fields(switch):
            return Table.of(switch, ())
        return Table.of(switch, (self.plan.entry(switch, k, v) for k, v in hashes.items()))

    # ---- planning a batch ------------------------------------------------------------
    def budget(self, switch: str) -> int | None:
        """ACL rules `switch` may hold (None: unlimited)."""
        if isinstance(self.capacity, Mapping):
            if switch in self.capacity:
                return self.capacity[switch]
        elif self.capacity is not None:
            return self.capacity
        tier = self.fabric.switch_kind(switch)
        return self.fabric.te_entries[SWITCH_TIERS.index(tier)]

    def _change(self, sw: _Switch, install: Sequence[Entry], remove: Iterable[Match]) -> Change:
        """What applying `install` and `remove` to `sw` does; DriverRejected if it cannot."""
        switch = sw.name
        remove = set(remove)  # a match both set and removed ends removed (installs go first)
        install = [e for e in install if e.match not in remove]
        rules = []
        for entry in install:
            problem = entry_problem(self.fabric, self._ports, entry)
            if problem:
                raise DriverRejected(problem)
            rules.append(self.plan.rule(entry))
        keys = self._rule_keys(sw)
        by_match: dict[Match, str] = {}
        for key in keys:
            match = self.plan.rule_match(switch, key)
            if match is not None:
                by_match[match] = key
        wanted = {r.key for r in rules}
        deletes = {by_match[m] for m in remove if m in by_match}
        deletes |= {by_match[e.match] for e in install
                    if e.match in by_match and by_match[e.match] not in wanted}  # fmt: skip
        deletes -= wanted
        added = sum(1 for e in install if e.match not in by_match)
        held = set(keys)
        after = len(keys) - len(deletes) + sum(1 for k in wanted if k not in held)
        budget = self.budget(switch)
        if budget is not None and after > budget and after > len(keys):
            raise DriverRejected(
                f"{switch}: the batch would leave {after} ACL rules in FABRIC_TE, over the "
                f"switch's budget of {budget}; nothing applied"
            )
        table = self.plan.table_fields(switch)
        table_write: dict[str, str] | None = None
        stale: tuple[str, ...] = ()
        if rules or after:  # rules are held after the batch: their table must be right
            current = self._call(switch, "read", lambda: sw.client.hgetall(TABLE_KEY))
            if current != table:
                table_write, stale = table, tuple(sorted(set(current) - set(table)))
        if self.validate and (rules or table_write is not None):
            sonic_schema.validate((TABLE_KEY, table), [(r.key, r.fields) for r in rules],
                                  self.plan.ingress_ports(switch), where=switch)  # fmt: skip
        return Change(switch, table_write, stale, tuple(rules), tuple(sorted(deletes)), added,
                      tuple(r.key for r in rules if r.key in held), len(keys), after,
                      budget)  # fmt: skip

    def dry_run(self, switch: str, ops: Sequence[Op]) -> Change:
        """What `apply(switch, ops)` would change, checked as it would be; nothing written."""
        install, remove = split_ops(switch, ops)
        sw = self._switch(switch)
        with sw.lock:
            return self._change(sw, install, remove)

    # ---- writing -----------------------------------------------------------------
    def _commit(self, sw: _Switch, change: Change) -> None:
        """One MULTI/EXEC: the table if needed, rules set, then deletes."""
        if change.table is None and not change.sets and not change.deletes:
            return

        def run() -> None:
            pipe = sw.client.pipeline(transaction=True)
            if change.table is not None:  # in place: orchagent keeps the table and its rules
                if change.table_stale:
                    pipe.hdel(TABLE_KEY, *change.table_stale)
                pipe.hset(TABLE_KEY, mapping=change.table)
            for rule in change.sets:
                pipe.hset(rule.key, mapping=dict(rule.fields))
            if change.deletes:
                pipe.delete(*change.deletes)
            pipe.execute()

        self._call(sw.name, "write", run)

    def _apply(self, switch: str, install: Sequence[Entry], remove: Iterable[Match]) -> Change:
        sw = self._switch(switch)
        with sw.lock:
            change = self._change(sw, install, remove)
            self._commit(sw, change)
            return change

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self._check_open()
        install, remove = split_ops(switch, ops)
        self._apply(switch, install, remove)

    def apply_batch(self, batch: Batch, timeout: float | None = None) -> None:
        """The batch's tables as they are (no operation objects)."""
        self._check_open()
        drop = batch.drop
        remove = zip(drop.in_port.tolist(), drop.dst_host.tolist(), drop.qp.tolist(), strict=True)
        self._apply(batch.switch, batch.put.entries(), list(remove))

    # ---- checkpoints ---------------------------------------------------------------
    def _checkpoint_path(self, name: str) -> Path:
        if self.checkpoints is None:
            raise DriverError("sonic driver: no checkpoint directory given (`checkpoints`)")
        if not name or not all(ch.isalnum() or ch in "-_." for ch in name) or name[0] == ".":
            raise DriverError(f"bad checkpoint name {name!r}: letters, digits, '-', '_', '.'")
        return self.checkpoints / f"{name}.cp.json"

    def checkpoint(self, name: str) -> Path:
        """Keep every switch's FABRIC_TE table and rules in checkpoint `name` (a JSON file
        of CONFIG_DB hashes, per switch); its path."""
        path = self._checkpoint_path(name)
        doc = {"fabric": self.fabric.name, "fingerprint": self.fabric.fingerprint,
               "switches": {sw: self.raw(sw) for sw in self.switches()}}  # fmt: skip
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, path)
        except OSError as err:
            raise DriverError(f"cannot write checkpoint {path}: {err}") from err
        return path

    def list_checkpoints(self) -> tuple[str, ...]:
        if self.checkpoints is None or not self.checkpoints.is_dir():
            return ()
        return tuple(sorted(p.name[: -len(".cp.json")]
                            for p in self.checkpoints.glob("*.cp.json")))  # fmt: skip

    def rollback(self, name: str) -> dict[str, int]:
        """Bring every switch back to checkpoint `name`: rules it lacks or holds otherwise
        are set, rules it does not have deleted, one transaction per switch (checked like
        any batch first). Keys written or deleted, by switch (switches unchanged left out)."""
        path = self._checkpoint_path(name)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise DriverError(f"cannot read checkpoint {path}: {err}") from err
        if (doc.get("fabric"), doc.get("fingerprint")) != (self.fabric.name,
                                                            self.fabric.fingerprint):
            raise DriverError(f"checkpoint {name!r} was taken on another fabric")
        saved: dict[str, Hashes] = doc.get("switches", {})
        changed: dict[str, int] = {}
        for switch in self.switches():
            want = saved.get(switch, {})
            sw = self._switch(switch)
            with sw.lock:
                have = self.raw(switch)
                sets = {k: v for k, v in want.items() if have.get(k) != v}
                deletes = sorted(k for k in have if k not in want)
                if not sets and not deletes:
                    continue
                for key, fields in want.items():  # entries of this fabric, or refused
                    if key != TABLE_KEY:
                        self.plan.entry(switch, key, fields)
                budget = self.budget(switch)
                rules = sum(1 for k in want if k != TABLE_KEY)
                if budget is not None and rules > budget:
                    raise DriverRejected(f"{switch}: checkpoint {name!r} holds {rules} ACL rules, "
                                         f"over the switch's budget of {budget}")  # fmt: skip
                if self.validate:
                    sonic_schema.validate(
                        (TABLE_KEY, want[TABLE_KEY]) if TABLE_KEY in want else None,
                        [(k, v) for k, v in sets.items() if k != TABLE_KEY],
                        self.plan.ingress_ports(switch), where=switch)  # fmt: skip
                self._restore(sw, sets, deletes, have)
                changed[switch] = len(sets) + len(deletes)
        return changed

    def _restore(self, sw: _Switch, sets: Hashes, deletes: list[str], have: Hashes) -> None:
        def run() -> None:
            pipe = sw.client.pipeline(transaction=True)
            for key, fields in sorted(sets.items()):
                stale = sorted(set(have.get(key, {})) - set(fields))
                if stale:
                    pipe.hdel(key, *stale)
                pipe.hset(key, mapping=fields)
            if deletes:
                pipe.delete(*deletes)
            pipe.execute()

        self._call(sw.name, "rollback", run)

    # ---- closing -----------------------------------------------------------------
    def close(self) -> None:
        self._closed = True
        with self._open_lock:
            for sw in self._open.values():
                try:
                    sw.client.close()
                except Exception:  # noqa: BLE001 - closing a dead connection is not an error
                    pass
            self._open.clear()
        owned, self._owned = self._owned, None
        if owned is not None:
            server, directory = owned
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)


def config_db_options(value: str) -> dict[str, object]:
    """The driver's options from the one flag that names the CONFIG_DBs (`tectl serve` and
    `tectl solve --apply sonic` take it as --config-db): `server` (a URL) or `databases` (a
    JSON file of switch -> URL)."""
    from controller.errors import InputError
    from controller.model.documents import parse_text, read_text

    if "://" in value:
        return {"server": value}
    doc = parse_text(read_text(Path(value), InputError, "--config-db"), "json",
                     f"--config-db {value}", InputError)  # fmt: skip
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise InputError(f"--config-db {value}: want a JSON object of switch -> Redis URL")
    return {"databases": doc}


def _enough_databases(server: str, needed: int, timeout: float) -> None:
    """DriverError when `server` answers that it has fewer than `needed` databases (switch
    i is database i); a server that does not answer yet is left to the reads and pushes."""
    import redis

    try:
        client = redis.Redis.from_url(server, socket_timeout=timeout,
                                      socket_connect_timeout=timeout)  # fmt: skip
        try:
            have = int(str(client.config_get("databases").get("databases", needed)))
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return
    if have < needed:
        raise DriverError(
            f"sonic driver: server {server!r} has {have} databases and the fabric {needed} "
            "switches with TE entries, one database each: raise `databases` in its "
            "redis.conf, or give a JSON map of switch -> URL"
        )


def _with_db(server: str, db: int) -> str:
    """`server`'s URL pointing at database `db`, its other parts (password, query) kept;
    DriverError if it names a database itself (the driver gives switch i database i)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    url = urlsplit(server)
    if url.scheme not in ("redis", "rediss", "unix"):
        raise DriverError(f"sonic driver: server {server!r}: want a redis://, rediss:// or "
                          "unix:// URL")  # fmt: skip
    query = parse_qsl(url.query, keep_blank_values=True)
    named = [v for k, v in query if k == "db"]
    if url.scheme != "unix" and url.path.strip("/"):
        named.append(url.path.strip("/"))
    if named:
        raise DriverError(
            f"sonic driver: server {server!r} names database {named[0]}: with one server for "
            "every switch, switch i gets database i (0, 1, ...); give the server without a "
            "database, or a JSON map of switch -> URL"
        )
    if url.scheme == "unix":  # urlunsplit would drop the empty host's "//"
        return f"unix://{url.netloc}{url.path}?{urlencode([*query, ('db', str(db))])}"
    return urlunsplit(url._replace(path=f"/{db}"))


def _shared_databases(databases: Mapping[str, str]) -> list[str]:
    """The first two switches (in name order) whose URLs name one database, or []."""
    from urllib.parse import parse_qsl, urlsplit

    seen: dict[tuple[str, str], str] = {}
    for switch in sorted(databases):
        url = urlsplit(databases[switch])
        db = dict(parse_qsl(url.query)).get("db", "0")
        try:
            port = str(url.port or 6379)
        except ValueError:  # not a port: the connection will say so
            port = url.netloc
        if url.scheme == "unix":
            key = (url.path, db)
        else:
            key = (f"{(url.hostname or 'localhost').lower()}:{port}", url.path.strip("/") or db)
        if key in seen:
            return [seen[key], switch]
        seen[key] = switch
    return []


def _glob(text: str) -> str:
    """`text` with Redis glob characters escaped."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
