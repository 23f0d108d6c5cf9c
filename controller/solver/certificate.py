"""The certificate: no job slower under TE than under the fabric's own routing.

The reference is the routing the fabric runs without TE: its default hashing (`reference`,
E-ECMP or capacity-aware WCMP, controller.model.hashing) with `qps` queue pairs per flow.
Hashing is random, so the reference value of job J is defined as the mean, over the K hash
seeds seed, seed+1, ..., seed+K-1, of J's bus bandwidth (the min over its flows of rate /
demand) under controller.model.rates.simulate (striped model by default). The TE value is
defined the same way on the data plane the assignment makes (controller.model.dataplane):
TE rows on their paths, rows without a path walked through the entries and the same seeded
hashes; with no path-less row it does not depend on the seed. A routing is certified when
TE(J) >= ref(J) * (1 - 1e-9) for every job J. Every figure is deterministic.

Shortcut (exact). Under max-min fairness with demand caps a flow none of whose arcs is
offered more than its capacity gets its demand: were it below, its bottleneck arc would be
saturated, yet the rates there sum to less than the demands, which fit. So a job none of
whose rows crosses such an arc, under any of the K seeds, has TE(J) = 1 >= ref(J), and is
not compared; when no job is at risk the reference is not computed at all.

Parts (exact). Jobs that can share no arc on any routing are in different parts
(controller.model.coupling). A part with no TE row and no flow to a host a TE row goes to
(the entries match on the destination host) rides the defaults in the TE data plane exactly
as in the reference, and max-min rates within a part depend on its flows only: its jobs are
at their reference value (`alike_jobs`) and are not simulated. The rest is certified alone;
the MLU is per seed the larger of its plane's and the reference load of the parts left out.

Fallback. When some jobs fail, the rows of their flows that are below the job's reference
value (share = mean over the seeds of rate / demand), together with every row sharing a
source NIC and destination host with one (the unit a source RTSW entry steers), are handed
back to hashing: their path becomes UNROUTED, so they have no TE entry and ride the defaults
(controller.model.dataplane walks them exactly as the reference hashes them), and the check
runs again on every job (moving one flow changes others). If those flows all ride the
defaults already, the TE rows on an over-capacity arc they cross are handed back; if there
are none, all TE rows. After FLOW_ROUNDS rounds (or as many as there are jobs, if fewer) a
failing job is handed back whole (and a crowding row's job with it), and in round MAX_ROUNDS
every TE row is: every round hands back at least one TE row, so there are at most
MAX_ROUNDS + 1 rounds whatever the job count; with every row handed back no entry remains
and the data plane is the reference itself, row for row and hash for hash, so the loop ends
certified.

MLU. The certificate counts the MLU of the data plane it certified (the mean over the seeds
where rows ride the defaults). With `mlu_later`, a routing with no TE entry at all (the
reference itself, certified by construction) leaves that count to the caller, after the push
(`reference_mlu`): for a pod-wide all-to-all it is 19M QP walks per seed, most of the time
from a job put to its routes applied.

`compare`: further hashings reported (worst ratio, jobs below) but not enforced: handing
back only reproduces the routing the fabric actually runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from controller.errors import InputError, Superseded
from controller.model.assignment import UNROUTED, Assignment
from controller.model.coupling import coupled_jobs
from controller.model.dataplane import Carried, carried, overrides_of
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet, distinct
from controller.model.hashing import HASHINGS, Hashed, Overrides, hashed_load
from controller.model.health import LinkHealth
from controller.model.paths import MAX_HOPS
from controller.model.rates import (
    MODELS,
    REL_TOL,
    flow_shares,
    flow_shares_crossing,
    offered_load,
    stalled_rows,
)

DEFAULT_HASHES = 4  # K: hash seeds the reference is the mean over
# fallback rounds (each simulates the TE plane under every seed): flows are handed back for
# the first FLOW_ROUNDS, failing jobs whole after, and everything from round MAX_ROUNDS on
FLOW_ROUNDS = 4
MAX_ROUNDS = 10
# QPs a seed walks below which the seeds run one after the other in the caller's thread: a
# thread's start and join (~0.1-0.5 ms, more on a busy machine) outweigh a walk this small
PARALLEL_WORK = 100_000
_NO_ARCS = np.zeros((0, MAX_HOPS), np.int64)
_NO_ROWS = np.zeros(0, np.int64)
log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class CertifyOptions:
    """What a routing is certified against (module docstring)."""

    reference: str = "eecmp"  # the fabric's default routing: "eecmp" or "wcmp"
    hashes: int = DEFAULT_HASHES  # K
    seed: int = 1  # first hash seed
    model: str = "striped"
    compare: tuple[str, ...] = ()  # other hashings to report against
    enabled: bool = True
    # the reaction path: when the check would take more than this much work (input flows x
    # QPs x seeds), return the routing as it is with a certificate `pending` instead of
    # checking it now (a full certification is to follow, off the reaction path); None: never
    # deferred. Work, not seconds: the outcome depends only on the inputs
    defer_above: int | None = None
    # `compare` hashings are simulated only up to this many subflows (input flows x QPs):
    # they are reported, never enforced, and each seed holds ~100 bytes a subflow
    compare_above: int = 4_000_000
    # threads the K hashed references run on at once (None: as many as cores, at most K);
    # the figures do not depend on it
    workers: int | None = None
    # a routing with no TE entry (the reference itself): its MLU not counted here but left
    # to the caller (`reference_mlu`, after the push); the certificate says `mlu_pending`
    mlu_later: bool = False
    # simulate only the parts TE can touch (module docstring, "Parts"); False: every job,
    # for checking that the shortcut changes nothing
    parts: bool = True

    def __post_init__(self) -> None:
        for name in (self.reference, *self.compare):
            if name not in HASHINGS:
                raise InputError(f"unknown reference {name!r}; known: {', '.join(HASHINGS)}")
        if self.workers is not None and self.workers < 1:
            raise InputError(f"workers must be >= 1, got {self.workers}")
        if self.hashes < 1:
            raise InputError(f"hashes must be >= 1, got {self.hashes}")
        if self.model not in MODELS:
            raise InputError(f"model must be one of {', '.join(MODELS)}, got {self.model!r}")

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.hashes))


DEFAULT = CertifyOptions()  # E-ECMP, K = 4 seeds from 1, striped model


@dataclass(frozen=True)
class Certificate:
    """The outcome of a certification: plain values, for reports, Status and /metrics."""

    reference: str
    seeds: tuple[int, ...]
    qps: int
    jobs: int  # jobs with flows
    jobs_checked: int  # jobs compared in full (the rest provably get their demand)
    passed: bool  # no job below the reference (always, once the fallback has run)
    # per hashing (the reference first): min over compared jobs of TE / reference (None:
    # no job needed comparing), and the jobs below it
    worst_ratio: dict[str, float | None] = field(default_factory=dict)
    below: dict[str, int] = field(default_factory=dict)
    fallback_jobs: dict[str, str] = field(default_factory=dict)  # job id -> why
    fallback_flows: int = 0  # input flows handed back to hashing
    rounds: int = 0
    seconds: float = 0.0
    # MLU of the data plane certified (TE rows and rows on the defaults), mean over the
    # seeds when rows ride the defaults
    mlu: float = 0.0
    # hashed reference routings computed (0: no job at risk, or the reference was memoised)
    reference_runs: int = 0
    # QP rows of the data plane certified that ride the defaults (0: every row has a path)
    walked: int = 0
    # deferred (CertifyOptions.defer_above): not checked yet; `passed` is
    # False until a full certificate replaces this one
    pending: bool = False
    # hashings of `compare` not computed: more subflows than CertifyOptions.compare_above
    not_compared: tuple[str, ...] = ()
    # the MLU (NaN here) is counted later by the caller: the routing is the reference
    # (CertifyOptions.mlu_later), or `alike_jobs` ride it and their load is still to count
    # (`with_reference_mlus` fills it in)
    mlu_pending: bool = False
    # jobs certified without simulation: their parts (controller.model.coupling) hold no TE
    # row and no flow to a host a TE row steers to, so they ride the reference alike in both
    # planes (module docstring, "Parts"); not in `jobs_checked`
    alike_jobs: tuple[int, ...] = ()
    # jobs with a flow that has no alive path: 0 under every routing, never compared
    stalled: int = 0
    # per seed, the MLU of the parts simulated (one value: it did not depend on the seed),
    # when `alike_jobs` were not: the MLU is per seed the larger of it and theirs
    mlu_seeds: tuple[float, ...] = ()
    # per job index, when the fallback loop had jobs at risk: the reference values it
    # compared against (the floors a second attempt raises jobs to, controller.solver.
    # solve) and the values certified (1 where no row was at risk); NaN where not simulated
    reference_values: np.ndarray | None = field(default=None, repr=False, compare=False)
    job_values: np.ndarray | None = field(default=None, repr=False, compare=False)
    # the same for each hashing of `compare` computed (reported, not enforced)
    compared_values: dict[str, np.ndarray] = field(default_factory=dict, repr=False,
                                                   compare=False)  # fmt: skip

    def with_mlu(self, mlu: float) -> Certificate:
        """This certificate with its MLU counted."""
        return replace(self, mlu=mlu, mlu_pending=False)

    def with_reference_mlus(self, rest: list[float]) -> Certificate:
        """This certificate with its MLU counted from `rest`, per seed the MLU of the
        reference routing of the jobs it did not simulate (all of them when the routing is
        the reference; else `alike_jobs`): the parts share no arc, so per seed the MLU is
        the larger of theirs and the simulated parts' (`mlu_seeds`)."""
        done = list(self.mlu_seeds) * (len(rest) if len(self.mlu_seeds) == 1 else 1)
        if not done:
            done = [0.0] * len(rest)
        return self.with_mlu(float(np.mean([max(a, b) for a, b in zip(done, rest, strict=True)])))

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "reference": self.reference, "seeds": list(self.seeds), "qps": self.qps,
            "jobs": self.jobs, "jobs_checked": self.jobs_checked, "passed": self.passed,
            "worst_ratio": dict(self.worst_ratio), "below": dict(self.below),
            "fallback_jobs": dict(self.fallback_jobs), "fallback_flows": self.fallback_flows,
            "rounds": self.rounds, "seconds": self.seconds, "mlu": self.mlu,
            "reference_runs": self.reference_runs, "walked": self.walked,
            "pending": self.pending, "not_compared": list(self.not_compared),
            "mlu_pending": self.mlu_pending, "jobs_alike": len(self.alike_jobs),
            "jobs_stalled": self.stalled,
        }  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """Plain numbers (NaN where a ratio was not needed)."""
        out = {
            "certificate_passed": float(self.passed),
            "certificate_pending": float(self.pending),
            "certificate_jobs": float(self.jobs),
            "certificate_jobs_checked": float(self.jobs_checked),
            "certificate_fallback_jobs": float(len(self.fallback_jobs)),
            "certificate_fallback_flows": float(self.fallback_flows),
            "certificate_rounds": float(self.rounds),
            "certificate_seconds": self.seconds,
        }
        for name, value in self.worst_ratio.items():
            out[f"certificate_worst_ratio_{name}"] = float("nan") if value is None else value
            out[f"certificate_below_{name}"] = float(self.below.get(name, 0))
        return out

    def summary(self) -> str:
        """One line for an operator."""
        ratios = ", ".join(
            f"{name} {'>= 1 (no job at risk)' if r is None else f'{r:.4g}'}"
            for name, r in self.worst_ratio.items()
        )
        fell = (
            f"; {len(self.fallback_jobs)} job(s) handed back to {self.reference} "
            f"({self.fallback_flows} flows): "
            + ", ".join(f"{j} ({why})" for j, why in sorted(self.fallback_jobs.items())[:5])
            + (" ..." if len(self.fallback_jobs) > 5 else "")
            if self.fallback_jobs
            else ""
        )
        if not self.jobs and not self.pending:
            return (f"certificate: passed against {self.reference}: no job with flows, nothing "
                    f"to compare; {self.seconds:.3f} s")  # fmt: skip
        if self.pending:
            return (f"certificate: pending against {self.reference}: {self.jobs:,} jobs with "
                    "flows not checked yet; it is certified in full next, off the reaction "
                    "path")  # fmt: skip
        if self.alike_jobs:
            fell += (f"; {len(self.alike_jobs):,} job(s) ride {self.reference} alike in both "
                     "(no TE row in their parts: not simulated)")
        if self.stalled:
            fell += (f"; {self.stalled:,} job(s) stalled under any routing (a flow with no "
                     "alive path: 0 here and in the reference), not compared")
        if self.not_compared:
            fell += (f"; {', '.join(self.not_compared)} not compared (more subflows than "
                     "CertifyOptions.compare_above)")  # fmt: skip
        return (
            f"certificate: {'passed' if self.passed else 'FAILED'} against {self.reference} "
            f"({len(self.seeds)} seeds, {self.qps} QPs); {self.jobs_checked:,} of {self.jobs:,} "
            f"jobs with flows compared; worst TE/reference: {ratios}{fell}; "
            f"{self.seconds:.3f} s"
        )


