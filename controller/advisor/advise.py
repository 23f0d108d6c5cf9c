"""Placement advice: where a new job runs best, and how good a proposed placement is.

Search (a handful of candidates, never all subsets):
    free hosts   = hosts in no running job, not in the request's avoid list, with every NIC
                   link up (a NIC cut off, or its RTSW drained, stalls any job there)
    rack health  = alive uplink capacity / built uplink capacity of the rack, times the
                   least NIC link health of its free hosts (down and degraded uplinks, and a
                   degraded NIC, make a rack less attractive among equally full racks; in
                   a rack, hosts with every NIC at full speed are taken first)
    single pod   for each of the three best-fitting pods (the least free hosts that still
                 fit, keeping large holes for large jobs): "pack" (whole free racks first,
                 then the fullest partial racks: fewest racks; healthier first among
                 equals), "healthy" (healthiest racks first), "first-fit" (racks in order);
                 in the best-fitting pod also "pack ... seed S", ties between equally full
                 and healthy racks broken by a permutation seeded by `seed`
    cross pod    only when no single pod fits (or same_pod="any"): fewest pods (most free
                 first), then same-size pod sets with the most aggregation headroom, and
                 one set of one more pod if fewer than three exist; packed as above (and
                 where one pod fits, "split": the hosts shared evenly over the set's pods,
                 since packed the first pod holds the whole job); and
                 "whole racks": the fewest pods whose wholly free racks hold the job, most
                 whole racks first, so that no rack is shared with a running job (a shared
                 rack's uplinks already carry the other job's fixed paths)
Scoring: the running jobs' flows keep their TE paths (`current`, the controller's live
assignment, or solved once per call when not given); the new job's flows are placed around
them (greedy + local search on the new flows only), and the whole fabric is simulated.
Ranked by the new job's bus-bandwidth fraction, then the worst drop it causes for running
jobs, cross-pod traffic, racks spanned, host ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations

import numpy as np

from controller.errors import AdvisorError, JobError
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import PATTERNS, Job, check_job, jobs_flows
from controller.model.paths import CROSS_POD, flow_class
from controller.model.rates import simulate
from controller.solver import Problem, SolveOptions, solve
from controller.solver.greedy import greedy, local_search

SAME_POD = ("require", "prefer", "any")
CANDIDATE_ID = "candidate"


@dataclass(frozen=True)
class Request:
    """A job to place: size (GPUs, or hosts), parallelism, traffic pattern and constraints.

    Give `gpus` or `hosts` (hosts * GPUs per host); when both are given they must agree.
    """

    gpus: int = 0
    dp: int = 0  # 0: gpus / (pp * tp)
    pp: int = 1
    tp: int = 1
    pattern: str = "ring"
    same_pod: str = "prefer"  # require | prefer | any
    avoid_hosts: tuple[int, ...] = ()
    top: int = 3
    channels: int = 1
    demand_gbps: float | None = None  # None: the line rate of the job's slowest NIC
    hosts: int = 0


@dataclass(frozen=True)
class Score:
    """Predicted figures for one placement."""

    hosts: tuple[int, ...]
    pods: int
    racks: int
    cross_pod_gbps: float  # the new job's traffic that crosses the aggregation layer
    te_mlu: float  # TE MLU with the job added
    bound: float  # lower bound on MLU with the job added
    new_job_busbw: float  # the new job's bus-bandwidth fraction; NaN: it has no flows
    worst_existing_delta: float  # min over running jobs of (after - before) busbw
    strategy: str = ""
    rank: int = 0  # 1 = best, in `advise` output; 0 when scored alone
    mlu_before: float = 0.0  # TE MLU of the running jobs alone, scored the same way
    note: str = ""  # why the new job's busbw is capped by its own hosts (a NIC down or slow)
    # what a NIC of the job is planned to send, Gbps: its demand, at most its slowest NIC's
    # line rate (so on a fabric of mixed NICs, candidates differ in Gbps at the same busbw)
    planned_gbps: float = 0.0

    @property
    def mlu_ratio(self) -> float:
        return self.te_mlu / self.bound if self.bound > 0 else 1.0

    @property
    def new_job_gbps(self) -> float:
        """The new job's bus bandwidth per NIC in Gbps: busbw x `planned_gbps` (NaN: no
        flows)."""
        return self.new_job_busbw * self.planned_gbps

    def rank_key(self) -> tuple[float, float, float, float, int, tuple[int, ...]]:
        """Most Gbps a NIC first (on a fabric of one NIC speed: the highest busbw), then the
        least harm to running jobs, the least cross-pod traffic, the fewest racks."""
        busbw = 1.0 if math.isnan(self.new_job_busbw) else self.new_job_busbw
        return (-round(busbw * self.planned_gbps, 6), -round(busbw, 9),
                -round(self.worst_existing_delta, 9), round(self.cross_pod_gbps, 6),
                self.racks, self.hosts)  # fmt: skip


@dataclass
class _Context:
    """Per-call state: the running jobs routed once."""

    fabric: Fabric
    health: LinkHealth
    jobs: list[Job]
    flows: FlowSet
    path: np.ndarray
    busbw: dict[str, float] = field(default_factory=dict)
    mlu: float = 0.0  # of the running jobs alone


def _gpus(fabric: Fabric, request: Request) -> int:
    """The request's GPU count, from `gpus` or `hosts`."""
    n = fabric.gpus_per_host
    if request.hosts < 0:
        raise AdvisorError(f"hosts: {request.hosts} must be positive")
    if request.hosts and request.gpus and request.hosts * n != request.gpus:
        raise AdvisorError(
            f"hosts: {request.hosts} hosts hold {request.hosts * n} GPUs, not gpus {request.gpus}"
        )
    return request.gpus or request.hosts * n


