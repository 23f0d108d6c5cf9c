"""The TE solve: flows in, one path per flow out, with a proof of how good it is.

    1. validate the flows against the fabric (unknown NIC, bad demand -> FlowError)
    2. cheap lower bounds on MLU (controller.solver.bounds)
    3. integral assignment (controller.solver.greedy): exact edge colouring where it applies,
       largest-first greedy and local search elsewhere, stability against `previous`
    4. if the result is above the cheap bound, the min-MLU LP over aggregated commodities
       (controller.solver.lp) gives the tight bound and path shares; the assignment is re-run
       guided by them and the better result is kept
    5. if a link is still loaded beyond its capacity, the flows on overloaded links are
       split into QP buckets and the buckets re-placed (controller.solver.qp_buckets); the bound is
       then the one for routings split into `qps` buckets
    6. the ratio MLU / bound is reported with every result, and the TE entries used
    7. the job-level pass (controller.solver.job_objective): from the MLU solution, the worst
       job (by priority class, then predicted bus bandwidth) is raised, then the next, as far
       as a bounded search of moves finds, within the table budget and an MLU ceiling; the
       worst job's bound min(1, 1 / fractional min-MLU) and their ratio are reported
    8. the certificate (controller.solver.certificate): every job's predicted bus bandwidth
       against the fabric's own routing (E-ECMP by default); jobs below it are handed back
       to hashing (no TE entries) until none is, and the certificate is kept in the result
    9. when step 8 handed jobs back, or left a job below a hashing it was asked to compare
       (CertifyOptions.compare: `tectl solve` compares the other one), step 7 once more
       from the same routing, raising first every job to the best of those hashings' values
       for it (its floor), and step 7 with those floors from every flow sprayed over its
       paths in `qps` buckets (as finely as the hashed QPs the floors come from), and,
       where step 8 handed jobs back, the same routing with the jobs that have room above
       their reference and crowd a failing one handed back first (controller.solver.room),
       each certified (step 8); of the certified routings the best by the floored objective
       vector is kept (a routing that pleases the worst job may leave another just below
       its reference, and handing that one back can cascade to the reference itself);
       where step 7 was over its work limit (a large mix), step 7 runs here first and the
       passes predict their tries locally: the time is paid only where a job is at stake,
       or where a job is below `job_pass_below` of line rate (then step 7 alone, certified
       and kept if it raised the jobs)

Switch tables are finite: every step keeps to the per-switch entry budget (the fabric's
`te_entries` per tier, or `SolveOptions.table_budget`); flows that do not fit ride ECMP and
are listed in `fallback_ecmp`. On a large mix of unequal flows (more than
`whole_first_flows`), spraying QP buckets over the planes, as far as the tables afford, is
tried before step 3; within `spray_gap` of its bound it is the result and steps 3-5 are
skipped (they cost seconds at cluster scale and cannot get much closer).

An assignment whose MLU equals a valid lower bound is optimal, so step 4 is skipped when the
cheap bound is already met (the usual case in a healthy 1:1 pod). `lp="always"` forces it.
With `qps` > 1 (the default) the bound reported is valid for routings that split flows into
up to `qps` QP buckets, since that is what the solver may return.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from controller.errors import InputError, LpError, Superseded
from controller.model.assignment import UNROUTED, Assignment, moved_pairs
from controller.model.coupling import coupled_jobs
from controller.model.fabric import SWITCH_TIERS, Fabric
from controller.model.flows import ALL_QPS, FlowSet, distinct, match_pairs, pair_keys
from controller.model.hashing import hashed_load
from controller.model.health import LinkHealth
from controller.model.paths import path_alive, stranded
from controller.model.rates import REL_TOL
from controller.routes.budget import (
    TableBudget,
    fit_and_count,
    fullest_switches,
    switch_budget,
    table_usage,
    tables_fit,
)
from controller.routes.entries import align_entries
from controller.routes.tables import MAX_QP_BUCKETS
from controller.solver.bounds import Bound
from controller.solver.certificate import (
    DEFAULT,
    Certificate,
    CertifyOptions,
    certify,
    prefetch,
    reference_mlus,
)
from controller.solver.commodities import Commodities
from controller.solver.greedy import (
    RELIEF_TRIES,
    SEARCH_TRIES,
    AssignResult,
    Guidance,
    arc_load,
    assign_paths,
    collided_arcs,
    collided_arcs_of,
    core_load,
    relieve_arcs,
    utilisation,
    utilisation_of,
)
from controller.solver.job_objective import (
    NOT_PREDICTED,
    JobObjective,
    compare,
    floored_vector,
    job_priorities,
    raise_worst,
)
from controller.solver.job_objective import ROUNDS as JOB_ROUNDS
from controller.solver.lp import BACKENDS as LP_BACKENDS
from controller.solver.lp import LpSolution, solve_lp
from controller.solver.problem import Problem
from controller.solver.qp_buckets import DEFAULT_QPS, Split, split_overloaded, spray
from controller.solver.repair import repair as repair_assignment
from controller.solver.room import Below, jobs_with_room
from controller.solver.unfit_jobs import unfit_jobs

LP_MODES = ("auto", "always", "never")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SolveOptions:
    """Knobs of a solve; the defaults suit a production controller."""

    lp: str = "auto"  # auto: only when the cheap bound is not met; always; never
    backend: str = "auto"  # OR-Tools LP backend (see controller.solver.lp)
    lp_time_limit: float = 30.0  # seconds
    # flows each local search tries on other paths (controller.solver.greedy.local_search);
    # None = until no move helps. Work, not seconds: the routes never depend on the clock.
    search_tries: int | None = SEARCH_TRIES
    move_threshold: float = 0.02  # re-place kept flows only if MLU improves by > 2%
    table_budget: int | None = None  # TE entries per switch; None = the fabric's per tier
    qps: int = DEFAULT_QPS  # QP buckets a flow may be split into on overload; 1 = never
    # unequal flows: a spray within this relative gap of its bound is kept without trying
    # one path per flow and the LP (which take seconds at cluster scale; on the meta-24k
    # mixes the spray ends 3-6% above the bound, one path per flow 50%)
    spray_gap: float = 0.1
    # up to this many flows, one path per flow is tried first even for unequal flows (it
    # needs far fewer entries; beyond, its per-flow greedy costs seconds)
    whole_first_flows: int = 8192
    # beyond this many flows a spray is kept even when it is not within spray_gap: one path
    # per flow (a per-flow greedy) then costs tens of seconds and rarely beats it
    whole_max_flows: int = 100_000
    # flows the relief pass tries on other paths to drain links loaded beyond capacity
    # below the maximum (controller.solver.greedy.relieve_arcs); 0 = no relief pass
    relief_tries: int | None = RELIEF_TRIES
    # the certificate against the fabric's own routing (controller.solver.certificate)
    certify: CertifyOptions = DEFAULT
    # jobs that need more TE entries at one RTSW than it holds ride the fabric's hashing
    # whole (controller.solver.unfit_jobs); False: every job is placed flow by flow
    unfit_to_hashing: bool = True
    # moves the job-level pass may keep (controller.solver.job_objective); 0: it only
    # predicts the jobs and their bound, and moves nothing
    job_rounds: int = JOB_ROUNDS
    # where step 7 is over its work limit (a large mix), step 9 runs it, its tries predicted
    # locally, also when a job is below this fraction of line rate with none at stake (it
    # costs 0.5-2.5 s on the meta-24k mix): 0, only where a job is at stake; 1, wherever a
    # job is below its demand
    job_pass_below: float = 0.85

    def __post_init__(self) -> None:
        if self.lp not in LP_MODES:
            raise InputError(f"lp must be one of {', '.join(LP_MODES)}, got {self.lp!r}")
        if self.backend != "auto" and self.backend not in LP_BACKENDS:  # not only when run
            raise InputError(f"unknown LP backend {self.backend!r}; known: auto, "
                             f"{', '.join(LP_BACKENDS)}")  # fmt: skip
        if self.relief_tries is not None and self.relief_tries < 0:
            raise InputError(f"relief_tries must be >= 0, got {self.relief_tries}")
        if self.job_rounds < 0:
            raise InputError(f"job_rounds must be >= 0, got {self.job_rounds}")
        if not 0.0 <= self.job_pass_below <= 1.0:
            raise InputError(f"job_pass_below must be within [0, 1], got {self.job_pass_below}")
        if self.search_tries is not None and self.search_tries < 0:
            raise InputError(f"search_tries must be >= 0, got {self.search_tries}")
        if self.lp_time_limit <= 0:
            raise InputError(f"lp_time_limit must be positive, got {self.lp_time_limit}")
        if self.spray_gap < 0:
            raise InputError(f"spray_gap must be >= 0, got {self.spray_gap}")
        if self.move_threshold < 0:
            raise InputError(f"move_threshold must be >= 0, got {self.move_threshold}")
        if self.table_budget is not None and self.table_budget < 0:
            raise InputError(f"table_budget must be >= 0, got {self.table_budget}")
        if not 1 <= self.qps <= MAX_QP_BUCKETS:
            raise InputError(f"qps must be within [1, {MAX_QP_BUCKETS}], got {self.qps}")


@dataclass(frozen=True)
class SolveResult:
    """An assignment, its quality against the lower bound, and what it cost."""

    assignment: Assignment
    mlu: float  # max utilisation over all arcs (flows handed back by the certificate: as hashed)
    bound: Bound
    lp: LpSolution | None
    collided_links: int  # switch-to-switch arcs over capacity with two or more flows on them
    churn: int  # flows moved against `previous`
    unroutable: np.ndarray = field(repr=False)  # flow indices with no healthy path
    fallback_ecmp: np.ndarray = field(repr=False)  # flow indices over the table budget
    method: str = ""
    times: dict[str, float] = field(default_factory=dict)
    parent: np.ndarray | None = field(default=None, repr=False)  # row -> input flow index
    split_flows: np.ndarray | None = field(default=None, repr=False)  # input flows split
    # TE entries in all, and per tier the most one switch holds and its budget (inf:
    # unlimited); see controller.routes.budget.table_usage
    tables: dict[str, float] = field(default_factory=dict)
    # TE entries per node for `assignment` (table_usage), as the solve counted them; None
    # where not counted (a repair's result)
    usage: np.ndarray | None = field(default=None, repr=False)
    # no job below the fabric's own routing (None: not certified)
    certificate: Certificate | None = None
    # input flows the certificate handed back to the fabric's hashing (no TE entries)
    handed_back: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    # the job-level objective before the certificate: worst job, its bound, what the pass did
    objective: JobObjective | None = None
    # jobs left to the fabric's hashing whole, and why (controller.solver.unfit_jobs), and
    # their input flows (no TE path, no entry)
    hashed_jobs: dict[str, str] = field(default_factory=dict)
    hashed_flows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    def __post_init__(self) -> None:
        rows = len(self.assignment.flows)
        if self.parent is None:
            object.__setattr__(self, "parent", np.arange(rows, dtype=np.int64))
        if self.split_flows is None:
            object.__setattr__(self, "split_flows", np.zeros(0, np.int64))

    @classmethod
    def of(
        cls,
        res: AssignResult,
        bound: Bound,
        lp: LpSolution | None,
        times: dict[str, float],
        parent: np.ndarray | None = None,
        *,
        as_of: SolveResult | None = None,
    ) -> SolveResult:
        """The result of `res` (its rows the parts of input flows `parent`, default one row
        per flow) against `bound`: its index arrays as input flows (churn: the input flows
        of `res.churn`, the rows moved), its certificate if it has one.

        `as_of`: the solve whose routes `res` repaired (the service settles a link change
        so); its split flows, its table counts and its jobs left to the hashing stand, and
        so do its flows left to ECMP and its hand-backs that `res` did not route again
        (`carried_off_te`)."""
        if parent is None:
            parent = np.arange(len(res.assignment.flows), dtype=np.int64)
        split: np.ndarray | None
        if as_of is None:
            fallback = distinct(parent[res.fallback_ecmp])
            split = distinct(parent[res.assignment.flows.qp != ALL_QPS])
            tables: dict[str, float] = {}
            handed, cert = distinct(parent[res.handed_back]), res.certificate
            hashed_jobs, hashed_flows = {}, np.zeros(0, np.int64)
        else:
            split, tables = as_of.split_flows, as_of.tables
            handed, fallback, cert = carried_off_te(as_of, res, parent)
            hashed_jobs, hashed_flows = as_of.hashed_jobs, as_of.hashed_flows
        return cls(
            assignment=res.assignment,
            mlu=res.mlu,
            bound=bound,
            lp=lp,
            collided_links=int(res.collided_links.size),
            churn=int(distinct(parent[res.churn]).size),
            unroutable=distinct(parent[res.unroutable]),
            fallback_ecmp=fallback,
            method=res.method,
            times=times,
            parent=parent,
            split_flows=split,
            tables=tables,
            certificate=cert,
            handed_back=handed,
            hashed_jobs=hashed_jobs,
            hashed_flows=hashed_flows,
        )

    @property
    def ratio(self) -> float:
        """MLU over the lower bound: 1.0 is provably optimal."""
        if self.bound.value <= 0:
            return 1.0 if self.mlu <= 0 else float("inf")
        return self.mlu / self.bound.value

    def metrics(self) -> dict[str, float]:
        """Plain numbers for reports, logs and the service's Status."""
        out = {
            "flows": float(len(self.assignment.flows)),
            "mlu": self.mlu,
            "bound": self.bound.value,
            "ratio": self.ratio,
            "lp_mlu": self.lp.mlu if self.lp is not None else float("nan"),
            # switch-to-switch arcs over capacity shared by two or more flows (a simulated
            # report's `collided_links` counts every arc carrying more than one flow)
            "shared_links_over_capacity": float(self.collided_links),
            "churn": float(self.churn),
            "unroutable": float(self.unroutable.size),
            "fallback_ecmp": float(self.fallback_ecmp.size),
            "handed_back": float(self.handed_back.size),
            "hashed_jobs": float(len(self.hashed_jobs)),
            "hashed_flows": float(self.hashed_flows.size),
            "qp_split_flows": float(self.split_flows.size),  # type: ignore[union-attr]
        }
        out.update(self.tables)
        out.update({f"{name}_seconds": value for name, value in self.times.items()})
        if self.objective is not None:
            out.update(self.objective.metrics())
        if self.certificate is not None:
            out.update(self.certificate.metrics())
            if self.certificate.mlu_pending:
                out["mlu_pending"] = 1.0  # `mlu` and `ratio` are NaN until counted
        return out

    @property
    def mlu_pending(self) -> bool:
        """Whether the MLU is left to count (`mlu_counted`): the routing is the reference."""
        return self.certificate is not None and self.certificate.mlu_pending