def input_flows(flows: FlowSet, parent: np.ndarray) -> FlowSet:
    """The input flows the rows are part of: endpoints and job of a row, demands summed."""
    n = int(parent.max()) + 1 if parent.size else 0
    first = np.full(n, -1, np.int64)
    first[parent[::-1]] = np.arange(parent.size)[::-1]
    demand = np.bincount(parent, weights=flows.demand, minlength=n)
    return FlowSet(flows.src_nic[first], flows.dst_nic[first], demand, flows.job[first],
                   flows.job_ids)  # fmt: skip


def row_parents(flows: FlowSet) -> np.ndarray:
    """Row -> input flow when not given: a whole row is a flow, the buckets of one
    (src NIC, dst NIC, job) are one."""
    key = np.stack([flows.src_nic, flows.dst_nic, flows.job,
                    np.where(flows.qp == ALL_QPS, np.arange(len(flows)), -1)], axis=1)  # fmt: skip
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse.reshape(-1)].astype(np.int64)


def job_values(share: np.ndarray, job: np.ndarray, num_jobs: int) -> np.ndarray:
    """Per job, the min share over its routed flows (NaN: none routed): its busbw fraction."""
    out = np.full(num_jobs, np.inf)
    ok = np.isfinite(share)
    np.minimum.at(out, job[ok], share[ok])
    return np.where(np.isfinite(out), out, np.nan)


