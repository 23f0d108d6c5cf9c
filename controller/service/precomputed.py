"""Precomputed repairs: for the installed routing, the repair of every single link and
switch failure (`controller.model.failures.single_failures`), computed before it happens.

A background thread takes a base (the target installed, its RouteIndex, the jobs version,
the routes installed and wanted) and, element by element in priority order, runs the very
repair the engine would run on demand (`repair_indexed`, same options: the same certified
outcome, its certificate included) and keeps it compact (`PrecomputedRepair`): the rows
whose path changes and their new paths, the arcs whose load or count changes and their new
values, the table usage of the nodes that change, and the push planned against the routes
installed then (per-switch batches, and where their rows go in the wanted tables and the
route log as row positions: `controller.service.splices`). At 614K
rows that is kilobytes per element where the repaired assignment and its index are ~10 MB.

Use: a link report whose health is the base health with exactly one listed element failed
(every up link of it down, nothing else changed) takes the element's repair, if ready, and
only while the base is still the one installed: the same target object, the same jobs
version (any change of jobs, health or installed routing makes a new base, and the set
computed for the old one is never used). Anything else takes the on-demand repair: a
degradation (factor between 0 and 1), a restore, two elements at once, an element not
ready yet, routes held from a file.

Order: links before switches, each by the TE rows they carry, fewest first (ties by
element id). A repair costs in proportion to the rows it re-places, so this readies the most
failures per second of background work, and the common failure first: on the meta-24k mix
an RTSW-CTSW link (24,576 of the 26,816 elements) carries ~16 TE rows and is repaired in
milliseconds, a CTSW-ATSW link ~480 rows (~0.6 s), a CTSW ~18,000 (~10 s). Most rows first
would keep every RTSW-CTSW link waiting behind minutes of the others. An element carrying
no TE row still gets its repair and certificate (hashed rows shift when it fails; see
docs/failures.md). `budget` bounds the TE rows the elements computed may carry in all
(work, not seconds: which elements are ready depends only on the inputs), and
`max_elements` the elements computed (the first of that order).

Where: the thread makes the set-up (the base's index and table usage, the failure list,
the compute order) and forks a child process (`process`, the default where os.fork
exists) that computes the elements and sends each repair back down a pipe, compact and
without the base's assignment (kilobytes); the thread takes them in. The child sees the
base as it was at the fork (copy-on-write: nothing is serialised), has an interpreter of
its own, so a report never waits for the interpreter behind a repair under way, and runs
at the thread's lowered priority (controller.service.priority) on the other core. It
pauses, at its repair's checks (every few dozen rows) and between steps, while a byte
shared across the fork says so: the engine sets it as an input arrives (`hold`), the
thread while the engine is busy, and the thread clears it once the engine is quiet, so a
repair or solve has the cores to itself as in the thread. It is killed when the set is
superseded or the engine closes, and dies with the process. With
`process` off the thread computes the elements itself, giving way: it pauses between
elements, and between an element's repair, its plan and its compact form, while the
engine has a round to answer or a solve runs (`busy`), and a repair under way when the
engine gets busy is given up within a few dozen rows (`repair_indexed`'s `stop`) and made
again from the start once it is quiet (at most GIVE_WAY times an element: then it runs
through, so a busy engine slows the set but cannot starve it). Either way the thread takes
a repair into the set only while the engine is quiet, the repairs kept are frozen for the
cyclic collector as they are made (controller.service.frozen), the base is dropped as soon
as it is superseded, and the engine's lock is never held while computing.
"""

from __future__ import annotations

import gc
import logging
import mmap
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import numpy as np

from controller.errors import Superseded
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.failures import ELEMENT_KINDS, SingleFailures, single_failures
from controller.model.health import LinkHealth
from controller.routes.tables import RouteSet
from controller.service.installer import IndexBuild, Planned, plan_push
from controller.service.metrics import PrecomputeMetrics
from controller.service.priority import background
from controller.service.rounds import Target
from controller.service.splices import splices_of
from controller.solver import AssignResult, CertifyOptions, RouteIndex
from controller.solver.sweep_runners import die_with_parent

