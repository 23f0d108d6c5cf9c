"""What the data plane carries for an assignment: TE rows on their paths, and every row
without a TE path walked through the installed entries and the fabric's default hashing.

A row with a path has TE entries along it (controller.routes.entries); it is one competitor
per queue pair on that path: a whole flow (qp ALL_QPS) stands for `qps` QPs, a QP bucket for
one. A row without a path (over the table budget, handed back by the certificate, or with
no healthy path) has no entry of its own and its packets ride the defaults: a whole flow's
`qps` QPs (qp 0..qps-1, demand / qps each) and a bucket's one QP are walked hop by hop,
taking an installed entry where one matches the packet (<ingress link, destination host>,
at the source RTSW also the QP bucket) and its next hop is usable, and the default hashing
(controller.model.hashing, `kind` with `seed`) elsewhere. Entries are derived from the TE
rows' paths the way controller.routes.entries derives them; at the source RTSW a bucket's own
entry is taken before its flow's whole entry (the fold of buckets into one all-buckets entry
is not modelled: it only matters to a path-less row sharing a source NIC and destination host
with TE rows, which table fitting and the certificate never leave).

With no TE row at all, this is exactly the default hashing of the flows: the same subflows,
the same hashes, the same paths.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.hashing import (
    QP_KEY_SPAN,
    Hashed,
    Overrides,
    chooser,
    hashed_routes,
    overriding,
    route,
)
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD, MAX_HOPS, SAME_POD, decode, flow_class
from controller.model.rates import SimReport, simulate


@dataclass(frozen=True)
class Carried:
    """Rows as the data plane carries them, ready for controller.model.rates.simulate."""

    flows: FlowSet  # one row per TE row, one per QP of a path-less row
    arcs: np.ndarray  # [rows, MAX_HOPS] arc ids, -1 padded (all -1: not delivered)
    parent: np.ndarray  # row -> input flow index
    weight: np.ndarray  # QPs each row stands for
    walked: int  # rows that ride the defaults
    # not expanded (carried(expand=False)): the whole path-less flows that hash exactly as
    # the default routing does, walked wherever their QPs are needed; their QPs come after
    # the rows (controller.model.hashing.Hashed)
    hashed: Hashed | None = None


def overrides_of(fabric: Fabric, assignment: Assignment) -> Overrides:
    """The TE entries of an assignment's routed rows, as per-hop lookups (first row wins)."""
    flows, path = assignment.flows, assignment.path
    te = np.flatnonzero(path != UNROUTED)
    H = np.int64(fabric.num_hosts)
    K, L = fabric.rack_links, fabric.agg_links
    cls = flow_class(fabric, flows.src_nic[te], flows.dst_nic[te])
    keep = cls != 0
    te, cls = te[keep], cls[keep]
    src, dst = flows.src_nic[te], flows.dst_nic[te]
    host = fabric.host_of_nic(dst)
    sr = fabric.rtsw_of_nic(src)
    dr = fabric.rtsw_of_nic(dst)
    d = decode(fabric, cls, path[te])
    cross = cls == CROSS_POD
    same = cls == SAME_POD
    k0 = (src * H + host) * QP_KEY_SPAN + (flows.qp[te] + 1)
    o0 = d["c"] * K + d["ku"]
    rack_up = np.asarray(fabric.rack_link(sr, d["c"], d["ku"]), np.int64)
    k1 = rack_up[cross] * H + host[cross]
    o1 = (d["j"] * L + d["mu"])[cross]
    agg_up = np.asarray(
        fabric.agg_link(fabric.pod_of_rtsw(sr), d["c"], d["j"], d["mu"]), np.int64
    )
    k2 = agg_up[cross] * H + host[cross]
    o2 = d["md"][cross]
    agg_down = np.asarray(
        fabric.agg_link(fabric.pod_of_rtsw(dr), d["c"], d["j"], d["md"]), np.int64
    )
    in3 = np.where(cross, agg_down, rack_up)
    k3 = (in3 * H + host)[cross | same]
    o3 = d["kd"][cross | same]

    def table(k: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        uk, first = np.unique(k, return_index=True)
        return uk, np.asarray(o, np.int64)[first]

    tables = [table(k0, o0), table(k1, o1), table(k2, o2), table(k3, o3)]
    return Overrides(
        keys=(tables[0][0], tables[1][0], tables[2][0], tables[3][0]),
        option=(tables[0][1], tables[1][1], tables[2][1], tables[3][1]),
    )


def carried(
    fabric: Fabric,
    health: LinkHealth,
    assignment: Assignment,
    parent: np.ndarray,
    *,
    kind: str,
    seed: int,
    qps: int,
    overrides: Overrides | None = None,
    expand: bool = True,
) -> Carried:
    """The assignment's rows as carried (module docstring); `parent[i]` is row i's input
    flow; `overrides`: overrides_of(fabric, assignment), if at hand. `expand=False`: the
    whole path-less rows towards hosts no entry steers are not expanded into a row per QP
    but kept as `Carried.hashed` after the other rows (a million QP rows of a hashed
    all-to-all are 0.9 GB a seed; controller.model.rates takes them as they are)."""
    flows, path = assignment.flows, assignment.path
    parent = np.asarray(parent, np.int64)
    te = np.flatnonzero(path != UNROUTED)
    off = np.flatnonzero(path == UNROUTED)
    te_weight = np.where(flows.qp[te] == ALL_QPS, float(qps), 1.0)
    if not off.size:
        te_arcs = Assignment(flows.take(te), path[te]).arcs(fabric)
        return Carried(flows.take(te), te_arcs, parent[te], te_weight, 0)
    whole = flows.qp[off] == ALL_QPS
    # Rows towards a host no TE entry steers walk exactly as hashed: compiled, per whole
    # flow (model.kernels.walk); the rest hop by hop through the entries. Each QP's walk
    # depends only on its own packet, so splitting the rows changes no path.
    steered = np.unique(fabric.host_of_nic(flows.dst_nic[te]))
    plain = whole & ~np.isin(fabric.host_of_nic(flows.dst_nic[off]), steered)
    if not expand and plain.any():
        return _hashed_apart(fabric, health, assignment, parent, off, plain, kind=kind,
                             seed=seed, qps=qps, overrides=overrides)
    te_arcs = Assignment(flows.take(te), path[te]).arcs(fabric)  # once, not again apart
    count = np.where(whole, qps, 1)
    row = np.repeat(off, count)
    first = np.cumsum(count) - count
    within = np.arange(row.size) - np.repeat(first, count)
    qp = np.where(np.repeat(whole, count), within, flows.qp[row])
    demand = flows.demand[row] / np.where(np.repeat(whole, count), qps, 1)
    sub = FlowSet(flows.src_nic[row], flows.dst_nic[row], demand, flows.job[row],
                  flows.job_ids, qp)  # fmt: skip
    sub_arcs = np.empty((row.size, MAX_HOPS), np.int64)
    if plain.any():
        pos = (first[plain][:, None] + np.arange(qps)).ravel()
        sub_arcs[pos] = hashed_routes(kind, fabric, flows.take(off[plain]), health, seed,
                                      qps)[1]  # fmt: skip
    walk = np.flatnonzero(~np.repeat(plain, count))
    if walk.size:
        part, part_qp = sub.take(walk), qp[walk]
        base = chooser(kind, fabric, health, seed, part, part_qp)
        if te.size:
            base = overriding(fabric, part, part_qp,
                              overrides or overrides_of(fabric, assignment), base)  # fmt: skip
        sub_arcs[walk] = Assignment(part, route(fabric, part, health, base)).arcs(fabric)
    return Carried(
        flows=_joined(flows.take(te), sub),
        arcs=np.concatenate([te_arcs, sub_arcs]),
        parent=np.concatenate([parent[te], parent[row]]),
        weight=np.concatenate([te_weight, np.ones(row.size)]),
        walked=int(row.size),
    )


def simulate_carried(
    fabric: Fabric,
    health: LinkHealth,
    assignment: Assignment,
    parent: np.ndarray | None = None,
    *,
    kind: str,
    seed: int,
    qps: int,
    model: str = "striped",
) -> SimReport:
    """controller.model.rates.simulate of the assignment's rows as carried (`carried`):
    whole flows as `qps` QPs on their TE path, rows without a TE entry walked through the
    entries and hashed (`kind`, `seed`) elsewhere; `parent` maps rows to input flows
    (default: a row each), shares counted per input flow under `model`."""
    rows = np.arange(len(assignment.flows), dtype=np.int64) if parent is None else parent
    plane = carried(fabric, health, assignment, np.asarray(rows), kind=kind, seed=seed, qps=qps)
    return simulate(fabric, health, plane.arcs, plane.flows, plane.parent,
                    weight=plane.weight, model=model)  # fmt: skip


def _hashed_apart(
    fabric: Fabric,
    health: LinkHealth,
    assignment: Assignment,
    parent: np.ndarray,
    off: np.ndarray,
    plain: np.ndarray,
    *,
    kind: str,
    seed: int,
    qps: int,
    overrides: Overrides | None,
) -> Carried:
    """`carried` with the plain whole rows kept as Hashed: the TE rows, then the other
    path-less rows expanded and walked through the entries, then the hashed ones."""
    flows, path = assignment.flows, assignment.path
    rows = np.concatenate([np.flatnonzero(path != UNROUTED), off[~plain]])
    head = carried(fabric, health, Assignment(flows.take(rows), path[rows]), parent[rows],
                   kind=kind, seed=seed, qps=qps,
                   overrides=overrides or overrides_of(fabric, assignment))  # fmt: skip
    hashed = Hashed(kind, flows.take(off[plain]), parent[off[plain]], seed, qps)
    return replace(head, hashed=hashed, walked=head.walked + int(plain.sum()) * qps)


def _joined(a: FlowSet, b: FlowSet) -> FlowSet:
    """Rows of `a` then `b`, which share one job table."""
    return FlowSet(
        np.concatenate([a.src_nic, b.src_nic]), np.concatenate([a.dst_nic, b.dst_nic]),
        np.concatenate([a.demand, b.demand]), np.concatenate([a.job, b.job]), a.job_ids,
        np.concatenate([a.qp, b.qp]),
    )  # fmt: skip
