"""Cable lists become fabrics: the Clos shape inferred, the operator's names kept, irregular
wiring as data, and every wiring that is not a Clos refused by device and port."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import FabricError
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import ABSENT, Fabric
from controller.model.health import LinkHealth, parse_health
from controller.model.inventory import Cable, Device, fabric_from_cables
from controller.model.name_templates import named_cable_list

NAMES = {"host": "gpu-{pod_letter}{rack}{host}", "rtsw": "leaf-{pod_letter}{rack}",
         "ctsw": "spine-{pod_letter}{ctsw}", "atsw": "super-{plane}{atsw}"}  # fmt: skip
PORTS = {k: "Ethernet{i}" for k in ("rtsw_down", "rtsw_up", "ctsw_down", "ctsw_up", "atsw_down")}


def cables_of(preset: str, names: dict[str, str] | None = None,
              ) -> tuple[Fabric, list[Device], list[Cable]]:  # fmt: skip
    shape = build(PRESETS[preset])
    devices, cables = named_cable_list(shape, names, {"host": "eth{nic}", **PORTS})
    return shape, devices, cables


def load(devices: list[Device], cables: list[Cable], name: str = "dc1") -> Fabric:
    return fabric_from_cables(name, devices, cables)


@pytest.mark.parametrize("preset", ["tiny", "small", "wide"])
def test_a_preset_as_cables_is_the_preset(preset: str) -> None:
    """The preset's own names as a cable list give back its shape, names, links, speeds."""
    shape, devices, cables = cables_of(preset)
    fabric = load(devices, cables, preset)
    dims = ("pods", "racks_per_pod", "hosts_per_rack", "nics_per_host", "ctsws_per_pod",
            "rack_links", "atsws_per_plane", "agg_links")  # fmt: skip
    assert [getattr(fabric, d) for d in dims] == [getattr(shape, d) for d in dims]
    hosts = slice(0, shape.num_hosts)
    assert fabric.node_names[hosts] == shape.node_names[hosts]
    assert fabric.link_names[shape.rack_base :] == shape.link_names[shape.rack_base :]
    assert np.array_equal(fabric.capacity, shape.capacity) and fabric.installed.all()
    assert fabric.fingerprint != shape.fingerprint  # names and ports are covered
    assert fabric.ports(0) == ("eth0", "Ethernet0")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), flip=st.lists(st.booleans(), min_size=40, max_size=40))
def test_order_and_orientation_do_not_matter(seed: int, flip: list[bool]) -> None:
    """Devices and cables in any order, cables in either orientation: the same fabric."""
    _, devices, cables = cables_of("tiny", NAMES)
    reference = load(devices, cables)
    rng = np.random.default_rng(seed)
    shuffled = [cables[i] for i in rng.permutation(len(cables))]
    turned = [Cable(c.b, c.b_port, c.a, c.a_port, c.gbps) if f else c
              for c, f in zip(shuffled, flip, strict=True)]  # fmt: skip
    again = load([devices[i] for i in rng.permutation(len(devices))], turned)
    assert again.fingerprint == reference.fingerprint
    assert again.link_names == reference.link_names
    assert np.array_equal(again.capacity, reference.capacity)


def test_names_equal_but_for_leading_zeros_keep_order_and_orientation_free() -> None:
    """leaf-a1 and leaf-a01 (and spines and ports likewise) are equal digit for digit by
    value: their order comes from the names, not from the order the devices and cables
    came in, so any order still gives the same fabric."""
    _, devices, cables = cables_of("tiny", NAMES)
    rename = {"leaf-a0": "leaf-a1", "leaf-a1": "leaf-a01",
              "spine-a0": "spine-a1", "spine-a1": "spine-a01", "spine-a2": "spine-a001"}
    devices = [replace(d, name=rename.get(d.name, d.name)) for d in devices]
    port = {("gpu-a00", "eth1"): "eth01"}  # beside its eth0... and eth1 on gpu-a01

    def renamed(c: Cable) -> Cable:
        return Cable(rename.get(c.a, c.a), port.get((c.a, c.a_port), c.a_port),
                     rename.get(c.b, c.b), port.get((c.b, c.b_port), c.b_port), c.gbps)

    cables = [renamed(c) for c in cables]
    reference = load(devices, cables)
    turned = [Cable(c.b, c.b_port, c.a, c.a_port, c.gbps) for c in cables]
    for listed, cabled in ((devices[::-1], cables), (devices, cables[::-1]),
                           (devices[::-1], turned[::-1])):
        again = load(listed, cabled)
        assert again.fingerprint == reference.fingerprint
        assert again.node_names == reference.node_names
        assert again.link_names == reference.link_names
    # plain string order among the tied names: leaf-a01 before leaf-a1
    assert reference.rtsw_name(0) == "leaf-a01" and reference.rtsw_name(1) == "leaf-a1"


