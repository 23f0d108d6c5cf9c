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
hop 1 when A*L > 1, hop 2 when L > 1, hop 3 when K > 1. Where there is one next hop, ECMP
already takes it, and an entry would only cost table space and churn.

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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple, overload

import numpy as np

from controller.errors import RouteConflict, RouteError
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import AGG, Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.paths import (
    CROSS_POD,
    SAME_POD,
    decode,
    flow_class,
    hop_arc,
    path_index,
)

OWNER = "fabric-te"
MAX_QP_BUCKETS = 1 << 16  # a bucket is matched on the UDP source port: 16 bits at most

# Hop roles: the position of an entry along the path it steers, from the source.
RTSW_UP, CTSW_UP, ATSW_DOWN, CTSW_DOWN = 0, 1, 2, 3
ROLE_NAMES = ("rtsw-up", "ctsw-up", "atsw-down", "ctsw-down")


class Entry(NamedTuple):
    """One exact-match TE entry: on `switch`, (in_port, dst_host[, qp bucket]) -> next_hop
    (link ids). `qp == ALL_QPS` matches every bucket; a bucket's own entry takes precedence.
    A named tuple: hundreds of thousands are made where a consumer lists them one by one."""

    switch: str
    in_port: int
    dst_host: int
    next_hop: int
    owner: str = OWNER
    qp: int = ALL_QPS

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.switch, self.in_port, self.dst_host, self.qp)

    @property
    def match(self) -> tuple[int, int, int]:
        """What the entry matches on its switch: (in_port, dst_host, qp)."""
        return (self.in_port, self.dst_host, self.qp)


_NO_INTS = np.zeros(0, np.int64)
_NO_INTS.flags.writeable = False
_NO_OWNERS = np.zeros(0, np.str_)
_NO_OWNERS.flags.writeable = False


