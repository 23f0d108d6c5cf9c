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
break); if the kernel refuses an operation midway, the operations already done are undone
and the error says what the switch holds now. After every batch the switch's whole wanted
table is stored beside the lab (`controller.drivers.linux_store`), under a lock that
serialises every process changing that switch. Setting a port admin-down makes the kernel
drop every route through it: `read` shows the loss, and `reconcile` puts back what the
stored table wants once the port is up again, as does the next batch applied to that
switch; the lab's restorer (`sim.lab.restorer`) calls `reconcile` on every port that comes
up, so a flap loses nothing even with no controller running.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.drivers.interface import Driver, split_ops
from controller.drivers.linux_plan import (
    BUCKET_PRIORITY,
    DEFAULT_REALM,
    PORT_PRIORITY,
    ROCE_PORT,
    ROUTE_PROTO,
    LabPlan,
    is_own_table,
    lab_dir,
    sport_range,
)
from controller.drivers.linux_store import IntentStore
from controller.errors import DriverError, DriverRejected, DriverUnavailable, LabError
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.plan import Op
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
    ipr: Any
    by_index: dict[int, int]  # ifindex -> link id
    ports: dict[int, tuple[int, str]]  # link id -> (ifindex, peer address)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LinuxDriver(Driver):
    """Programs the switches of lab `lab` (built for `fabric`) over netlink."""

    name = "linux"

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
        self.owners = OwnerRegistry(directory / "owners.json")
        self.store = IntentStore(directory / "te")  # each switch's wanted table, on disk
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
            if found is not None:
                return found
            from pyroute2 import IPRoute

            ns = self.plan.netns(switch)
            try:
                ipr = IPRoute(netns=ns, flags=0)  # flags=0: never create a missing netns
                links = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
            except Exception as err:  # pyroute2 raises OSError/NetlinkError/its own types
                raise DriverUnavailable(f"{switch}: cannot open namespace {ns}: {err}") from err
            by_index: dict[int, int] = {}
            ports: dict[int, tuple[int, str]] = {}
            for link in self.plan.node_links[switch]:
                port = self.plan.port(switch, link)
                if port.ifname not in links:
                    ipr.close()
                    raise DriverUnavailable(f"{switch}: port {port.ifname} missing in {ns}")
                by_index[links[port.ifname]] = link
                ports[link] = (links[port.ifname], port.peer_address)
            made = _Switch(switch, ipr, by_index, ports)
            self._open[switch] = made
            return made

    # ---- reading -----------------------------------------------------------------
    def switches(self) -> tuple[str, ...]:
        self._check_open()
        return self._switches

    def _kernel(self, sw: _Switch) -> tuple[dict[Key, Entry], set[int]]:
        """(our entries, our tables that have a rule) as the kernel holds them."""
        try:
            routes = sw.ipr.route("dump", family=socket.AF_INET)
            rules = sw.ipr.get_rules(family=socket.AF_INET)
        except Exception as err:
            raise DriverUnavailable(f"{sw.name}: netlink dump failed: {err}") from err
        entries: dict[Key, Entry] = {}
        for route in routes:
            table = route.get_attr("RTA_TABLE")
            if route["proto"] != ROUTE_PROTO or table is None or not is_own_table(table):
                continue
            in_port, qp = self.plan.table_key(sw.name, table)
            dst = self.plan.host_by_address.get(route.get_attr("RTA_DST"))
            next_hop = sw.by_index.get(route.get_attr("RTA_OIF"))
            if dst is None or next_hop is None or route["dst_len"] != 32:
                raise DriverError(f"{sw.name}: unexpected route in table {table}: {route}")
            flow = route.get_attr("RTA_FLOW") or DEFAULT_REALM
            entry = Entry(sw.name, in_port, dst, next_hop, self.owners.owner(flow & 0xFFFF), qp)
            entries[entry.match] = entry
        ruled = {
            int(rule.get_attr("FRA_TABLE"))
            for rule in rules
            if rule.get_attr("FRA_PRIORITY") in (BUCKET_PRIORITY, PORT_PRIORITY)
            and is_own_table(int(rule.get_attr("FRA_TABLE") or 0))
        }
        return entries, ruled

    def read(self, switch: str) -> tuple[Entry, ...]:
        sw = self._switch(switch)
        with sw.lock:
            entries, _ = self._kernel(sw)
        return tuple(entries[k] for k in sorted(entries))

    # ---- writing -----------------------------------------------------------------
    def _route(self, sw: _Switch, command: str, entry: Entry) -> None:
        table = self.plan.table(sw.name, entry.in_port, entry.qp)
        args: dict[str, Any] = {
            "dst": f"{self.plan.host_address(entry.dst_host)}/32",
            "table": table,
            "proto": ROUTE_PROTO,
        }
        if command != "del":
            ifindex, gateway = sw.ports[entry.next_hop]
            args.update(gateway=gateway, oif=ifindex, flow=self.owners.realm(entry.owner))
        sw.ipr.route(command, **args)

    def _rule(self, sw: _Switch, command: str, in_port: int, qp: int) -> None:
        table = self.plan.table(sw.name, in_port, qp)
        ifname = self.plan.port(sw.name, in_port).ifname
        if qp == ALL_QPS:
            sw.ipr.rule(command, iifname=ifname, table=table, priority=PORT_PRIORITY)
        else:
            first, last = sport_range(qp)
            sw.ipr.rule(command, iifname=ifname, table=table, priority=BUCKET_PRIORITY,
                        ip_proto=socket.IPPROTO_UDP, dport_range=f"{ROCE_PORT}:{ROCE_PORT}",
                        sport_range=f"{first}:{last}")  # fmt: skip

    def _validate(self, switch: str, install: list[Entry]) -> None:
        for entry in install:
            problem = entry_problem(self.fabric, self._ports, entry)
            if problem:
                raise DriverRejected(problem)
            self.plan.table(switch, entry.in_port, entry.qp)  # port and bucket in range
            self.owners.realm(entry.owner)

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self._check_open()
        install, remove = split_ops(switch, ops)
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
            try:
                self._converge(sw, before, target, ruled)
            except Exception as err:
                undo = "rolled back"
                try:
                    now, ruled_now = self._kernel(sw)
                    self._converge(sw, now, before, ruled_now)
                except Exception as again:  # the rollback itself failed: say so
                    undo = f"rollback failed ({again})"
                held, _ = self._kernel(sw)
                cls = DriverRejected if undo == "rolled back" else DriverError
                raise cls(f"{switch}: kernel refused the batch ({err}); {undo}; the switch "
                          f"now holds {len(held)} TE entries") from err  # fmt: skip
            kept = {k: e for k, e in lost.items() if k not in target}  # port still down
            self.store.save(switch, {**kept, **target}, self.owners.realm)

    def _ports_up(self, sw: _Switch) -> set[int]:
        """Link ids of the switch's ports that are up (admin and carrier)."""
        try:
            links = sw.ipr.get_links()
        except Exception as err:
            raise DriverUnavailable(f"{sw.name}: netlink link dump failed: {err}") from err
        up = [ln["index"] for ln in links if ln.get_attr("IFLA_OPERSTATE") == "UP"]
        return {sw.by_index[i] for i in up if i in sw.by_index}

    def _converge(
        self, sw: _Switch, have: dict[Key, Entry], want: dict[Key, Entry], ruled: set[int]
    ) -> None:
        """Change the kernel from `have` to `want`: rules first, replace, delete, then
        rules of tables left empty."""
        for key, entry in sorted(want.items()):
            table = self.plan.table(sw.name, entry.in_port, entry.qp)
            if table not in ruled:
                self._rule(sw, "add", entry.in_port, entry.qp)
                ruled.add(table)
            if have.get(key) != entry:
                self._route(sw, "replace", entry)
        for key, entry in sorted(have.items()):
            if key not in want:
                self._route(sw, "del", entry)
        used = {self.plan.table(sw.name, e.in_port, e.qp) for e in want.values()}
        for table in sorted(ruled - used):
            in_port, qp = self.plan.table_key(sw.name, table)
            self._rule(sw, "del", in_port, qp)
            ruled.discard(table)

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
                try:
                    self._converge(sw, have, {}, ruled)
                except Exception as err:
                    raise DriverError(f"{switch}: cannot clear TE state: {err}") from err
                self.store.save(switch, {}, self.owners.realm)

    def close(self) -> None:
        self._closed = True
        with self._open_lock:
            for sw in self._open.values():
                try:
                    sw.ipr.close()
                except Exception:  # noqa: BLE001 - closing a dead socket is not an error
                    pass
            self._open.clear()
