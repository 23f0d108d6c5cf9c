"""Hop-by-hop hashing: the routing a fabric runs without TE (ECMP, E-ECMP, WCMP).

Every switch picks among its usable next hops towards the destination:

    hop 0  source RTSW   uplink (c, ku)   alive, and CTSW c of the source pod still reaches
                                          the destination RTSW (BGP withdraws the rest)
    hop 1  source CTSW   agg link (j, mu) alive, and ATSW j still reaches the destination
                                          CTSW c (cross-pod only)
    hop 2  ATSW          agg link md      alive, down to CTSW c of the destination pod
    hop 3  dest. CTSW    rack link kd     alive, down to the destination RTSW

A link is usable when its health factor is above 0. A flow with no usable choice at some hop,
or whose own access link or destination NIC's access link is down, is UNROUTED. Choices are
encoded as the structured path indices of controller.model.paths, so a hashed routing is an
ordinary Assignment.

The hash is splitmix64 chained over (seed, src NIC, dst NIC, QP, hop) in numpy uint64
arithmetic: deterministic for a seed, different per hop (no polarisation); E-ECMP's queue
pairs differ in the QP term.

- ECMP (`ecmp`, `eecmp`): the r-th usable option with r = hash mod (number usable); degraded
  links stay in the sets with full weight, since plain hashing ignores capacity.
- Capacity-aware WCMP (`wcmp`): the switch weighs each usable next-hop link by the capacity
  left behind it, as BGP link-bandwidth communities do. Every switch advertises its bandwidth
  towards the destination rack, B = sum over its usable next-hop links of min(link capacity
  share, the next switch's B); a link's weight is its capacity times min(1, B_next / S), S the
  capacity of this switch's usable links to that same next switch (the next switch's bandwidth
  is shared among the parallel links in proportion to their capacity). The option is the
  first whose cumulative weight exceeds u * total, u = (hash >> 11) / 2^53 in [0, 1).

`Overrides` (TE entries keyed <ingress link, destination host[, QP bucket]>, as derived from
an assignment in controller.model.dataplane) make a walk take an entry's next hop where one
matches and is usable, and hash elsewhere: the data plane of a fabric with some TE entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.errors import InputError
from controller.model import kernels
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD, MAX_HOPS, SAME_RACK, flow_class

# Hops at which a switch chooses a next hop (the hash input distinguishes them).
HOP_UPLINK, HOP_AGG_UP, HOP_AGG_DOWN, HOP_DOWNLINK = 0, 1, 2, 3
HASHINGS = ("eecmp", "wcmp")  # the fabric default routings a certificate may refer to

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1

# chooser(hop, usable [n, options], rows [n] flow indices, digits chosen so far) -> option [n]
Chooser = Callable[[int, np.ndarray, np.ndarray, dict[str, np.ndarray]], np.ndarray]


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
    return hop_hash(pair_hash(seed, src_nic, dst_nic), qp, hop)


def pair_hash(seed: int, src_nic: np.ndarray, dst_nic: np.ndarray) -> np.ndarray:
    """The (seed, src NIC, dst NIC) part of flow_hash, shared by every QP and hop."""
    src = np.asarray(src_nic).astype(np.uint64)
    dst = np.asarray(dst_nic).astype(np.uint64)
    h = _splitmix64(np.array([int(seed) & _MASK64], dtype=np.uint64))
    h = _splitmix64(h ^ src)
    return _splitmix64(h ^ dst)


def hop_hash(pair: np.ndarray, qp: np.ndarray | int, hop: int) -> np.ndarray:
    """flow_hash from its pair_hash: the QP and hop round."""
    qph = (np.asarray(qp).astype(np.uint64) << np.uint64(8)) | np.uint64(hop)
    return _splitmix64(pair ^ np.broadcast_to(qph, pair.shape))


def nth_usable(usable: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Index of the rank-th True in each row (rank < row count)."""
    n, m = usable.shape
    if m > 64:
        return np.argmax(np.cumsum(usable, axis=1) > rank[:, None], axis=1)
    # column by column: a few vector operations per option, not a cumsum along short rows
    out = np.zeros(n, np.int64)
    seen = np.zeros(n, np.int64)
    left = np.ones(n, bool)
    for col in range(m):
        u = usable[:, col]
        hit = u & left & (seen == rank)
        out[hit] = col
        left &= ~hit
        seen += u
    return out


