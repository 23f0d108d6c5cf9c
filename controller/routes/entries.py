"""TE route entries: the exact-match overrides an assignment needs on every switch.

BGP gives every switch default ECMP routes; TE adds exact-match entries on top, each keyed
<ingress port, destination host> -> next hop, all ports being physical link ids. A packet
that matches no entry (or whose entry cannot be used) stays on ECMP and is still delivered.

Keying per tier, for a flow from NIC s (rack sr, pod sp) to host d (rack dr, pod dp) on path
(c, ku, j, mu, md, kd) (see controller.model.paths):

    hop 0  RTSW sr     (access link of s,          d) -> rack link (sr, c, ku)    up
    hop 1  CTSW sp/c   (rack link (sr, c, ku),     d) -> agg link (sp, c, j, mu)  up
    hop 2  ATSW c/j    (agg link (sp, c, j, mu),   d) -> agg link (dp, c, j, md)  down
    hop 3  CTSW dp/c   (agg link (dp, c, j, md),   d) -> rack link (dr, c, kd)    down

A same-pod flow has hop 0 and a hop 3 keyed on (rack link (sr, c, ku), d); a same-rack flow
needs nothing. The ingress port names the upstream link, so flows meet at an entry only when
they already share the path up to it; two flows meeting at one key with different next hops
are a conflict (`RouteConflict`, `route_conflicts`).

An entry is installed only where the fabric offers a choice at that hop: hop 0 when C*K > 1,
hop 1 when A*L > 1, hop 2 when L > 1, hop 3 when K > 1, and, where some cables of those
dimensions are not installed (a cable list with uneven parallel links, controller.model.
inventory), only where the switch has more than one installed link to choose from there.
Where there is one next hop, ECMP already takes it, and an entry would only cost table space
and churn.

QP buckets. A flow the solver split into QP buckets (controller.solver.qp_buckets) is steered at the
source RTSW only, where the entry key adds the bucket: <ingress port, destination host, QP
bucket>, matched on the RoCE UDP source port. The buckets' most common next hop becomes one
entry for all buckets (`qp == ALL_QPS`); only the buckets that leave on another link get an
entry of their own, which takes precedence. Switches after the source RTSW never look at
the bucket, so the buckets of one flow that meet there must agree, like any two flows.

Every entry points one hop closer to its destination (up before the turn, down after), the
same direction ECMP would go, so any mix of entries and ECMP defaults is loop-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.errors import RouteConflict
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.paths import (
    CROSS_POD,
    SAME_POD,
    agg_grid,
    decode,
    flow_class,
    hop_arc,
    path_index,
)
from controller.routes.tables import OWNER, RouteSet, Table

# Hop roles: the position of an entry along the path it steers, from the source.
RTSW_UP, CTSW_UP, ATSW_DOWN, CTSW_DOWN = 0, 1, 2, 3
ROLE_NAMES = ("rtsw-up", "ctsw-up", "atsw-down", "ctsw-down")


@dataclass(frozen=True)
class EntryKeys:
    """One row per (flow, hop) that needs an entry."""

    flow: np.ndarray  # int64 [E]
    in_arc: np.ndarray  # arriving arc; fixes the switch and the in_port
    out_arc: np.ndarray
    dst_host: np.ndarray
    role: np.ndarray
    qp: np.ndarray  # the flow's QP bucket at the source RTSW, ALL_QPS elsewhere

    def key(self, fabric: Fabric) -> np.ndarray:
        """One integer per distinct (arriving arc, destination host, qp)."""
        top = int(self.qp.max(initial=ALL_QPS))
        return entry_key(fabric, self.in_arc, self.dst_host, self.qp, top)

    def switch(self, fabric: Fabric) -> np.ndarray:
        """The switch node each row's entry lives on (the one its arriving arc enters)."""
        return fabric.arc_ends[1][self.in_arc]


@dataclass(frozen=True)
class _Hop:
    """A hop of a flow class that needs an entry: the position (in the padded path row) of
    the arc it arrives on, its role, and the path digits its next hops and all later ones
    depend on (flows meeting at its key must agree on them)."""

    pos: int
    role: int
    digits: tuple[str, ...]


