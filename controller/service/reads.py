"""What the API threads read of the engine: its inputs and routes, their quality and the
certificate, Status's fields, and waits for a round to settle. The engine (a subclass) owns
the state these read, under the one condition they share; nothing here changes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from controller.drivers.reconcile import Reconciler
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_over_line_rate
from controller.routes.tables import RouteSet
from controller.service.installer import Installer, RouteEvent, SwitchMarks
from controller.service.intake import Intake
from controller.service.job_view import JobFigures, job_figures
from controller.service.latency import ReportLatency
from controller.service.predictor import Predictor
from controller.service.preview import Preview, preview
from controller.service.replica import Replica
from controller.service.solves import GlobalSolve
from controller.service.state import DesiredState
from controller.solver import Certificate, SolveOptions, SolveResult


class EngineReads:
    """The read side of `controller.service.engine.Engine`."""

    _cond: threading.Condition
    _state: DesiredState
    _applied: int
    _busy: bool
    _deferred: Certificate | None
    _solve: GlobalSolve | None
    _solve_ended: bool
    _clock: Callable[[], float]
    fabric: Fabric
    options: SolveOptions
    replica: Replica
    intake: Intake
    installer: Installer
    predictor: Predictor
    latency: ReportLatency
    last_result: SolveResult | None
    repairs: int
    rebased: int

    @property
    def marks(self) -> SwitchMarks:
        return self.installer.marks

    @property
    def reconciler(self) -> Reconciler:
        return self.installer.reconciler

    @property
    def ops_pushed(self) -> int:
        return self.installer.ops_pushed

    @property
    def driver_ok(self) -> bool:
        """The last push went through and every switch, as last read, holds what we want."""
        return self.installer.push_ok and self.marks.ok

    def status_fields(self) -> dict[str, Any]:
        """Reconcile and store figures for Status (plain values, named as its fields)."""
        replica = self.replica.status_fields()  # not under the lock: a store may try a write
        with self._cond:
            return replica | self.marks.fields() | {
                "ops_pushed": self.ops_pushed,
                "pending_changes": self._state.version - self._applied,
                **self.latency_fields(),
            } | dict(zip(("solving_seconds", "solving_version", "solving_settle"),
                         self.solving(), strict=True))

    def solving(self) -> tuple[float, int, bool]:
        """(seconds, state version, whether it certifies a settled link change) of the
        global solve running in its thread; (0, 0, False) when none runs (one that ended
        waits for the worker to push it: not running)."""
        task = self._solve
        if task is None or self._solve_ended:
            return 0.0, 0, False
        return (max(0.0, self._clock() - task.started), task.taken.version,
                task.settled is not None)  # fmt: skip

    def latency_fields(self) -> dict[str, Any]:
        """Report-to-installed latency (see controller.service.latency) and repair counts."""
        return self.latency.fields() | {"repairs": self.repairs, "solves_rebased": self.rebased}

    def job_figures(self) -> dict[str, JobFigures]:
        """What the installed routing does for each job (see controller.service.job_view)."""
        with self._cond:  # read together; counted outside the lock (O(rows))
            result, busbw = self.last_result, self.predictor.job_busbw
            jobs = [job for job, _ in self._state.job_list()]
        rates = {job.id: (job.demand(self.fabric), job.line_rate(self.fabric)) for job in jobs}
        return job_figures(result, busbw, jobs_over_line_rate(self.fabric, jobs), rates)

    def links_not_up(self) -> list[tuple[int, float, str, float]]:
        """(link id, capacity factor, the drained switches holding it down joined by ','
        or "", the factor it has once no drain holds it: beneath them, or its own) of every
        link not fully up, as the inputs say."""
        health, f = self.health, self.fabric
        out = []
        for k in health.changed(f).tolist():  # a link without a cable is not news
            by = ",".join(f.node_name(n) for n in health.holding(f, k))
            factor = float(health.factor[k])
            out.append((k, factor, by, float(health.beneath.get(k, 0.0)) if by else factor))
        return out

    def drained(self) -> list[str]:
        """The switches drained by a report, by name."""
        return sorted(self.fabric.node_name(n) for n in self.health.drained)

    @property
    def certificate(self) -> Certificate | None:
        """The certificate of what is installed: a repair's pending one, else the last
        result's; while routes applied from a file are held, only a repair's (a file's
        routes are not certified)."""
        if self._deferred is not None or self.intake.held is not None:
            return self._deferred
        return None if self.last_result is None else self.last_result.certificate

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
        return self.installer.installed

    @property
    def wanted(self) -> RouteSet | None:
        """The routes of the last assignment pushed (None before the first)."""
        return self.installer.wanted()

    @property
    def routes_version(self) -> int:
        with self._cond:
            return self.installer.routes.version

    @property
    def routes_epoch(self) -> str:
        """The epoch of the routes versions (controller.service.state.RouteLog): drawn when
        this process started, so a version of another process is never taken for one."""
        return self.installer.routes.epoch

    def snapshot(self) -> tuple[int, RouteSet]:
        """(routes version, installed routes), consistent with each other."""
        with self._cond:
            return self.installer.routes.version, self.installer.routes.installed

    def what_if(
        self,
        updates: Mapping[int, float],
        extra: list[Job],
        options: SolveOptions | None = None,
        *,
        put: Sequence[Job] = (),
        delete: Sequence[str] = (),
        switches: Mapping[int, bool] | None = None,
    ) -> SolveResult:
        """Solve the current state plus changes from the assignment installed; nothing is
        pushed or recorded."""
        target = self.installer.target
        previous = target.assignment if target is not None else self.installer.previous
        return self.intake.what_if(updates, extra, options or self.options, put=put,
                                   delete=delete, previous=previous,
                                   switches=switches)  # fmt: skip

    def preview(
        self, updates: Mapping[int, float], put: Sequence[Job], delete: Sequence[str],
        options: SolveOptions | None = None, switches: Mapping[int, bool] | None = None,
    ) -> Preview:
        """What the changes would move, against what is installed (see `preview`)."""
        target = self.installer.target
        before = target.assignment if target is not None else self.installer.previous
        result = self.what_if(updates, [], options, put=put, delete=delete, switches=switches)
        changed = [job.id for job in put] + list(delete)
        return preview(self.fabric, self.installed, before, result, changed)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until the installed routes answer to every accepted input change."""
        return self._wait(lambda: not self._busy and self._applied >= self._state.version,
                          timeout)  # fmt: skip

    def wait_predicted(self, timeout: float = 10.0) -> bool:
        """Block until the engine is idle and the predicted-rate gauges answer to the last
        result recorded (they follow the settle; see `controller.service.predictor`)."""
        deadline = time.monotonic() + timeout
        if not self.wait_idle(timeout):
            return False
        return self._wait(lambda: self.predictor.answered() and not self._busy,
                          deadline - time.monotonic())  # fmt: skip

    def _wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def watch(
        self, since: int = 0, alive: Callable[[], bool] | None = None, max_lag: int = 0,
        epoch: str = "",
    ) -> Iterator[RouteEvent]:
        """Snapshot (or only the deltas after `since`, if all still logged and `epoch` is
        the routes epoch: controller.service.state.RouteLog), a sync marker, then deltas as
        they come. Ends when the engine closes or `alive()` turns False. A watcher that
        falls behind (more than `max_lag` versions, or out of the delta log) gets a last
        "behind" event carrying the version it has seen, to resume from."""
        return self.installer.watch(since, alive, max_lag, epoch)
