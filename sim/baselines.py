"""Baselines the controller must beat: ECMP, E-ECMP with QP scaling, static path pinning.

All three walk the Clos hop by hop as the switches do, and differ only in how a switch picks
among its usable next hops:

    hop 0  source RTSW   uplink (c, ku)   alive, and CTSW c of the source pod still reaches
                                          the destination RTSW (BGP withdraws the rest)
    hop 1  source CTSW   agg link (j, mu) alive, and ATSW j still reaches the destination
                                          CTSW c (cross-pod only)
    hop 2  ATSW          agg link md      alive, down to CTSW c of the destination pod
    hop 3  dest. CTSW    rack link kd     alive, down to the destination RTSW

A link is usable when its health factor is above 0; degraded links stay in the sets, since
hashing ignores capacity. A flow with no usable choice at some hop, or whose own access link
or destination NIC's access link is down, is UNROUTED. Choices are encoded as the structured
path indices of controller.model.paths, so every baseline returns an ordinary Assignment.

ECMP picks the r-th usable option with r = hash mod (number usable). The hash is splitmix64
chained over (seed, src NIC, dst NIC, QP, hop) in numpy uint64 arithmetic: deterministic for
a seed, different per hop (no polarisation), and E-ECMP's queue pairs differ in the QP term.

Pinning is static and load-blind. Let i be the destination NIC's index within its rack
(host-in-rack * NICs-per-host + NIC) and u = i mod (C*K): the pinned uplink is
c = u mod C, ku = (u div C) mod K. Cross-pod, with v = (destination rack within its pod)
mod (A*L): j = v mod A, mu = v div A, md = mu. The down link is kd = ku. When the pinned
option is unusable the switch takes the next usable one in cyclic order. For full racks of
rail-aligned rack-to-rack traffic in a 1:1 pod this is a perfect matching (no collisions);
two flows from one rack to the same NIC index of different racks share an uplink, and every
flow pinned to a failed link lands on its neighbour, which is how pinning breaks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from controller.errors import InputError
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD, SAME_RACK, flow_class

# Hops at which a switch chooses a next hop (the hash input distinguishes them).
HOP_UPLINK, HOP_AGG_UP, HOP_AGG_DOWN, HOP_DOWNLINK = 0, 1, 2, 3

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1

# chooser(hop, usable [n, options], rows [n] flow indices) -> option index [n]
Chooser = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """One splitmix64 step on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MUL1
        z = (z ^ (z >> np.uint64(27))) * _MUL2
        return z ^ (z >> np.uint64(31))


def flow_hash(
    seed: int, src_nic: np.ndarray, dst_nic: np.ndarray, qp: np.ndarray | int, hop: int
) -> np.ndarray:
    """Deterministic 64-bit hash of (seed, src NIC, dst NIC, QP, hop), one per flow."""
    src = np.asarray(src_nic).astype(np.uint64)
    dst = np.asarray(dst_nic).astype(np.uint64)
    qph = (np.asarray(qp).astype(np.uint64) << np.uint64(8)) | np.uint64(hop)
    h = _splitmix64(np.full(src.shape, int(seed) & _MASK64, dtype=np.uint64))
    h = _splitmix64(h ^ src)
    h = _splitmix64(h ^ dst)
    return _splitmix64(h ^ np.broadcast_to(qph, src.shape))


