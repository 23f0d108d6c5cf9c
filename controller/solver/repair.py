"""Incremental repair after a health change: re-place only the flows that were hit.

A flow is hit when an arc of its current path is now down or has less capacity than before
(`old_health`, or the fabric's built capacity when not given), or when it had no path and
might have one now. Hit flows are taken off, then re-placed one by one (descending demand,
ties by index) onto the candidate path with the smallest resulting bottleneck given every
other flow's load, respecting the shared-entry rule of controller.assign. Every other flow
keeps its path exactly.

Cost: a `RouteIndex` of the assignment (its rows per arc and its load per arc) is built once,
in O(rows); with it a repair costs in proportion to the rows the change hits, and returns
the index of the repaired assignment, derived from the old one by the rows it moved. A
caller that keeps the index (the service's engine) repairs in milliseconds at 600K rows;
`repair` without one builds it first.

Bounded work, never the clock: a repair re-places at most REPAIR_ROWS of the rows it hit
(the largest first; the others are withdrawn to the ECMP defaults, so no entry is left on a
dead link) and retries at most RETRY_ROWS of the rows that had no path (those near a link
whose capacity came back first; never rows of a job the solve left to the fabric's
hashing whole, `hashed_jobs`), and fitting the tables takes at most FIT_ROUNDS rounds of
one row per full switch before every moved row left over a full switch goes to ECMP at
once. So a repair costs in proportion to the rows on the failed element, up to those
bounds, whatever else rides ECMP (an all-to-all job leaves hundreds of thousands of rows
there by the table budget), and its routes depend only on its inputs.

`reoptimise` is the bounded follow-up: warm from an indexed assignment, it moves rows off
the most utilised switch-to-switch arc while that strictly helps, up to a number of tries
(work, not seconds: the result never depends on the clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

import numpy as np

from controller.errors import Superseded
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import ACCESS, AGG, RACK, Fabric
from controller.model.flows import FlowSet, distinct_below
from controller.model.health import LinkHealth
from controller.model.paths import (
    CROSS_POD,
    MAX_HOPS,
    SAME_RACK,
    best_bottleneck,
    path_arcs,
    stranded,
)
from controller.model.rates import REL_TOL
from controller.routes.budget import (
    TableBudget,
    arc_usage,
    entry_in_arcs,
    switch_budget,
    table_usage,
)
from controller.routes.entries import align_entries
from controller.solver.bounds import Bound
from controller.solver.certificate import DEFAULT, Certificate, CertifyOptions, certify
from controller.solver.greedy import AssignResult, _best_path, _Mates
from controller.solver.kernels import arc_csr
from controller.solver.problem import Problem, inverse
from controller.solver.qp_buckets import DEFAULT_QPS

REOPT_TRIES = 1_000  # rows `reoptimise` tries at most
RETRY_ROWS = 256  # unrouted rows a repair retries at most, beside the rows it hit
REPAIR_ROWS = 8_192  # hit rows a repair re-places at most; the rest ride ECMP
STOP_EVERY = 32  # rows a repair places between looks at its `stop`
FIT_ROUNDS = 4  # table-fitting rounds of one row per full switch before the rest go at once


def affected_flows(
    fabric: Fabric,
    new_health: LinkHealth,
    assignment: Assignment,
    old_health: LinkHealth | None = None,
) -> np.ndarray:
    """Indices of routed flows whose path lost capacity (down or degraded further)."""
    new_cap = new_health.arc_capacity(fabric)
    old_cap = fabric.capacity if old_health is None else old_health.arc_capacity(fabric)
    dropped = new_cap < old_cap
    arcs = assignment.arcs(fabric)
    hit = np.where(arcs >= 0, dropped[np.maximum(arcs, 0)], False).any(axis=1)
    return np.flatnonzero(hit & assignment.routed)


def _gather(start: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Concatenated CSR slices rows[start[k]:start[k+1]] of every key."""
    lo, hi = start[keys], start[keys + 1]
    lens = hi - lo
    total = int(lens.sum())
    if not total:
        return np.zeros(0, np.int64)
    offset = np.repeat(lo - np.cumsum(lens) + lens, lens)
    return rows[offset + np.arange(total)]