def _hosts_needed(fabric: Fabric, request: Request) -> int:
    n = fabric.gpus_per_host
    gpus = _gpus(fabric, request)
    if gpus <= 0 or gpus % n:
        raise AdvisorError(f"gpus: {gpus} is not a positive multiple of {n} per host")
    if min(request.dp, request.pp, request.tp) < 0 or request.pp == 0 or request.tp == 0:
        raise AdvisorError(
            f"dp*pp*tp: dp {request.dp}, pp {request.pp}, tp {request.tp} must be positive"
        )
    if not request.dp and gpus % (request.pp * request.tp):  # no dp can make up the rest
        raise AdvisorError(f"dp*pp*tp: pp {request.pp} x tp {request.tp} = "
                           f"{request.pp * request.tp} does not divide gpus {gpus}")  # fmt: skip
    dp = request.dp or gpus // (request.pp * request.tp)
    if dp * request.pp * request.tp != gpus:
        raise AdvisorError(
            f"dp*pp*tp: {dp}*{request.pp}*{request.tp} = {dp * request.pp * request.tp} "
            f"must equal gpus {gpus}"
        )
    if request.pattern not in PATTERNS:
        raise AdvisorError(f"pattern: {request.pattern!r} is not one of {', '.join(PATTERNS)}")
    if request.same_pod not in SAME_POD:
        raise AdvisorError(f"same_pod: {request.same_pod!r} is not one of {', '.join(SAME_POD)}")
    bad = [h for h in request.avoid_hosts if not 0 <= h < fabric.num_hosts]
    if bad:
        raise AdvisorError(f"avoid_hosts: host id {bad[0]} is not in fabric {fabric.name!r}")
    if request.top < 1:
        raise AdvisorError(f"top: {request.top} must be at least 1")
    hosts = gpus // n
    if hosts <= fabric.num_hosts:  # else the free-host count is the error to report
        try:  # tp within a host, pipeline stages against hosts, channels, demand
            check_job(fabric, _job(fabric, request, range(hosts)))
        except JobError as err:
            raise AdvisorError(str(err)) from None
    return hosts


def _job(fabric: Fabric, request: Request, hosts: Sequence[int]) -> Job:
    dp = request.dp or _gpus(fabric, request) // max(request.pp * request.tp, 1)
    return Job(id=CANDIDATE_ID, hosts=tuple(int(h) for h in hosts), dp=dp, pp=request.pp,
               tp=request.tp, collectives=(request.pattern,), channels=request.channels,
               demand_gbps=request.demand_gbps)  # fmt: skip


