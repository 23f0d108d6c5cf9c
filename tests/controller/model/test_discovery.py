"""Pairing LLDP neighbour records into cables, and the report of what does not add up."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.discovery import Neighbour, discover
from controller.model.inventory import Cable, natural_key

SWITCH = frozenset({"bridge", "router"})
STATION = frozenset({"station"})


def caps(name: str) -> frozenset[str]:
    return STATION if name.startswith("gpu") else SWITCH


def tables_of(cables: Sequence[tuple[str, str, str, str]],
              gbps: dict[tuple[str, str], float] | None = None) -> dict[str, list[Neighbour]]:
    """Both ends' tables of `cables` (a, a_port, b, b_port); `gbps`: the speed each port
    advertises."""
    gbps = gbps or {}
    out: dict[str, list[Neighbour]] = {}
    for a, pa, b, pb in cables:
        out.setdefault(a, []).append(Neighbour(a, pa, b, pb, gbps=gbps.get((b, pb)),
                                               capabilities=caps(b)))
        out.setdefault(b, []).append(Neighbour(b, pb, a, pa, gbps=gbps.get((a, pa)),
                                               capabilities=caps(a)))
    return out


LEAF = [("gpu-1", "eth0", "leaf-a", "Ethernet0"), ("gpu-1", "eth1", "leaf-b", "Ethernet0"),
        ("gpu-2", "eth0", "leaf-a", "Ethernet4"), ("gpu-2", "eth1", "leaf-b", "Ethernet4"),
        ("leaf-a", "Ethernet48", "spine-1", "Ethernet0"),
        ("leaf-b", "Ethernet48", "spine-1", "Ethernet4")]  # fmt: skip


def kinds(found) -> list[str]:
    return [p.kind for p in found.problems]


def test_agreeing_tables_give_every_cable_once_oriented_and_ordered():
    found = discover(tables_of(LEAF), 400)
    assert found.ok and found.devices == ("gpu-1", "gpu-2", "leaf-a", "leaf-b", "spine-1")
    assert {(c.a, c.a_port, c.b, c.b_port) for c in found.cables} == set(LEAF)
    assert len(found.cables) == len(LEAF) and found.speed_default == len(LEAF)
    assert found.capabilities["gpu-1"] == STATION and found.capabilities["spine-1"] == SWITCH


def test_speed_from_either_end_else_the_default_and_a_disagreement_named():
    speeds = {("leaf-a", "Ethernet0"): 200.0, ("gpu-2", "eth0"): 100.0,
              ("leaf-a", "Ethernet4"): 400.0}  # fmt: skip
    found = discover(tables_of(LEAF, speeds), 400)
    by_port = {(c.a, c.a_port): c.gbps for c in found.cables}
    assert by_port[("gpu-1", "eth0")] == 200.0 and by_port[("gpu-1", "eth1")] == 400.0
    assert ("gpu-2", "eth0") not in by_port  # 100 against 400: left out
    assert kinds(found) == ["speed"]
    message = found.problems[0].message
    assert "gpu-2:eth0" in message and "leaf-a:Ethernet4" in message
    assert "100 Gbps" in message and "400 Gbps" in message
    assert found.speed_from_lldp == 1 and found.speed_default == len(LEAF) - 2
    forced = discover(tables_of(LEAF, speeds), 25, force_default=True)
    assert forced.ok and {c.gbps for c in forced.cables} == {25}


def test_a_cable_heard_from_one_end_names_both_ends():
    tables = tables_of(LEAF)
    tables["spine-1"] = [n for n in tables["spine-1"] if n.port != "Ethernet4"]
    found = discover(tables, 400)
    assert kinds(found) == ["one-sided"]
    assert found.problems[0].ends == (("leaf-b", "Ethernet48"), ("spine-1", "Ethernet4"))
    message = found.problems[0].message
    assert "spine-1 (which speaks LLDP) hears no neighbour on Ethernet4" in message
    assert len(found.cables) == len(LEAF) - 1


def test_a_port_that_hears_two_neighbours():
    tables = tables_of(LEAF)
    tables["leaf-a"].append(Neighbour("leaf-a", "Ethernet0", "gpu-2", "eth7", capabilities=STATION))
    found = discover(tables, 400)
    assert kinds(found) == ["twice"]
    assert found.problems[0].message == ("leaf-a:Ethernet0 hears 2 neighbours: gpu-1:eth0, "
                                         "gpu-2:eth7")  # fmt: skip
    assert ("gpu-1", "eth0") not in {(c.a, c.a_port) for c in found.cables}


def test_ends_that_disagree_about_the_port():
    tables = tables_of(LEAF)
    # gpu-1 advertises its port by another name than its own table uses
    tables["leaf-a"] = [Neighbour("leaf-a", n.port, n.peer, "enp1s0f0" if n.port == "Ethernet0"
                                  else n.peer_port, capabilities=n.capabilities)
                        for n in tables["leaf-a"]]  # fmt: skip
    found = discover(tables, 400)
    assert kinds(found) == ["ports"]  # one problem, not one from each end
    assert found.problems[0].message == ("gpu-1:eth0 hears leaf-a:Ethernet0, but leaf-a:Ethernet0 "
                                         "hears gpu-1:enp1s0f0")  # fmt: skip
    # a crossed pair: leaf-b hears gpu-1 on Ethernet4, gpu-1 says it is on leaf-b's Ethernet0
    tables = tables_of(LEAF)
    tables["leaf-b"] = [Neighbour("leaf-b", "Ethernet4" if n.port == "Ethernet0" else "Ethernet9",
                                  n.peer, n.peer_port, capabilities=n.capabilities)
                        if n.port in ("Ethernet0", "Ethernet4") else n
                        for n in tables["leaf-b"]]  # fmt: skip
    found = discover(tables, 400)
    assert set(kinds(found)) == {"ports"}
    assert any("gpu-1:eth1 hears leaf-b:Ethernet0, but leaf-b hears gpu-1:eth1 on its port "
               "Ethernet4" == p.message for p in found.problems)


def test_unknown_missing_alone_and_self():
    tables = tables_of(LEAF)
    tables["leaf-a"].append(Neighbour("leaf-a", "Ethernet60", "mgmt-sw", "ge-0/0/1"))
    tables["leaf-a"].append(Neighbour("leaf-a", "Ethernet61", "", "", chassis_id="aa:bb"))
    tables["leaf-b"].append(Neighbour("leaf-b", "Ethernet62", "leaf-b", "Ethernet63"))
    tables["gpu-9"] = []
    del tables["spine-1"]
    found = discover(tables, 400, unreadable={"spine-1": "ssh: timed out"})
    assert kinds(found) == ["missing", "alone", "unknown", "unknown", "self", "one-sided",
                            "one-sided"]  # fmt: skip
    text = "\n".join(p.message for p in found.problems)
    assert "spine-1: no neighbour table (ssh: timed out)" in text
    assert "gpu-9: hears no neighbour and no device hears it" in text
    assert "leaf-a:Ethernet60 hears 'mgmt-sw' port ge-0/0/1, which is not in the device set" in text
    assert "a chassis without a system name (id aa:bb)" in text
    assert "leaf-b:Ethernet62 hears its own device's port Ethernet63" in text
    assert ("leaf-a:Ethernet48 hears spine-1:Ethernet0, but spine-1's table could not be "
            "read") in text


def test_a_fully_qualified_system_name_means_the_device_of_its_first_label():
    tables = tables_of(LEAF)
    tables["gpu-1"] = [Neighbour(n.device, n.port, n.peer + ".dc1.example.net", n.peer_port,
                                 capabilities=n.capabilities) for n in tables["gpu-1"]]
    assert discover(tables, 400).ok


@st.composite
def clos(draw):
    """A random 3-tier wiring: hosts with NICs to leaves, leaves to spines."""
    hosts, leaves = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    spines, nics = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cables = [(f"gpu-{h}", f"eth{n}", f"leaf-{(h + n) % leaves}", f"Ethernet{h * 8 + n}")
              for h in range(hosts) for n in range(nics)]
    cables += [(f"leaf-{i}", f"Ethernet{100 + s}", f"spine-{s}", f"Ethernet{i}")
               for i in range(leaves) for s in range(spines)]
    drop = draw(st.integers(0, len(cables) - 1))
    return cables, drop


@settings(max_examples=60, deadline=None)
@given(clos())
def test_any_wiring_is_found_exactly_and_one_silenced_port_is_named(case):
    cables, drop = case
    found = discover(tables_of(cables), 400)
    assert found.ok and len(found.cables) == len(cables)
    assert {frozenset([(c.a, c.a_port), (c.b, c.b_port)]) for c in found.cables} == {
        frozenset([(a, pa), (b, pb)]) for a, pa, b, pb in cables}
    for c in found.cables:  # the lower end, in natural order, is `a`
        assert (natural_key(c.a), natural_key(c.a_port)) < (natural_key(c.b), natural_key(c.b_port))
    a, pa, b, pb = cables[drop]
    tables = tables_of(cables)
    tables[b] = [n for n in tables[b] if n.port != pb]
    broken = discover(tables, 400)
    assert kinds(broken) == ["one-sided"]
    assert broken.problems[0].ends == ((a, pa), (b, pb))
    assert len(broken.cables) == len(cables) - 1
    assert Cable(a, pa, b, pb, 400) not in broken.cables