class RouteIndex:
    """An assignment with its rows per arc and its load per arc, kept across repairs.

    The rows per arc (a CSR over every arc of every routed row) are built once, for a base
    assignment; later assignments derived by `moved` record only the rows whose path
    differs from the base (with their current arcs), so a lookup costs the rows it returns
    plus the rows moved since the base. `moved_rows` says how far it has drifted: rebuild
    (`build`) when that grows large. Treat as immutable: every change makes a new index."""

    def __init__(
        self,
        fabric: Fabric,
        assignment: Assignment,
        load: np.ndarray,
        count: np.ndarray,
        base: tuple[np.ndarray, np.ndarray, np.ndarray],
        moved: np.ndarray,
        moved_arcs: np.ndarray,
        usage: np.ndarray | None = None,
    ) -> None:
        self.fabric = fabric
        self.assignment = assignment
        self.load = load  # Gbps per arc, every routed row (access arcs included)
        self.count = count  # routed rows per arc
        self._base = base  # (base path, rows grouped by arc, CSR start per arc)
        self._moved = moved  # sorted rows whose path differs from the base path
        self._moved_arcs = moved_arcs  # their current arcs [len(moved), MAX_HOPS]
        self._keys: tuple[np.ndarray, np.ndarray] | None = None  # (src rack, dst host)
        self._usage = usage  # TE entries per node (table_usage), counted when asked

    @property
    def usage(self) -> np.ndarray:
        """TE entries each node holds for the assignment (its table_usage: given by the
        caller that counted it, e.g. the solve; else counted in full the first time it is
        asked; kept by `moved` when the caller counted the change)."""
        if self._usage is None:
            self._usage = table_usage(self.fabric, self.assignment)
        return self._usage

    @property
    def counted_usage(self) -> np.ndarray | None:
        """`usage` if it is counted already (None: it would be counted in full now)."""
        return self._usage

    @classmethod
    def build(
        cls, fabric: Fabric, assignment: Assignment, usage: np.ndarray | None = None
    ) -> RouteIndex:
        """The index of `assignment` (O(rows), most of it the
        paths' arcs; the rows per arc are a compiled counting sort); `usage`: its
        table_usage, if counted already (else counted when a repair first needs it)."""
        arcs = np.ascontiguousarray(assignment.arcs(fabric), np.int64)
        rows, start, per_arc, load = arc_csr(arcs, assignment.flows.demand, fabric.num_arcs)
        base = (assignment.path, rows, start)
        empty = np.zeros(0, np.int64)
        return cls(fabric, assignment, load, per_arc, base, empty,
                   np.zeros((0, MAX_HOPS), np.int64), usage)  # fmt: skip

    def rebuilt(self) -> RouteIndex:
        """The same assignment's index built afresh (no rows kept aside as moved), with the
        table usage counted so far."""
        return RouteIndex.build(self.fabric, self.assignment, self._usage)

    @property
    def moved_rows(self) -> int:
        """Rows whose path differs from the assignment the lookup tables were built for."""
        return int(self._moved.size)

    def arcs_of(self, rows: np.ndarray) -> np.ndarray:
        """Current arcs [len(rows), MAX_HOPS] of `rows` (all -1 where unrouted)."""
        return _arcs(self.fabric, self.assignment, rows, self.assignment.path[rows])

    def rows_on(self, arcs: np.ndarray) -> np.ndarray:
        """Sorted rows whose current path uses any of `arcs`."""
        arcs = np.unique(np.asarray(arcs, np.int64))
        _, rows, start = self._base
        found = _gather(start, rows, arcs)
        if self._moved.size:
            pos = np.minimum(np.searchsorted(self._moved, found), self._moved.size - 1)
            found = found[self._moved[pos] != found]  # the base rows not moved since
            now = np.isin(self._moved_arcs, arcs).any(axis=1)
            found = np.concatenate([found, self._moved[now]])
        return distinct_below(found, len(self.assignment.flows))

    def unrouted(self, hashed_jobs: Collection[str] = ()) -> np.ndarray:
        """Sorted rows with no path, but those of `hashed_jobs` (ids of the jobs the solve
        left to the fabric's hashing whole: a repair never retries them)."""
        rows = np.flatnonzero(self.assignment.path == UNROUTED)
        if rows.size and hashed_jobs:
            flows, named = self.assignment.flows, set(hashed_jobs)
            whole = [j for j, name in enumerate(flows.job_ids) if name in named]
            rows = rows[~np.isin(flows.job[rows], whole)]
        return rows

    def group(self, f: int) -> np.ndarray:
        """Sorted routed rows (f included) from f's source RTSW to f's destination host."""
        fab, flows = self.fabric, self.assignment.flows
        host = int(fab.host_of_nic(flows.dst_nic[f]))
        nics = fab.nic_id(host, np.arange(fab.nics_per_host))
        rows = self.rows_on(fab.down(fab.access_link(nics)))
        sr = fab.rtsw_of_nic(flows.src_nic[rows])
        return rows[sr == fab.rtsw_of_nic(flows.src_nic[f])]

    def moved(self, path: np.ndarray, changed: np.ndarray, load: np.ndarray,
              count: np.ndarray, usage: np.ndarray | None = None,
              assignment: Assignment | None = None) -> RouteIndex:  # fmt: skip
        """The index of the same rows with `path` (differing from this index's paths only at
        `changed`), whose per-arc load and count (and per-node usage, if given: else it is
        counted when asked) the caller has already updated; `assignment`: the assignment of
        these rows and `path`, if the caller has made it."""
        base_path = self._base[0]
        rows = np.union1d(self._moved, changed)
        rows = rows[path[rows] != base_path[rows]]
        new = Assignment(self.assignment.flows, path) if assignment is None else assignment
        return RouteIndex(self.fabric, new, load, count, self._base, rows,
                          _arcs(self.fabric, new, rows, path[rows]), usage)  # fmt: skip


