"""Route updates: the operations that turn installed entries into wanted ones, safely ordered.

`diff` compares two RouteSets and returns a `Plan`: our own operations (Add, Replace,
Delete), one `Batch` per switch, batches grouped into stages that are applied one after the
other (the batches of a stage are independent and may be applied concurrently).

Order (make before break): entries are installed downstream first, so that when an upstream
entry starts sending traffic somewhere, the entries that carry it onwards are already there;
entries are removed upstream first, so nothing is sent towards an entry that is gone.

    stage 0  install ctsw-down   (destination CTSW -> RTSW member)
    stage 1  install atsw-down
    stage 2  install ctsw-up     (source CTSW -> ATSW link)
    stage 3  install and remove rtsw-up (the entry that picks the path for a NIC)
    stage 4  remove ctsw-up
    stage 5  remove atsw-down
    stage 6  remove ctsw-down

Only entries of one owner are planned. Installed entries of other owners are left alone;
a wanted entry whose key is held by another owner is not planned but listed in `blocked`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from controller.errors import FabricError, RouteError
from controller.model.assignment import Assignment
from controller.model.fabric import AGG, Fabric
from controller.routes.budget import fit_tables
from controller.routes.entries import ATSW_DOWN, CTSW_DOWN, CTSW_UP, RTSW_UP, build_routes
from controller.routes.tables import OWNER, Entry, RouteSet, Table, match_keys, match_rows

STAGE_NAMES = (
    "install ctsw-down",
    "install atsw-down",
    "install ctsw-up",
    "rtsw-up",
    "remove ctsw-up",
    "remove atsw-down",
    "remove ctsw-down",
)


@dataclass(frozen=True, slots=True)
class Add:
    """Install an entry on a key that holds none of ours."""

    entry: Entry


@dataclass(frozen=True, slots=True)
class Replace:
    """Change the next hop (or owner) of one of our entries."""

    old: Entry
    entry: Entry


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove one of our entries."""

    entry: Entry


Op = Add | Replace | Delete


class Batch:
    """Operations for one switch, applied all or nothing, held as tables: `put` the entries
    to set (an Add, or a Replace of `old[k]` where `replaced` says so), `drop` our entries to
    remove. `ops` lists them as operations in match order (a removal after an install of
    the same match), made on first use."""

    __slots__ = ("switch", "put", "drop", "replaced", "old", "_ops")

    def __init__(
        self,
        switch: str,
        put: Table | None = None,
        drop: Table | None = None,
        replaced: np.ndarray | None = None,
        old: Table | None = None,
    ) -> None:
        self.switch = switch
        self.put = Table.empty(switch) if put is None else put
        self.drop = Table.empty(switch) if drop is None else drop
        self.replaced = np.zeros(len(self.put), bool) if replaced is None else replaced
        self.old = Table.empty(switch) if old is None else old  # a row per True in `replaced`
        self._ops: tuple[Op, ...] | None = None

    @classmethod
    def of_ops(cls, switch: str, ops: Iterable[Op]) -> Batch:
        """The batch of `ops` on `switch` (a later op on a match overrides an earlier one)."""
        last: dict[tuple[int, int, int], Op] = {}
        for op in ops:
            if op.entry.switch != switch:
                raise RouteError(f"batch for {switch} holds an entry for {op.entry.switch}")
            last[op.entry.match] = op
        kept = [last[k] for k in sorted(last)]
        puts = [op for op in kept if not isinstance(op, Delete)]
        put = Table.of(switch, [op.entry for op in puts])
        drop = Table.of(switch, [op.entry for op in kept if isinstance(op, Delete)])
        replaced = np.array([isinstance(op, Replace) for op in puts], bool)
        old = Table.of(switch, [op.old for op in puts if isinstance(op, Replace)])
        return cls(switch, put, drop, replaced, old)

    @property
    def ops(self) -> tuple[Op, ...]:
        if self._ops is None:
            self._ops = self._make_ops()
        return self._ops

    def _make_ops(self) -> tuple[Op, ...]:
        put, drop = self.put.entries(), self.drop.entries()
        olds = iter(self.old.entries())
        made: list[Op] = [
            Replace(next(olds), e) if r else Add(e)
            for e, r in zip(put, self.replaced.tolist(), strict=True)
        ]
        if not drop:
            return tuple(made)
        if not made:
            return tuple(Delete(e) for e in drop)
        kp, kd = match_keys(self.put, self.drop)
        order = np.lexsort((np.r_[np.zeros(kp.size, bool), np.ones(kd.size, bool)],
                            np.concatenate([kp, kd])))  # fmt: skip
        made += [Delete(e) for e in drop]
        return tuple(made[i] for i in order.tolist())

    def counts(self) -> tuple[int, int, int]:
        """(adds, replaces, deletes)."""
        r = int(np.count_nonzero(self.replaced))
        return len(self.put) - r, r, len(self.drop)

    def __len__(self) -> int:
        return len(self.put) + len(self.drop)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return self.switch == other.switch and self.ops == other.ops

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        adds, replaces, deletes = self.counts()
        return f"Batch({self.switch!r}, {adds} add, {replaces} replace, {deletes} delete)"