def _guidance(fabric: Fabric, comm: Commodities, lp: LpSolution) -> Guidance:
    """LP path shares per (src RTSW, dst RTSW, path) for the guided assignment."""
    m, path, share = lp.path_shares(fabric, comm)
    return Guidance(src_rtsw=comm.src_rtsw[m], dst_rtsw=comm.dst_rtsw[m], path=path, share=share)


def _bucket_result(
    problem: Problem, res: AssignResult, split: Split, opts: SolveOptions
) -> tuple[AssignResult, np.ndarray]:
    """A split (rows of whole flows and QP buckets) as an AssignResult fitted to the tables,
    with the parent flow of every row, so it compares with one path per flow.

    Rows the tables cannot hold, and whole rows of flows `res` already left on ECMP, ride
    ECMP."""
    fabric, cap = problem.fabric, problem.arc_capacity
    whole = Assignment(split.flows, split.path)
    arcs = whole.arcs(fabric)
    fitted, usage = fit_and_count(fabric, whole, _budget(fabric, opts), arcs)
    parent = split.parent
    off = fitted.path == UNROUTED
    fallback = off & (
        (split.path != UNROUTED)
        | np.isin(parent, res.fallback_ecmp)
        | np.isin(parent, split.ecmp)
    )
    if fitted is not whole:
        arcs = np.where(fitted.routed[:, None], arcs, -1)
    load = arc_load(fabric, fitted, arcs)
    out = AssignResult(
        assignment=fitted,
        mlu=float(utilisation_of(load, cap).max(initial=0.0)),
        collided_links=collided_arcs_of(fabric, arcs, load, cap),
        churn=np.zeros(0, np.int64),  # counted against `previous` by solve
        fallback_ecmp=np.flatnonzero(fallback),
        unroutable=np.flatnonzero(off & ~fallback),
        method=res.method,
        seconds=res.seconds,
        usage=usage,
    )
    return out, parent


