"""Integral assignment: every flow gets exactly one candidate path (or is reported).

Methods, all deterministic:

- Greedy, largest first: flows in order of descending demand (ties by flow index) each take
  the alive candidate path with the smallest resulting bottleneck utilisation over the
  switch-to-switch arcs (ties: smallest sum of utilisations, then smallest path index).
  Candidate arcs are `base[flow] + offset[path]` (the structured numbering of
  controller.model.paths is affine in its digits), so one flow costs a few numpy calls.
  Optional LP guidance restricts a flow to the paths of its commodity that still have target
  share left, when there are any.
- Local search: take the most utilised switch-to-switch arc; try its flows (largest first)
  on every other candidate; accept the first move whose new path stays strictly below the
  current maximum (lexicographically fewer arcs at the maximum, or a lower maximum). It is
  bounded by work, never by time: at most `max_tries` flows tried (SEARCH_TRIES by
  default), so a loaded machine gets the same routes as an idle one, only later.
- Colouring (controller.solver.colouring) when all demands are equal: exact on the RTSW<->CTSW
  layer; flows it cannot place go through the greedy, then local search runs on the result.
  The better of colouring and greedy by (MLU, collisions) is kept.

`assign` adds stability against a previous assignment, route-entry consistency (flows that
meet at one TE entry key must leave it on the same next hop; see controller.routes.entries), and a
per-switch table budget (flows that do not fit stay on ECMP); both are the entry model of
controller.routes.entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from controller.errors import Superseded
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import ACCESS, Fabric
from controller.model.flows import FlowSet, match_pairs
from controller.model.hashing import Hashed, hashed_arcs
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD, SAME_POD, SAME_RACK, num_paths
from controller.model.rates import REL_TOL, flow_shares, flow_shares_crossing, offered_load
from controller.routes.budget import TableBudget, fit_tables
from controller.routes.entries import align_entries
from controller.solver.candidates import Candidates
from controller.solver.certificate import Certificate
from controller.solver.colouring import colour_assign
from controller.solver.kernels import Mates, arc_csr, place, relieve, search
from controller.solver.problem import Problem

# Flows a local search tries on other paths before it stops (one try: a flow's candidates
# scored; the tries of one hot arc are scored together, ~10 us a try on meta-24k). Searches
# on pods converge within a few hundred; on the spray of the meta-24k mix (500K+ rows)
# 10,000 reach 1.006-1.022 x the bound in about 0.1 s (docs/profiling.md).
SEARCH_TRIES = 10_000


def _best_path(
    arcs: np.ndarray,
    load: np.ndarray,
    inv: np.ndarray,
    demand: float,
    allowed: np.ndarray | None = None,
) -> tuple[int, float]:
    """(path, bottleneck utilisation) of the best candidate; (-1, inf) if none is alive."""
    util = (load[arcs] + demand) * inv[arcs]
    worst = util.max(axis=1)
    if allowed is not None:
        worst = np.where(allowed, worst, np.inf)
    best = worst.min()
    if not np.isfinite(best):
        return UNROUTED, float("inf")
    tied = np.flatnonzero(worst <= best + REL_TOL)
    if tied.size > 1:
        tied = tied[np.argmin(util[tied].sum(axis=1))]
    else:
        tied = tied[0]
    return int(tied), float(best)


_NO_MATES = np.zeros((1, 1), np.int64)


class _Mates:
    """Flows from one source RTSW to one destination host meet at the same CTSW entry key
    when they share an uplink, so they must share the digits after it (the suffix of the
    path index). Tracks, per such group and uplink, the suffix in use and how many use it."""

    @staticmethod
    def spans(fabric: Fabric) -> np.ndarray:
        """Suffix size per class (0 where no entry follows the uplink)."""
        k, a, m = fabric.rack_links, fabric.atsws_per_plane, fabric.agg_links
        span = np.zeros(3, np.int64)
        span[SAME_POD] = k if k > 1 else 0
        span[CROSS_POD] = a * m * m * k if a * m > 1 else 0
        return span

    def __init__(self, fabric: Fabric, flows: FlowSet, cand: Candidates) -> None:
        k = fabric.rack_links
        self.span = self.spans(fabric)
        sr = fabric.rtsw_of_nic(flows.src_nic)
        key = (sr * fabric.num_hosts + flows.dst_host(fabric)) * 3 + cand.cls
        on = self.span[cand.cls] > 0
        self.group = np.full(len(flows), -1, np.int64)
        if on.any():
            uniq, inv, count = np.unique(key[on], return_inverse=True, return_counts=True)
            gid = np.where(count[inv] > 1, inv, -1)
            self.group[on] = gid
            n_up = fabric.ctsws_per_pod * k
            self.forced = np.full((uniq.size, n_up), -1, np.int64)
            self.count = np.zeros((uniq.size, n_up), np.int64)

    @property
    def kernel_args(self) -> Mates:
        """(group, span, forced, count), as the kernels take them (empty stand-ins for
        forced and count when no flow has mates)."""
        if not hasattr(self, "forced"):
            return self.group, self.span, _NO_MATES, _NO_MATES
        return self.group, self.span, self.forced, self.count

    def fill(self, cls: np.ndarray, path: np.ndarray) -> None:
        """Add every routed flow at once."""
        rows = np.flatnonzero((self.group >= 0) & (path >= 0))
        if not rows.size:
            return
        span = self.span[cls[rows]]
        g, up = self.group[rows], path[rows] // span
        self.forced[g, up] = path[rows] % span
        np.add.at(self.count, (g, up), 1)

    def allowed(self, f: int, cls: int, n_paths: int) -> np.ndarray | None:
        g = self.group[f]
        if g < 0:
            return None
        span = int(self.span[cls])
        p = np.arange(n_paths)
        fs = self.forced[g, p // span]
        return (fs < 0) | (fs == p % span)

    def add(self, f: int, cls: int, path: int) -> None:
        g = self.group[f]
        if g >= 0 and path >= 0:
            span = int(self.span[cls])
            self.forced[g, path // span] = path % span
            self.count[g, path // span] += 1

    def remove(self, f: int, cls: int, path: int) -> None:
        g = self.group[f]
        if g >= 0 and path >= 0:
            u = path // int(self.span[cls])
            self.count[g, u] -= 1
            if self.count[g, u] == 0:
                self.forced[g, u] = -1


def _both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    return a if b is None else a & b


# ---- guidance -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Guidance:
    """Target fraction of a commodity's demand per path: rows (src RTSW, dst RTSW, path,
    share). Built by the caller from an LP solution; shares of a commodity sum to ~1."""

    src_rtsw: np.ndarray = field(repr=False)
    dst_rtsw: np.ndarray = field(repr=False)
    path: np.ndarray = field(repr=False)
    share: np.ndarray = field(repr=False)


def _targets(problem: Problem, guidance: Guidance) -> dict[tuple[int, int], np.ndarray]:
    """Remaining Gbps per path for every guided commodity."""
    _, n_pod, n_cross = num_paths(problem.fabric)
    flows, cls = problem.flows, problem.cls
    sr, dr = problem.src_rack, problem.dst_rack
    total: dict[tuple[int, int], float] = {}
    for s, d, q in zip(sr.tolist(), dr.tolist(), flows.demand.tolist(), strict=True):
        total[(s, d)] = total.get((s, d), 0.0) + q
    cls_of = {(int(s), int(d)): int(c) for s, d, c in zip(sr, dr, cls, strict=True)}
    out: dict[tuple[int, int], np.ndarray] = {}
    for s, d, p, q in zip(
        np.asarray(guidance.src_rtsw).tolist(), np.asarray(guidance.dst_rtsw).tolist(),
        np.asarray(guidance.path).tolist(), np.asarray(guidance.share).tolist(), strict=True,
    ):  # fmt: skip
        key = (int(s), int(d))
        if key not in total or cls_of[key] == SAME_RACK:
            continue
        size = n_cross if cls_of[key] == CROSS_POD else n_pod
        if not 0 <= p < size:
            continue
        vec = out.setdefault(key, np.zeros(size))
        vec[int(p)] += float(q) * total[key]
    return out


# ---- greedy and local search ---------------------------------------------------------------
def demand_order(flows: FlowSet) -> np.ndarray:
    """Flow indices by descending demand, ties by index."""
    return np.argsort(-flows.demand, kind="stable")


STOP_EVERY = 4096  # flows the per-flow greedy places between two looks at its `stop`


def greedy(
    problem: Problem,
    *,
    fixed: np.ndarray | None = None,
    guidance: Guidance | None = None,
    stop: Callable[[], bool] | None = None,
) -> np.ndarray:
    """Largest-first greedy paths. `fixed[f] >= 0` keeps flow f on that path (its load is
    counted first); every other flow is placed. Flows with no alive path get UNROUTED.
    `stop` is asked every STOP_EVERY flows (Superseded when it says so)."""
    fabric, flows = problem.fabric, problem.flows
    inv, cand = problem.inverse, problem.candidates
    path = np.full(len(flows), UNROUTED, np.int64)
    load = np.zeros(fabric.num_arcs)
    if fixed is not None:
        keep = fixed >= 0
        path[keep] = fixed[keep]
        arcs = cand.all_chosen(path)
        flat = arcs.reshape(-1)
        w = np.repeat(flows.demand, arcs.shape[1])
        load += np.bincount(flat[flat >= 0], weights=w[flat >= 0], minlength=fabric.num_arcs)
    else:
        keep = np.zeros(len(flows), bool)
    targets = _targets(problem, guidance) if guidance is not None else {}
    alive = problem.access_alive
    sr, dr = problem.src_rack, problem.dst_rack
    demand = flows.demand
    mates = _Mates(fabric, flows, cand)
    mates.fill(cand.cls, np.where(keep, path, UNROUTED))
    # the flows to place, in demand_order (a stable sort of a subset keeps its order)
    todo = np.flatnonzero(~keep & alive)
    for i, f in enumerate(todo[np.argsort(-demand[todo], kind="stable")].tolist()):
        if stop is not None and not i % STOP_EVERY and stop():
            raise Superseded("greedy stopped: its inputs were superseded")
        cls = int(cand.cls[f])
        if cls == SAME_RACK:
            path[f] = 0
            continue
        arcs = cand.arcs(f)
        d = float(demand[f])
        must = mates.allowed(f, cls, arcs.shape[0])
        rem = targets.get((int(sr[f]), int(dr[f]))) if targets else None
        allowed = None
        if rem is not None:
            allowed = _both(rem >= 0.5 * d - REL_TOL, must)
            if allowed is None or not allowed.any():
                allowed = None
        p, _ = _best_path(arcs, load, inv, d, _both(allowed, must))
        if p == UNROUTED and allowed is not None:
            p, _ = _best_path(arcs, load, inv, d, must)
        if p == UNROUTED:
            continue
        path[f] = p
        mates.add(f, cls, p)
        load[arcs[p]] += d
        if rem is not None:
            rem[p] -= d
    return path


def greedy_batched(problem: Problem, *, fixed: np.ndarray) -> np.ndarray:
    """`greedy` (largest first, same choice rule) with the flows placed in batches: in
    demand order, each flow joins the first batch in which neither its source nor its
    destination RTSW is taken yet, so the flows of a batch share no rack link and are placed
    at once, as arrays, on the load of the batches before. Flows of a batch may still share
    CTSW-ATSW links, and entry-key mates are left to align_entries."""
    return greedy_batched_arcs(problem, fixed=fixed)[0]


def greedy_batched_arcs(problem: Problem, *, fixed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """greedy_batched, and the core arcs of its paths (cand.all_chosen of them), which
    local_search can start from instead of computing them again."""
    fabric, flows = problem.fabric, problem.flows
    inv, cand = problem.inverse, problem.candidates
    path = np.asarray(fixed, np.int64).copy()
    chosen = cand.all_chosen(np.where(path >= 0, path, UNROUTED))
    load = core_load(fabric, flows, chosen)
    todo = np.flatnonzero((path < 0) & problem.access_alive)
    path[todo[cand.cls[todo] == SAME_RACK]] = 0
    todo = todo[cand.cls[todo] != SAME_RACK]
    if not todo.size:
        return path, chosen
    order = todo[np.argsort(-flows.demand[todo], kind="stable")]
    sr = problem.src_rack[order].tolist()
    dr = problem.dst_rack[order].tolist()
    # first fit: the lowest batch that neither the source nor the destination RTSW uses
    # (bit b of used_src[r] / used_dst[r]: RTSW r is taken in batch b)
    used_src = [0] * fabric.num_rtsws
    used_dst = [0] * fabric.num_rtsws
    batch_l = [0] * order.size
    for i, (s_, d_) in enumerate(zip(sr, dr, strict=True)):
        taken = used_src[s_] | used_dst[d_]
        bit = ~taken & (taken + 1)  # the lowest clear bit
        used_src[s_] |= bit
        used_dst[d_] |= bit
        batch_l[i] = bit.bit_length() - 1
    batch = np.array(batch_l, np.int64)
    n_batches = int(batch.max()) + 1
    by_batch = np.argsort(batch, kind="stable")
    cuts = np.searchsorted(batch[by_batch], np.arange(n_batches + 1))
    place(order[by_batch], cuts, load, inv, flows.demand, path, chosen, cand.kernel_args)
    return path, chosen


def core_load(fabric: Fabric, flows: FlowSet, chosen: np.ndarray) -> np.ndarray:
    """Gbps per arc from the switch-to-switch hops `chosen` of the flows' paths (their
    Candidates.all_chosen)."""
    return _arc_sums(fabric, chosen, flows.demand)


def _arc_sums(fabric: Fabric, arcs: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Sum of each row's demand over the arcs of its padded row (-1: none). The padding
    lands in a bin of its own, so every arc adds its rows in the same order as a masked
    bincount would, without building the masked copies."""
    w = np.repeat(demand, arcs.shape[1])
    sums = np.bincount(arcs.reshape(-1) + 1, weights=w, minlength=fabric.num_arcs + 1)[1:]
    return sums.astype(np.float64, copy=False)  # (bincount of no rows gives int64)


