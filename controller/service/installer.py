"""The routes the engine wants and the routes the switches hold: push, read-back, periodic
sweep, and the RouteIndex a repair starts from.

One notion each:
- `target`: the assignment the switches are told to hold (with the jobs and link health it
  answers to); a repair starts from it and its RouteIndex.
- wanted routes: the routes of the assignment last pushed, built when first asked for, and
  scoped to the racks whose flows changed when a push moves few of them.
- installed routes: what was last read back from the driver (a `RouteLog`, whose deltas
  the watchers stream); the engine reports these, never what it meant to install.

Every push plans against what is installed, pushes (make-before-break, all or nothing per
switch batch), reads back what it touched and repairs it (`controller.drivers.reconcile`);
`sweep_step` reconciles a few more switches of a periodic read-back at a time, so a link
report never waits for a whole fabric to be read. `SwitchMarks` keeps which switches differ
from one read to the next. The engine serialises calls; the shared condition guards what
the API threads read (installed routes, marks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge

from controller.drivers.interface import Driver
from controller.drivers.push import push, read_back
from controller.drivers.reconcile import Reconciler, ReconcileResult
from controller.errors import DriverError, Fenced
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.routes.entries import build_routes
from controller.routes.plan import Plan, plan_update
from controller.routes.tables import Entry, RouteSet, Table
from controller.service.metrics import Metrics, TierCounts
from controller.service.rounds import Target
from controller.service.splices import Splices, apply_splices
from controller.service.state import RouteLog
from controller.solver import RouteIndex

log = logging.getLogger("fabric_te.engine")
NAMED_REPAIRS = 10  # switches a reconcile names one by one; the rest in one line
SWEEP_CHUNK = 64  # switches per step of a periodic reconcile at most (inputs are taken
# between steps, so a link report waits for one step, never for a whole fabric)
SWEEP_STEP = 0.02  # s a step may take, at the driver's last pace (a switch of the linux
# driver is slow to read: a fixed chunk of 64 made a link report wait behind it)


@dataclass(frozen=True)
class RouteEvent:
    """What a watcher receives: a snapshot, a sync marker, or a delta."""

    kind: str  # "snapshot" | "sync" | "delta" | "behind" (the watcher is dropped)
    version: int
    entries: Iterable[Entry] = ()  # snapshot: all; delta: added (listed by the watcher)
    removed: Iterable[Entry] = ()
    epoch: str = ""  # the routes epoch of `version` (snapshot, sync, behind)


@dataclass
class IndexBuild:
    """A RouteIndex of `assignment` built in a thread beside the worker (a global solve's
    sets `assignment` once its result is there); `index` stays None when the build failed
    or was not wanted (the next repair builds one)."""

    assignment: Assignment | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    index: RouteIndex | None = None


@dataclass
class _Wanted:
    """The assignment last pushed and its routes (None until first asked for)."""

    assignment: Assignment | None = None
    routes: RouteSet | None = None


class Installer:
    """Wanted and installed routes of one fabric, and the driver behind them."""

    def __init__(
        self,
        fabric: Fabric,
        driver: Driver,
        push_driver: Driver,
        reconciler: Reconciler,
        metrics: Metrics,
        cond: threading.Condition,
        *,
        push_timeout: float,
        is_leader: Callable[[], bool],
        stopped: Callable[[], bool],
        leaders: Callable[[], Assignment | None],
        table_budget: int | None = None,
    ) -> None:
        self.fabric = fabric
        self.driver = driver  # reads (a follower reads too)
        self.push_driver = push_driver  # pushes, checked against the election
        self.reconciler = reconciler
        self.metrics = metrics
        self.push_timeout = push_timeout
        self._cond = cond
        self._is_leader = is_leader
        self._stopped = stopped
        self._leaders = leaders  # the assignment the leader stored last
        self.marks = SwitchMarks(metrics.registry)
        self.routes = RouteLog(RouteSet())
        self.target: Target | None = None
        # the assignment last installed, adopted or followed: the next solve's previous
        self.previous: Assignment | None = None
        self._wanted = _Wanted()
        self.push_ok = True
        self.ops_pushed = 0
        self._index: RouteIndex | None = None  # of the target's assignment
        self._building: IndexBuild | None = None  # one being built beside
        self._sweep: list[str] = []  # switches a periodic reconcile has still to check
        self._sweep_ok = True
        self._sweep_pace: float | None = None  # s per switch of the last sweep step
        # installed entries per switch, by tier, against each switch's budget
        self._tiers = TierCounts(fabric, fabric.table_budget(table_budget))
        self.metrics.set_tier_tables(self._tiers.totals())  # nothing installed yet

    # ---- wanted routes ---------------------------------------------------------------
    @property
    def installed(self) -> RouteSet:
        with self._cond:
            return self.routes.installed

    @property
    def pushed(self) -> Assignment | None:
        """The assignment the wanted routes answer to."""
        return self._wanted.assignment

    def wanted(self) -> RouteSet | None:
        """The routes of the assignment last pushed (None before the first)."""
        w = self._wanted
        if w.routes is None and w.assignment is not None:
            w.routes = build_routes(self.fabric, w.assignment)
        return w.routes

    def wanted_built(self) -> RouteSet | None:
        """The wanted routes if built already (never builds them)."""
        return self._wanted.routes

    def want(self, assignment: Assignment | None, target: Target | None = None) -> None:
        """Want `assignment`'s routes (built now; None: nothing) with `target` told to hold,
        as at a start or takeover that adopts a stored assignment, or a follower."""
        routes = None if assignment is None else build_routes(self.fabric, assignment)
        self._wanted = _Wanted(assignment, routes)
        self.target = target

    def forget(self, pushed: bool) -> None:
        """Nothing is known to be installed (a takeover solves or adopts afresh); with
        `pushed`, neither which assignment the wanted routes answer to (the next push
        plans every rack), though they are still wanted until then."""
        self.target, self._index = None, None
        if pushed:
            self._wanted.assignment = None

    # ---- the RouteIndex a repair starts from ---------------------------------------
    def install(self, target: Target, index: RouteIndex) -> None:
        """`target` (with its index) is what the switches are told to hold from now; an
        index drifted far from its base is rebuilt beside, off the reaction path."""
        self.target, self._index = target, index
        if index.moved_rows > max(4096, len(target.assignment.flows) // 32):
            self._rebuild_later(index)

    def index_of(self, assignment: Assignment) -> RouteIndex:
        """The RouteIndex of `assignment`: the one kept, one built beside (waited for if it
        is the only one), or built now (after a start or takeover)."""
        kept = self._index if self._index is not None and (
            self._index.assignment is assignment) else None  # fmt: skip
        pending = self._building
        if pending is not None and pending.assignment is assignment:
            if kept is None or pending.ready.is_set():
                pending.ready.wait()
                self._building = None
                if pending.index is not None:
                    kept = self._index = pending.index
        if kept is None:
            kept = self._index = RouteIndex.build(self.fabric, assignment)
        return kept

    @property
    def index(self) -> RouteIndex | None:
        """The RouteIndex kept for the target's assignment (a repair leaves its own)."""
        return self._index

    def keep_index(self, index: RouteIndex) -> None:
        self._index = index

    def index_later(self, build: IndexBuild) -> None:
        """`index_of` takes `build.assignment`'s index from `build` once it is ready."""
        self._building = build

    @property
    def building(self) -> IndexBuild | None:
        """The index build under way beside the worker, if any."""
        return self._building

    def _rebuild_later(self, drifted: RouteIndex) -> None:
        build = IndexBuild(drifted.assignment)

        def work() -> None:
            try:
                build.index = drifted.rebuilt()
            except Exception:  # noqa: BLE001 - the next repair builds it
                log.exception("route index build failed")
            build.ready.set()

        threading.Thread(target=work, name="fabric-te-index", daemon=True).start()
        self.index_later(build)

    # ---- push ----------------------------------------------------------------------
    def push(self, assignment: Assignment) -> None:
        """Plan against what is installed and push. Only the racks whose flows changed
        (against the assignment pushed last) are planned, built and read back (see
        `plan_push`); the wanted routes of the others are kept as they were."""
        planned = plan_push(self.fabric, assignment, self._wanted.assignment, self.installed,
                            self.wanted)  # fmt: skip
        if planned.plan is None:
            self._wanted.assignment = assignment  # nothing moved: nothing to plan or push,
            if self.marks.differing:  # but the switches that differ are repaired
                self.push_ok = self.reconcile(set(self.marks.differing)).in_sync
            return
        assert planned.wanted is not None
        self._wanted = _Wanted(assignment, planned.wanted)
        self._send(planned.plan)

    def push_planned(self, planned: Planned, make: Callable[[], Assignment]) -> bool:
        """Push an assignment by a plan made earlier (`plan_push`, its `wanted` left out)
        against the routes installed at `planned.routes_version` with `planned.previous`
        pushed; its wanted routes are the wanted ones with the plan's batches applied
        (spliced by the positions found ahead when they answer to these wanted routes).
        `make()` makes the assignment, after the batches are sent (the push waits for no
        copy of its paths). False, and nothing done, unless the installed routes, the
        assignment pushed and the switches' agreement with it are as they were then (the
        caller plans afresh)."""
        with self._cond:
            version = self.routes.version
        wanted = self.wanted() if self._wanted.assignment is not None else None
        if (
            wanted is None or planned.previous is not self._wanted.assignment
            or planned.routes_version != version or self.marks.differing
        ):  # fmt: skip
            return False
        if planned.plan is None:
            self._wanted.assignment = make()
            return True
        # every switch agrees with the wanted routes (no mark): our entries installed are
        # the wanted ones, so the batches, planned against the installed, take the wanted
        # tables to the new assignment's
        sp = planned.splices
        if sp is not None and sp.wanted is wanted:
            spliced = apply_splices(sp, planned.plan)
            changed, known = spliced.tables, spliced.known
        else:
            changed, known = {}, {}
            for _, batch in planned.plan.batches():
                sw = batch.switch
                table = changed[sw] if sw in changed else wanted.table(sw)
                changed[sw] = table.updated(batch.put, batch.drop)
        tables = dict(wanted.tables)
        for sw, table in changed.items():
            if table:
                tables[sw] = table
            else:
                tables.pop(sw, None)
        now = _Wanted(None, RouteSet.of_tables(tables))
        self._wanted = now
        try:
            self._send(planned.plan, known)
        finally:  # what the wanted routes answer to, whatever the push achieved
            now.assignment = make()
        return True

    @property
    def routes_version(self) -> int:
        """The version of the installed routes (bumped by every change read back)."""
        with self._cond:
            return self.routes.version

    def _send(
        self, plan: Plan, known: dict[str, tuple[Table, Table, Table]] | None = None
    ) -> None:
        """Push `plan`, read back what it touched (and any switch marked before) and
        repair it (`known`: see `reconcile`)."""
        planned, start = plan.switches(), time.perf_counter()
        with self.metrics.push_seconds.time():
            report = push(self.push_driver, plan, timeout=self.push_timeout)
        self._count_ops(report.ops_applied)
        seconds = round(time.perf_counter() - start, 6)
        log.info("pushed", extra={"operations": report.ops_applied, "switches": len(planned),
                                  "ok": report.ok, "seconds": seconds})  # fmt: skip
        # read back what the push touched (and any switch marked before) and repair it
        touched = set(planned) | set(self.marks.differing)
        prior: dict[str, Table | None] = {
            sw: report.installed.table(sw) for sw in planned if sw not in report.uncertain
        }
        prior.update(dict.fromkeys(report.unreadable))
        result = self.reconcile(touched, prior, known=known)
        if not report.fenced:  # a deposed replica's refusal says nothing of the switches
            self.push_ok = report.ok or result.in_sync
        if not report.ok:
            raise (Fenced if report.fenced else DriverError)(f"push stopped: {report.summary()}")

    def _count_ops(self, ops: int) -> None:
        self.ops_pushed += ops
        self.metrics.ops_pushed.inc(ops)

    # ---- read back -----------------------------------------------------------------
    def reconcile(
        self,
        switches: set[str] | None,
        prior: dict[str, Table | None] | None = None,
        count: bool = True,
        known: dict[str, tuple[Table, Table, Table]] | None = None,
    ) -> ReconcileResult:
        """Read back `switches` (None: all), repair them towards the wanted routes (the
        leader only), and adopt what was read; the switches that cannot be read are
        reported holding nothing. `count`: one reconcile in the counters (a periodic
        sweep's steps count as one, when it ends). `known`: switch -> (table, added,
        removed): a switch read back as that table logs that delta (found when the push
        was planned), unmatched."""
        leader = self._is_leader()
        if not leader:  # a follower wants what the leader stored last
            stored = self._leaders()
            if stored is not None and stored is not self.previous:
                self.previous = stored
                self.want(stored, self.target)
        wanted = self.wanted()
        if wanted is None:  # nothing wanted yet: read only, never repair
            checked = self.driver.switches() if switches is None else sorted(switches)
            installed, unreadable = read_back(self.driver, checked)
            result = ReconcileResult(installed, tuple(sorted(checked)), tuple(unreadable),
                                     why=unreadable)  # fmt: skip
        else:
            stop = lambda: self._stopped() or not self._is_leader()  # noqa: E731
            result = self.reconciler.run(wanted, switches, stop=stop, repair=leader, prior=prior)
        self._count_ops(result.ops)
        tables = dict(self.installed.tables)  # only the switches read change
        for sw in result.checked:
            table = result.installed.table(sw)
            if table:
                tables[sw] = table
            else:
                tables.pop(sw, None)
        installed = RouteSet.of_tables(tables)
        deltas = {
            sw: (added, removed) for sw, (after, added, removed) in (known or {}).items()
            if (tables[sw].same(after) if sw in tables else not after)
        }  # fmt: skip
        with self._cond:
            self.marks.update(result, loud=leader, count=count)
            if switches is None and result.in_sync:
                self.push_ok = True
            if self.routes.record(installed, list(result.checked), deltas) is not None:
                self._cond.notify_all()
            self._tiers.update(installed, result.checked)
        self.metrics.set_tier_tables(self._tiers.totals())
        return result

    def sweep_step(self) -> None:
        """Reconcile the next switches of a periodic sweep (started when none is under way):
        as many as the driver read in SWEEP_STEP s last time (one at first, at most
        SWEEP_CHUNK). New inputs are taken between steps."""
        try:
            if not self._sweep:
                self._sweep, self._sweep_ok = list(self.driver.switches()), True
            pace = self._sweep_pace
            n = 1 if pace is None else max(1, min(SWEEP_CHUNK, int(SWEEP_STEP / max(pace, 1e-9))))
            chunk, self._sweep = self._sweep[:n], self._sweep[n:]
            start = time.perf_counter()
            self._sweep_ok &= self.reconcile(set(chunk), count=False).in_sync
            self._sweep_pace = (time.perf_counter() - start) / max(len(chunk), 1)
        except Exception:  # noqa: BLE001 - the loop must survive anything
            if self._stopped():  # closing: the driver may be closed under the sweep
                log.info("periodic reconcile cut off by shutdown")
            else:
                log.exception("periodic reconcile failed")
            self._sweep, self._sweep_ok = [], False
        if not self._sweep:
            with self._cond:
                self.marks.count_one()  # the whole sweep, one reconcile
                if self._sweep_ok:
                    self.push_ok = True

    @property
    def sweeping(self) -> list[str]:
        """Switches the periodic sweep under way has still to read."""
        return self._sweep

    def watch(
        self, since: int, alive: Callable[[], bool] | None, max_lag: int, epoch: str = ""
    ) -> Iterator[RouteEvent]:
        """See `Engine.watch`."""
        cond, log_ = self._cond, self.routes
        mine = log_.epoch
        with cond:
            version = log_.version
            backlog = log_.after(since, epoch) if since else None
            if backlog is None:
                first = [RouteEvent("snapshot", version, log_.installed, epoch=mine)]
            else:
                first = [RouteEvent("delta", d.version, d.added, d.removed) for d in backlog]
        yield from first
        yield RouteEvent("sync", version, epoch=mine)
        seen = version
        while True:
            with cond:
                while log_.version == seen and not self._stopped():
                    cond.wait(0.2)
                    if alive is not None and not alive():
                        return
                if self._stopped():
                    return
                pending = log_.after(seen, mine)
                lag = log_.version - seen
                behind = bool(max_lag) and (pending is None or lag > max_lag)
                if not behind:
                    seen = log_.version
                    if pending is None:  # fell behind the retained deltas: start afresh
                        fresh = log_.installed
            if behind:
                yield RouteEvent("behind", seen, epoch=mine)
                return
            if pending is None:
                yield RouteEvent("snapshot", seen, fresh, epoch=mine)
                yield RouteEvent("sync", seen, epoch=mine)
                continue
            for d in pending:
                yield RouteEvent("delta", d.version, d.added, d.removed)


