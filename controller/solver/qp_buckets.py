"""QP-bucket splitting: spread the flows of overloaded links over their queue pairs.

A RoCE flow runs over several queue pairs (QPs) and the source RTSW can tell them apart by
UDP source port, so a TE entry keyed <ingress port, destination host, QP bucket> sends one
bucket of a flow one way and the rest another (see controller.routes.entries). One path per flow
cannot beat hashing once a failure takes a rack below 1:1: 16 line-rate flows on 15 alive
uplinks put two flows on one link (MLU 2, both at half rate), while E-ECMP's hashed QPs
average out. Splitting only the flows on overloaded links into `qps` equal buckets, each
placed like a flow, reaches the bound at bucket granularity (MLU 18/16 for 16 buckets on 15
links) and keeps every other flow on one path with one entry.

Where overloads are everywhere (a tight mix of unequal flows, which one path per flow
cannot pack), `spray` splits every flow that leaves its rack and sends bucket q of flow f to
plane (q + f) mod C, with the ATSW and parallel members chosen from the destination host.
Every uplink and downlink then carries an equal share of each rack's traffic, so in a
healthy fabric the MLU equals the largest access, rack or pod cut bound; buckets whose
sprayed path is dead are placed like flows. It costs up to one RTSW entry per bucket, so
with a table budget only as many flows per source RTSW are sprayed as its table affords
(largest first); the rest are placed whole around the buckets, and flows whose RTSW cannot
hold even one entry each are left to ECMP (their hashed QPs counted as evenly spread load).

Both work on plain arrays: flows and paths in, flows (with `qp` set on the split ones),
paths and the parent flow of every row out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.errors import InputError
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import ACCESS, Fabric
from controller.model.flows import ALL_QPS, FlowSet, distinct
from controller.model.paths import SAME_RACK, path_alive, path_index
from controller.model.rates import REL_TOL
from controller.routes.entries import align_entries
from controller.solver.greedy import (
    SEARCH_TRIES,
    greedy,
    greedy_batched_arcs,
    local_search,
    utilisation,
)
from controller.solver.problem import Problem

DEFAULT_QPS = 16  # queue pairs per flow, as the E-ECMP baseline opens


@dataclass(frozen=True)
class Split:
    """Flows after splitting: row i is flow `parent[i]` of the input, whole (qp ALL_QPS) or
    one QP bucket of it (demand / qps)."""

    flows: FlowSet
    path: np.ndarray = field(repr=False)
    parent: np.ndarray = field(repr=False)  # int64 [rows] -> input flow index
    split: np.ndarray = field(repr=False)  # input flow indices that were split
    # input flows left to ECMP because their source RTSW cannot hold even one entry each
    ecmp: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)


def split_flows(flows: FlowSet, which: np.ndarray, qps: int) -> tuple[FlowSet, np.ndarray]:
    """Replace flows `which` by `qps` buckets each (demand / qps, qp 0..qps-1), in input
    order; returns (flows, parent index of every row)."""
    if qps < 2:
        raise InputError(f"qps must be >= 2 to split, got {qps}")
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


def _overloaded(problem: Problem, path: np.ndarray) -> np.ndarray:
    """Whole, routed flows on a switch-to-switch arc loaded beyond its capacity, with every
    other whole flow of the same (source NIC, destination host): they share the source
    RTSW's entry key, so they split together."""
    fabric, flows, cand = problem.fabric, problem.flows, problem.candidates
    util = utilisation(fabric, problem.health, Assignment(flows, path))
    core = np.repeat(fabric.link_kind != ACCESS, 2)
    hot = np.flatnonzero(core & (util > 1.0 + REL_TOL))
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