def _budget(fabric: Fabric, opts: SolveOptions) -> TableBudget:
    """Entries per switch: the fabric's, with the option's one number for every tier and as
    a cap on a switch's own (Fabric.table_budget)."""
    return fabric.table_budget(opts.table_budget)


def table_figures(fabric: Fabric, usage: np.ndarray, budget: TableBudget) -> dict[str, float]:
    """Entries used (`usage`: an assignment's table_usage): in all, and per tier the
    fullest switch's (`fullest_switches`) next to that switch's budget."""
    limit = switch_budget(fabric, budget)
    out = {"te_entries": float(usage.sum())}
    fullest = fullest_switches(fabric, usage, budget)
    for tier in SWITCH_TIERS:
        node = fullest.get(tier)
        if node is None:
            out[f"te_entries_max_{tier}"], out[f"te_entries_budget_{tier}"] = 0.0, float("inf")
            continue
        out[f"te_entries_max_{tier}"] = float(usage[node])
        out[f"te_entries_budget_{tier}"] = float(limit[node])
    return out


def _fits(fabric: Fabric, assignment: Assignment, opts: SolveOptions) -> bool:
    return tables_fit(fabric, assignment, _budget(fabric, opts))


def _spray_within_tables(
    problem: Problem, res: AssignResult, opts: SolveOptions
) -> tuple[AssignResult, np.ndarray] | None:
    """Every flow of `res` sprayed over the planes as far as the tables afford, or None
    if the spray would leave flows to ECMP (which measured worse than not spraying).

    The flows the tables cannot spray are placed whole around the buckets
    (controller.solver.qp_buckets.spray). Leaving flows to ECMP is refused because flows
    that other switches push to ECMP would land, unplanned, on links the spray filled, and
    even planned ones (source RTSWs too small for one entry per key) measured worse per job
    than one path per flow (meta-24k mix at 256 entries: 16 jobs below E-ECMP against 5)."""
    budget = switch_budget(problem.fabric, _budget(problem.fabric, opts))
    sprayed = spray(problem, qps=opts.qps, search_tries=opts.search_tries, budget=budget)
    if sprayed is None:
        return None
    if sprayed.ecmp.size:
        return None
    out, parent = _bucket_result(problem, res, sprayed, opts)
    if (~np.isin(parent[out.fallback_ecmp], res.fallback_ecmp)).any():
        return None
    return replace(out, method=res.method + "+qp-spray"), parent


def _spray_if_at_bound(
    problem: Problem,
    res: AssignResult,
    bound: float,
    opts: SolveOptions,
) -> tuple[AssignResult, np.ndarray] | None:
    """The spray of `res` if it meets `bound`, so that the LP and a second pass cannot beat
    it, and improves on `res` by more than `move_threshold`; else None."""
    sprayed = _spray_within_tables(problem, res, opts)
    if sprayed is None:
        return None
    out = sprayed[0]
    if (
        out.mlu > bound * (1 + REL_TOL) + REL_TOL
        or not out.mlu < res.mlu * (1 - opts.move_threshold) - REL_TOL
    ):
        return None
    return sprayed


def _previous_split_if_kept(
    problem: Problem,
    previous: Assignment,
    res: AssignResult,
    move_threshold: float,
) -> tuple[AssignResult, np.ndarray] | None:
    """The previous split assignment, unchanged, if keeping it costs at most
    `move_threshold` against `res`: a re-solve then moves no bucket. Else None.

    Kept only if it split flows, carries exactly `flows` (one flow per NIC pair, same
    demands) and all its paths are alive."""
    fabric, health, flows = problem.fabric, problem.health, problem.flows
    if not previous.flows.split or not len(flows):
        return None
    if np.unique(pair_keys(flows)[0]).size != len(flows):
        return None
    parent = match_pairs(previous.flows, flows)
    if (parent < 0).any():
        return None
    total = np.bincount(parent, weights=previous.flows.demand, minlength=len(flows))
    if not np.allclose(total, flows.demand) or (previous.path == UNROUTED).any():
        return None
    if not path_alive(previous.arcs(fabric), problem.arc_capacity).all():
        return None
    mlu = float(utilisation(fabric, health, previous).max(initial=0.0))
    if mlu > res.mlu * (1 + move_threshold) + REL_TOL:
        return None
    kept = AssignResult(
        assignment=previous,
        mlu=mlu,
        collided_links=collided_arcs(fabric, health, previous),
        churn=np.zeros(0, np.int64),
        fallback_ecmp=np.zeros(0, np.int64),
        unroutable=np.zeros(0, np.int64),
        method="kept+" + res.method,
        seconds=res.seconds,
    )
    return kept, parent


def _best_bucket_split(
    problem: Problem,
    res: AssignResult,
    bound: float,
    opts: SolveOptions,
    sprayed: tuple[AssignResult, np.ndarray] | None = None,
) -> tuple[AssignResult, np.ndarray] | None:
    """The better of splitting only the flows on overloaded links into QP buckets and
    spraying every flow, or None if neither lowers the MLU of `res` enough.

    First only the flows on overloaded links (controller.solver.qp_buckets); if that leaves
    the MLU more than `move_threshold` above the bound, every flow sprayed over the planes
    (`sprayed`, if the spray was made already), kept only if it lowers the MLU by more than
    `move_threshold` too (it costs an entry per bucket)."""
    if opts.qps < 2 or res.mlu <= 1.0 + REL_TOL:
        return None
    best: tuple[AssignResult, np.ndarray] | None = None
    local = split_overloaded(problem, res.assignment.path, qps=opts.qps,
                             search_tries=opts.search_tries)  # fmt: skip
    if local is not None:
        out, parent = _bucket_result(problem, res, local, opts)
        best = (replace(out, method=res.method + "+qp-split"), parent)
    mlu = best[0].mlu if best is not None else res.mlu
    if mlu > bound * (1 + opts.move_threshold) + REL_TOL:
        if sprayed is None:
            sprayed = _spray_within_tables(problem, res, opts)
        else:
            sprayed = (replace(sprayed[0], method=res.method + "+qp-spray"), sprayed[1])
        if sprayed is not None and sprayed[0].mlu < mlu * (1 - opts.move_threshold) - REL_TOL:
            best = sprayed
    return best