@dataclass(frozen=True)
class _Start:
    """What both searches start from: arc capacities (and their inverse, inf for dead
    arcs), the candidates, a copy of the paths, their switch-to-switch arcs and the load
    on them, the rows that may move, and which arcs are switch-to-switch."""

    cap: np.ndarray
    inv: np.ndarray
    cand: Candidates
    path: np.ndarray
    chosen: np.ndarray
    load: np.ndarray
    may: np.ndarray
    core: np.ndarray

    @classmethod
    def of(
        cls,
        problem: Problem,
        path: np.ndarray,
        movable: np.ndarray | None,
        chosen: np.ndarray | None,
    ) -> _Start:
        """From `path` (copied) and, if given, its switch-to-switch arcs `chosen`."""
        cand = problem.candidates
        path = path.copy()
        chosen = cand.all_chosen(path) if chosen is None else chosen
        load = core_load(problem.fabric, problem.flows, chosen)
        may = path >= 0 if movable is None else movable & (path >= 0)
        may &= cand.cls != SAME_RACK
        return cls(problem.arc_capacity, problem.inverse, cand, path, chosen, load, may,
                   problem.core)  # fmt: skip

    def fields(self) -> tuple[np.ndarray, np.ndarray, Candidates, np.ndarray, np.ndarray,
                              np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        return (self.cap, self.inv, self.cand, self.path, self.chosen, self.load, self.may,
                self.core)  # fmt: skip


def local_search(
    problem: Problem,
    path: np.ndarray,
    *,
    movable: np.ndarray | None = None,
    max_tries: int | None = SEARCH_TRIES,
    chosen: np.ndarray | None = None,
) -> np.ndarray:
    """Move flows off the most utilised arc while that strictly improves (max, count at max);
    stop at the first most-utilised arc none of whose flows can move, or after `max_tries`
    flows tried (None: no limit; every move improves, so it ends).
    Only flows with `movable[f]` (default: all routed) may move; `chosen`: the paths'
    switch-to-switch arcs when the search starts where greedy_batched_arcs left them (it
    is updated in place as flows move; else computed). Returns new paths.

    A try scores one flow's candidates with its own load taken off; the flows of the hot arc
    are tried in order (largest first) and the first that can go below the maximum moves;
    the tries counted are those up to and including the move. The moves run compiled
    (kernels.search)."""
    st = _Start.of(problem, path, movable, chosen)
    cap, inv, cand, path, chosen, load, may, core = st.fields()
    fabric, flows = problem.fabric, problem.flows
    demand = flows.demand
    mates = _Mates(fabric, flows, cand)
    mates.fill(cand.cls, path)
    # the arcs that can hold the maximum: switch-to-switch and alive (in ascending order, so
    # the first of equal maxima is the same arc as over all arcs)
    hot_arcs = np.flatnonzero(core & np.isfinite(inv))
    weight = inv[hot_arcs]
    util = load[hot_arcs] * weight  # kept up to date as flows move
    hot_index = np.full(fabric.num_arcs, -1, np.int64)
    hot_index[hot_arcs] = np.arange(hot_arcs.size)
    search(hot_arcs, hot_index, weight, util, may, load, inv, demand, path, chosen,
           cand.kernel_args, mates.kernel_args, -1 if max_tries is None else max_tries,
           _FIRST_BATCH)  # fmt: skip
    return path


# Tries counted at once while no flow of the hot arc can move (then 4x as many): at least
# this many, or one more than the last move took (on the meta-24k spray the move is found
# within the first 14-22 flows of the hot arc, round after round). The batch size only
# changes how tries are counted against the limit, never which flow moves first.
_FIRST_BATCH = 8


# Flows the relief pass tries on other paths (tries as in local_search; flows alike in a
# batch count once). On the meta-24k mix with two links down per pod (1,244 arcs over
# capacity) it drains all it can within 20,684 tries: 4,030 buckets moved, 391 arcs left
# over, each in a cut with no room (docs/profiling.md).
RELIEF_TRIES = 30_000


def relieve_arcs(
    problem: Problem,
    path: np.ndarray,
    *,
    movable: np.ndarray | None = None,
    max_tries: int | None = RELIEF_TRIES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drain switch-to-switch arcs loaded beyond capacity that the MLU search leaves alone
    (it only ever looks at the most utilised arc): the arcs over capacity, most utilised
    first, each until it is within capacity or none of its flows (largest first) has a
    candidate path all of whose arcs stay within capacity with the flow on them. The MLU
    never rises and no arc within capacity goes over; entry mates are respected as in
    local_search (the caller aligns entries and checks tables after). At most `max_tries`
    flows tried (None: no limit). Returns the new paths, their switch-to-switch arcs
    (cand.all_chosen) and the Gbps per arc they put on those (core_load).

    The flows of an arc are scored in batches (8, then 4x as many) on the load before the
    batch; each accepted choice is checked again on the load of the moment before it moves
    (the drain runs compiled: kernels.relieve). Arcs and flows with no room on some hop of
    every candidate are skipped up front (_may_fit); flows alike (_alike) score alike, and
    their tries count once a batch."""
    st = _Start.of(problem, path, movable, None)
    cap, inv, cand, path, chosen, load, may, core = st.fields()
    fabric, flows = problem.fabric, problem.flows
    util = load * np.where(np.isfinite(inv), inv, 0.0)
    over = np.flatnonzero(core & np.isfinite(inv) & (util > 1.0 + REL_TOL))
    if not over.size:
        return path, chosen, load
    over = over[np.argsort(-util[over], kind="stable")]
    demand = flows.demand
    mates = _Mates(fabric, flows, cand)
    mates.fill(cand.cls, path)
    # movable rows on each over-capacity arc, over the initial paths: a move only ever lands
    # on arcs within capacity, which are never drained, so no row needs adding later
    is_over = np.zeros(fabric.num_arcs + 1, bool)  # the last: the -1 padding of `chosen`
    is_over[over] = True
    hit = is_over[chosen] & may[:, None]
    hit &= _may_fit(cand, chosen, cap - load, demand, np.asarray(hit.any(axis=1)))[:, None]
    hit_rows = np.flatnonzero(hit.any(axis=1))  # sorted, distinct: no unique of the pairs
    rows, hops = np.nonzero(hit)
    by_arc = chosen[rows, hops]
    order = np.lexsort((rows, -demand[rows], by_arc))
    rows, by_arc = rows[order], by_arc[order]
    starts = np.searchsorted(by_arc, over)
    ends = np.searchsorted(by_arc, over, side="right")
    alike = _alike(chosen, demand, path, mates.group, hit_rows)
    relieve(over, starts, ends, rows, alike, cap, load, inv, demand, path, chosen,
            cand.kernel_args, mates.kernel_args, -1 if max_tries is None else max_tries,
            _FIRST_BATCH)  # fmt: skip
    return path, chosen, load


# what a command shows while warm_up runs
WARM_UP_STAGE = ("loading the solver's kernels (compiled on the first run: seconds, up to a "
                 "minute on a busy machine; cached after)")


def warm_up() -> None:
    """Compile the solver's kernels (controller.solver.kernels) and the model's the
    certificate runs (controller.model.kernels), or load them from their cache, on a tiny
    instance that runs them all: several seconds the first time on a machine, a fraction of
    a second after. A service calls it at start so its first solve does not pay for it.

    The instance: one pod of 4 racks of one host and 3 CTSWs, rack 1 with one uplink, so
    the maximum is pinned there and rack 2's link is over capacity below it."""
    from controller.model.clos import ClosSpec, build

    fabric = build(ClosSpec(name="warm-up", pods=1, racks_per_pod=4, hosts_per_rack=1,
                            nics_per_host=2, ctsws_per_pod=3))  # fmt: skip
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(1, 1), fabric.rack_link(1, 2)])
    flows = FlowSet.build([0, 1, 4, 5], [2, 3, 6, 7], [300.0, 200.0, 300.0, 150.0])
    problem = Problem(fabric, health, flows)
    greedy_batched_arcs(problem, fixed=np.full(len(flows), UNROUTED))
    path = np.array([0, 0, 1, 1])
    local_search(problem, path)
    relieve_arcs(problem, path)
    arc_csr(Assignment(flows, path).arcs(fabric), flows.demand, fabric.num_arcs)
    # the model's kernels the certificate runs: E-ECMP hashing, max-min rates, parent sums,
    # over rows and over hashed flows walked where needed
    sub, arcs, parent = hashed_arcs("eecmp", fabric, flows, health, 1, 2)
    flow_shares(fabric, health, arcs, sub, parent, num_parents=len(flows),
                weight=np.ones(len(sub)))  # fmt: skip
    hashed = Hashed("eecmp", flows, np.arange(len(flows)), 1, 2)
    flow_shares(fabric, health, arcs[:0], sub.take(np.zeros(0, np.int64)), parent[:0],
                num_parents=len(flows), hashed=hashed)  # fmt: skip
    hashed.crossing(fabric, health, np.ones(fabric.num_arcs, bool))
    load = offered_load(fabric, health, arcs[:0], sub.take(np.zeros(0, np.int64)), hashed)
    flow_shares_crossing(fabric, health, arcs[:0], sub.take(np.zeros(0, np.int64)), parent[:0],
                         num_parents=len(flows), hashed=hashed, load=load,
                         mask=load > health.arc_capacity(fabric))  # fmt: skip


