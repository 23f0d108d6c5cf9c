"""The operator's commands on the routes: apply a route file and hold it, roll back to the
checkpoint, release (docs: controller.service.held). The API threads hand a command to the
worker, which runs it between rounds; the engine (a subclass) owns the state they change,
under its one condition."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from controller.errors import FabricTeError, OverDeadline, PreconditionError
from controller.model.assignment import Assignment
from controller.model.flows import FlowSet, pair_keys
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.routes.plan import plan_update
from controller.routes.tables import RouteSet
from controller.service.held import Held, PlanView, check_applicable, unlike_jobs
from controller.service.metrics import Metrics
from controller.service.persist import inputs_digest
from controller.service.reads import EngineReads
from controller.service.restored import HELD, restored_result
from controller.service.rounds import Taken, Target
from controller.solver import AssignResult, Certificate, RouteIndex, SolveResult

log = logging.getLogger("fabric_te.engine")
COMMAND_SECONDS = 120.0  # an operator's command waits at most this long for the worker


@dataclass
class Command:
    """An operator's command on the routes, run by the worker between rounds."""

    kind: str  # "apply", "rollback" or "release"
    assignment: Assignment | None = None
    source: str = ""
    done: threading.Event = field(default_factory=threading.Event)
    result: PlanView | None = None
    error: BaseException | None = None


