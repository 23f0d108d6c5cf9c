"""An assignment: one candidate path (by structured index) per flow, or none.

`path[f] == UNROUTED` means flow f has no TE path: either nothing healthy is left for it or
a switch table was full; such traffic stays on the BGP/ECMP defaults underneath.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.model.fabric import Fabric
from controller.model.flows import FlowSet, pair_keys
from controller.model.paths import path_arcs

UNROUTED = -1


@dataclass(frozen=True)
class Assignment:
    """Flows and the path index chosen for each (see controller.model.paths for the numbering)."""

    flows: FlowSet
    path: np.ndarray = field(repr=False)  # int64 [F]

    def __post_init__(self) -> None:
        if self.path.shape != (len(self.flows),):
            raise ValueError(f"path has shape {self.path.shape}, expected ({len(self.flows)},)")
        self.path.setflags(write=False)

    @property
    def routed(self) -> np.ndarray:
        return self.path != UNROUTED

    def arcs(self, fabric: Fabric) -> np.ndarray:
        """Arc ids [F, MAX_HOPS] of every routed flow; unrouted rows are all -1."""
        out = path_arcs(
            fabric, self.flows.src_nic, self.flows.dst_nic, np.maximum(self.path, 0)
        )
        out[~self.routed] = -1
        return out

    def link_load(self, fabric: Fabric) -> np.ndarray:
        """Gbps carried by each arc (routed flows only)."""
        arcs = self.arcs(fabric)
        weights = np.repeat(self.flows.demand, arcs.shape[1])
        flat = arcs.reshape(-1)
        keep = flat >= 0
        return np.bincount(flat[keep], weights=weights[keep], minlength=fabric.num_arcs)


def _triples(a: Assignment, pair: np.ndarray) -> np.ndarray:
    """(pair, qp, path) of every row as sorted rows [n, 3]; `pair` from pair_keys."""
    rows = np.stack([pair, a.flows.qp, a.path], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def moved_pairs(previous: Assignment, current: Assignment) -> np.ndarray:
    """(src NIC, dst NIC) pairs, as keys of controller.model.flows.pair_keys, routed in
    both assignments whose rows differ: another path, or other QP buckets on other paths."""
    old_pair, new_pair = pair_keys(previous.flows, current.flows)
    old, new = _triples(previous, old_pair), _triples(current, new_pair)
    both = np.intersect1d(old[:, 0], new[:, 0])
    if not both.size:  # no pair routed in both: none moved (and no group to start)
        return both

    def signature(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = rows[np.isin(rows[:, 0], both)]
        start = np.flatnonzero(np.r_[True, rows[1:, 0] != rows[:-1, 0]])
        return rows, start

    o, o_start = signature(old)
    n, n_start = signature(new)
    o_len, n_len = np.diff(np.r_[o_start, len(o)]), np.diff(np.r_[n_start, len(n)])
    differ = o_len != n_len
    same_len = np.flatnonzero(~differ)
    if same_len.size:
        # pairs with as many rows on both sides: compare them row by row
        lens = o_len[same_len]
        o_rows = np.repeat(same_len, lens)
        within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        o_idx = np.repeat(o_start[same_len], lens) + within
        n_idx = np.repeat(n_start[same_len], lens) + within
        bad = (o[o_idx, 1:] != n[n_idx, 1:]).any(axis=1)
        differ[np.unique(o_rows[bad])] = True
    return both[differ]