class Table(Sequence[Entry]):
    """One switch's entries as columns, sorted by (in_port, dst_host, qp), one row per key.

    The hot paths (build, diff, push into a driver that takes tables, read-back, route log)
    work on the columns; the `Entry` objects are made only when a consumer lists them, once.
    Columns are read-only, so tables are shared freely (a read-back may be the pushed table).
    """

    __slots__ = ("switch", "in_port", "dst_host", "next_hop", "owner", "qp", "_entries")

    def __init__(
        self,
        switch: str,
        in_port: np.ndarray = _NO_INTS,
        dst_host: np.ndarray = _NO_INTS,
        next_hop: np.ndarray = _NO_INTS,
        owner: np.ndarray | str = _NO_OWNERS,
        qp: np.ndarray | None = None,
    ) -> None:
        """Columns already in match order (unchecked); `owner` may be one name for all."""
        self.switch = switch
        self._entries: tuple[Entry, ...] | None = None
        self.in_port = _frozen(in_port, np.int64)
        n = self.in_port.size
        if not n:  # the empty table: shared columns
            self.dst_host = self.next_hop = self.qp = _NO_INTS
            self.owner = _NO_OWNERS
            return
        self.dst_host = _frozen(dst_host, np.int64)
        self.next_hop = _frozen(next_hop, np.int64)
        self.owner = _frozen(np.full(n, owner) if isinstance(owner, str) else owner, np.str_)
        self.qp = _frozen(np.full(n, ALL_QPS) if qp is None else qp, np.int64)
        if not self.dst_host.size == self.next_hop.size == self.owner.size == self.qp.size == n:
            raise RouteError(f"table of {switch}: columns of different lengths")

    @classmethod
    def empty(cls, switch: str) -> Table:
        """The empty table of `switch`, shared (tables are read-only): diffs and batches
        ask for thousands of them."""
        table = _EMPTY.get(switch)
        if table is None:
            table = Table(switch)
            if len(_EMPTY) < _EMPTY_KEPT:
                table = _EMPTY.setdefault(switch, table)
        return table

    @classmethod
    def of(cls, switch: str, entries: Iterable[Entry]) -> Table:
        """The table of `entries` (all on `switch`), sorted by match; a key given twice
        keeps the last entry."""
        rows = {e.match: e for e in entries}
        for e in rows.values():
            if e.switch != switch:
                raise RouteError(f"table of {switch} given an entry of {e.switch}")
        ordered = [rows[k] for k in sorted(rows)]
        if not ordered:
            return cls(switch)
        _, ip, d, nh, own, q = zip(*ordered, strict=True)
        table = cls(switch, np.array(ip), np.array(d), np.array(nh), np.array(own), np.array(q))
        table._entries = tuple(ordered)
        return table

    def take(self, rows: np.ndarray | slice) -> Table:
        """The rows `rows` (indices in ascending order, a mask or a slice) as a table."""
        return Table(self.switch, self.in_port[rows], self.dst_host[rows], self.next_hop[rows],
                     self.owner[rows], self.qp[rows])  # fmt: skip

    def entries(self) -> tuple[Entry, ...]:
        """The rows as `Entry` objects (made on first use, then kept)."""
        if self._entries is None:
            n = self.in_port.size
            one = n > 0 and bool((self.owner == self.owner[0]).all())
            owners: Iterable[str] = (  # one str object for a table of one owner
                repeat(str(self.owner[0]), n) if one else self.owner.tolist()
            )
            self._entries = tuple(
                map(Entry._make, zip(repeat(self.switch, n), self.in_port.tolist(),
                                     self.dst_host.tolist(), self.next_hop.tolist(), owners,
                                     self.qp.tolist(), strict=True))
            )  # fmt: skip
        return self._entries

    def rows(self, lo: int, hi: int) -> tuple[Entry, ...]:
        """Entries lo..hi-1, made for those rows only unless the whole table is listed
        already (a page of a large table costs the page, not the table)."""
        if self._entries is not None or (lo <= 0 and hi >= len(self)):
            return self.entries()[lo:hi]
        return self.take(slice(max(lo, 0), max(hi, lo, 0))).entries()

    def same(self, other: Table) -> bool:
        """Whether two tables hold the same entries (compared as columns)."""
        if self is other:
            return True
        return (
            self.switch == other.switch
            and self.in_port.size == other.in_port.size
            and all(
                a is b or np.array_equal(a, b)
                for a, b in zip(self.columns(), other.columns(), strict=True)
            )
        )

    def columns(self) -> tuple[np.ndarray, ...]:
        """(in_port, dst_host, next_hop, owner, qp)."""
        return (self.in_port, self.dst_host, self.next_hop, self.owner, self.qp)

    def owned_by(self, owner: str) -> np.ndarray:
        """Mask of the rows of `owner`."""
        return np.asarray(self.owner == owner, dtype=bool)

    def updated(self, put: Table, drop: Table) -> Table:
        """This table with `put`'s entries set (replacing any on their matches), then the
        matches of `drop` removed. Into an empty table, `put` itself."""
        if not len(self) and not len(drop):
            return put
        kt, kp, kd = match_keys(self, put, drop)  # each ascending, one row per match
        if kd.size:
            keep_put = ~_among(kp, kd)
            if not keep_put.all():
                put, kp = put.take(keep_put), kp[keep_put]
        gone = _among(kt, kp) | _among(kt, kd) if kp.size or kd.size else None
        kept = self if gone is None or not gone.any() else self.take(~gone)
        if not len(put):
            return kept
        if not len(kept):
            return put
        kk = kt if gone is None else kt[~gone]
        order = np.argsort(np.concatenate([kk, kp]), kind="stable")
        cols = [np.concatenate([a, b])[order] for a, b in zip(kept.columns(), put.columns(),
                                                              strict=True)]  # fmt: skip
        return Table(self.switch, *cols)

    def __len__(self) -> int:
        return int(self.in_port.size)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries())

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Entry, ...]: ...
    def __getitem__(self, index: int | slice) -> Entry | tuple[Entry, ...]:
        return self.entries()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Table):
            return self.same(other)
        if isinstance(other, tuple | list):
            return self.entries() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Table({self.switch!r}, {len(self)} entries)"