def test_the_operators_names_everywhere() -> None:
    _, devices, cables = cables_of("tiny", NAMES)
    f = load(devices, cables)
    assert f.host_name(0) == "gpu-a00" and f.rtsw_name(3) == "leaf-b1"
    assert f.link_name(f.rack_link(1, 2)) == "leaf-a1:spine-a2"
    assert f.nic_name(3) == "gpu-a01/eth1"
    assert f.host_by_name("gpu-b10") == 6 and f.switch_kind("super-20") == "atsw"
    assert f.link_by_name("spine-b3:leaf-b0") == f.rack_link(2, 3)  # either orientation
    assert f.port_at("leaf-a0", f.rack_link(0, 1)) == "Ethernet5"  # after 4 host ports
    assert f.port_at("spine-a1", f.rack_link(0, 1)) == "Ethernet0"


def test_missing_cables_and_a_partial_rack_are_data() -> None:
    _, devices, cables = cables_of("tiny", NAMES)
    devices = [d for d in devices if d.name != "gpu-b11"]  # never racked
    cables = [c for c in cables if c.a != "gpu-b11" and (c.a, c.b) != ("leaf-a1", "spine-a2")
              and (c.a, c.a_port) != ("gpu-a00", "eth1")]  # fmt: skip
    f = load(devices, cables)
    assert (f.hosts_per_rack, f.nics_per_host, f.num_hosts) == (2, 2, 8)  # the regular model
    missing = {f.link_name(int(k)) for k in np.flatnonzero(~f.installed)}
    # a NIC without a cable has no port to be named by: its slot keeps an index name
    assert "leaf-a1:spine-a2" in missing and f"gpu-a00/{ABSENT}nic1:leaf-a0" in missing
    assert len(missing) == 1 + 1 + 2  # the uplink, the NIC, the absent host's two NICs
    assert f.host_name(7).startswith(ABSENT) and not f.present[f.node_id("host", 7)]
    with pytest.raises(FabricError, match="unknown node"):
        f.node_by_name(f.host_name(7))
    assert f.usable_hosts.tolist() == [1, 2, 3, 4, 5, 6]  # gpu-a00 lacks a NIC, gpu-b11 is gone
    health = LinkHealth.all_up(f)
    assert np.array_equal(health.factor, f.installed.astype(float))
    assert health.changed(f).size == 0
    assert (health.arc_capacity(f)[np.repeat(~f.installed, 2)] == 0).all()
    summary = f.summary()
    assert (summary["hosts"], summary["gpus"], summary["links_not_installed"]) == (7, 13, 4)
    with pytest.raises(FabricError, match="leaf-a1:spine-a2 is not installed"):
        parse_health(f, ["leaf-a1:spine-a2=up"])
    assert parse_health(f, ["leaf-a1:spine-a2=down"]).changed(f).size == 0


def test_a_pod_with_fewer_racks_and_mixed_speeds() -> None:
    _, devices, cables = cables_of("small", NAMES)
    gone = {"leaf-b7"} | {c.a for c in cables if c.b == "leaf-b7"}
    devices = [d for d in devices if d.name not in gone]
    cables = [replace(c, gbps=200.0) if c.a == "leaf-a0" else c for c in cables
              if c.a not in gone and c.b not in gone]  # fmt: skip
    f = load(devices, cables)
    assert (f.pods, f.racks_per_pod) == (2, 8)
    assert not f.present[f.node_id("rtsw", 15)] and f.summary()["racks"] == 15
    link = f.link_by_name("leaf-a0:spine-a3")
    assert f.capacity[2 * link] == 200.0 and f.capacity[2 * f.rack_link(1, 3)] == 400.0