# Reference values of the last few inputs: a repair and its follow-up, or a re-solve on the
# same health and flows, certify against the same reference. Keyed by a digest of every
# input the values depend on, so a hit returns exactly what computing them would.
_MEMO: OrderedDict[str, np.ndarray] = OrderedDict()
_MEMO_SIZE = 8
_MEMO_LOCK = threading.Lock()  # the service solves and repairs on more than one thread
# values being computed, by the same key: a second asker waits for them instead of
# computing them again (a prefetch and the certificate that needs them)
_IN_FLIGHT: dict[str, Future[np.ndarray]] = {}


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str(part.dtype).encode() + str(part.shape).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(repr(part).encode())
        h.update(b"|")
    return h.hexdigest()


def _claim(key: str) -> tuple[Future[np.ndarray], Future[np.ndarray] | None]:
    """(a future of the values under `key`: memoised or being computed, None) or, when
    neither, (a new future, the same future): the caller computes them (`fill`)."""
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
            done: Future[np.ndarray] = Future()
            done.set_result(hit)
            return done, None
        if key in _IN_FLIGHT:
            return _IN_FLIGHT[key], None
        mine = _IN_FLIGHT[key] = Future()
        return mine, mine


class _Reference:
    """Per-job reference values per hashing, computed once, on first need."""

    def __init__(self, fabric: Fabric, health: LinkHealth, flows: FlowSet, qps: int,
                 num_jobs: int, opts: CertifyOptions,
                 stop: Callable[[], bool] | None = None) -> None:  # fmt: skip
        self.fabric, self.health, self.flows, self.qps = fabric, health, flows, qps
        self.num_jobs, self.opts, self.stop = num_jobs, opts, stop
        self._values: dict[str, np.ndarray] = {}
        self.computed = 0  # hashed routings simulated (0: none, or all from the memo)

    def values(self, kind: str) -> np.ndarray:
        if kind in self._values:
            return self._values[kind]
        key = self.key(kind)
        while True:
            hit, mine = _claim(key)
            if mine is not None:
                values = self.fill(kind, key, mine)
                break
            try:
                values = hit.result()
                break
            except Superseded:  # the solve computing them was stopped; this one was not
                continue
        self._values[kind] = values
        return values

    def key(self, kind: str) -> str:
        """The memo's key of the values of `kind`: every input they depend on."""
        f = self.flows
        return _digest(self.fabric.fingerprint, self.fabric.capacity, self.health.factor,
                       f.src_nic, f.dst_nic, f.demand, f.job, self.num_jobs, self.qps, kind,
                       self.opts.seeds, self.opts.model)  # fmt: skip

    def fill(self, kind: str, key: str, mine: Future[np.ndarray]) -> np.ndarray:
        """Compute the values `mine` was claimed for, hand them to whoever waits, and stop
        being in flight."""
        try:
            values = self._computed(kind, key)  # memoised there
        except BaseException as exc:
            with _MEMO_LOCK:
                del _IN_FLIGHT[key]
            mine.set_exception(exc)
            raise
        with _MEMO_LOCK:
            del _IN_FLIGHT[key]
        mine.set_result(values)
        return values

    def _computed(self, kind: str, key: str) -> np.ndarray:
        """The values of `kind`, simulated on every seed and memoised under `key`."""
        def run(seed: int) -> np.ndarray:
            # every flow hashed, walked where needed rather than held as a row per QP
            everyone = Hashed(kind, self.flows, np.arange(len(self.flows)), seed, self.qps)
            share = flow_shares(self.fabric, self.health, _NO_ARCS, FlowSet.empty(), _NO_ROWS,
                                num_parents=len(self.flows), model=self.opts.model,
                                hashed=everyone)  # fmt: skip
            return job_values(share, self.flows.job, self.num_jobs)

        runs = _each_seed(run, self.opts, stop=self.stop,
                          work=len(self.flows) * self.qps)  # the mean is in seed order
        self.computed += len(runs)
        values = self._values[kind] = np.mean(runs, axis=0)
        values.setflags(write=False)
        with _MEMO_LOCK:
            _MEMO[key] = values
            while len(_MEMO) > _MEMO_SIZE:
                _MEMO.popitem(last=False)
        return values


