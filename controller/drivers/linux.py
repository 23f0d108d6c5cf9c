"""The `linux` driver: TE entries as kernel policy routes in a lab's switch namespaces.

An entry <ingress port, destination host[, QP bucket]> -> next hop is one /32 route to the
host's loopback in the table of (ingress port, bucket) on that switch, via the far end of the
next-hop link; a fixed rule per used table selects it (`iif PORT`, plus `ipproto udp dport
4791 sport A:B` for a bucket), so the rule count depends on ports x buckets and never on the
number of entries. A destination without a TE route falls through to the main table, where
the underlay's ECMP routes live. Names, addresses, table ids and the route protocol come from
`controller.drivers.linux_plan`; the driver touches nothing outside that range.

`read` parses what the kernel holds (owner from the route realm, through the lab's owner
registry). `apply` validates the whole batch first, then uses `route replace` (make before
break); the netlink messages of a batch go out in bulk, hundreds per send, on one socket
per switch namespace (`controller.drivers.linux_netlink`). If the kernel refuses an
operation midway, the operations already done are undone and the error says what the
switch holds now. After every batch the switch's whole wanted
table is stored beside the lab (`controller.drivers.linux_store`), under a lock that
serialises every process changing that switch. Setting a port admin-down makes the kernel
drop every route through it: `read` shows the loss, and `reconcile` puts back what the
stored table wants once the port is up again, as does the next batch applied to that
switch; the lab's restorer (`sim.lab.restorer`) calls `reconcile` on every port that comes
up, so a flap loses nothing even with no controller running.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.drivers import linux_netlink as netlink
from controller.drivers.interface import Driver, split_ops
from controller.drivers.linux_netlink import RtnlSocket
from controller.drivers.linux_plan import (
    BUCKET_PRIORITY,
    BUCKET_SLOTS,
    DEFAULT_REALM,
    HOST_LOOPBACKS,
    MAX_BUCKETS,
    PORT_PRIORITY,
    ROCE_PORT,
    ROUTE_PROTO,
    TABLE_BASE,
    TABLE_END,
    LabPlan,
    is_own_table,
    lab_dir,
    sport_range,
)
from controller.drivers.linux_store import IntentStore
from controller.drivers.netns import NETNS_DIR
from controller.errors import DriverError, DriverRejected, DriverUnavailable, LabError
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.plan import Batch, Op
from controller.routes.tables import OWNER, Entry

Key = tuple[int, int, int]  # (in_port, dst_host, qp)


class OwnerRegistry:
    """Owner name <-> route realm, shared by every driver on one lab through a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known: dict[str, int] = {}  # names never change their realm: cache freely

    def _load(self) -> dict[str, int]:
        try:
            owners = json.loads(self.path.read_text())
        except FileNotFoundError:
            owners = {}
        except (OSError, ValueError) as err:
            raise DriverError(f"{self.path}: corrupt owner registry: {err}") from err
        owners[OWNER] = DEFAULT_REALM
        return {str(k): int(v) for k, v in owners.items()}

    def realm(self, owner: str) -> int:
        if owner in self._known:
            return self._known[owner]
        owners = self._load()
        self._known.update(owners)
        if owner in owners:
            return owners[owner]
        with self._lock, open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            owners = self._load()
            if owner not in owners:
                realm = max(owners.values()) + 1
                if realm > 0xFFFF:
                    raise DriverRejected(f"no route realm left for owner {owner!r}")
                owners[owner] = realm
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(owners, indent=1, sort_keys=True) + "\n")
                os.replace(tmp, self.path)
            self._known.update(owners)
            return owners[owner]

    def owner(self, realm: int) -> str:
        for owners in (self._known, self._load()):
            for name, value in owners.items():
                if value == realm:
                    self._known[name] = value
                    return name
        raise DriverError(f"route realm {realm} names no owner in {self.path}")


