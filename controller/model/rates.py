"""Flow-level simulation: max-min fair rates on fixed paths, and the metrics of a routing.

Rates are max-min fair with per-flow demand caps, computed by progressive filling. Every
unfrozen flow rises at the same level; link e's fair share is (capacity - frozen rates) /
(unfrozen flows on e), and a flow's ceiling m_f is the smallest share on its path or its
demand. Shares never fall while flows freeze at or below them, so one round may freeze, at
once, every flow whose demand is within its ceiling (at its demand) and every flow on a link
whose share is no more than the ceiling of each flow through it (a local bottleneck, at m_f).
The link with the globally smallest share is always such a bottleneck, so this reaches the
same allocation as classic water-filling, in as many rounds as the longest chain of
bottleneck dependencies rather than one round per distinct level. Comparisons use a relative
tolerance of 1e-9. A round is one pass over the unfrozen (flow, arc) pairs, compiled
(controller.model.kernels.fill).

Only arcs offered more than their capacity take part, and a flow crossing none gets its
demand at once. The allocation is the same: on an arc whose offered load fits, the rates
(each at most its flow's demand) sum to no more than its capacity, so it is saturated only
when every flow on it is at its demand, and so it is never the bottleneck that holds a flow
below its demand; the allocation of the reduced problem therefore meets the bottleneck
condition of the whole one, whose max-min allocation is unique. (Numerically the rounds
differ, so rates may differ in the last bits from filling over every arc.) Subflows that
then cross the same arcs with the same per-QP demand get the same rate, so they are filled
as one group, their QPs summed (controller.model.kernels.hot_groups): on a hashed meta-24k
mix (16 QPs) two subflows in five cross no over-capacity arc and the rest keep half their
arcs; a hashed all-to-all's millions of subflows become a few groups per such arc.

The unit of fair sharing is the queue pair: congestion control runs per QP, so a row that
stands for w QPs on one path (`weight`, a whole flow the NIC opens with w QPs) competes as w
equal subflows, and gets w times the per-QP level. That is the same as expanding it into w
rows, at the cost of one.

`simulate` adds the report: offered-load MLU, links over capacity (switch-to-switch arcs whose
offered load exceeds capacity), collisions (switch-to-switch arcs carrying more than one
distinct parent flow: a flow sprayed in QP buckets shares many links without overloading
any, so this counts sharing, not harm), worst flow share of its demand, and per-job bus-bandwidth
fraction (a collective step ends when its slowest flow ends; a job with a flow that has no
alive path at all, its NIC's link down or its rack cut off, is stalled: 0 under any routing).
How a flow's rows make its rate is the `model`:

- `striped` (default): the NIC stripes each message evenly over the flow's QPs, so it
  finishes when its slowest QP does: rate = (QPs of the flow) x (its slowest QP's rate).
- `summed`: the rates of the flow's rows add up (every row is one competitor, whatever
  its weight); flatters any split routing, hashed or not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from controller.model import kernels
from controller.model.assignment import Assignment
from controller.model.fabric import TIER_NAMES, Fabric
from controller.model.flows import FlowSet
from controller.model.hashing import NO_TABLES, Hashed, read_only
from controller.model.health import LinkHealth
from controller.model.paths import flow_class, num_paths, stranded

REL_TOL = 1e-9
MODELS = ("striped", "summed")


def max_min_rates(
    arcs: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray,
    rel_tol: float = REL_TOL,
    weight: np.ndarray | None = None,
    load: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rate of every flow on its fixed path (arc ids [F, H], -1 padded); a
    flow of `weight` w competes as w equal subflows on its path (default 1). `load`: the
    offered load per arc, if at hand (it only decides which arcs can bind: an arc offered
    no more than its capacity never does)."""
    rates, _, _ = _max_min(arcs, capacity, demand, rel_tol, weight, load=load)
    return rates