def solve(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    *,
    previous: Assignment | None = None,
    options: SolveOptions | None = None,
    stop: Stop = None,
) -> SolveResult:
    """Assign every flow a path; report MLU, the lower bound and their ratio; raise the
    worst job (job_objective) and certify every job against the fabric's own routing.
    `stop` is asked between stages; when it says so the solve raises Superseded (its
    caller's inputs changed: nothing half-done is returned)."""
    opts = options or SolveOptions()
    start = time.perf_counter()
    flows.validate(fabric)
    unfit: dict[int, str] = {}
    _go_on(stop, "start")
    if opts.unfit_to_hashing:
        unfit = unfit_jobs(fabric, flows, switch_budget(fabric, _budget(fabric, opts)))
    _go_on(stop, "unfit jobs")
    # the flows that may get TE rows: the parts of the others are certified unsimulated
    steered = ~np.isin(flows.job, np.fromiter(unfit, np.int64, len(unfit)))
    returned = threading.Event()
    if steered.any():
        # some job gets TE paths, so the certificate may need the reference: it is
        # simulated on another core while the placement runs, and stopped (before its next
        # seed) once the solve returns: a certificate that needed it has waited for it, and
        # one that did not must not leave a core busy under the reactions that follow
        prefetch(fabric, health, flows, qps=opts.qps, options=opts.certify,
                 stop=lambda: returned.is_set() or (stop is not None and stop()),
                 steered=steered)  # fmt: skip
    try:

        def place(spray_only: bool = False) -> SolveResult | None:
            if unfit:
                return _placed_around(fabric, health, flows, unfit, previous, opts, start,
                                      stop, spray_only=spray_only)  # fmt: skip
            return _placed(fabric, health, flows, previous, opts, start, stop,
                           spray_only=spray_only)  # fmt: skip

        placed = place()
        assert placed is not None  # only a spray may not be made
        _go_on(stop, "placement")
        log.info("placed %s flow(s) by %s: MLU %.4g, bound %.4g (%.2f s)", f"{len(flows):,}",
                 placed.method, placed.mlu, placed.bound.value,
                 time.perf_counter() - start)  # fmt: skip
        out = job_objective(fabric, health, flows, placed, previous, opts)
        _log_pass(out)
        first = certified(fabric, health, out, opts, inputs=flows, stop=stop, steered=steered)
        out = floored(fabric, health, flows, out, first, previous, opts, stop, steered,
                      spray=lambda: place(spray_only=True))  # fmt: skip
    finally:
        returned.set()
    out.times["total"] = time.perf_counter() - start
    return out


Stop = Callable[[], bool] | None  # asked between a solve's stages: stop now?


def _log_pass(result: SolveResult, floors: bool = False) -> None:
    """One progress line for the job-level pass (a CLI shows the solve's INFO lines)."""
    report = result.objective
    if report is None or not report.moves:
        return
    if floors:  # it raises the jobs below their floors first, not the worst job
        log.info("job pass with floors: %d move(s)", report.moves)
    else:
        log.info("job pass: worst job %.4g -> %.4g of line rate, %d move(s)",
                 report.worst_before, report.worst, report.moves)  # fmt: skip


def _go_on(stop: Stop, after: str) -> None:
    """Raise Superseded when `stop` says the solve is no longer wanted."""
    if stop is not None and stop():
        raise Superseded(f"solve stopped after {after}: its inputs were superseded")


def _placed_around(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    unfit: dict[int, str],
    previous: Assignment | None,
    opts: SolveOptions,
    start: float,
    stop: Stop = None,
    *,
    spray_only: bool = False,
) -> SolveResult | None:
    """The other jobs placed (`_placed`), and the `unfit` jobs' flows appended as rows
    without a TE path (controller.solver.unfit_jobs): they ride the fabric's hashing.
    `spray_only`: as `_placed`'s."""
    hashed = np.isin(flows.job, np.fromiter(unfit, np.int64, len(unfit)))
    keep, rest = np.flatnonzero(~hashed), np.flatnonzero(hashed)
    left = flows.take(rest)
    # only the hashed jobs that can share a link with the others weigh on their planning
    # (controller.model.coupling); an all-to-all on racks of its own is not walked here
    dst = flows.dst_host(fabric)
    num_jobs = max(len(flows.job_ids), int(flows.job.max(initial=-1)) + 1)
    near = (coupled_jobs(fabric, flows, num_jobs, np.isin(dst, dst[keep]))[left.job]
            if keep.size else np.zeros(len(left), bool))  # fmt: skip
    planned = _left_over(fabric, health, left.take(np.flatnonzero(near)), opts) \
        if near.any() else health
    _go_on(stop, "the hashed jobs' load")
    inner = _placed(fabric, planned, flows.take(keep), previous, opts, start, stop,
                    spray_only=spray_only)  # fmt: skip
    if inner is None:
        return None
    if planned is not health:
        # planned on what the hashed jobs leave: its MLU, collisions and LP are of those
        # capacities, not the fabric's; counted again on the fabric (the LP is no bound
        # of it and is dropped)
        placed = inner.assignment
        inner = replace(
            inner, lp=None,
            mlu=float(utilisation(fabric, health, placed).max(initial=0.0)),
            collided_links=int(collided_arcs(fabric, health, placed).size),
        )  # fmt: skip
    rows = inner.assignment.flows
    joined = FlowSet(
        np.concatenate([rows.src_nic, left.src_nic]), np.concatenate([rows.dst_nic, left.dst_nic]),
        np.concatenate([rows.demand, left.demand]), np.concatenate([rows.job, left.job]),
        flows.job_ids, np.concatenate([rows.qp, np.full(rest.size, ALL_QPS, rows.qp.dtype)]),
        flows.job_priority,
    )  # fmt: skip
    path = np.concatenate([inner.assignment.path, np.full(rest.size, UNROUTED, np.int64)])
    names = {flows.job_ids[j]: why for j, why in unfit.items()}
    # the bound over every flow: the hashed ones load the links too, in `qps` QPs each, as
    # the TE rows may be split in as many buckets (the unsplit bound does not hold for them)
    bound = Problem(fabric, health, flows).bound(opts.qps)
    # hashed flows with no healthy path at all (a NIC link down): unroutable, as reported
    # for every other flow
    cut_off = rest[stranded(fabric, health.arc_capacity(fabric), left.src_nic, left.dst_nic)]
    return replace(
        inner,
        bound=bound if inner.lp is None else bound.with_lp(inner.lp),
        assignment=Assignment(joined, path),
        parent=np.concatenate([keep[np.asarray(inner.parent)], rest]),
        unroutable=np.concatenate([keep[inner.unroutable], cut_off]),
        fallback_ecmp=keep[inner.fallback_ecmp],
        split_flows=keep[np.asarray(inner.split_flows)],
        churn=inner.churn,
        hashed_jobs=names,
        hashed_flows=rest,
    )