def test_a_switch_budget_overrides_its_tier() -> None:
    _, devices, cables = cables_of("tiny", NAMES)
    devices = [replace(d, te_entries=100) if d.name == "spine-b2" else d for d in devices]
    f = fabric_from_cables("dc1", devices, cables, (2048, 512, None))
    budget = f.table_budget()
    assert budget[f.node_by_name("spine-b2")] == 100
    assert budget[f.node_by_name("spine-b1")] == 512 and budget[f.node_by_name("leaf-a0")] == 2048
    assert np.isinf(budget[f.node_by_name("super-00")])
    # an operator's one number replaces every tier's and caps a switch's own, never raises it
    budget = f.table_budget(256)
    assert budget[f.node_by_name("spine-b2")] == 100
    assert budget[f.node_by_name("spine-b1")] == 256 == budget[f.node_by_name("super-00")]
    assert f.table_budget(16)[f.node_by_name("spine-b2")] == 16


def test_two_tier_without_atsws() -> None:
    shape = build(replace(PRESETS["tiny"], pods=1, atsws_per_plane=0, taper=None))
    devices, cables = named_cable_list(shape, NAMES)
    f = load(devices, cables)
    assert (f.pods, f.atsws_per_plane, f.num_agg_links) == (1, 0, 0)
    assert f.host_name(3) == "gpu-a11"


def test_renamed_fabrics_do_not_share_a_fingerprint() -> None:
    _, devices, cables = cables_of("tiny", NAMES)
    a = load(devices, cables)
    swap = {"gpu-a00": "gpu-x00"}
    b = load([replace(d, name=swap.get(d.name, d.name)) for d in devices],
             [replace(c, a=swap.get(c.a, c.a)) for c in cables])  # fmt: skip
    c = load(devices, [replace(x, a_port="p9") if (x.a, x.a_port) == ("gpu-a00", "eth0") else x
                       for x in cables])  # fmt: skip
    d = load(devices, cables[:-1])
    assert len({a.fingerprint, b.fingerprint, c.fingerprint, d.fingerprint}) == 4
    assert a.fingerprint == load(devices, cables).fingerprint


def bad(devices: list[Device], cables: list[Cable], match: str) -> None:
    with pytest.raises(FabricError, match=match):
        load(devices, cables)


def test_what_is_not_a_clos_is_refused_by_device_and_port() -> None:
    _, devices, cables = cables_of("tiny", NAMES)
    extra = Device("gpu-z", "host")
    bad(devices, cables + [cables[0]], r"the same cable as cables\[0\], listed twice")
    reused = Cable(cables[0].a, cables[0].a_port, cables[1].b, "Ethernet99", 400)
    bad(devices, cables + [reused], r"port gpu-a00:eth0 is used twice \(also by cables\[0\]\)")
    bad(devices + [extra], cables + [Cable("gpu-z", "eth0", "gpu-a00", "eth9", 400)],
        "a cable between two hosts, gpu-z:eth0 and gpu-a00:eth9")
    bad(devices, cables + [Cable("gpu-a00", "eth2", "leaf-b0", "Ethernet99", 400)],
        r"host gpu-a00 is cabled to 2 RTSWs: leaf-a0 \(eth0, eth1\), leaf-b0 \(eth2\)")
    bad(devices, cables + [Cable("gpu-a00", "eth2", "mystery", "p1", 400)],
        "unknown device 'mystery'")
    bad(devices + [Device("odd", "router")], cables, "device odd has role 'router'")
    bad(devices, cables + [Cable("gpu-a00", "eth2", "spine-a0", "Ethernet99", 400)],
        "joins a host and a ctsw")
    bad(devices + [extra], cables, "host gpu-z has no cable to an RTSW")
    bad(devices + [Device("a:b", "host")], cables, "'a:b' cannot name a device")
    # a space inside a name broke the Slurm export ("SwitchName=leaf e0 Nodes=...")
    bad(devices + [Device("leaf e0", "host")], cables, "'leaf e0' cannot name a device")
    bad(devices + [devices[0]], cables, "device gpu-a00 is listed twice")
    # a CTSW of pod a wired into pod b's plane 0 as well as its own plane: two CTSWs of a
    # pod in one plane
    bad(devices, cables + [Cable("spine-a1", "Ethernet99", "super-00", "Ethernet99", 400)],
        "ctsw spine-a0 and ctsw spine-a1 of one pod")
    two_tier = [c for c in cables if not c.b.startswith("super")]
    bad([d for d in devices if d.role != "atsw"], two_tier,
        "2 groups of RTSWs share no CTSW and no ATSW joins them")
    lonely = [c for c in cables if c.a != "leaf-a0" or not c.b.startswith("spine")]
    bad(devices, lonely, "rtsw leaf-a0 has no cable to a CTSW")


