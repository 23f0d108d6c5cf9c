"""Route tables: TE entries and one switch's table as read-only numpy columns, and a route set
(a table per switch). What every layer above passes around, pushes, reads back and diffs.

An entry is keyed <ingress port, destination host[, QP bucket]> -> next hop, all ports being
physical link ids; `qp == ALL_QPS` matches every bucket of its key (see controller.routes.entries
for which entries an assignment needs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple, overload

import numpy as np

from controller.errors import RouteError
from controller.model.flows import ALL_QPS

OWNER = "fabric-te"
MAX_QP_BUCKETS = 1 << 16  # a bucket is matched on the UDP source port: 16 bits at most


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
        matches of `drop` removed. Into an empty table, `put` itself. The few rows of
        `put` and `drop` are searched among the table's, not the other way round."""
        if not len(self) and not len(drop):
            return put
        found = splice_of(self, put, drop)
        if found is not None:
            return self.spliced(*found, put)
        _, kp, kd = match_keys(self, put, drop)  # a row of put dropped too: dropped
        keep_put = ~_among(kp, kd)
        return self.updated(put.take(keep_put), drop)

    def spliced(self, gone: np.ndarray, at: np.ndarray, put: Table) -> Table:
        """`updated` by positions found ahead (`splice_of`): the rows `gone` (ascending)
        removed and `put`'s rows inserted before the kept rows' positions `at` (ascending,
        one per row of `put`). No keys, searches or sort: a planned push's hot path."""
        if not len(self) and not gone.size:
            return put
        kept = self if not gone.size else self.take(_without(len(self), gone))
        if not len(put):
            return kept
        if not len(kept):
            return put
        n = len(kept) + len(put)
        put_at = at + np.arange(len(put))
        keep_at = _without(n, put_at)
        cols = []
        for a, b in zip(kept.columns(), put.columns(), strict=True):
            out = np.empty(n, np.result_type(a, b))
            out[keep_at] = a
            out[put_at] = b
            cols.append(out)
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


def _without(n: int, rows: np.ndarray) -> np.ndarray:
    """Mask over `n` rows: all but `rows`."""
    mask = np.ones(n, bool)
    mask[rows] = False
    return mask


def splice_of(table: Table, put: Table, drop: Table) -> tuple[np.ndarray, np.ndarray] | None:
    """(gone, at) such that `table.spliced(gone, at, put)` is `table` with `put`'s entries
    set and `drop`'s matches removed (`Table.updated`), as int32 positions (kept compact);
    None when a row of `put` is in `drop` too."""
    kt, kp, kd = match_keys(table, put, drop)
    if kd.size and kp.size and _among(kp, kd).any():
        return None
    gone = np.zeros(kt.size, bool)
    pos = np.zeros(0, np.int64)
    if kt.size:
        for keys in (kp, kd):
            if keys.size:
                at = np.searchsorted(kt, keys)
                hit = np.minimum(at, kt.size - 1)
                hit = hit[kt[hit] == keys]
                gone[hit] = True
                if keys is kp:
                    pos = at
    rows = np.flatnonzero(gone)
    if not kp.size:
        return rows.astype(np.int32), np.zeros(0, np.int32)
    if not kt.size:
        pos = np.zeros(kp.size, np.int64)
    # a put row goes before the first row kept at or after its match's position
    return rows.astype(np.int32), (pos - np.searchsorted(rows, pos)).astype(np.int32)


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
    def of_tables(cls, tables: dict[str, Table]) -> RouteSet:
        """A RouteSet of `tables`, Tables all (unchecked: a large set's hot path, e.g. one
        switch's table replaced among thousands)."""
        out = object.__new__(cls)
        object.__setattr__(out, "tables", tables)
        return out

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
        tables = self.tables
        if len(keep) * 4 < len(tables):  # a few among many (a push's read-back): by name
            return RouteSet.of_tables({n: tables[n] for n in sorted(keep) if n in tables})
        return RouteSet.of_tables({n: t for n, t in tables.items() if n in keep})

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
