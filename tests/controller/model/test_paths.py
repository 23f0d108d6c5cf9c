"""Structured candidate paths are exactly the simple paths a graph search finds."""

from __future__ import annotations

import networkx as nx
import numpy as np

from controller.model.clos import ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.paths import (
    CROSS_POD,
    SAME_POD,
    SAME_RACK,
    decode,
    flow_class,
    hop_arc,
    num_paths,
    path_alive,
    path_arcs,
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
