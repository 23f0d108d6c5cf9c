"""The fabric's index formulas, names and array views agree with a plain graph."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import FabricError
from controller.model.clos import ClosSpec, build
from controller.model.fabric import AGG, RACK, Fabric


def test_tiny_counts(tiny: Fabric) -> None:
    assert (tiny.num_hosts, tiny.num_nics, tiny.num_rtsws) == (8, 16, 4)
    assert (tiny.num_ctsws, tiny.num_atsws) == (8, 4)
    # 16 access + 4 RTSW x 4 CTSW links + 8 CTSW x 1 ATSW links
    assert tiny.num_links == 16 + 16 + 8
    assert tiny.num_arcs == 80


def test_tiny_names_round_trip(tiny: Fabric) -> None:
    assert tiny.link_name(0) == "host-p0-r0-h0/nic0:rtsw-p0-r0"
    assert tiny.link_name(tiny.rack_link(3, 2)) == "rtsw-p1-r1:ctsw-p1-c2"
    assert tiny.link_name(tiny.agg_link(1, 3, 0)) == "ctsw-p1-c3:atsw-c3-a0"
    for link in range(tiny.num_links):
        assert tiny.link_by_name(tiny.link_name(link)) == link
    # either end first
    assert tiny.link_by_name("ctsw-p1-c2:rtsw-p1-r1") == tiny.rack_link(3, 2)


def test_unknown_names_are_named(tiny: Fabric) -> None:
    with pytest.raises(FabricError, match="unknown link 'rtsw-p9-r0:ctsw-p9-c0'"):
        tiny.link_by_name("rtsw-p9-r0:ctsw-p9-c0")
    with pytest.raises(FabricError, match="is a rtsw, not a host"):
        tiny.host_by_name("rtsw-p0-r0")


def test_arc_direction(tiny: Fabric) -> None:
    link = tiny.rack_link(0, 1)
    assert tiny.arc_name(tiny.up(link)) == "rtsw-p0-r0>ctsw-p0-c1"
    assert tiny.arc_name(tiny.down(link)) == "ctsw-p0-c1>rtsw-p0-r0"
    assert tiny.link_kind[link] == RACK
    assert tiny.link_kind[tiny.agg_link(0, 0, 0)] == AGG


def test_tiny_taper_capacity(tiny: Fabric) -> None:
    # each CTSW has 2 racks x 400G down; 1:2 taper over one ATSW link -> 400G
    assert tiny.capacity[tiny.up(tiny.agg_link(0, 0, 0))] == pytest.approx(400.0)
    assert tiny.summary()["agg_taper"] == pytest.approx(2.0)


def test_switch_links(tiny: Fabric) -> None:
    links = tiny.switch_links("ctsw-p0-c1")
    names = sorted(tiny.link_name(int(x)) for x in links)
    assert names == [
        "ctsw-p0-c1:atsw-c1-a0",
        "rtsw-p0-r0:ctsw-p0-c1",
        "rtsw-p0-r1:ctsw-p0-c1",
    ]


specs = st.builds(
    ClosSpec,
    pods=st.integers(1, 3),
    racks_per_pod=st.integers(1, 3),
    hosts_per_rack=st.integers(1, 2),
    nics_per_host=st.integers(1, 3),
    ctsws_per_pod=st.integers(1, 3),
    rack_links=st.integers(1, 2),
    atsws_per_plane=st.integers(1, 2),
    agg_links=st.integers(1, 2),
    taper=st.just(1.0),
)


@settings(max_examples=40, deadline=None)
@given(specs)
def test_graph_matches_clos_structure(spec: ClosSpec) -> None:
    """Every NIC reaches every other NIC; degrees match the Clos description."""
    fabric = build(spec)
    g = nx.MultiDiGraph(fabric.graph())
    assert g.number_of_edges() == fabric.num_arcs
    rtsw = fabric.rtsw_name(0)
    hosts = spec.hosts_per_rack * spec.nics_per_host
    uplinks = spec.ctsws_per_pod * spec.rack_links
    assert g.out_degree(rtsw) == hosts + uplinks
    if spec.pods > 1:
        atsw = fabric.atsw_name(0)
        assert g.out_degree(atsw) == spec.pods * spec.agg_links
    nics = [fabric.nic_name(n) for n in range(fabric.num_nics)]
    reach = nx.descendants(g, nics[0])
    assert set(nics[1:]) <= reach
    # link ends are consistent with arc ends
    src, dst = fabric.arc_ends
    lo, hi = fabric.link_ends
    assert np.array_equal(src[0::2], lo) and np.array_equal(dst[1::2], lo)
    assert np.array_equal(dst[0::2], hi)


def test_names_unique_on_parallel_links() -> None:
    fabric = build(ClosSpec(pods=2, racks_per_pod=1, hosts_per_rack=1, nics_per_host=2,
                            ctsws_per_pod=1, rack_links=2, atsws_per_plane=1, agg_links=2,
                            taper=1.0))
    names = [fabric.link_name(link) for link in range(fabric.num_links)]
    assert len(set(names)) == len(names)
    assert "rtsw-p0-r0:ctsw-p0-c0#1" in names


def test_te_entries_per_tier(tiny: Fabric) -> None:
    from dataclasses import replace

    import numpy as np
    import pytest

    from controller.errors import FabricError
    from controller.formats.fabric_file import parse_fabric

    assert tiny.te_entries == (2048, 2048, 2048)  # the default, every tier
    fabric = parse_fabric({"preset": "tiny", "te_entries": {"rtsw": 256, "atsw": None}})
    assert fabric.te_entries == (256, 2048, None)
    budget = fabric.table_budget()
    assert budget[fabric.node_id("rtsw", 0)] == 256 and budget[fabric.node_id("ctsw", 7)] == 2048
    assert np.isinf(budget[fabric.node_id("atsw", 0)]) and np.isinf(budget[0])  # host: none
    assert parse_fabric({"preset": "tiny", "te_entries": None}).te_entries == (None,) * 3
    assert parse_fabric({"preset": "tiny", "te_entries": [1, 2, 3]}).te_entries == (1, 2, 3)
    assert fabric.summary()["atsw_te_entries"] == "unlimited"
    for doc, message in (
        ({"rtsw": -1}, r"te_entries\.rtsw must be an integer >= 0"),
        ({"tor": 5}, "unknown tier.*tor"),
        ("many", "te_entries must be an integer"),
        ([1, 2], "give 3 values"),
    ):
        with pytest.raises(FabricError, match=message):
            parse_fabric({"preset": "tiny", "te_entries": doc}, "f.yaml")
    with pytest.raises(FabricError, match="te_entries.ctsw"):
        replace(tiny, te_entries=(1, 2.5, 3))
