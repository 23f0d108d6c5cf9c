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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.routes.entries import (
    CTSW_DOWN,
    OWNER,
    Entry,
    RouteSet,
    build_routes,
    entry_role,
    fit_tables,
)

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


@dataclass(frozen=True)
class Batch:
    """Operations for one switch, applied all or nothing."""

    switch: str
    ops: tuple[Op, ...]


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
        for op in self.ops():
            out[type(op).__name__.lower()] += 1
        return out

    def switches(self) -> tuple[str, ...]:
        return tuple(sorted({batch.switch for _, batch in self.batches()}))

    def __len__(self) -> int:
        return sum(len(batch.ops) for _, batch in self.batches())


def _op_sort_key(op: Op) -> tuple[int, int, int, int]:
    return (*op.entry.match, isinstance(op, Delete))


def diff(installed: RouteSet, wanted: RouteSet, fabric: Fabric, owner: str = OWNER) -> Plan:
    """Operations taking `owner`'s entries in `installed` to `wanted`, in safe order."""
    staged: dict[tuple[int, str], list[Op]] = {}
    mixed: set[tuple[int, str]] = set()  # batches holding installs and removals: sorted
    blocked: list[Entry] = []
    for switch in sorted(set(installed.tables) | set(wanted.tables)):
        have_t, want_t = installed.table(switch), wanted.table(switch)
        if have_t == want_t:  # the common case: same objects, compared by identity first
            continue
        roles: dict[int, int] = {}  # next hop -> role: one switch, so the hop decides it
        if not have_t:  # all new: Adds in table order, which is the batch order
            for new in want_t:
                role = roles.get(new.next_hop)
                if role is None:
                    role = roles[new.next_hop] = entry_role(fabric, new)
                staged.setdefault((CTSW_DOWN - role, switch), []).append(Add(new))
            continue
        have = {e.match: e for e in have_t}
        want = {e.match: e for e in want_t}
        for key, new in want.items():
            old = have.get(key)
            if old is not None and old == new:
                continue
            role = roles.get(new.next_hop)
            if role is None:
                role = roles[new.next_hop] = entry_role(fabric, new)
            if old is None:
                staged.setdefault((CTSW_DOWN - role, switch), []).append(Add(new))
            elif old.owner != owner:
                blocked.append(new)
            else:
                staged.setdefault((CTSW_DOWN - role, switch), []).append(Replace(old, new))
        for key, old in have.items():
            if old.owner == owner and key not in want:
                at = (CTSW_DOWN + entry_role(fabric, old), switch)
                if at in staged:
                    mixed.add(at)
                staged.setdefault(at, []).append(Delete(old))
    stages: list[list[Batch]] = [[] for _ in STAGE_NAMES]
    for (stage, switch), ops in sorted(staged.items()):
        ordered = sorted(ops, key=_op_sort_key) if (stage, switch) in mixed else ops
        stages[stage].append(Batch(switch, tuple(ordered)))
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