log = logging.getLogger("fabric_te.engine")
PAUSE = 0.005  # s between looks while the engine is busy
# s a target must stand before its refresh starts: the set-up (the route index, table
# usage, the failure list: ~0.1 s on the meta-24k mix with two all-to-all jobs) would
# otherwise run between the reports of a burst and slow them (docs/profiling.md)
SETTLE = 0.5
GIVE_WAY = 2  # times an element's repair is given up for the engine before it runs through
# the repairs kept are moved out of the cyclic collector's sight every this many (see
# controller.service.frozen): a full collection over them fell inside a report's push
FREEZE_EVERY = 64
MISS_REASONS = ("not single", "not ready", "stale", "held", "off")
WIDEST = 10  # repairs listed by rows moved (Status)
CHILD_PAUSE = 0.0005  # s between the child's looks while it is held
CHILD_NAME = b"fabric-te-prec"  # the child process's name (15 bytes at most)


@dataclass(frozen=True)
class Base:
    """What a set of precomputed repairs answers to."""

    target: Target  # the installed target (compared by identity)
    index: RouteIndex | None  # of target.assignment (None: built by the thread)
    jobs_version: int
    previous: Assignment | None  # the assignment the wanted routes answer to
    installed: RouteSet  # the routes installed (read back) at routes_version
    wanted: RouteSet | None  # the wanted routes (None: not built; no push is planned)
    routes_version: int
    options: CertifyOptions  # the reaction path's certify options it repairs with
    # the index of target.assignment being built beside the worker (a global solve's), when
    # `index` is None: waited for rather than built a second time on another core
    building: IndexBuild | None = None


@dataclass(frozen=True)
class PrecomputedRepair:
    """One element's repair, compact (module docstring)."""

    element: int
    name: str
    kind: str  # ELEMENT_KINDS
    rows: np.ndarray  # rows whose path differs from the base's, sorted
    paths: np.ndarray  # their paths after the repair
    arcs: np.ndarray  # arcs whose load or count differs
    load: np.ndarray  # their load after
    count: np.ndarray  # their count after
    usage: tuple[np.ndarray, np.ndarray] | None  # (nodes, entries) that differ; None: not counted
    result: AssignResult  # the repair's figures (its assignment and unroutable left out)
    planned: Planned | None  # the push, planned against Base.installed (None: plan at use)
    rows_moved: int  # the repair's churn, in rows
    rows_off_element: int  # of them, rows whose path did not cross the element
    jobs_moved: int
    seconds: float  # background time it took
    unroutable: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows

    @property
    def nbytes(self) -> int:
        arrays = [self.rows, self.paths, self.arcs, self.load, self.count, self.unroutable,
                  self.result.churn, self.result.collided_links, self.result.fallback_ecmp]
        if self.usage is not None:
            arrays += list(self.usage)
        plan = 0
        if self.planned is not None and self.planned.plan is not None:
            for _, b in self.planned.plan.batches():
                for t in (b.put, b.drop, b.old):
                    plan += sum(c.nbytes for c in t.columns())
            if self.planned.splices is not None:
                plan += self.planned.splices.nbytes
        return sum(a.nbytes for a in arrays) + plan

    def applied(self, base: RouteIndex) -> tuple[AssignResult, RouteIndex]:
        """The repaired result and its index, from the base's index (as `repair_indexed`
        returned them)."""
        index = self.index_from(base)
        return self.result_of(index), index

    def assignment_from(self, base: RouteIndex) -> Assignment:
        """The repaired assignment: the base's paths with the kept rows' (what a push needs
        first; its index follows, `index_from`)."""
        path = base.assignment.path.copy()
        path[self.rows] = self.paths
        return Assignment(base.assignment.flows, path)

    def index_from(self, base: RouteIndex, assignment: Assignment | None = None) -> RouteIndex:
        """The repaired assignment's index, from the base's (`assignment`: the one
        `assignment_from` made, else made here)."""
        if assignment is None:
            assignment = self.assignment_from(base)
        load, count = base.load.copy(), base.count.copy()
        load[self.arcs] = self.load
        count[self.arcs] = self.count
        usage = None
        if self.usage is not None:
            usage = base.usage.copy()
            usage[self.usage[0]] = self.usage[1]
        return base.moved(assignment.path, self.rows, load, count, usage,
                          assignment=assignment)  # fmt: skip

    def result_of(self, index: RouteIndex) -> AssignResult:
        """The repair's result, of the assignment `index` (from `index_from`) indexes (its
        rows without a path kept at compact time: no pass over the rows here)."""
        return replace(self.result, assignment=index.assignment, unroutable=self.unroutable)


