"""Which installed entries a GetRoutes/StreamRoutes call asks for, page by page.

Pure: a RouteSet and a query in, entries and the next page token out. Pages are slices of
the RouteSet's stable order (switch name, then table order); a token names the routes
version it was cut from and its epoch (controller.service.state.RouteLog), so a page is
never mixed from two versions, nor from two controller processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from controller.errors import InputError, PreconditionError
from controller.model.fabric import Fabric
from controller.routes.tables import Entry, RouteSet, Table

STREAM_CHUNK = 10_000  # entries per streamed message when the request names no page_size


@dataclass(frozen=True)
class RouteQuery:
    """Filters of a route query; empty means no filter."""

    switches: frozenset[str] = frozenset()
    dst_hosts: frozenset[int] | None = None  # None: every destination

    @classmethod
    def parse(
        cls, fabric: Fabric, switches: Iterable[str], job_hosts: Iterable[int] | None
    ) -> RouteQuery:
        """Validate switch names (each must exist in `fabric`)."""
        names = frozenset(switches)
        for name in sorted(names):
            try:  # a switch of any tier, by the fabric's names (an inventory's own too)
                fabric.switch_kind(name)
            except InputError:
                raise InputError(f"switches: unknown switch {name!r} in fabric "
                                 f"{fabric.name!r}") from None
        hosts = frozenset(job_hosts) if job_hosts is not None else None
        return cls(names, hosts)

    def select(self, routes: RouteSet) -> Selection:
        """The matching entries, in the RouteSet's stable order."""
        chosen = routes.only(self.switches) if self.switches else routes
        tables = [chosen.tables[name] for name in sorted(chosen.tables)]
        if self.dst_hosts is not None:
            hosts = np.fromiter(self.dst_hosts, np.int64, len(self.dst_hosts))
            tables = [t.take(np.isin(t.dst_host, hosts)) for t in tables]
        return Selection(tables)


class Selection(Sequence[Entry]):
    """Entries picked from a RouteSet, in its order, held as its tables: a page makes
    `Entry` objects for its own rows only, so the first page of a fresh full install is
    not held up by listing all of it."""

    def __init__(self, tables: Iterable[Table]) -> None:
        self._tables = [t for t in tables if len(t)]
        self._ends = np.cumsum([len(t) for t in self._tables], dtype=np.int64)

    @classmethod
    def of(cls, routes: RouteSet) -> Selection:
        return cls(routes.tables[name] for name in sorted(routes.tables))

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...
    def __getitem__(self, index: int | slice) -> Entry | list[Entry]:
        if isinstance(index, int):
            at = index + len(self) if index < 0 else index
            if not 0 <= at < len(self):
                raise IndexError(index)
            return self._rows(at, at + 1)[0]
        start, stop, step = index.indices(len(self))
        if step != 1:
            return [self[i] for i in range(start, stop, step)]
        return self._rows(start, stop)

    def _rows(self, start: int, stop: int) -> list[Entry]:
        out: list[Entry] = []
        i = int(np.searchsorted(self._ends, start, side="right"))
        while start < stop and i < len(self._tables):
            table, end = self._tables[i], int(self._ends[i])
            first = end - len(table)
            out.extend(table.rows(start - first, min(stop, end) - first))
            start, i = end, i + 1
        return out


def page(entries: Sequence[Entry], version: int, size: int, token: str, epoch: str = "",
         scope: str = "") -> tuple[list[Entry], str]:  # fmt: skip
    """(entries of this page, token of the next page or "") for `size` entries a page
    (0 = all) starting where `token` says; `version` of routes epoch `epoch`, selected by
    filters `scope` (a digest: a token is good only for the filters it was issued for)."""
    start = _offset(token, version, epoch, len(entries), scope)
    end = len(entries) if size <= 0 else min(start + size, len(entries))
    mark = f"{epoch}~{scope}" if scope else epoch
    return list(entries[start:end]), (f"{mark}.{version}:{end}" if end < len(entries) else "")


def chunks(
    entries: Sequence[Entry], version: int, size: int, token: str, epoch: str = "",
    scope: str = "",
) -> Iterator[tuple[list[Entry], str]]:  # fmt: skip
    """The (page, next token) pairs `page` would return one by one (at least one). The
    token is checked here; the pages are made as the caller takes them."""
    size = size or STREAM_CHUNK
    first = page(entries, version, size, token, epoch, scope)
    return _pages(entries, version, size, first, epoch, scope)


def _pages(
    entries: Sequence[Entry], version: int, size: int, first: tuple[list[Entry], str],
    epoch: str, scope: str,
) -> Iterator[tuple[list[Entry], str]]:  # fmt: skip
    part, token = first
    yield part, token
    while token:
        part, token = page(entries, version, size, token, epoch, scope)
        yield part, token


def _offset(token: str, version: int, epoch: str, total: int, scope: str = "") -> int:
    if not token:
        return 0
    mark, sep, off = token.rpartition(":")
    was: str | None
    was, dot, v = mark.rpartition(".")
    if sep and not dot and mark.isdigit() and off.isdigit():
        was, v = None, mark  # a token of a version before epochs: another process's
    elif not (sep and dot and v.isdigit() and off.isdigit()):
        raise InputError(f"page_token: {token!r} is not a token this service issued")
    if was is not None:
        was, _, issued_for = was.partition("~")
        if was == epoch and issued_for != scope:
            raise InputError("page_token: issued for other filters (switches, job, hosts); "
                             "ask with the filters of the first page, or start again")
    if was is None or was != epoch:
        raise PreconditionError(
            "page_token: cut by another controller process (or before a restart); start "
            "again from the first page"
        )
    if int(v) != version:
        raise PreconditionError(
            f"page_token: the routes changed since (version {v}, now {version}); "
            "start again from the first page"
        )
    if int(off) > total:
        raise InputError(f"page_token: offset {off} is past the {total} entries")
    return int(off)