def _alike(
    chosen: np.ndarray, demand: np.ndarray, path: np.ndarray, group: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """An id per flow of `rows` (-1 elsewhere), equal for flows that relieve_arcs scores alike:
    the same arcs, path, demand and entry-mate group (the spray's buckets of one source
    rack and destination share all of them; on the meta-24k mix 4 flows an id)."""
    out = np.full(path.size, -1, np.int64)
    if not rows.size:
        return out
    cols = np.column_stack([chosen[rows], path[rows], group[rows]])
    order = np.lexsort((demand[rows], *cols.T))
    cols, dem = cols[order], demand[rows][order]
    new = np.r_[True, (cols[1:] != cols[:-1]).any(axis=1) | (dem[1:] != dem[:-1])]
    out[rows[order]] = np.cumsum(new) - 1
    return out


def _may_fit(
    cand: Candidates, chosen: np.ndarray, room: np.ndarray, demand: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Of the flows `rows` (a mask), those that could fit elsewhere: at every hop, their own
    arc is within capacity (room >= 0) or some candidate arc at that hop has room for the
    flow. A necessary condition for relieve_arcs's moves, hop by hop (so cheap: a hop has far
    fewer distinct arcs than a flow has paths), that rules out most flows of arcs in a cut
    with no room left."""
    out = np.zeros(rows.size, bool)
    for cls, off in cand.offset.items():
        sel = np.flatnonzero(rows & (cand.cls == cls))
        if not sel.size or not off.shape[1]:
            continue
        ok = np.ones(sel.size, bool)
        for h in range(off.shape[1]):
            own = chosen[sel, h]
            fits = room[own] >= -REL_TOL
            lack = np.flatnonzero(~fits)
            if lack.size:
                base, inv_b = np.unique(cand.base[sel[lack], h], return_inverse=True)
                most = room[base[:, None] + np.unique(off[:, h])[None]].max(axis=1)
                fits[lack] = most[inv_b] >= demand[sel[lack]] - REL_TOL
            ok &= fits
        out[sel] = ok
    return out


# ---- results ------------------------------------------------------------------------------------
def arc_load(fabric: Fabric, assignment: Assignment, arcs: np.ndarray) -> np.ndarray:
    """Gbps per arc (Assignment.link_load) from the assignment's arcs (Assignment.arcs)."""
    return _arc_sums(fabric, arcs, assignment.flows.demand)


def utilisation(fabric: Fabric, health: LinkHealth, assignment: Assignment) -> np.ndarray:
    """Load / alive capacity per arc (inf where a dead arc carries load)."""
    return utilisation_of(assignment.link_load(fabric), health.arc_capacity(fabric))


def utilisation_of(load: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Load / capacity per arc (inf where a dead arc carries load, 0 where it carries none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cap > 0, load / np.where(cap > 0, cap, 1.0), np.where(load > 0, np.inf, 0))


def collided_arcs(fabric: Fabric, health: LinkHealth, assignment: Assignment) -> np.ndarray:
    """Switch-to-switch arcs carrying two or more flows whose total exceeds the capacity."""
    arcs = assignment.arcs(fabric)
    load = _arc_sums(fabric, arcs, assignment.flows.demand)
    return collided_arcs_of(fabric, arcs, load, health.arc_capacity(fabric))


def collided_arcs_of(
    fabric: Fabric, arcs: np.ndarray, load: np.ndarray, cap: np.ndarray
) -> np.ndarray:
    """collided_arcs of the rows whose arcs (Assignment.arcs) are `arcs`, putting `load`
    (Gbps per arc) on arcs of capacity `cap`."""
    core = np.repeat(fabric.link_kind != ACCESS, 2)
    over = core & (load > cap + REL_TOL * np.maximum(cap, 1.0))
    if not over.any():
        return np.zeros(0, np.int64)
    count = np.bincount(arcs.reshape(-1) + 1, minlength=fabric.num_arcs + 1)[1:]
    return np.flatnonzero(over & (count > 1))


@dataclass(frozen=True)
class AssignResult:
    """An assignment and what it costs. Index arrays refer to flows (or arcs)."""

    assignment: Assignment
    mlu: float  # max arc utilisation of the TE-routed flows (ECMP fallback not counted)
    collided_links: np.ndarray = field(repr=False)  # arc ids, see collided_arcs
    churn: np.ndarray = field(repr=False)  # flows whose path differs from `previous`
    fallback_ecmp: np.ndarray = field(repr=False)  # routed, but over the table budget
    unroutable: np.ndarray = field(repr=False)  # no alive path
    method: str
    seconds: float
    # TE entries per node for `assignment` (controller.routes.budget.table_usage), if
    # counted already
    usage: np.ndarray | None = field(default=None, repr=False)
    # no job below the fabric's own routing (controller.solver.certificate); None: not run
    certificate: Certificate | None = None
    # rows its certificate took off their paths, handed back to the fabric's hashing
    handed_back: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)


def _score(problem: Problem, path: np.ndarray) -> tuple:
    """(MLU rounded, collided arcs) of `path`: what best_paths and assign_paths rank by."""
    fabric, health = problem.fabric, problem.health
    a = Assignment(problem.flows, path)
    util = utilisation(fabric, health, a)
    mlu = float(util.max(initial=0.0))
    return round(mlu, 9), int(collided_arcs(fabric, health, a).size)


NO_PREVIOUS = -2  # a flow with no counterpart in the previous assignment


def _previous_paths(flows: FlowSet, previous: Assignment) -> np.ndarray:
    """Previous path of every flow with the same (source NIC, destination NIC), else
    NO_PREVIOUS."""
    row = match_pairs(flows, previous.flows)
    out = np.full(len(flows), NO_PREVIOUS, np.int64)
    out[row >= 0] = previous.path[row[row >= 0]]
    return out


def _alive_paths(cand: Candidates, cap: np.ndarray, path: np.ndarray, ok: np.ndarray) -> np.ndarray:
    chosen = cand.all_chosen(np.where(path >= 0, path, UNROUTED))
    alive = np.where(chosen >= 0, cap[np.maximum(chosen, 0)] > 0, True).all(axis=1)
    return alive & (path >= 0) & ok


def best_paths(
    problem: Problem,
    *,
    guidance: Guidance | None = None,
    search_tries: int | None = SEARCH_TRIES,
    stop: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, str]:
    """Best of colouring (when it applies) and greedy, each followed by local search (up to
    `search_tries` flows tried) and entry alignment; returns (paths, method). `stop`: see
    `greedy`."""
    flows = problem.flows
    options: list[tuple[tuple, int, np.ndarray, str]] = []
    coloured = colour_assign(problem)
    if coloured is not None:
        path = coloured.assignment.path.copy()
        method = "colouring"
        if coloured.failed.size:
            fixed = path.copy()
            path = greedy(problem, fixed=fixed, stop=stop)
            method = "colouring+greedy"
        path = _finish(problem, path, search_tries)
        options.append((_score(problem, path), 0, path, method))
    elif len(flows):
        # Mixed demands: colour the largest class (line-rate ring flows, typically) so that
        # no two of them share a rack link, then place the smaller flows around them.
        big = np.flatnonzero(flows.demand == flows.demand.max())
        part = colour_assign(problem.take(big))
        if part is not None and big.size < len(flows):
            fixed = np.full(len(flows), UNROUTED, np.int64)
            fixed[big] = part.assignment.path
            path = greedy(problem, fixed=fixed, guidance=guidance, stop=stop)
            path = _finish(problem, path, search_tries)
            options.append((_score(problem, path), 0, path, "colouring+greedy"))
    path = greedy(problem, guidance=guidance, stop=stop)
    path = _finish(problem, path, search_tries)
    method = "guided-greedy" if guidance is not None else "greedy"
    options.append((_score(problem, path), 1, path, method))
    best = min(options, key=lambda o: (o[0], o[1]))
    return best[2], best[3]


def _finish(
    problem: Problem,
    path: np.ndarray,
    search_tries: int | None,
    movable: np.ndarray | None = None,
) -> np.ndarray:
    """Local search, then entry alignment (the moved flows yield where keys conflict)."""
    path = local_search(problem, path, movable=movable, max_tries=search_tries)
    priority = None if movable is None else movable.astype(np.float64)
    return align_entries(problem.fabric, problem.flows, path, priority)


def assign_paths(
    problem: Problem,
    *,
    previous: Assignment | None = None,
    move_threshold: float = 0.0,
    table_budget: TableBudget | None = None,
    lp_guidance: Guidance | None = None,
    search_tries: int | None = SEARCH_TRIES,
    stop: Callable[[], bool] | None = None,
) -> AssignResult:
    """Integral paths for all of the problem's flows.

    With `previous`, flows with the same (source NIC, destination NIC) stay on their previous
    path while it is alive, new or broken flows are placed around them; a fresh solve replaces
    that only if its MLU is lower by more than `move_threshold` (relative). `table_budget`
    caps TE entries per switch (controller.routes.budget.fit_tables); flows that do not fit
    stay on ECMP. `search_tries` bounds each local search (see local_search). `stop`: see
    `greedy` (asked inside its passes).
    """
    start = time.perf_counter()
    fabric, health, flows = problem.fabric, problem.health, problem.flows
    path, method = best_paths(problem, guidance=lp_guidance, search_tries=search_tries,
                              stop=stop)  # fmt: skip
    churn = np.zeros(0, np.int64)
    if previous is not None:
        prev = _previous_paths(flows, previous)
        keep = _alive_paths(problem.candidates, problem.arc_capacity, prev, problem.access_alive)
        fixed = np.where(keep, prev, UNROUTED)
        kept = greedy(problem, fixed=fixed, guidance=lp_guidance, stop=stop)
        kept = _finish(problem, kept, search_tries, movable=~keep)
        fresh_mlu = _score(problem, path)[0]
        kept_mlu = _score(problem, kept)[0]
        if not fresh_mlu < kept_mlu * (1.0 - move_threshold) - REL_TOL:
            path, method = kept, "kept+" + method
        matched = prev != NO_PREVIOUS
        churn = np.flatnonzero(matched & (prev != path))
    unroutable = np.flatnonzero(path == UNROUTED)
    fallback = np.zeros(0, np.int64)
    if table_budget is not None:
        fitted = fit_tables(fabric, Assignment(flows, path), table_budget).path
        fallback = np.flatnonzero((fitted == UNROUTED) & (path != UNROUTED))
        path = fitted
    assignment = Assignment(flows, path)
    mlu = float(utilisation(fabric, health, assignment).max(initial=0.0))
    return AssignResult(
        assignment=assignment,
        mlu=mlu,
        collided_links=collided_arcs(fabric, health, assignment),
        churn=churn,
        fallback_ecmp=fallback,
        unroutable=unroutable,
        method=method,
        seconds=time.perf_counter() - start,
    )