def prefetch(fabric: Fabric, health: LinkHealth, flows: FlowSet, *, qps: int,
             options: CertifyOptions | None = None,
             stop: Callable[[], bool] | None = None,
             steered: np.ndarray | None = None) -> None:
    """Start simulating the reference values of the input `flows` on a background thread,
    so that certifying a routing of them (after a solve that takes about as long) finds them
    ready or in flight instead of starting then. The certificate is the same either way;
    nothing is started when it is disabled or would be deferred; `stop` (the solve's) ends
    it before a seed, as it would the certificate. `steered`: the flows that may get TE
    rows (certify); only their parts' reference is simulated, as the certificate given the
    same will ask for (none when given and empty)."""
    opts = options or CertifyOptions()
    work = len(flows) * qps * len(opts.seeds)
    if not opts.enabled or not len(flows) or (
            opts.defer_above is not None and work > opts.defer_above):  # fmt: skip
        return
    num_jobs = max(len(flows.job_ids), int(flows.job.max(initial=-1)) + 1, 1)
    if steered is not None and opts.parts:
        if not np.asarray(steered, bool).any():
            return
        alike = _alike(fabric, flows, num_jobs, np.zeros(0, np.int64), steered)
        if alike.any():
            flows = flows.take(np.flatnonzero(~alike[flows.job]))
    # one seed after another: the caller's placement keeps the other core busy
    ref = _Reference(fabric, health, flows, qps, num_jobs, replace(opts, workers=1), stop)
    key = ref.key(opts.reference)
    _, mine = _claim(key)  # claimed here, so a certificate from now on waits for it
    if mine is None:
        return  # memoised, or already being computed

    claimed = mine

    def run() -> None:
        try:
            ref.fill(opts.reference, key, claimed)
        except Exception:  # handed to whoever waits (the certificate reports it), or stopped
            log.debug("reference prefetch ended early", exc_info=True)

    try:
        threading.Thread(target=run, name="certificate-prefetch", daemon=True).start()
    except RuntimeError as exc:  # no thread to be had: the certificate computes them
        with _MEMO_LOCK:
            del _IN_FLIGHT[key]
        claimed.set_exception(exc)


