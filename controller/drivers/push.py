"""Pushing plans through a driver, and reconciling switches with the routes we want.

`push` applies a plan stage by stage; the batches of one stage go out concurrently (for a
driver whose calls wait on switches; see `Driver.concurrent`), each with a per-call timeout
and bounded retries (timeouts and unreachable switches are retried, since a batch is
idempotent; rejections are not). When a batch fails for good, the stage's
other batches finish, and no later stage starts. Because the plan is ordered make before
break, the stages already applied leave a loop- and black-hole-free fabric. The report then
reads back every switch the plan touches, so it says what is installed, not what was meant.

A timed-out call may still land after the report is taken; such switches are listed in
`uncertain`, and the next `reconcile` sees their real state.

`reconcile` reads the switches we own, reports drift against the wanted routes (missing,
wrong and extra entries of our owner; foreign entries are counted and never touched) and,
unless asked not to, pushes the diff that repairs it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from controller.drivers.interface import Driver
from controller.errors import (
    DriverError,
    DriverRejected,
    DriverTimeout,
    DriverUnavailable,
    Fenced,
)
from controller.routes.plan import Batch, Plan
from controller.routes.tables import RouteSet, Table

APPLIED, FAILED, TIMEOUT, SKIPPED, PLANNED = "applied", "failed", "timeout", "skipped", "planned"
_UNTRIED = object()  # no attempt made yet


@dataclass(frozen=True)
class BatchResult:
    """What happened to one batch."""

    stage: int
    switch: str
    ops: int
    status: str  # applied, failed, timeout, skipped, planned (dry run)
    attempts: int = 0
    error: str = ""
    fenced: bool = False  # refused because this replica no longer leads (errors.Fenced)


@dataclass(frozen=True)
class PushReport:
    """Outcome of a push: per-batch results and the tables read back afterwards."""

    plan: Plan
    results: tuple[BatchResult, ...]
    stages_applied: int
    installed: RouteSet = field(default_factory=RouteSet)
    unreadable: tuple[str, ...] = ()  # switches whose table could not be read back
    uncertain: tuple[str, ...] = ()  # switches with a call that may still land
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return all(r.status in (APPLIED, PLANNED) for r in self.results) and not self.unreadable

    @property
    def ops_applied(self) -> int:
        """Operations in the batches that were applied."""
        return sum(r.ops for r in self.results if r.status == APPLIED)

    @property
    def failed(self) -> tuple[BatchResult, ...]:
        return tuple(r for r in self.results if r.status in (FAILED, TIMEOUT))

    @property
    def fenced(self) -> bool:
        """Whether a batch was refused because this replica no longer leads."""
        return any(r.fenced for r in self.failed)

    def summary(self) -> str:
        stages = sum(1 for stage in self.plan.stages if stage)
        if self.dry_run:
            return f"dry run: {_n(len(self.plan), 'operation')} in {_n(stages, 'stage')}"
        if not len(self.plan):
            return "nothing to change: the switches already hold these routes"
        touched = len(self.plan.switches())
        busy = [i for i, stage in enumerate(self.plan.stages) if stage]  # stages with batches
        done = sum(1 for i in busy if i < self.stages_applied)
        text = (
            f"{_n(len(self.plan), 'operation')} on {_n(touched, 'switch')}, {done}/{len(busy)} "
            f"{'stage' if len(busy) == 1 else 'stages'} "
            f"applied; {len(self.installed):,} entries read back from those switches"
        )
        for r in self.failed:
            text += f"; {r.switch} {r.status} after {r.attempts} attempt(s): {r.error}"
        return text


def _n(n: int, word: str) -> str:
    """'1 stage', '3 stages', '2 switches'."""
    return f"{n:,} {word}{'' if n == 1 else 'es' if word.endswith('ch') else 's'}"


def _apply_with_retries(
    driver: Driver,
    batch: Batch,
    timeout: float | None,
    retries: int,
    backoff: float,
    sleep: Callable[[float], None],
    first: object = _UNTRIED,
) -> tuple[int, DriverError | None]:
    """(attempts made, final error or None). `first`: the outcome of a first attempt
    already made (see `Driver.apply_batches`)."""
    error: DriverError | None = None
    for attempt in range(1, retries + 2):
        try:
            if attempt > 1 or first is _UNTRIED:
                driver.apply_batch(batch, timeout=timeout)
            elif isinstance(first, DriverError):
                raise first
            return attempt, None
        except DriverRejected as err:
            return attempt, err
        except (DriverTimeout, DriverUnavailable) as err:
            error = err
        except DriverError as err:
            return attempt, err
        if attempt <= retries and backoff:
            sleep(backoff * attempt)
    return retries + 1, error


def _run_stage(
    pool: ThreadPoolExecutor | None,
    workers: int,
    deadline: float | None,
    index: int,
    stage: tuple[Batch, ...],
    apply: Callable[[Batch, object], tuple[int, DriverError | None]],
    tries: int,
    first_attempts: Callable[[tuple[Batch, ...]], list[DriverError | None]] | None = None,
) -> dict[str, BatchResult]:
    """Apply one stage's batches on up to `workers` threads, each taking the next batch
    when it is done with one (one task per thread, not per batch: thousands of small
    batches cost no more than their own work); without a pool, in this thread, the first
    attempts of all in one call (`first_attempts`), then the retries one by one. Batches
    not finished by `deadline` are reported timed out and are not started any more (one
    whose first attempt went in, applied)."""
    queue = deque(stage)
    results: dict[str, BatchResult] = {}
    lock = threading.Lock()
    stop = threading.Event()
    firsts: dict[str, DriverError | None] = {}
    if pool is None and first_attempts is not None:
        firsts = dict(zip((b.switch for b in stage), first_attempts(stage), strict=True))

    def drain() -> None:
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                batch = queue.popleft()
            attempts, err = apply(batch, firsts.get(batch.switch, _UNTRIED))
            if err is None:
                status = APPLIED
            elif isinstance(err, DriverTimeout):
                status = TIMEOUT
            else:
                status = FAILED
            with lock:
                results[batch.switch] = BatchResult(
                    index, batch.switch, len(batch), status, attempts,
                    "" if err is None else f"{type(err).__name__}: {err}",
                    isinstance(err, Fenced),
                )  # fmt: skip
            if pool is None and deadline is not None and time.monotonic() > deadline:
                stop.set()

    if pool is None:
        drain()
        pending = bool(queue)
    else:
        tasks: list[Future[None]] = [pool.submit(drain) for _ in range(min(workers, len(stage)))]
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        _, waiting = wait(tasks, timeout=left)
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        pending = bool(waiting)
    if pending:
        stop.set()
        with lock:
            for batch in stage:
                if batch.switch in results:
                    continue
                if firsts.get(batch.switch, _UNTRIED) is None:  # its first attempt went in
                    results[batch.switch] = BatchResult(index, batch.switch, len(batch), APPLIED, 1)
                    continue
                results[batch.switch] = BatchResult(
                    index, batch.switch, len(batch), TIMEOUT, tries, "stage deadline passed"
                )
    with lock:
        return dict(results)


def read_back(driver: Driver, switches: Iterable[str]) -> tuple[RouteSet, dict[str, str]]:
    """(tables of the readable switches, the unreadable ones: switch -> why, as the driver
    said it, in switch order)."""
    tables: dict[str, Table] = {}
    unreadable: dict[str, str] = {}
    for switch in sorted(set(switches)):
        try:
            table = driver.read_table(switch)
        except DriverError as err:
            unreadable[switch] = str(err) or type(err).__name__
            continue
        if table:
            tables[switch] = table
    return RouteSet(tables), unreadable


def push(
    driver: Driver,
    plan: Plan,
    timeout: float | None = 5.0,
    retries: int = 2,
    *,
    workers: int = 8,
    backoff: float = 0.0,
    dry_run: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> PushReport:
    """Apply `plan` stage by stage; stop at the first stage with a failed batch."""
    if dry_run:
        planned = tuple(BatchResult(s, b.switch, len(b), PLANNED) for s, b in plan.batches())
        return PushReport(plan, planned, 0, dry_run=True)
    results: list[BatchResult] = []
    uncertain: set[str] = set()
    applied_stages = 0
    # A stage that outlives every attempt's timeout plus slack is abandoned (backstop
    # for drivers that do not honour `timeout`).
    grace = None if timeout is None else (retries + 1) * (timeout + backoff * (retries + 1)) + 1
    pool = (  # a driver whose batches run in-process gains nothing from threads
        ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="push")
        if driver.concurrent
        else None
    )
    try:
        for index, stage in enumerate(plan.stages):
            deadline = (
                None
                if grace is None
                else time.monotonic() + grace * max(1, -(-len(stage) // max(1, workers)))
            )
            stage_results = _run_stage(
                pool, workers, deadline, index, stage,
                lambda b, first: _apply_with_retries(
                    driver, b, timeout, retries, backoff, sleep, first
                ),
                retries + 1,
                lambda batches: driver.apply_batches(batches, timeout),
            )  # fmt: skip
            for r in stage_results.values():
                if r.status == TIMEOUT:
                    uncertain.add(r.switch)
            results.extend(stage_results[b.switch] for b in stage)
            if any(stage_results[b.switch].status != APPLIED for b in stage):
                for later, batch in plan.batches():
                    if later > index:
                        results.append(BatchResult(later, batch.switch, len(batch), SKIPPED))
                break
            applied_stages += 1
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    installed, unreadable = read_back(driver, plan.switches())
    return PushReport(
        plan, tuple(results), applied_stages, installed, tuple(unreadable),
        tuple(sorted(uncertain)),
    )  # fmt: skip