@dataclass(frozen=True)
class Plan:
    """Per-switch batches in the stages of STAGE_NAMES (some may be empty), in order."""

    stages: tuple[tuple[Batch, ...], ...] = ()
    blocked: tuple[Entry, ...] = ()  # wanted, but the key is held by another owner
    ecmp_flows: np.ndarray = field(
        default_factory=lambda: np.zeros(0, np.int64), repr=False, compare=False
    )

    def batches(self) -> Iterator[tuple[int, Batch]]:
        """(stage index, batch) in application order."""
        for index, stage in enumerate(self.stages):
            for batch in stage:
                yield index, batch

    def ops(self) -> Iterator[Op]:
        for _, batch in self.batches():
            yield from batch.ops

    def counts(self) -> dict[str, int]:
        """Number of adds, replaces and deletes (the churn of the update)."""
        out = {"add": 0, "replace": 0, "delete": 0}
        for _, batch in self.batches():
            adds, replaces, deletes = batch.counts()
            out["add"] += adds
            out["replace"] += replaces
            out["delete"] += deletes
        return out

    def switches(self) -> tuple[str, ...]:
        return tuple(sorted({batch.switch for _, batch in self.batches()}))

    def __len__(self) -> int:
        return sum(len(batch) for _, batch in self.batches())


