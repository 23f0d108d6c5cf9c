"""The predicted rates of the routes installed, on a thread of their own.

MLU, bound and the certificate's figures are set at once when a result is recorded (an MLU
its certificate left to count, `SolveResult.mlu_pending`, is counted first thing on the
predictor thread, after the push, and handed back to the engine; one nothing is left to
count, NaN, that of a routing restored from the store with rows on the fabric's hashing,
is the simulation's below); the predicted bus bandwidth per job (a max-min simulation,
costly at meta-24k scale) follows on the predictor thread, so it never holds back a settle.
It is a share of the most any routing gives the job: of its demand, as planned (a job
asking its NICs for more than their line rate is planned at line rate, controller.model.
jobs.job_flows). Only the last result recorded is
predicted, PREDICT_QUIET s after it once the engine is idle, or PREDICT_EVERY s after the last
prediction began while results keep coming (a flap storm or a stream of job changes runs few:
a prediction shares the interpreter with the repairs, solves, pushes and index builds).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from controller.errors import Superseded
from controller.model.assignment import Assignment
from controller.model.dataplane import simulate_carried
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.rates import SimReport
from controller.service.metrics import Metrics
from controller.service.priority import background
from controller.solver import SolveResult

log = logging.getLogger("fabric_te.engine")
PREDICT_QUIET = 1.0  # s without a new result (and idle) before the last one's rate prediction
PREDICT_EVERY = 5.0  # s after which it runs even while results keep coming
# QP rows on the fabric's defaults up to which they are walked for the prediction (the
# command line's limit too); a pod-wide all-to-all left to hashing is 19M of them
PREDICT_HASHED = 4_000_000


@dataclass(frozen=True)
class _Recorded:
    seq: int
    result: SolveResult
    health: LinkHealth
    count: Callable[[], SolveResult] | None  # the result with its MLU counted


class Predictor:
    """Quality gauges of the last result recorded; rates predicted on a thread."""

    def __init__(
        self,
        fabric: Fabric,
        metrics: Metrics,
        cond: threading.Condition,
        *,
        busy: Callable[[], bool],
        stopped: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        counted: Callable[[SolveResult, SolveResult], None] = lambda before, after: None,
        defaults: tuple[str, int, int] = ("eecmp", 1, 16),
    ) -> None:
        """`busy()` and `stopped()` are read under `cond`, which the engine notifies when
        they change; `counted(before, after)` (called under `cond`) hands a result whose MLU
        was counted here back to the engine. `defaults`: (hashing, seed, QPs) of the rows
        without a TE entry, as the data plane carries them (`_simulate`)."""
        self.fabric = fabric
        self.defaults = defaults
        self.metrics = metrics
        self._cond = cond
        self._busy = busy
        self._stopped = stopped
        self._clock = clock
        self._counted = counted
        self._seq = 0  # results recorded
        self._predicted = 0  # the result the predicted-rate gauges answer to
        self._next: _Recorded | None = None
        self.job_busbw: dict[str, float] = {}  # the last prediction, by job id
        self._thread: threading.Thread | None = None
        self._started = clock()  # when the last prediction started

    def record(self, result: SolveResult, health: LinkHealth,
               count: Callable[[], SolveResult] | None = None) -> None:  # fmt: skip
        """Gauges of the routes just installed: MLU and bound now (NaN while the MLU is left
        to `count`, which runs first on the predictor thread), rates to follow."""
        self._gauges(result)
        with self._cond:
            self._seq += 1
            self._next = _Recorded(self._seq, result, health,
                                   count if result.mlu_pending else None)  # fmt: skip
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="fabric-te-predict", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _gauges(self, result: SolveResult) -> None:
        m = self.metrics
        m.mlu.set(result.mlu)
        m.mlu_bound.set(result.bound.value)
        m.bound_ratio.set(result.ratio)
        m.set_certificate(result.certificate)

    def _count(self, job: _Recorded) -> _Recorded:
        """`job` with its MLU counted, handed to the engine (and to the gauges while it is
        still the last result recorded), nothing left to count either way."""
        assert job.count is not None
        try:
            after = job.count()
        except Superseded:  # the engine is closing
            return replace(job, count=None)
        except Exception:  # noqa: BLE001 - the MLU stays NaN; Status says it is pending
            log.exception("counting the MLU failed")
            return replace(job, count=None)
        with self._cond:
            if job.seq == self._seq:
                self._gauges(after)
            self._counted(job.result, after)
        return replace(job, result=after, count=None)

    def _simulate(self, result: SolveResult, health: LinkHealth) -> tuple[SimReport, bool]:
        """The routes as the data plane carries them (controller.model.dataplane, the
        model `tectl solve` and the certificate predict with): a whole flow is `qps` QPs
        on its TE path and a QP bucket one, so their shares of a link differ; rows without
        a TE entry (handed back by the certificate, or over the table budget) ride the
        fabric's hashing, one seed, so their jobs are predicted too and their load counts;
        past PREDICT_HASHED QP rows on the defaults, the TE rows alone. With whether every
        row was simulated (its MLU is then the routing's)."""
        assignment, parent = result.assignment, result.parent
        kind, seed, qps = self.defaults
        off = assignment.path < 0
        whole = int(off.sum()) * qps <= PREDICT_HASHED
        if not whole:
            te = np.flatnonzero(~off)
            rows = te if parent is None else np.asarray(parent)[te]
            assignment, parent = Assignment(assignment.flows.take(te), assignment.path[te]), rows
        return simulate_carried(self.fabric, health, assignment, parent, kind=kind, seed=seed,
                                qps=qps), whole  # fmt: skip

    def answered(self) -> bool:
        """Whether the gauges answer to the last result recorded (under the lock)."""
        return self._predicted >= self._seq

    def _loop(self) -> None:
        background()
        while True:
            with self._cond:
                while self._next is None and not self._stopped():
                    self._cond.wait(0.5)
                if self._stopped():
                    return
                job = self._next
                assert job is not None
            if job.count is not None:  # first thing, whatever the engine does meanwhile
                job = self._count(job)
                with self._cond:
                    if self._next is not None and self._next.seq == job.seq:
                        self._next = job
                    continue
            with self._cond:
                every = self._started + PREDICT_EVERY
                quiet = min(self._clock() + PREDICT_QUIET, every)
                while self._next is job and not self._stopped():
                    now = self._clock()
                    if now >= every or (now >= quiet and not self._busy()):
                        break
                    self._cond.wait((quiet if now < quiet else every) - now)
                if self._next is not job or self._stopped():
                    continue
                self._next = None
                self._started = self._clock()
            report, whole, busbw = None, False, {}
            try:
                report, whole = self._simulate(job.result, job.health)
                busbw = dict(report.job_busbw_fraction)
            except Exception:  # noqa: BLE001 - the gauges keep their last values
                log.exception("rate prediction failed")
            with self._cond:
                if job.seq == self._seq and report is not None:
                    self.metrics.links_over_capacity.set(report.links_over_capacity or 0)
                    self.metrics.set_job_busbw(busbw)
                    self.job_busbw = busbw
                    # an MLU nothing was left to count (a restored routing's): the simulation's
                    if whole and math.isnan(job.result.mlu) and not job.result.mlu_pending:
                        after = replace(job.result, mlu=report.mlu)
                        self._gauges(after)
                        self._counted(job.result, after)
                if job.seq == self._seq:
                    self._predicted = job.seq
                self._cond.notify_all()
