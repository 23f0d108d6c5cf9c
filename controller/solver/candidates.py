"""Candidate paths as arrays: the switch-to-switch arcs of every candidate path of every flow.

The structured numbering of controller.model.paths is affine in its digits, so a flow's
candidate arcs are `base[flow] + offset[class][path]`: the base depends on the flow's racks
and pods, the offsets on the fabric only. The tables are what the greedy, the local search,
the relief pass and the repair score paths from (and, stacked, what the compiled kernels
take).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.paths import CROSS_POD, SAME_POD, SAME_RACK, decode, flow_class, num_paths
from controller.solver.kernels import Cand, chosen_arcs


@dataclass(frozen=True)
class Candidates:
    """Switch-to-switch arcs of every candidate path: arc = base[f, h] + offset[cls][p, h].

    Same-pod paths have 2 core hops, cross-pod 4; same-rack flows have none.
    """

    cls: np.ndarray  # int8 [F]
    base: np.ndarray  # int64 [F, 4]
    offset: dict[int, np.ndarray]  # class -> int64 [P, hops]

    def arcs(self, f: int) -> np.ndarray:
        """Core arcs [P, hops] of every candidate of flow f (empty for same rack)."""
        off = self.offset[int(self.cls[f])]
        return self.base[f, : off.shape[1]] + off

    def take(self, rows: np.ndarray) -> Candidates:
        """The candidates of flows `rows` (as of FlowSet.take(rows))."""
        return Candidates(self.cls[rows], self.base[rows], self.offset)

    def all_chosen(self, path: np.ndarray) -> np.ndarray:
        """Core arcs [F, 4] of the given paths, -1 padded (and for UNROUTED), from every
        class's offsets stacked (kernels.chosen_arcs)."""
        return chosen_arcs(np.array(path, np.int64), self.kernel_args)  # (one kernel type)

    @cached_property
    def kernel_args(self) -> Cand:
        """(cls, base, table, first, n_paths, hops), as the kernels take them: every class's
        offsets in one table [paths, 4] (-1 padded), class c's at rows first[c] ..
        first[c] + n_paths[c], hops[c] hops."""
        classes = sorted(self.offset)
        width = self.base.shape[1]
        table = np.full((sum(self.offset[c].shape[0] for c in classes), width), -1, np.int64)
        first = np.zeros(max(classes) + 1, np.int64)
        n_paths = np.zeros(max(classes) + 1, np.int64)
        hops = np.zeros(max(classes) + 1, np.int64)
        at = 0
        for c in classes:
            off = self.offset[c]
            first[c], n_paths[c], hops[c] = at, off.shape[0], off.shape[1]
            table[at : at + off.shape[0], : off.shape[1]] = off
            at += off.shape[0]
        return self.cls, self.base, table, first, n_paths, hops


def candidates(fabric: Fabric, flows: FlowSet) -> Candidates:
    """The candidate-path tables of `flows` (see Candidates)."""
    return candidate_tables(
        fabric,
        flow_class(fabric, flows.src_nic, flows.dst_nic),
        fabric.rtsw_of_nic(flows.src_nic),
        fabric.rtsw_of_nic(flows.dst_nic),
    )


def candidate_tables(
    fabric: Fabric, cls: np.ndarray, src_rack: np.ndarray, dst_rack: np.ndarray
) -> Candidates:
    """The candidate-path tables of flows of classes `cls` (controller.model.paths) from
    racks `src_rack` to racks `dst_rack`: all a flow's candidates depend on."""
    sr, dr = src_rack, dst_rack
    base = np.zeros((cls.size, 4), np.int64)
    up_rack = fabric.up(fabric.rack_link(sr, 0, 0))
    down_rack = fabric.down(fabric.rack_link(dr, 0, 0))
    pod = cls == SAME_POD
    base[pod, 0], base[pod, 1] = up_rack[pod], down_rack[pod]
    cross = cls == CROSS_POD
    if fabric.atsws_per_plane:
        sp, dp = fabric.pod_of_rtsw(sr), fabric.pod_of_rtsw(dr)
        base[cross, 0] = up_rack[cross]
        base[cross, 1] = fabric.up(fabric.agg_link(sp, 0, 0, 0))[cross]
        base[cross, 2] = fabric.down(fabric.agg_link(dp, 0, 0, 0))[cross]
        base[cross, 3] = down_rack[cross]
    _, n_pod, n_cross = num_paths(fabric)
    k, a, m = fabric.rack_links, fabric.atsws_per_plane, fabric.agg_links
    d = decode(fabric, np.full(n_pod, SAME_POD), np.arange(n_pod))
    offset = {
        SAME_RACK: np.zeros((1, 0), np.int64),
        SAME_POD: np.stack([2 * (d["c"] * k + d["ku"]), 2 * (d["c"] * k + d["kd"])], axis=1),
    }
    if a:
        d = decode(fabric, np.full(n_cross, CROSS_POD), np.arange(n_cross))
        offset[CROSS_POD] = np.stack(
            [
                2 * (d["c"] * k + d["ku"]),
                2 * ((d["c"] * a + d["j"]) * m + d["mu"]),
                2 * ((d["c"] * a + d["j"]) * m + d["md"]),
                2 * (d["c"] * k + d["kd"]),
            ],
            axis=1,
        )
    return Candidates(cls, base, offset)
