"""The controller's state as plain data: desired inputs, and the versioned installed routes.

`DesiredState` holds what the operator and the scheduler asked for: jobs by id, each with a
generation number, and the health of every link. Every accepted change bumps `version`;
a rejected one, and one that leaves the state as it was, changes nothing (validation happens
before the first write). A controller on a store counts on from the store's revision
(`count_from`), so its versions never go back across a restart.

`RouteLog` holds what the switches reported back as installed, with a version bumped by
every change and a bounded log of deltas so that a watcher can resume from a version. Its
versions count from 1 in each process, so each log has an `epoch` (random, drawn when it is
made): a version resumes a watch only with the epoch it was seen in; a controller restarted
or another replica has another epoch, and a version from before names another table.

Neither class locks, sleeps or talks to a driver; the engine serialises access.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from controller.errors import InputError, PreconditionError
from controller.model import validation
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
from controller.routes.tables import RouteSet, Table, match_keys, match_rows

DELTA_LOG = 1000  # route deltas kept for resuming watchers


@dataclass(frozen=True)
class Inputs:
    """One consistent reading of the desired state, for one solve."""

    version: int
    jobs: tuple[Job, ...]  # sorted by id
    health: LinkHealth
    health_only: bool  # only link health changed since the previous reading
    generations: tuple[tuple[str, int], ...]  # (job id, generation), sorted by id


@dataclass
class DesiredState:
    """Jobs (with generations) and link health; `version` counts accepted changes."""

    fabric: Fabric
    jobs: dict[str, tuple[Job, int]] = field(default_factory=dict)
    health: LinkHealth | None = None
    version: int = 0
    jobs_version: int = 0  # the version at which the jobs last changed
    origin: int = 0  # the version before the first change (above 0: see count_from)
    _health_only: bool = True

    def __post_init__(self) -> None:
        if self.health is None:
            self.health = LinkHealth.all_up(self.fabric)

    def put_job(self, job: Job, generation: int = 0) -> int:
        """Create or replace `job`; returns its stored generation (see `check_put`)."""
        new_gen = self.check_put(job, generation)
        self.set_job(job, new_gen)
        return new_gen

    def check_put(self, job: Job, generation: int = 0, *, flows_checked: bool = False) -> int:
        """The generation `job` would be stored with; changes nothing.

        generation 0 means "no check" and stores the next number, unless the very same job is
        stored: then nothing changes and its generation is returned (puts are level-triggered:
        a scheduler putting its jobs again solves nothing); otherwise it must be
        greater than the stored one (PreconditionError) and at most MAX_GENERATION
        (InputError), or equal to it with the very same job: a retry of a write whose
        outcome the caller did not learn, accepted as it is (idempotent). When the next
        number would pass MAX_GENERATION the put is refused
        (PreconditionError). A host already used by another job is an InputError naming the
        host and that job. `flows_checked`: the caller has already built the job's flows (the
        engine does, outside its lock)."""
        validation.integer(generation, "generation", 0, validation.MAX_GENERATION)
        stored = self.jobs.get(job.id)
        if generation and stored == (job, generation):  # a retry of the write that made it
            return generation
        if not generation and stored and stored[0] == job:  # the same job again: no change
            return stored[1]
        if generation and stored and generation <= stored[1]:
            raise PreconditionError(
                f"job {job.id!r}: generation {generation} is not newer than {stored[1]}"
            )
        if not generation and stored and stored[1] >= validation.MAX_GENERATION:
            raise PreconditionError(
                f"job {job.id!r}: generation {stored[1]} is the largest there is; delete "
                "the job before putting it again"
            )
        owner = {h: k for k, (j, _) in self.jobs.items() if k != job.id for h in j.hosts}
        for i, host in enumerate(job.hosts):
            if host in owner:
                raise InputError(
                    f"job.hosts[{i}]: {self.fabric.host_name(host)} is already in job "
                    f"{owner[host]!r} (a job takes whole hosts, one job a host)"
                )
        if not flows_checked:
            jobs_flows(self.fabric, [job])  # the job's own traffic must be valid
        return generation or (stored[1] + 1 if stored else 1)

    def set_job(self, job: Job, generation: int) -> None:
        """Store `job` at `generation`, already checked (or read back from a store); the
        same job at the same generation again is no change (the version stays)."""
        if self.jobs.get(job.id) == (job, generation):
            return
        self.jobs[job.id] = (job, generation)
        self._bump(health_only=False)

    def delete_job(self, job_id: str) -> bool:
        """Remove a job; an unknown id is not an error and changes nothing."""
        existed = self.jobs.pop(job_id, None) is not None
        if existed:
            self._bump(health_only=False)
        return existed

    def report_links(self, updates: Mapping[int, float], replace_all: bool = False,
                     switches: Mapping[int, bool] | None = None) -> None:  # fmt: skip
        """Set link factors (1 up, 0 down, between: degraded) and drain switches (node id:
        True) or end their drains (False), as `LinkHealth.reported`; with `replace_all`
        every link not named is up (beneath a drain, which stays: a monitor's full report
        does not end an operator's drain; SWITCH=up does)."""
        self.set_health(self.check_links(updates, replace_all, switches))

    def check_links(self, updates: Mapping[int, float], replace_all: bool = False,
                    switches: Mapping[int, bool] | None = None) -> LinkHealth:  # fmt: skip
        """The health `report_links` would set; changes nothing."""
        base = self.health
        assert base is not None
        if replace_all:  # every link up beneath the drains, which stay
            base = LinkHealth.all_up(self.fabric).reported(self.fabric, {},
                                                           dict.fromkeys(base.drained, True))
        self.fabric.check_installed(link for link, value in updates.items() if value > 0)
        return base.reported(self.fabric, updates, switches)

    def set_health(self, health: LinkHealth) -> None:
        """Adopt `health` (already checked, or read back from a store); the health already
        held is no change (the version stays)."""
        if self.health is not None and self.health.same(health):
            return
        self.health = health
        self._bump(health_only=True)

    def count_from(self, revision: int) -> None:
        """Number changes on from the store's `revision`, read at start, where it is above
        the version: every version a process reported counted one change it read from, or
        wrote to, that store, each at a revision of its own (writes of no change are not
        made), so none was above the revision a later start reads. The versions counted
        so far (the records read) and `origin` move with it."""
        shift = max(0, revision - self.version)
        self.version += shift
        self.jobs_version += shift
        self.origin += shift

    def job_list(self) -> list[tuple[Job, int]]:
        """(job, generation) sorted by job id."""
        return [self.jobs[k] for k in sorted(self.jobs)]

    def take(self, reset: bool = True) -> Inputs:
        """The inputs of the next solve; resets the health-only flag (unless `reset` is
        False: a look that takes nothing)."""
        assert self.health is not None
        listed = self.job_list()
        inputs = Inputs(self.version, tuple(j for j, _ in listed), self.health,
                        self._health_only, tuple((j.id, g) for j, g in listed))  # fmt: skip
        if reset:
            self._health_only = True
        return inputs

    def again(self) -> None:
        """The next take solves in full: a round that failed is taken again."""
        self._health_only = False

    def _bump(self, health_only: bool) -> None:
        self.version += 1
        self._health_only &= health_only
        if not health_only:
            self.jobs_version = self.version


@dataclass(frozen=True)
class Delta:
    """The change that took the installed routes to `version`: the entries added and
    removed, per switch (iterated in switch, then match order; made entries on demand)."""

    version: int
    added: RouteSet
    removed: RouteSet


class RouteLog:
    """Installed routes as read back, versioned, with the most recent deltas."""

    def __init__(self, installed: RouteSet, keep: int = DELTA_LOG, epoch: str | None = None
                 ) -> None:  # fmt: skip
        self.installed = installed
        self.version = 1
        self.epoch = secrets.token_hex(8) if epoch is None else epoch
        self._deltas: deque[Delta] = deque(maxlen=keep)

    def record(
        self, installed: RouteSet, switches: list[str],
        known: Mapping[str, tuple[Table, Table]] | None = None,
    ) -> Delta | None:  # fmt: skip
        """Adopt `installed`; the delta is computed over `switches` (those that may have
        changed), but for the switches of `known`, whose (added, removed) the caller knows
        (a planned push read back as planned). Returns the logged delta, or None when
        nothing changed."""
        old = self.installed
        # equal tables (identity first: read-backs share the pushed tables) carry no delta;
        # the others give theirs on the columns, as tables
        added: dict[str, Table] = {}
        removed: dict[str, Table] = {}
        was, now = old.tables, installed.tables
        pairs: list[tuple[str, Table, Table]] = []  # tables on both sides
        for sw in sorted(set(switches)):
            before, after = was.get(sw), now.get(sw)
            if before is after:
                continue
            if known is not None and sw in known:
                plus, minus = known[sw]
                if plus:
                    added[sw] = plus
                if minus:
                    removed[sw] = minus
                continue
            if not before or not after:  # into or out of an empty switch: all of it
                if after:
                    added[sw] = after
                if before:
                    removed[sw] = before
                continue
            pairs.append((sw, before, after))  # equal tables give an empty delta
        for (sw, _, _), (plus, minus) in zip(pairs, _table_deltas(pairs), strict=True):
            if plus:
                added[sw] = plus
            if minus:
                removed[sw] = minus
        added, removed = dict(sorted(added.items())), dict(sorted(removed.items()))
        self.installed = installed
        if not added and not removed:
            return None
        self.version += 1
        delta = Delta(self.version, RouteSet(added), RouteSet(removed))
        self._deltas.append(delta)
        return delta

    def after(self, since: int, epoch: str) -> list[Delta] | None:
        """The deltas after version `since` of `epoch`, or None if they are no longer (or
        never were) all in the log, or `epoch` is not this log's; `since == version` gives an
        empty list."""
        if epoch != self.epoch or not 0 < since <= self.version:
            return None
        if since == self.version:
            return []
        if not self._deltas or self._deltas[0].version > since + 1:
            return None
        return [d for d in self._deltas if d.version > since]


def _table_deltas(pairs: list[tuple[str, Table, Table]]) -> list[tuple[Table, Table]]:
    """_table_delta of every (switch, before, after), all matched at once (match_rows)."""
    befores, afters = [b for _, b, _ in pairs], [a for _, _, a in pairs]
    matched = match_rows(befores, afters) if len(pairs) > 1 else None
    if matched is None:
        return [_table_delta(b, a) for _, b, a in pairs]
    pos, found = matched
    b_nh, b_own = (np.concatenate([getattr(t, c) for t in befores]) for c in ("next_hop", "owner"))
    a_nh, a_own = (np.concatenate([getattr(t, c) for t in afters]) for c in ("next_hop", "owner"))
    kept = found & (b_nh[pos] == a_nh) & (b_own[pos] == a_own)
    stays = np.zeros(b_nh.size, bool)
    stays[pos[kept]] = True
    a_at = np.cumsum([0] + [len(t) for t in afters]).tolist()
    b_at = np.cumsum([0] + [len(t) for t in befores]).tolist()
    return [
        (after.take(~kept[a_at[i] : a_at[i + 1]]), before.take(~stays[b_at[i] : b_at[i + 1]]))
        for i, (before, after) in enumerate(zip(befores, afters, strict=True))
    ]


def _table_delta(before: Table, after: Table) -> tuple[Table, Table]:
    """(entries of `after` not in `before`, entries of `before` not in `after`)."""
    if not before or not after:
        return after, before
    added, removed = delta_rows(before, after)
    return after.take(added), before.take(removed)


def delta_rows(before: Table, after: Table) -> tuple[np.ndarray, np.ndarray]:
    """(rows of `after` whose entry is not in `before`, rows of `before` whose entry is not
    in `after`), ascending (what `_table_delta` takes; found ahead for a planned push)."""
    if not before or not after:
        return np.arange(len(after)), np.arange(len(before))
    kb, ka = match_keys(before, after)
    pos = np.minimum(np.searchsorted(kb, ka), kb.size - 1)
    kept = (kb[pos] == ka) & (before.next_hop[pos] == after.next_hop)
    kept &= before.owner[pos] == after.owner
    stays = np.zeros(kb.size, bool)
    stays[pos[kept]] = True
    return np.flatnonzero(~kept), np.flatnonzero(~stays)
