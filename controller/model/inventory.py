"""The neutral cable list: devices with roles and the cables between their ports.

What an inventory (a DCIM cable export, a hand-written file) or LLDP discovery says a fabric
is, before it becomes a `Fabric`. A host's NICs are its ports cabled to an RTSW, in
natural-sort order of the port name (eth0, eth1, ..., eth10).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from functools import lru_cache

import numpy as np

from controller.errors import FabricError
from controller.model.fabric import ABSENT, DEFAULT_TE_ENTRIES, Fabric, TeEntries, Wiring

ROLES = ("host", "rtsw", "ctsw", "atsw")  # bottom to top


@dataclass(frozen=True)
class Device:
    name: str
    role: str  # "host" | "rtsw" | "ctsw" | "atsw"
    te_entries: int | None = None  # per-switch budget override; None: the tier's
    rack: str | None = None  # the operator's rack of a host or RTSW (ignored on CTSWs, ATSWs)
    pod: str | None = None  # the operator's pod of a host, RTSW or CTSW (ignored on ATSWs)


@dataclass(frozen=True)
class Cable:
    a: str
    a_port: str
    b: str
    b_port: str
    gbps: float


_DIGITS = re.compile(r"(\d+)")


@lru_cache(maxsize=1 << 18)  # names repeat: every device and port is sorted many times
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs by value: eth2 before eth10, Ethernet4 before
    Ethernet48. A total order: names whose digit runs differ only in leading zeros (leaf1,
    leaf01) end in the name itself, so they sort by it and not by the order they came in
    (the tail sorts before any part, so a name still sorts before its extensions)."""
    parts = tuple((1, int(part)) if part.isdigit() else (0, part)
                  for part in _DIGITS.split(name) if part)  # fmt: skip
    return (*parts, (-1, name))


# ---- from the cable list to the index model ------------------------------------------------
# The inference (docs/inventory.md): a host's RTSW is its rack; pods are the groups of RTSWs
# that share CTSWs (connected by RTSW-CTSW cables); planes are the groups of CTSWs that share
# ATSWs, at most one CTSW of each pod in a plane; everything is numbered in natural order of
# the names (pods by their first RTSW, planes by their first ATSW). What the cables do not
# fill (a rack with fewer hosts, a pod with fewer racks, a cable never installed) stays in
# the index model as a slot without a device or a link without a cable.

# A pod or rack name is exported as a Kubernetes label value and a Slurm switch name.
PLACE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
FORBIDDEN = (":", "#", ">", "/")  # they separate the parts of link, arc and NIC names
RANK = {role: i for i, role in enumerate(ROLES)}


