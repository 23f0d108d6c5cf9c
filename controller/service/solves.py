"""A global solve in a thread of its own, then the RouteIndex of its result; and the last
one pushed, which link changes are settled against (`Baseline`).

The worker stays free to repair while a global solve runs. The solve starts once the index
being built for the installed routes is ready (beside it, that build took 2-4x as long, and a
link report arriving meanwhile waited for it). When the solve ends the worker is told
(`on_end`); the thread then builds the result's RouteIndex, with the table usage the solve
counted, when the worker says so (`index_when`: beside the push, after it, or never for a
dropped result), so that the next repair finds it ready.

A solve whose inputs are superseded (a job changed since it started: `rounds.superseded`)
stops at its next stage (`solver.solve`'s `stop`) and ends `abandoned`, with no result: the
worker solves the latest inputs instead, so a burst of puts costs one solve of them all.
A result re-based on a link change that came while it ran (`GlobalSolve.rebased`) is
published as the routing pushed (`rebased_result`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from controller.errors import Superseded
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet, distinct
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
from controller.service.installer import IndexBuild
from controller.service.metrics import Metrics
from controller.service.priority import background
from controller.service.rounds import Taken
from controller.solver import (
    AssignResult,
    Bound,
    CertifyOptions,
    RouteIndex,
    SolveOptions,
    SolveResult,
    bound_under,
    carried_off_te,
    certified,
    mlu_counted,
    repair_indexed,
    solve,
    table_figures,
)

log = logging.getLogger("fabric_te.engine")
POLL = 0.5  # s between looks at the stop flag while the thread waits


class GlobalSolve:
    """One global solve of `taken`, with `previous` as the assignment to keep flows of."""

    def __init__(
        self,
        fabric: Fabric,
        taken: Taken,
        previous: Assignment | None,
        options: SolveOptions,
        metrics: Metrics,
        *,
        hook: Callable[[LinkHealth], None],
        known: Mapping[str, tuple[Job, FlowSet]],
        react: CertifyOptions,
        after: IndexBuild | None,
        stopped: Callable[[], bool],
        on_end: Callable[[], None],
        settled: SolveResult | None = None,
        superseded: Callable[[], bool] = lambda: False,
        started: float = 0.0,
    ) -> None:
        self.fabric = fabric
        self.started = started  # when the engine started it, on the engine's clock
        # a settled link change whose certificate is pending: certified in full here instead
        # of a solve (its routes stay; only the jobs the certificate hands back move)
        self.settled = settled
        self.taken = taken
        self.previous = previous
        # a routing with no TE entry (an all-to-all left to hashing) is the reference: its
        # MLU is counted after the push (`count`), not between the put and the routes applied
        self.options = replace(options, certify=replace(options.certify, mlu_later=True))
        self.metrics = metrics
        self._hook = hook
        self._known = known  # flows built as the jobs came
        self._react = react  # the certificate of a re-based result (deferred when at risk)
        self._after = after  # the index build it starts after
        self._stopped = stopped
        self._superseded = superseded  # asked between the solve's stages
        self._on_end = on_end
        self.flows: FlowSet | None = None
        self.result: SolveResult | None = None
        self.error: BaseException | None = None
        self.abandoned = False  # stopped at a stage, superseded: no result, no error
        self.indexed = IndexBuild()  # the result's index, built when the worker says so
        self._go = threading.Event()
        self._wanted = False

    def start(self) -> None:
        threading.Thread(target=self._work, name="fabric-te-solve", daemon=True).start()

    def index_when(self, wanted: bool, now: bool) -> None:
        """Whether the result's index is wanted, and that it may be built now (else when
        `index_when` is called again with `now`)."""
        self._wanted = wanted
        if now:
            self._go.set()

    def rebased(self, health: LinkHealth) -> tuple[AssignResult, RouteIndex]:
        """The result repaired for `health` (links that changed while it ran), from the
        index this thread is building: no route through a link now down is pushed."""
        result = self.result
        assert result is not None
        self.indexed.ready.wait()
        index = self.indexed.index or RouteIndex.build(self.fabric, result.assignment,
                                                       result.usage)  # fmt: skip
        res, index = repair_indexed(health, index, old_health=self.taken.health,
                                    table_budget=self.options.table_budget,
                                    certify_options=self._react, qps=self.options.qps,
                                    hashed_jobs=result.hashed_jobs)  # fmt: skip
        return res, index

    def bound_for(self, health: LinkHealth) -> Bound:
        """The lower bound of this solve's flows under `health` (links that changed while
        it ran): derived from the solve's own where capacity only went down, else computed
        in full. The solve's bound does not hold for a re-based result: capacity back since
        makes it no lower bound (MLU below it), capacity lost since makes the routing look
        further from optimal than it is, and its repairs are then judged against that."""
        assert self.result is not None and self.flows is not None
        return bound_under(self.fabric, self.flows, health, self.options.qps,
                           (self.taken.health, self.result.bound))  # fmt: skip

    def count(self, result: SolveResult, stop: Callable[[], bool]) -> SolveResult:
        """`result` (this solve's, or its settled result certified) with the MLU its
        certificate left to count (`solver.mlu_counted`)."""
        assert self.flows is not None
        return mlu_counted(self.fabric, self.taken.health, result, self.flows, self.options,
                           stop)  # fmt: skip

    def _work(self) -> None:
        background()  # a repair on the engine thread goes first

        def stop() -> bool:
            return self._stopped() or self._superseded()

        try:
            while self._after is not None and not self._after.ready.wait(POLL):
                if self._stopped():
                    return
            self._hook(self.taken.health)
            self.flows = jobs_flows(self.fabric, list(self.taken.jobs), self._known)
            if self.settled is not None:
                with self.metrics.solve_seconds.labels("certify").time():
                    self.result = certified(self.fabric, self.taken.health, self.settled,
                                            self.options)  # fmt: skip
            else:
                start = time.perf_counter()
                try:
                    self.result = solve(self.fabric, self.taken.health, self.flows,
                                        previous=self.previous, options=self.options,
                                        stop=stop)  # fmt: skip
                except Superseded:  # its time is counted apart
                    self.abandoned = True
                    raise
                finally:
                    kind = "abandoned" if self.abandoned else "solve"
                    self.metrics.solve_seconds.labels(kind).observe(time.perf_counter() - start)
            self.indexed.assignment = self.result.assignment
        except Superseded as err:
            log.info("global solve abandoned: %s", err)
            self.abandoned = True
        except BaseException as err:  # noqa: BLE001 - handed to the worker
            self.error = err
        self._on_end()
        result = self.result
        if result is not None:
            while not self._go.wait(POLL) and not self._stopped():
                pass
            if self._wanted and not self._stopped():
                try:
                    self.indexed.index = RouteIndex.build(
                        self.fabric, result.assignment, result.usage
                    )
                except Exception:  # noqa: BLE001 - the next repair builds it
                    log.exception("route index build failed")
        self.indexed.ready.set()


class Baseline:
    """The last global solve pushed, its input flows and the jobs version it answers to: a
    link change against the same jobs is settled against its quality, with the lower bound
    of those flows under the new health (cached by health: a flap returns to one seen)."""

    CACHED = 64  # bounds kept

    def __init__(self, fabric: Fabric, result: SolveResult, flows: FlowSet, jobs_version: int,
                 health: LinkHealth, qps: int, table_budget: int | None = None,
                 ) -> None:  # fmt: skip
        self.fabric = fabric
        self.budget = fabric.table_budget(table_budget)  # entries per node, as solved
        self.result = result  # its MLU counted in place when the push left it to count
        self.flows = flows
        self.jobs_version = jobs_version
        self.health = health  # the health it was solved for
        self.qps = qps
        self._bounds: dict[bytes, Bound] = {health.factor.tobytes(): result.bound}

    def bound_for(self, before: LinkHealth, health: LinkHealth) -> Bound:
        """The split lower bound under `health`: cached, else derived from `before`'s when
        that is cached (`bound_under`: only the changed cuts, when capacity only went down),
        else computed in full (the costly case; see docs/profiling.md)."""
        key = health.factor.tobytes()
        bound = self._bounds.get(key)
        if bound is None:
            known = self._bounds.get(before.factor.tobytes())
            bound = bound_under(self.fabric, self.flows, health, self.qps,
                                None if known is None else (before, known))  # fmt: skip
            if len(self._bounds) >= self.CACHED:
                self._bounds.pop(next(iter(self._bounds)))
            self._bounds[key] = bound
        return bound

    def settled(self, res: AssignResult, moved: np.ndarray, bound: Bound, method: str,
                seconds: float, usage: np.ndarray | None = None) -> SolveResult:  # fmt: skip
        """The result of a link-change round settled from a repair (and re-optimisation)
        of this solve's routes: `moved` rows, figures against `bound`. `usage`: the TE
        entries per node of `res.assignment` as the repair's index keeps them, if counted
        (the index built for this result, if one is, then needs no full count before a
        repair); the table counts are then the repair's, else this solve's (the read-back
        counts are in /metrics)."""
        last = self.result
        assert last.parent is not None
        out = SolveResult.of(replace(res, churn=moved, method=method), bound, None,
                             {"total": seconds}, last.parent, as_of=last)  # fmt: skip
        if usage is None:
            return out
        counts = table_figures(self.fabric, usage, self.budget)
        budgets = {k: v for k, v in last.tables.items() if k.startswith("te_entries_budget")}
        return replace(out, usage=usage, tables={**counts, **budgets})


def rebased_result(result: SolveResult, rebased: AssignResult, bound: Bound) -> SolveResult:
    """A global `result` re-based on a link change that came while it ran (`rebased`, its
    repair): Status, the job figures and the next repairs' baseline read the routing pushed,
    not the one solved (whose routes may cross the link now down), against `bound`, the
    lower bound under the health it is re-based on (`GlobalSolve.bound_for`). Its tables
    and split flows stand as solved."""
    parent = np.asarray(result.parent)
    unroutable = distinct(parent[rebased.unroutable])
    handed, fallback, certificate = carried_off_te(result, rebased, parent)
    mlu = rebased.mlu if result.mlu_pending else result.mlu  # counted by the repair
    if rebased.assignment is not result.assignment and np.isfinite(rebased.mlu):
        mlu = rebased.mlu  # the routing pushed, not the one solved
    return replace(
        result, assignment=rebased.assignment, certificate=certificate, mlu=mlu,
        collided_links=int(rebased.collided_links.size), unroutable=unroutable,
        handed_back=handed, fallback_ecmp=fallback, usage=rebased.usage, bound=bound,
    )  # fmt: skip
