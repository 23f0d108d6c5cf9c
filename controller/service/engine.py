"""The controller's engine: desired state in, installed routes out, one worker thread.

API calls validate and record inputs (jobs, link health) and return at once; the worker
batches changes that arrive within `debounce` seconds into one solve. A link change is
repaired first (only the hit flows move, pushed at once). With the jobs unchanged since the
last global solve it is then settled without one: the repair as it is when its MLU / bound
is within `move_threshold` of that solve's, else a bounded re-optimisation warm from it, and
a global re-solve only when that is still beyond `spray_gap` (see `_settle_health`). Job
changes are solved globally, with the installed assignment as `previous` (churn
minimisation); a result the jobs changed under while it ran is dropped for a re-solve of the
latest (every second one is pushed all the same, see `_finish_solve`). A round is settled
(`wait_idle`) once the routes read back answer to its inputs; the predicted rates follow on
a thread of their own (`wait_predicted`). Every change
reaches the switches through `plan_update` + `push`, and what the engine reports as
installed is what it read back from the driver afterwards, and what was read is reconciled
against what is wanted
(`controller.service.reconcile`): after every push and every `reconcile_interval` seconds,
missing entries are re-pushed with bounded, backed-off retries, and a switch that differs is
marked until it agrees. The desired state and the route log are plain data
(`controller.service.state`); the engine adds the lock, the thread and the driver.

Fail-static: at start the engine reads the installed routes and pushes nothing until it has
received inputs. Routes left on the switches at exit stay (ECMP defaults carry the rest).

State outside the process (`controller.service.replica`): with a store, every input is
written there before it is acknowledged, and read back on start together with the last
assignment pushed; when the stored assignment answers to the stored inputs it is adopted and
the switches are only reconciled towards it (a restart with unchanged inputs pushes nothing).
Replicas sharing a store follow each other's writes; only the elected leader solves and
pushes, the others serve reads, watches and what-if solves from the same state.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.drivers.interface import Driver
from controller.drivers.push import push, read_back
from controller.errors import DriverError, InputError, StoreConflict, StoreCorrupt
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
from controller.model.rates import simulate
from controller.routes.entries import Entry, RouteSet, Table, build_routes
from controller.routes.plan import plan_update
from controller.service.metrics import Metrics
from controller.service.persist import ASSIGNMENT, JOBS, LINKS, Stored, inputs_digest
from controller.service.reconcile import Reconciler, ReconcileResult, SwitchMarks
from controller.service.replica import Replica
from controller.service.route_query import SWITCH_TIERS
from controller.service.state import DesiredState, RouteLog
from controller.service.store import Change
from controller.solver.bounds import Bound, lower_bound
from controller.solver.greedy import AssignResult, warm_up
from controller.solver.repair import (
    REOPT_TRIES,
    RouteIndex,
    bound_after,
    follow_up,
    repair_indexed,
)
from controller.solver.solve import SolveOptions, SolveResult, solve

log = logging.getLogger("fabric_te.engine")
WRITE_ATTEMPTS = 8  # guarded store writes per input before the caller gets ABORTED
GC_INTERVAL = 600.0  # seconds between full collections of what settles froze
SWEEP_CHUNK = 64  # switches per step of a periodic reconcile at most (inputs are taken
# between; 256 at meta-24k took ~45 ms, which a link report arriving meanwhile waited for)
SWEEP_STEP = 0.02  # s a step may take, at the driver's last pace: the linux driver reads a
# switch in 5-20 ms, so 64 of them made a link report wait 0.2-0.8 s behind a step
LATENCY_SAMPLES = 1024  # report-to-installed latencies kept for Status's quantiles
PREDICT_QUIET = 1.0  # s without a new result (and idle) before the last one's rate prediction
PREDICT_EVERY = 5.0  # s after which it runs even while results keep coming


@dataclass(frozen=True)
class RouteEvent:
    """What a watcher receives: a snapshot, a sync marker, or a delta."""

    kind: str  # "snapshot" | "sync" | "delta" | "behind" (the watcher is dropped)
    version: int
    entries: Iterable[Entry] = ()  # snapshot: all; delta: added (listed by the watcher)
    removed: Iterable[Entry] = ()


def changed_racks(fabric: Fabric, old: Assignment, new: Assignment) -> np.ndarray | None:
    """Source racks of the flows whose routes differ between two assignments (a flow
    added, removed or moved), sorted; None when the rows cannot be keyed compactly."""
    of, nf = old.flows, new.flows
    if of is nf or (
        len(of) == len(nf)
        and all(
            np.array_equal(getattr(of, c), getattr(nf, c)) for c in ("src_nic", "dst_nic", "qp")
        )
    ):  # the same rows (a repair, or a re-solve of the same jobs): compare the paths
        nics = nf.src_nic[old.path != new.path]
        return _racks_of(fabric, nics)
    if not len(of) + len(nf):
        return np.zeros(0, np.int64)
    # one integer per row of (src_nic, dst_nic, qp, path), the source NIC most significant
    sides = [
        [a.flows.src_nic, a.flows.dst_nic, a.flows.qp, a.path] for a in (old, new) if len(a.flows)
    ]
    lows = [min(int(side[i].min()) for side in sides) for i in range(4)]
    spans = [max(int(side[i].max()) for side in sides) - lows[i] + 1 for i in range(4)]
    if float(np.prod(np.array(spans, np.float64))) >= 2.0**62:
        return None
    below = int(np.prod(spans[1:]))  # the key of one source NIC's rows spans this much
    k_old, k_new = (_sorted_keys(a, lows, spans) for a in (old, new))
    gone, came = k_old[~_among(k_old, k_new)], k_new[~_among(k_new, k_old)]
    return _racks_of(fabric, np.concatenate([gone, came]) // below + lows[0])


def _sorted_keys(a: Assignment, lows: list[int], spans: list[int]) -> np.ndarray:
    """The rows' keys of changed_racks, sorted (the rows come in runs, job by job)."""
    f = a.flows
    key = f.src_nic.astype(np.int64)
    key -= lows[0]
    for col, low, width in zip((f.dst_nic, f.qp, a.path), lows[1:], spans[1:], strict=True):
        key *= width
        key += col
        key -= low
    key.sort(kind="stable")
    return key


