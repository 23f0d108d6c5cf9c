"""Structured candidate paths are exactly the simple paths a graph search finds."""

from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.clos import ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.paths import (
    CROSS_POD,
    SAME_POD,
    SAME_RACK,
    best_bottleneck,
    decode,
    flow_class,
    hop_arc,
    num_paths,
    path_alive,
    path_arcs,
    stranded,
)


def _paths_by_index(fabric: Fabric, src: int, dst: int) -> set[tuple[int, ...]]:
    cls = int(flow_class(fabric, np.array([src]), np.array([dst]))[0])
    count = num_paths(fabric)[cls]
    rows = path_arcs(fabric, np.full(count, src), np.full(count, dst), np.arange(count))
    return {tuple(int(a) for a in row if a >= 0) for row in rows}


def _paths_by_graph(fabric: Fabric, src: int, dst: int) -> set[tuple[int, ...]]:
    g = fabric.graph()
    s, t = fabric.nic_name(src), fabric.nic_name(dst)
    # shortest paths only: valley-free up-down routes in a Clos
    length = nx.shortest_path_length(g, s, t)
    out = set()
    for path in nx.all_simple_edge_paths(g, s, t, cutoff=length):
        if len(path) == length:
            out.add(tuple(key for _, _, key in path))
    return out


def test_paths_equal_graph_shortest_paths() -> None:
    fabric = build(ClosSpec(pods=2, racks_per_pod=2, hosts_per_rack=1, nics_per_host=2,
                            ctsws_per_pod=2, rack_links=2, atsws_per_plane=2, agg_links=2,
                            taper=1.0))
    for src, dst in [(0, 1), (0, 3), (1, 6)]:
        by_index = _paths_by_index(fabric, src, dst)
        assert by_index == _paths_by_graph(fabric, src, dst)
        assert len(by_index) == num_paths(fabric)[
            int(flow_class(fabric, np.array([src]), np.array([dst]))[0])
        ]


def test_flow_classes(tiny: Fabric) -> None:
    cls = flow_class(tiny, np.array([0, 0, 0]), np.array([3, 5, 9]))
    assert cls.tolist() == [SAME_RACK, SAME_POD, CROSS_POD]


def test_path_alive(tiny: Fabric) -> None:
    cap = tiny.capacity.copy()
    rows = path_arcs(tiny, np.array([0, 0]), np.array([5, 5]), np.array([0, 1]))
    cap[tiny.up(tiny.rack_link(0, 0))] = 0
    assert path_alive(rows, cap).tolist() == [False, True]


def test_hop_arc_is_the_column_of_path_arcs() -> None:
    fabric = build(ClosSpec(pods=2, racks_per_pod=2, hosts_per_rack=1, nics_per_host=2,
                            ctsws_per_pod=2, rack_links=2, atsws_per_plane=2, agg_links=2,
                            taper=1.0))  # fmt: skip
    for src, dst, cls, hops in [(0, 3, SAME_POD, 4), (1, 6, CROSS_POD, 6)]:
        count = num_paths(fabric)[cls]
        s, d, index = np.full(count, src), np.full(count, dst), np.arange(count)
        rows = path_arcs(fabric, s, d, index)
        digits = decode(fabric, np.full(count, cls), index)
        for pos in range(hops):
            assert hop_arc(fabric, cls, s, d, digits, pos).tolist() == rows[:, pos].tolist()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2),
       st.integers(1, 2), st.integers(0, 2**31), st.floats(0.0, 0.9))
def test_best_bottleneck_is_the_best_path_s_smallest_capacity(
    pods: int, racks: int, ctsws: int, atsws: int, links: int, seed: int, dead: float
) -> None:
    """Against every candidate path enumerated: the largest over paths of the smallest arc
    capacity, 0 exactly when no path is alive (links down at random, some degraded)."""
    agg = max(atsws, 1) if pods > 1 else atsws
    fabric = build(ClosSpec(name="t", pods=pods, racks_per_pod=racks, hosts_per_rack=1,
                            nics_per_host=2, ctsws_per_pod=ctsws, rack_links=links,
                            atsws_per_plane=agg, agg_links=links,
                            taper=2.0 if agg else None))  # fmt: skip
    rng = np.random.default_rng(seed)
    factor = np.where(rng.random(fabric.num_links) < dead, 0.0,
                      rng.choice([1.0, 0.5, 0.25], fabric.num_links))  # fmt: skip
    cap = LinkHealth(factor).arc_capacity(fabric)
    nics = fabric.num_nics
    src, dst = np.divmod(np.arange(nics * nics), nics)
    src, dst = src[src // 2 != dst // 2], dst[src // 2 != dst // 2]  # NICs of other hosts
    got = best_bottleneck(fabric, cap, src, dst)
    counts = np.array(num_paths(fabric))[flow_class(fabric, src, dst)]
    for f in range(src.size):
        rows = path_arcs(fabric, np.full(counts[f], src[f]), np.full(counts[f], dst[f]),
                         np.arange(counts[f]))  # fmt: skip
        low = np.where(rows >= 0, cap[np.maximum(rows, 0)], np.inf).min(axis=1)
        assert got[f] == low.max()
        assert (got[f] > 0) == path_alive(rows, cap).any()
    # the shortcut for many flows and few failures looks only near a dead arc: the same
    assert np.array_equal(stranded(fabric, cap, src, dst), got <= 0)