def _arcs(
    fabric: Fabric, assignment: Assignment, rows: np.ndarray, paths: np.ndarray
) -> np.ndarray:
    flows = assignment.flows
    out = path_arcs(fabric, flows.src_nic[rows], flows.dst_nic[rows], np.maximum(paths, 0))
    out[paths == UNROUTED] = -1
    return out


def _consistent(n_paths: int, span: int, mate_paths: np.ndarray) -> np.ndarray:
    """Candidates that agree with the mates' suffix on every uplink the mates use."""
    forced = {int(p) // span: int(p) % span for p in mate_paths.tolist()}
    p = np.arange(n_paths)
    ok = np.ones(n_paths, bool)
    for up, suffix in forced.items():
        ok &= (p // span != up) | (p % span == suffix)
    return ok


class _Work:
    """Paths, load and count being changed from an index's, row by row."""

    def __init__(self, index: RouteIndex, health: LinkHealth) -> None:
        self.index = index
        self.fabric = index.fabric
        self.flows = index.assignment.flows
        self.health = health
        self.cap = health.arc_capacity(self.fabric)
        self.inv = inverse(self.cap)
        self.path = index.assignment.path.copy()
        self.load = index.load.copy()
        self.count = index.count.copy()
        self.span = _Mates.spans(self.fabric)
        self.arcs: dict[int, np.ndarray] = {}  # current arcs of the rows changed here
        self._mates: dict[tuple[int, int], np.ndarray] = {}  # (src rack, dst host) -> rows
        self._changed: dict[tuple[int, int], list[int]] = {}  # the same, of the rows in arcs

    def rows(self, rows: np.ndarray) -> Problem:
        """The Problem of `rows` alone under the new health (their classes and candidates
        counted for them only: a repair costs the rows it touches)."""
        return Problem(self.fabric, self.health, self.flows.take(rows))

    def take(self, rows: np.ndarray) -> None:
        """Take `rows` off their paths (they become unrouted)."""
        if not rows.size:
            return
        arcs = self.index.arcs_of(rows)
        keep = arcs >= 0
        demand = np.broadcast_to(self.flows.demand[rows][:, None], arcs.shape)
        np.subtract.at(self.load, arcs[keep], demand[keep])
        np.subtract.at(self.count, arcs[keep], 1)
        self.path[rows] = UNROUTED
        fab = self.fabric
        racks = fab.rtsw_of_nic(self.flows.src_nic[rows]).tolist()
        hosts = fab.host_of_nic(self.flows.dst_nic[rows]).tolist()
        for f, rack, host in zip(rows.tolist(), racks, hosts, strict=True):
            if f not in self.arcs:
                self._changed.setdefault((rack, host), []).append(f)
            self.arcs[f] = np.zeros(0, np.int64)

    def remove(self, f: int, arcs: np.ndarray) -> np.ndarray:
        """Take one routed row off its path (`arcs`: its arcs in the index, used unless it
        moved here); returns its arcs (to put it back)."""
        arcs = self.arcs.get(f, arcs[arcs >= 0])
        d = float(self.flows.demand[f])
        self.load[arcs] -= d
        self.count[arcs] -= 1
        return arcs

    def restore(self, f: int, arcs: np.ndarray) -> None:
        self.load[arcs] += float(self.flows.demand[f])
        self.count[arcs] += 1

    def allowed(self, f: int, cls: int, n_paths: int) -> np.ndarray | None:
        """The candidates the shared-entry rule leaves f, given its routed mates."""
        span = int(self.span[cls])
        if not span:
            return None
        fab = self.fabric
        host = int(fab.host_of_nic(self.flows.dst_nic[f]))
        rack = int(fab.rtsw_of_nic(self.flows.src_nic[f]))
        rows = self._mates.get((rack, host))
        if rows is None:
            rows = self._mates[rack, host] = self.index.group(f)
        rows = rows[(rows != f) & (self.path[rows] >= 0)]
        # rows re-placed here that the index does not know on these arcs
        new = [g for g in self._changed.get((rack, host), ()) if g != f and self.path[g] >= 0]
        if new:
            rows = np.union1d(rows, np.array(new, np.int64))
        if not rows.size:
            return None
        return _consistent(n_paths, span, self.path[rows])

    def place(self, f: int, p: int, core: np.ndarray) -> None:
        """Put row f on candidate p with core arcs `core`."""
        fab = self.fabric
        arcs = np.concatenate([[fab.up(fab.access_link(self.flows.src_nic[f]))], core,
                               [fab.down(fab.access_link(self.flows.dst_nic[f]))]])  # fmt: skip
        self.path[f] = p
        if f not in self.arcs:
            key = (int(fab.rtsw_of_nic(self.flows.src_nic[f])),
                   int(fab.host_of_nic(self.flows.dst_nic[f])))  # fmt: skip
            self._changed.setdefault(key, []).append(f)
        self.arcs[f] = arcs
        self.load[arcs] += float(self.flows.demand[f])
        self.count[arcs] += 1

    def unplace(self, f: int, back: bool) -> None:
        """Take row f (placed here) off its path: back onto its path in the index when `back`,
        else unrouted (it rides the ECMP defaults)."""
        arcs = self.arcs[f]
        d = float(self.flows.demand[f])
        self.load[arcs] -= d
        self.count[arcs] -= 1
        self.path[f] = UNROUTED
        self.arcs[f] = np.zeros(0, np.int64)
        if back and self.index.assignment.path[f] != UNROUTED:
            row = np.array([f])
            arcs = self.index.arcs_of(row)[0]
            arcs = arcs[arcs >= 0]
            self.path[f] = self.index.assignment.path[f]
            self.arcs[f] = arcs
            self.load[arcs] += d
            self.count[arcs] += 1

    def align(self) -> np.ndarray:
        """Rows placed here yield where an entry key they meet is another row's: each
        copies the later hops of the row that heads that key (rows kept before rows placed
        here; `routes.entries.align_entries`, as a solve ends). The repair's rule of mates
        (one source rack, one destination host) does not see keys downstream: a CTSW's
        (port from an ATSW, destination host) is met by rows of every source rack, and on
        parallel links rows placed apart there want different next hops (a route
        conflict, which no push takes). Kept rows, conflict-free among themselves, never
        change; a row that copies keeps a live path (the head's, from a switch both reach).
        Returns the rows re-placed."""
        changed = np.array(sorted(self.arcs), np.int64)
        placed = changed[self.path[changed] >= 0] if changed.size else changed
        if not placed.size:
            return placed
        fab, flows = self.fabric, self.flows
        # every entry key holds its destination host: the rows to the placed rows' hosts
        hosts = np.unique(fab.host_of_nic(flows.dst_nic[placed]))
        nics = fab.nic_id(np.repeat(hosts, fab.nics_per_host),
                          np.tile(np.arange(fab.nics_per_host), hosts.size))  # fmt: skip
        into = fab.down(fab.access_link(nics))
        rows = distinct_below(np.concatenate([self.index.rows_on(into), placed]), len(flows))
        rows = rows[self.path[rows] >= 0]
        here = np.zeros(len(flows), bool)
        here[placed] = True
        now = self.path[rows]
        new = align_entries(fab, flows.take(rows), now, here[rows].astype(np.float64))
        moved = np.flatnonzero(new != now)
        for i in moved.tolist():
            f = int(rows[i])
            arcs = path_arcs(fab, flows.src_nic[f:f + 1], flows.dst_nic[f:f + 1],
                             new[i:i + 1])[0]  # fmt: skip
            arcs = arcs[arcs >= 0]
            if f in self.arcs:
                self.unplace(f, back=False)
            else:  # a kept row (not expected: kept rows agree): off its path in the index
                self.remove(f, self.index.arcs_of(np.array([f]))[0])
            self.place(f, int(new[i]), arcs[1:-1])
        return rows[moved]

    def _placed_on(self, arcs: np.ndarray) -> np.ndarray:
        """Rows changed here whose path now uses any of `arcs`."""
        mask = np.zeros(self.fabric.num_arcs, bool)
        mask[arcs] = True
        return np.array([g for g, a in self.arcs.items() if mask[a].any()], np.int64)

    def rows_on(self, arcs: np.ndarray) -> np.ndarray:
        """Sorted rows whose path, as changed here, uses any of `arcs`."""
        on = self.index.rows_on(arcs)
        here = np.array(sorted(self.arcs), np.int64)
        on = on[~np.isin(on, here)]
        mask = np.zeros(self.fabric.num_arcs, bool)
        mask[arcs] = True
        now = [g for g in here.tolist() if mask[self.arcs[g]].any()]
        return np.union1d(on, np.array(now, np.int64))

    def fit(self, limits: np.ndarray, back: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Keep every table within `limits` (entries per node, see switch_budget): while a
        switch is over, at each such switch the moved row of least priority (smallest demand,
        then largest index) with an entry there goes to ECMP; when `back`, every moved row
        goes back to its path in the index instead (moved rows may share keys). Only the arcs
        the moved rows' entry keys arrive on (before and after) are counted again, with
        arc_usage (the one entry model), on the rows to the moved rows' destination hosts
        (the only keys that change); the rest is the index's table usage. Returns (the rows
        sent to ECMP, sorted; the entries per node after, or None when not counted: every
        limit is infinite)."""
        none = np.zeros(0, np.int64)
        if not np.isfinite(limits).any():
            return none, None
        old = self.index.assignment.path
        base = self.index.usage
        changed = np.array(sorted(self.arcs), np.int64)
        moved = changed[self.path[changed] != old[changed]]
        if not moved.size:
            return none, base
        fab, flows = self.fabric, self.flows
        mflows = flows.take(moved)
        _, was_in = entry_in_arcs(fab, Assignment(mflows, old[moved]))
        row, now_in = entry_in_arcs(fab, Assignment(mflows, self.path[moved]))
        arcs = np.union1d(was_in, now_in)
        if not arcs.size:
            return none, base
        # an entry's key holds its destination host: only the keys to the moved rows' hosts
        # change, and all their rows arrive on those hosts' access arcs
        hosts = np.unique(fab.host_of_nic(mflows.dst_nic))
        nics = fab.nic_id(np.repeat(hosts, fab.nics_per_host),
                          np.tile(np.arange(fab.nics_per_host), hosts.size))  # fmt: skip
        into = fab.down(fab.access_link(nics))
        # those keys' entries before and after, on the rows to those hosts (a row that leaves
        # here, for ECMP or back to its path, stays among them)
        was = self.index.rows_on(into)
        before = arc_usage(fab, Assignment(flows.take(was), old[was]))[arcs]
        rows = distinct_below(np.concatenate([was, self._placed_on(into)]), len(flows))
        sub = flows.take(rows)
        heads = fab.arc_ends[1]
        nodes = np.unique(heads[arcs])

        def count() -> tuple[np.ndarray, np.ndarray]:
            now = base.copy()  # the arcs are distinct: their changes add up per node
            after = arc_usage(fab, Assignment(sub, self.path[rows]))[arcs]
            np.add.at(now, heads[arcs], after - before)
            return now, nodes[now[nodes] > limits[nodes]]

        usage, full = count()
        if not full.size:
            return none, usage
        if back:  # every moved row back: one alone could leave a mate moved with it astray
            for f in moved.tolist():
                self.unplace(f, back)
            return none, base
        order = moved[np.lexsort((moved, -flows.demand[moved]))][::-1]
        rank = np.empty(len(flows), np.int64)
        rank[order] = np.arange(order.size)
        key_row, key_node = moved[row], fab.arc_ends[1][now_in]
        rounds = 0
        while full.size:
            live = np.isin(key_node, full) & (self.path[key_row] >= 0)
            live &= self.path[key_row] != old[key_row]
            if not live.any():  # only rows that did not move here keep it over
                break
            r, n = key_row[live], key_node[live]
            rounds += 1
            if rounds > FIT_ROUNDS:  # the rest at once: every moved row over a full switch
                drop = np.unique(r)
            else:  # per over switch, its moved row of least priority
                pick = np.lexsort((rank[r], n))
                n_sorted = n[pick]
                drop = np.unique(r[pick[np.r_[True, n_sorted[1:] != n_sorted[:-1]]]])
            for f in drop.tolist():
                self.unplace(f, back)
            usage, full = count()
        return moved[self.path[moved] == UNROUTED], usage

    def _stranded(self, fresh: RouteIndex) -> np.ndarray:
        """The rows of `fresh` with no path alive under the health repaired for; its other
        path-less rows (handed back, over the budget, left to hashing) have one."""
        rows = fresh.unrouted()
        flows = fresh.assignment.flows
        return rows[stranded(self.index.fabric, self.cap, flows.src_nic[rows],
                             flows.dst_nic[rows])]  # fmt: skip

    def finish(
        self,
        start: float,
        method: str,
        fallback: np.ndarray | None = None,
        usage: np.ndarray | None = None,
    ) -> tuple[AssignResult, RouteIndex]:
        old = self.index.assignment.path
        changed = np.array(sorted(self.arcs), np.int64)
        fresh = self.index.moved(self.path, changed, self.load, self.count, usage)
        cap, load = self.cap, self.load
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(cap > 0, load / np.where(cap > 0, cap, 1.0),
                            np.where(load > REL_TOL, np.inf, 0))  # fmt: skip
        core_arc = np.repeat(self.fabric.link_kind != ACCESS, 2)
        collided = np.flatnonzero(
            core_arc & (self.count > 1) & (load > cap + REL_TOL * np.maximum(cap, 1.0))
        )
        result = AssignResult(
            assignment=fresh.assignment,
            mlu=float(util.max(initial=0.0)),
            collided_links=collided,
            churn=changed[self.path[changed] != old[changed]],
            fallback_ecmp=np.zeros(0, np.int64) if fallback is None else fallback,
            unroutable=self._stranded(fresh),
            method=method,
            seconds=time.perf_counter() - start,
        )
        return result, fresh


def repair(
    fabric: Fabric,
    new_health: LinkHealth,
    assignment: Assignment,
    *,
    old_health: LinkHealth | None = None,
    retry_unrouted: bool = True,
    table_budget: TableBudget | None = None,
    certify_options: CertifyOptions | None = DEFAULT,
    qps: int = DEFAULT_QPS,
    hashed_jobs: Collection[str] = (),
) -> AssignResult:
    """Re-place only the flows hit by the health change; all others stay where they are
    (then the certificate: see `certified`). `table_budget`: entries per switch (None: the
    fabric's per-tier `te_entries`); a re-placed row whose entries would not fit rides ECMP
    (`fallback_ecmp`). `hashed_jobs`: ids of the jobs the solve left to the fabric's hashing
    whole (SolveResult.hashed_jobs): their rows are never retried, so never get an entry."""
    index = RouteIndex.build(fabric, assignment)
    res, _ = repair_indexed(new_health, index, old_health=old_health,
                            retry_unrouted=retry_unrouted, table_budget=table_budget,
                            certify_options=certify_options, qps=qps,
                            hashed_jobs=hashed_jobs)  # fmt: skip
    return res


def _limits(fabric: Fabric, budget: TableBudget | None) -> np.ndarray:
    """Entries per node (inf: unlimited): `budget` (one number: as Fabric.table_budget
    reads it), else the fabric's."""
    if budget is None or isinstance(budget, int):
        return fabric.table_budget(budget)
    return switch_budget(fabric, budget)


def repair_indexed(
    new_health: LinkHealth,
    index: RouteIndex,
    *,
    old_health: LinkHealth | None = None,
    retry_unrouted: bool = True,
    table_budget: TableBudget | None = None,
    certify_options: CertifyOptions | None = DEFAULT,
    qps: int = DEFAULT_QPS,
    stop: Callable[[], bool] | None = None,
    hashed_jobs: Collection[str] = (),
) -> tuple[AssignResult, RouteIndex]:
    """`repair` of the index's assignment; also returns the repaired assignment's index.
    Costs in proportion to the rows hit (and the rows moved since the index was built),
    plus, where a table budget is finite, the rows that share a switch with a moved row's
    entry (counted again to keep those tables within budget), plus the certificate
    (`certified`; None or disabled options: none).

    `stop` is asked every STOP_EVERY rows placed and between the steps: when it says so,
    Superseded is raised and nothing is kept (a repair computed ahead gives way to one
    that is wanted now, and is made again from the start later)."""
    start = time.perf_counter()

    def check() -> None:
        if stop is not None and stop():
            raise Superseded("repair stopped: wanted no more, for now")

    fabric = index.fabric
    work = _Work(index, new_health)
    old_cap = fabric.capacity if old_health is None else old_health.arc_capacity(fabric)
    hit = index.rows_on(np.flatnonzero(work.cap < old_cap))
    if retry_unrouted:
        hit = np.union1d(hit, _retried(index, work.cap > old_cap, hit, RETRY_ROWS,
                                       hashed_jobs))  # fmt: skip
    work.take(hit)
    if hit.size:
        sub = work.rows(hit)
        cand, alive, demand = sub.candidates, sub.access_alive, sub.flows.demand
        for k, i in enumerate(np.argsort(-demand, kind="stable")[:REPAIR_ROWS].tolist()):
            if k % STOP_EVERY == 0:
                check()
            if not alive[i]:
                continue
            f, cls = int(hit[i]), int(cand.cls[i])
            if cls == SAME_RACK:
                work.place(f, 0, np.zeros(0, np.int64))
                continue
            options = cand.arcs(i)
            allowed = work.allowed(f, cls, options.shape[0])
            p, _ = _best_path(options, work.load, work.inv, float(demand[i]), allowed)
            if p != UNROUTED:
                work.place(f, p, options[p])
    check()
    work.align()
    fallback, usage = work.fit(_limits(fabric, table_budget), back=False)
    check()
    res, fresh = work.finish(start, "repair", fallback, usage)
    check()
    return certified(new_health, res, fresh, certify_options, qps, stop)


def certified(
    health: LinkHealth,
    result: AssignResult,
    index: RouteIndex,
    options: CertifyOptions | None,
    qps: int = DEFAULT_QPS,
    stop: Callable[[], bool] | None = None,
) -> tuple[AssignResult, RouteIndex]:
    """`result` (whose assignment `index` indexes) with its certificate, the rows of jobs
    that would be below the fabric's own routing handed back to it (controller.solver.
    certificate), and the index of what is to be installed.

    When jobs would be handed back, the bounded re-optimisation (`reoptimise`) is tried
    first and kept if its certificate hands back fewer flows (method "+reoptimise").

    Cost: the certificate's loads are O(rows); when no arc is offered more than its
    capacity (the usual outcome of a repair) nothing more is computed, since then every
    job provably gets its demand. Otherwise the reference is computed (K hashed routings)
    and the at-risk jobs compared; see docs/certificate.md for the measured cost.
    `stop`: the certificate's (asked before each seed's walk)."""
    if options is None or not options.enabled:
        return result, index
    start = time.perf_counter()
    assignment, cert = certify(index.fabric, health, index.assignment, qps=qps,
                               options=options, stop=stop)  # fmt: skip
    if assignment is index.assignment:
        mlu = cert.mlu if cert.walked else result.mlu  # rows on the defaults count too
        return replace(result, certificate=cert, mlu=mlu), index
    if not result.method.startswith("reoptimise"):
        # before handing jobs back, the bounded re-optimisation (a restore, say, leaves
        # rows doubled up on links that are whole again): kept if it hands back fewer flows
        moved, moved_index = reoptimise(health, index, tries=REOPT_TRIES, certify_options=None,
                                        qps=qps)  # fmt: skip
        if moved.churn.size:
            again, cert2 = certify(index.fabric, health, moved_index.assignment, qps=qps,
                                   options=options)  # fmt: skip
            if cert2.fallback_flows < cert.fallback_flows:
                base = replace(moved, method=result.method + "+reoptimise",
                               churn=np.union1d(result.churn, moved.churn))  # fmt: skip
                return _handed_back(health, base, moved_index, again, cert2, start)
    return _handed_back(health, result, index, assignment, cert, start)


def _handed_back(
    health: LinkHealth,
    result: AssignResult,
    index: RouteIndex,
    assignment: Assignment,
    cert: Certificate,
    start: float,
) -> tuple[AssignResult, RouteIndex]:
    """`result` with the rows the certificate handed back (`assignment`'s path-less rows
    that `index` routes) taken off their paths, and its index."""
    if assignment is index.assignment:
        mlu = cert.mlu if cert.walked else result.mlu
        return replace(result, certificate=cert, mlu=mlu), index
    handed = np.flatnonzero(assignment.path != index.assignment.path)
    work = _Work(index, health)
    work.take(handed)
    res, fresh = work.finish(start, result.method + "+certified", result.fallback_ecmp)
    out = replace(
        res,
        mlu=cert.mlu,
        churn=np.union1d(result.churn, handed),
        seconds=result.seconds + res.seconds,
        certificate=cert,
        handed_back=handed,
    )
    return out, fresh


def _retried(index: RouteIndex, better: np.ndarray, hit: np.ndarray, most: int,
             hashed_jobs: Collection[str]) -> np.ndarray:  # fmt: skip
    """The rows with no path a repair tries again, sorted: at most `most`, first those
    whose source or destination rack has a link whose capacity came back (`better`, per
    arc) or whose source rack the `hit` rows leave (their entries there are freed), then
    by index. Never rows of `hashed_jobs`, left to the fabric's hashing whole by the solve
    (controller.solver.unfit_jobs): a repair gives them no entry."""
    rows = index.unrouted(hashed_jobs)
    if rows.size <= most:
        return rows
    fab = index.fabric
    racks = np.zeros(fab.num_rtsws, bool)
    racks[fab.rtsw_of_nic(index.assignment.flows.src_nic[hit])] = True
    links = np.flatnonzero(better[0::2] | better[1::2])
    racks[fab.rtsw_of_nic(links[links < fab.rack_base])] = True
    rack_links = links[(links >= fab.rack_base) & (links < fab.agg_base)] - fab.rack_base
    racks[rack_links // (fab.num_rack_links // fab.num_rtsws)] = True
    flows = index.assignment.flows
    near = racks[fab.rtsw_of_nic(flows.src_nic[rows])] | racks[fab.rtsw_of_nic(flows.dst_nic[rows])]
    order = np.lexsort((rows, ~near))
    return np.sort(rows[order[:most]])


def reoptimise(
    health: LinkHealth,
    index: RouteIndex,
    *,
    goal: float = 0.0,
    tries: int = REOPT_TRIES,
    table_budget: TableBudget | None = None,
    certify_options: CertifyOptions | None = DEFAULT,
    qps: int = DEFAULT_QPS,
) -> tuple[AssignResult, RouteIndex]:
    """Move rows off the most utilised switch-to-switch arc while that strictly lowers it
    (the first row, by descending demand, whose best other path ends below it moves), until
    that arc is at or below `goal` or the access arcs' utilisation (no core move lowers the
    MLU under it), none of its rows can leave, or `tries` rows have been tried. When the
    moves would put a switch over `table_budget` (None: the fabric's), none is kept: the
    index's assignment (within budget) is the result."""
    start = time.perf_counter()
    fabric = index.fabric
    work = _Work(index, health)
    flows = work.flows
    core = np.repeat(fabric.link_kind != ACCESS, 2)
    weight = np.where(core & np.isfinite(work.inv), work.inv, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        access = np.where(~core & (work.cap > 0), work.load / np.where(work.cap > 0, work.cap, 1),
                          0.0)  # fmt: skip
    floor = max(goal, float(access.max(initial=0.0)))
    used = 0
    while used < tries:
        util = work.load * weight
        arc = int(np.argmax(util))
        top = float(util[arc])
        if top <= floor + REL_TOL:
            break
        on = index.rows_on(np.array([arc]))
        on = on[np.fromiter((f not in work.arcs for f in on.tolist()), bool, on.size)]
        here = [g for g, arcs in work.arcs.items() if arc in arcs.tolist()]
        on = np.union1d(on, np.array(here, np.int64))
        sub = work.rows(on)
        keep = (work.path[on] >= 0) & (sub.cls != SAME_RACK)
        keep = np.flatnonzero(keep)[np.argsort(-flows.demand[on[keep]], kind="stable")]
        keep = keep[: tries - used]
        on, sub = on[keep], sub.take(keep)
        cand, now = sub.candidates, index.arcs_of(on)
        moved = False
        for i, f in enumerate(on.tolist()):
            used += 1
            options, was = cand.arcs(i), int(work.path[f])
            old = work.remove(f, now[i])
            allowed = work.allowed(f, int(cand.cls[i]), options.shape[0])
            p, worst = _best_path(options, work.load, work.inv, float(flows.demand[f]), allowed)
            if p != UNROUTED and p != was and worst < top - REL_TOL:
                work.place(f, p, options[p])
                moved = True
                break
            work.restore(f, old)
        if not moved:
            break
    work.align()
    _, usage = work.fit(_limits(fabric, table_budget), back=True)
    res, fresh = work.finish(start, "reoptimise", usage=usage)
    return certified(health, res, fresh, certify_options, qps)


@dataclass(frozen=True)
class FollowUp:
    """What settles a repaired assignment (see `follow_up`)."""

    result: AssignResult  # the repair, or the re-optimisation warm from it
    index: RouteIndex  # of result.assignment
    ratio: float  # result MLU / bound (1.0 when the bound is 0 or infinite: nothing to judge)
    reoptimised: bool
    needs_global: bool  # still beyond both gaps: a global solve should follow


def follow_up(
    health: LinkHealth,
    repaired: AssignResult,
    index: RouteIndex,
    bound: float,
    last_ratio: float,
    *,
    move_threshold: float,
    spray_gap: float,
    tries: int = REOPT_TRIES,
    table_budget: TableBudget | None = None,
    certify_options: CertifyOptions | None = DEFAULT,
    qps: int = DEFAULT_QPS,
) -> FollowUp:
    """Judge a repair (`index`: of `repaired.assignment`) against `bound` for `health`.

    It settles the change as it is when MLU / bound is within `move_threshold` of
    `last_ratio` (the last global solve's: the gap at which the solver itself would not
    move kept flows). Otherwise `reoptimise` runs warm from it, towards that ratio, with
    `tries` at most; when even that is beyond both that ratio and `spray_gap` (the gap
    within which the solver accepts a result), `needs_global` says a global solve should
    follow. Whatever it returns is certified (`certify_options`; the repair's own
    certificate stands when it is kept as it is)."""
    target = max(last_ratio, 1.0) * (1 + move_threshold)

    def ratio(mlu: float) -> float:
        return mlu / bound if 0 < bound < np.inf else 1.0

    if ratio(repaired.mlu) <= target + REL_TOL:
        return FollowUp(repaired, index, ratio(repaired.mlu), False, False)
    res, index = reoptimise(health, index, goal=bound * target, tries=tries,
                            table_budget=table_budget, certify_options=certify_options,
                            qps=qps)  # fmt: skip
    far = ratio(res.mlu) > max(target, 1 + spray_gap) + REL_TOL
    return FollowUp(res, index, ratio(res.mlu), True, far)


def bound_after(
    fabric: Fabric,
    flows: FlowSet,
    old_health: LinkHealth,
    old_bound: Bound,
    new_health: LinkHealth,
    qps: int = 1,
) -> Bound | None:
    """`lower_bound(fabric, new_health, flows, qps=qps)` from `old_bound` (the bound for
    `old_health`) when no capacity went up: only the flows of the NICs, racks and pods whose
    links changed are bounded again, since theirs are the only cuts and paths that changed
    and every other part of the old bound still holds. None when some capacity went up, or
    a flow lost its last alive path (bounds leave such flows out, so a part of the old
    bound may no longer hold): compute it in full."""
    old, new = old_health.factor, new_health.factor
    if (new > old).any():
        return None
    links = np.flatnonzero(new != old)
    if not links.size:
        return old_bound
    kind = fabric.link_kind[links]
    nics = links[kind == ACCESS]
    racks = (links[kind == RACK] - fabric.rack_base) // (fabric.ctsws_per_pod * fabric.rack_links)
    per_pod = fabric.ctsws_per_pod * fabric.atsws_per_plane * fabric.agg_links
    pods = (links[kind == AGG] - fabric.agg_base) // max(per_pod, 1)
    problem = Problem(fabric, new_health, flows)
    sr, dr = problem.src_rack, problem.dst_rack
    cross = problem.cls == CROSS_POD
    mine = np.isin(flows.src_nic, nics) | np.isin(flows.dst_nic, nics)
    mine |= np.isin(sr, racks) | np.isin(dr, racks)
    mine |= cross & (np.isin(problem.src_pod, pods) | np.isin(problem.dst_pod, pods))
    sub = np.flatnonzero(mine)
    src, dst = flows.src_nic[sub], flows.dst_nic[sub]
    if ((best_bottleneck(fabric, new_health.arc_capacity(fabric), src, dst) <= 0)
            & (best_bottleneck(fabric, old_health.arc_capacity(fabric), src, dst) > 0)).any():
        return None  # a flow lost its last path: it loads nothing now, parts may fall
    part = problem.take(sub).bound(qps)
    return part if part.value > old_bound.value else old_bound


def bound_under(
    fabric: Fabric,
    flows: FlowSet,
    health: LinkHealth,
    qps: int,
    known: tuple[LinkHealth, Bound] | None,
) -> Bound:
    """The lower bound of `flows` under `health` for routings of up to `qps` QP buckets:
    derived from `known` (the bound of the same flows under another health) by
    `bound_after` where that holds (no capacity went up), else computed in full."""
    if known is not None:
        derived = bound_after(fabric, flows, known[0], known[1], health, qps)
        if derived is not None:
            return derived
    return Problem(fabric, health, flows).bound(qps)