@dataclass(frozen=True)
class Planned:
    """A push planned against the routes installed at `routes_version` (see `plan_push`):
    `plan` None when nothing moved; `wanted` the wanted routes after it (None when left
    out, as a precomputed repair leaves it: `Installer.push_planned` derives them)."""

    plan: Plan | None
    wanted: RouteSet | None = None
    previous: Assignment | None = None  # the assignment pushed when it was planned
    routes_version: int = 0
    splices: Splices | None = None  # the plan as row positions (controller.service.splices)


def plan_push(
    fabric: Fabric,
    assignment: Assignment,
    previous: Assignment | None,
    installed: RouteSet,
    wanted: Callable[[], RouteSet | None],
) -> Planned:
    """The plan taking `installed` to `assignment`'s routes, and the wanted routes after
    it. Only the racks whose flows changed against `previous` (the assignment the
    `wanted` routes answer to) are planned and built (see `_scope`), when few changed."""
    racks = None  # None: plan every rack (most changed: scoping would not pay)
    if previous is not None and (
        len(previous.flows) == len(assignment.flows)  # a repair (same rows): cheap
        or not _most_racks_resized(fabric, previous, assignment)
    ):
        racks = changed_racks(fabric, previous, assignment)
    scope = None
    most = racks is not None and racks.size * 2 > fabric.num_rtsws
    if racks is not None and not most:
        old = wanted()
        if old is not None:
            scope = _scope(fabric, installed, assignment, racks)
            if scope is not None and not scope[1].size and not scope[0]:
                return Planned(None, old, previous)
    target = assignment
    if scope is not None:
        installed, keep, switches, in_scope = scope
        target = Assignment(assignment.flows.take(keep), assignment.path[keep])
    plan, routes = plan_update(fabric, installed, target)
    if scope is not None:
        old = wanted()
        assert old is not None
        routes = _merge_wanted(old, routes, switches, in_scope)
    return Planned(plan, routes, previous)