def certify(
    fabric: Fabric,
    health: LinkHealth,
    assignment: Assignment,
    *,
    qps: int,
    parent: np.ndarray | None = None,
    options: CertifyOptions | None = None,
    inputs: FlowSet | None = None,
    stop: Callable[[], bool] | None = None,
    steered: np.ndarray | None = None,
    shown: bool = False,
) -> tuple[Assignment, Certificate]:
    """Certify `assignment` (rows; `parent[i]`: row i's input flow) against the reference,
    handing failing jobs back to hashing until it holds (module docstring). Returns the
    assignment to install (the input one when nothing fell back) and its certificate.
    `inputs`: the input flows `parent` indexes, when the caller has them (their demands as
    given; else rebuilt from the rows, the demands summed, which may differ in the last bit
    and so miss a prefetch of the reference made from the inputs).

    `stop` is asked before each seed's walk: when it says so, Superseded is raised.
    `steered` (bool per input flow): the flows that may hold TE rows, when the caller knows
    more than the rows say (a solve: every flow of a job not left to hashing whole); the
    parts of those are simulated, as `prefetch` given the same simulates their reference.
    `shown`: each fallback round logged at INFO, not DEBUG (a solve's progress; a sweep's
    thousands of repairs stay quiet)."""
    opts = options or CertifyOptions()
    start = time.perf_counter()
    rows = assignment.flows
    if opts.defer_above is not None and len(rows) * qps * len(opts.seeds) > opts.defer_above:
        # the reaction path on a large fabric: not checked now (a global solve follows)
        jobs = np.count_nonzero(np.bincount(rows.job))  # counted, not sorted: O(rows)
        return assignment, Certificate(
            reference=opts.reference, seeds=opts.seeds, qps=qps, jobs=int(jobs),
            jobs_checked=0, passed=False, seconds=time.perf_counter() - start, pending=True,
        )  # fmt: skip
    parent = row_parents(rows) if parent is None else np.asarray(parent, np.int64)
    flows = input_flows(rows, parent) if inputs is None else inputs
    job_ids = rows.job_ids
    num_jobs = max(len(job_ids), int(rows.job.max(initial=-1)) + 1, 1)
    others = [k for k in opts.compare if k != opts.reference]
    skipped = others if len(flows) * qps > opts.compare_above else []
    others = [k for k in others if k not in skipped]
    if not (assignment.path != UNROUTED).any():
        # no TE entry at all: the data plane is the reference itself, row for row and hash
        # for hash, so every job is at exactly its reference value; only the MLU is counted
        # (and the other hashings compared, when asked)
        has = np.bincount(flows.job, minlength=num_jobs) > 0
        stalled = stalled_jobs(fabric, health, flows, num_jobs)
        worst: dict[str, float | None] = {opts.reference: 1.0}
        below: dict[str, int] = {opts.reference: 0}
        if others:
            ref = _Reference(fabric, health, flows, qps, num_jobs, opts, stop)
            te = ref.values(opts.reference)
            for kind in others:
                worst[kind], below[kind] = _compared(te, ref.values(kind), has & ~stalled)
        later = opts.mlu_later
        mlu = float("nan") if later else reference_mlu(fabric, health, flows, qps, opts, stop)
        return assignment, Certificate(
            reference=opts.reference, seeds=opts.seeds, qps=qps, jobs=int(has.sum()),
            jobs_checked=int(has.sum()) if others else 0, passed=True, worst_ratio=worst,
            below=below, rounds=0, seconds=time.perf_counter() - start, mlu=mlu,
            walked=int(np.where(rows.qp == ALL_QPS, qps, 1).sum()),
            not_compared=tuple(skipped), mlu_pending=later, stalled=int(stalled.sum()),
        )  # fmt: skip
    has_flows = np.bincount(flows.job, minlength=num_jobs) > 0
    hosts = rows.dst_host(fabric)[assignment.path != UNROUTED]
    alike = _alike(fabric, flows, num_jobs, hosts, steered) if opts.parts else \
        np.zeros(num_jobs, bool)
    if not alike.any():
        done = _checked(fabric, health, assignment, parent, flows, num_jobs, qps, opts, others,
                        stop, int(has_flows.sum()), shown)  # fmt: skip
        path, rest_mlus = done.path, None
    else:
        # the parts with no TE row and no flow to a host one steers to are routed alike
        # in both planes: simulated in neither (module docstring, "Parts")
        keep_flows = np.flatnonzero(~alike[flows.job])
        keep_rows = np.flatnonzero(~alike[rows.job])
        index = np.full(len(flows), -1, np.int64)
        index[keep_flows] = np.arange(keep_flows.size)
        part = Assignment(rows.take(keep_rows), assignment.path[keep_rows])
        done = _checked(fabric, health, part, index[parent[keep_rows]],
                        flows.take(keep_flows), num_jobs, qps, opts, others, stop,
                        int(has_flows.sum()), shown)  # fmt: skip
        path = assignment.path.copy()
        path[keep_rows] = done.path
        rest = flows.take(np.flatnonzero(alike[flows.job]))
        rest_mlus = None if opts.mlu_later else reference_mlus(fabric, health, rest, qps,
                                                                opts, stop)  # fmt: skip
    changed = not np.array_equal(path, assignment.path)
    out = Assignment(rows, path) if changed else assignment
    handed = distinct(parent[(path == UNROUTED) & (assignment.path != UNROUTED)])
    alike_jobs = tuple(np.flatnonzero(alike).tolist())
    cert = Certificate(
        reference=opts.reference, seeds=opts.seeds, qps=qps, jobs=int(has_flows.sum()),
        jobs_checked=done.checked, passed=done.below[opts.reference] == 0,
        worst_ratio=done.worst, below=done.below, fallback_jobs=done.fallback,
        fallback_flows=int(handed.size), rounds=done.rounds,
        seconds=time.perf_counter() - start, mlu=float(np.mean(done.mlus)),
        reference_runs=done.reference_runs,
        walked=int(np.where(rows.qp == ALL_QPS, qps, 1)[path == UNROUTED].sum()),
        not_compared=tuple(skipped), alike_jobs=alike_jobs,
        stalled=int(stalled_jobs(fabric, health, flows, num_jobs).sum()),
        mlu_seeds=tuple(done.mlus) if alike_jobs else (),
        reference_values=done.base, job_values=done.te, compared_values=done.others,
    )  # fmt: skip
    if alike_jobs:
        cert = replace(cert, mlu=float("nan"), mlu_pending=True)
        if rest_mlus is not None:
            cert = cert.with_reference_mlus(rest_mlus)
    return out, cert


