"""Inputs into the engine: check, store, apply, for jobs and link health alike, and the
inputs other replicas write, followed through the store.

Every input is checked against the current desired state, written to the store (when the
replica has one) before it is acknowledged, then applied under the engine's lock; a write
lost to another replica's (StoreConflict) is re-read, re-checked and retried. The last
assignment stored (by this replica or the leader) is kept here too: a start, a takeover and
a follower adopt it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from controller.errors import FabricTeError, InputError, StoreConflict, StoreCorrupt
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import Job, job_flows, jobs_flows
from controller.service.held import Held
from controller.service.persist import (
    ASSIGNMENT,
    HELD,
    JOBS,
    LINKS,
    Stored,
    fabric_key,
    inputs_digest,
)
from controller.service.replica import Replica
from controller.service.state import DesiredState
from controller.service.store import Change
from controller.solver import SolveOptions, SolveResult, solve

log = logging.getLogger("fabric_te.engine")
WRITE_ATTEMPTS = 8  # guarded store writes per input before the caller gets ABORTED
V = TypeVar("V")


@dataclass(frozen=True)
class StoredAssignment:
    """An assignment as the store holds it, with the digest of the inputs it answers to."""

    assignment: Assignment
    digest: str


class Intake:
    """Job and link inputs of one fabric: checked, stored, applied."""

    def __init__(
        self,
        fabric: Fabric,
        state: DesiredState,
        replica: Replica,
        cond: threading.Condition,
        changed: Callable[[bool], int],
    ) -> None:
        """`changed(refresh)` is called under `cond` after every change applied (refresh:
        the leader stored a new assignment) and returns the state version."""
        self.fabric = fabric
        self.state = state
        self.replica = replica
        self._cond = cond
        self._changed = changed
        self._writes = threading.Lock()  # one input write at a time: check, store, apply
        self.stored: StoredAssignment | None = None
        self.held: Held | None = None  # routes applied from a file, held (stored too)
        # routes held on other wiring or speeds of this fabric (see `_on_this_fabric`): not
        # re-installed; the leader removes their record (`release_stale`)
        self.stale: Held | None = None
        # flows built as each job came (by id, with the job): a solve takes them, so a
        # job's flows are built once (a large all-to-all job's are costly)
        self.built: dict[str, tuple[Job, FlowSet]] = {}

    def load(self, stored: Stored | None) -> bool:
        """Take the inputs a store held at start; returns whether the stored assignment
        answers to them (then the engine adopts it)."""
        if stored is None:
            return False
        state = self.state
        for job, generation in stored.jobs.values():
            state.set_job(job, generation)
        if stored.health is not None and stored.health.changed(self.fabric).size:
            state.set_health(stored.health)
        state.count_from(stored.revision)  # versions never go back across a restart
        if stored.assignment is None:
            return False
        self.stored = StoredAssignment(stored.assignment, stored.assignment_inputs)
        self.held = self._on_this_fabric(stored.held)
        assert state.health is not None
        # held routes are adopted whatever the inputs: they answer to the file, not to them
        adopted = self.held is not None or (
            stored.assignment_inputs == inputs_digest(state.jobs, state.health,
                                                      fabric_key(self.fabric)))
        log.info("loaded %d jobs from %s (revision %d); stored assignment %s", len(stored.jobs),
                 self.replica.status_fields()["store"], stored.revision,
                 "adopted" if adopted else "to be re-solved")  # fmt: skip
        return adopted

    def _on_this_fabric(self, held: Held | None) -> Held | None:
        """`held`, unless its routes were applied on other wiring or link speeds of this
        fabric (a fabric file edited under the same name): their ids name other devices,
        so they are not re-installed and the inputs are solved instead (kept as `stale`)."""
        if held is None or held.fabric == fabric_key(self.fabric):
            return held
        log.warning("routes held from %s were applied on other wiring or link speeds of "
                    "fabric %r: not re-installed; the hold is released and the current "
                    "inputs are solved", held.source, self.fabric.name)  # fmt: skip
        self.stale = held
        return None

    def release_stale(self) -> None:
        """Remove the record of routes held on other wiring (`_on_this_fabric`), as the
        leader (at every takeover, a start's first included); a store that refuses is
        logged and the removal tried at the next takeover."""
        if self.stale is None:
            return
        try:
            self.store_held(None)
        except FabricTeError as err:
            log.warning("could not remove the record of the routes held from %s: %s",
                        self.stale.source, err)  # fmt: skip
            return
        self.stale = None

    def known(self) -> dict[str, tuple[Job, FlowSet]]:
        """The flows built so far, by job id (a copy, for a solve in another thread)."""
        with self._cond:
            return dict(self.built)

    def leaders(self) -> Assignment | None:
        """The assignment stored last (a follower wants it)."""
        with self._cond:
            return None if self.stored is None else self.stored.assignment

    def store_assignment(self, assignment: Assignment, digest: str) -> None:
        """Store the assignment just installed, with the digest of its inputs."""
        self.replica.put_assignment(assignment, digest)
        with self._cond:
            self.stored = StoredAssignment(assignment, digest)

    def store_held(self, held: Held | None) -> None:
        """Store the routes held from a file (None: none now); raises if the store
        refuses, before anything is pushed."""
        self.replica.put_held(held)
        with self._cond:
            self.held = held

    def what_if(
        self,
        updates: Mapping[int, float],
        extra: list[Job],
        options: SolveOptions,
        *,
        put: Sequence[Job] = (),
        delete: Sequence[str] = (),
        previous: Assignment | None = None,
        switches: Mapping[int, bool] | None = None,
    ) -> SolveResult:
        """Solve the current state plus changes (`extra` jobs added, `put` created or
        replaced, `delete` removed), from `previous` as a real solve starts from what is
        installed; nothing is stored or applied."""
        with self._cond:
            jobs = {k: v for k, (v, _) in self.state.jobs.items()}
            health = self.state.health
        assert health is not None
        for i, job in enumerate(extra):
            if job.id in jobs:
                where = ("the controller's jobs" if job.id in self.state.jobs else
                         f"extra_jobs[{[j.id for j in extra].index(job.id)}]")  # fmt: skip
                raise InputError(f"extra_jobs[{i}]: job id {job.id!r} is already in {where}")
            jobs[job.id] = job
        jobs.update((job.id, job) for job in put)
        for i, job_id in enumerate(delete):
            if jobs.pop(job_id, None) is None:
                raise InputError(f"delete_jobs[{i}]: no job {job_id!r}")
        flows = jobs_flows(self.fabric, [jobs[k] for k in sorted(jobs)], self.known())
        after = health.reported(self.fabric, updates, switches)  # as a report would
        return solve(self.fabric, after, flows, previous=previous, options=options)

    # ---- inputs (called from API threads) ---------------------------------------------
    def put_job(self, job: Job, generation: int) -> tuple[int, int]:
        """Create or replace a job; returns (generation, state version)."""
        flows = job_flows(self.fabric, job)  # its own traffic must be valid: not under the lock

        def apply(g: int) -> None:
            self.state.set_job(job, g)
            self.built[job.id] = (job, flows)

        return self._write(
            JOBS + job.id,
            lambda: self.state.check_put(job, generation, flows_checked=True),
            lambda g: self.replica.put_job(job, g),
            apply,
        )

    def delete_job(self, job_id: str) -> tuple[bool, int]:
        """Remove a job (idempotent); returns (existed, state version)."""
        return self._write(
            JOBS + job_id,
            lambda: job_id in self.state.jobs,
            lambda e: self.replica.delete_job(job_id) if e else 0,
            lambda e: (self.state.delete_job(job_id), self.built.pop(job_id, None)),
        )

    def report_links(self, updates: Mapping[int, float], replace_all: bool = False,
                     switches: Mapping[int, bool] | None = None) -> int:  # fmt: skip
        """Apply link factors and switch drains (see DesiredState.report_links); returns
        the state version."""
        _, version = self._write(
            LINKS,
            lambda: self.state.check_links(updates, replace_all, switches),
            self.replica.put_health,
            self.state.set_health,
        )
        return version

    def _write(
        self,
        key: str,
        check: Callable[[], V],
        store: Callable[[V], int],
        apply: Callable[[V], object],
    ) -> tuple[V, int]:
        """Check against the current state, write to the store, then apply and acknowledge.
        A write lost to another replica's (StoreConflict) is re-read, re-checked and retried
        after a short random pause, up to WRITE_ATTEMPTS times in all."""
        with self._writes:
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                with self._cond:
                    value = check()
                try:
                    revision = store(value)
                except StoreConflict:
                    if attempt == WRITE_ATTEMPTS:
                        raise
                    self._adopt(self.replica.refresh(key))
                    time.sleep(random.uniform(0, 0.002 * attempt))  # let the other finish
                    continue
                with self._cond:
                    before = self.state.version
                    if self.replica.is_current(key, revision):
                        apply(value)
                    if self.state.version == before:  # a no-op: nothing to install
                        return value, before
                    fields = {"key": key, "revision": revision, "state_version": self.state.version}
                    log.info("input accepted", extra=fields)
                    return value, self._changed(False)
        raise AssertionError("unreachable")  # pragma: no cover

    def apply_changes(self, changes: list[Change]) -> None:
        """Adopt the changes another replica wrote (the store's watch). They are marked
        taken and applied under the input-write lock: a write checked in between would
        expect the newer revision with a value computed from the older state, and succeed,
        dropping the other replica's update."""
        with self._writes:
            self._adopt(self.replica.fresh(changes))

    def _adopt(self, changes: list[Change]) -> None:
        """Apply changes already marked taken (the new ones); records are decoded before
        the engine lock is taken. A change overtaken by a newer revision of its key (the
        leader's own assignment write) is skipped: the newer one is applied by its writer."""
        persist = self.replica.persist
        if not changes or persist is None:
            return
        decoded: list[tuple[str, bytes | None, Stored, int]] = []
        for key, value, rev in changes:
            into = Stored(0)
            try:
                if value is not None:
                    persist.decode(key, value, into)
            except StoreCorrupt as err:
                log.error("ignored a stored change: %s", err)
                continue
            decoded.append((key, value, into, rev))
        with self._cond:
            refresh = False
            for key, value, into, rev in decoded:
                if persist.newest(key) > rev:
                    continue  # overtaken
                if key.startswith(JOBS):
                    job_id = key[len(JOBS) :]
                    self.built.pop(job_id, None)  # another replica's: built when solved
                    if value is None:
                        self.state.delete_job(job_id)
                    else:
                        self.state.set_job(*into.jobs[job_id])
                elif key == LINKS:
                    self.state.set_health(into.health or LinkHealth.all_up(self.fabric))
                elif key == HELD:
                    # the leader applied a file (None: released)
                    self.held = self._on_this_fabric(into.held)
                elif key == ASSIGNMENT and into.assignment is not None:
                    self.stored = StoredAssignment(into.assignment, into.assignment_inputs)
                    refresh = True  # the leader has pushed it: read what it did
            self._changed(refresh)