def _merge_wanted(
    old: RouteSet, scoped: RouteSet, switches: list[str],
    in_scope: Callable[[np.ndarray], np.ndarray],
) -> RouteSet:  # fmt: skip
    """The wanted routes `old` with the scoped switches' in-scope entries replaced."""
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


def _scope(
    fabric: Fabric, installed: RouteSet, assignment: Assignment, racks: np.ndarray
) -> tuple[RouteSet, np.ndarray, list[str], Callable[[np.ndarray], np.ndarray]] | None:
    """(installed entries, flow indices, switches, in_port test) of `racks`: the racks
    whose flows' routes changed.

    With one member per link, TE entries live only at the source RTSW (keyed on a NIC's
    access link) and the source CTSW (keyed on the rack's uplink), so every entry
    belongs to the rack its in_port leads from: planning those racks' flows against
    those racks' entries is exact. Other fabrics get the full plan (None)."""
    f = fabric
    if f.rack_links != 1 or f.agg_links != 1:
        return None
    flows = assignment.flows
    keep = np.flatnonzero(np.isin(f.rtsw_of_nic(flows.src_nic), racks))
    rack_base, per_pod = f.rack_base, f.ctsws_per_pod

    def in_scope(port: np.ndarray) -> np.ndarray:
        """Whether each in_port leads from one of the racks."""
        access = port < rack_base
        rack = np.where(access, 0, (port - rack_base) // per_pod)
        if access.any():
            rack[access] = f.rtsw_of_nic(port[access])
        return np.isin(rack, racks)

    rack_list = sorted(set(racks.tolist()))
    pods = sorted({int(f.pod_of_rtsw(r)) for r in rack_list})
    switches = [f.rtsw_name(r) for r in rack_list] + [
        f.ctsw_name(p * f.ctsws_per_pod + c) for p in pods for c in range(f.ctsws_per_pod)
    ]
    tables = {}
    for sw in switches:
        table = installed.table(sw)
        part = table.take(in_scope(table.in_port))
        if part:
            tables[sw] = part
    return RouteSet(tables), keep, switches, in_scope


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
        np.bincount(fabric.rtsw_of_nic(a.flows.src_nic), minlength=fabric.num_rtsws)
        for a in (old, new)
    ]
    return int(np.count_nonzero(counts[0] != counts[1])) * 2 > fabric.num_rtsws