def _nth_usable(usable: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Index of the rank-th True in each row (rank < row count)."""
    return np.argmax(np.cumsum(usable, axis=1) > rank[:, None], axis=1)


def _next_usable(usable: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Index of the first True at or cyclically after `start` in each row."""
    n = usable.shape[1]
    cols = (start[:, None] + np.arange(n)) % n
    rolled = np.take_along_axis(usable, cols, axis=1)
    return (start + np.argmax(rolled, axis=1)) % n


def _route(fabric: Fabric, flows: FlowSet, health: LinkHealth, choose: Chooser) -> np.ndarray:
    """Path index per flow, or UNROUTED, picking next hops hop by hop with `choose`."""
    P, R, C, K = fabric.pods, fabric.racks_per_pod, fabric.ctsws_per_pod, fabric.rack_links
    A, L = fabric.atsws_per_plane, fabric.agg_links
    alive = np.asarray(health.factor) > 0.0
    src, dst = flows.src_nic, flows.dst_nic
    path = np.full(len(flows), UNROUTED, dtype=np.int64)
    if not len(flows):
        return path
    cls = flow_class(fabric, src, dst)
    sr = fabric.rack_of_host(fabric.host_of_nic(src))
    dr = fabric.rack_of_host(fabric.host_of_nic(dst))
    ends_ok = alive[fabric.access_link(src)] & alive[fabric.access_link(dst)]
    path[(cls == SAME_RACK) & ends_ok] = 0

    rack_alive = alive[fabric.rack_base : fabric.agg_base].reshape(P * R, C, K)
    down_ok = np.logical_or.reduce(rack_alive, axis=2)  # [rtsw, c]: CTSW c reaches the RTSW
    agg_alive = alive[fabric.agg_base :].reshape(P, C, A, L)
    agg_ok = np.logical_or.reduce(agg_alive, axis=3)  # [pod, c, j]: CTSW (pod, c) <-> ATSW j

    rows = np.flatnonzero((cls != SAME_RACK) & ends_ok)
    if not rows.size:
        return path
    cross = cls[rows] == CROSS_POD
    srr, drr = sr[rows], dr[rows]
    reach = down_ok[drr].copy()  # [n, C]: CTSW c can still deliver to the destination
    if cross.any():
        sp, dp = fabric.pod_of_rack(srr[cross]), fabric.pod_of_rack(drr[cross])
        reach[cross] &= (agg_ok[sp] & agg_ok[dp]).any(axis=2)
    usable = (rack_alive[srr] & reach[:, :, None]).reshape(rows.size, C * K)
    ok = usable.any(axis=1)
    rows, usable, cross, srr, drr = rows[ok], usable[ok], cross[ok], srr[ok], drr[ok]
    if not rows.size:
        return path
    up = choose(HOP_UPLINK, usable, rows)
    c, ku = up // K, up % K
    kd = choose(HOP_DOWNLINK, rack_alive[drr, c], rows)
    index = (c * K + ku) * K + kd  # same-pod numbering
    if cross.any():
        xr = rows[cross]
        sp, dp, cx = fabric.pod_of_rack(srr[cross]), fabric.pod_of_rack(drr[cross]), c[cross]
        usable_up = agg_alive[sp, cx] & agg_ok[dp, cx][:, :, None]  # [n, A, L]
        ju = choose(HOP_AGG_UP, usable_up.reshape(xr.size, A * L), xr)
        j, mu = ju // L, ju % L
        md = choose(HOP_AGG_DOWN, agg_alive[dp, cx, j], xr)
        index[cross] = ((((cx * K + ku[cross]) * A + j) * L + mu) * L + md) * K + kd[cross]
    path[rows] = index
    return path


def _hash_chooser(seed: int, flows: FlowSet, qp: np.ndarray) -> Chooser:
    """ECMP next-hop choice: the hash picks uniformly among usable options."""

    def choose(hop: int, usable: np.ndarray, rows: np.ndarray) -> np.ndarray:
        h = flow_hash(seed, flows.src_nic[rows], flows.dst_nic[rows], qp[rows], hop)
        count = usable.sum(axis=1).astype(np.uint64)
        return _nth_usable(usable, (h % count).astype(np.int64))

    return choose


def ecmp(fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int) -> Assignment:
    """Per-flow hashing over usable equal-cost next hops at every tier, as switches do."""
    qp = np.zeros(len(flows), dtype=np.int64)
    return Assignment(flows, _route(fabric, flows, health, _hash_chooser(seed, flows, qp)))


def split_qps(flows: FlowSet, qps: int) -> tuple[FlowSet, np.ndarray, np.ndarray]:
    """Split each flow into `qps` subflows of demand/qps: (subflows, parent, qp number)."""
    if qps < 1:
        raise InputError(f"qps must be >= 1, got {qps}")
    parent = np.repeat(np.arange(len(flows), dtype=np.int64), qps)
    qp = np.tile(np.arange(qps, dtype=np.int64), len(flows))
    sub = FlowSet(
        flows.src_nic[parent],
        flows.dst_nic[parent],
        flows.demand[parent] / qps,
        flows.job[parent],
        flows.job_ids,
    )
    return sub, parent, qp


def eecmp(
    fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int = 16
) -> tuple[FlowSet, Assignment, np.ndarray]:
    """E-ECMP: every flow opens `qps` queue pairs, each hashed on its own.

    Returns (subflows, their assignment, parent flow index of every subflow)."""
    sub, parent, qp = split_qps(flows, qps)
    path = _route(fabric, sub, health, _hash_chooser(seed, sub, qp))
    return sub, Assignment(sub, path), parent


def _pin_chooser(fabric: Fabric, flows: FlowSet) -> Chooser:
    """Static pinning by destination downlink index (see the module docstring)."""
    C, K = fabric.ctsws_per_pod, fabric.rack_links
    A, L = fabric.atsws_per_plane, fabric.agg_links
    nics_per_rack = fabric.hosts_per_rack * fabric.nics_per_host
    dst = flows.dst_nic
    u = (dst % nics_per_rack) % (C * K)
    pin_c, pin_ku = u % C, (u // C) % K
    v = (fabric.rack_of_host(fabric.host_of_nic(dst)) % fabric.racks_per_pod) % max(A * L, 1)
    pin_j, pin_mu = v % max(A, 1), v // max(A, 1)
    preferred = {
        HOP_UPLINK: pin_c * K + pin_ku,
        HOP_DOWNLINK: pin_ku,
        HOP_AGG_UP: pin_j * L + pin_mu,
        HOP_AGG_DOWN: pin_mu,
    }

    def choose(hop: int, usable: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return _next_usable(usable, preferred[hop][rows])

    return choose


def pinning(fabric: Fabric, flows: FlowSet, health: LinkHealth) -> Assignment:
    """Static path pinning: uplink by destination NIC index, next usable one on failure."""
    return Assignment(flows, _route(fabric, flows, health, _pin_chooser(fabric, flows)))