def _fold(
    flows: FlowSet, new: FlowSet, path: np.ndarray, parent: np.ndarray
) -> tuple[FlowSet, np.ndarray, np.ndarray]:
    """Fold every flow whose buckets all took one path back into one whole row."""
    keep = _merge_whole(new, path, parent)
    folded = np.flatnonzero(~keep)
    if not folded.size:
        return new, path, parent
    head = np.flatnonzero(keep & (new.qp != ALL_QPS))
    whole_again = head[np.isin(parent[head], parent[folded])]
    qp = new.qp.copy()
    qp[whole_again] = ALL_QPS
    demand = new.demand.copy()
    demand[whole_again] = flows.demand[parent[whole_again]]
    out = FlowSet(new.src_nic, new.dst_nic, demand, new.job, new.job_ids, qp)
    rows = np.flatnonzero(keep)
    return out.take(rows), path[rows], parent[rows]


def _place_dead(problem: Problem, path: np.ndarray, search_tries: int | None) -> np.ndarray:
    """Re-place the rows whose path has a dead arc around all the others."""
    if not problem.any_dead:
        return path
    dead = ~path_alive(Assignment(problem.flows, path).arcs(problem.fabric), problem.arc_capacity)
    if not dead.any():
        return path
    fixed = np.where(dead, UNROUTED, path)
    path = greedy(problem, fixed=fixed)
    return local_search(problem, path, movable=dead, max_tries=search_tries)