@dataclass
class _Switch:
    """One switch namespace: its netlink socket and port index maps."""

    name: str
    nl: RtnlSocket
    by_index: dict[int, int]  # ifindex -> link id
    ports: dict[int, tuple[int, int]]  # link id -> (ifindex, peer address as an integer)
    ifnames: dict[int, str]  # link id -> port name
    lock: threading.Lock = field(default_factory=threading.Lock)


def _shown(route: netlink.Route, sw: _Switch) -> str:
    """A kernel route as `ip route` writes it: addresses, not integers."""
    text = f"{ipaddress.IPv4Address(route.dst)}/{route.dst_len}"
    if route.gateway:
        text += f" via {ipaddress.IPv4Address(route.gateway)}"
    link = sw.by_index.get(route.oif)
    text += f" dev {sw.ifnames[link]}" if link in sw.ifnames else f" oif {route.oif}"
    return text + (" (multipath)" if route.multipath else "")


class LinuxDriver(Driver):
    """Programs the switches of lab `lab` (built for `fabric`) over netlink."""

    name = "linux"
    concurrent = False  # the work is this process's own (netlink in bulk): no threads

    def __init__(self, fabric: Fabric, lab: str, switches: Iterable[str] | None = None) -> None:
        try:
            self.plan = LabPlan(fabric, lab)
        except ValueError as err:
            raise DriverError(str(err)) from err
        self.fabric = fabric
        self._ports = switch_ports(fabric)
        self._switches = tuple(sorted(switches if switches is not None else self._ports))
        directory = lab_dir(lab)
        if not directory.is_dir():
            raise DriverUnavailable(f"no lab {lab!r} on this machine (no {directory})")
        if (directory / "ovs").is_dir():  # ovs_daemons.lab_rundir: its switches are bridges
            raise DriverUnavailable(f"lab {lab!r} has Open vSwitch bridges for switches (no "
                                    "namespace of their own): it is programmed by the ovs "
                                    "driver (--driver ovs)")  # fmt: skip
        self.owners = OwnerRegistry(directory / "owners.json")
        self.store = IntentStore(directory / "te")  # each switch's wanted table, on disk
        self._host_base = int(HOST_LOOPBACKS.network_address)
        self._slots: dict[str, dict[int, int]] = {}  # switch -> link id -> port slot
        self._open: dict[str, _Switch] = {}
        self._open_lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_conformance(cls, fabric: Fabric, workdir: Path) -> LinuxDriver:
        """A driver on a shared lab of `fabric` (built once per process by the lab plug-in
        under `fabric_te.labs`), with every TE entry removed first."""
        import pytest

        from controller.drivers.labs import conformance_lab

        try:
            lab = conformance_lab(fabric)
        except LabError as err:
            pytest.skip(f"linux driver: {err}")
        driver = cls(fabric=fabric, lab=lab)
        driver.clear()
        return driver

    # ---- connections -------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise DriverUnavailable("linux driver is closed")

    def _switch(self, switch: str) -> _Switch:
        self._check_open()
        if switch not in self._switches:
            raise DriverRejected(f"unknown switch {switch!r}")
        with self._open_lock:
            found = self._open.get(switch)
            ns = self.plan.netns(switch)
            if found is not None:
                if (NETNS_DIR / ns).exists():
                    return found
                # deleted (`ip netns del`, the lab taken down): the socket would keep the
                # namespace alive and every write would land in it, unseen
                del self._open[switch]
                found.nl.close()
                raise DriverUnavailable(f"{switch}: namespace {ns} is gone")
            try:  # a missing namespace is an error: nothing here ever creates one
                nl = RtnlSocket(ns)
                links = {link.name: link.ifindex for link in nl.links()}
            except OSError as err:
                raise DriverUnavailable(f"{switch}: cannot open namespace {ns}: {err}") from err
            by_index: dict[int, int] = {}
            ports: dict[int, tuple[int, int]] = {}
            ifnames: dict[int, str] = {}
            for link in self.plan.node_links[switch]:
                port = self.plan.port(switch, link)
                if port.ifname not in links:
                    nl.close()
                    raise DriverUnavailable(f"{switch}: port {port.ifname} missing in {ns}")
                by_index[links[port.ifname]] = link
                ports[link] = (links[port.ifname], int(ipaddress.IPv4Address(port.peer_address)))
                ifnames[link] = port.ifname
            made = _Switch(switch, nl, by_index, ports, ifnames)
            self._open[switch] = made
            return made

    def _table(self, switch: str, in_port: int, qp: int) -> int:
        """Kernel table of (ingress port, bucket) on `switch` (`LabPlan.table`, cached)."""
        slots = self._slots.get(switch)
        if slots is None:
            links = self.plan.node_links.get(switch, ())
            slots = self._slots[switch] = {link: i for i, link in enumerate(links)}
        slot = slots.get(in_port)
        table = TABLE_BASE + (slot or 0) * BUCKET_SLOTS + qp + 1
        if slot is None or not ALL_QPS <= qp < MAX_BUCKETS or table >= TABLE_END:
            return self.plan.table(switch, in_port, qp)  # raises, saying what is wrong
        return table

    # ---- reading -----------------------------------------------------------------
    def switches(self) -> tuple[str, ...]:
        self._check_open()
        return self._switches

    def _kernel(self, sw: _Switch) -> tuple[dict[Key, Entry], set[int]]:
        """(our entries, our tables that have a rule) as the kernel holds them."""
        try:
            routes = sw.nl.dump(ROUTE_PROTO)
            rules = sw.nl.rules()
        except OSError as err:
            raise DriverUnavailable(f"{sw.name}: netlink dump failed: {err}") from err
        entries: dict[Key, Entry] = {}
        owners: dict[int, str] = {}
        hosts, links = self.fabric.num_hosts, self.plan.node_links[sw.name]
        for route in routes:
            if not is_own_table(route.table):
                continue
            slot, q = divmod(route.table - TABLE_BASE, BUCKET_SLOTS)
            dst = route.dst - self._host_base
            next_hop = sw.by_index.get(route.oif)
            why = ("not a host route" if route.dst_len != 32
                   else "a multipath route" if route.multipath
                   else "not to a host of the fabric" if not 0 <= dst < hosts
                   else "out of a port not of this switch" if next_hop is None
                   else "in a table of no port of this switch" if slot >= len(links)
                   else "")  # fmt: skip
            if why or next_hop is None:
                raise DriverError(
                    f"{sw.name}: a route of protocol {ROUTE_PROTO} in TE table {route.table} "
                    f"is {why}: {_shown(route, sw)}; TE tables hold only this driver's host "
                    f"routes: remove it (ip route del ... table {route.table} proto "
                    f"{ROUTE_PROTO} in the switch's namespace) to read and push the switch")
            realm = (route.realm or DEFAULT_REALM) & 0xFFFF
            if realm not in owners:
                owners[realm] = self.owners.owner(realm)
            entry = Entry(sw.name, links[slot], dst, next_hop, owners[realm], q - 1)
            entries[entry.match] = entry
        ruled = {
            table
            for priority, table in rules
            if priority in (BUCKET_PRIORITY, PORT_PRIORITY) and is_own_table(table)
        }
        return entries, ruled

    def read(self, switch: str) -> tuple[Entry, ...]:
        """The entries the kernel forwards by: a route whose table no rule selects is not
        one (read as missing, so a reconcile puts the rule back)."""
        sw = self._switch(switch)
        with sw.lock:
            entries, ruled = self._kernel(sw)
        return tuple(entries[k] for k in sorted(entries)
                     if self._table(switch, k[0], k[2]) in ruled)  # fmt: skip

    # ---- writing -----------------------------------------------------------------
    def _route(self, sw: _Switch, entry: Entry, table: int) -> bytes:
        """The netlink message that sets `entry`'s route in `table` (its table)."""
        ifindex, gateway = sw.ports[entry.next_hop]
        return netlink.replace(table, self._host_base + entry.dst_host, gateway, ifindex,
                               self.owners.realm(entry.owner), ROUTE_PROTO)  # fmt: skip

    def _rule(self, sw: _Switch, add: bool, table: int) -> bytes:
        """The netlink message that adds (or removes) the rule selecting `table`."""
        in_port, qp = self.plan.table_key(sw.name, table)
        ifname = sw.ifnames[in_port]
        if qp == ALL_QPS:
            return netlink.rule(add, ifname, table, PORT_PRIORITY)
        return netlink.rule(add, ifname, table, BUCKET_PRIORITY, sport_range(qp), ROCE_PORT)

    def _send(self, sw: _Switch, what: str, messages: list[bytes], items: list[Any],
              gone_ok: bool = False) -> None:  # fmt: skip
        """Send `messages` (one per item of `items`); DriverError naming the first refused
        one. `gone_ok`: a delete of something already gone is not a refusal."""
        if not messages:
            return
        try:
            refused = sw.nl.send(messages)
        except OSError as err:
            raise DriverUnavailable(f"{sw.name}: netlink: {err}") from err
        if gone_ok:
            refused = [r for r in refused if r.errno not in (errno.ESRCH, errno.ENOENT)]
        if refused:
            first = refused[0]
            raise DriverError(f"{sw.name}: the kernel refused {len(refused)} of {len(messages)} "
                              f"{what}, first {items[first.at]}: "
                              f"{str(first).split(': ', 1)[1]}")  # fmt: skip

    def _validate(self, switch: str, install: list[Entry]) -> None:
        for entry in install:
            problem = entry_problem(self.fabric, self._ports, entry)
            if problem:
                raise DriverRejected(problem)
            self._table(switch, entry.in_port, entry.qp)  # port and bucket in range
            self.owners.realm(entry.owner)

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self._check_open()
        install, remove = split_ops(switch, ops)
        self._apply(switch, install, remove)

    def apply_batch(self, batch: Batch, timeout: float | None = None) -> None:
        """As `apply`, from the batch's tables (no operation objects made)."""
        self._check_open()
        remove = [e.match for e in batch.drop.entries()]
        self._apply(batch.switch, list(batch.put.entries()), remove)

    def _apply(self, switch: str, install: list[Entry], remove: list[Key]) -> None:
        """Set `install` and remove the matches `remove` on `switch`, all or nothing."""
        if switch not in self._switches:
            raise DriverRejected(f"unknown switch {switch!r}")
        self._validate(switch, install)
        sw = self._switch(switch)
        with sw.lock, self.store.locked(switch):
            before, ruled = self._kernel(sw)
            intent = self.store.load(switch, self.owners.owner)
            touched = {e.match for e in install} | set(remove)
            # Entries of ours the kernel dropped (a port went admin-down): put back those
            # whose port is up again, keep remembering the others.
            lost = {k: e for k, e in intent.items() if k not in before and k not in touched}
            up = self._ports_up(sw) if lost else set()
            target = dict(before)
            target.update({k: e for k, e in lost.items() if e.next_hop in up})
            for entry in install:
                target[entry.match] = entry
            for key in remove:
                target.pop(key, None)
            kept = {k: e for k, e in lost.items() if k not in target}  # port still down
            # Stored before the kernel is changed: a process killed part-way through the
            # batch leaves the store naming where the switch was going, so whoever restores
            # it next (a batch, `reconcile`, the restorer) completes the batch rather than
            # putting back entries it had already removed.
            self.store.save(switch, {**kept, **target}, self.owners.realm)
            try:
                self._converge(sw, before, target, ruled)
            except Exception as err:
                undo = "rolled back"
                try:
                    now, ruled_now = self._kernel(sw)
                    self._converge(sw, now, before, ruled_now)
                except Exception as again:  # the rollback itself failed: say so
                    undo = f"rollback failed ({again})"
                self.store.save(switch, intent, self.owners.realm)  # the batch was not taken
                held, _ = self._kernel(sw)
                cls = DriverRejected if undo == "rolled back" else DriverError
                raise cls(f"{switch}: kernel refused the batch ({err}); {undo}; the switch "
                          f"now holds {len(held)} TE entries") from err  # fmt: skip

    def _ports_up(self, sw: _Switch) -> set[int]:
        """Link ids of the switch's ports that are up (admin and carrier)."""
        try:
            links = sw.nl.links()
        except OSError as err:
            raise DriverUnavailable(f"{sw.name}: netlink link dump failed: {err}") from err
        return {sw.by_index[ln.ifindex] for ln in links if ln.up and ln.ifindex in sw.by_index}

    def _converge(
        self, sw: _Switch, have: dict[Key, Entry], want: dict[Key, Entry], ruled: set[int]
    ) -> None:
        """Change the kernel from `have` to `want`, each step one bulk send: rules of new
        tables, routes set (replace: make before break), routes deleted, then the rules of
        tables left empty."""
        used = {self._table(sw.name, port, qp) for port, qp in {(k[0], k[2]) for k in want}}
        new = sorted(used - ruled)
        self._send(sw, "rules", [self._rule(sw, True, t) for t in new], new)
        ruled.update(new)
        changed = [want[k] for k in sorted(want) if have.get(k) != want[k]]
        self._send(sw, "routes", [self._route(sw, e, self._table(sw.name, e.in_port, e.qp))
                                  for e in changed], changed)  # fmt: skip
        gone = [have[k] for k in sorted(have) if k not in want]
        self._send(sw, "route deletes", [
            netlink.delete(self._table(sw.name, e.in_port, e.qp), self._host_base + e.dst_host,
                           ROUTE_PROTO) for e in gone], gone, gone_ok=True)  # fmt: skip
        empty = sorted(ruled - used)
        self._send(sw, "rule deletes", [self._rule(sw, False, t) for t in empty], empty,
                   gone_ok=True)  # fmt: skip
        ruled.difference_update(empty)

    def reconcile(self, switch: str) -> int:
        """Put back the entries the switch's stored table wants that the kernel lost (a port
        went admin-down and came back); the number restored. Entries via a port still down
        stay missing (and stored), for the next time."""
        sw = self._switch(switch)
        with sw.lock, self.store.locked(switch):
            have, ruled = self._kernel(sw)
            intent = self.store.load(switch, self.owners.owner)
            lost = {k: e for k, e in intent.items() if have.get(k) != e}
            if not lost:
                return 0
            up = self._ports_up(sw)
            back = {k: e for k, e in lost.items() if e.next_hop in up}
            try:
                self._converge(sw, have, {**have, **back}, ruled)
            except Exception as err:
                raise DriverError(f"{switch}: cannot restore {len(back)} TE entries: "
                                  f"{err}") from err  # fmt: skip
        return len(back)

    def clear(self) -> None:
        """Remove every TE route and rule of ours from every switch."""
        for switch in self._switches:
            sw = self._switch(switch)
            with sw.lock, self.store.locked(switch):
                have, ruled = self._kernel(sw)
                self.store.save(switch, {}, self.owners.realm)  # first, as in `_apply`
                try:
                    self._converge(sw, have, {}, ruled)
                except Exception as err:
                    raise DriverError(f"{switch}: cannot clear TE state: {err}") from err

    def close(self) -> None:
        self._closed = True
        with self._open_lock:
            for sw in self._open.values():
                try:
                    sw.nl.close()
                except Exception:  # noqa: BLE001 - closing a dead socket is not an error
                    pass
            self._open.clear()