def _racks_of(fabric: Fabric, nics: np.ndarray) -> np.ndarray:
    """The racks of `nics`, sorted, each once (counted, not sorted: linear in the NICs)."""
    racks = fabric.rtsw_of_nic(nics)
    return np.flatnonzero(np.bincount(racks, minlength=fabric.num_rtsws)).astype(np.int64)


class SwitchMarks:
    """Switches that differ from the wanted routes or cannot be read, kept until they agree;
    counted and logged on every change, with Prometheus series on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.differing: dict[str, str] = {}  # switch -> why
        self._missing_by: dict[str, int] = {}
        self.retry_rounds = 0  # reconciles that needed more than one round
        self.reconciles = 0
        self.ops = 0
        r = registry
        self._differing = Gauge(
            "fabric_te_switches_differing",
            "Switches whose table differs from the wanted routes or cannot be read",
            registry=r,
        )
        self._missing = Gauge(
            "fabric_te_entries_missing", "Wanted entries the switches do not hold", registry=r
        )
        self._rounds = Counter(
            "fabric_te_reconcile_retry_rounds",
            "Reconciles (after a push, or periodic) that needed a retry",
            registry=r,
        )
        self._runs = Counter("fabric_te_reconciles", "Reconciles run", registry=r)
        self._ops = Counter(
            "fabric_te_reconcile_operations",
            "Entry operations pushed to repair drift",
            registry=r,
        )

    def count_one(self) -> None:
        """Count one reconcile (a periodic sweep, when its last step ends)."""
        self.reconciles += 1
        self._runs.inc()

    def update(self, result: ReconcileResult, loud: bool = True, count: bool = True) -> None:
        """Adopt what one reconcile saw on the switches it checked; changes are logged as
        warnings when `loud` (the leader), else at debug level (a follower, which sees the
        leader's pushes land a moment after the assignment is stored)."""
        if count:
            self.count_one()
        if result.rounds > 1:
            self.retry_rounds += 1
            self._rounds.inc()
        self.ops += result.ops
        self._ops.inc(result.ops)
        level_ok, level_bad = (logging.INFO, logging.WARNING) if loud else (logging.DEBUG,) * 2
        now: dict[str, str] = {s: f"unreadable: {result.why[s]}" if s in result.why
                               else "unreadable" for s in result.unreadable}  # fmt: skip
        now.update({s: f"{n} entries differ" + (
            f" (its last repair failed: {result.refused[s]})" if s in result.refused else "")
            for s, n in result.differing.items()})  # fmt: skip
        repaired = sorted(result.repaired.items())
        for switch, ops in repaired[:NAMED_REPAIRS]:
            log.log(level_bad, "switch %s did not hold the wanted routes: %d entry "
                    "operations repaired it", switch, ops)  # fmt: skip
        if len(repaired) > NAMED_REPAIRS:  # a switch restarted empty, or a fresh fabric
            rest = repaired[NAMED_REPAIRS:]
            log.log(level_bad, "%d more switches did not hold the wanted routes: %d entry "
                    "operations repaired them (%s, ...)", len(rest),
                    sum(ops for _, ops in rest), ", ".join(s for s, _ in rest[:3]))  # fmt: skip
        for switch in result.checked:
            before, after = self.differing.get(switch), now.get(switch)
            if before != after:
                if after is None:
                    log.log(level_ok, "switch %s agrees with the wanted routes again", switch)
                    del self.differing[switch]
                else:
                    log.log(level_bad, "switch %s differs: %s", switch, after)
                    self.differing[switch] = after
            self._missing_by.pop(switch, None)
        self._missing_by.update(result.missing)
        self._differing.set(len(self.differing))
        self._missing.set(self.missing)

    @property
    def missing(self) -> int:
        """Wanted entries absent or wrong on the switches, as last read."""
        return sum(self._missing_by.values())

    @property
    def ok(self) -> bool:
        return not self.differing

    def fields(self) -> dict[str, Any]:
        """Status's fields of the marks (plain values)."""
        return {
            "switches_differing": len(self.differing),
            "differing": [f"{s}: {why}" for s, why in sorted(self.differing.items())],
            "entries_missing": self.missing,
            "reconciles": self.reconciles,
            "retry_rounds": self.retry_rounds,
        }
