"""Roles from name patterns or from the cables and the capabilities devices advertise."""

from __future__ import annotations

import pytest

from controller.errors import FabricError
from controller.model.device_roles import (
    assign_roles,
    parse_role_patterns,
    tier_mismatches,
    with_roles,
)
from controller.model.discovery import Neighbour, discover
from controller.model.inventory import Cable

SWITCH = frozenset({"bridge", "router"})
STATION = frozenset({"station"})


def cable(a: str, b: str, n: int = 0) -> Cable:
    return Cable(a, f"p{n}", b, f"q{n}", 400)


# two hosts, two leaves, two spines, one super-spine
WIRING = [cable("h1", "leaf1", 1), cable("h2", "leaf2", 2), cable("leaf1", "sp1", 3),
          cable("leaf2", "sp2", 4), cable("sp1", "top", 5), cable("sp2", "top", 6)]  # fmt: skip
DEVICES = ["h1", "h2", "leaf1", "leaf2", "sp1", "sp2", "top"]
CAPS = {d: STATION if d.startswith("h") else SWITCH for d in DEVICES}


def test_inferred_hosts_then_tiers_by_hops():
    assert assign_roles(DEVICES, WIRING, CAPS) == {
        "h1": "host", "h2": "host", "leaf1": "rtsw", "leaf2": "rtsw", "sp1": "ctsw",
        "sp2": "ctsw", "top": "atsw"}  # fmt: skip


def test_patterns_win_and_clash_and_are_checked():
    assert parse_role_patterns(["h*=host", "x=y=atsw"]) == [("h*", "host"), ("x=y", "atsw")]
    for bad in ("leaf", "=rtsw", "leaf*=spine"):
        with pytest.raises(FabricError, match="PATTERN=ROLE"):
            parse_role_patterns([bad])
    # the hosts advertise nothing useful: patterns say what they are
    caps = {d: SWITCH for d in DEVICES}
    with pytest.raises(FabricError, match="no device looks like a host"):
        assign_roles(DEVICES, WIRING, caps)
    roles = assign_roles(DEVICES, WIRING, caps, [("h?", "host")])
    assert roles["h1"] == "host" and roles["leaf1"] == "rtsw" and roles["top"] == "atsw"
    with pytest.raises(FabricError, match=r"different roles: leaf1 \(leaf\*=rtsw, \*1=ctsw\)"):
        assign_roles(DEVICES, WIRING, CAPS, [("leaf*", "rtsw"), ("*1", "ctsw")])


def test_ambiguous_cases_are_rejected_naming_the_devices():
    unheard = {d: c for d, c in CAPS.items() if d != "h2"}
    with pytest.raises(FabricError, match="no neighbour hears the capabilities of h2"):
        assign_roles(DEVICES, WIRING, unheard)
    paired = WIRING + [cable("h1", "h2", 7)]
    with pytest.raises(FabricError, match=r"their kind.*h1 \(h2\), h2 \(h1\)"):
        assign_roles(DEVICES, paired, CAPS)
    far = DEVICES + ["edge"]
    with pytest.raises(FabricError, match=r"more than 3 hops.*edge \(4 hops\)"):
        assign_roles(far, WIRING + [cable("top", "edge", 8)], CAPS | {"edge": SWITCH})
    with pytest.raises(FabricError, match="no cable path to any host from island"):
        assign_roles(DEVICES + ["island"], WIRING, CAPS | {"island": SWITCH})


def test_cables_that_skip_a_tier_are_problems_and_left_out():
    tables: dict[str, list[Neighbour]] = {d: [] for d in DEVICES}
    for c in WIRING + [Cable("h1", "p9", "sp1", "q9", 400)]:
        tables[c.a].append(Neighbour(c.a, c.a_port, c.b, c.b_port, capabilities=CAPS[c.b]))
        tables[c.b].append(Neighbour(c.b, c.b_port, c.a, c.a_port, capabilities=CAPS[c.a]))
    found = discover(tables, 400)
    assert found.ok
    # inferred, h1 - sp1 would make top two hops from a host; the patterns pin the tiers
    devices, cables, problems = with_roles(found, [("sp*", "ctsw"), ("top", "atsw")])
    assert [p.message for p in problems] == [
        "h1:p9 - sp1:q9 joins a host and a ctsw: cables join host-rtsw, rtsw-ctsw or ctsw-atsw"]
    assert len(cables) == len(WIRING) and {d.name for d in devices} == set(DEVICES)
    assert tier_mismatches(cables, {d.name: d.role for d in devices}) == []