def route(fabric: Fabric, flows: FlowSet, health: LinkHealth, choose: Chooser) -> np.ndarray:
    """Path index per flow, or UNROUTED, picking next hops hop by hop with `choose`."""
    P, C, K = fabric.pods, fabric.ctsws_per_pod, fabric.rack_links
    A, L = fabric.atsws_per_plane, fabric.agg_links
    alive = np.asarray(health.factor) > 0.0
    src, dst = flows.src_nic, flows.dst_nic
    path = np.full(len(flows), UNROUTED, dtype=np.int64)
    if not len(flows):
        return path
    cls = flow_class(fabric, src, dst)
    sr = fabric.rtsw_of_nic(src)
    dr = fabric.rtsw_of_nic(dst)
    ends_ok = alive[fabric.access_link(src)] & alive[fabric.access_link(dst)]
    path[(cls == SAME_RACK) & ends_ok] = 0

    rack_alive = alive[fabric.rack_base : fabric.agg_base].reshape(fabric.num_rtsws, C, K)
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
        sp, dp = fabric.pod_of_rtsw(srr[cross]), fabric.pod_of_rtsw(drr[cross])
        reach[cross] &= (agg_ok[sp] & agg_ok[dp]).any(axis=2)
    usable = (rack_alive[srr] & reach[:, :, None]).reshape(rows.size, C * K)
    ok = usable.any(axis=1)
    rows, usable, cross, srr, drr = rows[ok], usable[ok], cross[ok], srr[ok], drr[ok]
    if not rows.size:
        return path
    up = choose(HOP_UPLINK, usable, rows, {})
    c, ku = up // K, up % K
    zero = np.zeros(rows.size, np.int64)
    j, mu, md = zero, zero.copy(), zero.copy()
    if cross.any():
        xr = rows[cross]
        sp, dp, cx = fabric.pod_of_rtsw(srr[cross]), fabric.pod_of_rtsw(drr[cross]), c[cross]
        usable_up = agg_alive[sp, cx] & agg_ok[dp, cx][:, :, None]  # [n, A, L]
        seen = {"c": cx, "ku": ku[cross]}
        ju = choose(HOP_AGG_UP, usable_up.reshape(xr.size, A * L), xr, seen)
        jx, mux = ju // L, ju % L
        seen = {**seen, "j": jx, "mu": mux}
        mdx = choose(HOP_AGG_DOWN, agg_alive[dp, cx, jx], xr, seen)
        j, mu, md = j.copy(), mu, md
        j[cross], mu[cross], md[cross] = jx, mux, mdx
    kd = choose(HOP_DOWNLINK, rack_alive[drr, c], rows, {"c": c, "ku": ku, "j": j, "mu": mu,
                                                         "md": md})  # fmt: skip
    index = (c * K + ku) * K + kd  # same-pod numbering
    index = np.where(cross, ((((c * K + ku) * A + j) * L + mu) * L + md) * K + kd, index)
    path[rows] = index
    return path


def hash_chooser(seed: int, flows: FlowSet, qp: np.ndarray) -> Chooser:
    """ECMP next-hop choice: the hash picks uniformly among usable options."""
    pair = pair_hash(seed, flows.src_nic, flows.dst_nic)

    def choose(
        hop: int, usable: np.ndarray, rows: np.ndarray, seen: dict[str, np.ndarray]
    ) -> np.ndarray:
        h = hop_hash(pair[rows], qp[rows], hop)
        count = usable.sum(axis=1).astype(np.uint64)
        return nth_usable(usable, (h % count).astype(np.int64))

    return choose


