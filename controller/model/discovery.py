"""From LLDP neighbour records to cables, and a precise report of what does not add up.

Every device that speaks LLDP reports, per local port, the neighbour it hears: that
neighbour's system name and port. A cable is taken when both ends report each other on
the same two ports. Everything else is a problem named by device and port, never a guess:

    unknown    a neighbour that is not in the device set (or advertises no system name)
    twice      two neighbours heard on one port (a hub, a loop, a stale entry)
    one-sided  a cable heard from one end only, though the other end speaks LLDP
    ports      the two ends disagree about the port (A:p hears B:q, B:q hears someone else,
               or B hears A on another port)
    speed      the two ends advertise different speeds
    missing    a device whose table could not be read
    alone      a device that hears no neighbour and that no device hears
    self       a port that hears its own device
    tier       (after roles are known) a cable that does not join adjacent tiers

A cable's speed is the one its ends advertise (the operational MAU type, `lldpcli show
neighbors details`), else the default. Cables with a problem are left out of `cables`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.model.inventory import Cable, natural_key

PROBLEM_KINDS = ("missing", "alone", "unknown", "self", "twice", "one-sided", "ports", "speed",
                 "tier")


@dataclass(frozen=True)
class Neighbour:
    """One entry of a device's LLDP table: on `port`, `device` hears `peer`'s `peer_port`."""

    device: str  # whose table
    port: str  # the device's own port (the table's interface name)
    peer: str  # the neighbour's system name as advertised ("" when none)
    peer_port: str  # the neighbour's port as advertised
    peer_port_kind: str = "ifname"  # the port id subtype it was taken from
    gbps: float | None = None  # the neighbour port's advertised speed, None when not given
    capabilities: frozenset[str] | None = None  # enabled ones ("bridge", "router", "station")
    chassis_id: str = ""
    via: str = "LLDP"


@dataclass(frozen=True)
class Problem:
    """One inconsistency, with the devices and ports it concerns."""

    kind: str  # one of PROBLEM_KINDS
    message: str
    ends: tuple[tuple[str, str], ...] = ()  # (device, port) pairs it names


@dataclass(frozen=True)
class Discovery:
    """The cables both ends agree on, what was wrong, and where the speeds came from."""

    devices: tuple[str, ...]  # the device set, natural order
    cables: tuple[Cable, ...]  # agreed cables, a <= b by natural order of (device, port)
    problems: tuple[Problem, ...]
    speed_from_lldp: int = 0  # cables whose speed an end advertised
    speed_default: int = 0  # cables given the default speed
    capabilities: Mapping[str, frozenset[str]] = field(default_factory=dict)  # as heard

    @property
    def ok(self) -> bool:
        return not self.problems


def _end(device: str, port: str) -> str:
    return f"{device}:{port}"


def _resolve(peer: str, devices: set[str], short: Mapping[str, str]) -> str | None:
    """The device an advertised system name means: the same name, or the one device whose
    name is its first label (leaf-a.dc1.example.net -> leaf-a)."""
    if peer in devices:
        return peer
    return short.get(peer.split(".", 1)[0]) if peer else None


def _short_names(devices: set[str]) -> dict[str, str]:
    by_short: dict[str, list[str]] = defaultdict(list)
    for d in devices:
        by_short[d.split(".", 1)[0]].append(d)
    return {s: names[0] for s, names in by_short.items() if len(names) == 1}


def _oriented(a: str, a_port: str, b: str, b_port: str, gbps: float) -> Cable:
    if (natural_key(b), natural_key(b_port)) < (natural_key(a), natural_key(a_port)):
        a, a_port, b, b_port = b, b_port, a, a_port
    return Cable(a, a_port, b, b_port, gbps)


def discover(tables: Mapping[str, Iterable[Neighbour]], default_gbps: float,
             unreadable: Mapping[str, str] | None = None,
             force_default: bool = False) -> Discovery:  # fmt: skip
    """Pair the tables of the device set (`tables`, by device name; `unreadable`: devices
    of the set whose table could not be read, with why) into cables and problems.
    `force_default`: every cable gets `default_gbps`, whatever the ends advertise."""
    tables = {d: list(records) for d, records in tables.items()}
    unreadable = dict(unreadable or {})
    devices = set(tables) | set(unreadable)
    short = _short_names(devices)
    problems: list[Problem] = [
        Problem("missing", f"{d}: no neighbour table ({why})", ((d, ""),))
        for d, why in sorted(unreadable.items(), key=lambda kv: natural_key(kv[0]))
    ]
    # (device, port) -> resolved records heard there; capabilities by device as heard
    heard: dict[tuple[str, str], list[tuple[str, Neighbour]]] = defaultdict(list)
    caps: dict[str, set[str]] = defaultdict(set)
    for device in sorted(tables, key=natural_key):
        for n in tables[device]:
            peer = _resolve(n.peer, devices, short)
            if peer is None:
                what = (f"'{n.peer}' port {n.peer_port or '?'}" if n.peer
                        else f"a chassis without a system name (id {n.chassis_id or '?'})")
                problems.append(Problem(
                    "unknown", f"{_end(device, n.port)} hears {what}, which is not in the "
                    "device set", ((device, n.port),)))  # fmt: skip
                continue
            if peer == device:
                problems.append(Problem(
                    "self", f"{_end(device, n.port)} hears its own device's port "
                    f"{n.peer_port}", ((device, n.port), (device, n.peer_port))))  # fmt: skip
                continue
            heard[(device, n.port)].append((peer, n))
            if n.capabilities is not None:
                caps[peer] |= n.capabilities
    heard_of = {peer for records in heard.values() for peer, _ in records}
    for device in sorted(tables, key=natural_key):
        if not tables[device] and device not in heard_of:
            problems.append(Problem(
                "alone", f"{device}: hears no neighbour and no device hears it",
                ((device, ""),)))  # fmt: skip
    twice = set()
    for (device, port), records in heard.items():
        if len(records) == 1:
            continue
        seen = sorted({_end(p, n.peer_port) for p, n in records}, key=natural_key)
        if len(seen) > 1:
            twice.add((device, port))
            problems.append(Problem(
                "twice", f"{_end(device, port)} hears {len(seen)} neighbours: "
                f"{', '.join(seen)}", ((device, port),)))  # fmt: skip
    # which ports of `device` hear (peer, peer_port)
    hearing: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for (device, port), records in heard.items():
        for peer, n in records:
            hearing[(device, peer, n.peer_port)].append(port)

    cables: dict[tuple[str, str, str, str], Cable] = {}
    bad_speed = set()
    named: set[tuple[str, str]] = set()  # ends whose view a `ports` problem told already
    from_lldp = from_default = 0
    for (a, pa), records in heard.items():  # in device order, then each table's own
        if (a, pa) in twice:
            continue
        b, n = records[0]
        pb = n.peer_port
        key = tuple(sorted([(a, pa), (b, pb)]))
        flat = (key[0][0], key[0][1], key[1][0], key[1][1])
        if flat in cables or flat in bad_speed or (a, pa) in named:
            continue
        ends = ((a, pa), (b, pb))
        if b in unreadable:
            problems.append(Problem(
                "one-sided", f"{_end(a, pa)} hears {_end(b, pb)}, but {b}'s table could not "
                "be read", ends))  # fmt: skip
            continue
        back = heard.get((b, pb))
        if back is None:
            other = hearing.get((b, a, pa), [])
            if other:
                problems.append(Problem(
                    "ports", f"{_end(a, pa)} hears {_end(b, pb)}, but {b} hears {_end(a, pa)} "
                    f"on its port {', '.join(sorted(other, key=natural_key))}",
                    ends + tuple((b, o) for o in other)))  # fmt: skip
                named.update((b, o) for o in other)  # their view is this one, mirrored
            else:
                problems.append(Problem(
                    "one-sided", f"{_end(a, pa)} hears {_end(b, pb)}, but {b} (which speaks "
                    f"LLDP) hears no neighbour on {pb}", ends))  # fmt: skip
            continue
        if (b, pb) in twice:
            continue  # reported with its port
        c, m = back[0]
        if (c, m.peer_port) != (a, pa):
            problems.append(Problem(
                "ports", f"{_end(a, pa)} hears {_end(b, pb)}, but {_end(b, pb)} hears "
                f"{_end(c, m.peer_port)}", ends + ((c, m.peer_port),)))  # fmt: skip
            if c == a:  # B hears A on another port: B's view is this one, mirrored
                named.add((b, pb))
            continue
        speeds = {s for s in (n.gbps, m.gbps) if s is not None}
        if len(speeds) > 1 and not force_default:
            bad_speed.add(flat)
            problems.append(Problem(
                "speed", f"{_end(a, pa)} and {_end(b, pb)} disagree about the speed: {a} "
                f"hears {b} at {n.gbps:g} Gbps, {b} hears {a} at {m.gbps:g} Gbps", ends))
            continue
        if speeds and not force_default:
            gbps, from_lldp = speeds.pop(), from_lldp + 1
        else:
            gbps, from_default = default_gbps, from_default + 1
        cables[flat] = _oriented(a, pa, b, pb, gbps)
    ordered = sorted(cables.values(), key=lambda c: (natural_key(c.a), natural_key(c.a_port),
                                                      natural_key(c.b), natural_key(c.b_port)))
    problems.sort(key=lambda p: (PROBLEM_KINDS.index(p.kind),
                                 [(natural_key(d), natural_key(q)) for d, q in p.ends]))
    return Discovery(
        devices=tuple(sorted(devices, key=natural_key)), cables=tuple(ordered),
        problems=tuple(problems), speed_from_lldp=from_lldp, speed_default=from_default,
        capabilities={d: frozenset(c) for d, c in sorted(caps.items())},
    )  # fmt: skip