# what the planning leaves of a link that the hashed jobs fill, as a fraction of it: the
# placement then avoids such links as hard as a link degraded to this, never as a dead one
LEFT_OVER_FLOOR = 0.01


def _left_over(fabric: Fabric, health: LinkHealth, hashed: FlowSet, opts: SolveOptions
               ) -> LinkHealth:
    """The health the other jobs are planned on: each link's capacity less the load the
    jobs left to the fabric's hashing are expected to put on it (the mean over the
    certificate's hash seeds, the busier direction), never below LEFT_OVER_FLOOR of it."""
    ref = opts.certify
    load = np.mean([hashed_load(ref.reference, fabric, hashed, health, seed, opts.qps)
                    for seed in ref.seeds], axis=0)  # fmt: skip
    cap = fabric.capacity * np.repeat(health.factor, 2)
    busy = np.maximum(load[0::2], load[1::2])
    link_cap = np.maximum(cap[0::2], cap[1::2])
    left = np.where(link_cap > 0, 1.0 - busy / np.where(link_cap > 0, link_cap, 1.0), 1.0)
    factor = health.factor * np.clip(left, LEFT_OVER_FLOOR, 1.0)
    return LinkHealth(np.where(health.factor > 0, factor, 0.0))


def _placed(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    previous: Assignment | None,
    opts: SolveOptions,
    start: float,
    stop: Stop = None,
    *,
    spray_only: bool = False,
) -> SolveResult | None:
    """Every flow placed: the MLU-minimising part of `solve` (module docstring, steps 1-6);
    `stop` asked between its passes (see `solve`). `spray_only`: every flow sprayed as far
    as the tables afford (`_spray_within_tables`) and nothing else; None when it cannot
    (`qps` 1: flows are not split; no flow; or the tables would leave flows to ECMP)."""
    times: dict[str, float] = {}
    problem = Problem(fabric, health, flows)
    if spray_only and opts.qps < 2:
        return None
    if spray_only:
        t = time.perf_counter()
        bound = problem.bound(opts.qps)
        _go_on(stop, "bound")
        sprayed = _spray_within_tables(problem, _unplaced(flows, "spray"), opts) \
            if len(flows) else None
        times["qp_spray"] = time.perf_counter() - t
        if sprayed is None:
            return None
        return _finish(problem, replace(sprayed[0], method="qp-spray"), bound, None, times,
                       start, sprayed[1], previous, opts)  # fmt: skip

    def run(guidance: Guidance | None) -> AssignResult:
        return assign_paths(
            problem,
            previous=previous,
            move_threshold=opts.move_threshold,
            table_budget=_budget(fabric, opts),
            lp_guidance=guidance,
            search_tries=opts.search_tries,
            stop=stop,
        )

    lp: LpSolution | None = None
    first: tuple[AssignResult, np.ndarray] | None = None
    spray_bound: Bound | None = None  # the bound for `qps` buckets, once computed
    if _spray_first(flows, opts):
        # Unequal flows: spraying (as far as the tables afford) is tried before one path
        # per flow; when it is within spray_gap of its bound, neither the whole-flow passes
        # nor the LP run.
        t = time.perf_counter()
        spray_bound = problem.bound(opts.qps)
        times["bound"] = time.perf_counter() - t
        _go_on(stop, "bound")
        t = time.perf_counter()
        first = _spray_within_tables(problem, _unplaced(flows, "spray-first"), opts)
        times["qp_spray"] = time.perf_counter() - t
        near = first is not None and (
            first[0].mlu <= spray_bound.value * (1 + opts.spray_gap) + REL_TOL
            or len(flows) > opts.whole_max_flows
        )
        if first is not None and near:
            res = replace(first[0], method="qp-spray")
            return _finish(problem, res, spray_bound, None, times, start, first[1], previous,
                           opts)  # fmt: skip
    t = time.perf_counter()
    bound = problem.bound()
    times["bound"] = times.get("bound", 0.0) + time.perf_counter() - t
    _go_on(stop, "bound")
    t = time.perf_counter()
    res = run(None)
    times["assign"] = time.perf_counter() - t
    need_lp = opts.lp == "always" or (
        opts.lp == "auto" and res.mlu > bound.value * (1 + REL_TOL) + REL_TOL
    )
    parent: np.ndarray | None = None
    split_bound = bound
    if (
        first is not None
        and spray_bound is not None
        and first[0].mlu < res.mlu * (1 - opts.move_threshold) - REL_TOL
    ):
        # the spray beats one path per flow, and an LP-guided whole-flow pass rarely beats
        # the spray; but the spray is not within spray_gap of its bound, so the LP is solved
        # for its bound alone: a weak cut bound (failures the cuts do not see) would
        # otherwise read as a spray far from the optimum
        res = replace(first[0], method="qp-spray")
        if opts.lp == "auto" and len(flows):
            t = time.perf_counter()
            try:
                lp = solve_lp(fabric, health, problem.commodities, backend=opts.backend,
                              time_limit=opts.lp_time_limit)  # fmt: skip
                spray_bound = spray_bound.with_lp(lp)
            except LpError as err:  # the bound stays the cuts'
                log.warning("solve: %s; the bound stays the cuts'", err)
            times["lp"] = time.perf_counter() - t
        return _finish(problem, res, spray_bound, lp, times, start, first[1], previous,
                       opts)  # fmt: skip
    if opts.qps > 1 and len(flows):
        split_bound = problem.bound(opts.qps)  # the spray's, when it was tried
        if need_lp and opts.lp == "auto" and res.mlu > 1.0 + REL_TOL and first is None:
            # Widespread overload one path per flow cannot pack: when spraying QP buckets
            # meets the bound, it is optimal and the LP and second pass cannot beat it.
            t = time.perf_counter()
            sprayed = _spray_if_at_bound(problem, res, split_bound.value, opts)
            times["qp_spray"] = time.perf_counter() - t
            if sprayed is not None:
                res, parent = sprayed
                need_lp = False
    _go_on(stop, "assignment")
    if need_lp and len(flows):
        t = time.perf_counter()
        comm = problem.commodities
        try:
            lp = solve_lp(fabric, health, comm, backend=opts.backend,
                          time_limit=opts.lp_time_limit)  # fmt: skip
        except LpError as err:  # a guide and a bound, not a need: the solve goes on
            log.warning("solve: %s; going on without the LP (its guided pass and bound)", err)
            res = replace(res, method=res.method + "+no-lp")
        times["lp"] = time.perf_counter() - t
    if lp is not None:
        bound = bound.with_lp(lp)  # the cuts as counted above, and the LP
        t = time.perf_counter()
        guided = run(_guidance(fabric, problem.commodities, lp))
        times["guided_assign"] = time.perf_counter() - t
        if (guided.mlu, guided.collided_links.size) < (res.mlu, res.collided_links.size):
            res = guided
    if opts.qps > 1 and len(flows):
        t = time.perf_counter()
        bound = split_bound if lp is None else split_bound.with_lp(lp)
        if parent is None:
            split = _best_bucket_split(problem, res, bound.value, opts, first)
            if split is not None:
                res, parent = split
        if previous is not None:
            kept = _previous_split_if_kept(problem, previous, res, opts.move_threshold)
            if kept is not None and _fits(fabric, kept[0].assignment, opts):
                res, parent = kept
        times["qp_split"] = time.perf_counter() - t
    return _finish(problem, res, bound, lp, times, start, parent, previous, opts)