def compact(
    element: int, failures: SingleFailures, base: RouteIndex, res: AssignResult,
    index: RouteIndex, planned: Planned | None, seconds: float,
) -> PrecomputedRepair:  # fmt: skip
    """`res` (repaired from `base`, indexed by `index`) kept as what differs from `base`."""
    rows = np.flatnonzero(index.assignment.path != base.assignment.path)
    arcs = np.flatnonzero((index.load != base.load) | (index.count != base.count))
    usage = None
    if index._usage is not None:  # counted by the repair's table fitting
        nodes = np.flatnonzero(index.usage != base.usage)
        usage = (nodes, index.usage[nodes])
    moved, off, jobs = moved_counts(base, res.churn, dead_arcs(base, failures.links_of(element)))
    kept = replace(res, assignment=base.assignment, unroutable=np.zeros(0, np.int64))
    return PrecomputedRepair(
        element=element, name=failures.names[element],
        kind=ELEMENT_KINDS[int(failures.kind[element])], rows=rows,
        paths=index.assignment.path[rows],
        arcs=arcs, load=index.load[arcs], count=index.count[arcs], usage=usage, result=kept,
        planned=planned, rows_moved=moved, rows_off_element=off, jobs_moved=jobs,
        seconds=seconds, unroutable=res.unroutable,
    )  # fmt: skip


def dead_arcs(index: RouteIndex, links: np.ndarray) -> np.ndarray:
    """Mask over arcs: both arcs of `links`."""
    dead = np.zeros(index.fabric.num_arcs, bool)
    dead[2 * links] = True
    dead[2 * links + 1] = True
    return dead


def moved_counts(index: RouteIndex, churn: np.ndarray, lost: np.ndarray) -> tuple[int, int, int]:
    """A repair's blast radius: (rows moved, of them rows whose path in `index` crossed no
    arc of `lost` (a mask: the arcs that lost capacity), jobs with a row moved)."""
    arcs = index.arcs_of(churn)
    crossed = np.where(arcs >= 0, lost[np.maximum(arcs, 0)], False).any(axis=1)
    jobs = index.assignment.flows.job[churn]
    return int(churn.size), int((~crossed).sum()), int(np.count_nonzero(np.bincount(jobs)))


def lost_arcs(fabric: Fabric, before: LinkHealth, after: LinkHealth) -> np.ndarray:
    """Mask over arcs: those with less capacity `after` than `before`."""
    return after.arc_capacity(fabric) < before.arc_capacity(fabric)


def carried(failures: SingleFailures, index: RouteIndex) -> np.ndarray:
    """Per element, the TE rows its links carry (both directions)."""
    per_link = index.count[0::2] + index.count[1::2]
    sums = np.add.reduceat(per_link[failures.links], failures.start[:-1]) if len(
        failures) else np.zeros(0, np.int64)  # fmt: skip
    return np.where(np.diff(failures.start) > 0, sums, 0)


def priority(failures: SingleFailures, index: RouteIndex) -> np.ndarray:
    """Element ids in compute order: links, then switches, each by the TE rows they carry
    (fewest first), ties by id (module docstring)."""
    ids = np.arange(len(failures))
    return np.lexsort((ids, carried(failures, index), failures.kind != 0))