def test_name_templates_and_their_errors() -> None:
    shape = build(PRESETS["tiny"])
    devices, cables = named_cable_list(shape, {"rtsw": "tor-{rack_id:03}"},
                                       rename={"ctsw-p1-c0": "spine-x"})  # fmt: skip
    names = [d.name for d in devices]
    assert "tor-003" in names and "spine-x" in names and "host-p0-r0-h0" in names
    assert cables[0] == Cable("host-p0-r0-h0", "nic0", "tor-000", "h0n0", 400.0)
    with pytest.raises(FabricError, match=r"names.host: unknown field \{gpu\}"):
        named_cable_list(shape, {"host": "n{gpu}"})
    # which preset devices collide is said
    with pytest.raises(FabricError, match=r"two devices are both named 'leaf' \(the preset's "
                       r"rtsw-p0-r0 and rtsw-p0-r1\)"):  # fmt: skip
        named_cable_list(shape, {"rtsw": "leaf"})
    with pytest.raises(FabricError, match="rename: no device 'nope'"):
        named_cable_list(shape, rename={"nope": "x"})


LAYOUTS = {
    "rail": ClosSpec(name="rail", pods=1, racks_per_pod=2, hosts_per_rack=3, nics_per_host=4,
                     rtsws_per_rack=4, ctsws_per_pod=4, rack_links=2),
    "rail-only": ClosSpec(name="rail-only", pods=2, racks_per_pod=2, hosts_per_rack=2,
                          nics_per_host=2, rtsws_per_rack=2, planes=2, ctsws_per_pod=4,
                          rack_links=2, atsws_per_plane=2, taper=1.0),
    "dual-plane": ClosSpec(name="dual-plane", pods=2, racks_per_pod=2, hosts_per_rack=2,
                           nics_per_host=4, rtsws_per_rack=4, planes=2, ctsws_per_pod=4,
                           atsws_per_plane=1, taper=2.0),
}  # fmt: skip


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_is_inferred_from_its_cables(layout: str) -> None:
    """A rail-optimized, a rail-only and a dual-plane shape as cable lists (operator names):
    the slots and planes are read off the cables; the same links, speeds and names."""
    shape = build(LAYOUTS[layout])
    names = {**NAMES, "rtsw": "leaf-{pod_letter}{rack}-{slot}"}
    devices, cables = named_cable_list(shape, names, {"host": "eth{nic}", **PORTS})
    assert len(cables) == int(shape.installed.sum())  # no cable across planes
    fabric = load(devices, cables, layout)
    dims = ("pods", "racks_per_pod", "hosts_per_rack", "nics_per_host", "ctsws_per_pod",
            "rack_links", "atsws_per_plane", "agg_links", "rtsws_per_rack", "planes")
    assert [getattr(fabric, d) for d in dims] == [getattr(shape, d) for d in dims]
    assert np.array_equal(fabric.installed, shape.installed)
    assert np.array_equal(fabric.capacity, shape.capacity)
    lo, hi = fabric.link_ends
    assert np.array_equal(lo, shape.link_ends[0]) and np.array_equal(hi, shape.link_ends[1])
    assert fabric.rtsw_name(1) == "leaf-a0-1" and fabric.nic_name(1) == "gpu-a00/eth1"


@pytest.mark.parametrize("layout", ["classic", "rail", "dual-plane"])
def test_a_nic_without_a_cable_is_that_nic_not_installed(layout: str) -> None:
    """Any one host port left uncabled (the first host's first port included): the same
    shape, that NIC alone not installed, every other NIC where its port puts it (a NIC's
    number is its port's, not its place among the ports cabled)."""
    spec = replace(PRESETS["tiny"], nics_per_host=4) if layout == "classic" else LAYOUTS[layout]
    shape = build(spec)
    names = {**NAMES, "rtsw": "leaf-{pod_letter}{rack}-{slot}"} if layout != "classic" else NAMES
    devices, cables = named_cable_list(shape, names, {"host": "eth{nic}", **PORTS})
    full = load(devices, cables, layout)
    host_cables = [i for i, c in enumerate(cables) if c.a.startswith("gpu-")]
    for i in host_cables[:6] + host_cables[-3:]:
        gone = cables[i]
        fabric = load(devices, cables[:i] + cables[i + 1:], layout)
        assert fabric.nics_per_host == full.nics_per_host
        assert fabric.rtsws_per_rack == full.rtsws_per_rack
        missing = [full.nic_name(int(n)) for n in range(full.num_nics)
                   if not fabric.installed[fabric.access_link(n)]]  # fmt: skip
        assert missing == [f"{gone.a}/{gone.a_port}"]
        for n in range(full.num_nics):
            if fabric.installed[fabric.access_link(n)]:
                assert fabric.nic_name(n) == full.nic_name(n)
                assert np.array_equal(fabric.link_ends[1][fabric.access_link(n)],
                                      full.link_ends[1][full.access_link(n)])  # fmt: skip