def _hops(fabric: Fabric) -> dict[int, list[_Hop]]:
    """Per flow class, the hops that offer a choice and so need an entry (in path order)."""
    c, k = fabric.ctsws_per_pod, fabric.rack_links
    a, m = fabric.atsws_per_plane, fabric.agg_links
    every = ("c", "ku", "j", "mu", "md", "kd")
    pod = [(_Hop(0, RTSW_UP, every), c * k > 1), (_Hop(1, CTSW_DOWN, ("kd",)), k > 1)]
    cross = [
        (_Hop(0, RTSW_UP, every), c * k > 1),
        (_Hop(1, CTSW_UP, ("j", "mu", "md", "kd")), a * m > 1),
        (_Hop(2, ATSW_DOWN, ("md", "kd")), m > 1),
        (_Hop(3, CTSW_DOWN, ("kd",)), k > 1),
    ]
    return {
        SAME_POD: [hop for hop, needed in pod if needed],
        CROSS_POD: [hop for hop, needed in cross if needed],
    }


def _choices(
    fabric: Fabric, cls: int, hop: _Hop, flows: FlowSet, rows: np.ndarray,
    digits: dict[str, np.ndarray],
) -> np.ndarray:  # fmt: skip
    """Per row, the installed links the switch at `hop` chooses from for it: its RTSW's
    uplinks; its CTSW's ATSW links; the ATSW's links down to the destination pod's CTSW of
    the plane; the CTSW's links down to the destination RTSW."""
    src, dst, c = flows.src_nic[rows], flows.dst_nic[rows], digits["c"]
    sr = fabric.rtsw_of_nic(src)
    if hop.role == RTSW_UP:
        return _installed_rack_links(fabric).sum(axis=(1, 2))[sr]
    if hop.role == CTSW_UP:
        return _installed_agg_links(fabric).sum(axis=(2, 3))[fabric.pod_of_rtsw(sr), c]
    dr = fabric.rtsw_of_nic(dst)
    if hop.role == ATSW_DOWN:
        return _installed_agg_links(fabric).sum(axis=3)[fabric.pod_of_rtsw(dr), c, digits["j"]]
    return _installed_rack_links(fabric).sum(axis=2)[dr, c]


def _installed_rack_links(fabric: Fabric) -> np.ndarray:
    """bool [RTSWs, C, K]: which RTSW-CTSW links are installed."""
    grid = fabric.rack_link(np.arange(fabric.num_rtsws)[:, None, None],
                            np.arange(fabric.ctsws_per_pod)[None, :, None],
                            np.arange(fabric.rack_links)[None, None, :])  # fmt: skip
    return fabric.installed[grid]


def _installed_agg_links(fabric: Fabric) -> np.ndarray:
    """bool [pods, C, A, L]: which CTSW-ATSW links are installed."""
    return fabric.installed[agg_grid(fabric)]


def entry_keys(fabric: Fabric, assignment: Assignment, arcs: np.ndarray | None = None) -> EntryKeys:
    """The entry rows of `assignment`, by flow class, hop, then row; `arcs` are its
    Assignment.arcs, if at hand. Without them only the arc columns the hops need are made
    (from the path digits, class by class), not every arc of every path."""
    flows = assignment.flows
    cls = flow_class(fabric, flows.src_nic, flows.dst_nic)
    dst_host = flows.dst_host(fabric)
    routed = assignment.routed
    parts: list[tuple[np.ndarray, ...]] = []
    for flow_cls, hops in _hops(fabric).items():
        if not hops:
            continue
        rows = np.flatnonzero((cls == flow_cls) & routed)
        if not rows.size:
            continue
        column = _arc_columns(fabric, flow_cls, assignment, rows, arcs)
        uneven = not fabric.installed.all()
        digits = decode(fabric, np.full(rows.size, flow_cls, np.int8), assignment.path[rows]
                        ) if uneven else {}  # fmt: skip
        for hop in hops:
            at: slice | np.ndarray = slice(None)
            if uneven:  # only where the switch has more than one installed next hop
                at = _choices(fabric, flow_cls, hop, flows, rows, digits) > 1
            here = rows[at]
            qp = flows.qp[here] if hop.role == RTSW_UP else np.full(here.size, ALL_QPS)
            parts.append(
                (here, column(hop.pos)[at], column(hop.pos + 1)[at], dst_host[here],
                 np.full(here.size, hop.role, np.int8), qp)
            )  # fmt: skip
    if not parts:
        empty = np.zeros(0, np.int64)
        return EntryKeys(empty, empty, empty, empty, np.zeros(0, np.int8), empty)
    cols = [np.concatenate(col) for col in zip(*parts, strict=True)]
    return EntryKeys(*cols)