@dataclass(frozen=True)
class _Bandwidth:
    """Per-destination-rack bandwidths the WCMP weights are made of (module docstring)."""

    rack_cap: np.ndarray  # [rack, C, K] up-arc capacity of rack links (0 when down)
    rack_down: np.ndarray  # [rack, C, K] down-arc capacity of rack links
    agg_up: np.ndarray  # [pod, C, A, L] up-arc capacity of agg links
    agg_down: np.ndarray  # [pod, C, A, L] down-arc capacity of agg links
    b3: np.ndarray  # [rack, C]: CTSW c of the rack's pod down to the rack
    b2: np.ndarray  # [rack, C, A]: ATSW (c, j) down to the rack

    @classmethod
    def of(cls, fabric: Fabric, health: LinkHealth) -> _Bandwidth:
        P, C, K = fabric.pods, fabric.ctsws_per_pod, fabric.rack_links
        A, L = fabric.atsws_per_plane, fabric.agg_links
        cap = health.arc_capacity(fabric)
        rack = slice(2 * fabric.rack_base, 2 * fabric.agg_base)
        agg = slice(2 * fabric.agg_base, None)
        rack_cap = cap[rack][0::2].reshape(fabric.num_rtsws, C, K)
        rack_down = cap[rack][1::2].reshape(fabric.num_rtsws, C, K)
        agg_up = cap[agg][0::2].reshape(P, C, A, L)
        agg_down = cap[agg][1::2].reshape(P, C, A, L)
        b3 = rack_down.sum(axis=2)
        pod = fabric.pod_of_rtsw(np.arange(fabric.num_rtsws))
        b2 = np.minimum(agg_down.sum(axis=3)[pod], b3[:, :, None])  # [rack, C, A]
        return cls(rack_cap, rack_down, agg_up, agg_down, b3, b2)

    def kernel_tables(self) -> tuple[np.ndarray, ...]:
        """The tables model.kernels.walk weighs with, summed by the same numpy reductions
        as wcmp_chooser sums them (so the weights are equal to the bit): rack_cap, its sum
        over K, b3, the bandwidth behind each uplink of a cross-pod flow per (source pod,
        destination rack, C), agg_up, its sum over L, b2, agg_down, rack_down."""
        up, has_up, has_down, dpod = self._agg_parts()
        P, racks = self.agg_up.shape[0], self.b3.shape[0]
        behind_x = np.zeros((P, racks, self.b3.shape[1]))
        if self.agg_up.shape[2]:
            for sp in range(P):
                ok = has_up[sp][None] & has_down[dpod]  # [racks, C, A]
                behind_x[sp] = np.where(ok, np.minimum(up[sp][None], self.b2), 0.0).sum(axis=2)
        return self._tables(up, behind_x)

    def _agg_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(agg_up summed over L, whether any of its L links is up, the same down, the pod
        of each rack)."""
        P, racks = self.agg_up.shape[0], self.b3.shape[0]
        up = self.agg_up.sum(axis=3)  # [P, C, A]
        has_up = np.asarray((self.agg_up > 0).any(axis=3))
        has_down = np.asarray((self.agg_down > 0).any(axis=3))
        dpod = np.arange(racks) // max(racks // max(P, 1), 1)
        return up, has_up, has_down, dpod

    def _tables(self, up: np.ndarray, behind_x: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(np.ascontiguousarray(t, np.float64) for t in (
            self.rack_cap, self.rack_cap.sum(axis=2), self.b3, behind_x, self.agg_up, up,
            self.b2, self.agg_down, self.rack_down))  # fmt: skip


class WcmpTables:
    """WCMP's walk tables for one health, kept so that those of another health (a few links
    apart, as in a failure sweep) are made by summing again only the cells of the cross-pod
    table (source pod, destination rack, CTSW) whose inputs differ: whole, that table is
    pods x racks x CTSWs sums over the ATSWs (cluster-100k: ~90 ms a health). The sums are
    numpy's over the same last axis, so the tables equal kernel_tables' to the bit."""

    def __init__(self, fabric: Fabric, health: LinkHealth) -> None:
        self.fabric = fabric
        self.bw = _Bandwidth.of(fabric, health)
        self.parts = self.bw._agg_parts()
        self.tables = self.bw.kernel_tables()

    def of(self, health: LinkHealth) -> tuple[np.ndarray, ...]:
        """kernel_tables of `health`."""
        bw = _Bandwidth.of(self.fabric, health)
        up, has_up, has_down, dpod = bw._agg_parts()
        b_up, b_has_up, b_has_down, _ = self.parts
        P, racks, C = self.tables[3].shape
        if not bw.agg_up.shape[2]:
            return bw._tables(up, np.zeros((P, racks, C)))
        # the cells whose inputs differ: a (source pod, C) whose uplinks changed, a
        # (destination pod, C) whose downlinks changed, a (rack, C) whose b2 changed
        src = (up != b_up).any(axis=2) | (has_up != b_has_up).any(axis=2)  # [P, C]
        dst = (has_down != b_has_down).any(axis=2)  # [P, C]
        rc = (bw.b2 != self.bw.b2).any(axis=2) | dst[dpod]  # [racks, C]
        cells = int(src.sum()) * racks + int(rc.sum()) * P
        if cells * 4 > P * racks * C:  # most of the table: sum it whole
            return bw.kernel_tables()
        behind_x = self.tables[3].copy()
        sp, c = np.nonzero(src)
        sp, r, c = (np.repeat(sp, racks), np.tile(np.arange(racks), sp.size),
                    np.repeat(c, racks))  # fmt: skip
        r2, c2 = np.nonzero(rc)
        sp = np.concatenate([sp, np.repeat(np.arange(P), r2.size)])
        r = np.concatenate([r, np.tile(r2, P)])
        c = np.concatenate([c, np.tile(c2, P)])
        ok = has_up[sp, c] & has_down[dpod[r], c]  # [cells, A]
        behind_x[sp, r, c] = np.where(ok, np.minimum(up[sp, c], bw.b2[r, c]), 0.0).sum(axis=1)
        return bw._tables(up, behind_x)


# model.kernels.walk's tables when it does not weigh (E-ECMP): of the right ranks, unread
# the walk's WCMP tables when it hashes E-ECMP (unused, typed as the real ones)
NO_TABLES = tuple(np.zeros((1,) * n) for n in (3, 2, 2, 3, 4, 3, 3, 4, 3))


def _weighted(usable: np.ndarray, weight: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The option whose cumulative weight first exceeds u * total (u from the hash); plain
    ECMP among the usable options where their weights sum to 0."""
    w = np.where(usable, np.maximum(weight, 0.0), 0.0)
    cum = np.cumsum(w, axis=1)
    total = cum[:, -1]
    u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    pick = np.argmax(cum > (u * total)[:, None], axis=1)
    flat = total <= 0
    if flat.any():
        count = usable[flat].sum(axis=1).astype(np.uint64)
        pick[flat] = nth_usable(usable[flat], (h[flat] % count).astype(np.int64))
    return pick