_EMPTY: dict[str, Table] = {}  # Table.empty's, by switch name
_EMPTY_KEPT = 1 << 16  # names kept at most (names may come from requests)


def _frozen(column: np.ndarray, dtype: type) -> np.ndarray:
    if column is _NO_INTS or column is _NO_OWNERS:
        return column
    out: np.ndarray = np.asarray(column, dtype=dtype)
    if out.ndim != 1:
        raise RouteError(f"a table column must be one-dimensional, not of shape {out.shape}")
    if out.flags.writeable:
        if out is column:  # the caller's array: keep it theirs
            out = out.view()
        out.flags.writeable = False
    return out


def _among(keys: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """`np.isin(keys, ref)` for an ascending `ref` (a table's match keys): a binary search
    (np.isin hashes or sorts both, which costs more on the tables of one switch)."""
    if not ref.size:
        return np.zeros(keys.size, bool)
    return np.asarray(ref.take(np.searchsorted(ref, keys), mode="clip") == keys)


def match_keys(*tables: Table) -> list[np.ndarray]:
    """One int64 per row of each table, ordered as (in_port, dst_host, qp) and equal exactly
    where the matches are: keys of different tables compare."""
    cols = [(t.in_port, t.dst_host, t.qp) for t in tables]
    ip, d, q = (np.concatenate(c) if len(tables) > 1 else c[0] for c in zip(*cols, strict=True))
    if not ip.size:
        return [_NO_INTS for _ in tables]
    hosts, qps = int(d.max()) + 1, int(q.max()) - ALL_QPS + 1
    fits = (
        min(int(ip.min()), int(d.min())) >= 0
        and int(q.min()) >= ALL_QPS
        and float(ip.max() + 1) * hosts * qps < 2.0**62
    )
    if fits:
        key = (ip * hosts + d) * qps + (q - ALL_QPS)
    else:  # out-of-range ids: rank the distinct matches instead
        _, key = np.unique(np.stack([ip, d, q], axis=1), axis=0, return_inverse=True)
        key = key.reshape(-1).astype(np.int64)
    bounds = np.cumsum([0] + [len(t) for t in tables]).tolist()
    return [key[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def match_rows(
    left: Sequence[Table], right: Sequence[Table]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Tables paired up (left[i] with right[i]) matched all at once: for every row of the
    right tables, concatenated, the position of the row with its match in the left tables,
    concatenated, and whether there is one (where not, the position is meaningless). One
    search over every pair instead of one per pair; None when the keys (table, in_port,
    dst_host, qp) would not fit 62 bits (match the pairs one by one with match_keys)."""
    tables = [*left, *right]
    ip, d, q = (
        np.concatenate([getattr(t, c) for t in tables]) for c in ("in_port", "dst_host", "qp")
    )
    n_left = sum(len(t) for t in left)
    if not n_left or n_left == ip.size:
        return np.zeros(ip.size - n_left, np.int64), np.zeros(ip.size - n_left, bool)
    if min(int(ip.min()), int(d.min())) < 0 or int(q.min()) < ALL_QPS:
        return None
    ports, hosts, qps = int(ip.max()) + 1, int(d.max()) + 1, int(q.max()) - ALL_QPS + 1
    if float(len(left)) * ports * hosts * qps >= 2.0**62:
        return None
    pair = np.arange(len(left), dtype=np.int64)
    sizes = [len(t) for t in tables]
    key = ((np.repeat(np.concatenate([pair, pair]), sizes) * ports + ip) * hosts + d) * qps
    key += q - ALL_QPS  # ascending within each side: pairs in order, each table by match
    kl, kr = key[:n_left], key[n_left:]
    pos = np.minimum(np.searchsorted(kl, kr), n_left - 1)
    return pos, kl[pos] == kr


@dataclass(frozen=True)
class RouteSet:
    """Entries grouped by switch name, one `Table` per switch (tuples of entries given are
    made tables); iterating gives the entries by switch name, then match."""

    tables: Mapping[str, Table] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tables = self.tables
        if not all(isinstance(t, Table) for t in tables.values()):
            made = {n: t if isinstance(t, Table) else Table.of(n, t) for n, t in tables.items()}
            object.__setattr__(self, "tables", made)

    @classmethod
    def from_entries(cls, entries: Iterable[Entry]) -> RouteSet:
        """Group entries by switch; a key given twice is an error."""
        grouped: dict[str, dict[tuple[int, int, int], Entry]] = {}
        for entry in entries:
            table = grouped.setdefault(entry.switch, {})
            key = entry.match
            if key in table and table[key] != entry:
                raise RouteError(f"{entry.switch}: two entries for key {key}")
            table[key] = entry
        return cls({n: Table.of(n, table.values()) for n, table in sorted(grouped.items())})

    def __len__(self) -> int:
        return sum(len(t) for t in self.tables.values())

    def __iter__(self) -> Iterator[Entry]:
        for name in sorted(self.tables):
            yield from self.tables[name]

    def switches(self) -> tuple[str, ...]:
        return tuple(sorted(name for name, table in self.tables.items() if table))

    def table(self, switch: str) -> Table:
        found = self.tables.get(switch)
        return Table.empty(switch) if found is None else found

    def only(self, switches: Iterable[str]) -> RouteSet:
        """The entries of some switches only."""
        keep = set(switches)
        return RouteSet({n: t for n, t in self.tables.items() if n in keep})

    def counts(self) -> dict[str, int]:
        """Entries per switch."""
        sizes = sorted((name, len(t)) for name, t in self.tables.items())
        return {name: n for name, n in sizes if n}

    def overflow(self, capacity: int | Mapping[str, int]) -> dict[str, int]:
        """Switches whose table exceeds its capacity, with their entry count."""
        return {name: n for name, n in self.counts().items() if n > _capacity_of(capacity, name)}


def _capacity_of(capacity: int | Mapping[str, int], switch: str) -> float:
    if isinstance(capacity, Mapping):
        return capacity.get(switch, np.inf)
    return capacity


# ---- entry extraction (vectorised) -------------------------------------------------------
@dataclass(frozen=True)
class _Keys:
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
        return _entry_key(fabric, self.in_arc, self.dst_host, self.qp, top)

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


def _keys(fabric: Fabric, assignment: Assignment, arcs: np.ndarray | None = None) -> _Keys:
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
        for hop in hops:
            qp = flows.qp[rows] if hop.role == RTSW_UP else np.full(rows.size, ALL_QPS)
            parts.append(
                (rows, column(hop.pos), column(hop.pos + 1), dst_host[rows],
                 np.full(rows.size, hop.role, np.int8), qp)
            )  # fmt: skip
    if not parts:
        empty = np.zeros(0, np.int64)
        return _Keys(empty, empty, empty, empty, np.zeros(0, np.int8), empty)
    cols = [np.concatenate(col) for col in zip(*parts, strict=True)]
    return _Keys(*cols)


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
            key = _entry_key(fabric, arc, dst_host[rows], qp, top_qp)
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


def _entry_key(
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


def _runs(fabric: Fabric, keys: _Keys) -> _Runs:
    """The rows' runs of equal keys. The rows come in runs (by class, hop, then row), so a
    stable merge sort takes a few merges (4-5x faster here than _stable_order's radix
    passes, which suit keys in no order)."""
    top = int(keys.qp.max(initial=ALL_QPS))
    key = _entry_key(fabric, keys.in_arc, keys.dst_host, keys.qp, top)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    return _Runs(key, order, ordered, np.r_[True, ordered[1:] != ordered[:-1]], top + 2)


def _disagree(
    fabric: Fabric, keys: _Keys, runs: _Runs | None = None
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
    rows, against = [_NO_INTS], [_NO_INTS]
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
    keys = _keys(fabric, assignment)
    out = np.zeros(len(assignment.flows), dtype=bool)
    if not keys.flow.size:
        return out
    rows, _ = _disagree(fabric, keys)
    out[keys.flow[rows]] = True
    return out


def _check_conflicts(fabric: Fabric, keys: _Keys, runs: _Runs | None = None) -> None:
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
        f"{fabric.link_name(int(keys.out_arc[i] // 2))}; unroute them with route_conflicts()"
    )


def _installed(fabric: Fabric, keys: _Keys, runs: _Runs | None = None) -> tuple[np.ndarray, ...]:
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
    keys = _keys(fabric, assignment)
    if not keys.flow.size:
        return RouteSet({})
    runs = _runs(fabric, keys)  # one sort for the check and the entries
    _check_conflicts(fabric, keys, runs)
    in_arc, out_arc, dst, qp, _ = _installed(fabric, keys, runs)
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


# ---- table budget -----------------------------------------------------------------------
# Entries per switch: one number, by switch name, or by node id (Fabric.table_budget()).
TableBudget = int | Mapping[str, int] | np.ndarray


def table_usage(
    fabric: Fabric, assignment: Assignment, arcs: np.ndarray | None = None
) -> np.ndarray:
    """Entries each switch holds for the assignment, by node id (int64 [num_nodes]): what
    build_routes installs, one per distinct key with QP buckets folded. `arcs`: the
    assignment's Assignment.arcs, if at hand."""
    keys = _keys(fabric, assignment, arcs)
    if not keys.flow.size:
        return np.zeros(fabric.num_nodes, np.int64)
    in_arc = _installed(fabric, keys)[0]
    return _per_switch(fabric, in_arc)


def entry_in_arcs(fabric: Fabric, assignment: Assignment) -> tuple[np.ndarray, np.ndarray]:
    """(row, in-arc) of every entry key a routed row of `assignment` needs, one pair per row
    and hop (before keys are shared or buckets folded): the arcs whose keys a row sits in."""
    keys = _keys(fabric, assignment)
    return keys.flow, keys.in_arc


def arc_usage(fabric: Fabric, assignment: Assignment) -> np.ndarray:
    """Entries keyed on each arriving arc, by arc id (int64 [num_arcs]); table_usage is their
    sum per switch. The entries on an arc depend only on the rows that use it, so a subset
    of rows counts the arcs all of whose rows it holds exactly."""
    keys = _keys(fabric, assignment)
    if not keys.flow.size:
        return np.zeros(fabric.num_arcs, np.int64)
    in_arc = _installed(fabric, keys)[0]
    return np.bincount(in_arc, minlength=fabric.num_arcs).astype(np.int64)


def _per_switch(fabric: Fabric, in_arc: np.ndarray) -> np.ndarray:
    return np.bincount(fabric.arc_ends[1][in_arc], minlength=fabric.num_nodes).astype(np.int64)


def switch_budget(fabric: Fabric, budget: TableBudget) -> np.ndarray:
    """The budget of every node, by node id (float64; inf where unlimited)."""
    nodes = np.arange(fabric.num_nodes)
    first = fabric.node_id("rtsw", 0)
    out = np.full(fabric.num_nodes, np.inf)
    out[first:] = _limits(fabric, budget, nodes[first:])
    return out


def _limits(fabric: Fabric, budget: TableBudget, nodes: np.ndarray) -> np.ndarray:
    """The budget of each of `nodes` (inf for a switch a mapping does not name)."""
    if isinstance(budget, np.ndarray):
        return budget[nodes].astype(np.float64)
    if not isinstance(budget, Mapping):
        return np.full(nodes.size, float(budget))
    return np.array([float(budget.get(fabric.node_name(int(n)), np.inf)) for n in nodes])


def tables_fit(fabric: Fabric, assignment: Assignment, budget: TableBudget) -> bool:
    """Whether every switch holds at most its budget of entries for the assignment."""
    usage = table_usage(fabric, assignment)
    nodes = np.flatnonzero(usage)
    return bool((usage[nodes] <= _limits(fabric, budget, nodes)).all())


def fit_tables(fabric: Fabric, assignment: Assignment, budget: TableBudget) -> Assignment:
    """The assignment with flows unrouted (left on ECMP) until every table fits `budget`;
    the assignment itself when it already fits (see _fit)."""
    return _fit(fabric, assignment, budget)[0]


def fit_and_count(
    fabric: Fabric, assignment: Assignment, budget: TableBudget, arcs: np.ndarray | None = None
) -> tuple[Assignment, np.ndarray]:
    """fit_tables, and the table_usage of its result (counted once when the assignment
    already fits). `arcs`: the assignment's Assignment.arcs, if at hand."""
    fitted, usage = _fit(fabric, assignment, budget, arcs)
    if usage is None:
        if arcs is not None:
            arcs = np.where(fitted.routed[:, None], arcs, -1)
        usage = table_usage(fabric, fitted, arcs)
    return fitted, usage


def _fit(
    fabric: Fabric, assignment: Assignment, budget: TableBudget, arcs: np.ndarray | None = None
) -> tuple[Assignment, np.ndarray | None]:
    """(fitted assignment, its usage if it is `assignment` itself, else None).

    The unit admitted is everything one source RTSW entry key steers: the flows (or QP
    buckets) from one NIC to one destination host, whole or not at all, so no flow is steered
    on only part of its path and no bucket is left following another's entry. Units are
    admitted greedily by their largest flow's demand (a split flow counts with the sum of
    its buckets), ties by first row; an entry shared with an admitted unit costs nothing,
    a unit's own source RTSW entries cost what they fold to.
    """
    keys = _keys(fabric, assignment, arcs)
    if not keys.flow.size:
        return assignment, np.zeros(fabric.num_nodes, np.int64)
    in_arc, _, _, _, first = _installed(fabric, keys)
    switch_of = fabric.arc_ends[1]
    usage = _per_switch(fabric, in_arc)
    nodes = np.flatnonzero(usage)
    limits = np.full(fabric.num_nodes, np.inf)
    limits[nodes] = _limits(fabric, budget, nodes)
    if (usage[nodes] <= limits[nodes]).all():
        return assignment, usage
    flows = assignment.flows
    unit_key = flows.src_nic * np.int64(fabric.num_hosts) + flows.dst_host(fabric)
    _, unit = np.unique(unit_key, return_inverse=True)
    pair = flows.src_nic * np.int64(fabric.num_nics) + flows.dst_nic
    _, pair_id = np.unique(pair, return_inverse=True)
    flow_demand = np.bincount(pair_id, weights=flows.demand)[pair_id]
    flow_demand = np.where(flows.qp == ALL_QPS, flows.demand, flow_demand)
    routed = np.flatnonzero(assignment.routed)
    # priority per unit: largest flow demand, then first row
    order = routed[np.lexsort((routed, -flow_demand[routed]))]
    _, lead = np.unique(unit[order], return_index=True)
    unit_order = unit[order[np.sort(lead)]]
    # cost per unit: its folded source RTSW entries, and the downstream keys it needs
    src_rtsw = keys.role[first] == RTSW_UP
    own = np.bincount(unit[keys.flow[first[src_rtsw]]], minlength=unit.max() + 1)
    rtsw_of = np.zeros(unit.max() + 1, np.int64)
    at_rtsw = keys.role == RTSW_UP
    rtsw_of[unit[keys.flow[at_rtsw]]] = switch_of[keys.in_arc[at_rtsw]]
    down = np.flatnonzero(keys.role != RTSW_UP)
    down_key = keys.key(fabric)[down]
    down_switch = switch_of[keys.in_arc[down]]
    by_unit: dict[int, list[tuple[int, int]]] = {}
    for u, sw, k in zip(unit[keys.flow[down]].tolist(), down_switch.tolist(),
                        down_key.tolist(), strict=True):  # fmt: skip
        by_unit.setdefault(u, []).append((sw, k))
    used = np.zeros(fabric.num_nodes, np.int64).tolist()
    limit = limits.tolist()
    installed: set[int] = set()
    dropped: list[int] = []
    own_l, rtsw_l = own.tolist(), rtsw_of.tolist()
    for u in unit_order.tolist():
        extra: dict[int, int] = {}
        if own_l[u]:
            extra[rtsw_l[u]] = own_l[u]
        new = {k: sw for sw, k in by_unit.get(u, ()) if k not in installed}
        for sw in new.values():
            extra[sw] = extra.get(sw, 0) + 1
        if all(used[sw] + n <= limit[sw] for sw, n in extra.items()):
            installed.update(new)
            for sw, n in extra.items():
                used[sw] += n
        else:
            dropped.append(u)
    path = assignment.path.copy()
    path[np.isin(unit, dropped)] = UNROUTED
    return Assignment(flows, path), None


# ---- entry validity ----------------------------------------------------------------------
def switch_ports(fabric: Fabric) -> dict[str, frozenset[int]]:
    """Link ids attached to every switch, by switch name."""
    lo, hi = fabric.link_ends
    first_switch = fabric.node_id("rtsw", 0)
    ends = np.concatenate([lo, hi])
    links = np.concatenate([np.arange(fabric.num_links)] * 2)
    keep = ends >= first_switch
    ends, links = ends[keep], links[keep]
    order = np.argsort(ends, kind="stable")
    ends, links = ends[order], links[order]
    cuts = np.flatnonzero(np.diff(ends)) + 1
    return {
        fabric.node_name(int(group_ends[0])): frozenset(group_links.tolist())
        for group_ends, group_links in zip(np.split(ends, cuts), np.split(links, cuts), strict=True)
    }


def entry_problem(fabric: Fabric, ports: Mapping[str, frozenset[int]], entry: Entry) -> str | None:
    """Why `entry` cannot live on its switch, or None if it can."""
    attached = ports.get(entry.switch)
    if attached is None:
        return f"{entry.switch!r} is not a switch of fabric {fabric.name!r}"
    if entry.in_port not in attached:
        return f"{entry.switch}: in_port {entry.in_port} is not one of its links"
    if entry.next_hop not in attached:
        return f"{entry.switch}: next_hop {entry.next_hop} is not one of its links"
    if not 0 <= entry.dst_host < fabric.num_hosts:
        return f"{entry.switch}: dst_host {entry.dst_host} out of range"
    if not ALL_QPS <= entry.qp < MAX_QP_BUCKETS:
        return (
            f"{entry.switch}: qp {entry.qp} is neither {ALL_QPS} (all buckets) nor a bucket "
            f"below {MAX_QP_BUCKETS}"
        )
    return None


def entry_role(fabric: Fabric, entry: Entry) -> int:
    """RTSW_UP, CTSW_UP, ATSW_DOWN or CTSW_DOWN: where an entry sits along a path."""
    prefix = entry.switch[:4]
    if prefix == "rtsw":
        return RTSW_UP
    if prefix == "atsw":
        return ATSW_DOWN
    if prefix == "ctsw":
        up = 0 <= entry.next_hop < fabric.num_links and fabric.link_kind[entry.next_hop] == AGG
        return CTSW_UP if up else CTSW_DOWN
    raise RouteError(f"{entry.switch!r} is not a switch name")