def _kept_paths(flows: FlowSet, current: Assignment) -> np.ndarray:
    """`current`'s path for each flow it holds, matched on (job id, source NIC, destination
    NIC) in order of occurrence; UNROUTED for flows it does not hold."""
    cur = current.flows
    if cur.job_ids == flows.job_ids and all(
        np.array_equal(getattr(cur, a), getattr(flows, a)) for a in ("job", "src_nic", "dst_nic")
    ):
        return current.path.copy()
    held: dict[tuple[str, int, int], list[int]] = {}
    keys = zip(cur.job.tolist(), cur.src_nic.tolist(), cur.dst_nic.tolist(), strict=True)
    for i, (j, src, dst) in reversed(list(enumerate(keys))):
        held.setdefault((cur.job_ids[j], src, dst), []).append(i)
    out = np.full(len(flows), UNROUTED, np.int64)
    keys = zip(flows.job.tolist(), flows.src_nic.tolist(), flows.dst_nic.tolist(), strict=True)
    for f, (j, src, dst) in enumerate(keys):
        stack = held.get((flows.job_ids[j], src, dst))
        if stack:
            out[f] = current.path[stack.pop()]
    return out


def _context(
    fabric: Fabric, health: LinkHealth, jobs: Sequence[Job], current: Assignment | None
) -> _Context:
    """Route the running jobs once: keep `current` where it has their flows, route the rest
    greedily around it; with no `current`, a quick TE solve (no LP)."""
    flows = jobs_flows(fabric, list(jobs))
    if current is None:
        # flows stay whole (qps=1): scoring places new flows around one path per flow
        opts = SolveOptions(lp="never", qps=1)
        res = solve(fabric, health, flows, options=opts)
        path = res.assignment.path.copy()
    else:
        path = _kept_paths(flows, current)
        if (path == UNROUTED).any():
            path = greedy(Problem(fabric, health, flows), fixed=path)
    ctx = _Context(fabric, health, list(jobs), flows, path)
    if len(flows):
        alone = simulate(fabric, health, Assignment(flows, path))
        ctx.busbw, ctx.mlu = alone.job_busbw_fraction, float(alone.mlu)
    return ctx


def _taken_hosts(fabric: Fabric, jobs: Sequence[Job], avoid: Sequence[int],
                 health: LinkHealth | None = None) -> list[tuple[str, np.ndarray]]:  # fmt: skip
    """Why hosts are not free, each reason a mask of hosts: not usable (the inventory lacks
    it, or a NIC is uncabled), in a job, avoided, a NIC link down (or its RTSW drained)."""
    unusable = np.ones(fabric.num_hosts, dtype=bool)
    unusable[fabric.usable_hosts] = False
    in_job = np.zeros(fabric.num_hosts, dtype=bool)
    for job in jobs:
        in_job[list(job.hosts)] = True
    avoided = np.zeros(fabric.num_hosts, dtype=bool)
    avoided[list(avoid)] = True
    out = [("not usable (a NIC without a cable)", unusable), ("in a job", in_job),
           ("avoided", avoided)]  # fmt: skip
    if health is not None:
        nic_up = health.factor[: fabric.num_access_links].reshape(fabric.num_hosts, -1) > 0
        out.append(("with a NIC link down or its RTSW drained", np.asarray(~nic_up.all(axis=1))))
    return out


def _free_hosts(fabric: Fabric, jobs: Sequence[Job], avoid: Sequence[int],
                health: LinkHealth | None = None) -> np.ndarray:  # fmt: skip
    free = np.ones(fabric.num_hosts, dtype=bool)
    for _, taken in _taken_hosts(fabric, jobs, avoid, health):
        free &= ~taken
    return free


def _not_free(fabric: Fabric, jobs: Sequence[Job], avoid: Sequence[int],
              health: LinkHealth) -> str:  # fmt: skip
    """Why the other hosts are not free, counted by the first reason of each (for an
    error)."""
    left, reasons = np.ones(fabric.num_hosts, dtype=bool), []
    for why, taken in _taken_hosts(fabric, jobs, avoid, health):
        if n := int((left & taken).sum()):
            reasons.append(f"{n} {why}")
        left &= ~taken
    return f" ({'; '.join(reasons)})" if reasons else ""