def wcmp_chooser(
    fabric: Fabric, health: LinkHealth, seed: int, flows: FlowSet, qp: np.ndarray
) -> Chooser:
    """Capacity-aware WCMP next-hop choice (module docstring)."""
    bw = _Bandwidth.of(fabric, health)
    pair = pair_hash(seed, flows.src_nic, flows.dst_nic)
    C, K = fabric.ctsws_per_pod, fabric.rack_links
    A, L = fabric.atsws_per_plane, fabric.agg_links

    def share(link_cap: np.ndarray, behind: np.ndarray) -> np.ndarray:
        """Per-link weight [n, X, Y]: capacity x min(1, bandwidth behind / parallel capacity)."""
        total = link_cap.sum(axis=2)
        frac = np.divide(behind, total, out=np.zeros(total.shape), where=total > 0)
        return link_cap * np.minimum(frac, 1.0)[:, :, None]

    def choose(
        hop: int, usable: np.ndarray, rows: np.ndarray, seen: dict[str, np.ndarray]
    ) -> np.ndarray:
        src, dst = flows.src_nic[rows], flows.dst_nic[rows]
        h = hop_hash(pair[rows], qp[rows], hop)
        sr = fabric.rtsw_of_nic(src)
        dr = fabric.rtsw_of_nic(dst)
        sp, dp = fabric.pod_of_rtsw(sr), fabric.pod_of_rtsw(dr)
        n = rows.size
        if hop == HOP_UPLINK:
            cross = sp != dp
            behind = bw.b3[dr].copy()  # [n, C]
            if cross.any() and A:
                up = bw.agg_up[sp[cross]].sum(axis=3)  # [x, C, A]
                ok = (bw.agg_up[sp[cross]] > 0).any(axis=3) & (bw.agg_down[dp[cross]] > 0).any(
                    axis=3
                )
                behind[cross] = np.where(ok, np.minimum(up, bw.b2[dr[cross]]), 0.0).sum(axis=2)
            weight = share(bw.rack_cap[sr], behind).reshape(n, C * K)
        elif hop == HOP_AGG_UP:
            c = seen["c"]
            behind = bw.b2[dr, c]  # [n, A]
            weight = share(bw.agg_up[sp, c], behind).reshape(n, A * L)
        elif hop == HOP_AGG_DOWN:
            weight = bw.agg_down[dp, seen["c"], seen["j"]]
        else:
            weight = bw.rack_down[dr, seen["c"]]
        return _weighted(usable, weight, h)

    return choose