@dataclass
class Blast:
    """The blast radius of the repairs ready, summed as they are made (no pass over the set):
    rows and jobs moved, the elements whose repair moves rows that did not cross them, and
    the `WIDEST` repairs by rows moved."""

    elements: int = 0
    rows_sum: int = 0
    rows_max: int = 0
    jobs_sum: int = 0
    jobs_max: int = 0
    moving_others: int = 0
    widest: list[tuple[int, int]] = field(default_factory=list)  # (-rows moved, element)

    def add(self, one: PrecomputedRepair) -> None:
        self.elements += 1
        self.rows_sum += one.rows_moved
        self.rows_max = max(self.rows_max, one.rows_moved)
        self.jobs_sum += one.jobs_moved
        self.jobs_max = max(self.jobs_max, one.jobs_moved)
        self.moving_others += one.rows_off_element > 0
        if one.rows_moved:  # a repair that moves nothing is no one's widest
            self.widest.append((-one.rows_moved, one.element))
        if len(self.widest) > 4 * WIDEST:
            self.widest = sorted(self.widest)[:WIDEST]

    def fields(self) -> dict[str, Any]:
        n = max(self.elements, 1)
        return {"rows_moved_max": self.rows_max, "rows_moved_mean": self.rows_sum / n,
                "jobs_moved_max": self.jobs_max, "jobs_moved_mean": self.jobs_sum / n,
                "elements_moving_others": self.moving_others}  # fmt: skip


@dataclass
class _Set:
    base: Base
    index: RouteIndex  # the base's (built by the thread when the base had none)
    generation: int
    failures: SingleFailures
    keys: dict[bytes, int]  # the links an element takes down (that are up) -> element
    by_name: dict[str, int] = field(default_factory=dict)
    ready: dict[int, PrecomputedRepair] = field(default_factory=dict)
    nbytes: int = 0
    done: bool = False
    seconds: float = 0.0  # wall time of the refresh so far (until done)
    blast: Blast = field(default_factory=Blast)
    failed: str = ""  # why the refresh stopped short, if it failed (the on-demand path stays)


@dataclass(frozen=True)
class Lookup:
    """What a report found: the repair to use, or why not (MISS_REASONS)."""

    repair: PrecomputedRepair | None
    reason: str = ""
    index: RouteIndex | None = None  # the base index the repair applies to