def _host_health(fabric: Fabric, health: LinkHealth) -> np.ndarray:
    """Per host, the least health factor of its NIC links (1: every NIC at full speed; a
    NIC degraded to half makes every flow of a job there run at half)."""
    factor = health.factor[: fabric.num_access_links].reshape(fabric.num_hosts, -1)
    usable = fabric.installed[: fabric.num_access_links].reshape(fabric.num_hosts, -1)
    return np.asarray(np.where(usable, factor, 1.0).min(axis=1))


def _rack_health(fabric: Fabric, health: LinkHealth, free: np.ndarray) -> np.ndarray:
    """Per rack: alive / built uplink capacity (all of its RTSWs' installed uplinks), times
    the least NIC health of its free hosts (a rack whose free hosts are all healthy is
    healthier than one with a degraded NIC among them)."""
    links = fabric.rack_uplinks().reshape(fabric.num_racks, -1)
    alive = health.arc_capacity(fabric)[fabric.up(links)].sum(axis=1)
    built = (fabric.capacity[fabric.up(links)] * fabric.installed[links]).sum(axis=1)
    hosts = np.where(free, _host_health(fabric, health), 1.0)
    nics = hosts.reshape(fabric.num_racks, -1).min(axis=1)
    return np.asarray(alive / np.maximum(built, 1e-300) * nics)


def _agg_headroom(fabric: Fabric, health: LinkHealth, jobs: Sequence[Job]) -> np.ndarray:
    """Per pod: 1 - (running jobs' cross-pod Gbps leaving it) / (alive agg uplink Gbps)."""
    if fabric.atsws_per_plane == 0:
        return np.ones(fabric.pods)
    links = fabric.agg_link(
        np.arange(fabric.pods)[:, None, None, None],
        np.arange(fabric.ctsws_per_pod)[None, :, None, None],
        np.arange(fabric.atsws_per_plane)[None, None, :, None],
        np.arange(fabric.agg_links)[None, None, None, :],
    ).reshape(fabric.pods, -1)
    alive = health.arc_capacity(fabric)[fabric.up(links)].sum(axis=1)
    load = np.zeros(fabric.pods)
    if jobs:
        flows = jobs_flows(fabric, list(jobs))
        cross = flow_class(fabric, flows.src_nic, flows.dst_nic) == CROSS_POD
        src_pod = fabric.pod_of_rack(fabric.rack_of_nic(flows.src_nic))
        np.add.at(load, src_pod[cross], flows.demand[cross])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(alive > 0, 1.0 - load / alive, -np.inf)


def _pod_sets(
    fabric: Fabric, health: LinkHealth, jobs: Sequence[Job], pod_free: dict[int, int], n: int
) -> list[tuple[str, list[int]]]:
    """Up to three sets of the fewest pods holding n free hosts, each listed most free first.

    The first takes the pods with the most free hosts; the others are the sets of the same
    size whose tightest pod has the most aggregation headroom left by the running jobs; when
    fewer than three exist, one set of one more pod (most headroom) is offered too, so the
    scorer can compare spreading the job's cross-pod traffic over more aggregation uplinks.
    """
    by_free = sorted(pod_free, key=lambda p: (-pod_free[p], p))
    size = next(k for k in range(1, len(by_free) + 1)
                if sum(pod_free[p] for p in by_free[:k]) >= n)  # fmt: skip
    first = by_free[:size]
    out = [("", first)]
    headroom = _agg_headroom(fabric, health, jobs)
    pool = by_free[: size + 4]
    sets = [list(c) for c in combinations(pool, size) if sum(pod_free[p] for p in c) >= n]
    sets.sort(key=lambda c: (-min(headroom[p] for p in c), -sum(pod_free[p] for p in c), c))
    for c in sets:
        if len(out) == 3:
            break
        chosen = sorted(c, key=lambda p: (-pod_free[p], p))
        if chosen != first:
            out.append((" (agg headroom)", chosen))
    if len(out) < 3 and size < len(by_free):
        wider = sorted(combinations(by_free[: size + 4], size + 1),
                       key=lambda c: (-min(headroom[p] for p in c), c))  # fmt: skip
        out.append((" (one more pod)", sorted(wider[0], key=lambda p: (-pod_free[p], p))))
    return out