@dataclass(frozen=True)
class Overrides:
    """TE entries as lookups: per hop, sorted int64 keys and the option each one chooses.

    Keys: hop 0 (src NIC * num_hosts + dst host) * (MAX_QPS + 1) + (qp + 1); hops 1-3
    ingress link * num_hosts + dst host. Options are the hop's digits as `route` numbers
    them (c*K + ku, j*L + mu, md, kd)."""

    keys: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    option: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

    @staticmethod
    def lookup(keys: np.ndarray, option: np.ndarray, want: np.ndarray) -> np.ndarray:
        """The option of each key in `want`, or -1."""
        if not keys.size:
            return np.full(want.shape, -1, np.int64)
        pos = np.minimum(np.searchsorted(keys, want), keys.size - 1)
        return np.where(keys[pos] == want, option[pos], -1)


QP_KEY_SPAN = 1 << 17  # qp + 1 for buckets below 2**16, and 0 for all buckets


def overriding(
    fabric: Fabric, flows: FlowSet, qp: np.ndarray, overrides: Overrides, base: Chooser
) -> Chooser:
    """`base`, except where a TE entry matches the packet at that hop and its next hop is
    usable: then the entry's (a hop-0 bucket entry before the all-buckets one)."""
    H = np.int64(fabric.num_hosts)

    def choose(
        hop: int, usable: np.ndarray, rows: np.ndarray, seen: dict[str, np.ndarray]
    ) -> np.ndarray:
        out = base(hop, usable, rows, seen)
        src, dst = flows.src_nic[rows], flows.dst_nic[rows]
        host = fabric.host_of_nic(dst)
        keys, opts = overrides.keys[hop], overrides.option[hop]
        if not keys.size:
            return out
        if hop == HOP_UPLINK:
            unit = (src * H + host) * QP_KEY_SPAN
            got = Overrides.lookup(keys, opts, unit + qp[rows] + 1)
            whole = Overrides.lookup(keys, opts, unit)
            got = np.where(got >= 0, got, whole)
        else:
            sr = fabric.rtsw_of_nic(src)
            dr = fabric.rtsw_of_nic(dst)
            c = seen["c"]
            if hop == HOP_AGG_UP:
                link = fabric.rack_link(sr, c, seen["ku"])
            elif hop == HOP_AGG_DOWN:
                link = fabric.agg_link(fabric.pod_of_rtsw(sr), c, seen["j"], seen["mu"])
            else:
                cross = fabric.pod_of_rtsw(sr) != fabric.pod_of_rtsw(dr)
                link = np.where(
                    cross,
                    fabric.agg_link(fabric.pod_of_rtsw(dr), c, seen["j"], seen["md"]),
                    fabric.rack_link(sr, c, seen["ku"]),
                )
            got = Overrides.lookup(keys, opts, np.asarray(link, np.int64) * H + host)
        ok = got >= 0
        ok[ok] = usable[np.flatnonzero(ok), got[ok]]
        return np.where(ok, got, out)

    return choose


def chooser(
    kind: str, fabric: Fabric, health: LinkHealth, seed: int, flows: FlowSet, qp: np.ndarray
) -> Chooser:
    """The default routing `kind` ("eecmp" hashes uniformly, "wcmp" by capacity behind)."""
    if kind == "eecmp":
        return hash_chooser(seed, flows, qp)
    if kind == "wcmp":
        return wcmp_chooser(fabric, health, seed, flows, qp)
    raise InputError(f"unknown hashing {kind!r}; known: {', '.join(HASHINGS)}")


def ecmp(fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int) -> Assignment:
    """Per-flow hashing over usable equal-cost next hops at every tier, as switches do."""
    qp = np.zeros(len(flows), dtype=np.int64)
    return Assignment(flows, route(fabric, flows, health, hash_chooser(seed, flows, qp)))


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