@pytest.mark.parametrize("layout", ["classic", "rail"])
def test_no_host_cabled_on_every_port_still_numbers_nics_by_port(layout: str) -> None:
    """Every host of the fabric with one port left uncabled, a different one on each: a
    NIC's number is still its port's (eth2 is NIC 2), so the rails hold and the shape is
    the full one with those NICs not installed. A rail rack was refused and a classic one
    read with a NIC fewer, each host's ports renumbered from 0."""
    spec = replace(PRESETS["tiny"], nics_per_host=4) if layout == "classic" else LAYOUTS[layout]
    shape = build(spec)
    names = {**NAMES, "rtsw": "leaf-{pod_letter}{rack}-{slot}"} if layout != "classic" else NAMES
    devices, cables = named_cable_list(shape, names, {"host": "eth{nic}", **PORTS})
    full = load(devices, cables, layout)
    hosts = [d.name for d in devices if d.role == "host"]
    gone = {(h, f"eth{i % shape.nics_per_host}") for i, h in enumerate(hosts)}
    fabric = load(devices, [c for c in cables if (c.a, c.a_port) not in gone], layout)
    assert (fabric.nics_per_host, fabric.rtsws_per_rack) == (full.nics_per_host,
                                                               full.rtsws_per_rack)  # fmt: skip
    missing = {full.nic_name(int(n)) for n in range(full.num_nics)
               if not fabric.installed[fabric.access_link(n)]}  # fmt: skip
    assert missing == {f"{h}/{p}" for h, p in gone}
    for n in range(full.num_nics):
        if fabric.installed[fabric.access_link(n)]:
            assert fabric.nic_name(n) == full.nic_name(n)


def test_a_host_on_two_rtsws_that_fit_no_layout_is_refused() -> None:
    shape = build(LAYOUTS["rail"])
    names = {**NAMES, "rtsw": "leaf-{pod_letter}{rack}-{slot}"}
    devices, cables = named_cable_list(shape, names, {"host": "eth{nic}", **PORTS})
    # host gpu-a01's eth1 and eth2 swapped: NIC 1 on the rack's slot-2 leaf
    swap = {("gpu-a01", "eth1"): "eth2", ("gpu-a01", "eth2"): "eth1"}
    cables = [replace(c, a_port=swap.get((c.a, c.a_port), c.a_port)) for c in cables]
    with pytest.raises(FabricError, match=r"host gpu-a01 is cabled to 4 RTSWs: .*the cables "
                       r"fit no layout \(one RTSW a rack, or NIC n of every host of a rack on "
                       r"its RTSW n % 4"):  # fmt: skip
        load(devices, cables)


# ---- the operator's pod and rack names ------------------------------------------------------
def placed(devices: list[Device], racks: dict[str, str], pods: dict[str, str]) -> list[Device]:
    """`devices` with the rack and pod the maps give (by device name)."""
    return [replace(d, rack=racks.get(d.name), pod=pods.get(d.name)) for d in devices]