class RouteCommands(EngineReads):
    """Routes applied from a file and held: the command side of
    `controller.service.engine.Engine` (it reads through `EngineReads`)."""

    _taken: int
    _fabric_key: str  # the fabric's wiring and link speeds, as the inputs digest takes them
    _commands: list[Command]
    # the engine's own figures when a file's routes replaced its routes: back on a rollback
    _own: SolveResult | None
    metrics: Metrics
    repair_now: Callable[[LinkHealth], AssignResult]
    repair_for: Callable[[LinkHealth], AssignResult]
    _push: Callable[[Target], None]
    _settle: Callable[[int], None]
    _restore: Callable[[Assignment, LinkHealth], None]

    def plan_routes(self, assignment: Assignment) -> PlanView:
        """What installing `assignment` would change on the switches now; nothing pushed."""
        plan, wanted = plan_update(self.fabric, self.installed, assignment)
        return PlanView.of(plan, assignment, len(wanted))

    def apply_routes(
        self, assignment: Assignment, routes: RouteSet, source: str, dry_run: bool = False
    ) -> PlanView:
        """Install a route file's routes and hold them, keeping what they replace as the
        checkpoint (stored first: nothing is pushed unless stored). RouteError naming the
        rows when the file cannot be applied (see `held.check_applicable`); dry-run: the
        plan only."""
        check_applicable(self.fabric, assignment, routes, self.health, source)
        with self._cond:
            jobs = [job for job, _ in self._state.job_list()]
        foreign, missing = unlike_jobs(assignment,
                                       jobs_flows(self.fabric, jobs, self.intake.known()))
        if foreign or missing:
            log.warning("routes of %s: %d of their flows belong to no job of the controller, "
                        "and %d flows of its jobs have none; applied all the same", source,
                        foreign, missing)  # fmt: skip
        view = (self.plan_routes(assignment) if dry_run
                else self._command(Command("apply", assignment, source)))
        return replace(view, flows_of_no_job=foreign, job_flows_missing=missing)

    def rollback_routes(self, dry_run: bool = False) -> PlanView:
        """Re-install the checkpoint the last apply kept (see `held`)."""
        held = self._held_or_refuse("roll back")
        if held.checkpoint is None:
            raise PreconditionError(f"nothing to roll back to: the routes of {held.source} "
                                    "were restored by a rollback, which keeps no checkpoint; "
                                    "`tectl routes release` hands the fabric back to the "
                                    "engine")  # fmt: skip
        if dry_run:
            return self.plan_routes(held.checkpoint)
        return self._command(Command("rollback"))

    def release_routes(self) -> PlanView:
        """Stop holding the routes applied from a file: the engine solves the current
        inputs (a plan of nothing is returned; the solve's push follows)."""
        self._held_or_refuse("release")
        return self._command(Command("release"))

    def _held_or_refuse(self, what: str) -> Held:
        held = self.intake.held
        if held is None:
            raise PreconditionError(f"nothing to {what}: no routes applied from a file are "
                                    "held (`tectl routes apply FILE` holds some)")  # fmt: skip
        return held

    def _command(self, command: Command) -> PlanView:
        """Hand `command` to the worker and wait for its outcome."""
        if not self.replica.is_leader():
            leader = self.replica.leadership.leader() or "none known"
            raise PreconditionError(f"this replica follows; send it to the leader ({leader})")
        with self._cond:
            self._commands.append(command)
            self._cond.notify_all()
        if not command.done.wait(COMMAND_SECONDS):
            raise OverDeadline(f"routes {command.kind}: the worker did not run it within "
                               f"{COMMAND_SECONDS:g} s; see `tectl status`")  # fmt: skip
        if command.error is not None:
            raise command.error
        assert command.result is not None
        return command.result

    def _run_command(self) -> None:
        """Run the oldest command waiting (on the worker, between rounds)."""
        with self._cond:
            command = self._commands.pop(0)
        try:
            if not self.replica.is_leader():
                raise PreconditionError("this replica is no longer the leader; nothing done")
            run = {"apply": self._apply, "rollback": self._rollback, "release": self._release}
            command.result = run[command.kind](command)
        except Exception as err:  # noqa: BLE001 - handed to the caller
            if not isinstance(err, FabricTeError):
                log.exception("routes %s failed", command.kind)
            command.error = err
        finally:
            command.done.set()

    def _inputs_now(self) -> tuple[LinkHealth, str]:
        with self._cond:
            health = self._state.health
            assert health is not None
            return health, inputs_digest(self._state.jobs, health, self._fabric_key)

    def _apply(self, command: Command) -> PlanView:
        assignment = command.assignment
        assert assignment is not None
        health, digest = self._inputs_now()
        before, stored = self.installer.target, self.intake.stored
        replaced = before.assignment if before is not None else self.installer.pushed
        if replaced is None:  # nothing installed by this controller: no TE routes
            replaced = _no_routes()
        held = self.intake.held
        point_inputs = (stored.digest if held is None and stored is not None
                        and stored.assignment is replaced else "")  # fmt: skip
        view = self.plan_routes(assignment)
        if held is not None and not view.switches:
            # the held routes again (an apply retried): its checkpoint is kept, or a
            # rollback could only reach these same routes
            self.intake.store_held(replace(held, source=command.source, flows=view.flows,
                                           entries=view.entries))  # fmt: skip
            log.info("routes applied again: already held, checkpoint kept",
                     extra={"source": command.source, "entries": view.entries})  # fmt: skip
            return view
        self.intake.store_held(Held(
            command.source, view.flows, view.entries, replaced, point_inputs,
            checkpoint_source="" if held is None else held.source,
            fabric=self._fabric_key))  # fmt: skip
        if held is None:
            with self._cond:
                self._own = self.last_result
        self._install_held(assignment, health, digest)
        log.info("routes applied and held", extra={"source": command.source,
                 "flows": view.flows, "entries": view.entries})  # fmt: skip
        return view

    def _install_held(self, assignment: Assignment, health: LinkHealth, digest: str) -> None:
        """Install `assignment` as what the switches hold, stored as the assignment (a
        restart or takeover adopts it), with no certificate (a file's routes have none)."""
        self.intake.store_assignment(assignment, digest)
        target = Target(assignment, assignment.flows.job_ids, health)
        self.installer.install(target, RouteIndex.build(self.fabric, assignment))
        self.installer.previous = assignment
        self._deferred = None
        self.metrics.set_certificate(None)
        self._push(target)
        self._held_figures(assignment, health, None, count=True)

    def _held_figures(self, assignment: Assignment, health: LinkHealth,
                      certificate: Certificate | None, count: bool = False) -> None:  # fmt: skip
        """Status, ListJobs and /metrics of the routes held now: figured from them as a
        restart figures the routes it adopts (`restored`), with the certificate of the
        repair that made them (a file's routes have none). `count`: the MLU of rows on the
        fabric's hashing counted here as a restart counts it; else by the rate prediction
        (a repair's round is not held up by it)."""
        result = restored_result(self.fabric, health, assignment, self.options.qps,
                                 self.options.certify if count else None)  # fmt: skip
        result = replace(result, method=HELD, certificate=certificate)
        with self._cond:
            self.last_result = result
        self.predictor.record(result, health)

    def _rollback(self, command: Command) -> PlanView:
        """Re-install the checkpoint, repaired for links down since (pushed once). Back to
        the engine's own routes, the engine resumes; back to a file's, they stay held."""
        held = self.intake.held
        assert held is not None and held.checkpoint is not None
        point = held.checkpoint
        health, digest = self._inputs_now()
        before = self.installed
        view = self.plan_routes(point)
        if held.checkpoint_source:  # a file's routes: held again, with no checkpoint left
            self.intake.store_held(Held(held.checkpoint_source, view.flows, view.entries, None,
                                        fabric=self._fabric_key))  # fmt: skip
        else:
            self.intake.store_held(None)
        up = LinkHealth.all_up(self.fabric)
        self.installer.install(Target(point, point.flows.job_ids, up),
                               RouteIndex.build(self.fabric, point))  # fmt: skip
        if health.changed(self.fabric).size:  # links down or degraded since: repaired first
            self.repair_now(health)
            target = self.installer.target
            assert target is not None
            point = target.assignment
        else:
            self._push(Target(point, point.flows.job_ids, health))
        self.intake.store_assignment(point, held.checkpoint_inputs or digest)
        self.installer.previous = point
        if not held.checkpoint_source:
            self._figures_back(point, health)
            self._resume(solve=held.checkpoint_inputs != digest)
        else:
            self._held_figures(point, health, None, count=True)
        log.info("routes rolled back", extra={"to": held.checkpoint_source or "engine"})
        # what was pushed: the checkpoint as repaired for the links down since, not as kept
        plan, wanted = plan_update(self.fabric, before, point)
        return PlanView.of(plan, point, len(wanted))

    def _figures_back(self, point: Assignment, health: LinkHealth) -> None:
        """Status, ListJobs and /metrics of the engine's routes rolled back to: its last
        result before the apply, certificate and all (a solve follows where the inputs
        changed meanwhile); computed from the routes where there is none (a restart since
        adopted the held routes from the store: `restored`)."""
        with self._cond:
            own, self._own = self._own, None
            if own is not None:
                self.last_result = own
        if own is None:
            self._restore(point, health)
        else:
            self.predictor.record(own, health)

    def _release(self, command: Command) -> PlanView:
        self.intake.store_held(None)
        with self._cond:
            self._own = None  # the solve that follows has figures of its own
        self._resume(solve=True)
        log.info("held routes released: the engine solves the current inputs")
        return PlanView((), 0, 0)

    def _resume(self, solve: bool) -> None:
        """The engine's own routing again; with `solve`, a round of the current inputs."""
        if solve:
            with self._cond:
                self._taken = min(self._taken, self._state.version - 1)
                self._applied = min(self._applied, self._state.version - 1)
                self._cond.notify_all()

    def _held_round(self, taken: Taken) -> None:
        """New inputs while routes are held: a link change is repaired on them (stored, so
        a restart adopts the repaired ones); job changes move nothing."""
        target = self.installer.target
        if target is not None and not np.array_equal(target.health.factor, taken.health.factor):
            res = self.repair_for(taken.health)  # on demand: nothing is precomputed while held
            self.intake.store_assignment(res.assignment, taken.digest)
            self.installer.previous = res.assignment
            if res.certificate is not None and not res.certificate.pending:
                with self._cond:  # Status: the repair's certificate (a pending one is set
                    self._deferred = res.certificate  # by the repair itself)
            self._held_figures(res.assignment, taken.health, res.certificate)  # and /metrics
            moved = res.assignment.flows.take(res.churn)  # flows moved: once however split
            self.metrics.churn.inc(np.unique(pair_keys(moved)[0]).size)
        else:  # job changes only: stored, nothing to install
            self.latency.dropped()
        self._settle(taken.version)


def _no_routes() -> Assignment:
    """The assignment of no TE routes (everything on the fabric's own hashing)."""
    return Assignment(FlowSet.empty(), np.zeros(0, np.int64))