def hashed_routes(
    kind: str, fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int
) -> tuple[np.ndarray, np.ndarray]:
    """The default routing `kind`'s (path index, arcs [F * qps, MAX_HOPS]) of QP q of flow
    f at row f * qps + q: `route` with `chooser(kind, ...)` over `split_qps`' subflows,
    compiled (model.kernels.walk)."""
    n = len(flows) * _checked_qps(qps)
    path = np.empty(n, np.int64)
    arcs = np.empty((n, MAX_HOPS), np.int64)
    kernels.walk(*_kernel_args(fabric, flows, health, seed, qps), path, arcs,
                 read_only(np.zeros(len(flows)), np.float64), np.zeros(0),
                 *_weighing(kind, fabric, health))  # fmt: skip
    return path, arcs


def hashed_arcs_seeds(
    kind: str, fabric: Fabric, flows: FlowSet, health: LinkHealth, seeds: tuple[int, ...],
    qps: int, wcmp: WcmpTables | None = None,
) -> list[np.ndarray]:  # fmt: skip
    """hashed_routes' arcs for each of `seeds`, the weights (WCMP) computed once (from
    `wcmp`'s, another health's tables, where given)."""
    n = len(flows) * _checked_qps(qps)
    if kind == "wcmp" and wcmp is not None:
        weighing: tuple[bool, tuple[np.ndarray, ...]] = (True, wcmp.of(health))
    else:
        weighing = _weighing(kind, fabric, health)
    out = []
    for seed in seeds:
        arcs = np.empty((n, MAX_HOPS), np.int64)
        kernels.walk(*_kernel_args(fabric, flows, health, seed, qps), np.empty(n, np.int64),
                     arcs, np.zeros(len(flows)), np.zeros(0), *weighing)  # fmt: skip
        out.append(arcs)
    return out


def hashed_load(
    kind: str, fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int
) -> np.ndarray:
    """The offered load per arc of the default routing `kind` with `qps` QPs a flow (what
    hashed_routes' arcs carry), without a row per QP in memory."""
    _checked_qps(qps)
    load = np.zeros(fabric.num_arcs)
    kernels.walk(*_kernel_args(fabric, flows, health, seed, qps), np.zeros(0, np.int64),
                 np.zeros((0, MAX_HOPS), np.int64),
                 read_only(flows.demand, np.float64), load,
                 *_weighing(kind, fabric, health))  # fmt: skip
    return load