def _unplaced(flows: FlowSet, method: str) -> AssignResult:
    """No flow placed yet: what a spray starts from."""
    return AssignResult(
        Assignment(flows, np.full(len(flows), UNROUTED, np.int64)), np.inf,
        *(np.zeros(0, np.int64),) * 4, method=method, seconds=0.0,
    )  # fmt: skip


def _spray_first(flows: FlowSet, opts: SolveOptions) -> bool:
    """Whether to try spraying before one path per flow: QP buckets allowed, the LP not
    forced, more than `whole_first_flows` flows, and unequal demands (equal ones are packed
    exactly by edge colouring)."""
    return (
        opts.qps > 1
        and opts.lp != "always"
        and len(flows) > opts.whole_first_flows
        and bool(flows.demand.min() < flows.demand.max())
    )


def _finish(
    problem: Problem,
    res: AssignResult,
    bound: Bound,
    lp: LpSolution | None,
    times: dict[str, float],
    start: float,
    parent: np.ndarray | None,
    previous: Assignment | None,
    opts: SolveOptions,
) -> SolveResult:
    fabric = problem.fabric
    t = time.perf_counter()
    res = _relieved(problem, res, opts, parent)
    times["relief"] = time.perf_counter() - t
    usage = table_usage(fabric, res.assignment) if res.usage is None else res.usage
    tables = table_figures(fabric, usage, _budget(fabric, opts))
    times["total"] = time.perf_counter() - start
    out = replace(SolveResult.of(res, bound, lp, times, parent), tables=tables, usage=usage)
    if previous is not None and (parent is not None or previous.flows.split):
        # buckets moved or (un)split: compare the rows of every flow in both
        out = replace(out, churn=int(moved_pairs(previous, res.assignment).size))
    return out


def job_objective(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    result: SolveResult,
    previous: Assignment | None,
    opts: SolveOptions,
    floor: np.ndarray | None = None,
    local: bool | None = None,
) -> SolveResult:
    """`result` after the job-level pass (controller.solver.job_objective), with its report;
    the rows it moved counted again (MLU, collisions, tables, churn against `previous`).
    `floor`: per job, a value to raise it to first; `local`: predict the tries locally
    (raise_worst)."""
    t = time.perf_counter()
    cert = opts.certify
    path, report = raise_worst(
        fabric, health, result.assignment.flows, result.assignment.path,
        np.asarray(result.parent), flows, qps=opts.qps,
        budget=switch_budget(fabric, _budget(fabric, opts)), mlu_bound=result.bound.value,
        lp_mlu=None if result.lp is None else result.lp.mlu, kind=cert.reference,
        seeds=cert.seeds, model=cert.model, rounds=opts.job_rounds, mlu=result.mlu,
        floor=floor, local=local, backend=opts.backend,
        lp_seconds=0.0 if opts.lp == "never" else opts.lp_time_limit,
    )  # fmt: skip
    times = dict(result.times)
    times["job_objective"] = time.perf_counter() - t
    if path is result.assignment.path or report.moves == 0:
        return replace(result, objective=report, times=times)
    assignment = Assignment(result.assignment.flows, path)
    usage = table_usage(fabric, assignment)
    churn = result.churn if previous is None else int(moved_pairs(previous, assignment).size)
    return replace(
        result, assignment=assignment, objective=report, times=times, usage=usage,
        mlu=float(utilisation(fabric, health, assignment).max(initial=0.0)),
        collided_links=int(collided_arcs(fabric, health, assignment).size),
        tables=table_figures(fabric, usage, _budget(fabric, opts)), churn=churn,
    )  # fmt: skip


def floored(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    placed: SolveResult,
    first: SolveResult,
    previous: Assignment | None,
    opts: SolveOptions,
    stop: Stop = None,
    steered: np.ndarray | None = None,
    spray: Callable[[], SolveResult | None] | None = None,
) -> SolveResult:
    """Step 9 of the module docstring: when `first`'s certificate handed jobs back, or left a
    job below a hashing it compared (CertifyOptions.compare), every job's floor is the best
    of those hashings' values for it, and up to three more routings are made and certified:
    `placed` (the routing `first` certified) through the job-level pass with those floors
    (when it moves a row), every flow sprayed over its paths (`spray`, when the tables
    afford it without ECMP, `qps` > 1 and `placed` is not a spray already) through the same
    pass, and (where `first` handed jobs back) `placed` with the jobs with room crowding a
    failing one handed back first (controller.solver.room); of the certified results the
    best by the floored objective vector, priority class by class, over the jobs all valued
    is kept (`first` on a tie, then the pass's). A kept spray is not held near `previous`
    (it may move every flow): it is kept only where it is better for the jobs. Where step 7
    was over its work limit (`placed`'s pass was not predicted), it runs here first, its
    tries predicted locally, also with no job at stake when a job is below
    `opts.job_pass_below` of line rate; its routing is then the one certified and compared
    (no floors, no spray: nothing is at stake)."""
    cert, report = first.certificate, placed.objective
    if (cert is None or cert.reference_values is None or cert.job_values is None
            or report is None or opts.job_rounds == 0):  # fmt: skip
        return first
    floor = cert.reference_values.copy()
    for values in cert.compared_values.values():
        floor = np.fmax(floor, values)
    below = np.isfinite(cert.job_values) & (cert.job_values < floor * (1 - 1e-9))
    at_stake = bool(cert.fallback_jobs) or bool(below.any())
    skipped = report.bound_source == NOT_PREDICTED
    if not at_stake and not (skipped and _worst_low(cert, opts.job_pass_below)):
        return first
    t = time.perf_counter()
    tried: list[tuple[str, SolveResult]] = []
    start = placed
    if skipped:
        # step 7 was over its work limit (a large mix): run it now, its tries predicted
        # locally, where a job is at stake or the worst job is low; then the floors
        start = job_objective(fabric, health, flows, placed, previous, opts, local=True)
    again = start
    if at_stake:
        again = job_objective(fabric, health, flows, start, previous, opts, floor=floor)
        if again.objective is not None and again.objective.moves == 0:
            again = start  # the floors moved nothing: what step 7 moved, if anything
    if again.objective is not None and again.objective.moves > 0:
        _go_on(stop, "the floored job pass")
        _log_pass(again, floors=at_stake)
        log.info("certifying %s", "the pass with floors" if at_stake else "the job pass")
        tried.append(("the pass with floors" if at_stake else "the job pass", certified(
            fabric, health, again, opts, inputs=flows, stop=stop, steered=steered)))  # fmt: skip
    # every flow sprayed: `qps` buckets over the paths spread a job as finely as the hashed
    # QPs it is compared with (an all-to-all of small flows gets its demand under E-ECMP,
    # where whole flows and a few buckets crowd some links with it); not where the
    # placement is that spray already (the meta-24k mix is sprayed first)
    _go_on(stop, "the floored job pass")
    sprayed = (spray() if at_stake and spray is not None and opts.qps > 1
               and not placed.method.endswith("qp-spray") else None)  # fmt: skip
    if sprayed is not None:
        _go_on(stop, "the spray")
        log.info("every flow sprayed over its paths: the pass with floors, then certified")
        sprayed = job_objective(fabric, health, flows, sprayed, previous, opts, floor=floor)
        _go_on(stop, "the sprayed job pass")
        tried.append(("the spray with floors", certified(
            fabric, health, sprayed, opts, inputs=flows, stop=stop, steered=steered)))  # fmt: skip
    # the jobs with room crowding a failing one handed back first (controller.solver.room):
    # where the first certificate's hand-backs cascaded from over-full links
    if cert.fallback_jobs:
        _go_on(stop, "the sprayed job pass")
        rows, parent = placed.assignment.flows, np.asarray(placed.parent)
        ref = cert.reference_values

        def crowd(path: np.ndarray) -> tuple[np.ndarray, Below]:
            return jobs_with_room(fabric, health, rows, path, parent, flows, ref, qps=opts.qps,
                                  kind=cert.reference, seeds=cert.seeds,
                                  model=opts.certify.model)  # fmt: skip

        room, before = crowd(placed.assignment.path)
        if room.size:
            _go_on(stop, "the jobs with room")
            path = placed.assignment.path.copy()
            path[np.isin(rows.job, room)] = UNROUTED
            if before.bettered_by(crowd(path)[1]):  # else: not worth a certificate
                _go_on(stop, "the jobs with room")
                log.info("certifying %d job(s) with room handed back first", room.size)
                tried.append(("the jobs with room handed back first", _handed_first(
                    fabric, health, flows, placed, room, path, opts, stop, steered)))  # fmt: skip
    # over the jobs every certified routing valued, one set for all comparisons
    passed: list[tuple[str, SolveResult, np.ndarray]] = []
    for name, other in tried:
        got = other.certificate
        if got is not None and got.passed:
            theirs = np.ones_like(cert.job_values) if got.job_values is None else got.job_values
            passed.append((name, other, theirs))
    jobs = np.flatnonzero(np.logical_and.reduce(
        [np.isfinite(cert.job_values)] + [np.isfinite(v) for _, _, v in passed]))  # fmt: skip
    priority = job_priorities(flows)
    keep, kept, best = first, "the first did no better", cert.job_values
    for name, other, theirs in passed:
        # by class: a floor is promised only where the reference gives it (both routings
        # are certified: every job at or above it), a compared hashing's is sought, and not
        # at the price of a job of a higher class
        if compare(floored_vector(theirs, priority, jobs, floor, by_class=True),
                   floored_vector(best, priority, jobs, floor, by_class=True)) > 0:  # fmt: skip
            keep, best, kept = other, theirs, f"{name} was kept"
    if keep is first and start is not placed:
        keep = _not_kept(first, start, at_stake, opts)
    times = dict(keep.times)
    times["floored"] = time.perf_counter() - t
    if at_stake:
        log.info("certificate: %d job(s) handed back, %d below a hashing compared; of %d "
                 "routing(s) raising them to it first, %s", len(cert.fallback_jobs),
                 int(below.sum()), len(tried), kept)  # fmt: skip
    else:
        log.info("job pass at scale (a job below %g of line rate): %s",
                 opts.job_pass_below, kept if tried else "it moved nothing")  # fmt: skip
    return replace(keep, times=times)