class _Problems:
    """Problems collected while reading, raised together (up to validation.MAX_REPORTED)."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)

    def raise_any(self, what: str) -> None:
        from controller.model import validation

        if self.items:
            raise FabricError(f"{what}:\n  " + validation.report(self.items))


def _device_name(name: object, where: str, problems: _Problems) -> bool:
    from controller.model import validation

    try:
        validation.text(name, where, FabricError)
    except FabricError as err:
        problems.add(str(err))
        return False
    assert isinstance(name, str)
    if not usable_device_name(name):
        problems.add(f"{where}: {name!r} {NOT_A_DEVICE_NAME}")
        return False
    return True


NOT_A_DEVICE_NAME = (f"cannot name a device (no {' '.join(FORBIDDEN)}, no leading {ABSENT!r}, "
                     "no spaces)")  # fmt: skip


def usable_device_name(name: str) -> bool:
    """Whether `name` can name a device: none of FORBIDDEN (they separate the parts of
    link, arc and NIC names), not ABSENT first, and no whitespace (exports list names
    separated by it: Slurm's topology.conf)."""
    return bool(name) and not any(ch in name for ch in FORBIDDEN) \
        and not name.startswith(ABSENT) and not any(ch.isspace() for ch in name)


class _Groups:
    """Union-find over names, for pods (RTSWs sharing CTSWs) and planes (CTSWs sharing
    ATSWs)."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent.setdefault(x, x)
        while parent != x:
            grand = self.parent[parent]
            self.parent[x] = grand
            x, parent = parent, grand
        return x

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def groups(self, members: Iterable[str]) -> list[list[str]]:
        """The groups of `members`, each in natural order, ordered by their first member."""
        by_root: dict[str, list[str]] = {}
        for m in members:
            by_root.setdefault(self.find(m), []).append(m)
        out = [sorted(g, key=natural_key) for g in by_root.values()]
        return sorted(out, key=lambda g: natural_key(g[0]))


def listing(names: Sequence[str], shown: int = 6) -> str:
    """The first `shown` of `names`, then how many more, for an error message."""
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def roles_by_pattern(devices: Iterable[str], patterns: Sequence[tuple[str, str]],
                     where: str, sep: str = "=") -> dict[str, str]:  # fmt: skip
    """Device -> the role the shell-style (pattern, role) pairs it matches give it (the
    devices none matches left out); FabricError under `where` naming every device two
    patterns give different roles (patterns are not taken in order; `sep` joins a pattern
    and its role as the operator wrote them)."""
    roles: dict[str, str] = {}
    clashes = []
    for device in devices:
        matched = [(p, r) for p, r in patterns if fnmatchcase(device, p)]
        if len({r for _, r in matched}) > 1:
            clashes.append(f"{device} ({', '.join(f'{p}{sep}{r}' for p, r in matched)})")
        elif matched:
            roles[device] = matched[0][1]
    if clashes:  # 8 listed, as device_roles lists its ambiguous devices
        raise FabricError(f"{where}: patterns give devices different roles: "
                          f"{listing(clashes, 8)}")  # fmt: skip
    return roles


def fabric_from_cables(name: str, devices: Sequence[Device], cables: Sequence[Cable],
                       te_entries: TeEntries = (DEFAULT_TE_ENTRIES,) * 3,
                       ports_per_nic: int = 1,
                       cable_names: Sequence[str] | None = None) -> Fabric:  # fmt: skip
    """The fabric a cable list describes, with the operator's names and ports; FabricError
    listing every device and port that does not make a 3-tier (or 2-tier) Clos.
    `ports_per_nic`: P > 1 when each GPU's NIC has P ports, a host's ports in natural order
    P at a time (eth0, eth1 the first NIC's; `Fabric.ports_per_nic`). `cable_names`: how
    errors name each cable (a CSV's `row N`; default `cables[i]`)."""
    from controller.model import validation

    problems = _Problems()
    role: dict[str, str] = {}
    budget: dict[str, int] = {}
    for i, item in enumerate(devices):
        where = f"devices[{i}]"
        if not _device_name(item.name, f"{where}.name", problems):
            continue
        if item.role not in ROLES:
            problems.add(f"{where}: device {item.name} has role {item.role!r}; roles: "
                         f"{', '.join(ROLES)}")  # fmt: skip
            continue
        if item.name in role:
            problems.add(f"{where}: device {item.name} is listed twice")
            continue
        role[item.name] = item.role
        if item.te_entries is not None:
            if item.role == "host":
                problems.add(f"{where}: host {item.name} has te_entries; only switches hold TE "
                             "entries")  # fmt: skip
            elif (isinstance(item.te_entries, bool) or not isinstance(item.te_entries, int)
                  or item.te_entries < 0):  # fmt: skip
                problems.add(f"{where}: te_entries of {item.name} must be an integer >= 0, got "
                             f"{item.te_entries!r}")  # fmt: skip
            else:
                budget[item.name] = item.te_entries
    problems.raise_any(f"fabric {name}: bad devices")

    # every cable with its lower tier's end first: (lower, lower port, upper, upper port, gbps)
    ends: dict[tuple[str, str], int] = {}
    up: dict[str, list[tuple[str, str, str, float]]] = {d: [] for d in role}
    down: dict[str, set[str]] = {d: set() for d in role}
    def named(i: int) -> str:
        return f"cables[{i}]" if cable_names is None else cable_names[i]

    for i, cab in enumerate(cables):
        where = named(i)
        shown = f"{cab.a}:{cab.a_port} - {cab.b}:{cab.b_port}"
        ok = True
        twice = (ends.get((cab.a, cab.a_port)), ends.get((cab.b, cab.b_port)))
        if twice[0] is not None and twice[0] == twice[1]:
            problems.add(f"{where} ({shown}): the same cable as {named(twice[0])}, listed twice")
            continue
        for dev, port, side in ((cab.a, cab.a_port, "a"), (cab.b, cab.b_port, "b")):
            if not isinstance(dev, str) or dev not in role:
                problems.add(f"{where} ({shown}): unknown device {dev!r} (not in devices)")
                ok = False
                continue
            if not isinstance(port, str) or not port or not port.isprintable():
                problems.add(f"{where} ({shown}): {side}_port must name {dev}'s port")
                ok = False
                continue
            first = ends.get((dev, port))
            if first is not None:
                problems.add(f"{where} ({shown}): port {dev}:{port} is used twice (also by "
                             f"{named(first)})")  # fmt: skip
                ok = False
            else:
                ends[(dev, port)] = i
        try:
            gbps = validation.gbps(cab.gbps, f"{where}.gbps", FabricError)
        except FabricError as err:
            problems.add(f"{err} ({shown})")
            ok = False
        if not ok:
            continue
        ra, rb = role[cab.a], role[cab.b]
        if ra == rb == "host":
            problems.add(f"{where}: a cable between two hosts, {cab.a}:{cab.a_port} and "
                         f"{cab.b}:{cab.b_port}")  # fmt: skip
            continue
        if cab.a == cab.b:
            problems.add(f"{where}: {cab.a}:{cab.a_port} is cabled to its own port {cab.b_port}")
            continue
        if abs(RANK[ra] - RANK[rb]) != 1:
            problems.add(f"{where} ({shown}) joins a {ra} and a {rb}: cables join host-rtsw, "
                         "rtsw-ctsw or ctsw-atsw")  # fmt: skip
            continue
        lo, lo_port, hi, hi_port = ((cab.a, cab.a_port, cab.b, cab.b_port) if RANK[ra] < RANK[rb]
                                    else (cab.b, cab.b_port, cab.a, cab.a_port))  # fmt: skip
        up[lo].append((lo_port, hi, hi_port, gbps))
        down[hi].add(lo)
    problems.raise_any(f"fabric {name}: bad cables")

    by_role: dict[str, list[str]] = {r: [] for r in ROLES}
    for d in sorted(role, key=natural_key):
        by_role[role[d]].append(d)
    hosts, rtsws, ctsws, atsws = (by_role[r] for r in ROLES)

    # racks: the RTSWs of a host, joined through the hosts they share (one RTSW in a classic
    # rack; a scalable unit's rail leaves; a dual-ToR segment's ToRs)
    racks_uf = _Groups()
    for r in rtsws:
        racks_uf.find(r)
    for h in hosts:
        above = sorted({hi for _, hi, _, _ in up[h]}, key=natural_key)
        if not above:
            problems.add(f"host {h} has no cable to an RTSW")
        for hi in above[1:]:
            racks_uf.join(above[0], hi)
    for r in rtsws:
        if not up[r]:
            problems.add(f"rtsw {r} has no cable to a CTSW, so its pod cannot be told")
    for c in ctsws:
        if not down[c]:
            problems.add(f"ctsw {c} has no cable to an RTSW")
    for a in atsws:
        if not down[a]:
            problems.add(f"atsw {a} has no cable to a CTSW")
    if not hosts:
        problems.add("no device has role host")
    if not rtsws:
        problems.add("no device has role rtsw")
    if not ctsws:
        problems.add("no device has role ctsw (a fabric has at least RTSWs and CTSWs)")
    problems.raise_any(f"fabric {name}: not a Clos")
    nic_ports = _nic_numbers(hosts, up)
    rack_groups = racks_uf.groups(rtsws)  # each in natural order, by its first RTSW
    rack_index = {racks_uf.find(g[0]): i for i, g in enumerate(rack_groups)}
    rack_of = {h: rack_index[racks_uf.find(min(nic_ports[h].items())[1][1])] for h in hosts}
    S = max(len(g) for g in rack_groups)
    slot_of = _slots(rack_groups, rack_of, nic_ports, S, problems)
    problems.raise_any(f"fabric {name}: the cables fit no layout")
    Q = _planes(ctsws, up, slot_of, S, problems)
    problems.raise_any(f"fabric {name}: the cables fit no layout")
    plane_q = {r: slot_of[r] % Q for r in rtsws}  # a CTSW's plane: its RTSWs'
    for r in rtsws:
        for _, c, _, _ in up[r]:
            plane_q[c] = plane_q[r]

    # pods: RTSWs that share CTSWs (or a rack: the planes of one pod share none)
    pods_uf = _Groups()
    for g in rack_groups:
        for r in g:
            pods_uf.join(g[0], r)
            for _, c, _, _ in up[r]:
                pods_uf.join(r, c)
    groups = [([d for d in g if role[d] == "rtsw"], g) for g in pods_uf.groups(rtsws + ctsws)]
    groups.sort(key=lambda rg: natural_key(rg[0][0]))  # pods by their first RTSW
    pods = [r for r, _ in groups]
    pod_of = {d: p for p, (_, members) in enumerate(groups) for d in members}
    pod_ctsws: list[list[str]] = [[d for d in members if role[d] == "ctsw"]
                                  for _, members in groups]  # fmt: skip
    pod_racks: list[list[int]] = [sorted({rack_index[racks_uf.find(r)] for r in g})
                                  for g in pods]  # fmt: skip

    # planes: CTSWs that share ATSWs; CTSW index c in its pod = its plane
    plane_of: dict[str, int] = {}
    if atsws:
        planes_uf = _Groups()
        for c in ctsws:
            for _, a, _, _ in up[c]:
                planes_uf.join(a, c)
        planes = planes_uf.groups(atsws)  # groups of ATSWs (a plane's first ATSW orders it)
        if Q > 1:  # index c of an ATSW plane: c % Q is the RTSW plane its CTSWs reach
            planes = _by_plane(planes, [plane_q.get(next((c for c in ctsws if planes_uf.find(c)
                                                          == planes_uf.find(g[0])), ""), 0)
                                        for g in planes], Q)  # fmt: skip
        plane_atsws = [list(g) for g in planes]
        roots = {planes_uf.find(g[0]): i for i, g in enumerate(planes) if g}
        for c in ctsws:
            if up[c]:
                plane_of[c] = roots[planes_uf.find(c)]
        for a_list in plane_atsws:
            for a in a_list:
                plane_of[a] = roots[planes_uf.find(a)]
        ctsws_per_pod = len(plane_atsws)
        for p, members in enumerate(pod_ctsws):
            taken: dict[int, str] = {}
            for c in members:
                if c not in plane_of:
                    continue
                if plane_of[c] in taken:
                    plane = plane_atsws[plane_of[c]]
                    problems.add(f"ctsw {taken[plane_of[c]]} and ctsw {c} of one pod (RTSWs "
                                 f"{listing(pods[p])}) both reach the ATSW plane of "
                                 f"{listing(plane)}: each plane meets one CTSW of each pod")
                else:
                    taken[plane_of[c]] = c
            loose = [c for c in members if c not in plane_of]  # no ATSW cable: a free plane
            free = [i for i in range(ctsws_per_pod) if i not in taken]
            if len(loose) > len(free):
                problems.add(f"ctsw {listing(loose)} have no cable to an ATSW and pod of RTSWs "
                             f"{listing(pods[p])} has only {len(free)} plane(s) left for them")
            for c, i in zip(loose, free, strict=False):
                plane_of[c] = i
        atsws_per_plane = max(len(g) for g in plane_atsws)
        for c in ctsws:
            if c in plane_of and plane_of[c] % Q != plane_q.get(c, 0):
                problems.add(f"ctsw {c} reaches RTSWs of plane {plane_q.get(c, 0)} but its "
                             f"ATSWs join CTSWs of plane {plane_of[c] % Q}: planes stay "
                             "separate all the way up")  # fmt: skip
        atsw_slot = {a: plane_of[a] * atsws_per_plane + j
                     for g in plane_atsws for j, a in enumerate(g)}  # fmt: skip
    else:
        if len(pods) > 1:
            problems.add(f"{len(pods)} groups of RTSWs share no CTSW and no ATSW joins them: "
                         f"pods of {', '.join(g[0] for g in pods)}")  # fmt: skip
        ctsws_per_pod = 0
        for members in pod_ctsws:  # CTSW i of plane q of its pod: index i * Q + q
            for q in range(Q):
                mine = [c for c in members if plane_q.get(c, 0) == q]
                for i, c in enumerate(mine):
                    plane_of[c] = i * Q + q
                ctsws_per_pod = max(ctsws_per_pod, len(mine) * Q)
        atsws_per_plane = 0
        atsw_slot = {}
    problems.raise_any(f"fabric {name}: not a 3-tier (or 2-tier) Clos")

    racks_per_pod = max(len(g) for g in pod_racks)
    rack_at = {k: p * racks_per_pod + i for p, g in enumerate(pod_racks) for i, k in enumerate(g)}
    rack_slot = {r: rack_at[rack_index[racks_uf.find(r)]] * S + slot_of[r] for r in rtsws}
    rack_hosts: dict[int, list[str]] = {k: [] for k in rack_at}
    for h in hosts:  # natural order
        rack_hosts[rack_of[h]].append(h)
    hosts_per_rack = max(len(v) for v in rack_hosts.values())
    host_slot = {h: rack_at[k] * hosts_per_rack + i
                 for k, members in rack_hosts.items() for i, h in enumerate(members)}  # fmt: skip
    nics_per_host = max(max(v) + 1 for v in nic_ports.values())
    nics_per_host = -(-nics_per_host // S) * S  # every slot as many NICs of a host
    ctsw_slot = {c: pod_of[c] * ctsws_per_pod + plane_of[c] for c in ctsws}

    def parallel(switches: list[str]) -> dict[tuple[str, str], list[tuple[str, str, float]]]:
        out: dict[tuple[str, str], list[tuple[str, str, float]]] = {}
        for s in switches:
            for port, hi, hi_port, gbps in sorted(up[s], key=lambda e: natural_key(e[0])):
                out.setdefault((s, hi), []).append((port, hi_port, gbps))
        return out

    rack_pairs, agg_pairs = parallel(rtsws), parallel(ctsws)
    dims = {
        "pods": len(pods), "racks_per_pod": racks_per_pod, "hosts_per_rack": hosts_per_rack,
        "nics_per_host": nics_per_host, "ctsws_per_pod": ctsws_per_pod,
        "rack_links": max(len(v) for v in rack_pairs.values()),
        "atsws_per_plane": atsws_per_plane,
        "agg_links": max((len(v) for v in agg_pairs.values()), default=1),
        "rtsws_per_rack": S, "planes": Q,
    }  # fmt: skip
    try:
        validation.dimensions(dims, FabricError)
    except FabricError as err:
        problems.add(f"the inferred shape is too large: {err}")
    problems.raise_any(f"fabric {name}")

    shape = Fabric(name=name, capacity=np.ones(2 * _links(dims)), te_entries=te_entries,
                   ports_per_nic=ports_per_nic, **dims)  # type: ignore[arg-type]  # fmt: skip
    base = {k: shape.node_id(k, 0) for k in ("host", "nic", "rtsw", "ctsw", "atsw")}
    names = [ABSENT + n for n in shape.node_names]
    present = np.zeros(shape.num_nodes, dtype=bool)
    installed = np.zeros(shape.num_links, dtype=bool)
    gbps_of = np.zeros(shape.num_links)
    lower_ports = [""] * shape.num_links
    upper_ports = [""] * shape.num_links
    for kind, slots in (("host", host_slot), ("rtsw", rack_slot), ("ctsw", ctsw_slot),
                        ("atsw", atsw_slot)):  # fmt: skip
        for d, slot in slots.items():
            names[base[kind] + slot] = d
            present[base[kind] + slot] = True
    N = nics_per_host
    for h, nic_list in nic_ports.items():
        for n, (port, _, hi_port, gbps) in nic_list.items():
            nic = host_slot[h] * N + n
            names[base["nic"] + nic] = f"{h}/{port}"
            present[base["nic"] + nic] = True
            installed[nic], gbps_of[nic] = True, gbps
            lower_ports[nic], upper_ports[nic] = port, hi_port
        for n in range(N):  # a port with no cable: a NIC not installed
            if n not in nic_list:
                names[base["nic"] + host_slot[h] * N + n] = f"{h}/{ABSENT}nic{n}"
    for (r, c), bundle in rack_pairs.items():
        for k, (port, hi_port, gbps) in enumerate(bundle):
            link = shape.rack_link(rack_slot[r], plane_of[c], k)
            installed[link], gbps_of[link] = True, gbps
            lower_ports[link], upper_ports[link] = port, hi_port
    for (c, a), bundle in agg_pairs.items():
        j = atsw_slot[a] % atsws_per_plane
        for m, (port, hi_port, gbps) in enumerate(bundle):
            link = shape.agg_link(pod_of[c], plane_of[c], j, m)
            installed[link], gbps_of[link] = True, gbps
            lower_ports[link], upper_ports[link] = port, hi_port
    # a link without a cable keeps a nominal speed (its kind's fastest) and is never up
    link_kind = shape.link_kind
    for k in np.unique(link_kind):
        block = link_kind == k
        speeds = gbps_of[block & installed]
        gbps_of[block & ~installed] = speeds.max() if speeds.size else 1.0
    node_budgets = tuple(sorted(
        (base[role[d]] + {"rtsw": rack_slot, "ctsw": ctsw_slot, "atsw": atsw_slot}[role[d]][d], v)
        for d, v in budget.items()))  # fmt: skip
    pod_names, rack_names = _place_names(
        devices, role, len(pods), racks_per_pod, pod_of,
        lambda d: (rack_at[rack_of[d]] if role[d] == "host" else
                   rack_slot[d] // S if role[d] == "rtsw" else None), problems)  # fmt: skip
    problems.raise_any(f"fabric {name}: bad pod or rack names")
    wiring = Wiring(tuple(names), tuple(lower_ports), tuple(upper_ports), installed, present,
                    node_budgets, pod_names, rack_names)  # fmt: skip
    return replace(shape, capacity=np.repeat(gbps_of, 2), wiring=wiring)


def _place_names(devices: Sequence[Device], role: dict[str, str], num_pods: int,
                 racks_per_pod: int, pod_of: dict[str, int],
                 rack_at: Callable[[str], int | None], problems: _Problems,
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:  # fmt: skip
    """The operator's pod and rack names by pod and rack index ((), () when no device names
    one): the devices of one inferred rack or pod must agree, names are label-safe and
    unique (among pods, racks and devices: Slurm and Volcano put them in one namespace)."""
    given = [d for d in devices if (d.pod is not None or d.rack is not None) and d.name in role]
    if not given:
        return (), ()
    pods: dict[int, tuple[str, str]] = {}  # pod index -> (name, the device that gave it)
    racks: dict[int, tuple[str, str]] = {}
    for d in given:
        for field, value, index, seen in (
            ("pod", d.pod, pod_of.get(d.name) if role[d.name] != "atsw" else None, pods),
            ("rack", d.rack, rack_at(d.name), racks),
        ):  # fmt: skip
            if value is None or index is None:
                continue  # a CTSW's rack, an ATSW's pod: where it stands, not what it is
            if not isinstance(value, str) or not PLACE_NAME.match(value):
                problems.add(f"{role[d.name]} {d.name}: {field} {value!r} is not usable as a "
                             "label value and switch name (1-63 of A-Z a-z 0-9 . _ -, a letter "
                             "or digit at both ends)")  # fmt: skip
                continue
            first = seen.setdefault(index, (value, d.name))
            if first[0] != value:
                kin = "rack (same RTSWs)" if field == "rack" else "pod (RTSWs sharing CTSWs)"
                problems.add(f"{role[d.name]} {d.name} has {field} {value!r} but {first[1]} of "
                             f"the same {kin} has {field} {first[0]!r}")  # fmt: skip
    owner: dict[str, str] = {}
    for field, seen in (("pod", pods), ("rack", racks)):
        for _, (value, dev) in sorted(seen.items()):
            if value in role:
                problems.add(f"{field} {value!r} (of {dev}) is also a device's name")
            # case-blind: Volcano's HyperNode names are the lower-cased names
            other = owner.setdefault(value.lower(), f"{field} of {dev}")
            if other != f"{field} of {dev}":
                problems.add(f"{field} {value!r} of {dev} is also the {other}: pod and rack "
                             "names must be unique, upper and lower case alike")  # fmt: skip
    pod_names = tuple(pods[p][0] if p in pods else "" for p in range(num_pods))
    rack_names = tuple(racks[k][0] if k in racks else ""
                       for k in range(num_pods * racks_per_pod))  # fmt: skip
    return (pod_names if pods else ()), (rack_names if racks else ())


def _nic_numbers(hosts: Sequence[str], up: dict[str, list[tuple[str, str, str, float]]]
                 ) -> dict[str, dict[int, tuple[str, str, str, float]]]:  # fmt: skip
    """NIC number -> (port, RTSW, RTSW port, Gbps) of every host's cabled ports. A port's
    number is its place in the natural order of the port names cabled on the hosts that
    share port names with this one (eth0 ... eth7 when every host names its ports so): a
    port without a cable leaves its own number out (a NIC not installed), not the last one,
    also when no host is cabled on every port. Hosts whose port names no other host uses
    (another NIC model's names) number theirs apart, in natural order."""
    ports = {h: sorted(up[h], key=lambda e: natural_key(e[0])) for h in hosts}
    families = _Groups()  # port names, joined when one host has both
    for h in hosts:
        for e in ports[h]:
            families.join(ports[h][0][0], e[0])
    number: dict[str, int] = {}
    for family in families.groups(list(families.parent)):  # each in natural order
        number |= {port: n for n, port in enumerate(family)}
    return {h: {number[e[0]]: e for e in ports[h]} for h in hosts}


def _slots(rack_groups: list[list[str]], rack_of: dict[str, int],
           nic_ports: dict[str, dict[int, tuple[str, str, str, float]]], S: int,
           problems: _Problems) -> dict[str, int]:  # fmt: skip
    """Slot of every RTSW in its rack: NIC n of every host of a rack on the rack's RTSW n % S
    (S = 1: every NIC on the one RTSW); a problem naming the host and port that fits no
    slot."""
    slot_of: dict[str, int] = {}
    for h in sorted(nic_ports, key=natural_key):  # the first host of a rack sets the slots
        for n, (_, hi, _, _) in nic_ports[h].items():
            slot_of.setdefault(hi, n % S)
    for g in rack_groups:  # an RTSW no host is cabled to: the slots left, in order
        left = iter(sorted(set(range(S)) - {slot_of[r] for r in g if r in slot_of}))
        for r in g:
            if r not in slot_of:
                slot_of[r] = next(left, 0)
    layout = (f"one RTSW a rack, or NIC n of every host of a rack on its RTSW n % {S}, as "
              "rail-optimized and dual-ToR racks are cabled")
    alone: list[str] = []  # hosts on one RTSW in a fabric whose racks have S
    for h in sorted(nic_ports, key=natural_key):
        above = sorted({hi for _, hi, _, _ in nic_ports[h].values()}, key=natural_key)
        if all(slot_of[hi] == n % S for n, (_, hi, _, _) in nic_ports[h].items()):
            continue
        if len(above) == 1:
            alone.append(h)
            continue
        ports = []
        for hi in above:
            mine = sorted((p for p, x, _, _ in nic_ports[h].values() if x == hi),
                          key=natural_key)  # fmt: skip
            ports.append(f"{hi} ({', '.join(mine)})")
        problems.add(f"host {h} is cabled to {len(above)} RTSWs: {', '.join(ports)}; the "
                     f"cables fit no layout ({layout})")  # fmt: skip
    if alone:
        # the hosts on several RTSWs of those hosts' racks: what joined the RTSWs into one
        racks = {rack_of[h] for h in alone if len(rack_groups[rack_of[h]]) > 1}
        joiners = [h for h in sorted(nic_ports, key=natural_key) if rack_of[h] in racks and
                   len({hi for _, hi, _, _ in nic_ports[h].values()}) > 1]  # fmt: skip
        why = (f"; host {listing(joiners)}, cabled to several RTSWs, made them one rack"
               if joiners else "")  # fmt: skip
        shown = rack_groups[rack_of[alone[0]]]  # their rack, else one of S RTSWs
        shown = shown if len(shown) > 1 else max(rack_groups, key=len)
        problems.add(f"host {listing(alone)} have every NIC on one RTSW while a rack has "
                     f"{len(shown)} RTSWs ({listing(shown)}{why}): the cables fit no layout "
                     f"({layout})")  # fmt: skip
    for g in rack_groups:
        taken: dict[int, str] = {}
        for r in g:
            if slot_of[r] in taken and not problems.items:
                problems.add(f"rtsw {taken[slot_of[r]]} and rtsw {r} of one rack both take "
                             f"NIC slot {slot_of[r]} ({layout})")
            taken[slot_of[r]] = r
    return slot_of


def _planes(ctsws: list[str], up: dict[str, list[tuple[str, str, str, float]]],
            slot_of: dict[str, int], S: int, problems: _Problems) -> int:  # fmt: skip
    """Q: the RTSW slots a CTSW reaches make the planes (slots s with s % Q equal); 1 when
    every CTSW reaches every slot. A problem when the planes are not slot classes mod Q."""
    reach: dict[str, set[int]] = {c: set() for c in ctsws}
    for r, slot in slot_of.items():
        for _, c, _, _ in up.get(r, ()):
            reach[c].add(slot)
    uf = _Groups()
    for s in range(S):
        uf.find(str(s))
    for slots in reach.values():
        first = min(slots, default=None)
        for s in slots:
            uf.join(str(first), str(s))
    groups = uf.groups(str(s) for s in range(S))
    Q = len(groups)
    if Q > 1 and any(sorted(int(s) for s in g) != list(range(int(g[0]) % Q, S, Q))
                     for g in groups):  # fmt: skip
        shown = "; ".join(", ".join(g) for g in groups)
        problems.add(f"the CTSWs split the RTSW slots into planes {{{shown}}}: a plane holds "
                     f"the slots s with the same s % {Q} (NIC port p of a dual-ToR NIC on "
                     "plane p)")  # fmt: skip
    return Q


def _by_plane(planes: list[list[str]], plane: list[int], Q: int) -> list[list[str]]:
    """The ATSW planes reordered so that the k-th of RTSW plane q sits at index k * Q + q
    (an empty group where a plane has fewer)."""
    per = [[g for g, q in zip(planes, plane, strict=True) if q == p] for p in range(Q)]
    most = max(len(x) for x in per)
    return [per[i % Q][i // Q] if i // Q < len(per[i % Q]) else [] for i in range(most * Q)]


def _links(dims: dict[str, int]) -> int:
    racks = dims["pods"] * dims["racks_per_pod"]
    ctsws = dims["pods"] * dims["ctsws_per_pod"]
    return (racks * dims["hosts_per_rack"] * dims["nics_per_host"]
            + racks * dims["rtsws_per_rack"] * dims["ctsws_per_pod"] * dims["rack_links"]
            + ctsws * dims["atsws_per_plane"] * dims["agg_links"])  # fmt: skip