class Precomputer:
    """The set of precomputed repairs and the thread that refreshes it."""

    def __init__(
        self,
        fabric: Fabric,
        *,
        repair: Callable[[LinkHealth, RouteIndex, LinkHealth, Callable[[], bool] | None],
                         tuple[AssignResult, RouteIndex]],
        busy: Callable[[], bool],
        metrics: PrecomputeMetrics,
        budget: int | None = None,
        enabled: bool = True,
        max_elements: int | None = None,
        settle: float = SETTLE,
        process: bool | None = None,
    ) -> None:
        self.fabric = fabric
        # the elements computed in a child process (forked: `_forked`) rather than in the
        # thread, which shares the interpreter with the engine; None: where os.fork exists
        self.process = hasattr(os, "fork") if process is None else process
        self._child = 0  # the pid of the child computing the current set (0: none)
        # one byte shared with the child across the fork: while it is 1 the child pauses
        # (`hold`: the engine has a report; the taker thread: the engine is busy)
        self._held = mmap.mmap(-1, 1)
        self._repair = repair  # the engine's on-demand repair, as a function
        self._busy = busy
        self.metrics = metrics
        self.budget = budget
        self.max_elements = max_elements  # at most this many, in compute order (None: all)
        self.enabled = enabled
        self._lock = threading.Condition()
        self._set: _Set | None = None
        self._pending: Base | None = None
        self.generation = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self.refreshes = 0  # full refreshes finished
        self.gave_way = 0  # repairs given up part-way for the engine (made again after)
        self._waited = 0.0  # s the thread waited within the element it computes
        # a refresh of a target starts once it has stood this long (s): see `due_in`
        self.settle = settle
        self._seen: tuple[Target | None, float] = (None, 0.0)  # a target, since when

    # ---- the engine's worker --------------------------------------------------------
    def due_in(self, target: Target | None, jobs_version: int, options: CertifyOptions,
               now: float) -> float:  # fmt: skip
        """Seconds until the refresh of `target` may start (<= 0: now; inf: none is needed,
        or it is off): once the target has stood `settle` seconds, so that the reports of a
        burst are repaired without the refresh's set-up, which cannot give way part-way,
        starting between them. `now`: the caller's clock."""
        if not self.enabled or target is None or self.answers_to(target, jobs_version,
                                                                 options):  # fmt: skip
            return float("inf")
        seen, since = self._seen
        if seen is not target:
            self._seen, since = (target, now), now
        return since + self.settle - now

    def hold(self) -> None:
        """The engine has work (an input came): the child pauses at its next look (within a
        few dozen rows), until the taker thread sees the engine quiet again. Cheap: one
        byte written, no lock (called under the engine's)."""
        self._held[0] = 1

    def answers_to(
        self, target: Target | None, jobs_version: int, options: CertifyOptions
    ) -> bool:
        """Whether the set (being) computed answers to this target, jobs version and
        certify options."""
        with self._lock:
            base = self._pending or (self._set.base if self._set is not None else None)
            return base is not None and base.target is target and (
                base.jobs_version == jobs_version and base.options == options)  # fmt: skip

    def refresh(self, base: Base) -> None:
        """Compute the set for `base` from now, the set of any older base dropped at once."""
        if not self.enabled:
            return
        with self._lock:
            self._supersede()
            self._set, self._pending = None, base
            self._lock.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fabric-te-precompute",
                                                daemon=True)  # fmt: skip
                self._thread.start()
        self._publish()

    def drop(self) -> None:
        """No set answers to what is installed now (routes held, a takeover)."""
        with self._lock:
            if self._set is None and self._pending is None:
                return
            self._supersede()
            self._set, self._pending = None, None
            self._lock.notify_all()
        self._publish()

    def lookup(
        self, target: Target | None, jobs_version: int, options: CertifyOptions,
        health: LinkHealth, held: bool,
    ) -> Lookup:  # fmt: skip
        """The precomputed repair of the change from `target`'s health to `health`, if one
        answers to it now (module docstring); else why not."""
        if not self.enabled:
            return Lookup(None, "off")
        if held:
            return Lookup(None, "held")
        with self._lock:
            s = self._set
        if s is None or target is None or s.base.target is not target or (
                s.base.jobs_version != jobs_version or s.base.options != options):  # fmt: skip
            return Lookup(None, "stale")
        before = s.base.target.health.factor
        changed = np.flatnonzero(health.factor != before)
        if not changed.size or (health.factor[changed] != 0.0).any():
            return Lookup(None, "not single")
        element = s.keys.get(changed.astype(np.int64).tobytes())
        if element is None:
            return Lookup(None, "not single")
        with self._lock:
            found = s.ready.get(element)
        if found is None:
            return Lookup(None, "not ready")
        return Lookup(found, "", s.index)

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._end_child()
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ---- what is ready --------------------------------------------------------------
    def fields(self) -> dict[str, Any]:
        """Generation, elements ready / total, memory and whether the refresh is done."""
        with self._lock:
            s = self._set
            if s is None:
                return {"generation": self.generation, "ready": 0, "total": 0, "bytes": 0,
                        "done": False, "seconds": 0.0, "failed": ""} | Blast().fields()  # fmt: skip
            return {"generation": s.generation, "ready": len(s.ready), "total": len(s.failures),
                    "bytes": s.nbytes, "done": s.done, "seconds": s.seconds,
                    "failed": s.failed} | s.blast.fields()  # fmt: skip

    def widest(self) -> list[PrecomputedRepair]:
        """The `WIDEST` repairs ready that move the most rows, those that move any (ties: by
        element id)."""
        with self._lock:
            s = self._set
            if s is None:
                return []
            return [s.ready[e] for _, e in sorted(s.blast.widest)[:WIDEST]]

    def has(self, name: str) -> bool:
        """Whether the repair of the element named `name` is ready in the set."""
        with self._lock:
            s = self._set
            if s is None:
                return False
            element = s.by_name.get(name)
            return element is not None and element in s.ready

    def ready(self) -> list[PrecomputedRepair]:
        """The repairs ready, by element id."""
        with self._lock:
            s = self._set
            return [] if s is None else [s.ready[k] for k in sorted(s.ready)]

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout: float) -> bool:
        """Wait until `pred(fields())` holds (tests and the benchmark)."""
        deadline = time.monotonic() + timeout
        while not pred(self.fields()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def _publish(self) -> None:
        f = self.fields()
        self.metrics.publish(f)

    # ---- the thread ------------------------------------------------------------------
    def _run(self) -> None:
        background()
        while True:
            with self._lock:
                while self._pending is None and not self._stop:
                    self._lock.wait()
                if self._stop:
                    return
                base, self._pending = self._pending, None
                generation = self.generation
            assert base is not None
            try:
                self._compute(base, generation)
            except Exception as exc:  # noqa: BLE001 - the on-demand path stays
                log.exception("precomputing repairs failed")
                self._failed(generation, f"{type(exc).__name__}: {exc}")

    def _failed(self, generation: int, why: str) -> None:
        """The refresh of `generation` stopped short: Status says why (until the next)."""
        with self._lock:
            if self._set is not None and self._set.generation == generation:
                self._set.failed = why.strip().splitlines()[-1][:500] if why.strip() else why
        self._publish()

    def _current(self, generation: int) -> bool:
        with self._lock:
            return self.generation == generation and not self._stop

    def _quiet(self, generation: int) -> bool:
        """Wait while the engine is busy (a report to answer, a solve: the thread would take
        its share of the interpreter); whether the base is still current."""
        start = time.perf_counter()
        while self._busy() and self._current(generation):
            self._held[0] = 1
            time.sleep(PAUSE)
        self._waited += time.perf_counter() - start
        return self._current(generation)

    def _compute(self, base: Base, generation: int) -> None:
        start = time.perf_counter()
        health = base.target.health
        index = base.index
        # each step of the set-up waits for a quiet engine first, as every element does
        if not self._quiet(generation):
            return
        if index is None and base.building is not None:
            while not base.building.ready.wait(PAUSE):
                if not self._current(generation):
                    return
            index = base.building.index
        if index is None:
            index = RouteIndex.build(self.fabric, base.target.assignment)
            if not self._quiet(generation):
                return
        index.usage  # noqa: B018 - counted here, once, for every repair's table fitting
        if not self._quiet(generation):
            return
        failures = single_failures(self.fabric, health)
        up = health.factor > 0.0
        keys: dict[bytes, int] = {}
        for i in range(len(failures)):
            links = failures.links_of(i)
            keys.setdefault(links[up[links]].astype(np.int64).tobytes(), i)
        by_name = {name: i for i, name in enumerate(failures.names)}
        s = _Set(base, index, generation, failures, keys, by_name)
        with self._lock:
            if self.generation != generation:
                return
            self._set = s
        self._publish()
        todo = self._todo(failures, index)
        finished = (self._forked(s, todo, start) if self.process
                    else self._here(s, todo, start))  # fmt: skip
        if not finished:
            return
        gc.freeze()
        with self._lock:
            s.done = True
            s.seconds = time.perf_counter() - start
        self.refreshes += 1
        self.metrics.refreshed(s.seconds)
        self._publish()
        log.info("precomputed repairs ready", extra={
            "generation": generation, "elements": len(s.ready), "of": len(failures),
            "megabytes": round(s.nbytes / 1e6, 3), "seconds": round(s.seconds, 3)})  # fmt: skip

    def _todo(self, failures: SingleFailures, index: RouteIndex) -> list[int]:
        """The elements to compute, in order: `priority`, cut by `max_elements` and by
        `budget` (TE rows carried, summed in that order)."""
        order = priority(failures, index)
        if self.max_elements is not None:
            order = order[: self.max_elements]
        if self.budget is not None:
            summed = np.cumsum(carried(failures, index)[order], dtype=np.int64)
            order = order[: int(np.searchsorted(summed, self.budget, side="right"))]
        return order.tolist()

    def _keep(self, s: _Set, one: PrecomputedRepair, start: float) -> bool:
        """Add `one` to the set; False when the set is no longer current."""
        with self._lock:
            if self.generation != s.generation:
                return False
            s.ready[one.element] = one
            s.nbytes += one.nbytes
            s.blast.add(one)
            s.seconds = time.perf_counter() - start
        if len(s.ready) % FREEZE_EVERY == 0:
            gc.freeze()
        self.metrics.publish(self.fields())
        return True

    # ---- in this thread ----------------------------------------------------------------
    def _here(self, s: _Set, todo: list[int], start: float) -> bool:
        """Compute `todo` in this thread, giving way to the engine (module docstring);
        whether the set is complete."""
        generation = s.generation
        one: PrecomputedRepair | None = None
        for i in todo:
            # given up when the engine gets busy, made again once it is quiet; the last
            # try runs through, so an element is made however busy the engine stays
            for attempt in range(GIVE_WAY + 1):
                if not self._quiet(generation):
                    return False
                t0, self._waited = time.perf_counter(), 0.0
                stop = self._busy if attempt < GIVE_WAY else None
                try:
                    one = self._one(s, i, stop, lambda: self._quiet(generation))
                    break
                except Superseded:
                    self.gave_way += 1
            if one is None:
                return False
            one = replace(one, seconds=time.perf_counter() - t0 - self._waited)
            if not self._keep(s, one, start):
                return False
        return True

    def _one(
        self, s: _Set, i: int, stop: Callable[[], bool] | None, quiet: Callable[[], bool],
    ) -> PrecomputedRepair | None:  # fmt: skip
        """Element `i`'s repair, its push planned and kept compact (None: `quiet` said the
        set is no longer current). Raises Superseded when `stop` says so."""
        base, t0 = s.base, time.perf_counter()
        health = base.target.health
        res, repaired = self._repair(s.failures.health_after(health, i), s.index, health, stop)
        planned = None
        wanted = base.wanted
        if wanted is not None:
            if not quiet():  # a report came meanwhile: it goes first
                return None
            made = plan_push(self.fabric, res.assignment, base.previous, base.installed,
                             lambda: wanted)  # fmt: skip
            splices = None if made.plan is None else splices_of(made.plan, wanted,
                                                                base.installed)  # fmt: skip
            planned = Planned(made.plan, None, base.previous, base.routes_version, splices)
        if not quiet():
            return None
        return compact(i, s.failures, s.index, res, repaired, planned, time.perf_counter() - t0)

    # ---- in a process of its own -----------------------------------------------------
    def _forked(self, s: _Set, todo: list[int], start: float) -> bool:
        """Compute `todo` in a child forked from this process (it sees the base as it is
        now, copy-on-write, and shares no interpreter with the engine), taking each repair
        from it as it is made; whether the set is complete. The child is killed when the
        set is superseded or the engine closes (`_kill`), or if this process dies."""
        generation = s.generation
        if not self._quiet(generation):  # the fork copies the page tables: not in a report
            return False
        read, write = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory for the page tables, a process limit
            os.close(read)
            os.close(write)
            log.warning("precomputing in the engine's process: cannot fork: %s", exc)
            return self._here(s, todo, start)
        if pid == 0:  # the child: never returns
            os.close(read)
            _child(self, s, todo, write, parent)
        os.close(write)
        with self._lock:  # from here on a refresh, drop or close kills it
            self._child = pid
        try:
            if not self._current(generation):  # superseded while it was forked
                os.close(read)
                return False
            return self._take(s, Connection(read, writable=False), start)
        finally:
            self._kill(pid)
            os.waitpid(pid, 0)

    def _take(self, s: _Set, conn: Connection, start: float) -> bool:
        """Take the child's repairs from `conn` until it is done; False when the set was
        superseded or the child failed (the on-demand path stays)."""
        generation = s.generation
        with conn:
            while True:
                if not self._quiet(generation):  # the child is held; its repairs wait
                    return False
                self._held[0] = 0  # quiet: the child goes on
                try:
                    if not conn.poll(PAUSE):  # look at the engine again every PAUSE
                        continue
                    kind, payload = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):  # killed (superseded, closing) or died
                    if self._current(generation):
                        log.error("the precomputing process ended without its set")
                        self._failed(generation, "its process ended without its set")
                    return False
                if kind == "done":
                    return True
                if kind == "error":
                    log.error("precomputing repairs failed in its process:\n%s", payload)
                    self._failed(generation, str(payload))
                    return False
                one = _attached(payload, s.base)
                if not self._keep(s, one, start):
                    return False

    def _kill(self, pid: int) -> None:
        """Kill the child `pid` (not reaped yet: its pid is not reused)."""
        with self._lock:
            if self._child == pid:
                self._child = 0
        os.kill(pid, signal.SIGKILL)

    def _supersede(self) -> None:
        """Under the lock: the set computed now is no longer wanted; its child is killed
        (its taker sees the pipe end, then the generation changed)."""
        self.generation += 1
        self._end_child()

    def _end_child(self) -> None:
        """Under the lock: kill the child computing the set, if one runs (its taker reaps
        it)."""
        if self._child:
            os.kill(self._child, signal.SIGKILL)
            self._child = 0


