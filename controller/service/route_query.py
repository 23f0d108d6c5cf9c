"""Which installed entries a GetRoutes/StreamRoutes call asks for, page by page.

Pure: a RouteSet and a query in, entries and the next page token out. Pages are slices of
the RouteSet's stable order (switch name, then table order); a token names the routes
version it was cut from, so a page is never mixed from two versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.errors import InputError, PreconditionError
from controller.model.fabric import Fabric
from controller.routes.entries import Entry, RouteSet

SWITCH_TIERS = ("rtsw", "ctsw", "atsw")
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
            try:
                fabric.node_by_name(name)
                known = name.split("-")[0] in SWITCH_TIERS
            except InputError:
                known = False
            if not known:
                raise InputError(f"switches: unknown switch {name!r}")
        hosts = frozenset(job_hosts) if job_hosts is not None else None
        return cls(names, hosts)

    def select(self, routes: RouteSet) -> list[Entry]:
        """The matching entries, in the RouteSet's stable order."""
        chosen = routes.only(self.switches) if self.switches else routes
        if self.dst_hosts is None:
            return list(chosen)
        return [e for e in chosen if e.dst_host in self.dst_hosts]


def page(
    entries: list[Entry], version: int, size: int, token: str
) -> tuple[list[Entry], str]:
    """(entries of this page, token of the next page or "") for `size` entries a page
    (0 = all) starting where `token` says."""
    start = _offset(token, version, len(entries))
    if size <= 0:
        return entries[start:], ""
    end = min(start + size, len(entries))
    return entries[start:end], (f"{version}:{end}" if end < len(entries) else "")


def chunks(
    entries: list[Entry], version: int, size: int, token: str
) -> list[tuple[list[Entry], str]]:
    """The (page, next token) pairs `page` would return one by one (at least one)."""
    size = size or STREAM_CHUNK
    out = []
    while True:
        part, token = page(entries, version, size, token)
        out.append((part, token))
        if not token:
            return out


def _offset(token: str, version: int, total: int) -> int:
    if not token:
        return 0
    v, sep, off = token.partition(":")
    if not (sep and v.isdigit() and off.isdigit()):
        raise InputError(f"page_token: {token!r} is not a token this service issued")
    if int(v) != version:
        raise PreconditionError(
            f"page_token: the routes changed since (version {v}, now {version}); "
            "start again from the first page"
        )
    if int(off) > total:
        raise InputError(f"page_token: offset {off} is past the {total} entries")
    return int(off)