def _handed_first(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, placed: SolveResult, jobs: np.ndarray,
    path: np.ndarray, opts: SolveOptions, stop: Stop, steered: np.ndarray | None,
) -> SolveResult:  # fmt: skip
    """`placed` with every row of `jobs` handed back to the fabric's hashing (`path`: its
    paths so), certified; the certificate lists them as handed back, with why, beside any
    it hands back itself."""
    rows = placed.assignment.flows
    mine = (path == UNROUTED) & placed.assignment.routed
    assignment = Assignment(rows, path)
    usage = table_usage(fabric, assignment)
    first = replace(
        placed, assignment=assignment, usage=usage,
        tables=table_figures(fabric, usage, _budget(fabric, opts)),
        mlu=float(utilisation(fabric, health, assignment).max(initial=0.0)),
        collided_links=int(collided_arcs(fabric, health, assignment).size),
    )  # fmt: skip
    out = certified(fabric, health, first, opts, inputs=flows, stop=stop, steered=steered)
    cert = out.certificate
    back = distinct(np.asarray(placed.parent)[mine])
    if cert is None:
        return out
    why = f"room above {cert.reference}, handed back first: it crowds a job below it"
    ids = rows.job_ids
    fallback = {ids[j] if j < len(ids) else f"job{j}": why for j in jobs.tolist()}
    fallback.update(cert.fallback_jobs)
    handed = np.union1d(out.handed_back, back)
    cert = replace(cert, fallback_jobs=dict(sorted(fallback.items())),
                   fallback_flows=int(handed.size))  # fmt: skip
    return replace(out, certificate=cert, handed_back=handed)


def _not_kept(first: SolveResult, ran: SolveResult, at_stake: bool, opts: SolveOptions
              ) -> SolveResult:
    """`first` kept after step 9 ran the pass step 7 skipped (`ran`): its report says so.
    With nothing at stake `first` is the pass's start, so the pass's figures before its
    moves are `first`'s (bound included); else only the reason is added."""
    report, done = first.objective, ran.objective
    if report is None or done is None:
        return first
    why = "a job at stake" if at_stake else f"a job below {opts.job_pass_below:g} of line rate"
    note = (f"run in step 9 ({why}): " + (
        f"{done.moves} move(s) of {done.tried} tried, not kept (no better for the jobs once "
        "certified)" if done.moves else f"no move raised the jobs ({done.stopped})"))  # fmt: skip
    if at_stake:
        return replace(first, objective=replace(report, stopped=f"{report.stopped}; {note}"))
    return replace(first, objective=replace(
        done, worst=done.worst_before, mean=done.mean_before, moves=0, rows_moved=0,
        mlu_after=done.mlu_before, classes={}, stopped=note))  # fmt: skip


def _worst_low(cert: Certificate, below: float) -> bool:
    """Is a job the certificate valued, one its reference delivers, below `below` of line
    rate (step 9's trigger, where step 7 was over its work limit)?"""
    assert cert.job_values is not None and cert.reference_values is not None
    valued = np.isfinite(cert.job_values) & (np.nan_to_num(cert.reference_values) > 0)
    return bool((cert.job_values[valued] < below).any())


def carried_off_te(before: SolveResult, res: AssignResult, parent: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, Certificate | None]:  # fmt: skip
    """Once `res` (a repair of `before`'s routes, rows as `parent` says) replaces it: the
    input flows handed back to the fabric's hashing, those over the table budget, and
    `res`'s certificate naming every job handed back. Each set is `before`'s that `res`
    left without a TE path (a hand-back with the reason `before` gave) and `res`'s own."""
    parent = np.asarray(parent, np.int64)
    path_less = distinct(parent[res.assignment.path == UNROUTED])
    fallback = np.union1d(np.intersect1d(before.fallback_ecmp, path_less),
                          distinct(parent[res.fallback_ecmp]))  # fmt: skip
    handed = np.union1d(np.intersect1d(before.handed_back, path_less),
                        distinct(parent[res.handed_back]))  # fmt: skip
    handed = np.setdiff1d(handed, distinct(parent[res.unroutable]))
    cert, earlier = res.certificate, before.certificate
    if cert is None or cert.pending:
        return handed, fallback, cert
    rows = res.assignment.flows
    jobs = np.unique(rows.job[np.isin(parent, handed)])
    ids = rows.job_ids
    named = {ids[j] if j < len(ids) else f"job{j}" for j in jobs.tolist()}
    why = {} if earlier is None else {
        job: reason for job, reason in earlier.fallback_jobs.items() if job in named}
    why.update(cert.fallback_jobs)
    return handed, fallback, replace(cert, fallback_jobs=dict(sorted(why.items())),
                                     fallback_flows=int(handed.size))  # fmt: skip