def test_devices_name_their_racks_and_pods() -> None:
    """Racks and pods named by any of their devices, in the inferred order; what no device
    names stays unnamed; the fingerprint changes only when something is named."""
    shape, devices, cables = cables_of("tiny", NAMES)
    plain = load(devices, cables)
    assert plain.wiring is not None and plain.wiring.pod_names == plain.wiring.rack_names == ()
    fabric = load(placed(devices, {"leaf-a0": "R7", "gpu-a10": "R8", "gpu-a11": "R8",
                                   "leaf-b1": "R9"},
                         {"spine-a2": "hall-1", "leaf-b0": "hall-2", "gpu-b11": "hall-2"}),
                  cables)  # fmt: skip
    assert [fabric.pod_name(p) for p in range(2)] == ["hall-1", "hall-2"]
    assert [fabric.rack_name(r) for r in range(4)] == ["R7", "R8", None, "R9"]
    assert fabric.fingerprint != plain.fingerprint
    assert fabric.wiring is not None
    unnamed = replace(fabric.wiring, pod_names=(), rack_names=())
    assert replace(fabric, wiring=unnamed).fingerprint == plain.fingerprint
    assert shape.pod_name(0) is None and shape.rack_name(0) is None  # a preset names none


@pytest.mark.parametrize(("racks", "pods", "match"), [
    ({"leaf-a0": "R1", "gpu-a00": "R2"}, {}, r"leaf-a0 has rack 'R1' but gpu-a00 .* 'R2'"),
    ({}, {"spine-a0": "P1", "leaf-a1": "P2"}, r"spine-a0 has pod 'P1' but leaf-a1 of the same pod"),
    ({"leaf-a0": "R1", "leaf-b0": "R1"}, {}, r"rack 'R1' of leaf-b0 is also the rack of leaf-a0"),
    ({"leaf-a0": "x"}, {"leaf-b0": "X"}, r"rack 'x' of leaf-a0 is also the pod of leaf-b0"),
    ({"leaf-a0": "leaf-a1"}, {}, r"rack 'leaf-a1' \(of leaf-a0\) is also a device's name"),
    ({"leaf-a0": "row 3"}, {}, r"rack 'row 3' is not usable as a label value"),
    ({}, {"leaf-a0": "p" * 64}, r"pod 'p{64}' is not usable"),
])  # fmt: skip
def test_inconsistent_or_unsafe_place_names_are_refused(racks: dict[str, str],
                                                        pods: dict[str, str], match: str) -> None:
    _, devices, cables = cables_of("tiny", NAMES)
    bad(placed(devices, racks, pods), cables, match)


def test_an_atsws_pod_and_a_ctsws_rack_are_where_they_stand() -> None:
    """NetBox puts every device in a rack and a site: a spine's rack and a super spine's pod
    say where it stands, not which fabric rack or pod it is, and are not checked."""
    _, devices, cables = cables_of("tiny", NAMES)
    fabric = load(placed(devices, {"spine-a0": "R1", "spine-b0": "R1"},
                         {"super-00": "core", "super-10": "core"}), cables)  # fmt: skip
    assert fabric.wiring is not None and fabric.wiring.pod_names == ()
    assert fabric.wiring.rack_names == ()


def test_pod_and_rack_templates() -> None:
    """names.pod and names.rack name every pod and rack; their fields are checked."""
    shape = build(PRESETS["tiny"])
    devices, cables = named_cable_list(shape, {"pod": "hall-{pod_letter}",
                                               "rack": "r{pod}{rack}-{rack_id}"})  # fmt: skip
    fabric = load(devices, cables)
    assert [fabric.pod_name(p) for p in range(2)] == ["hall-a", "hall-b"]
    assert [fabric.rack_name(r) for r in range(4)] == ["r00-0", "r01-1", "r10-2", "r11-3"]
    assert fabric.node_names == shape.node_names
    with pytest.raises(FabricError, match=r"names.rack: unknown field \{host\}"):
        named_cable_list(shape, {"rack": "r{host}"})
    with pytest.raises(FabricError, match=r"rack 'r' of .* is also the rack of"):
        load(*named_cable_list(shape, {"rack": "r"}))


def test_hosts_left_alone_in_a_rack_name_the_host_that_joined_its_rtsws() -> None:
    """One host of a classic fabric cabled to its neighbour rack's RTSW as well makes the two
    RTSWs one rack, which the others' cabling does not fit: the error names that host, not
    only the hosts that are cabled as they should be."""
    shape, devices, cables = cables_of("tiny", NAMES)
    cables = [replace(c, b="leaf-a1", b_port="Ethernet99") if (c.a, c.a_port) ==
              ("gpu-a00", "eth1") else c for c in cables]  # fmt: skip
    with pytest.raises(FabricError, match=r"while a rack has 2 RTSWs \(leaf-a0, leaf-a1; host "
                       r"gpu-a00, cabled to several RTSWs, made them one rack\)"):  # fmt: skip
        load(devices, cables)