@dataclass(frozen=True)
class Hashed:
    """Whole flows ridden by a default routing with `qps` QPs each, kept as flows and walked
    again wherever their QPs are needed (controller.model.kernels: `walk`, `hot_groups`,
    `hashed_crossing`) instead of held as a row per QP: a pod-wide
    all-to-all is 19M QP rows, 0.9 GB of arcs per walk. QP q of flow i is row i * qps + q
    after every other row, as `hashed_arcs` would list them."""

    kind: str
    flows: FlowSet
    parent: np.ndarray  # input flow of each
    seed: int
    qps: int

    def walk_args(self, fabric: Fabric, health: LinkHealth) -> tuple[
        tuple[np.ndarray, np.ndarray, np.uint64, int, np.ndarray, np.ndarray],
        tuple[bool, tuple[np.ndarray, ...]],
    ]:
        """(src, dst, seed, qps, alive, shape) and (weighted, tables) for the kernels."""
        return (_kernel_args(fabric, self.flows, health, self.seed, self.qps),
                _weighing(self.kind, fabric, health))  # fmt: skip

    def load(self, fabric: Fabric, health: LinkHealth, onto: np.ndarray | None = None
             ) -> np.ndarray:  # fmt: skip
        """Offered load per arc of every QP, added in row order onto `onto` (copied)."""
        load = np.zeros(fabric.num_arcs) if onto is None else np.array(onto, np.float64)
        walk, weighing = self.walk_args(fabric, health)
        kernels.walk(*walk, np.zeros(0, np.int64), np.zeros((0, MAX_HOPS), np.int64),
                     read_only(self.flows.demand, np.float64), load,
                     *weighing)  # fmt: skip
        return load

    def crossing(self, fabric: Fabric, health: LinkHealth, arcs: np.ndarray) -> np.ndarray:
        """Which flows have a QP on an arc in the mask `arcs`."""
        out = np.zeros(len(self.flows), bool)
        walk, weighing = self.walk_args(fabric, health)
        kernels.hashed_crossing(*walk, *weighing, np.ascontiguousarray(arcs, np.bool_), out)
        return out

    def arcs_of(self, fabric: Fabric, health: LinkHealth, which: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """(arcs [QPs, MAX_HOPS], their flow) of the QPs of the flows at `which`."""
        which = np.asarray(which, np.int64)
        arcs = hashed_routes(self.kind, fabric, self.flows.take(which), health, self.seed,
                             self.qps)[1]  # fmt: skip
        return arcs, np.repeat(which, self.qps)


def read_only(a: np.ndarray, dtype: type) -> np.ndarray:
    """`a` as a contiguous, read-only array of `dtype` (a view where it already is one): the
    kernels take their inputs so, whoever made them, and compile once (numba types a
    writable array apart from a read-only one)."""
    out: np.ndarray = np.ascontiguousarray(a, dtype)
    if out.flags.writeable:
        out = out.view()
        out.flags.writeable = False
    return out


def _checked_qps(qps: int) -> int:
    if qps < 1:
        raise InputError(f"qps must be >= 1, got {qps}")
    return qps


def _weighing(
    kind: str, fabric: Fabric, health: LinkHealth
) -> tuple[bool, tuple[np.ndarray, ...]]:
    """(weighted, tables) of model.kernels.walk for the default routing `kind`."""
    if kind == "eecmp":
        return False, NO_TABLES
    if kind == "wcmp":
        return True, _Bandwidth.of(fabric, health).kernel_tables()
    raise InputError(f"unknown hashing {kind!r}; known: {', '.join(HASHINGS)}")


def _kernel_args(
    fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int
) -> tuple[np.ndarray, np.ndarray, np.uint64, int, np.ndarray, np.ndarray]:
    """The fabric and flows as model.kernels.walk takes them."""
    shape = np.array([fabric.pods, fabric.rtsws_per_pod, fabric.ctsws_per_pod,
                      fabric.rack_links, fabric.atsws_per_plane, fabric.agg_links,
                      fabric.nics_per_host * fabric.hosts_per_rack, fabric.rack_base,
                      fabric.agg_base, fabric.nics_per_host, fabric.rtsws_per_rack],
                     np.int64)  # fmt: skip
    alive = np.ascontiguousarray(np.asarray(health.factor) > 0.0)
    return (read_only(flows.src_nic, np.int64), read_only(flows.dst_nic, np.int64),
            np.uint64(int(seed) & _MASK64), qps, alive, shape)  # fmt: skip


def hashed(
    kind: str, fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int = 16
) -> tuple[FlowSet, Assignment, np.ndarray]:
    """The default routing `kind` with `qps` queue pairs per flow, each hashed on its own.

    Returns (subflows, their assignment, parent flow index of every subflow)."""
    sub, parent, _ = split_qps(flows, qps)
    path, _ = hashed_routes(kind, fabric, flows, health, seed, qps)
    return sub, Assignment(sub, path), parent


def hashed_arcs(
    kind: str, fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int = 16
) -> tuple[FlowSet, np.ndarray, np.ndarray]:
    """`hashed` as (subflows, their arcs [F * qps, MAX_HOPS] (-1 padded, all -1 when
    unrouted), parent flow index of every subflow): what a simulation of it needs."""
    sub, parent, _ = split_qps(flows, qps)
    return sub, hashed_routes(kind, fabric, flows, health, seed, qps)[1], parent


def eecmp(
    fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int = 16
) -> tuple[FlowSet, Assignment, np.ndarray]:
    """E-ECMP: every flow opens `qps` queue pairs, each hashed on its own.

    Returns (subflows, their assignment, parent flow index of every subflow)."""
    return hashed("eecmp", fabric, flows, health, seed, qps)


def wcmp(
    fabric: Fabric, flows: FlowSet, health: LinkHealth, seed: int, qps: int = 16
) -> tuple[FlowSet, Assignment, np.ndarray]:
    """Capacity-aware WCMP: `qps` queue pairs per flow, hashed over capacity weights."""
    return hashed("wcmp", fabric, flows, health, seed, qps)