def _shares(room: Sequence[int], n: int) -> list[int]:
    """n hosts shared as evenly as `room` (free hosts per pod, in order) allows."""
    shares = [0] * len(room)
    left = n
    while left:
        open_ = [i for i in range(len(room)) if shares[i] < room[i]]
        each = max(1, left // len(open_))
        for i in open_:
            k = min(each, room[i] - shares[i], left)
            shares[i] += k
            left -= k
            if not left:
                break
    return shares


def _take(racks: Sequence[int], by_rack: dict[int, list[int]], n: int) -> tuple[int, ...]:
    out: list[int] = []
    for r in racks:
        out.extend(by_rack[r][: n - len(out)])
        if len(out) == n:
            return tuple(out)
    return ()


def candidates(
    fabric: Fabric, health: LinkHealth, jobs: Sequence[Job], request: Request, seed: int = 1
) -> list[tuple[str, tuple[int, ...]]]:
    """Hierarchy-aware candidate host sets (name, hosts), deterministic, de-duplicated."""
    n = _hosts_needed(fabric, request)
    free = _free_hosts(fabric, jobs, request.avoid_hosts, health)
    if free.sum() < n:
        need = f"{n} free host{'s' * (n != 1)}"
        asked = (f"hosts: {n} hosts" if request.hosts else
                 f"gpus: {n * fabric.gpus_per_host} GPUs need {need}")  # fmt: skip
        raise AdvisorError(f"{asked}, only {int(free.sum())} are free"
                           + _not_free(fabric, jobs, request.avoid_hosts, health))
    rack_of = fabric.rack_of_host(np.arange(fabric.num_hosts))
    host_ok = _host_health(fabric, health)
    by_rack: dict[int, list[int]] = {}  # healthy hosts first: a rack partly taken keeps the rest
    for h in sorted(np.flatnonzero(free).tolist(), key=lambda h: (-host_ok[h], h)):
        by_rack.setdefault(int(rack_of[h]), []).append(h)
    rack_ok = _rack_health(fabric, health, free)
    pod_free = {p: 0 for p in range(fabric.pods)}
    for r, rack_hosts in by_rack.items():
        pod_free[int(fabric.pod_of_rack(r))] += len(rack_hosts)
    fitting = sorted((free_n, p) for p, free_n in pod_free.items() if free_n >= n)
    out: list[tuple[str, tuple[int, ...]]] = []

    def racks_of(pods: Sequence[int]) -> list[int]:
        return [r for r in sorted(by_rack) if int(fabric.pod_of_rack(r)) in pods]

    def pack_key(r: int) -> tuple[float, float, int]:
        return (-len(by_rack[r]), -rack_ok[r], r)

    def in_pod_order(pods: list[int], racks: list[int]) -> list[int]:
        """Grouped by pod in the order of `pods` (a ring crosses each pod boundary once),
        packed within each pod."""
        return sorted(racks, key=lambda r: (pods.index(int(fabric.pod_of_rack(r))), *pack_key(r)))

    def pod_text(pods: Sequence[int]) -> str:  # the operator's pod names, else the indices
        return ",".join(fabric.pod_name(p) or str(p) for p in sorted(pods))

    tie = np.random.default_rng(seed).permutation(fabric.num_racks)
    for i, (_, p) in enumerate(fitting[:3]):
        racks, pod = racks_of([p]), pod_text([p])
        out.append((f"pack pod {pod}", _take(sorted(racks, key=pack_key), by_rack, n)))
        if i == 0:
            seeded = sorted(racks, key=lambda r: (-len(by_rack[r]), -rack_ok[r], tie[r]))
            out.append((f"pack pod {pod} seed {seed}", _take(seeded, by_rack, n)))
        healthy = sorted(racks, key=lambda r: (-rack_ok[r], -len(by_rack[r]), r))
        out.append((f"healthy pod {pod}", _take(healthy, by_rack, n)))
        out.append((f"first-fit pod {pod}", _take(racks, by_rack, n)))
    if not fitting or request.same_pod == "any":
        if request.same_pod == "require" and not fitting:
            raise AdvisorError(f"same_pod: no single pod has {n} free host{'s' * (n != 1)}")
        for label, chosen in _pod_sets(fabric, health, jobs, pod_free, n):
            name = f"pack pods {pod_text(chosen)}{label}"
            out.append((name, _take(in_pod_order(chosen, racks_of(chosen)), by_rack, n)))
            if fitting and len(chosen) > 1:  # packed, one pod holds it all: split it too
                shares = _shares([pod_free[p] for p in chosen], n)
                split = tuple(h for p, k in zip(chosen, shares, strict=True)
                              for h in _take(in_pod_order([p], racks_of([p])), by_rack, k))
                out.append((f"split pods {pod_text(chosen)}{label}", split))
        whole = {r for r, hs in by_rack.items() if len(hs) == fabric.hosts_per_rack}
        pod_whole = {p: 0 for p in range(fabric.pods)}
        for r in whole:
            pod_whole[int(fabric.pod_of_rack(r))] += fabric.hosts_per_rack
        chosen, held = [], 0
        for p in sorted(pod_whole, key=lambda p: (-pod_whole[p], p)):
            if held >= n or not pod_whole[p]:
                break
            chosen.append(p)
            held += pod_whole[p]
        if held >= n:
            racks = in_pod_order(chosen, [r for r in racks_of(chosen) if r in whole])
            name = f"whole racks pods {pod_text(chosen)}"
            out.append((name, _take(racks, by_rack, n)))
    seen: set[tuple[int, ...]] = set()
    unique: list[tuple[str, tuple[int, ...]]] = []
    for name, hosts in out:  # a set of hosts once, whatever order a strategy took them in
        key = tuple(sorted(hosts))
        if hosts and key not in seen:
            seen.add(key)
            unique.append((name, hosts))
    return unique


def _score(ctx: _Context, request: Request, hosts: tuple[int, ...], strategy: str) -> Score:
    f = ctx.fabric
    job = _job(f, request, hosts)
    new = jobs_flows(f, [job])
    flows = FlowSet.concat([ctx.flows, new])
    fixed = np.concatenate([ctx.path, np.full(len(new), UNROUTED, np.int64)])
    problem = Problem(f, ctx.health, flows)
    path = greedy(problem, fixed=fixed)
    movable = np.zeros(len(flows), bool)
    movable[len(ctx.flows) :] = True
    path = local_search(problem, path, movable=movable)
    assignment = Assignment(flows, path)
    report = simulate(f, ctx.health, assignment)
    after = report.job_busbw_fraction
    deltas = [after.get(k, v) - v for k, v in ctx.busbw.items()]
    cross = problem.cls[len(ctx.flows) :] == CROSS_POD
    host_arr = np.asarray(hosts)
    racks = np.unique(f.rack_of_host(host_arr))
    return Score(
        hosts=tuple(int(h) for h in hosts),
        pods=int(np.unique(f.pod_of_rack(racks)).size),
        racks=int(racks.size),
        cross_pod_gbps=float(new.demand[cross].sum()),
        te_mlu=float(report.mlu),
        bound=problem.bound().value,
        # NaN: the job exchanges nothing across the fabric (one host; a pipeline of one stage)
        new_job_busbw=after.get(CANDIDATE_ID, 1.0 if len(new) else float("nan")),
        worst_existing_delta=float(min(deltas, default=0.0)),
        strategy=strategy,
        mlu_before=ctx.mlu,
        note=_nic_note(f, ctx.health, host_arr),
        planned_gbps=min(job.demand(f), job.line_rate(f)),
    )


def _nic_note(fabric: Fabric, health: LinkHealth, hosts: np.ndarray) -> str:
    """Why the hosts themselves cap the job: the first with a NIC link down (its flows
    have no path: the job stalls) or else the slowest NIC link (a flow runs at most at
    its speed); "" when every NIC is at full speed."""
    nic = _host_health(fabric, health)[hosts]
    if nic.size == 0 or nic.min() >= 1.0:
        return ""
    worst = int(hosts[int(np.argmin(nic))])
    if nic.min() <= 0.0:
        return (f"{fabric.host_name(worst)} has a NIC link down (or its RTSW drained): its "
                "flows have no path, the job stalls")  # fmt: skip
    return (f"{fabric.host_name(worst)} has a NIC link at {nic.min():.0%} of its speed: the "
            "job runs at most at that")  # fmt: skip


def advise(
    fabric: Fabric,
    health: LinkHealth,
    jobs: Sequence[Job],
    request: Request,
    seed: int = 1,
    *,
    current: Assignment | None = None,
) -> list[Score]:
    """Ranked candidate placements (best first, `rank` 1, 2, ...), at most `request.top`.

    Ranking: new job's busbw fraction (desc), worst running-job busbw change (the smaller
    the drop the better), the new job's cross-pod Gbps (asc), racks spanned (asc), host ids.
    `current` is the controller's assignment of the running jobs' flows (e.g. the last
    `SolveResult.assignment`); passing it skips re-solving them, the bulk of the latency.
    `seed` (1, as `tectl advise` offline and the service) breaks ties in one candidate.
    """
    options = candidates(fabric, health, jobs, request, seed)
    ctx = _context(fabric, health, jobs, current)
    scored = sorted((_score(ctx, request, hosts, name) for name, hosts in options),
                    key=Score.rank_key)  # fmt: skip
    return [replace(s, rank=i + 1) for i, s in enumerate(scored[: request.top])]


def score_many(
    fabric: Fabric,
    health: LinkHealth,
    jobs: Sequence[Job],
    placements: Sequence[Sequence[int]],
    request: Request,
    *,
    current: Assignment | None = None,
) -> list[Score]:
    """Figures for placements a scheduler proposes, in the order given (`current` as in
    `advise`)."""
    gpus = _hosts_needed(fabric, request) * fabric.gpus_per_host
    busy = set().union(*(set(j.hosts) for j in jobs)) if jobs else set()
    for i, hosts in enumerate(placements):
        bad = [h for h in hosts if not 0 <= h < fabric.num_hosts]
        if bad:
            raise AdvisorError(f"placements[{i}]: host id {bad[0]} is not in the fabric")
        taken = sorted(busy.intersection(hosts))
        if taken:
            raise AdvisorError(
                f"placements[{i}]: {fabric.host_name(taken[0])} is already in a running job"
            )
        avoided = sorted(set(request.avoid_hosts).intersection(hosts))
        if avoided:
            raise AdvisorError(f"placements[{i}]: {fabric.host_name(avoided[0])} is in the "
                               "request's avoid_hosts")  # fmt: skip
        if len(hosts) * fabric.gpus_per_host != gpus:
            raise AdvisorError(f"placements[{i}]: {len(hosts)} hosts do not hold {gpus} GPUs")
        if len(set(hosts)) != len(hosts):
            raise AdvisorError(f"placements[{i}]: a host is listed twice")
        try:
            jobs_flows(fabric, [_job(fabric, request, hosts)])
        except JobError as err:
            raise AdvisorError(f"placements[{i}]: {err}") from None
    ctx = _context(fabric, health, jobs, current)
    return [_score(ctx, request, tuple(h), "proposed") for h in placements]


def score(
    fabric: Fabric,
    health: LinkHealth,
    jobs: Sequence[Job],
    hosts: Sequence[int],
    request: Request,
    *,
    current: Assignment | None = None,
) -> Score:
    """Figures for one proposed placement (`current` as in `advise`)."""
    return score_many(fabric, health, jobs, [hosts], request, current=current)[0]


def first_fit_hosts(fabric: Fabric, jobs: Sequence[Job], n_hosts: int) -> tuple[int, ...]:
    """The lowest-numbered free hosts: what a topology-blind scheduler does."""
    free = np.flatnonzero(_free_hosts(fabric, jobs, ()))
    if free.size < n_hosts:
        raise AdvisorError(f"only {free.size} free hosts, {n_hosts} needed")
    return tuple(int(h) for h in free[:n_hosts])


def random_hosts(fabric: Fabric, jobs: Sequence[Job], n_hosts: int, seed: int) -> tuple[int, ...]:
    """Free hosts drawn at random (seeded)."""
    free = np.flatnonzero(_free_hosts(fabric, jobs, ()))
    if free.size < n_hosts:
        raise AdvisorError(f"only {free.size} free hosts, {n_hosts} needed")
    pick = np.random.default_rng(seed).choice(free, size=n_hosts, replace=False)
    return tuple(int(h) for h in np.sort(pick))