def _max_min(
    arcs: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray,
    rel_tol: float,
    weight: np.ndarray | None = None,
    hashed: _Walked | None = None,
    load: np.ndarray | None = None,
) -> tuple[np.ndarray, int, _Groups]:
    """Progressive filling over per-subflow levels; returns (rates, rounds, the groups the
    hashed QPs' levels are read from: `_hashed_parents`). `load`: the offered load as
    `offered_load` sums it, if at hand."""
    arcs = np.asarray(arcs, dtype=np.int64)
    if arcs.ndim == 1:
        arcs = arcs[:, None]
    demand = np.asarray(demand, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    num_flows = arcs.shape[0]
    if arcs.ndim != 2 or demand.shape != (num_flows,):
        raise ValueError(f"arcs {arcs.shape} and demand {demand.shape} do not match")
    w = np.ones(num_flows) if weight is None else np.asarray(weight, dtype=np.float64)
    if w.shape != (num_flows,) or (w <= 0).any():
        raise ValueError(f"weight must be {num_flows} positive numbers")
    if arcs.size and (arcs.max() >= capacity.size or arcs.min() < -1):
        raise ValueError(f"arc ids must be -1 (padding) or in [0, {capacity.size})")
    arcs = np.ascontiguousarray(arcs)
    capacity = np.ascontiguousarray(capacity)
    demand = np.ascontiguousarray(demand)
    w = np.ascontiguousarray(w)
    # the reduced problem (module docstring), equal subflows grouped; each arc's load summed
    # row by row, then over the hashed QPs in turn, as if they were rows after the others
    if load is None:
        load = _row_load(arcs, demand, capacity.size)
        if hashed is not None:
            load = hashed.onto(load)
    over = load > np.maximum(capacity, 0.0)
    gid = np.empty(num_flows, np.int64)
    src, dst, p_demand, seed, qps, alive, shape, weighted, tables = (
        _NO_WALK if hashed is None else hashed.args)
    qp_gid = np.empty(src.size * qps, np.int32)  # 4 bytes a hashed QP
    groups, g_arcs, g_dm, g_w, table = kernels.hot_groups(
        arcs, demand, w, over, src, dst, p_demand, seed, qps, alive, shape, weighted, tables,
        gid, qp_gid)  # fmt: skip
    g_rates = np.empty(groups)
    rounds = kernels.fill(g_arcs[:groups], capacity, g_dm[:groups] * g_w[:groups],
                          g_w[:groups], 1.0 + rel_tol, g_rates)  # fmt: skip
    routed = (arcs >= 0).any(axis=1) & (demand > 0)
    rates = np.where(routed, demand, 0.0)  # those crossing no over-capacity arc
    grouped = gid >= 0
    g = gid[grouped]
    rates[grouped] = g_rates[g] / g_w[g] * w[grouped]
    return rates, rounds, _Groups(qp_gid, g_rates / g_w[:groups], g_arcs[:groups])


def row_groups(
    arcs: np.ndarray, demand: np.ndarray, weight: np.ndarray, over: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reduced problem's groups of rows alone (module docstring; kernels.hot_groups):
    (each row's group, -1 for none; groups; their over-capacity arcs, -1 padded; per-QP
    demand; weight; the lookup table kernels.regroup updates them with)."""
    gid = np.empty(arcs.shape[0], np.int64)
    qp_gid = np.empty(0, np.int32)
    src, dst, p_demand, seed, qps, alive, shape, weighted, tables = _NO_WALK
    groups, g_arcs, g_dm, g_w, table = kernels.hot_groups(
        arcs, demand, weight, over, src, dst, p_demand, seed, qps, alive, shape, weighted,
        tables, gid, qp_gid)  # fmt: skip
    return gid, groups, g_arcs, g_dm, g_w, table


def _row_load(arcs: np.ndarray, demand: np.ndarray, num_arcs: int) -> np.ndarray:
    """Offered load per arc, each arc's sum taken row by row."""
    valid = arcs >= 0
    return np.bincount(arcs[valid], weights=np.repeat(demand, arcs.shape[1])[valid.ravel()],
                       minlength=num_arcs)  # fmt: skip


@dataclass(frozen=True)
class _Groups:
    """What the hashed QPs' rates are read from: each QP's group (kernels.hot_groups'
    qp_gid), each group's rate per QP and its over-capacity arcs (-1 padded)."""

    qp_gid: np.ndarray
    level: np.ndarray
    arcs: np.ndarray

    def crossing(self, qps: int, mask: np.ndarray) -> np.ndarray:
        """Which hashed flows have a QP on an arc of `mask` (a subset of the arcs offered
        more than their capacity): those with a QP in a group keyed by such an arc."""
        keyed = np.asarray((self.arcs >= 0) & mask[np.maximum(self.arcs, 0)], np.bool_)
        keyed = np.ascontiguousarray(keyed.any(axis=1))
        out = np.zeros(self.qp_gid.size // max(qps, 1), np.bool_)
        kernels.grouped_crossing(self.qp_gid, keyed, qps, out)
        return out


@dataclass(frozen=True)
class _Walked:
    """Hashed flows with their walk under one health, as the kernels take it."""

    hashed: Hashed
    fabric: Fabric
    health: LinkHealth
    args: tuple[Any, ...]  # src, dst, demand, seed, qps, alive, shape, weighted, tables

    @classmethod
    def of(cls, fabric: Fabric, health: LinkHealth, hashed: Hashed) -> _Walked:
        (src, dst, seed, qps, alive, shape), (weighted, tables) = hashed.walk_args(fabric, health)
        demand = read_only(hashed.flows.demand, np.float64)
        return cls(hashed, fabric, health,
                   (src, dst, demand, seed, qps, alive, shape, weighted, tables))  # fmt: skip

    def onto(self, load: np.ndarray) -> np.ndarray:
        return self.hashed.load(self.fabric, self.health, onto=load)


_NO_WALK: tuple[Any, ...] = (
    read_only(np.zeros(0), np.int64), read_only(np.zeros(0), np.int64),
    read_only(np.zeros(0), np.float64), np.uint64(0), 1,
    np.zeros(1, np.bool_), np.zeros(9, np.int64), False, NO_TABLES,
)  # fmt: skip


def _parent_shares(
    arcs: np.ndarray,
    cap: np.ndarray,
    demand: np.ndarray,
    parent: np.ndarray,
    num_parents: int,
    w: np.ndarray,
    model: str,
    hashed: _Walked | None = None,
    load: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, _Groups]:
    """(share, rate, demand, routed, on a dead arc) per parent flow, the rounds taken and
    the groups the fill made.
    `hashed`: whole flows whose QPs follow the rows without being rows (hashing.Hashed),
    each the only part of its parent flow; their on-a-dead-arc flag is not computed."""
    arcs = np.ascontiguousarray(arcs, np.int64)
    cap = np.ascontiguousarray(cap, np.float64)
    rates, rounds, found = _max_min(arcs, cap, demand, REL_TOL,
                                    w if model == "striped" else None, hashed, load)  # fmt: skip
    p_rate, p_demand, p_routed, p_dead = _summed(arcs, cap, demand, rates, w, parent,
                                                 num_parents, model)  # fmt: skip
    if hashed is not None:
        _hashed_parents(hashed, found, model, num_parents, parent, p_rate, p_demand, p_routed)
    share = np.divide(p_rate, p_demand, out=np.ones(num_parents), where=p_demand > 0)
    return share, p_rate, p_demand, p_routed, p_dead, rounds, found


def _summed(
    arcs: np.ndarray,
    cap: np.ndarray,
    demand: np.ndarray,
    rates: np.ndarray,
    w: np.ndarray,
    parent: np.ndarray,
    num_parents: int,
    model: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rate, demand, routed, on a dead arc) per parent flow from its rows' rates."""
    if parent.shape != (arcs.shape[0],) or (
        parent.size and not 0 <= parent.min() <= parent.max() < num_parents
    ):
        raise ValueError(f"parent must give each of {arcs.shape[0]} rows a flow in "
                         f"[0, {num_parents})")  # fmt: skip
    slowest, qps = np.full(num_parents, np.inf), np.zeros(num_parents)
    p_rate, p_demand = np.zeros(num_parents), np.zeros(num_parents)
    p_routed, p_dead = np.zeros(num_parents, bool), np.zeros(num_parents, bool)
    kernels.per_parent(arcs, cap, np.ascontiguousarray(demand, np.float64),
                       np.ascontiguousarray(rates, np.float64),
                       np.ascontiguousarray(w, np.float64),
                       np.ascontiguousarray(parent, np.int64), model == "striped", slowest,
                       qps, p_rate, p_demand, p_routed, p_dead)  # fmt: skip
    return p_rate, p_demand, p_routed, p_dead


def shares_of_rates(
    arcs: np.ndarray,
    cap: np.ndarray,
    demand: np.ndarray,
    rates: np.ndarray,
    weight: np.ndarray,
    parent: np.ndarray,
    *,
    num_parents: int,
    model: str = "striped",
) -> np.ndarray:
    """flow_shares from rows' rates already filled (e.g. controller.model.local_rates):
    rate / demand per parent flow (NaN: not routed), summed as flow_shares sums them."""
    p_rate, p_demand, routed, _ = _summed(np.ascontiguousarray(arcs, np.int64),
                                          np.ascontiguousarray(cap, np.float64), demand,
                                          rates, weight, np.asarray(parent, np.int64),
                                          num_parents, model)  # fmt: skip
    share = np.divide(p_rate, p_demand, out=np.ones(num_parents), where=p_demand > 0)
    return np.where(routed, share, np.nan)


def _hashed_parents(
    walked: _Walked,
    found: _Groups,
    model: str,
    num_parents: int,
    rows_parent: np.ndarray,
    p_rate: np.ndarray,
    p_demand: np.ndarray,
    p_routed: np.ndarray,
) -> None:
    """The hashed flows' parent sums, as kernels.per_parent makes them (to the bit) from a
    row of weight 1 per QP: rate, demand and routed, written at their parent flows."""
    hashed = walked.hashed
    n, qps = len(hashed.flows), hashed.qps
    parent = np.asarray(hashed.parent, np.int64)
    if parent.shape != (n,) or (n and not 0 <= parent.min() <= parent.max() < num_parents):
        raise ValueError(f"hashed flows need a parent flow in [0, {num_parents}) each")
    parts = np.bincount(parent, minlength=num_parents)
    if n and (parts.max() > 1 or parts[rows_parent].any()):
        raise ValueError("a hashed flow must be the only part of its parent flow")
    # each QP's rate as fill gives it: its group's level, its demand when it has a path and
    # no group (0 without demand), 0 without a path; summed as per_parent sums rows
    rate, total, routed = np.empty(n), np.empty(n), np.empty(n, np.bool_)
    kernels.hashed_per_parent(found.qp_gid, found.level, hashed.flows.demand / qps, qps,
                              model == "striped", rate, total, routed)  # fmt: skip
    p_rate[parent], p_demand[parent], p_routed[parent] = rate, total, routed


def flow_shares(
    fabric: Fabric,
    health: LinkHealth,
    arcs: np.ndarray,
    flows: FlowSet,
    parent: np.ndarray,
    *,
    num_parents: int,
    weight: np.ndarray | None = None,
    model: str = "striped",
    hashed: Hashed | None = None,
    load: np.ndarray | None = None,
) -> np.ndarray:
    """Rate / demand of every parent flow as `simulate` counts it (NaN: not routed).
    `hashed`: whole flows whose QPs follow the rows, walked, not held (hashing.Hashed);
    `load`: their offered load as `offered_load` gives it, if at hand (saves a walk)."""
    share, _ = _shares(fabric, health, arcs, flows, parent, num_parents, weight, model,
                       hashed, load)  # fmt: skip
    return share


def flow_shares_crossing(
    fabric: Fabric,
    health: LinkHealth,
    arcs: np.ndarray,
    flows: FlowSet,
    parent: np.ndarray,
    *,
    num_parents: int,
    hashed: Hashed,
    load: np.ndarray,
    mask: np.ndarray,
    weight: np.ndarray | None = None,
    model: str = "striped",
) -> tuple[np.ndarray, np.ndarray]:
    """flow_shares, and which hashed flows have a QP on an arc of `mask`, arcs whose `load`
    exceeds their capacity (what Hashed.crossing answers), read from the fill's groups
    rather than walked again: one walk of every QP instead of two."""
    cap = health.arc_capacity(fabric)
    mask = np.asarray(mask, np.bool_)
    if mask.shape != cap.shape or (mask & ~(load > np.maximum(cap, 0.0))).any():
        raise ValueError("mask must be arcs offered more than their capacity")
    share, found = _shares(fabric, health, arcs, flows, parent, num_parents, weight, model,
                           hashed, load)  # fmt: skip
    crossed = found.crossing(hashed.qps, mask)
    idle = np.flatnonzero(~(hashed.flows.demand > 0))  # in no group: walked for the answer
    if idle.size:
        some = Hashed(hashed.kind, hashed.flows.take(idle), hashed.parent[idle], hashed.seed,
                      hashed.qps)  # fmt: skip
        crossed[idle] = some.crossing(fabric, health, mask)
    return share, crossed


def _shares(
    fabric: Fabric,
    health: LinkHealth,
    arcs: np.ndarray,
    flows: FlowSet,
    parent: np.ndarray,
    num_parents: int,
    weight: np.ndarray | None,
    model: str,
    hashed: Hashed | None,
    load: np.ndarray | None,
) -> tuple[np.ndarray, _Groups]:
    w = np.ones(len(flows)) if weight is None else np.asarray(weight, dtype=np.float64)
    cap = health.arc_capacity(fabric)
    walked = None if hashed is None else _Walked.of(fabric, health, hashed)
    share, _, _, routed, _, _, found = _parent_shares(
        np.asarray(arcs, np.int64), cap, flows.demand, np.asarray(parent, np.int64),
        num_parents, w, model, walked, load,
    )  # fmt: skip
    return np.where(routed, share, np.nan), found


def offered_load(
    fabric: Fabric,
    health: LinkHealth,
    arcs: np.ndarray,
    flows: FlowSet,
    hashed: Hashed | None = None,
) -> np.ndarray:
    """Offered load per arc of the rows, then of the hashed flows' QPs, each arc's sum taken
    in that order, as a max-min fill over them takes it."""
    load = _row_load(np.asarray(arcs, np.int64), flows.demand, fabric.num_arcs)
    return load if hashed is None else hashed.load(fabric, health, onto=load)


@dataclass(frozen=True)
class SimReport:
    """Metrics of one routing in the flow-level simulation; plain numbers only."""

    flows: int  # parent flows
    subflows: int  # routed units (== flows unless QPs were split)
    # parent flows without a path in this routing: left out of the flow shares; a job with
    # one that no routing can carry (no alive candidate path, `stalled_rows`) reads 0, one
    # the routing merely left without a path (e.g. a TE row riding the defaults, simulated
    # without them) is left out of its job's value
    unrouted: int
    on_down_links: int  # parent flows whose path crosses an arc with no capacity
    mlu: float  # max over arcs of offered load / usable capacity (inf if load on a dead arc)
    max_flows_per_link: int  # distinct parent flows on the busiest switch-to-switch arc
    collided_links: int  # switch-to-switch arcs carrying more than one parent flow
    worst_flow_share: float  # min over routed flows of rate / demand
    mean_flow_share: float  # mean over routed flows of rate / demand
    throughput_fraction: float  # total rate / total demand of routed flows
    busbw_fraction_mean: float  # mean over jobs of min share over the job's flows
    busbw_fraction_min: float  # the worst job's fraction
    job_busbw_fraction: dict[str, float] = field(default_factory=dict)
    tier_mlu: dict[str, float] = field(default_factory=dict)  # offered load / capacity
    rounds: int = 0  # progressive-filling rounds taken
    # switch-to-switch arcs whose offered load exceeds their usable capacity: the same rule
    # for every routing, however its flows are split (QP buckets, E-ECMP queue pairs); None
    # where the routing has no per-link loads (adaptive spray: the LP optimum's value only)
    links_over_capacity: int | None = 0

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (infinite MLU stays float('inf'))."""
        return asdict(self)


def stalled_rows(fabric: Fabric, cap: np.ndarray, flows: FlowSet) -> np.ndarray:
    """Rows with demand whose NIC pair has no alive candidate path (none when every arc is
    up: then every pair has one)."""
    return np.flatnonzero(stranded(fabric, cap, flows.src_nic, flows.dst_nic)
                          & (flows.demand > 0))  # fmt: skip


def _ratio(load: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """load / cap per arc, with 0 for unloaded arcs and inf for load on a dead arc."""
    out = np.zeros(load.shape)
    loaded = load > 0
    dead = loaded & (cap <= 0)
    live = loaded & ~dead
    out[live] = load[live] / cap[live]
    out[dead] = np.inf
    return out


def simulate(
    fabric: Fabric,
    health: LinkHealth,
    routing: Assignment | np.ndarray,
    flows: FlowSet | None = None,
    parent: np.ndarray | None = None,
    *,
    weight: np.ndarray | None = None,
    model: str = "striped",
) -> SimReport:
    """Simulate a routing (an Assignment, or arc ids [F, H] with `flows`) under `health`.

    `parent[i]` names the flow a subflow belongs to (E-ECMP's QPs, TE's QP buckets);
    shares and collisions are counted per parent flow. `weight[i]` is the number of QPs
    row i stands for (default 1); `model` is how a flow's rows make its rate (see the
    module docstring)."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    if isinstance(routing, Assignment):
        if flows is not None and len(flows) != len(routing.flows):
            raise ValueError(f"{len(flows)} flows given for an assignment of {len(routing.flows)}")
        flows = routing.flows if flows is None else flows
        limit = np.array(num_paths(fabric))[flow_class(fabric, flows.src_nic, flows.dst_nic)]
        bad = np.flatnonzero((routing.path < -1) | (routing.path >= limit))
        if bad.size:
            raise ValueError(
                f"flow {bad[0]}: path index {routing.path[bad[0]]} is not in [-1, {limit[bad[0]]})"
            )
        arcs = routing.arcs(fabric)
    else:
        if flows is None:
            raise ValueError("arc arrays need the flows they route")
        arcs = np.asarray(routing, dtype=np.int64)
        if arcs.ndim != 2 or arcs.shape[0] != len(flows):
            raise ValueError(f"arcs has shape {arcs.shape}, expected ({len(flows)}, hops)")
    if ((arcs < -1) | (arcs >= fabric.num_arcs)).any():
        raise ValueError(f"arc ids must be -1 or within [0, {fabric.num_arcs})")
    num_sub = len(flows)
    if parent is None:
        parent = np.arange(num_sub, dtype=np.int64)
    parent = np.asarray(parent, dtype=np.int64)
    if parent.shape != (num_sub,):
        raise ValueError(f"parent has shape {parent.shape}, expected ({num_sub},)")
    num_parents = int(parent.max()) + 1 if num_sub else 0

    cap = health.arc_capacity(fabric)
    demand = flows.demand
    valid = arcs >= 0
    flat = arcs[valid]
    load = np.bincount(
        flat, weights=np.repeat(demand, arcs.shape[1])[valid.ravel()], minlength=fabric.num_arcs
    )
    util = _ratio(load, cap)
    tier = fabric.arc_tier
    tier_mlu = {
        name: float(util[tier == t].max()) if (tier == t).any() else 0.0
        for t, name in enumerate(TIER_NAMES)
    }

    # Collisions: distinct parent flows per switch-to-switch arc.
    grouped = num_sub < 2 or bool((parent[1:] >= parent[:-1]).all())
    order = np.arange(num_sub) if grouped else np.argsort(parent, kind="stable")
    per_arc = np.zeros(fabric.num_arcs, np.int64)
    kernels.parents_per_arc(np.ascontiguousarray(arcs, np.int64), parent, order,
                            np.ascontiguousarray(tier >= 2), per_arc)  # fmt: skip

    w = np.ones(num_sub) if weight is None else np.asarray(weight, dtype=np.float64)
    if w.shape != (num_sub,):
        raise ValueError(f"weight has shape {w.shape}, expected ({num_sub},)")
    share, p_rate, p_demand, p_routed, p_dead, rounds, _ = _parent_shares(
        arcs, cap, demand, parent, num_parents, w, model
    )
    p_job = np.zeros(num_parents, dtype=np.int64)
    p_job[parent] = flows.job

    jobs: dict[str, float] = {}
    # a flow with no alive path at all is stalled under any routing: its job gets 0
    stalled = stalled_rows(fabric, cap, flows)
    if p_routed.any() or stalled.size:
        job_min = np.full(max(len(flows.job_ids), int(p_job.max(initial=0)) + 1,
                              int(flows.job[stalled].max(initial=0)) + 1), np.inf)  # fmt: skip
        np.minimum.at(job_min, p_job[p_routed], share[p_routed])
        job_min[flows.job[stalled]] = 0.0
        for j in np.flatnonzero(np.isfinite(job_min)):
            name = flows.job_ids[j] if j < len(flows.job_ids) else f"job{j}"
            jobs[name] = float(job_min[j])
    routed_share = share[p_routed]
    job_values = np.array(list(jobs.values()))
    return SimReport(
        flows=num_parents,
        subflows=num_sub,
        unrouted=int((~p_routed).sum()),
        on_down_links=int(p_dead.sum()),
        mlu=float(util.max()) if util.size else 0.0,
        max_flows_per_link=int(per_arc.max()) if per_arc.size else 0,
        collided_links=int((per_arc > 1).sum()),
        worst_flow_share=float(routed_share.min()) if routed_share.size else 1.0,
        mean_flow_share=float(routed_share.mean()) if routed_share.size else 1.0,
        throughput_fraction=(
            float(p_rate[p_routed].sum() / p_demand[p_routed].sum())
            if p_demand[p_routed].sum() > 0
            else 1.0
        ),
        busbw_fraction_mean=float(job_values.mean()) if job_values.size else 1.0,
        busbw_fraction_min=float(job_values.min()) if job_values.size else 1.0,
        job_busbw_fraction=jobs,
        tier_mlu=tier_mlu,
        rounds=rounds,
        links_over_capacity=int(((util > 1.0 + REL_TOL) & (tier >= 2)).sum()),
    )
