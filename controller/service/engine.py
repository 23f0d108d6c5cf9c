"""The controller's engine: desired state in, installed routes out, one worker thread.

API threads check, store and record inputs (`intake`) and return at once. The worker takes
the changes that arrive within `debounce` s as one round and runs the steps `rounds` decides:
a link change is repaired at once against what is installed, and settled without a global
solve while the jobs are unchanged (`_settle_health`); job changes get a global solve in a
thread of its own (`solves`), pushed re-based on link changes since, or dropped when stale;
one that job changes supersede while it runs stops at its next stage (`rounds.superseded`),
so a burst of puts is solved once, as one round.
Every push goes through the `installer` (plan, push, read back, reconcile); what the engine
reports as installed is what it read back. A round is settled (`wait_idle`) once the routes
read back answer to its inputs; predicted rates follow (`predictor`, `wait_predicted`).

Routes applied from a file (`apply_routes`) are held: the worker runs the operator's
command between rounds, and while held it repairs link changes on them and solves nothing
(see `controller.service.held`); `rollback_routes` and `release_routes` end it.

Fail-static: at start the installed routes are read and nothing is pushed until inputs come;
routes left on the switches at exit stay (ECMP defaults carry the rest). With a store
(`replica`), inputs are stored before they are acknowledged and the stored assignment is
adopted at start when it answers to them; only the elected leader solves and pushes.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from controller.drivers.interface import Driver
from controller.drivers.reconcile import Reconciler
from controller.errors import DriverError, Fenced
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job
from controller.service import rounds
from controller.service.frozen import Frozen
from controller.service.installer import Installer, RouteEvent
from controller.service.intake import Intake
from controller.service.latency import ReportLatency
from controller.service.metrics import Metrics
from controller.service.persist import fabric_key, inputs_digest
from controller.service.precomputed import SETTLE, Base, Precomputer, lost_arcs, moved_counts
from controller.service.predictor import Predictor
from controller.service.replica import Replica
from controller.service.restored import RESTORED, restored_result
from controller.service.rounds import Step, Taken, Target, Then, Wake
from controller.service.route_commands import Command, RouteCommands
from controller.service.solves import Baseline, GlobalSolve, rebased_result
from controller.service.state import DesiredState, Inputs
from controller.solver import (
    REOPT_TRIES,
    AssignResult,
    Certificate,
    FollowUp,
    RouteIndex,
    SolveOptions,
    SolveResult,
    follow_up,
    mlu_counted,
    repair_indexed,
    warm_up,
)

__all__ = ["Engine", "RouteEvent"]

log = logging.getLogger("fabric_te.engine")
# reference work (input flows x QPs x hash seeds) the reaction path certifies inline when a
# job is at risk; past it the certificate is deferred to the solve's thread (docs/certificate.md)
REACT_WORK = 1_000_000


class Engine(RouteCommands):
    """Desired state, the solve loop and the installed routes of one fabric."""

    def __init__(
        self,
        fabric: Fabric,
        driver: Driver,
        *,
        driver_name: str = "",
        debounce: float = 0.05,
        options: SolveOptions | None = None,
        push_timeout: float = 5.0,
        metrics: Metrics | None = None,
        reconcile_interval: float = 5.0,
        reconciler: Reconciler | None = None,
        replica: Replica | None = None,
        clock: Callable[[], float] = time.monotonic,
        precompute: bool = True,
        precompute_budget: int | None = None,
        precompute_elements: int | None = None,
        precompute_settle: float = SETTLE,
        precompute_process: bool | None = None,
        retry_first: float = rounds.RETRY_FIRST_S,
    ) -> None:
        warm_up()  # the solver's compiled kernels, before the first solve needs them
        self.fabric = fabric
        self.driver = driver
        self.driver_name = driver_name or type(driver).__name__
        self.debounce = debounce
        self.options = options or SolveOptions()
        # the reaction path (repairs, follow-ups, re-based results) certifies at once when
        # no job is at risk or the reference is small work, else defers to the solve's
        # thread, which certifies the settled result (or a global solve) in full
        self.react = replace(self.options.certify, defer_above=REACT_WORK)
        self.metrics = metrics or Metrics()
        self._clock = clock
        self._cond = threading.Condition()
        self._state = DesiredState(fabric)
        self._applied = 0  # state version the installed routes answer to
        self._taken = 0  # state version of the inputs last taken by the worker
        self._jobs_version = 0  # state version at which the jobs last changed (taken)
        self._busy = False
        self._stop = False
        self._retry_s = 0.0  # the wait before a failed round is taken again (0: none failed)
        self.retry_first = retry_first  # the first such wait, doubling after each failure
        self._interval = reconcile_interval
        self._swept = clock()  # when the last periodic reconcile ended
        self._frozen = Frozen(clock)  # the collector kept off the reaction path
        self._takeover = False  # became the leader: adopt or solve what is stored
        self._fabric_key = fabric_key(fabric)  # in the digest of the inputs an assignment answers
        self._roled = False  # had a role before (its first is logged at info level)
        self._refresh = False  # a follower saw a new stored assignment: read the switches
        self.latency = ReportLatency(self.metrics.report_to_installed_seconds)
        self.metrics.solve_running.set_function(lambda: self.solving()[0])
        # read when scraped, as Status reads it: every path that moves `_applied` (a settle, a
        # follower's catch-up, an adoption, a takeover) is counted, none has to set it
        self.metrics.queue_depth.set_function(lambda: self._state.version - self._applied)
        self._round: Taken | None = None  # the inputs last taken
        self._commands: list[Command] = []  # operators' commands waiting for the worker
        self._solve: GlobalSolve | None = None  # the global solve running or ended
        self._solve_ended = False  # it has ended: the worker pushes its result
        self._dropped_last = False  # the last global result was dropped
        self._baseline: Baseline | None = None  # the last global solve pushed
        self.replica = replica or Replica(fabric)
        self.replica.bind_metrics(self.metrics.registry)
        self.intake = Intake(fabric, self._state, self.replica, self._cond, self._changed)
        fenced = self.replica.fenced(driver)  # pushes checked against the election
        self.installer = Installer(
            fabric, driver, fenced,
            reconciler or Reconciler(fenced, fabric, push_timeout=push_timeout),
            self.metrics, self._cond, push_timeout=push_timeout,
            is_leader=self.replica.is_leader, stopped=lambda: self._stop,
            leaders=self.intake.leaders, table_budget=self.options.table_budget,
        )  # fmt: skip
        self.predictor = Predictor(fabric, self.metrics, self._cond, busy=lambda: self._busy,
                                   stopped=lambda: self._stop, clock=clock,
                                   counted=self._counted,
                                   defaults=(self.options.certify.reference,
                                             self.options.certify.seed,
                                             self.options.qps))  # fmt: skip
        self.last_result: SolveResult | None = None
        self._deferred: Certificate | None = None  # of a repair installed since, if pending
        self._own: SolveResult | None = None  # the figures a file's held routes replaced
        self.last_error = ""
        self.repairs = 0  # repairs pushed
        self.reoptimised = 0  # health-only rounds that needed the bounded re-optimisation
        self.reopt_tries = REOPT_TRIES  # rows a re-optimisation tries at most
        self.global_solves = 0  # global solves pushed
        self.settles_certified = 0  # settled link changes certified in the solve's thread
        self.rebased = 0  # global results re-based on a link change that came meanwhile
        self.dropped = 0  # global solves dropped unpushed: stale when they ended or abandoned
        self.abandoned = 0  # of those, solves stopped at a stage as job changes came
        self.solve_hook: Callable[[LinkHealth], None] = lambda health: None  # before a solve
        # the repair of every single failure of what is installed, computed beside
        # (controller.service.precomputed); a report that matches one uses it
        self.precomputer = Precomputer(fabric, repair=self._repair_of, busy=self._precompute_paused,
                                       metrics=self.metrics.precomputed,
                                       budget=precompute_budget, enabled=precompute,
                                       max_elements=precompute_elements,
                                       settle=precompute_settle,
                                       process=precompute_process)  # fmt: skip
        self.precomputed_hits = 0  # link reports repaired from a precomputed repair
        self._load()
        self.installer.reconcile(None)  # fail-static: adopt what is there
        self._swept = clock()  # that was a full reconcile
        self._thread = threading.Thread(target=self._run, name="fabric-te-engine", daemon=True)
        self._thread.start()
        self.replica.start(self.intake.apply_changes, self._on_role)

    def _load(self) -> None:
        """Take the stored inputs; adopt the stored assignment if it answers to them."""
        adopted = self.intake.load(self.replica.load())
        self._applied = self._taken = self._state.origin  # the inputs read: still to take
        stored = self.intake.stored
        if stored is None:
            return
        self.installer.previous = stored.assignment
        if adopted:
            inputs = self._state.take()
            self._adopt(stored.assignment, inputs)
            self._jobs_version = self._state.version
            if self.replica.is_leader():  # a follower's figures are none (it solves nothing)
                self._restore(stored.assignment, inputs.health)

    def _restore(self, assignment: Assignment, health: LinkHealth) -> None:
        """The figures (Status, ListJobs, /metrics) are of `assignment`, adopted from the
        store, as a solve would report it (`restored.restored_result`; the store keeps no
        figures), its rates predicted as any result's: they go on across a restart rather
        than wait for the next change."""
        result = restored_result(self.fabric, health, assignment, self.options.qps,
                                 self.options.certify)  # fmt: skip
        with self._cond:
            self.last_result = result
        self.predictor.record(result, health)

    def _adopt(self, assignment: Assignment, inputs: Inputs) -> None:
        """The stored `assignment` answers to `inputs`: it is wanted and installed."""
        ids = tuple(j.id for j in inputs.jobs)
        self.installer.want(assignment, Target(assignment, ids, inputs.health))
        with self._cond:
            self._applied = max(self._applied, inputs.version)
            self._taken = max(self._taken, inputs.version)

    # ---- inputs (API threads): see controller.service.intake --------------------------
    def put_job(self, job: Job, generation: int) -> tuple[int, int]:
        """Create or replace a job; returns (generation, state version)."""
        return self.intake.put_job(job, generation)

    def delete_job(self, job_id: str) -> tuple[bool, int]:
        """Remove a job (idempotent); returns (existed, state version)."""
        return self.intake.delete_job(job_id)

    def report_links(self, updates: Mapping[int, float], replace_all: bool = False,
                     switches: Mapping[int, bool] | None = None) -> int:  # fmt: skip
        """Apply link factors and switch drains (see DesiredState.report_links); returns
        the state version."""
        return self.intake.report_links(updates, replace_all, switches)

    def jobs(self) -> list[tuple[Job, int]]:
        """(job, generation) sorted by id."""
        with self._cond:
            return self._state.job_list()

    def _changed(self, refresh: bool = False) -> int:
        """An input was applied (under the lock): wake the worker."""
        self.latency.changed(self._clock())
        self.precomputer.hold()  # its process pauses: the cores are the reaction's
        self._refresh |= refresh
        self._cond.notify_all()
        return self._state.version

    def _on_role(self, leader: bool) -> None:
        # its first role is news only at info level (every start has one); a change after
        # is a takeover or a loss of the lease, worth a warning
        level = logging.WARNING if self._roled else logging.INFO
        self._roled = True
        log.log(level, "replica %s is now %s", self.replica.id,
                "the leader" if leader else "a follower")  # fmt: skip
        with self._cond:
            self._takeover = leader
            self._cond.notify_all()

    @property
    def reconcile_interval(self) -> float:
        """Seconds between periodic reconciles."""
        return self._interval

    @reconcile_interval.setter
    def reconcile_interval(self, seconds: float) -> None:
        """A new interval counts from the last periodic reconcile, at once: the worker,
        waiting for the old one to run out, is woken to re-check."""
        with self._cond:
            self._interval = seconds
            self._cond.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker, waiting at most `timeout` s for a push under way. A push cut off
        by the process ending leaves a consistent table (batches are all or nothing and
        stages run downstream first), and the next start reconciles it."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout)
        self.precomputer.close()
        self.replica.close()

    # ---- the worker -------------------------------------------------------------------
    def _wake(self) -> Wake:
        """What the worker knows now (under the lock)."""
        return Wake(
            stop=self._stop,
            fresh=self._taken < self._state.version,
            solve_ended=self._solve_ended,
            solving=self._solve is not None,
            takeover=self._takeover,
            refresh=self._refresh,
            leader=self.replica.is_leader(),
            sweeping=bool(self.installer.sweeping),
            sweep_in=self._swept + self._interval - self._clock(),
            command=bool(self._commands),
            precompute_in=self._precompute_in(),
        )

    def _run(self) -> None:
        while True:
            self._precompute_maybe()
            with self._cond:
                wake = self._wake()
                while (left := rounds.wait_seconds(wake)) is not None:
                    self._cond.wait(left)
                    wake = self._wake()
                self._takeover = self._refresh = False
                if not wake.leader:  # a follower solves nothing: the leader's assignment is wanted
                    self._taken = self._applied = self._state.version
                    self.latency.followed()
                    self._cond.notify_all()
                self._busy = rounds.busy(wake)
            step = rounds.next_step(wake)
            if step is Step.STOP:
                return
            if step is Step.TAKE_OVER:
                self._take_over()
            elif step is Step.COMMAND:
                self._run_command()
            elif step is Step.SWEEP:
                self.installer.sweep_step()
                if not self.installer.sweeping:
                    with self._cond:
                        self._swept = self._clock()
                    self._frozen.collect_if_due()
            elif step is Step.FINISH_SOLVE:
                self._guarded(self._finish_solve)
            elif step is Step.ROUND:
                time.sleep(self.debounce)  # let a burst of changes land in one solve
                self._take_inputs()
                self._guarded(self._take_round)

    def _take_inputs(self) -> None:
        with self._cond:
            inputs = self._state.take()
            self._taken = inputs.version
            if not inputs.health_only:
                self._jobs_version = inputs.version
                self.precomputer.drop()  # computed for the jobs before: never used again
            self.latency.taken()
            self._round = Taken(inputs.jobs, inputs.health, inputs.version, inputs.generations,
                                self._fabric_key)

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run one step of the worker; a failure is logged, counted and ends the round: its
        changes stay pending (Status, /metrics) and it is taken again later
        (`rounds.retry_after`)."""
        try:
            step()
            if self._applied >= self._taken:  # the round settled: not a step of it only (a
                # retried round that starts a solve has not pushed yet)
                self.last_error = ""
                self._retry_s = 0.0
            return
        except Exception as err:  # noqa: BLE001 - the loop must survive anything
            error, fenced = f"{type(err).__name__}: {err}", False
            if self._stop:  # closing: the driver may be closed under the push
                log.info("solve/push cut off by shutdown: %s", err)
            elif fenced := isinstance(err, Fenced):  # deposed between its leader check and
                # the push: nothing reached a switch and the new leader pushes; no failure
                log.warning("push refused, this replica no longer leads: %s", err)
                self._retry_later(rounds.retry_after(0.0, self.retry_first))
            else:
                self._retry_s = rounds.retry_after(self._retry_s, self.retry_first)
                if error == self.last_error:  # the traceback was logged the first time
                    log.error("solve/push failed again: %s; taken again in %g s", error,
                              self._retry_s)  # fmt: skip
                elif isinstance(err, DriverError):  # switches refusing: no bug to trace
                    log.error("solve/push failed: %s; taken again in %g s", error,
                              self._retry_s)  # fmt: skip
                else:
                    log.exception("solve/push failed; taken again in %g s", self._retry_s)
                self._retry_later(self._retry_s)
            self.last_error = error
            if not fenced:
                self.metrics.push_errors.inc()
                if isinstance(err, DriverError):
                    self.installer.push_ok = False
        if self._solve is None and not self._solve_ended:  # nothing more answers this round
            self._settle(self._round.version if self._round else self._taken, failed=True)

    def _retry_later(self, seconds: float) -> None:
        """Take the inputs again in `seconds`, solved in full (the failed round may have
        been a jobs change: a repair alone would not answer it)."""

        def again() -> None:
            with self._cond:
                if self._stop or self._applied >= self._state.version:
                    return
                self._state.again()
                self._taken = min(self._taken, self._applied)
                self._cond.notify_all()

        timer = threading.Timer(seconds, again)
        timer.daemon = True
        timer.start()

    def _settle(self, version: int, failed: bool = False) -> None:
        """The installed routes answer to inputs up to `version` (unless the round `failed`:
        then they answer to what they did, and the changes stay pending); what is alive now
        is frozen (see controller.service.frozen)."""
        with self._cond:
            if not failed:
                self._applied = max(self._applied, version)
            self._busy = False
            self._cond.notify_all()
        self._frozen.freeze()

    def _take_round(self) -> None:
        """New inputs: repair first when the link health changed, then settle, solve, or
        leave it to the global solve running (see `rounds.plan_round`)."""
        taken = self._round
        assert taken is not None
        target, baseline = self.installer.target, self._baseline
        if self.intake.held is not None:  # routes held from a file: repair only, solve nothing
            self._held_round(taken)
            return
        plan = rounds.plan_round(
            installed_health=None if target is None else target.health,
            health=taken.health,
            solving=self._solve is not None,
            settled_jobs=None if baseline is None else baseline.jobs_version,
            jobs_version=self._jobs_version,
        )
        repaired = self.repair_for(taken.health) if plan.repair else None
        # a settle whose repair's certificate is pending is certified in full in the
        # solve's thread (`_settle_health`); the round settles on that
        then = plan.then
        if then is Then.SETTLE:
            assert repaired is not None and target is not None
            self._settle_health(repaired, target.health, taken)
        elif then is Then.SOLVE:
            self._start_solve()
        else:  # the solve running answers this round's job changes (the repair, its links)
            self.latency.solving()

    def repair_for(self, health: LinkHealth) -> AssignResult:
        """Repair the installed routes for `health`: from the precomputed repair when the
        change is one single failure whose repair is ready for what is installed now, else
        on demand (`repair_now`). Logs and counts which."""
        target = self.installer.target
        found = self.precomputer.lookup(target, self._jobs_version, self.react, health,
                                        held=self.intake.held is not None)  # fmt: skip
        if found.repair is None:
            self.metrics.precomputed.report("on_demand", found.reason)
            log.info("link report repaired on demand", extra={"reason": found.reason})
            return self.repair_now(health)
        assert target is not None and found.index is not None
        hit, base, start = found.repair, found.index, time.perf_counter()
        # the repaired assignment (a copy of the paths), made once, when first asked for
        make = functools.cache(functools.partial(hit.assignment_from, base))

        planned = False
        try:  # pushed as planned first; its paths and index are made after (the push waits
            # for nothing)
            planned = hit.planned is not None and self.installer.push_planned(hit.planned, make)
        finally:
            assignment = make()
            index = hit.index_from(base, assignment)
            self.installer.install(Target(assignment, target.ids, health), index)
        if not planned:  # the routes installed changed since it was planned: plan now
            self.installer.push(assignment)
        self.latency.installed(self._clock())
        res = hit.result_of(index)  # after the push: its figures wait for nothing
        self.metrics.solve_seconds.labels("precomputed").observe(time.perf_counter() - start)
        self.metrics.precomputed.report("precomputed", "" if planned else "replanned")
        self.metrics.precomputed.moved(hit.rows_moved, hit.rows_off_element, hit.jobs_moved)
        log.info("link report repaired from the precomputed repair", extra={
            "element": hit.name, "rows_moved": hit.rows_moved, "jobs_moved": hit.jobs_moved,
            "planned": planned})  # fmt: skip
        self._repaired(res)
        self.precomputed_hits += 1
        return res

    def repair_now(self, health: LinkHealth) -> AssignResult:
        """Re-place the flows the change from the installed health to `health` hit; push
        only the racks they leave. Costs the rows the change hits (the installed
        assignment's RouteIndex is kept across repairs)."""
        target = self.installer.target
        assert target is not None
        index = self.installer.index_of(target.assignment)
        with self.metrics.solve_seconds.labels("repair").time():
            res, repaired = self._repair_of(health, index, target.health)
        if res.fallback_ecmp.size:
            log.info("repair: %d re-placed rows over the table budget ride ECMP",
                     res.fallback_ecmp.size)  # fmt: skip
        self._install(Target(res.assignment, target.ids, health), repaired)
        lost = lost_arcs(self.fabric, target.health, health)
        self.metrics.precomputed.moved(*moved_counts(index, res.churn, lost))
        self._repaired(res)
        return res

    def _repair_of(
        self, health: LinkHealth, index: RouteIndex, before: LinkHealth,
        stop: Callable[[], bool] | None = None,
    ) -> tuple[AssignResult, RouteIndex]:
        """The repair of `index`'s assignment from `before` to `health`, certified as the
        reaction path certifies (the one function both paths run); `stop`: see
        `repair_indexed` (the precomputing thread's, which gives way to the worker)."""
        return repair_indexed(health, index, old_health=before,
                              table_budget=self.options.table_budget,
                              certify_options=self.react, qps=self.options.qps, stop=stop,
                              hashed_jobs=self.hashed_jobs)  # fmt: skip

    @property
    def hashed_jobs(self) -> tuple[str, ...]:
        """Ids of the jobs the last global solve pushed left to the fabric's hashing whole."""
        baseline = self._baseline
        return tuple(baseline.result.hashed_jobs) if baseline is not None else ()

    def _repaired(self, res: AssignResult) -> None:
        if _pending(res):  # installed: Status and /metrics say its certificate is pending
            self._deferred = res.certificate
            self.metrics.set_certificate(res.certificate)
        self.repairs += 1

    def _precompute_paused(self) -> bool:
        """The precomputing thread waits while the worker has a round or a solve runs."""
        return self._busy or self._solve is not None or self._taken < self._state.version

    def _precompute_maybe(self) -> None:
        """When idle with a target the precomputed set does not answer to, start its
        refresh (the thread builds what is missing; nothing heavy here)."""
        pc = self.precomputer
        if not pc.enabled:
            return
        if self.intake.held is not None or not self.replica.is_leader():
            pc.drop()  # held routes are repaired on demand; a follower repairs nothing
            return
        with self._cond:
            if self._precompute_paused() or self._commands or self._solve_ended:
                return
            jobs_version = self._jobs_version
            installed, version = self.installer.routes.installed, self.installer.routes.version
        target = self.installer.target
        if target is None or pc.answers_to(target, jobs_version, self.react):
            return
        if self._precompute_in() > 0:  # the target is new: it may not stand (a burst)
            return
        index = self.installer.index
        if index is not None and index.assignment is not target.assignment:
            index = None
        building = self.installer.building
        if building is not None and building.assignment is not target.assignment:
            building = None
        pc.refresh(Base(target, index, jobs_version, self.installer.pushed, installed,
                        self.installer.wanted_built(), version, self.react,
                        building))  # fmt: skip

    def _precompute_in(self) -> float:
        """Seconds until the refresh of the installed target may start (Precomputer.due_in);
        inf for held routes or a follower, which refresh nothing."""
        if self.intake.held is not None or not self.replica.is_leader():
            return float("inf")
        return self.precomputer.due_in(self.installer.target, self._jobs_version, self.react,
                                       self._clock())  # fmt: skip

    def _install(self, target: Target, index: RouteIndex) -> None:
        self.installer.install(target, index)
        self._push(target)

    def _push(self, target: Target, solved: bool = False) -> None:
        self.installer.push(target.assignment)
        self.latency.installed(self._clock(), solved)

    def _settle_health(self, repaired: AssignResult, before: LinkHealth, taken: Taken) -> None:
        """Settle a link-change round (jobs unchanged since the last global solve) from its
        repair when that is as good as the solve was (MLU / bound within `move_threshold`
        of its ratio); else push a bounded re-optimisation warm from the repair, and solve
        globally only when that is still beyond `spray_gap` (`solver.repair.follow_up`),
        when the repair's certificate handed back a job the last solve did not (the repair
        stays installed; the solve may hand back nobody), or when the certificate handed
        every job back to hashing and some capacity is back that the last solve lacked (a
        repair re-places no row handed back, so nothing else would bring TE back), or when
        capacity came back and links stay over capacity that the bound says need not be
        (`rounds.solve_on_restore_over_capacity`)."""
        baseline, target = self._baseline, self.installer.target
        assert baseline is not None and target is not None
        health, last, opts = taken.health, baseline.result, self.options
        start = time.perf_counter()
        bound = baseline.bound_for(before, health)
        assert self.installer.index is not None
        routed_now = bool(repaired.assignment.routed.any())
        routed_last = bool(last.assignment.routed.any())
        if rounds.solve_on_capacity_back(
                routed_now=routed_now, routed_last=routed_last,
                handed_back=last.certificate is not None and bool(last.certificate.fallback_jobs),
                capacity_up=bool((health.factor > baseline.health.factor).any())):  # fmt: skip
            log.info("capacity restored with every job on the fabric's hashing: global solve")
            self._start_solve()
            return
        if not routed_now and not routed_last:
            # the fabric's hashing before and after (every job left to it whole): nothing
            # to judge, re-optimise or solve again, so the last solve's MLU is not counted
            # here (for a pod-wide all-to-all it held this thread for seconds)
            judged = FollowUp(repaired, self.installer.index, float("nan"), False, False)
        else:
            if last.mlu_pending:  # reported before the predictor counted it: counted here
                last = mlu_counted(self.fabric, baseline.health, last, baseline.flows, opts)
                with self._cond:
                    self._counted(baseline.result, last)
            judged = follow_up(health, repaired, self.installer.index, bound.value,
                               last.ratio, move_threshold=opts.move_threshold,
                               spray_gap=opts.spray_gap, tries=self.reopt_tries,
                               table_budget=opts.table_budget, certify_options=self.react,
                               qps=opts.qps)  # fmt: skip
        res, churn, method = judged.result, [repaired.churn], "repair"
        if judged.reoptimised:
            self.metrics.solve_seconds.labels("reoptimise").observe(res.seconds)
            self.reoptimised += 1
            method = "repair+reoptimise"
            if res.churn.size:
                churn.append(res.churn)
                self._install(Target(res.assignment, target.ids, health), judged.index)
        if judged.needs_global:
            log.info("repair at %.3f x the bound after re-optimising: global solve",
                     judged.ratio)  # fmt: skip
            self._start_solve()
            return
        if rounds.solve_on_restore_over_capacity(
                capacity_up=bool((health.factor > before.factor).any()), mlu=res.mlu,
                bound=bound.value):  # fmt: skip
            log.info("capacity restored, links still over capacity (MLU %.4g, bound %.4g): "
                     "global solve", res.mlu, bound.value)  # fmt: skip
            self._start_solve()
            return
        seconds = time.perf_counter() - start + repaired.seconds
        usage = judged.index.counted_usage  # of `res`, as the repair (or re-optimisation) kept it
        result = baseline.settled(res, np.concatenate(churn), bound, method, seconds, usage)
        # a re-optimisation moves only rows on paths: the repair's hand-backs stay on the
        # hashing, though its certificate of that plane hands nobody back
        handed = _handed(result) | _handed(repaired)
        if not _pending(result) and rounds.solve_on_new_hand_back(
                handed_now=handed, handed_last=_handed(last)):  # fmt: skip
            log.info("the repair handed %d job(s) back to the fabric's hashing that the last "
                     "solve did not: global solve", len(handed - _handed(last)))  # fmt: skip
            self._start_solve()
            return
        if _pending(result):
            # jobs at risk, not compared on the reaction path: certified in full in the
            # solve's thread; the round settles on that (see `_finish_solve`)
            self._start_solve(settled=result)
            return
        self.metrics.churn.inc(result.churn)
        self._publish(result, Target(res.assignment, target.ids, health), taken.digest)
        self.predictor.record(result, health)
        self._settle(taken.version)

    def _publish(self, result: SolveResult, target: Target, digest: str) -> None:
        """`result`, installing `target`, is Status's last result, the next solve's
        previous, and the stored assignment."""
        with self._cond:  # the predictor may hand back a counted MLU (`_counted`)
            self.last_result, self._deferred = result, None
        self.installer.previous = target.assignment
        self.intake.store_assignment(target.assignment, digest)

    def _start_solve(self, settled: SolveResult | None = None) -> None:
        """Solve the inputs last taken in a thread of its own (see `solves.GlobalSolve`);
        `settled`: certify that settled result there instead (its certificate pending)."""
        taken = self._round
        assert taken is not None
        target = self.installer.target
        # matched by NIC pair; after a start or takeover: the stored (installed) assignment
        previous = target.assignment if target is not None else self.installer.previous

        def ended() -> None:
            with self._cond:
                self._solve_ended = True
                self._cond.notify_all()

        dropped_last = self._dropped_last

        def superseded() -> bool:  # a job changed since `taken`: the solve stops at a stage
            return settled is None and rounds.superseded(
                solved_version=taken.version, jobs_version=self._state.jobs_version,
                dropped_last=dropped_last)  # fmt: skip

        self._solve = GlobalSolve(self.fabric, taken, previous, self.options, self.metrics,
                                  hook=self.solve_hook, known=self.intake.known(), react=self.react,
                                  after=self.installer.building,
                                  stopped=lambda: self._stop, on_end=ended,
                                  settled=settled, superseded=superseded,
                                  started=self._clock())  # fmt: skip
        self.latency.solving()
        self._solve.start()

    def _finish_solve(self) -> None:
        """Push a finished global solve, re-based on the link health taken since it started
        (its flows on links that went down are repaired first, so no route through a link
        now down is pushed), or drop it when stale (see `rounds.plan_finish`)."""
        task, now = self._solve, self._round
        assert task is not None and now is not None
        self._solve, self._solve_ended = None, False
        if task.error is not None:
            raise task.error
        result, solved = task.result, task.taken
        if self.intake.held is not None:  # started before a file's routes were applied
            task.index_when(wanted=False, now=True)
            log.info("dropped a global result: routes applied from a file are held")
            self.latency.dropped()
            self._settle(now.version)
            return
        if task.abandoned:  # job changes superseded it: the latest inputs are solved
            self._dropped_last = True
            self.dropped += 1
            self.abandoned += 1
            self._solve_latest()
            return
        assert result is not None and task.flows is not None
        plan = rounds.plan_finish(
            solved_version=solved.version,
            jobs_version=self._jobs_version,
            dropped_last=self._dropped_last,
            health_changed=now.health is not solved.health,
        )
        self._dropped_last = plan.drop
        pushed = self.installer.pushed
        beside = rounds.index_beside(
            drop=plan.drop,
            rebase=plan.rebase,
            rows=len(result.assignment.flows),
            churn=result.churn,
            pushed_rows=None if pushed is None else len(pushed.flows),
        )
        task.index_when(wanted=not plan.drop, now=beside)
        if plan.drop:
            self.dropped += 1
            log.info("dropped a global result the job changes since made stale")
            self._solve_latest()
            return
        digest = solved.digest if plan.stale else now.digest  # answers to the jobs solved
        assignment = result.assignment
        if plan.rebase:
            rebased, index = task.rebased(now.health)
            assignment = rebased.assignment
            # what is pushed, and reported: against the bound under the health it answers to
            result = rebased_result(result, rebased, task.bound_for(now.health))
            self.installer.keep_index(index)
            self.rebased += 1
        else:
            self.installer.index_later(task.indexed)
        self.metrics.churn.inc(result.churn)
        target = Target(assignment, solved.ids, now.health)
        try:
            self._push(target, solved=True)
        finally:  # wanted from now on, whatever the push achieved: reconcile converges to it
            self.installer.target = target
            if task.settled is None:  # a settle certified keeps the last solve as its baseline
                # a re-based result (and its bound) answers to the health it was re-based on
                self._baseline = Baseline(self.fabric, result, task.flows, solved.version,
                                          now.health if plan.rebase else solved.health,
                                          self.options.qps,
                                          self.options.table_budget)  # fmt: skip
                self.global_solves += 1
            else:
                self.settles_certified += 1
            self._publish(result, target, digest)
            if not beside:
                task.index_when(wanted=True, now=True)  # the index after the push, now
        self.predictor.record(result, now.health,
                              functools.partial(task.count, result, lambda: self._stop))
        if plan.stale or _pending(result):  # not settled: the latest inputs, certified in full
            with self._cond:
                self._applied = max(self._applied, solved.version)
            self._solve_latest()
        else:
            self._settle(now.version)

    def _counted(self, before: SolveResult, after: SolveResult) -> None:
        """`before`'s MLU, left to count after its push, is counted (`after`): Status and
        the baseline take it where `before` still stands (called under the lock)."""
        if self.last_result is before:
            self.last_result = after
        if self._baseline is not None and self._baseline.result is before:
            self._baseline.result = after

    def _solve_latest(self) -> None:
        """Re-solve after a stale result: the inputs last taken at once, or, when newer ones
        wait, none here (the worker takes them next and solves those)."""
        with self._cond:
            waiting = self._taken < self._state.version
        if not waiting:
            self._start_solve()

    def _take_over(self) -> None:
        """Become the leader: adopt the stored assignment if it answers to the current
        inputs (reconcile only: nothing is pushed where the switches agree), else solve with
        it as the previous assignment."""
        with self._cond:
            stored = self.intake.stored
            now = self._state.take(reset=False)
            digest = inputs_digest(self._state.jobs, now.health, self._fabric_key)
        version = now.version
        adopt = rounds.adopt_stored(None if stored is None else stored.digest, digest) or (
            stored is not None and self.intake.held is not None)  # held: whatever the inputs
        last = self.last_result
        # the start restored the figures of the routing this takeover adopts: they stand
        again = (adopt and stored is not None and last is not None
                 and last.method == RESTORED and last.assignment is stored.assignment)
        if not again:
            self.last_result = None
        self._baseline = self._own = None
        self.precomputer.drop()
        self.intake.release_stale()
        self.installer.forget(pushed=stored is not None)
        if stored is not None:
            self.installer.previous = stored.assignment
        if adopt:
            assert stored is not None
            self._adopt(stored.assignment, now)
            if not again:
                self._restore(stored.assignment, now.health)
            self.installer.reconcile(None)
        elif version > self._state.origin:  # inputs came (read or accepted): solve them
            with self._cond:
                self._applied = min(self._applied, version - 1)  # solve what is stored
                self._taken = min(self._taken, version - 1)
        log.info("took over at state version %d (%s)", version,
                 "adopted the stored assignment" if adopt else "solving")  # fmt: skip


def _handed(result: AssignResult | SolveResult) -> set[str]:
    """The jobs `result`'s certificate handed back to the fabric's hashing."""
    return set() if result.certificate is None else set(result.certificate.fallback_jobs)


def _pending(result: AssignResult | SolveResult) -> bool:
    """Whether `result`'s certificate was deferred (jobs at risk, not compared yet)."""
    return result.certificate is not None and result.certificate.pending