def _detached(one: PrecomputedRepair) -> PrecomputedRepair:
    """`one` without what it shares with the base, which the other side holds already: the
    base's assignment (its result's, its plan's previous) and the wanted routes its
    splices are of. What the child sends: kilobytes, where the shared objects are ~30 MB
    and ~40 MB on the meta-24k mix, and each element sent with them would be a copy."""
    planned = one.planned
    if planned is not None:
        splices = planned.splices
        if splices is not None:
            splices = replace(splices, wanted=None)  # type: ignore[arg-type]
        planned = replace(planned, previous=None, splices=splices)
    result = replace(one.result, assignment=None)  # type: ignore[arg-type]
    return replace(one, result=result, planned=planned)


def _attached(one: PrecomputedRepair, base: Base) -> PrecomputedRepair:
    """`_detached` undone with this side's base (the very objects: the splices' wanted
    routes are compared by identity at use)."""
    planned = one.planned
    if planned is not None:
        splices = planned.splices
        if splices is not None:
            assert base.wanted is not None
            splices = replace(splices, wanted=base.wanted)
        planned = replace(planned, previous=base.previous, splices=splices)
    return replace(one, result=replace(one.result, assignment=base.target.assignment),
                   planned=planned)  # fmt: skip


def _child(pc: Precomputer, s: _Set, todo: list[int], fd: int, parent: int) -> NoReturn:
    """The forked child: compute `todo` and send each repair, then "done", down `fd`;
    exits without returning to the caller's stack (no atexit, no finalizers: the parent's
    threads, sockets and files are not the child's). Its priority is the forking thread's
    (`controller.service.priority.background`): the engine's reports go first on the
    cores."""
    code = 1
    try:
        die_with_parent(parent, CHILD_NAME)  # a set nobody takes is not computed on
        gc.freeze()  # the collector never walks (so never copies) what the parent holds
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        held = pc._held

        def paused() -> bool:  # the repair's `stop` and the steps' `quiet`: never stops
            while held[0]:
                time.sleep(CHILD_PAUSE)
            return False

        with Connection(fd, readable=False) as conn:
            try:
                for i in todo:
                    one = pc._one(s, i, paused, lambda: not paused())
                    assert one is not None
                    conn.send_bytes(pickle.dumps(("one", _detached(one)), protocol=5))
                conn.send_bytes(pickle.dumps(("done", None)))
                code = 0
            except BrokenPipeError:
                code = 0  # the parent stopped listening: the set is superseded
            except BaseException:  # noqa: BLE001 - reported to the parent, then exit
                conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))
    finally:
        os._exit(code)