def _arc_columns(
    fabric: Fabric, cls: int, assignment: Assignment, rows: np.ndarray, arcs: np.ndarray | None
) -> Callable[[int], np.ndarray]:
    """Column `pos` of the arcs of `rows` (all of class `cls`), each made once on demand."""
    if arcs is not None:
        return lambda pos: arcs[rows, pos]
    flows = assignment.flows
    src, dst = flows.src_nic[rows], flows.dst_nic[rows]
    digits = decode(fabric, np.full(rows.size, cls, np.int8), assignment.path[rows])
    made: dict[int, np.ndarray] = {}

    def column(pos: int) -> np.ndarray:
        if pos not in made:
            made[pos] = hop_arc(fabric, cls, src, dst, digits, pos)
        return made[pos]

    return column


def align_entries(
    fabric: Fabric, flows: FlowSet, path: np.ndarray, priority: np.ndarray | None = None
) -> np.ndarray:
    """Paths under which flows that meet at an entry key leave it on the same next hops:
    hop by hop from the source, every flow copies the later digits of the member of its key
    with the smallest (priority, index). The result has no route conflicts."""
    path = np.asarray(path, np.int64).copy()
    pr = np.zeros(len(flows)) if priority is None else np.asarray(priority, np.float64)
    cls_all = flow_class(fabric, flows.src_nic, flows.dst_nic)
    dst_host = flows.dst_host(fabric)
    top_qp = int(flows.qp.max(initial=ALL_QPS))
    for cls, hops in _hops(fabric).items():
        rows = np.flatnonzero((cls_all == cls) & (path >= 0))
        if rows.size < 2:
            continue
        src, dst = flows.src_nic[rows], flows.dst_nic[rows]
        cls_arr = np.full(rows.size, cls)
        digits = decode(fabric, cls_arr, path[rows])
        # members of a key in (priority, index) order: rows ascend, so a stable sort by
        # priority, then a stable sort by key within it
        by_pr = np.argsort(pr[rows], kind="stable")
        changed = False
        for hop in hops:
            arc = hop_arc(fabric, cls, src, dst, digits, hop.pos)
            qp = flows.qp[rows] if hop.role == RTSW_UP else np.full(rows.size, ALL_QPS)
            key = entry_key(fabric, arc, dst_host[rows], qp, top_qp)
            order = by_pr[_stable_order(key[by_pr])]
            k = key[order]
            first = np.r_[True, k[1:] != k[:-1]]
            head = order[np.maximum.accumulate(np.where(first, np.arange(k.size), 0))]
            follower = head != order
            if not follower.any():
                continue
            changed = True
            for name in hop.digits:
                digits[name][order[follower]] = digits[name][head[follower]]
        if changed:
            path[rows] = path_index(fabric, cls_arr, digits)
    return path


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable") for non-negative integer keys, as 16-bit radix passes
    from the lowest digit (numpy sorts 16-bit keys by counting: 1.5-2x faster than a merge
    sort of the 2M 37-bit entry keys of cluster-100k)."""
    if not keys.size or int(keys.min()) < 0:
        return np.argsort(keys, kind="stable")
    top = int(keys.max())
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    shift = 16
    while top >> shift:
        digit = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


def entry_key(
    fabric: Fabric, arc: np.ndarray, dst_host: np.ndarray, qp: np.ndarray, top_qp: int
) -> np.ndarray:
    """One integer per (arriving arc, destination host, qp), qp in [ALL_QPS, top_qp]."""
    return (arc * fabric.num_hosts + dst_host) * (top_qp + 2) + (qp - ALL_QPS)


@dataclass(frozen=True)
class _Runs:
    """The entry rows grouped by key: `order` sorts them by key (stable: a key's members
    by row), `ordered` is key[order], `first` marks where each key's run starts in that
    order; the keys of one (in_arc, dst_host) are those with the same key // `span`."""

    key: np.ndarray
    order: np.ndarray
    ordered: np.ndarray
    first: np.ndarray
    span: int