def _by_role(fabric: Fabric, switch: str, next_hop: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The rows of entries on `switch` leaving on `next_hop`, grouped by role (RTSW_UP ...
    CTSW_DOWN): by the switch's tier, and for a CTSW by whether the next hop goes up (see
    entry_role). Masks over the rows, in role order."""
    kind = _switch_kind(fabric, switch)
    if kind == "ctsw":
        ok = (next_hop >= 0) & (next_hop < fabric.num_links)
        up = np.zeros(next_hop.size, bool)
        up[ok] = fabric.link_kind[next_hop[ok]] == AGG
        groups = [(CTSW_UP, up), (CTSW_DOWN, ~up)]
        return [(role, rows) for role, rows in groups if rows.any()]
    if not next_hop.size:
        return []
    return [(RTSW_UP if kind == "rtsw" else ATSW_DOWN, np.ones(next_hop.size, bool))]


def _switch_kind(fabric: Fabric, switch: str) -> str:
    """The switch's tier by the fabric's own nodes (never by its name's spelling)."""
    try:
        return fabric.switch_kind(switch)
    except FabricError:
        raise RouteError(f"{switch!r} is not a switch name") from None


def _switch_diff(
    have: Table, want: Table, owner: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per switch, as rows: (wanted rows to set, the installed row each replaces or -1,
    installed rows to remove, wanted rows blocked by another owner's entry)."""
    if not have:
        return np.arange(len(want)), np.full(len(want), -1), _NONE, _NONE
    ours = have.owned_by(owner)
    if not want:
        return _NONE, _NONE, np.flatnonzero(ours), _NONE
    kh, kw = match_keys(have, want)
    pos = np.minimum(np.searchsorted(kh, kw), kh.size - 1)
    found = kh[pos] == kw
    return _decide(pos, found, ours, (have.next_hop, have.owner, have.qp),
                   (want.next_hop, want.owner, want.qp))  # fmt: skip


def _decide(
    pos: np.ndarray,
    found: np.ndarray,
    ours: np.ndarray,
    have: tuple[np.ndarray, np.ndarray, np.ndarray],
    want: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """_switch_diff's rows from each wanted row's match (`pos` into the installed rows,
    where `found`), which installed rows are `ours`, and both sides' (next hop, owner, qp)."""
    same = found & (have[0][pos] == want[0]) & (have[1][pos] == want[1])
    same &= have[2][pos] == want[2]  # (always, where found: qp is part of the key)
    blocked = found & ~same & ~ours[pos]
    put = np.flatnonzero(~same & ~blocked)
    old = np.where(found[put], pos[put], -1)
    gone = np.ones(have[0].size, bool)
    gone[pos[found]] = False
    return put, old, np.flatnonzero(gone & ours), np.flatnonzero(blocked)


_NONE = np.zeros(0, np.int64)


def _switch_diffs(
    pairs: list[tuple[Table, Table]], owner: str
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """_switch_diff of every (have, want) pair (haves not empty), matched all at once (see
    match_rows): the same rows, per pair, for a few array steps in all instead of each."""
    haves, wants = [h for h, _ in pairs], [w for _, w in pairs]
    matched = match_rows(haves, wants) if len(pairs) > 1 else None
    if matched is None:
        return [_switch_diff(have, want, owner) for have, want in pairs]
    pos, found = matched
    have_nh, have_own, have_qp = (
        np.concatenate([getattr(t, c) for t in haves]) for c in ("next_hop", "owner", "qp")
    )
    want_nh, want_own, want_qp = (
        np.concatenate([getattr(t, c) for t in wants]) for c in ("next_hop", "owner", "qp")
    )
    ours = np.asarray(have_own == owner, dtype=bool)
    put, old, drop, held_rows = _decide(pos, found, ours, (have_nh, have_own, have_qp),
                                        (want_nh, want_own, want_qp))  # fmt: skip
    # back to each pair's own rows
    want_at = np.cumsum([0] + [len(w) for w in wants])
    have_at = np.cumsum([0] + [len(h) for h in haves])
    cut_put, cut_held = (np.searchsorted(a, want_at).tolist() for a in (put, held_rows))
    cut_drop = np.searchsorted(drop, have_at).tolist()
    w0, h0 = want_at.tolist(), have_at.tolist()
    out = []
    for i in range(len(pairs)):
        olds = old[cut_put[i] : cut_put[i + 1]]
        out.append((
            put[cut_put[i] : cut_put[i + 1]] - w0[i],
            np.where(olds >= 0, olds - h0[i], -1),
            drop[cut_drop[i] : cut_drop[i + 1]] - h0[i],
            held_rows[cut_held[i] : cut_held[i + 1]] - w0[i],
        ))  # fmt: skip
    return out


def diff(installed: RouteSet, wanted: RouteSet, fabric: Fabric, owner: str = OWNER) -> Plan:
    """Operations taking `owner`'s entries in `installed` to `wanted`, in safe order.

    Per switch on the tables' columns: equal tables are skipped, a table into an empty
    switch is one batch of adds per stage (its own rows, shared), others are matched key by
    key."""
    # (stage, switch) -> (install?, rows of want (install) or have (None: all), replaced
    # rows of have or -1 (None: all adds))
    staged: dict[tuple[int, str], list[tuple[bool, np.ndarray | None, np.ndarray | None]]] = {}
    blocked: list[Entry] = []
    tables: dict[str, tuple[Table, Table]] = {}
    for switch in sorted(set(installed.tables) | set(wanted.tables)):
        have, want = installed.table(switch), wanted.table(switch)
        if have.same(want):
            continue
        tables[switch] = (have, want)
        kind = _switch_kind(fabric, switch)
        if not have and kind != "ctsw":  # the wanted table, all adds, of one role
            role = RTSW_UP if kind == "rtsw" else ATSW_DOWN
            staged[(CTSW_DOWN - role, switch)] = [(True, None, None)]
        elif not have:  # the wanted table, all adds, by role
            for role, rows in _by_role(fabric, switch, want.next_hop):
                staged.setdefault((CTSW_DOWN - role, switch), []).append((True, rows, None))
    matched = [sw for sw, (have, _) in tables.items() if have]
    for switch, diffed in zip(matched, _switch_diffs([tables[sw] for sw in matched], owner),
                              strict=True):  # fmt: skip
        have, want = tables[switch]
        put, old, drop, held = diffed
        if held.size:
            blocked.extend(want.take(held))
        for role, rows in _by_role(fabric, switch, want.next_hop[put]):
            staged.setdefault((CTSW_DOWN - role, switch), []).append((True, put[rows], old[rows]))
        for role, rows in _by_role(fabric, switch, have.next_hop[drop]):
            staged.setdefault((CTSW_DOWN + role, switch), []).append(
                (False, drop[rows], drop[rows])
            )
    stages: list[list[Batch]] = [[] for _ in STAGE_NAMES]
    for (stage, switch), parts in sorted(staged.items()):
        have, want = tables[switch]
        to_set: Table | None = None
        to_drop: Table | None = None
        replaced: Table | None = None
        is_replace: np.ndarray | None = None
        for install, picked, olds in parts:
            if picked is None:  # the whole wanted table, into an empty switch
                to_set = want
            elif not install:
                to_drop = have.take(picked)
            elif olds is None:  # adds into an empty switch (`picked` a mask)
                to_set = want if picked.all() else want.take(picked)
            elif picked.size == len(want) and not (olds >= 0).any():
                to_set = want  # a whole table of adds: the wanted table itself
            else:
                to_set, is_replace = want.take(picked), olds >= 0
                replaced = have.take(olds[is_replace])
        stages[stage].append(Batch(switch, to_set, to_drop, is_replace, replaced))
    return Plan(tuple(tuple(s) for s in stages), tuple(sorted(blocked)))


def plan_update(
    fabric: Fabric,
    installed: RouteSet,
    assignment: Assignment,
    capacity: int | Mapping[str, int] | None = None,
    owner: str = OWNER,
) -> tuple[Plan, RouteSet]:
    """Fit the assignment to the tables, build its routes and diff them: (plan, wanted).

    `plan.ecmp_flows` lists the flows left on ECMP (unrouted or not fitting a table).
    """
    if capacity is not None:
        assignment = fit_tables(fabric, assignment, capacity)
    wanted = build_routes(fabric, assignment, owner)
    plan = diff(installed, wanted, fabric, owner)
    ecmp = np.flatnonzero(~assignment.routed)
    return Plan(plan.stages, plan.blocked, ecmp), wanted
