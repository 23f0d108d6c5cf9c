"""Each device's role (host, rtsw, ctsw, atsw): given by name patterns, or read off the cables.

The rule, in order, for the devices no `PATTERN=ROLE` names:

1. hosts: devices that enable no switch capability (neither Bridge nor Router, as their
   neighbours hear them over LLDP) and whose every neighbour is a switch (enables one, or a
   pattern makes it a switch);
2. switches by their distance in cables from the nearest host: 1 -> rtsw, 2 -> ctsw, 3 ->
   atsw.

Anything else is ambiguous and rejected with a message naming the devices: a device no one
hears capabilities from, two cabled devices that are both non-switches, a switch with no
path to a host or more than three hops from one, a device two patterns give different roles.
Afterwards every cable must join adjacent tiers (host-rtsw, rtsw-ctsw, ctsw-atsw).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from controller.errors import FabricError
from controller.model.discovery import Discovery, Problem
from controller.model.inventory import (
    ROLES,
    Cable,
    Device,
    listing,
    natural_key,
    roles_by_pattern,
)

SWITCH_CAPABILITIES = frozenset({"bridge", "router"})
SHOWN = 8  # names listed per message before "and N more"


def parse_role_patterns(specs: Iterable[str]) -> list[tuple[str, str]]:
    """`PATTERN=ROLE` strings (shell-style patterns: leaf-*, gpu-??) -> (pattern, role)."""
    out = []
    for spec in specs:
        pattern, sep, role = spec.rpartition("=")
        role = role.lower()  # any case, as a cable list's role columns take it
        if not sep or not pattern or role not in ROLES:
            raise FabricError(f"--roles {spec!r}: give PATTERN=ROLE with ROLE one of "
                              f"{', '.join(ROLES)}")  # fmt: skip
        out.append((pattern, role))
    return out


def assign_roles(devices: Sequence[str], cables: Sequence[Cable],
                 capabilities: Mapping[str, frozenset[str]],
                 patterns: Sequence[tuple[str, str]] = ()) -> dict[str, str]:  # fmt: skip
    """Device -> role by the rule above; FabricError naming every ambiguous device."""
    roles = roles_by_pattern(devices, patterns, "--roles")
    index = {d: i for i, d in enumerate(devices)}
    neighbours: dict[str, set[str]] = {d: set() for d in devices}
    for c in cables:
        neighbours[c.a].add(c.b)
        neighbours[c.b].add(c.a)

    def is_switch(d: str) -> bool:
        if d in roles:
            return roles[d] != "host"
        return bool(capabilities.get(d, frozenset()) & SWITCH_CAPABILITIES)

    unheard, paired = [], []
    for d in devices:
        if d in roles or is_switch(d):
            continue
        if d not in capabilities:
            unheard.append(d)
            continue
        others = sorted((n for n in neighbours[d] if not is_switch(n)), key=natural_key)
        if others:
            paired.append(f"{d} ({', '.join(others)})")
        else:
            roles[d] = "host"
    problems = []
    if unheard:
        problems.append(f"no neighbour hears the capabilities of {listing(unheard, SHOWN)} "
                        "(no cable both ends agree on)")  # fmt: skip
    if paired:
        problems.append(f"devices that enable no switch capability are cabled to others of "
                        f"their kind, so which is the host is not clear: {listing(paired, SHOWN)}")
    hosts = [index[d] for d in devices if roles.get(d) == "host"]
    if not hosts and not problems:
        problems.append("no device looks like a host (every device enables Bridge or Router)")
    if problems:
        raise FabricError("cannot tell the roles: " + "; ".join(problems) +
                          "; give them with --roles PATTERN=ROLE")  # fmt: skip
    n = len(devices)
    a = np.array([index[c.a] for c in cables] + [n] * len(hosts), dtype=np.int64)
    b = np.array([index[c.b] for c in cables] + hosts, dtype=np.int64)
    graph = csr_matrix((np.ones(a.size), (a, b)), shape=(n + 1, n + 1))
    hops = shortest_path(graph, directed=False, unweighted=True, indices=n)[:n] - 1
    far, cut = [], []
    for d in devices:
        if d in roles:
            continue
        h = hops[index[d]]
        if not np.isfinite(h):
            cut.append(d)
        elif not 1 <= h <= 3:
            far.append(f"{d} ({int(h)} hops)")
        else:
            roles[d] = ROLES[int(h)]
    if cut or far:
        parts = ([f"no cable path to any host from {listing(cut, SHOWN)}"] if cut else []) + (
            [f"more than 3 hops from the nearest host: {listing(far, SHOWN)}"] if far else [])
        raise FabricError("cannot tell the roles: " + "; ".join(parts) +
                          "; give them with --roles PATTERN=ROLE")  # fmt: skip
    return roles


def tier_mismatches(cables: Iterable[Cable], roles: Mapping[str, str]) -> list[Cable]:
    """Cables that do not join adjacent tiers (host-rtsw, rtsw-ctsw, ctsw-atsw)."""
    rank = {r: i for i, r in enumerate(ROLES)}
    return [c for c in cables if abs(rank[roles[c.a]] - rank[roles[c.b]]) != 1]


def with_roles(found: Discovery, patterns: Sequence[tuple[str, str]] = ()
               ) -> tuple[list[Device], list[Cable], list[Problem]]:  # fmt: skip
    """The devices of `found`'s agreed cables with their roles, the cables that join adjacent
    tiers, and a `tier` problem for each one that does not (left out)."""
    cabled = sorted({d for c in found.cables for d in (c.a, c.b)}, key=natural_key)
    roles = assign_roles(cabled, found.cables, found.capabilities, patterns)
    wrong = tier_mismatches(found.cables, roles)
    problems = [Problem("tier", f"{c.a}:{c.a_port} - {c.b}:{c.b_port} joins a {roles[c.a]} and "
                        f"a {roles[c.b]}: cables join host-rtsw, rtsw-ctsw or ctsw-atsw",
                        ((c.a, c.a_port), (c.b, c.b_port))) for c in wrong]  # fmt: skip
    dropped = set(wrong)
    kept = [c for c in found.cables if c not in dropped]
    used = {d for c in kept for d in (c.a, c.b)}
    devices = [Device(d, roles[d]) for d in cabled if d in used]
    return devices, kept, problems