def _affordable(
    fabric: Fabric,
    flows: FlowSet,
    which: np.ndarray,
    qps: int,
    budget: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(flows of `which` to spray, flows to leave to ECMP) so that every source RTSW stays
    within `budget`. Each (NIC, destination host) key of an RTSW costs one entry whole, a
    sprayed flow one more per bucket off the folded next hop: qps - ceil(qps / min(qps,
    C*K)). Keys are ranked by their largest flow (ties by first flow); those beyond the
    budget go to ECMP, then the largest remaining flows are sprayed while the table has
    room."""
    hops = min(qps, fabric.ctsws_per_pod * fabric.rack_links)
    extra = qps - -(-qps // hops)
    rtsw = fabric.rtsw_of_nic(flows.src_nic)
    unit = flows.src_nic * np.int64(fabric.num_hosts) + flows.dst_host(fabric)
    limit = budget[fabric.node_id("rtsw", 0) + np.arange(fabric.num_rtsws)]
    order = which[np.lexsort((which, -flows.demand[which], rtsw[which]))]
    r = rtsw[order]
    # rank of each key within its RTSW, by the position of its first (largest) flow
    keys, first = np.unique(unit[order], return_index=True)
    lead = np.zeros(order.size, bool)
    lead[first] = True
    before = np.cumsum(lead) - lead  # keys starting strictly before each position
    start = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    seg = np.repeat(start, np.diff(np.r_[start, r.size]))
    key_rank = (before - before[seg])[first[np.searchsorted(keys, unit[order])]]
    over = key_rank >= limit[r]
    ecmp = np.sort(order[over])
    keep = order[~over]
    units = np.bincount(r[~over & lead], minlength=fabric.num_rtsws)
    room = limit - units
    most = np.floor(np.maximum(room, 0) / extra) if extra > 0 else np.full(room.size, np.inf)
    rk = rtsw[keep]
    kstart = np.flatnonzero(np.r_[True, rk[1:] != rk[:-1]])
    rank = np.arange(keep.size) - np.repeat(kstart, np.diff(np.r_[kstart, keep.size]))
    return np.sort(keep[rank < most[rk]]), ecmp


def spray(
    problem: Problem,
    *,
    qps: int = DEFAULT_QPS,
    search_tries: int | None = SEARCH_TRIES,
    budget: np.ndarray | None = None,
) -> Split | None:
    """Split every whole flow of the problem that leaves its rack into `qps` buckets spread
    evenly over
    the planes (see the module docstring); None if no flow leaves its rack.

    With a per-node entry `budget` (controller.routes.budget.switch_budget), only as many
    flows per source RTSW as its table affords are sprayed (the largest first); the others
    are placed whole around the buckets (greedy), then local search moves whole flows and
    buckets off the hottest links (up to `search_tries` flows tried, see
    controller.solver.greedy.local_search). A flow's buckets depend on the flow (its NICs), not on
    its index, so an unchanged flow sprays the same way in the next solve."""
    fabric, flows, flow_cls = problem.fabric, problem.flows, problem.cls
    which = np.flatnonzero((flows.qp == ALL_QPS) & (flow_cls != SAME_RACK))
    ecmp = np.zeros(0, np.int64)
    if budget is not None:
        which, ecmp = _affordable(fabric, flows, which, qps, budget)
        # flows left to ECMP are sprayed too, for their load only: their hashed QPs spread
        # evenly, and the flows TE places must make room for them
        which = np.union1d(which, ecmp)
    if not which.size:
        return None
    new, parent = split_flows(flows, which, qps)
    rows = problem.rows(new, parent)  # a bucket's class, racks and candidates are its flow's
    hashed = np.isin(parent, ecmp)
    cls = rows.cls
    c_, k, a, m = (
        fabric.ctsws_per_pod, fabric.rack_links, max(fabric.atsws_per_plane, 1),
        fabric.agg_links,
    )  # fmt: skip
    turn = np.maximum(new.qp, 0) + new.src_nic + new.dst_nic
    c = turn % c_
    dst = new.dst_host(fabric)
    src_rack = rows.src_rack
    # what follows the uplink depends on (source rack, destination host, plane) only, so
    # flows that meet at a CTSW or ATSW entry agree by construction
    digits = {
        "c": c,
        "ku": (turn // c_) % k,
        "j": (dst + src_rack + c) % a,
        "mu": (dst // a + c) % m,
        "md": (dst // a + c) % m,
        "kd": (dst + c) % k,
    }
    sprayed = np.where(cls == SAME_RACK, 0, path_index(fabric, cls, digits))
    is_bucket = new.qp != ALL_QPS
    whole = ~is_bucket & (cls != SAME_RACK)
    if budget is not None and whole.any():
        # the flows kept whole are placed afresh around the sprayed buckets
        fixed = np.where(whole, UNROUTED, sprayed)
        if problem.any_dead:
            buckets = np.flatnonzero(is_bucket)
            fixed[is_bucket] = _place_dead(rows.take(buckets), sprayed[is_bucket], search_tries)
        sprayed, chosen = greedy_batched_arcs(rows, fixed=fixed)
        sprayed = local_search(rows, sprayed, movable=(cls != SAME_RACK) & ~hashed,
                               max_tries=search_tries, chosen=chosen)  # fmt: skip
    else:
        sprayed = _place_dead(rows, sprayed, search_tries)
    sprayed = np.where(hashed, UNROUTED, sprayed)
    sprayed = align_entries(fabric, new, sprayed, is_bucket.astype(np.float64))
    new, sprayed, parent = _fold(flows, new, sprayed, parent)
    split = distinct(parent[(new.qp != ALL_QPS) & ~np.isin(parent, ecmp)])
    return Split(new, sprayed, parent, split, ecmp)


def split_overloaded(
    problem: Problem,
    path: np.ndarray,
    *,
    qps: int = DEFAULT_QPS,
    search_tries: int | None = SEARCH_TRIES,
) -> Split | None:
    """Split the problem's whole flows on overloaded links into `qps` buckets and re-place
    the buckets
    (local search of up to `search_tries` flows tried, then entry alignment); buckets that
    all end on one path fold back into the whole flow. None when no link is overloaded or
    splitting does not lower the MLU."""
    fabric, health, flows = problem.fabric, problem.health, problem.flows
    which = _overloaded(problem, path)
    if not which.size:
        return None
    new, parent = split_flows(flows, which, qps)
    new_path = path[parent]
    movable = new.qp != ALL_QPS
    new_path = local_search(problem.rows(new, parent), new_path, movable=movable,
                            max_tries=search_tries)  # fmt: skip
    new_path = align_entries(fabric, new, new_path, movable.astype(np.float64))
    new, new_path, parent = _fold(flows, new, new_path, parent)
    before = float(utilisation(fabric, health, Assignment(flows, path)).max(initial=0.0))
    after = float(utilisation(fabric, health, Assignment(new, new_path)).max(initial=0.0))
    if not after < before - REL_TOL or (new_path == UNROUTED).sum() > (path == UNROUTED).sum():
        return None
    split = distinct(parent[new.qp != ALL_QPS])
    return Split(new, new_path, parent, split)