def certified(
    fabric: Fabric, health: LinkHealth, result: SolveResult, opts: SolveOptions,
    inputs: FlowSet | None = None,
    stop: Stop = None,
    steered: np.ndarray | None = None,
) -> SolveResult:
    """`result` with its certificate (controller.solver.certificate), and with the jobs
    that would be below the fabric's own routing handed back to it: their rows without a
    TE path, tables and collisions counted again. Where rows ride the defaults (handed back,
    or over the table budget) the MLU is that of the whole data plane (Certificate.mlu).
    Unchanged when disabled. `inputs`: the input flows `result.parent` indexes (certify);
    `stop`: see `solve` (asked before each seed's walk); `steered`: see certify."""
    if not opts.certify.enabled:
        return result
    t = time.perf_counter()
    assignment, cert = certify(fabric, health, result.assignment, qps=opts.qps,
                               parent=result.parent, options=opts.certify,
                               inputs=inputs, stop=stop, steered=steered,
                               shown=True)  # fmt: skip
    times = dict(result.times)
    times["certificate"] = time.perf_counter() - t
    if assignment is result.assignment:
        mlu = cert.mlu if cert.walked else result.mlu  # rows on the defaults count too
        return replace(result, certificate=cert, times=times, mlu=mlu)
    usage = table_usage(fabric, assignment)
    parent = np.asarray(result.parent)
    back = distinct(parent[(assignment.path == UNROUTED) & result.assignment.routed])
    return replace(
        result,
        assignment=assignment,
        handed_back=back,
        mlu=cert.mlu,
        collided_links=int(collided_arcs(fabric, health, assignment).size),
        tables=table_figures(fabric, usage, _budget(fabric, opts)),
        usage=usage,
        certificate=cert,
        times=times,
    )


def mlu_counted(
    fabric: Fabric, health: LinkHealth, result: SolveResult, flows: FlowSet, opts: SolveOptions,
    stop: Stop = None,
) -> SolveResult:
    """`result` with the MLU its certificate left to the caller counted (CertifyOptions.
    mlu_later: the routing is the reference, so its MLU is the reference's on `flows`, the
    input flows it was solved for); `result` itself when nothing is left to count."""
    cert = result.certificate
    if cert is None or not cert.mlu_pending:
        return result
    if cert.alike_jobs:  # the jobs the certificate did not simulate
        flows = flows.take(np.flatnonzero(np.isin(flows.job, cert.alike_jobs)))
    cert = cert.with_reference_mlus(reference_mlus(fabric, health, flows, cert.qps,
                                                   opts.certify, stop))  # fmt: skip
    return replace(result, mlu=cert.mlu, certificate=cert)


def _relieved(
    problem: Problem, res: AssignResult, opts: SolveOptions, parent: np.ndarray | None
) -> AssignResult:
    """`res` after the relief pass (controller.solver.greedy.relieve_arcs): rows moved off links
    loaded beyond capacity below the maximum, entries aligned (moved rows yield). Kept only
    if the tables still fit, and, where alignment moved a row again, if the MLU does not
    rise and no link within capacity goes over; else `res` unchanged. A result kept from
    `previous` is left as it is (re-solving it moves no bucket).

    Every entry key holds the destination host, so alignment and table usage change only
    for the rows to the destination hosts of moved rows: only those are aligned, and
    counted again before and after (all rows after, once, when they are most of them).
    `parent`: the input flow of every row (None: the rows are the problem's flows); a
    bucket's candidates are its flow's."""
    if res.mlu <= 1.0 + REL_TOL or opts.relief_tries == 0 or res.method.startswith("kept+"):
        return res
    fabric, health = problem.fabric, problem.health
    flows, path = res.assignment.flows, res.assignment.path
    rows = problem if parent is None else problem.rows(flows, parent)
    new, chosen, load = relieve_arcs(rows, path, max_tries=opts.relief_tries)
    moved = new != path
    if not moved.any():
        return res
    host = flows.dst_host(fabric)
    sub = np.flatnonzero(np.isin(host, host[moved]))
    part = flows.take(sub)
    aligned = align_entries(fabric, part, new[sub], moved[sub].astype(np.float64))
    realigned = aligned != new[sub]
    new[sub] = aligned
    assignment = Assignment(flows, new)
    if realigned.any():
        # alignment moved rows the pass placed: count every arc again
        chosen = rows.candidates.all_chosen(new)
        load = core_load(fabric, flows, chosen)
    cap, core = problem.arc_capacity, problem.core
    routed = new >= 0
    access = np.bincount(
        np.concatenate(
            [
                fabric.up(fabric.access_link(flows.src_nic[routed])),
                fabric.down(fabric.access_link(flows.dst_nic[routed])),
            ]
        ),
        weights=np.tile(flows.demand[routed], 2),
        minlength=fabric.num_arcs,
    )
    util = utilisation_of(np.where(core, load, access), cap)
    mlu = float(util.max(initial=0.0))
    if realigned.any():
        before = utilisation(fabric, health, res.assignment)
        if mlu > res.mlu + REL_TOL or ((util > 1.0 + REL_TOL) & (before <= 1.0 + REL_TOL)).any():
            return res
    if res.usage is None or 2 * sub.size > len(flows):  # most rows: one count of them all
        had = table_usage(fabric, res.assignment) if res.usage is None else res.usage
        usage = table_usage(fabric, assignment)
        grew = usage > had
    else:  # the rows to the moved rows' hosts, before and after
        old_part = table_usage(fabric, Assignment(part, path[sub]))
        new_part = table_usage(fabric, Assignment(part, aligned))
        usage = res.usage - old_part + new_part
        grew = new_part > old_part
    if (grew & (usage > switch_budget(fabric, _budget(fabric, opts)))).any():
        return res
    count = np.bincount(chosen.reshape(-1) + 1, minlength=fabric.num_arcs + 1)[1:]
    collided = np.flatnonzero(core & (load > cap + REL_TOL * np.maximum(cap, 1.0)) & (count > 1))
    return replace(res, assignment=assignment, mlu=mlu, collided_links=collided, usage=usage)


def repair(
    fabric: Fabric,
    health: LinkHealth,
    previous: SolveResult,
    *,
    old_health: LinkHealth | None = None,
    options: SolveOptions | None = None,
) -> SolveResult:
    """Re-place only the flows the health change hit; everything else stays put, and the
    result is certified (`options.certify`).

    The bound is recomputed from the cheap bounds only (milliseconds); run `solve` with
    `previous=` afterwards for a global re-optimisation."""
    start = time.perf_counter()
    opts = options or SolveOptions()
    res = repair_assignment(fabric, health, previous.assignment, old_health=old_health,
                            certify_options=None, qps=opts.qps)  # certified below  # fmt: skip
    t_repair = time.perf_counter() - start
    bound = Problem(fabric, health, previous.assignment.flows).bound(opts.qps)
    times = {"repair": t_repair, "total": time.perf_counter() - start}
    out = certified(fabric, health, SolveResult.of(res, bound, None, times, previous.parent),
                    opts)  # fmt: skip
    out.times["total"] = time.perf_counter() - start
    return out
