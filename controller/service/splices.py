"""A planned push's change to the wanted tables and to the route log, found ahead as row
positions (a precomputed repair's push: docs/profiling.md, "A precomputed hit").

`Installer.push_planned` takes the wanted tables to the new assignment's by the plan's
batches: per batch, keys of the whole table, searches and a merge (`Table.updated`); then
the read-back's route-log delta matches the touched tables again. Both are known when the
push is planned: which rows of the wanted table each batch replaces or drops and where its
rows go (`Table.spliced`), and, when the switches held exactly the wanted tables then,
which rows the delta adds and removes. Kept as integers (tens per element), not tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.routes.plan import Plan
from controller.routes.tables import RouteSet, Table, splice_of
from controller.service.state import delta_rows


@dataclass(frozen=True)
class Splices:
    """Row positions of a plan against `wanted`: per batch in plan order (gone, at) of
    `Table.spliced`; then per switch of `logged` the rows the route-log delta adds (of the
    table after) and removes (of the table before)."""

    wanted: RouteSet  # the wanted routes the positions are of (compared by identity at use)
    pos: np.ndarray  # int32, the segments concatenated
    cuts: np.ndarray  # int32, the segments' bounds
    logged: tuple[str, ...] | None  # None: the switches held other than the wanted tables

    @property
    def nbytes(self) -> int:
        return int(self.pos.nbytes + self.cuts.nbytes)

    def segment(self, i: int) -> np.ndarray:
        return self.pos[int(self.cuts[i]) : int(self.cuts[i + 1])]


@dataclass(frozen=True)
class Spliced:
    """The wanted tables after a plan (per switch touched) and the route-log delta each
    switch's read-back gives when it reads back as its table after: (after, added,
    removed), for the switches whose delta is known."""

    tables: dict[str, Table]
    known: dict[str, tuple[Table, Table, Table]]


def splices_of(plan: Plan, wanted: RouteSet, installed: RouteSet) -> Splices | None:
    """The positions of `plan` against the `wanted` tables (`installed`: the routes it was
    planned against); None when a batch cannot be spliced (a row both put and dropped)."""
    current: dict[str, Table] = {}
    segments: list[np.ndarray] = []
    for _, batch in plan.batches():
        sw = batch.switch
        table = current[sw] if sw in current else wanted.table(sw)
        found = splice_of(table, batch.put, batch.drop)
        if found is None:
            return None
        current[sw] = table.spliced(*found, batch.put)
        segments += found
    logged: tuple[str, ...] | None = tuple(sorted(current))
    assert logged is not None
    if all(installed.table(sw).same(wanted.table(sw)) for sw in logged):
        for sw in logged:
            segments += delta_rows(wanted.table(sw), current[sw])
    else:
        logged = None
    sizes = [s.size for s in segments]
    cuts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    pos = np.concatenate(segments).astype(np.int32) if segments else np.zeros(0, np.int32)
    return Splices(wanted, pos, cuts, logged)


def apply_splices(splices: Splices, plan: Plan) -> Spliced:
    """The wanted tables after `plan` (of `splices.wanted`) and the deltas known."""
    wanted = splices.wanted
    current: dict[str, Table] = {}
    n = 0
    for i, (_, batch) in enumerate(plan.batches()):
        sw = batch.switch
        table = current[sw] if sw in current else wanted.table(sw)
        current[sw] = table.spliced(splices.segment(2 * i), splices.segment(2 * i + 1),
                                    batch.put)  # fmt: skip
        n = i + 1
    known: dict[str, tuple[Table, Table, Table]] = {}
    for j, sw in enumerate(splices.logged or ()):
        after = current[sw]
        added, removed = splices.segment(2 * n + 2 * j), splices.segment(2 * n + 2 * j + 1)
        known[sw] = (after, after.take(added), wanted.table(sw).take(removed))
    return Spliced(current, known)