def _among(keys: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """`np.isin(keys, ref)` for sorted `ref` (and sorted `keys`, which keeps the binary
    searches in cache)."""
    if not ref.size:
        return np.zeros(keys.size, bool)
    return np.asarray(ref.take(np.searchsorted(ref, keys), mode="clip") == keys)


def _most_racks_resized(fabric: Fabric, old: Assignment, new: Assignment) -> bool:
    """Whether more than half the racks source another number of rows in `new` than in
    `old`: then most racks changed and the whole plan is made (the scoped one would give
    the same operations), known in a few ms where changed_racks keys every row in tens."""
    counts = [
        np.bincount(fabric.rack_of_host(fabric.host_of_nic(a.flows.src_nic)),
                    minlength=fabric.num_racks)
        for a in (old, new)
    ]  # fmt: skip
    return int(np.count_nonzero(counts[0] != counts[1])) * 2 > fabric.num_racks


def _racks_of(fabric: Fabric, nics: np.ndarray) -> np.ndarray:
    """The racks of `nics`, sorted, each once (counted, not sorted: linear in the NICs)."""
    racks = fabric.rack_of_host(fabric.host_of_nic(nics))
    return np.flatnonzero(np.bincount(racks, minlength=fabric.num_racks)).astype(np.int64)


def read_installed(driver: Driver) -> RouteSet:
    """Every readable switch's table, read back from the driver."""
    return read_back(driver, driver.switches())[0]


class Engine:
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
    ) -> None:
        warm_up()  # the solver's compiled kernels, before the first solve needs them
        self.fabric = fabric
        self.driver = driver
        self.driver_name = driver_name or type(driver).__name__
        self.debounce = debounce
        self.options = options or SolveOptions()
        self.push_timeout = push_timeout
        self.metrics = metrics or Metrics()
        self._cond = threading.Condition()
        self._state = DesiredState(fabric)
        self._applied = 0  # state version the installed routes answer to
        self._busy = False
        self._stop = False
        self._interval = reconcile_interval
        self._swept = time.monotonic()  # when the last periodic reconcile ended
        self._collected = time.monotonic()  # when the frozen objects were last collected
        self.replica = replica or Replica(fabric)
        self.replica.bind_metrics(self.metrics.registry)
        self._push_driver = self.replica.fenced(driver)  # pushes checked against the election
        self.reconciler = reconciler or Reconciler(
            self._push_driver, fabric, push_timeout=push_timeout
        )
        self._writes = threading.Lock()  # one input write at a time: check, store, apply
        self._stored: tuple[Assignment, str] | None = None  # last stored assignment, inputs
        self._previous: Assignment | None = None  # installed assignment, before any solve
        self._takeover = False
        self._refresh = False  # a follower saw a new stored assignment: read the switches
        self.marks = SwitchMarks(self.metrics.registry)
        self._wanted: RouteSet | None = None  # None: nothing wanted yet, only read
        self._wanted_of: Assignment | None = None  # wanted routes not built yet (see _push)
        self._push_ok = True
        self._routes = RouteLog(RouteSet())
        self.last_result: SolveResult | None = None
        self._last_inputs: tuple[tuple[str, ...], LinkHealth] | None = None
        self.last_error = ""
        self.ops_pushed = 0
        self._pending_since: float | None = None  # when the oldest unapplied change came
        self._round_started: float | None = None  # that time, for the round being applied
        self._taken = 0  # state version of the inputs last taken by the worker
        self._jobs_version = 0  # state version at which the jobs last changed (taken)
        self._inputs: tuple[list[Job], LinkHealth, int, str] | None = None  # last taken
        self._solving: tuple[tuple[str, ...], LinkHealth, int, str, dict[str, Any]] | None = None
        self._done = False  # the global solve has ended: the worker pushes its result
        # the assignment the switches were last told to hold, its job ids and health
        self._installed_asg: tuple[Assignment, tuple[str, ...], LinkHealth] | None = None
        self._pushed_asg: Assignment | None = None  # the assignment `_wanted` answers to
        self.repairs = 0  # repairs pushed
        self.reoptimised = 0  # health-only rounds that needed the bounded re-optimisation
        self.reopt_tries = REOPT_TRIES  # rows a re-optimisation tries at most
        self.global_solves = 0  # global solves pushed
        self._index: RouteIndex | None = None  # of the installed assignment (see _index_of)
        self._index_box: tuple[Assignment, dict[str, Any]] | None = None  # one being built
        # the last global solve pushed, its input flows, and the jobs version it answers to:
        # a link change against the same jobs is settled against its quality (_settle_health)
        self._global: tuple[SolveResult, FlowSet] | None = None
        self._installed_jobs = -1
        self._bounds: dict[bytes, Bound] = {}  # lower bounds of those flows, by link health
        self._quality_seq = 0  # results recorded; the rate prediction follows the last one
        self._predicted_seq = 0  # the result the predicted-rate gauges answer to
        self._predict_job: tuple[int, SolveResult, LinkHealth] | None = None
        self._predict_thread: threading.Thread | None = None
        self._predicted_at = time.monotonic()  # when the last prediction started
        self._sweep: list[str] = []  # switches a periodic reconcile has still to check
        self._sweep_ok = True
        self._sweep_pace: float | None = None  # s per switch of the last sweep step
        self.rebased = 0  # global results re-based on a link change that came meanwhile
        self.dropped = 0  # global results dropped unpushed: stale when they ended
        self._dropped_last = False  # the last global result was dropped
        self.latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)  # report -> installed
        self.solve_hook: Callable[[LinkHealth], None] = lambda health: None  # before a solve
        self._adopt(self.replica.load())
        self._reconcile(None)  # fail-static: adopt what is there
        self._swept = time.monotonic()  # that was a full reconcile
        self._thread = threading.Thread(target=self._run, name="fabric-te-engine", daemon=True)
        self._thread.start()
        self.replica.start(self._apply_changes, self._on_role)

    def _adopt(self, stored: Stored | None) -> None:
        """Take the stored inputs; adopt the stored assignment if it answers to them."""
        if stored is None:
            return
        state = self._state
        for job, generation in stored.jobs.values():
            state.set_job(job, generation)
        if stored.health is not None and (stored.health.factor != 1.0).any():
            state.set_health(stored.health)
        if stored.assignment is None:
            return
        self._stored = (stored.assignment, stored.assignment_inputs)
        self._previous = stored.assignment
        assert state.health is not None
        if stored.assignment_inputs == inputs_digest(state.jobs, state.health):
            self._wanted = build_routes(self.fabric, stored.assignment)
            self._pushed_asg = stored.assignment
            ids = tuple(sorted(state.jobs))
            self._installed_asg = (stored.assignment, ids, state.health)
            state.take()
            self._applied = self._taken = self._jobs_version = state.version
        log.info("loaded %d jobs from %s (revision %d); stored assignment %s", len(stored.jobs),
                 self.replica.status_fields()["store"], stored.revision,
                 "adopted" if self._applied else "to be re-solved")  # fmt: skip

    # ---- inputs (called from API threads: check, write to the store, then apply) -------
    def put_job(self, job: Job, generation: int) -> tuple[int, int]:
        """Create or replace a job; returns (generation, state version)."""
        jobs_flows(self.fabric, [job])  # the job's own traffic must be valid: not under the lock
        gen, version = self._write(
            JOBS + job.id,
            lambda: self._state.check_put(job, generation, flows_checked=True),
            lambda g: self.replica.put_job(job, g),
            lambda g: self._state.set_job(job, g),
        )
        return gen, version

    def delete_job(self, job_id: str) -> tuple[bool, int]:
        """Remove a job (idempotent); returns (existed, state version)."""
        existed, version = self._write(
            JOBS + job_id,
            lambda: job_id in self._state.jobs,
            lambda e: self.replica.delete_job(job_id) if e else 0,
            lambda e: self._state.delete_job(job_id),
        )
        return existed, version

    def jobs(self) -> list[tuple[Job, int]]:
        """(job, generation) sorted by id."""
        with self._cond:
            return self._state.job_list()

    def report_links(self, updates: Mapping[int, float], replace_all: bool = False) -> int:
        """Apply link factors (see DesiredState.report_links); returns the state version."""
        _, version = self._write(
            LINKS,
            lambda: self._state.check_links(updates, replace_all),
            self.replica.put_health,
            self._state.set_health,
        )
        return version

    def _write(
        self,
        key: str,
        check: Callable[[], Any],
        store: Callable[[Any], int],
        apply: Callable[[Any], object],
    ) -> tuple[Any, int]:
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
                    self._apply_changes(self.replica.refresh(key))
                    time.sleep(random.uniform(0, 0.002 * attempt))  # let the other finish
                    continue
                with self._cond:
                    if self.replica.is_current(key, revision):
                        apply(value)
                    return value, self._changed()
        raise AssertionError("unreachable")  # pragma: no cover

    def _apply_changes(self, changes: list[Change]) -> None:
        """Adopt input changes another replica wrote (already filtered to the new ones);
        records are decoded before the engine lock is taken."""
        persist = self.replica.persist
        if not changes or persist is None:
            return
        decoded: list[tuple[str, bytes | None, Stored]] = []
        for key, value, _ in changes:
            into = Stored(0)
            try:
                if value is not None:
                    persist.decode(key, value, into)
            except StoreCorrupt as err:
                log.error("ignored a stored change: %s", err)
                continue
            decoded.append((key, value, into))
        with self._cond:
            for key, value, into in decoded:
                if key.startswith(JOBS):
                    job_id = key[len(JOBS) :]
                    if value is None:
                        self._state.delete_job(job_id)
                    else:
                        self._state.set_job(*into.jobs[job_id])
                elif key == LINKS:
                    self._state.set_health(into.health or LinkHealth.all_up(self.fabric))
                elif key == ASSIGNMENT and into.assignment is not None:
                    self._stored = (into.assignment, into.assignment_inputs)
                    self._refresh = True  # the leader has pushed it: read what it did
            self._changed()

    def _on_role(self, leader: bool) -> None:
        log.warning(
            "replica %s is now %s", self.replica.id, "the leader" if leader else "a follower"
        )
        with self._cond:
            self._takeover = leader
            self._cond.notify_all()

    def _changed(self) -> int:
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        self.metrics.queue_depth.set(self._state.version - self._applied)
        self._cond.notify_all()
        return self._state.version

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

    # ---- queries ----------------------------------------------------------------------
    @property
    def driver_ok(self) -> bool:
        """The last push went through and every switch, as last read, holds what we want."""
        return self._push_ok and self.marks.ok

    def status_fields(self) -> dict[str, Any]:
        """Reconcile and store figures for Status (plain values, named as its fields)."""
        with self._cond:
            marks = self.marks
            return self.replica.status_fields() | {
                "switches_differing": len(marks.differing),
                "differing": [f"{s}: {why}" for s, why in sorted(marks.differing.items())],
                "entries_missing": marks.missing,
                "reconciles": marks.reconciles,
                "retry_rounds": marks.retry_rounds,
                "ops_pushed": self.ops_pushed,
                "pending_changes": self._state.version - self._applied,
                **self.latency_fields(),
            }

    def latency_fields(self) -> dict[str, Any]:
        """Report-to-installed latency over the last LATENCY_SAMPLES changes, for Status
        (the full histogram is fabric_te_report_to_installed_seconds in /metrics)."""
        samples = sorted(self.latencies)
        count = len(samples)

        def q(p: float) -> float:
            return samples[min(len(samples) - 1, int(p * len(samples)))] if samples else 0.0

        return {
            "report_to_installed_count": count,
            "report_to_installed_p50_seconds": q(0.5),
            "report_to_installed_p99_seconds": q(0.99),
            "report_to_installed_max_seconds": samples[-1] if samples else 0.0,
            "repairs": self.repairs,
            "solves_rebased": self.rebased,
        }

    @property
    def state_version(self) -> int:
        with self._cond:
            return self._state.version

    @property
    def health(self) -> LinkHealth:
        """The link health the next solve will use."""
        with self._cond:
            assert self._state.health is not None
            return self._state.health

    @property
    def installed(self) -> RouteSet:
        """The routes last read back from the driver."""
        with self._cond:
            return self._routes.installed

    @property
    def wanted(self) -> RouteSet | None:
        """The routes of the last assignment pushed (None before the first)."""
        return self._wanted_routes()

    def _wanted_routes(self) -> RouteSet | None:
        pending = self._wanted_of
        if pending is not None:
            self._wanted, self._wanted_of = build_routes(self.fabric, pending), None
        return self._wanted

    @property
    def routes_version(self) -> int:
        with self._cond:
            return self._routes.version

    def snapshot(self) -> tuple[int, RouteSet]:
        """(routes version, installed routes), consistent with each other."""
        with self._cond:
            return self._routes.version, self._routes.installed

    def what_if(
        self, updates: Mapping[int, float], extra: list[Job], options: SolveOptions | None = None
    ) -> SolveResult:
        """Solve the current state plus changes; nothing is pushed or recorded."""
        with self._cond:
            jobs = {k: v for k, (v, _) in self._state.jobs.items()}
            health = self._state.health
        assert health is not None
        for job in extra:
            if job.id in jobs:
                raise InputError(f"extra_jobs: job id {job.id!r} already exists")
            jobs[job.id] = job
        flows = jobs_flows(self.fabric, [jobs[k] for k in sorted(jobs)])
        return solve(
            self.fabric, health.with_factors(updates), flows, options=options or self.options
        )

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until the installed routes answer to every accepted input change."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy or self._applied < self._state.version:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def watch(
        self, since: int = 0, alive: Callable[[], bool] | None = None, max_lag: int = 0
    ) -> Iterator[RouteEvent]:
        """Snapshot (or only the deltas after `since`, if all still logged), a sync marker,
        then deltas as they come. Ends when the engine closes or `alive()` turns False.
        A watcher that falls behind (more than `max_lag` versions, or out of the delta log)
        gets a last "behind" event carrying the version it has seen, to resume from."""
        with self._cond:
            version = self._routes.version
            backlog = self._routes.after(since) if since else None
            if backlog is None:
                first = [RouteEvent("snapshot", version, self._routes.installed)]
            else:
                first = [RouteEvent("delta", d.version, d.added, d.removed) for d in backlog]
        yield from first
        yield RouteEvent("sync", version)
        seen = version
        while True:
            with self._cond:
                while self._routes.version == seen and not self._stop:
                    self._cond.wait(0.2)
                    if alive is not None and not alive():
                        return
                if self._stop:
                    return
                pending = self._routes.after(seen)
                lag = self._routes.version - seen
                behind = bool(max_lag) and (pending is None or lag > max_lag)
                if not behind:
                    seen = self._routes.version
                    if pending is None:  # fell behind the retained deltas: start afresh
                        fresh = self._routes.installed
            if behind:
                yield RouteEvent("behind", seen)
                return
            if pending is None:
                yield RouteEvent("snapshot", seen, fresh)
                yield RouteEvent("sync", seen)
                continue
            for d in pending:
                yield RouteEvent("delta", d.version, d.added, d.removed)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker, waiting at most `timeout` s for a push under way. A push cut off
        by the process ending leaves a consistent table (batches are all or nothing and
        stages run downstream first), and the next start reconciles it."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout)
        self.replica.close()

    # ---- the worker -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and self._taken >= self._state.version and not self._done:
                    if self._solving is not None:  # a global solve runs: wait for it
                        self._cond.wait(0.2)
                        continue
                    left = self._swept + self._interval - time.monotonic()
                    if left <= 0 or self._takeover or self._refresh or self._sweep:
                        break
                    self._cond.wait(left)
                if self._stop:
                    return
                takeover, self._takeover = self._takeover, False
                refresh, self._refresh = self._refresh, False
                leader = self.replica.is_leader()
                if not leader:  # a follower solves nothing: the leader's assignment is wanted
                    self._taken = self._applied = self._state.version
                    self._cond.notify_all()
                fresh = self._taken < self._state.version
                done = self._done
                idle = not fresh and not done and self._solving is None
                self._busy = not idle
                due = self._swept + self._interval  # next periodic reconcile
            if takeover and leader:
                self._take_over()
                continue
            if idle:
                if time.monotonic() >= due or (refresh and not leader) or self._sweep:
                    self._sweep_step()
                    if not self._sweep:
                        with self._cond:
                            self._swept = time.monotonic()
                        self._collect_frozen()
                continue
            if done:
                self._guarded(self._finish_solve)
                continue
            time.sleep(self.debounce)  # let a burst of changes land in one solve
            with self._cond:
                inputs = self._state.take()
                self._taken = inputs.version
                if not inputs.health_only:
                    self._jobs_version = inputs.version
                if self._round_started is None:
                    self._round_started = self._pending_since
                self._pending_since = None
                digest = inputs_digest(self._state.jobs, inputs.health)
                self._inputs = (list(inputs.jobs), inputs.health, inputs.version, digest)
            self._guarded(self._take_round)

    def _collect_frozen(self) -> None:
        """Every GC_INTERVAL, at the end of an idle periodic reconcile: collect what the
        settles froze (`_settle` calls gc.freeze, so a reference cycle that was garbage at a
        freeze would otherwise never be freed). ~0.05 s at meta-24k, off the reaction path."""
        now = time.monotonic()
        if now - self._collected < GC_INTERVAL:
            return
        self._collected = now
        gc.unfreeze()
        gc.collect()
        gc.freeze()

    def _sweep_step(self) -> None:
        """Reconcile the next switches of a periodic sweep (started when none is under way):
        as many as the driver read in SWEEP_STEP s last time (one at first, at most
        SWEEP_CHUNK). New inputs are taken between steps, so a link report never waits for
        a whole fabric to be read, nor long for a slow driver's switches."""
        try:
            if not self._sweep:
                self._sweep, self._sweep_ok = list(self.driver.switches()), True
            pace = self._sweep_pace
            n = 1 if pace is None else max(1, min(SWEEP_CHUNK, int(SWEEP_STEP / max(pace, 1e-9))))
            chunk, self._sweep = self._sweep[:n], self._sweep[n:]
            start = time.perf_counter()
            self._sweep_ok &= self._reconcile(set(chunk)).in_sync
            self._sweep_pace = (time.perf_counter() - start) / max(len(chunk), 1)
        except Exception:  # noqa: BLE001 - the loop must survive anything
            if self._stop:  # closing: the driver may be closed under the sweep
                log.info("periodic reconcile cut off by shutdown")
            else:
                log.exception("periodic reconcile failed")
            self._sweep, self._sweep_ok = [], False
        if not self._sweep and self._sweep_ok:
            with self._cond:
                self._push_ok = True

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run one step of the worker; a failure is logged, counted and ends the round."""
        try:
            step()
            self.last_error = ""
            return
        except Exception as err:  # noqa: BLE001 - the loop must survive anything
            if self._stop:  # closing: the driver may be closed under the push
                log.info("solve/push cut off by shutdown: %s", err)
            else:
                log.exception("solve/push failed")
            self.last_error = f"{type(err).__name__}: {err}"
            self.metrics.push_errors.inc()
            if isinstance(err, DriverError):
                self._push_ok = False
        if self._solving is None and not self._done:  # nothing more will answer this round
            self._settle(self._inputs[2] if self._inputs else self._taken)

    def _settle(self, version: int) -> None:
        """The installed routes answer to inputs up to `version`.

        What is alive now (the installed and wanted routes, the kept index and result) is
        moved out of the cyclic collector's sight (`gc.freeze`): a full collection over it
        took 0.05-0.14 s at meta-24k, and it fell inside the next repair's push. It is still
        freed by reference counting when dropped, and cycles by `_collect_frozen`."""
        with self._cond:
            self._applied = max(self._applied, version)
            self.metrics.queue_depth.set(self._state.version - self._applied)
            self._busy = False
            self._cond.notify_all()
        gc.freeze()

    def _take_round(self) -> None:
        """New inputs: a link change is repaired and pushed at once, against what is
        installed, even while a global solve runs. With the jobs unchanged since the last
        global solve, the round is then settled from the repair (`_settle_health`); job
        changes get a global solve (in its own thread), or the one running is re-checked
        against the new inputs when it ends."""
        assert self._inputs is not None
        health = self._inputs[1]
        installed = self._installed_asg
        repaired = None
        if installed is not None and not np.array_equal(installed[2].factor, health.factor):
            repaired = self.repair_now(health)
        if self._solving is not None:
            return
        if (
            repaired is not None
            and self._global is not None
            and (self._installed_jobs >= self._jobs_version)
        ):
            assert installed is not None
            self._settle_health(repaired, installed[2], health)
        else:
            self._start_solve()

    def repair_now(self, health: LinkHealth) -> AssignResult:
        """Re-place the flows the change from the installed health to `health` hit; push
        only the racks they leave. Costs the rows the change hits (the installed
        assignment's RouteIndex is kept across repairs)."""
        assert self._installed_asg is not None
        assignment, ids, old = self._installed_asg
        index = self._index_of(assignment)
        with self.metrics.solve_seconds.labels("repair").time():
            res, index = repair_indexed(health, index, old_health=old,
                                        table_budget=self.options.table_budget)  # fmt: skip
        if res.fallback_ecmp.size:
            log.info("repair: %d re-placed rows over the table budget ride ECMP",
                     res.fallback_ecmp.size)  # fmt: skip
        self._install(res.assignment, ids, health, index)
        self._push(res.assignment)
        self.repairs += 1
        return res

    def _install(
        self, assignment: Assignment, ids: tuple[str, ...], health: LinkHealth, index: RouteIndex
    ) -> None:
        """`assignment` (with its index) is what the switches are told to hold from now."""
        self._installed_asg = (assignment, ids, health)
        self._index = index
        if index.moved_rows > max(4096, len(assignment.flows) // 32):  # rebuild beside
            self._rebuild_later(index)

    def _index_of(self, assignment: Assignment) -> RouteIndex:
        """The RouteIndex of `assignment`: the one kept, one built beside (waited for if
        it is the only one), or built now (after a start or takeover)."""
        kept = self._index if self._index is not None and (
            self._index.assignment is assignment) else None  # fmt: skip
        pending = self._index_box
        if pending is not None and pending[0] is assignment:
            box = pending[1]
            if kept is None or box["ready"].is_set():
                box["ready"].wait()
                self._index_box = None
                if box.get("index") is not None:
                    kept = self._index = box["index"]
        if kept is None:
            kept = self._index = RouteIndex.build(self.fabric, assignment)
        return kept

    def _index_later(self, assignment: Assignment, box: dict[str, Any]) -> None:
        """`_index_of` takes `assignment`'s index from `box` (the solve's thread builds it)."""
        self._index_box = (assignment, box)

    def _rebuild_later(self, drifted: RouteIndex) -> None:
        """Rebuild a drifted index afresh in a thread of its own (off the reaction path);
        `_index_of` takes it once it is ready."""
        box: dict[str, Any] = {"ready": threading.Event()}

        def work() -> None:
            try:
                box["index"] = drifted.rebuilt()
            except Exception:  # noqa: BLE001 - the next repair builds it
                log.exception("route index build failed")
            box["ready"].set()

        threading.Thread(target=work, name="fabric-te-index", daemon=True).start()
        self._index_later(drifted.assignment, box)

    def _settle_health(
        self, repaired: AssignResult, before: LinkHealth, health: LinkHealth
    ) -> None:
        """Settle a link-change round (jobs unchanged since the last global solve) without a
        global re-solve when the repair is as good as that solve was: MLU / bound (the
        cheap bound, for the new health) within `move_threshold` of the global result's
        ratio, the gap at which the solver itself would not move kept flows. Otherwise a
        bounded re-optimisation warm from the repair (`reoptimise`: rows off the hottest
        arcs, `reopt_tries` rows at most) is pushed; a global solve follows only when that
        is still beyond both that ratio and the solver's own acceptance gap (`spray_gap`).
        Settled then means: the routes read back answer to the new link health, and are
        within that gap of the bound (or as close as the bounded search got them)."""
        assert self._global is not None and self._inputs is not None
        last, flows = self._global
        _, _, version, digest = self._inputs
        start = time.perf_counter()
        opts = self.options
        bound = self._bound_for(before, health, flows)
        assert self._installed_asg is not None and self._index is not None
        ids = self._installed_asg[1]
        judged = follow_up(health, repaired, self._index, bound.value, last.ratio,
                           move_threshold=opts.move_threshold, spray_gap=opts.spray_gap,
                           tries=self.reopt_tries, table_budget=opts.table_budget)  # fmt: skip
        res, churn, method = judged.result, [repaired.churn], "repair"
        if judged.reoptimised:
            self.metrics.solve_seconds.labels("reoptimise").observe(res.seconds)
            self.reoptimised += 1
            method = "repair+reoptimise"
            if res.churn.size:
                churn.append(res.churn)
                self._install(res.assignment, ids, health, judged.index)
                self._push(res.assignment)
        if judged.needs_global:
            log.info("repair at %.3f x the bound after re-optimising: global solve",
                     judged.ratio)  # fmt: skip
            self._start_solve()
            return
        parent = last.parent
        assert parent is not None
        moved = np.unique(np.concatenate(churn))
        result = SolveResult(
            assignment=res.assignment,
            mlu=res.mlu,
            bound=bound,
            lp=None,
            collided_links=int(res.collided_links.size),
            churn=int(np.unique(parent[moved]).size),
            unroutable=np.unique(parent[res.unroutable]),
            fallback_ecmp=last.fallback_ecmp,
            method=method,
            times={"total": time.perf_counter() - start + repaired.seconds},
            parent=parent,
            split_flows=last.split_flows,
            tables=last.tables,  # as of the global solve; the read-back counts are in /metrics
        )
        self.metrics.churn.inc(result.churn)
        self._publish(result, res.assignment, ids, health, digest)
        self._record_quality(result, health)
        self._settle(version)

    def _publish(
        self,
        result: SolveResult,
        assignment: Assignment,
        ids: tuple[str, ...],
        health: LinkHealth,
        digest: str,
    ) -> None:
        """`result`, installing `assignment`, answers to jobs `ids` under `health`: it is
        Status's last result, the next solve's previous, and the stored assignment."""
        self.last_result = result
        self._last_inputs = (ids, health)
        self._previous = assignment
        self.replica.put_assignment(assignment, digest)
        with self._cond:
            self._stored = (assignment, digest)

    def _bound_for(self, before: LinkHealth, health: LinkHealth, flows: FlowSet) -> Bound:
        """The split lower bound of the last global solve's flows under `health`: cached by
        health (a flap returns to a health seen before), else derived from the installed
        `before`'s (`bound_after`: only the changed cuts, when capacity only went down), else
        computed in full (~0.25 s at meta-24k with 16 QP buckets)."""
        key = health.factor.tobytes()
        bound = self._bounds.get(key)
        if bound is None:
            known = self._bounds.get(before.factor.tobytes())
            if known is not None:
                bound = bound_after(self.fabric, flows, before, known, health, self.options.qps)
            if bound is None:
                bound = lower_bound(self.fabric, health, flows, qps=self.options.qps)
            if len(self._bounds) >= 64:
                self._bounds.pop(next(iter(self._bounds)))
            self._bounds[key] = bound
        return bound

    def _start_solve(self) -> None:
        """Solve the inputs last taken in a thread of its own (the worker stays free to
        repair); `_finish_solve` pushes the result. The thread then builds the result's
        RouteIndex (~0.15 s at meta-24k, with the table usage the solve counted) when the
        worker says so (`_index_when`). A solve starts once the index being built for the
        installed routes is ready: beside it, that build took 0.2-0.7 s instead of 0.15 s,
        and a link report arriving meanwhile waited for it."""
        assert self._inputs is not None
        jobs, health, version, digest = self._inputs
        installed = self._installed_asg
        # matched by NIC pair; after a start or takeover: the stored (installed) assignment
        previous = installed[0] if installed is not None else self._previous
        box: dict[str, Any] = {"ready": threading.Event(), "go": threading.Event()}
        solving = (tuple(j.id for j in jobs), health, version, digest, box)
        indexing = self._index_box

        def work() -> None:
            try:
                while indexing is not None and not indexing[1]["ready"].wait(0.5):
                    if self._stop:
                        return
                self.solve_hook(health)
                flows = box["flows"] = jobs_flows(self.fabric, jobs)
                with self.metrics.solve_seconds.labels("solve").time():
                    box["result"] = solve(
                        self.fabric, health, flows, previous=previous, options=self.options
                    )
            except BaseException as err:  # noqa: BLE001 - handed to the worker
                box["error"] = err
            with self._cond:
                self._done = True
                self._cond.notify_all()
            if "result" in box:  # the index for the next repair, when the worker says so
                res = box["result"]
                while not box["go"].wait(0.5) and not self._stop:
                    pass
                if box.get("wanted") and not self._stop:
                    try:
                        box["index"] = RouteIndex.build(self.fabric, res.assignment, res.usage)
                    except Exception:  # noqa: BLE001 - the next repair builds it
                        log.exception("route index build failed")
            box["ready"].set()

        self._solving = solving
        threading.Thread(target=work, name="fabric-te-solve", daemon=True).start()

    def _finish_solve(self) -> None:
        """Push a finished global solve, re-based on the link health taken since it started:
        its flows on links that went down (or lost capacity) are repaired first, so no route
        through a link now down is pushed. The round is settled once the routes are read
        back; the rate prediction is recorded after (see `_record_quality`).

        A result already stale (the jobs changed while it ran) is dropped and the latest
        jobs are solved at once, unless the result before it was dropped too: pushing it
        would hold the re-solve back by a push of routes already out of date, and a stream
        of job changes still gets every second result pushed (it never starves the pushes).
        """
        assert self._solving is not None and self._inputs is not None
        ids, health, version, solved_digest, box = self._solving
        self._solving, self._done = None, False
        if "error" in box:
            raise box["error"]
        result: SolveResult = box["result"]
        jobs, now_health, now_version, digest = self._inputs
        stale = self._jobs_version > version  # jobs changed meanwhile: re-solve after
        drop = stale and not self._dropped_last
        self._dropped_last = drop
        rebased = now_health is not health
        beside = self._index_when(result, box, drop, rebased)
        if drop:
            self.dropped += 1
            log.info("dropped a global result the job changes since made stale")
            self._solve_latest()
            return
        if stale:
            digest = solved_digest  # the assignment answers to the jobs it was solved for
        assignment = result.assignment
        if rebased:  # from the index the solve's thread is building
            box["ready"].wait()
            index = box.get("index") or RouteIndex.build(self.fabric, assignment, result.usage)
            res, index = repair_indexed(now_health, index, old_health=health,
                                        table_budget=self.options.table_budget)  # fmt: skip
            assignment = res.assignment
            self._index = index
            self.rebased += 1
        else:
            self._index_later(assignment, box)
        self.metrics.churn.inc(result.churn)
        try:
            self._push(assignment)
        finally:  # wanted from now on, whatever the push achieved: reconcile converges to it
            self._installed_asg = (assignment, ids, now_health)
            self._global = (result, box["flows"])
            self._bounds = {health.factor.tobytes(): result.bound}
            self._installed_jobs = version
            self.global_solves += 1
            self._publish(result, assignment, ids, now_health, digest)
            if not beside:
                box["go"].set()  # the index after the push, now
        self._record_quality(result, now_health)
        if stale:
            with self._cond:
                self._applied = max(self._applied, version)
            self._solve_latest()
        else:
            self._settle(now_version)

    def _index_when(
        self, result: SolveResult, box: dict[str, Any], drop: bool, rebased: bool
    ) -> bool:
        """Tell the solve's thread whether and when to index `result`: never when it is
        dropped; at once when it is re-based (the repair needs it before the push) or its
        push is a small part of the routes, so that a link report arriving as the round
        settles finds it ready; after the push when that installs much of the fabric (at
        meta-24k a full install took 0.3-0.45 s alone, 0.75-0.9 s beside the index build
        on a loaded 2-core machine). Returns whether it is built beside the push."""
        box["wanted"] = not drop
        pushed, rows = self._pushed_asg, len(result.assignment.flows)
        big = pushed is None or abs(rows - len(pushed.flows)) + result.churn > rows // 4
        beside = drop or rebased or not big
        if beside:
            box["go"].set()
        return beside

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
            stored = self._stored
            assert self._state.health is not None
            digest = inputs_digest(self._state.jobs, self._state.health)
            version = self._state.version
            ids = tuple(sorted(self._state.jobs))
            health = self._state.health
        self.last_result, self._last_inputs = None, None
        self._installed_asg, self._global, self._index = None, None, None
        if stored is not None:
            self._previous = stored[0]
            self._pushed_asg = None
        if stored is not None and stored[1] == digest:
            self._wanted, self._wanted_of = build_routes(self.fabric, stored[0]), None
            self._pushed_asg = stored[0]
            self._installed_asg = (stored[0], ids, health)
            self._reconcile(None)
            with self._cond:
                self._applied = max(self._applied, version)
                self._taken = max(self._taken, version)
        elif version:
            with self._cond:
                self._applied = min(self._applied, version - 1)  # solve what is stored
                self._taken = min(self._taken, version - 1)
        log.info("took over at state version %d (%s)", version,
                 "adopted the stored assignment" if stored and stored[1] == digest
                 else "solving")  # fmt: skip

    def _record_quality(self, result: SolveResult, health: LinkHealth) -> None:
        """Gauges of the routes just installed: MLU and bound at once; the predicted bus
        bandwidth (about 0.5-1 s at meta-24k) after, on the predictor thread, so it never
        holds back a settle. Only the last result recorded is predicted, after PREDICT_QUIET
        s without a newer one once the worker is idle, or PREDICT_EVERY s after the last
        prediction began (a flap storm or a stream of job changes runs few: a prediction
        shares the interpreter with the repairs, solves, pushes and index builds)."""
        m = self.metrics
        m.mlu.set(result.mlu)
        m.mlu_bound.set(result.bound.value)
        m.bound_ratio.set(result.ratio)
        with self._cond:
            self._quality_seq += 1
            self._predict_job = (self._quality_seq, result, health)
            if self._predict_thread is None:
                self._predict_thread = threading.Thread(
                    target=self._predict_loop, name="fabric-te-predict", daemon=True
                )
                self._predict_thread.start()
            self._cond.notify_all()

    def _predict_loop(self) -> None:
        """Predict the rates of the last result recorded, one at a time."""
        while True:
            with self._cond:
                while self._predict_job is None and not self._stop:
                    self._cond.wait(0.5)
                if self._stop:
                    return
                job = self._predict_job
                assert job is not None
                every = self._predicted_at + PREDICT_EVERY
                quiet = min(time.monotonic() + PREDICT_QUIET, every)
                while self._predict_job is job and not self._stop:
                    now = time.monotonic()
                    if now >= every or (now >= quiet and not self._busy):
                        break
                    self._cond.wait((quiet if now < quiet else every) - now)
                if self._predict_job is not job or self._stop:
                    continue
                self._predict_job = None
                self._predicted_at = time.monotonic()
            seq, result, health = job
            report = None
            try:
                report = simulate(self.fabric, health, result.assignment, parent=result.parent)
            except Exception:  # noqa: BLE001 - the gauges keep their last values
                log.exception("rate prediction failed")
            with self._cond:
                if seq == self._quality_seq and report is not None:
                    self.metrics.links_over_capacity.set(report.links_over_capacity)
                    self.metrics.set_job_busbw(report.job_busbw_fraction)
                if seq == self._quality_seq:
                    self._predicted_seq = seq
                self._cond.notify_all()

    def wait_predicted(self, timeout: float = 10.0) -> bool:
        """Block until the engine is idle and the predicted-rate gauges answer to the last
        result recorded (they follow the settle; see `_record_quality`)."""
        deadline = time.monotonic() + timeout
        if not self.wait_idle(timeout):
            return False
        with self._cond:
            while self._predicted_seq < self._quality_seq or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def _push(self, assignment: Assignment) -> None:
        """Plan against what is installed and push. Only the racks whose flows changed
        (against the assignment pushed last) are planned, built and read back (see
        `_scope`); the wanted routes of the others are kept as they were."""
        previous = self._pushed_asg
        racks = None  # None: plan every rack (most changed: scoping would not pay)
        if previous is not None and (
            len(previous.flows) == len(assignment.flows)  # a repair (same rows): cheap
            or not _most_racks_resized(self.fabric, previous, assignment)
        ):
            racks = changed_racks(self.fabric, previous, assignment)
        scope = None
        most = racks is not None and racks.size * 2 > self.fabric.num_racks
        if racks is not None and not most and self._wanted_routes() is not None:
            scope = self._scope(assignment, racks)
        if scope is not None and not scope[1].size and not scope[0]:
            self._pushed_asg = assignment  # nothing moved: nothing to plan or push,
            if self.marks.differing:  # but the switches that differ are repaired
                result = self._reconcile(set(self.marks.differing))
                self._push_ok = result.in_sync
            self._observe_installed()
            return
        installed, target = self.installed, assignment
        if scope is not None:
            installed, keep, switches, in_scope = scope
            target = Assignment(assignment.flows.take(keep), assignment.path[keep])
        plan, wanted = plan_update(self.fabric, installed, target)
        if scope is None:
            self._wanted, self._wanted_of = wanted, None
        else:
            self._wanted = self._merge_wanted(wanted, switches, in_scope)
        self._pushed_asg = assignment
        with self.metrics.push_seconds.time():
            report = push(self._push_driver, plan, timeout=self.push_timeout)
        ops = report.ops_applied
        self.ops_pushed += ops
        self.metrics.ops_pushed.inc(ops)
        # read back what the push touched (and any switch marked before) and repair it
        touched = set(plan.switches()) | set(self.marks.differing)
        prior: dict[str, Table | None] = {
            sw: report.installed.table(sw) for sw in plan.switches() if sw not in report.uncertain
        }
        prior.update(dict.fromkeys(report.unreadable))
        result = self._reconcile(touched, prior)
        self._push_ok = report.ok or result.in_sync
        if not report.ok:
            raise DriverError(f"push stopped: {report.summary()}")
        self._observe_installed()

    def _observe_installed(self) -> None:
        if self._round_started is not None:  # the first push of a round installs the change
            seconds = time.monotonic() - self._round_started
            self.metrics.report_to_installed_seconds.observe(seconds)
            self.latencies.append(seconds)
            self._round_started = None

    def _merge_wanted(
        self, scoped: RouteSet, switches: list[str], in_scope: Callable[[np.ndarray], np.ndarray]
    ) -> RouteSet:
        """The wanted routes with the scoped switches' in-scope entries replaced."""
        old = self._wanted_routes()
        assert old is not None
        tables = dict(old.tables)
        for sw in switches:
            before = old.table(sw)
            kept = before.take(~in_scope(before.in_port))
            table = kept.updated(scoped.table(sw), Table(sw))
            if table:
                tables[sw] = table
            else:
                tables.pop(sw, None)
        return RouteSet(tables)

    def _reconcile(
        self,
        switches: set[str] | None,
        prior: dict[str, Table | None] | None = None,
    ) -> ReconcileResult:
        """Read back `switches` (None: all), repair them towards the wanted routes, and
        adopt what was read; the switches that cannot be read are reported holding nothing."""
        leader = self.replica.is_leader()
        if not leader:
            self._follow_wanted()
        wanted = self._wanted_routes()
        if wanted is None:  # nothing wanted yet: read only, never repair
            checked = self.driver.switches() if switches is None else sorted(switches)
            installed, unreadable = read_back(self.driver, checked)
            result = ReconcileResult(installed, tuple(sorted(checked)), unreadable)
        else:
            stop = lambda: self._stop or not self.replica.is_leader()  # noqa: E731
            result = self.reconciler.run(wanted, switches, stop=stop, repair=leader, prior=prior)
        self.ops_pushed += result.ops
        self.metrics.ops_pushed.inc(result.ops)
        tables = dict(self.installed.tables)
        for sw in result.checked:
            tables[sw] = result.installed.table(sw)
        installed = RouteSet({sw: t for sw, t in sorted(tables.items()) if t})
        with self._cond:
            self.marks.update(result, loud=leader)
            if switches is None and result.in_sync:
                self._push_ok = True
        self._record(installed, list(result.checked))
        return result

    def _adopt_read(self, tables: dict[str, Table | None]) -> None:
        """Record tables just read back (None: unreadable, reported holding nothing)."""
        merged = dict(self.installed.tables)
        merged.update({sw: Table(sw) if t is None else t for sw, t in tables.items()})
        self._record(RouteSet({sw: t for sw, t in sorted(merged.items()) if t}), sorted(tables))

    def _follow_wanted(self) -> None:
        """A follower wants what the leader stored last (it only reports the difference)."""
        with self._cond:
            stored = self._stored
        if stored is not None and stored[0] is not self._previous:
            self._previous = self._pushed_asg = stored[0]
            self._wanted, self._wanted_of = build_routes(self.fabric, stored[0]), None

    def _scope(
        self, assignment: Assignment, racks: np.ndarray
    ) -> tuple[RouteSet, np.ndarray, list[str], Callable[[np.ndarray], np.ndarray]] | None:
        """(installed entries, flow indices, switches, in_port test) of `racks`: the racks
        whose flows' routes changed.

        With one member per link, TE entries live only at the source RTSW (keyed on a NIC's
        access link) and the source CTSW (keyed on the rack's uplink), so every entry
        belongs to the rack its in_port leads from: planning those racks' flows against
        those racks' entries is exact. Other fabrics get the full plan (None)."""
        f = self.fabric
        if f.rack_links != 1 or f.agg_links != 1:
            return None
        flows = assignment.flows
        src_rack = f.rack_of_host(f.host_of_nic(flows.src_nic))
        keep = np.flatnonzero(np.isin(src_rack, racks))
        rack_set = set(racks.tolist())
        rack_base, per_pod = f.rack_base, f.ctsws_per_pod

        def in_scope(port: np.ndarray) -> np.ndarray:
            """Whether each in_port leads from one of the racks."""
            access = port < rack_base
            rack = np.where(access, 0, (port - rack_base) // per_pod)
            if access.any():
                rack[access] = f.rack_of_host(f.host_of_nic(port[access]))
            return np.isin(rack, racks)

        pods = {int(f.pod_of_rack(r)) for r in rack_set}
        switches = [f.rtsw_name(r) for r in sorted(rack_set)] + [
            f.ctsw_name(p * f.ctsws_per_pod + c) for p in sorted(pods)
            for c in range(f.ctsws_per_pod)
        ]  # fmt: skip
        tables = {}
        for sw in switches:
            table = self.installed.table(sw)
            part = table.take(in_scope(table.in_port))
            if part:
                tables[sw] = part
        return RouteSet(tables), keep, switches, in_scope

    def _record(self, installed: RouteSet, switches: list[str]) -> None:
        """Adopt what was read back; log the delta of the switches that may have changed."""
        with self._cond:
            if self._routes.record(installed, switches) is not None:
                self._cond.notify_all()
            counts = self._routes.installed.counts()
        self.metrics.set_tables(counts, SWITCH_TIERS)