def _alike(fabric: Fabric, flows: FlowSet, num_jobs: int, hosts: np.ndarray,
           steered: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """bool [num_jobs]: the jobs with flows in parts (controller.model.coupling) holding no
    flow to one of `hosts` (those TE rows go to) nor to a host a `steered` flow goes to:
    routed alike in the TE plane and the reference (module docstring, "Parts"). The one
    rule `certify` and `prefetch` both apply, so a prefetch given the same `steered`
    simulates the very flows the certificate asks for."""
    dst = flows.dst_host(fabric)
    if steered is not None:
        hosts = np.concatenate([hosts, dst[np.asarray(steered, bool)]])
    has = np.bincount(flows.job, minlength=num_jobs) > 0
    return has & ~coupled_jobs(fabric, flows, num_jobs, np.isin(dst, hosts))


@dataclass(frozen=True)
class _Checked:
    """What the fallback loop of `certify` ends with, on the rows it was given."""

    path: np.ndarray
    checked: int  # jobs compared in full
    worst: dict[str, float | None]
    below: dict[str, int]
    fallback: dict[str, str]
    rounds: int
    mlus: list[float]  # per seed (one when the last plane did not depend on the seed)
    reference_runs: int
    base: np.ndarray | None = None  # per job, the reference values (None: none at risk)
    te: np.ndarray | None = None  # per job, the values certified
    others: dict[str, np.ndarray] = field(default_factory=dict)  # per job, per `compare`


def _checked(
    fabric: Fabric,
    health: LinkHealth,
    assignment: Assignment,
    parent: np.ndarray,
    flows: FlowSet,
    num_jobs: int,
    qps: int,
    opts: CertifyOptions,
    others: list[str],
    stop: Callable[[], bool] | None,
    jobs: int,
    shown: bool = False,
) -> _Checked:
    """The fallback loop (module docstring) on `assignment`'s rows, whose input flows are
    `flows` (`parent[i]`: row i's); `jobs`: the jobs with flows of the whole routing (its
    round count, as if every part were simulated)."""
    rows = assignment.flows
    job_ids = rows.job_ids
    ref = _Reference(fabric, health, flows, qps, num_jobs, opts, stop)
    cap = health.arc_capacity(fabric)
    walked = int(np.where(rows.qp == ALL_QPS, qps, 1).sum())  # QPs a seed's plane walks
    has_flows = np.bincount(flows.job, minlength=num_jobs) > 0
    # a job with a flow that has no alive path is 0 under every routing, the reference's
    # too: never compared (its other flows' shares say nothing of it), never handed back
    stalled = stalled_jobs(fabric, health, flows, num_jobs)
    unit_key = rows.src_nic * np.int64(fabric.num_hosts) + rows.dst_host(fabric)
    path = assignment.path.copy()
    fallback: dict[str, str] = {}
    checked = np.zeros(num_jobs, bool)
    te = np.ones(num_jobs)
    rounds = 0
    whole_jobs = False  # after `jobs` rounds of flows, whole jobs are handed back
    mlus: list[float] = []
    while True:
        rounds += 1
        current = assignment if rounds == 1 else Assignment(rows, path.copy())
        te_rows = path != UNROUTED
        deterministic = bool(te_rows.all())
        seeds = opts.seeds[:1] if deterministic else opts.seeds
        overrides = None if deterministic else overrides_of(fabric, current)
        def loaded(seed: int, current: Assignment = current,
                   overrides: Overrides | None = overrides) -> _Plane:  # fmt: skip
            plane = carried(fabric, health, current, parent, kind=opts.reference, seed=seed,
                            qps=qps, overrides=overrides, expand=False)  # fmt: skip
            return _Plane.of(fabric, health, plane, cap, num_jobs, num_parents=len(flows),
                             model=opts.model)  # fmt: skip

        planes = _each_seed(loaded, opts, seeds, stop, walked)
        at_risk = np.logical_or.reduce([p.at_risk for p in planes]) & ~stalled
        hot = [p.over for p in planes]
        mlus = [p.mlu for p in planes]
        checked |= at_risk
        share = np.ones(len(flows))
        if not at_risk.any():
            te = np.ones(num_jobs)
            break

        def shared(i: int, planes: list[_Plane] = planes) -> np.ndarray:
            p = planes[i]
            if p.share is not None:  # simulated with its walk: a job was at risk there
                return p.share
            return flow_shares(fabric, health, p.plane.arcs, p.plane.flows, p.plane.parent,
                               num_parents=len(flows), weight=p.plane.weight,
                               model=opts.model, hashed=p.plane.hashed, load=p.load)  # fmt: skip

        shares = _each_seed(shared, opts, tuple(range(len(planes))), stop, walked)
        share = np.mean(shares, axis=0)
        te = np.mean([job_values(x, flows.job, num_jobs) for x in shares], axis=0)
        te = np.where(at_risk, te, 1.0)
        base = ref.values(opts.reference)
        failing = at_risk & (te < base * (1 - REL_TOL))
        if not failing.any():
            break
        whole_jobs |= rounds > min(jobs, FLOW_ROUNDS)
        low = np.isin(flows.job, np.flatnonzero(failing))
        if not whole_jobs:
            low &= ~(share >= base[flows.job] * (1 - REL_TOL))  # the flows below their job's
        mine = low[parent] & te_rows
        why = "{ratio:.4g} x " + opts.reference
        if rounds >= MAX_ROUNDS:
            # bounded: a mix where every round leaves some job below ends in a few seconds
            # with the reference, not after a round per job (each a simulation of the plane)
            mine = te_rows
            why = f"round {MAX_ROUNDS}: everything back to " + opts.reference
        elif not mine.any():
            # the failing flows ride the defaults already: hand back who crowds them
            mine = _crowding(fabric, health, rows, path, [p.plane for p in planes], hot,
                             low) & te_rows  # fmt: skip
            why = "shares an over-capacity link with a job below " + opts.reference
            if mine.any() and whole_jobs:
                mine = np.isin(rows.job, rows.job[mine]) & te_rows
            if not mine.any():
                mine = te_rows
                why = "last resort: everything back to " + opts.reference
        units = np.isin(unit_key, unit_key[mine]) & te_rows
        lowest = float(np.min(te[failing] / np.maximum(base[failing], 1e-300)))
        log.log(logging.INFO if shown else logging.DEBUG,
                "certificate round %d: %d job(s) below %s, %s TE row(s) handed back (%s)",
                rounds, int(failing.sum()), opts.reference, f"{int(units.sum()):,}",
                why.format(ratio=lowest))  # fmt: skip
        for j in np.unique(rows.job[units]).tolist():
            name = job_ids[j] if j < len(job_ids) else f"job{j}"
            ratio = te[j] / base[j] if base[j] > 0 else float("inf")
            fallback.setdefault(name, why.format(ratio=ratio))
        path[units] = UNROUTED
    kinds = (opts.reference, *others)
    worst: dict[str, float | None] = {}
    below: dict[str, int] = {}
    need = checked & has_flows
    for kind in kinds:
        if not need.any():
            worst[kind], below[kind] = None, 0
            continue
        worst[kind], below[kind] = _compared(te, ref.values(kind), need)
    floors = np.where(stalled, 0.0, ref.values(opts.reference)) if checked.any() else None
    values = np.where(has_flows, np.where(stalled, 0.0, te), np.nan) if checked.any() else None
    # a stalled job is 0 under every routing, the compared hashings too (their simulation
    # leaves the flow with no path out, as it does the reference's)
    compared = ({kind: np.where(stalled, 0.0, ref.values(kind)) for kind in others}
                if need.any() else {})  # fmt: skip
    return _Checked(path, int(need.sum()), worst, below, fallback, rounds, mlus, ref.computed,
                    floors, values, compared)  # fmt: skip


def stalled_jobs(fabric: Fabric, health: LinkHealth, flows: FlowSet, num_jobs: int) -> np.ndarray:
    """bool [num_jobs]: the jobs with a flow that has no alive path (0 under any routing)."""
    out = np.zeros(num_jobs, bool)
    out[flows.job[stalled_rows(fabric, health.arc_capacity(fabric), flows)]] = True
    return out


def _compared(te: np.ndarray, base: np.ndarray, jobs: np.ndarray) -> tuple[float | None, int]:
    """(least TE / reference over `jobs` with both values, None where none; jobs below the
    reference by more than the tolerance)."""
    ok = jobs & np.isfinite(te) & np.isfinite(base) & (base > 0)
    ratio = te[ok] / base[ok]
    return (float(ratio.min()) if ratio.size else None,
            int((te[ok] < base[ok] * (1 - REL_TOL)).sum()))  # fmt: skip


def reference_mlu(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, qps: int, opts: CertifyOptions,
    stop: Callable[[], bool] | None = None,
) -> float:
    """MLU of the reference routing of `flows` (input flows), the mean over the seeds
    (offered load only, without a row per QP in memory)."""
    return float(np.mean(reference_mlus(fabric, health, flows, qps, opts, stop)))


def reference_mlus(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, qps: int, opts: CertifyOptions,
    stop: Callable[[], bool] | None = None,
) -> list[float]:
    """`reference_mlu` per seed, in seed order."""
    cap = health.arc_capacity(fabric)

    def mlu(seed: int) -> float:
        load = hashed_load(opts.reference, fabric, flows, health, seed, qps)
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(cap > 0, load / np.where(cap > 0, cap, 1.0),
                            np.where(load > 0, np.inf, 0.0))  # fmt: skip
        return float(util.max(initial=0.0))

    return _each_seed(mlu, opts, stop=stop, work=len(flows) * qps)


def _each_seed(run: Callable[[int], T], opts: CertifyOptions,
               seeds: tuple[int, ...] | None = None,
               stop: Callable[[], bool] | None = None,
               work: int | None = None) -> list[T]:  # fmt: skip
    """`run` for every seed (`opts.seeds` unless given), in seed order, on up to
    `opts.workers` threads (the compiled loops release the GIL), or in this thread when a
    seed's `work` (QPs walked) is under PARALLEL_WORK: starting and joining threads would
    cost more than they save (the same values either way). `stop` is asked before each
    seed (Superseded when it says so: the certificate is no longer wanted)."""
    seeds = opts.seeds if seeds is None else seeds
    if stop is not None:
        plain = run

        def run(seed: int) -> T:
            if stop():
                raise Superseded("certificate stopped: its inputs were superseded")
            return plain(seed)

    workers = min(len(seeds), opts.workers or os.cpu_count() or 1)
    if workers <= 1 or (work is not None and work < PARALLEL_WORK):
        return [run(seed) for seed in seeds]
    with ThreadPoolExecutor(workers, thread_name_prefix="certificate") as pool:
        return list(pool.map(run, seeds))


@dataclass(frozen=True)
class _Plane:
    """A carried plane of one seed with its offered load, the arcs offered more than their
    capacity, its MLU, the jobs with a row or QP on one of those, and, where hashed QPs
    ride the plane and some arc is over, every input flow's share (flow_shares): the QPs'
    crossing is read from that simulation, which the at-risk jobs need anyway."""

    plane: Carried
    load: np.ndarray
    over: np.ndarray
    mlu: float
    at_risk: np.ndarray
    share: np.ndarray | None = None

    @classmethod
    def of(cls, fabric: Fabric, health: LinkHealth, plane: Carried, cap: np.ndarray,
           num_jobs: int, *, num_parents: int, model: str) -> _Plane:  # fmt: skip
        """`num_parents`: the input flows the plane's rows and hashed flows belong to."""
        load = offered_load(fabric, health, plane.arcs, plane.flows, plane.hashed)
        over = load > cap * (1 + REL_TOL) + REL_TOL
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(cap > 0, load / np.where(cap > 0, cap, 1.0),
                            np.where(load > 0, np.inf, 0.0))  # fmt: skip
        at_risk = np.zeros(num_jobs, bool)
        hit = ((plane.arcs >= 0) & over[np.maximum(plane.arcs, 0)]).any(axis=1)
        at_risk[plane.flows.job[hit]] = True
        share = None
        if plane.hashed is not None and over.any():
            # some flow crosses an over arc, so some job is at risk and every seed's shares
            # are wanted: simulated now, the hashed QPs' crossing read from the same walk
            share, crossed = flow_shares_crossing(
                fabric, health, plane.arcs, plane.flows, plane.parent, num_parents=num_parents,
                hashed=plane.hashed, load=load, mask=over, weight=plane.weight, model=model,
            )  # fmt: skip
            at_risk[plane.hashed.flows.job[crossed]] = True
        return cls(plane, load, over, float(util.max(initial=0.0)), at_risk, share)


def _crowding(
    fabric: Fabric,
    health: LinkHealth,
    rows: FlowSet,
    path: np.ndarray,
    planes: list[Carried],
    hot: list[np.ndarray],
    low: np.ndarray,
) -> np.ndarray:
    """TE rows on an over-capacity arc that a carried row of a `low` input flow crosses."""
    te = np.flatnonzero(path != UNROUTED)
    arcs = Assignment(rows.take(te), path[te]).arcs(fabric)
    crowded = np.zeros(fabric.num_arcs, bool)
    for plane, over in zip(planes, hot, strict=True):
        a = plane.arcs[low[plane.parent]]
        if plane.hashed is not None:  # the hashed QPs of low flows, walked again
            which = np.flatnonzero(low[plane.hashed.parent])
            a = np.concatenate([a, plane.hashed.arcs_of(fabric, health, which)[0]])
        a = a[a >= 0]
        crowded[a[over[a]]] = True
    out = np.zeros(len(rows), bool)
    out[te] = (np.where(arcs >= 0, crowded[np.maximum(arcs, 0)], False)).any(axis=1)
    return out
