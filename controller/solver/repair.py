"""Incremental repair after a health change: re-place only the flows that were hit.

A flow is hit when an arc of its current path is now down or has less capacity than before
(`old_health`, or the fabric's built capacity when not given), or when it had no path and
might have one now. Hit flows are taken off, then re-placed one by one (descending demand,
ties by index) onto the candidate path with the smallest resulting bottleneck given every
other flow's load, respecting the shared-entry rule of controller.assign. Every other flow
keeps its path exactly. Cost: one load computation over all flows (arrays) plus a few numpy
calls per hit flow.
"""

from __future__ import annotations

import time

import numpy as np

from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import ACCESS, Fabric
from controller.model.health import LinkHealth
from controller.model.paths import SAME_RACK, flow_class, path_arcs
from controller.solver.greedy import (
    AssignResult,
    _best_path,
    _inverse,
    _Mates,
    access_alive,
    candidates,
)


def affected_flows(
    fabric: Fabric,
    new_health: LinkHealth,
    assignment: Assignment,
    old_health: LinkHealth | None = None,
) -> np.ndarray:
    """Indices of routed flows whose path lost capacity (down or degraded further)."""
    new_cap = new_health.arc_capacity(fabric)
    old_cap = fabric.capacity if old_health is None else old_health.arc_capacity(fabric)
    dropped = new_cap < old_cap
    arcs = assignment.arcs(fabric)
    hit = np.where(arcs >= 0, dropped[np.maximum(arcs, 0)], False).any(axis=1)
    return np.flatnonzero(hit & assignment.routed)


def _mate_key(fabric: Fabric, assignment: Assignment) -> np.ndarray:
    """(source RTSW, destination host, class) of every flow, as one integer."""
    flows = assignment.flows
    sr = fabric.rack_of_host(fabric.host_of_nic(flows.src_nic))
    cls = flow_class(fabric, flows.src_nic, flows.dst_nic)
    return (sr * fabric.num_hosts + flows.dst_host(fabric)) * 3 + cls


def _consistent(n_paths: int, span: int, mate_paths: np.ndarray) -> np.ndarray:
    """Candidates that agree with the mates' suffix on every uplink the mates use."""
    forced = {int(p) // span: int(p) % span for p in mate_paths.tolist()}
    p = np.arange(n_paths)
    ok = np.ones(n_paths, bool)
    for up, suffix in forced.items():
        ok &= (p // span != up) | (p % span == suffix)
    return ok


def repair(
    fabric: Fabric,
    new_health: LinkHealth,
    assignment: Assignment,
    *,
    old_health: LinkHealth | None = None,
    retry_unrouted: bool = True,
) -> AssignResult:
    """Re-place only the flows hit by the health change; all others stay where they are."""
    start = time.perf_counter()
    flows = assignment.flows
    cap = new_health.arc_capacity(fabric)
    old_cap = fabric.capacity if old_health is None else old_health.arc_capacity(fabric)
    arcs = assignment.arcs(fabric)
    safe = np.maximum(arcs, 0)
    hit_mask = np.where(arcs >= 0, (cap < old_cap)[safe], False).any(axis=1)
    hit_mask &= assignment.routed
    if retry_unrouted:
        hit_mask |= ~assignment.routed
    hit = np.flatnonzero(hit_mask)
    path = assignment.path.copy()
    path[hit] = UNROUTED
    arcs[hit] = -1
    flat = arcs.reshape(-1)
    weight = np.repeat(flows.demand, arcs.shape[1])
    load = np.bincount(
        flat[flat >= 0], weights=weight[flat >= 0], minlength=fabric.num_arcs
    ).astype(np.float64)
    if hit.size:
        inv = _inverse(cap)
        sub = flows.take(hit)
        cand = candidates(fabric, sub)
        full = path_arcs(fabric, sub.src_nic, sub.dst_nic, np.zeros(hit.size, np.int64))
        alive = access_alive(fabric, sub, cap)
        mate_key = _mate_key(fabric, assignment)
        span = _Mates.spans(fabric)
        for i in np.argsort(-sub.demand, kind="stable").tolist():
            f = int(hit[i])
            if not alive[i]:
                continue
            cls = int(cand.cls[i])
            d = float(sub.demand[i])
            p = 0
            if cls != SAME_RACK:
                options = cand.arcs(i)
                allowed = None
                if span[cls]:
                    mates = np.flatnonzero((mate_key == mate_key[f]) & (path >= 0))
                    if mates.size:
                        allowed = _consistent(options.shape[0], int(span[cls]), path[mates])
                p, _ = _best_path(options, load, inv, d, allowed)
                if p == UNROUTED:
                    continue
                core = options[p]
            else:
                core = np.zeros(0, np.int64)
            path[f] = p
            row = np.full(arcs.shape[1], -1, np.int64)
            row[0], row[1 : 1 + core.size], row[1 + core.size] = (
                full[i, 0],
                core,
                (fabric.down(sub.dst_nic[i])),
            )
            arcs[f] = row
            load[row[row >= 0]] += d
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(cap > 0, load / np.where(cap > 0, cap, 1.0), np.where(load > 0, np.inf, 0))
    flat = arcs.reshape(-1)
    count = np.bincount(flat[flat >= 0], minlength=fabric.num_arcs)
    core_arc = np.repeat(fabric.link_kind != ACCESS, 2)
    collided = np.flatnonzero(core_arc & (count > 1) & (load > cap + 1e-9 * np.maximum(cap, 1.0)))
    return AssignResult(
        assignment=Assignment(flows, path),
        mlu=float(util.max(initial=0.0)),
        collided_links=collided,
        churn=np.flatnonzero(assignment.path != path),
        fallback_ecmp=np.zeros(0, np.int64),
        unroutable=np.flatnonzero(path == UNROUTED),
        method="repair",
        seconds=time.perf_counter() - start,
    )
