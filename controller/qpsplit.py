"""QP-bucket splitting: spread the flows of overloaded links over their queue pairs.

A RoCE flow runs over several queue pairs (QPs) and the source RTSW can tell them apart by
UDP source port, so a TE entry keyed <ingress port, destination host, QP bucket> sends one
bucket of a flow one way and the rest another (see controller.routes). One path per flow
cannot beat hashing once a failure takes a rack below 1:1: 16 line-rate flows on 15 alive
uplinks put two flows on one link (MLU 2, both at half rate), while E-ECMP's hashed QPs
average out. Splitting only the flows on overloaded links into `qps` equal buckets, each
placed like a flow, reaches the bound at bucket granularity (MLU 18/16 for 16 buckets on 15
links) and keeps every other flow on one path with one entry.

`split_overloaded` works on plain arrays: flows and paths in, flows (with `qp` set on the
split ones), paths and the parent flow of every row out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from controller.assign import (
    Candidates,
    align_entries,
    candidates,
    local_search,
    utilisation,
)
from controller.assignment import UNROUTED, Assignment
from controller.fabric import ACCESS, Fabric
from controller.flows import ALL_QPS, FlowSet
from controller.health import LinkHealth
from controller.paths import SAME_RACK

_TOL = 1e-9
DEFAULT_QPS = 16  # queue pairs per flow, as the E-ECMP baseline opens


@dataclass(frozen=True)
class Split:
    """Flows after splitting: row i is flow `parent[i]` of the input, whole (qp ALL_QPS) or
    one QP bucket of it (demand / qps)."""

    flows: FlowSet
    path: np.ndarray = field(repr=False)
    parent: np.ndarray = field(repr=False)  # int64 [rows] -> input flow index
    split: np.ndarray = field(repr=False)  # input flow indices that were split


def split_flows(flows: FlowSet, which: np.ndarray, qps: int) -> tuple[FlowSet, np.ndarray]:
    """Replace flows `which` by `qps` buckets each (demand / qps, qp 0..qps-1), in input
    order; returns (flows, parent index of every row)."""
    if qps < 2:
        raise ValueError(f"qps must be >= 2 to split, got {qps}")
    count = np.ones(len(flows), np.int64)
    count[which] = qps
    parent = np.repeat(np.arange(len(flows), dtype=np.int64), count)
    first = np.cumsum(count) - count
    rank = np.arange(parent.size) - first[parent]
    is_split = count[parent] > 1
    out = flows.take(parent)
    qp = np.where(is_split, rank, out.qp)
    demand = np.where(is_split, out.demand / qps, out.demand)
    return FlowSet(out.src_nic, out.dst_nic, demand, out.job, out.job_ids, qp), parent


def _overloaded(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, path: np.ndarray, cand: Candidates
) -> np.ndarray:
    """Whole, routed flows on a switch-to-switch arc loaded beyond its capacity, with every
    other whole flow of the same (source NIC, destination host): they share the source
    RTSW's entry key, so they split together."""
    util = utilisation(fabric, health, Assignment(flows, path))
    core = np.repeat(fabric.link_kind != ACCESS, 2)
    hot = np.flatnonzero(core & (util > 1.0 + _TOL))
    if not hot.size:
        return np.zeros(0, np.int64)
    whole = (flows.qp == ALL_QPS) & (path >= 0) & (cand.cls != SAME_RACK)
    on_hot = np.isin(cand.all_chosen(path), hot).any(axis=1) & whole
    pair = flows.src_nic * np.int64(fabric.num_hosts) + flows.dst_host(fabric)
    return np.flatnonzero(whole & np.isin(pair, pair[on_hot]))


def _merge_whole(flows: FlowSet, path: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Rows to keep after folding back the flows whose buckets all took one path."""
    keep = np.ones(parent.size, bool)
    split = flows.qp != ALL_QPS
    if not split.any():
        return keep
    p = parent[split]
    rows = np.flatnonzero(split)
    first = np.r_[True, p[1:] != p[:-1]]
    start = np.flatnonzero(first)
    same = np.minimum.reduceat(path[rows], start) == np.maximum.reduceat(path[rows], start)
    one_path = np.repeat(same, np.diff(np.r_[start, p.size]))
    keep[rows[one_path & ~first]] = False
    return keep


def split_overloaded(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    path: np.ndarray,
    *,
    qps: int = DEFAULT_QPS,
    time_budget: float | None = 2.0,
) -> Split | None:
    """Split the whole flows on overloaded links into `qps` buckets and re-place the buckets
    (local search, then entry alignment); buckets that all end on one path fold back into
    the whole flow. None when no link is overloaded or splitting does not lower the MLU."""
    start = time.perf_counter()
    cand = candidates(fabric, flows)
    which = _overloaded(fabric, health, flows, path, cand)
    if not which.size:
        return None
    new, parent = split_flows(flows, which, qps)
    new_path = path[parent]
    movable = new.qp != ALL_QPS
    new_cand = candidates(fabric, new)
    left = None if time_budget is None else max(time_budget - (time.perf_counter() - start), 0)
    new_path = local_search(
        fabric, health, new, new_path, movable=movable, time_budget=left, cand=new_cand
    )
    new_path = align_entries(fabric, new, new_path, movable.astype(np.float64))
    keep = _merge_whole(new, new_path, parent)
    folded = np.flatnonzero(~keep)
    if folded.size:
        # a flow whose buckets all stayed on one path is whole again
        head = np.flatnonzero(keep & (new.qp != ALL_QPS))
        whole_again = np.isin(parent[head], parent[folded])
        qp = new.qp.copy()
        qp[head[whole_again]] = ALL_QPS
        demand = new.demand.copy()
        demand[head[whole_again]] = flows.demand[parent[head[whole_again]]]
        new = FlowSet(new.src_nic, new.dst_nic, demand, new.job, new.job_ids, qp).take(
            np.flatnonzero(keep)
        )
        new_path, parent = new_path[keep], parent[keep]
    before = float(utilisation(fabric, health, Assignment(flows, path)).max(initial=0.0))
    after = float(utilisation(fabric, health, Assignment(new, new_path)).max(initial=0.0))
    if not after < before - _TOL or (new_path == UNROUTED).sum() > (path == UNROUTED).sum():
        return None
    split = np.unique(parent[new.qp != ALL_QPS])
    return Split(new, new_path, parent, split)