def _runs(fabric: Fabric, keys: EntryKeys) -> _Runs:
    """The rows' runs of equal keys. The rows come in runs (by class, hop, then row), so a
    stable merge sort takes a few merges (4-5x faster here than _stable_order's radix
    passes, which suit keys in no order)."""
    top = int(keys.qp.max(initial=ALL_QPS))
    key = entry_key(fabric, keys.in_arc, keys.dst_host, keys.qp, top)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    return _Runs(key, order, ordered, np.r_[True, ordered[1:] != ordered[:-1]], top + 2)


def _disagree(
    fabric: Fabric, keys: EntryKeys, runs: _Runs | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(row, row it disagrees with) for every entry row whose next hop differs from the
    first flow's (by index) at its key. A whole flow (ALL_QPS) at the source RTSW also
    meets every bucket of its key, so a bucket row that differs from it disagrees too."""
    runs = _runs(fabric, keys) if runs is None else runs
    order, ordered, first = runs.order, runs.ordered, runs.first
    flow = keys.flow[order]
    if not ((flow[1:] > flow[:-1]) | first[1:]).all():  # a key's members not by flow
        order = np.lexsort((keys.flow, runs.key))
        ordered = runs.key[order]
        first = np.r_[True, ordered[1:] != ordered[:-1]]
    nh = keys.out_arc[order]
    rows, against = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    if ((nh[1:] != nh[:-1]) & ~first[1:]).any():  # some key's members differ
        head = np.maximum.accumulate(np.where(first, np.arange(first.size), 0))
        bad = np.flatnonzero(nh != nh[head])
        rows, against = [order[bad]], [order[head[bad]]]
    qp = keys.qp[order]
    split = qp != ALL_QPS
    # the keys of one (in_arc, dst_host) are adjacent, the whole flows' (ALL_QPS) first:
    # buckets meet a whole flow only where a whole row is followed by a bucket row
    base = ordered // runs.span
    new_base = np.r_[True, base[1:] != base[:-1]]
    if (~split[:-1] & split[1:] & ~new_base[1:]).any():
        lead = np.maximum.accumulate(np.where(new_base, np.arange(base.size), 0))
        meet = np.flatnonzero(split & (qp[lead] == ALL_QPS) & (nh != nh[lead]))
        by_row = np.argsort(order[meet], kind="stable")  # listed by row, as before
        rows.append(order[meet][by_row])
        against.append(order[lead[meet]][by_row])
    return np.concatenate(rows), np.concatenate(against)


def route_conflicts(fabric: Fabric, assignment: Assignment) -> np.ndarray:
    """Mask of flows that disagree with the first flow (by index) at some entry key.

    Unrouting every flow in the mask leaves a conflict-free assignment.
    """
    keys = entry_keys(fabric, assignment)
    out = np.zeros(len(assignment.flows), dtype=bool)
    if not keys.flow.size:
        return out
    rows, _ = _disagree(fabric, keys)
    out[keys.flow[rows]] = True
    return out


def _check_conflicts(fabric: Fabric, keys: EntryKeys, runs: _Runs | None = None) -> None:
    rows, against = _disagree(fabric, keys, runs)
    if not rows.size:
        return
    bad = rows
    i, h = rows[0], against[0]
    switch = fabric.node_name(int(fabric.arc_ends[1][keys.in_arc[i]]))
    raise RouteConflict(
        f"{bad.size} conflicting flow(s); first: flows {keys.flow[h]} and {keys.flow[i]} both "
        f"reach {switch} on {fabric.link_name(int(keys.in_arc[i] // 2))} for "
        f"{fabric.host_name(int(keys.dst_host[i]))} but want next hops "
        f"{fabric.link_name(int(keys.out_arc[h] // 2))} and "
        f"{fabric.link_name(int(keys.out_arc[i] // 2))}: a switch's entry (its in-port and "
        "the destination host) has one next hop, so flows that meet there leave it together"
    )


def installed_keys(
    fabric: Fabric, keys: EntryKeys, runs: _Runs | None = None
) -> tuple[np.ndarray, ...]:
    """(in_arc, out_arc, dst_host, qp, row) of every entry a switch holds: one per distinct
    key, QP buckets folded (see _fold_buckets); `row` is a row of `keys` it came from."""
    runs = _runs(fabric, keys) if runs is None else runs
    first = runs.order[runs.first]  # np.unique's return_index
    in_arc, out_arc, dst = keys.in_arc[first], keys.out_arc[first], keys.dst_host[first]
    qp = _fold_buckets(fabric, in_arc, out_arc, dst, keys.qp[first])
    keep = qp != _FOLDED
    return in_arc[keep], out_arc[keep], dst[keep], qp[keep], first[keep]


def build_routes(fabric: Fabric, assignment: Assignment, owner: str = OWNER) -> RouteSet:
    """The TE entries that steer every routed flow onto its assigned path."""
    keys = entry_keys(fabric, assignment)
    if not keys.flow.size:
        return RouteSet({})
    runs = _runs(fabric, keys)  # one sort for the check and the entries
    _check_conflicts(fabric, keys, runs)
    in_arc, out_arc, dst, qp, _ = installed_keys(fabric, keys, runs)
    switch = fabric.arc_ends[1][in_arc]
    in_port, next_hop = in_arc // 2, out_arc // 2
    # one pass in (switch, in_port, dst_host, qp) order: each table comes out sorted by match
    order = _match_order(fabric, switch, in_port, dst, qp)
    switch, in_port, dst, next_hop, qp = (a[order] for a in (switch, in_port, dst, next_hop, qp))
    starts = np.flatnonzero(np.r_[True, switch[1:] != switch[:-1]])  # sorted: runs
    ids = switch[starts]
    names = [fabric.node_name(int(s)) for s in ids]
    bounds = np.r_[starts, switch.size].tolist()
    owners = np.broadcast_to(np.array(owner), switch.size)  # one name, no copy per row
    for column in (in_port, dst, next_hop, qp):  # the tables' slices: read-only already,
        column.flags.writeable = False  # so a Table takes them as they are
    tables: dict[str, Table] = {}
    for i in sorted(range(len(names)), key=names.__getitem__):
        rows = slice(bounds[i], bounds[i + 1])
        tables[names[i]] = Table(names[i], in_port[rows], dst[rows], next_hop[rows],
                                 owners[rows], qp[rows])  # fmt: skip
    return RouteSet(tables)


def _match_order(
    fabric: Fabric, switch: np.ndarray, in_port: np.ndarray, dst: np.ndarray, qp: np.ndarray
) -> np.ndarray:
    """The row order by (switch, in_port, dst_host, qp). Rows come nearly in that order (by
    arriving arc), so a stable sort of one combined key is a few merges of runs."""
    qps = int(qp.max(initial=ALL_QPS)) - ALL_QPS + 1
    span = float(fabric.num_nodes) * fabric.num_links * fabric.num_hosts * qps
    if span >= 2.0**62:
        return np.lexsort((qp, dst, in_port, switch))
    key = ((switch * fabric.num_links + in_port) * fabric.num_hosts + dst) * qps + (qp - ALL_QPS)
    return np.argsort(key, kind="stable")


_FOLDED = -2  # a bucket entry covered by its key's all-buckets entry


def _fold_buckets(
    fabric: Fabric, in_arc: np.ndarray, out_arc: np.ndarray, dst: np.ndarray, qp: np.ndarray
) -> np.ndarray:
    """The qp of each distinct entry after folding buckets: per (in_arc, dst) whose entries
    are all buckets, the most common next hop (ties: the smallest arc) becomes one ALL_QPS
    entry and its buckets are dropped (_FOLDED); the other buckets keep entries of their own.

    The entries come sorted by (in_arc, dst, qp), as _installed takes them from np.unique,
    so each (in_arc, dst) is one run that starts with its ALL_QPS entry if it has one."""
    qp = qp.copy()
    split = qp != ALL_QPS
    if not split.any():
        return qp
    base = in_arc * fabric.num_hosts
    base += dst  # (in place: at a million rows fresh memory costs as much as arithmetic)
    run = _run_ids(base)
    whole_run = np.zeros(int(run[-1]) + 1, bool)
    whole_run[run[~split]] = True
    covered = split & whole_run[run]  # agree with its all-buckets entry (conflict-checked)
    qp[covered] = _FOLDED
    rows = np.flatnonzero(split & ~covered)
    if not rows.size:
        return qp
    won = _bucket_winners(fabric, run[rows], out_arc[rows])
    if won is None:
        won = _bucket_winners_sorted(fabric, run[rows], out_arc[rows])
    w, kw = rows[won], run[rows[won]]
    qp[w] = _FOLDED
    qp[w[np.r_[True, kw[1:] != kw[:-1]]]] = ALL_QPS
    return qp


def _bucket_winners(fabric: Fabric, run: np.ndarray, out_arc: np.ndarray) -> np.ndarray | None:
    """Mask of the bucket rows that leave on their key's most common next hop (ties: the
    smallest arc), counted per key in a table of the source RTSW's uplinks, which is where
    bucket entries live (no sort); None if some next hop is not such an uplink."""
    width = fabric.ctsws_per_pod * fabric.rack_links
    link = out_arc // 2
    link -= fabric.rack_base
    if (out_arc & 1).any() or link.min() < 0 or link.max() >= fabric.num_rack_links:
        return None
    local = np.remainder(link, width, out=link)  # the uplinks of one RTSW, in link order
    key = _run_ids(run)  # keys ascend: runs
    if (int(key[-1]) + 1) * width > 4 * run.size + 4096:  # a sparse table: sort instead
        return None
    cell = key * np.int64(width)
    cell += local
    counts = np.bincount(cell, minlength=(int(key[-1]) + 1) * width)
    mode = counts.reshape(-1, width).argmax(axis=1)  # the first (smallest) of the largest
    return np.asarray(local == mode[key])


def _run_ids(values: np.ndarray) -> np.ndarray:
    """0, 1, ... numbering the runs of equal neighbours (int32: rows < 2**31)."""
    new = np.empty(values.size, bool)
    new[:1] = True
    np.not_equal(values[1:], values[:-1], out=new[1:])
    run = np.cumsum(new, dtype=np.int32)
    run -= 1
    return run


def _bucket_winners_sorted(fabric: Fabric, run: np.ndarray, out_arc: np.ndarray) -> np.ndarray:
    """_bucket_winners for any next hops: by sorting the rows by (key, next hop)."""
    order = np.argsort(run * np.int64(fabric.num_arcs) + out_arc, kind="stable")
    k, nh = run[order], out_arc[order]
    new_pair = np.r_[True, (k[1:] != k[:-1]) | (nh[1:] != nh[:-1])]
    starts = np.flatnonzero(new_pair)
    counts = np.diff(np.r_[starts, k.size])
    pair_key = k[starts]
    # the first pair with the largest count per key (pairs are sorted by next hop)
    key_start = np.flatnonzero(np.r_[True, pair_key[1:] != pair_key[:-1]])
    pairs_per_key = np.diff(np.r_[key_start, pair_key.size])
    top = np.repeat(np.maximum.reduceat(counts, key_start), pairs_per_key)
    at_top = np.flatnonzero(counts == top)
    best = at_top[np.r_[True, pair_key[at_top][1:] != pair_key[at_top][:-1]]]
    mode = nh[starts[best]]  # one per key, in key order
    rows_per_key = np.add.reduceat(counts, key_start)
    won = np.zeros(run.size, bool)
    won[order[np.repeat(mode, rows_per_key) == nh]] = True
    return won
