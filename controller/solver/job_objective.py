"""The job-level objective: raise the worst job, then the next, with MLU only as a means.

A job's value is its predicted bus bandwidth: the least rate / demand over its flows under
max-min fair rates (controller.model.rates, striped model by default) on the data plane an
assignment makes (controller.model.dataplane: TE rows on their paths, rows without a path,
e.g. over the table budget, walked through the entries and the fabric's hashing). Where rows
ride the hashing the value is the mean over the hash seeds, as the certificate defines it
(controller.solver.certificate), so the pass plans around the rows a budget leaves there.

Order ("worst"). Jobs are ranked by (priority, highest first), then by value, ascending, then
by job index. The objective vector lists the values in that order; one routing is better than
another when, at the first position where their vectors differ by more than REL_TOL (relative),
its value is larger: lexicographic max-min inside the highest class, then the next class. With
every priority equal (the default, 0) it is plain lexicographic max-min. A job none of whose
flows is delivered counts as -1 (below any routing that delivers it).

Bound. With every flow's demand scaled by t, t is routable over the candidate paths iff
t <= 1 / lambda*, lambda* the fractional min-MLU (the LP; access links count, being fixed).
Every delivered flow f of a routing gets a rate r_f >= v d_f, v its job's value, and the rates
fit every arc; split f's rate over the paths of its rows (QPs, buckets, hashed QPs) in
proportion to the rows' QP counts: each row then carries no more than its own rate (striped:
W x the slowest row's per-QP rate; summed: the rows' rates), so this is a fractional routing
within capacity. Where the value is a mean over hash seeds, the mean of those fractional
routings is one too. So the worst job's value is at most min(1, 1 / lambda*) (the demand caps
give the 1), and, over a priority class's flows alone, the class's worst job is at most
min(1, 1 / lambda*_class). lambda* is the LP's when the solve ran it (and every flow is
delivered); lambda*_class the class's own LP when it has at most CLASS_LP_COMMODITIES RTSW
pairs (the cut bounds beyond); else the largest of the cut bounds that hold for fractional routings
(controller.solver.bounds: access, rack- and pod-egress/ingress): a lower bound on lambda*,
so still a valid (looser) upper bound on the value. The bounds for flows in at most `qps`
buckets (rack-egress-16qp, largest-flow, ...) are not used: they bound one routing, not the
mean over seeds of several.

The pass (`raise_worst`). From the MLU solution: predict every job's value; take the first
job in the order that is below its class bound; take its flows at its minimum share and the
over-capacity arcs they cross; propose (a) moving those flows' TE rows, the slowest per QP
first, each to the candidate path where a QP can expect the highest max-min level (on each
arc: its demand if the arc has room, else the larger of the room per QP and the arc's level
shared with its QPs and the newcomer's; offered load alone misleads: a QP beside 200 small
QPs gets far less than beside 20 large ones on an arc loaded less), (b) ripping up every TE
row crossing those arcs and placing them again, (c) moving those flows' TE rows to the
candidate paths least loaded by the predicted offered load (hashed rows included), together,
then one by one, (d) moving the TE rows of other jobs off each such arc (the best-off,
lowest-priority jobs first), where that puts no link over capacity, (e) (a) again, each row
only on paths where it follows the entry keys it meets (_Keys: it leaves each by the arc the
key's rows take, so it moves alone), then of each worst flow's rows it moved the first half,
a quarter, ..., one (with floors only; first where (e) made the last move kept); align the
entries of the rows to the moved rows' destination hosts (moved rows lead, controller.routes.
entries.align_entries; for (e) the kept rows lead); re-predict.
A proposal is kept only if the objective vector improves on the current one and is not below
the starting one, no switch's TE entries exceed its budget (or what the start used, if more)
and the MLU of the data plane stays within the ceiling max(start MLU, (1 + MLU_SLACK) x the
solve's MLU bound). When no proposal for a job helps, the next job in the order is tried.
It stops after `rounds` kept moves, `tries` routings predicted or `work` carried rows
simulated (work, never time: the same inputs give the same routes), or when no job is below
its bound. When no arc is offered more than its capacity every job is at 1 and nothing is
predicted at all. Rows without a TE path stay without one: every flow the solve routed or
reported stays so.

Floors. Given a floor per job (the reference values of a certificate that handed jobs back,
controller.solver.solve step 9), the objective vector is led by every floored job's value
over its floor (at most 1), ascending: the pass first raises the jobs below their floor, the
furthest first, taking from the jobs furthest above theirs (proposal (d) ranks jobs by value
over floor), and only then the worst job.

Local predictions. Where every row has a TE path (one plane, no hashing), a try predicted
in full would pass half the work limit (the meta-24k mix: 0.5-0.9M rows a prediction) and
jobs have floors (step 9: a certificate handed jobs back or left one below a hashing it
compared), or the caller asks (`local`: step 9 runs the pass without floors first where it
was skipped), the start's rates are kept indexed (controller.model.local_rates.Plane) and each
try fills again only the rows its moved rows reach (`predict_moved`); a kept try's plane is
indexed again (`settled`). The work limit then counts the tries' rows alone: the moved rows
and those filled again (a cascade past local_rates' limit fills every row, and counts them
all). Local rates are exact to local_rates' tolerance (relative 1e-7), so a kept move must
beat the current vector by ten times that; the certificate that follows predicts in full.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from controller.errors import LpError, LpTimeout
from controller.model.assignment import UNROUTED, Assignment
from controller.model.dataplane import Carried, carried, overrides_of
from controller.model.fabric import ACCESS, Fabric
from controller.model.flows import ALL_QPS, FlowSet, rank_within
from controller.model.health import LinkHealth
from controller.model.local_rates import TOL as LOCAL_TOL
from controller.model.local_rates import Plane
from controller.model.paths import SAME_RACK
from controller.model.rates import (
    REL_TOL,
    flow_shares,
    max_min_rates,
    shares_of_rates,
    stalled_rows,
)
from controller.routes.budget import table_usage
from controller.routes.entries import align_entries, entry_key, entry_keys
from controller.solver.bounds import lower_bound
from controller.solver.candidates import Candidates, candidates
from controller.solver.certificate import job_values
from controller.solver.commodities import commodities
from controller.solver.lp import solve_lp

log = logging.getLogger(__name__)

ROUNDS = 32  # kept moves at most
TRIES = 64  # candidate routings predicted at most
WORK = 250_000  # carried rows simulated at most (rows x seeds, summed over predictions)
TARGETS = 3  # jobs tried per round, in the objective's order
ROW_TRIES = 4  # flows' rows tried one by one per job
HOT_ARCS = 2  # over-capacity arcs relieved per job
RIP_ROWS = 4096  # TE rows ripped up and placed again per proposal at most
NOT_PREDICTED = "not predicted"  # bound_source of a pass skipped: over half its work limit
EVERY_JOB_STALLED = "every job stalled"  # JobObjective.stopped: worst, mean, bound 0
MLU_SLACK = 0.5  # the MLU may rise to (1 + this) x its bound (or stay at the start's, if higher)
# the cut bounds that hold for fractional routings (controller.solver.bounds)
FRACTIONAL = ("access", "rack-egress", "rack-ingress", "pod-egress", "pod-ingress")


@dataclass(frozen=True)
class Prediction:
    """Predicted values of one routing (module docstring)."""

    values: np.ndarray  # per job: bus bandwidth fraction (NaN: no flow delivered)
    share: np.ndarray  # per input flow: rate / demand, mean over seeds (NaN: not delivered)
    util: np.ndarray  # per arc: offered load / capacity, mean over seeds
    load: np.ndarray  # per arc: offered load (Gbps), mean over seeds
    mlu: float  # mean over seeds of the data plane's MLU
    planes: list[Carried] = field(repr=False)  # per seed, the rows as carried ([]: not kept)
    rows: int = 0  # carried rows simulated
    local: _Local | None = field(default=None, repr=False)  # predicted locally (_Local)


@dataclass(frozen=True)
class _Local:
    """A fixed routing's rows and max-min rates indexed for local changes
    (controller.model.local_rates), and the change a routing tried makes to them: the rows
    moved, their new arcs, the rows filled again and their rates (None: none)."""

    plane: Plane
    rows: Carried  # the rows as carried when `plane` was indexed (fixed: one per TE row)
    change: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def settled(self) -> _Local:
        """The change made and the plane indexed again (a routing kept)."""
        if self.change is None:
            return self
        plane = self.plane.moved(*self.change)
        return _Local(plane, dataclasses.replace(self.rows, arcs=plane.arcs))


@dataclass(frozen=True)
class JobObjective:
    """What the pass found and did: plain values for reports, Status and /metrics."""

    worst: float  # the worst job's predicted busbw fraction after the pass (1: none below)
    mean: float  # mean over jobs
    bound: float  # min(1, 1 / lambda*): no routing gives the worst job more
    bound_source: str  # where lambda* came from: "lp", a cut's name, or "none"
    worst_before: float
    mean_before: float
    # per priority class (highest first): (worst job, its bound over the class's flows)
    classes: dict[int, tuple[float, float]] = field(default_factory=dict)
    moves: int = 0  # proposals kept
    tried: int = 0  # routings predicted besides the start
    work: int = 0  # carried rows simulated
    rows_moved: int = 0  # TE rows whose path differs from the start
    mlu_before: float = 0.0  # MLU of the data plane (mean over seeds)
    mlu_after: float = 0.0
    mlu_ceiling: float = 0.0
    stopped: str = ""  # why the pass stopped (or was skipped)
    seconds: float = 0.0
    # jobs the pass raised to a floor first (a certificate's reference values; 0: none)
    floored: int = 0
    # jobs left out: a flow of theirs has no alive path (0 under any routing)
    stalled: int = 0

    @property
    def ratio(self) -> float:
        """The worst job over its bound: 1.0 is provably the best any routing can do."""
        return self.worst / self.bound if self.bound > 0 else float("nan")

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (classes keyed by priority, as strings)."""
        return {
            "worst": self.worst, "mean": self.mean, "bound": self.bound,
            "bound_source": self.bound_source, "ratio": self.ratio,
            "worst_before": self.worst_before, "mean_before": self.mean_before,
            "classes": {str(p): {"worst": w, "bound": b} for p, (w, b) in self.classes.items()},
            "moves": self.moves, "tried": self.tried, "work": self.work,
            "rows_moved": self.rows_moved, "mlu_before": self.mlu_before,
            "mlu_after": self.mlu_after, "mlu_ceiling": self.mlu_ceiling,
            "stopped": self.stopped, "seconds": self.seconds, "floored": self.floored,
            "stalled": self.stalled,
        }  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """Plain numbers, `objective_*`."""
        return {
            "objective_worst_job": self.worst,
            "objective_mean_job": self.mean,
            "objective_bound": self.bound,
            "objective_ratio": self.ratio,
            "objective_worst_before": self.worst_before,
            "objective_moves": float(self.moves),
            "objective_tried": float(self.tried),
            "objective_seconds": self.seconds,
            "objective_floored_jobs": float(self.floored),
            "objective_stalled_jobs": float(self.stalled),
        }

    def summary(self) -> str:
        """One line for an operator."""
        classes = (
            "; by priority: "
            + ", ".join(f"{p}: {w:.4g} of {b:.4g}" for p, (w, b) in self.classes.items())
            if len(self.classes) > 1
            else ""
        )
        floored = f"; {self.floored} job(s) raised to their reference first" if self.floored else ""
        if self.stalled:
            floored += (f"; {self.stalled} job(s) stalled (a flow with no alive path: 0 under "
                        "any routing), left out of worst and mean")  # fmt: skip
        if self.bound_source == NOT_PREDICTED:
            return f"job objective: not run ({self.stopped})"
        if self.stopped == EVERY_JOB_STALLED:
            return (f"job objective: every job stalled ({self.stalled}): each has a flow with "
                    "no alive path, 0 under any routing; nothing to raise")
        return (
            f"job objective: worst job {self.worst:.4g} = {self.ratio:.4f} x its bound "
            f"{self.bound:.4g} ({'line rate' if self.bound >= 1 - 1e-9 else self.bound_source}), "
            f"mean {self.mean:.4g}; before the pass "
            f"worst {self.worst_before:.4g}, mean {self.mean_before:.4g}; {self.moves} "
            f"move{'' if self.moves == 1 else 's'} "
            f"({self.rows_moved} rows) of {self.tried} tried, {self.stopped}{classes}{floored}; "
            f"{self.seconds:.3f} s"
        )


# ---- prediction ---------------------------------------------------------------------------
def predict(
    fabric: Fabric,
    health: LinkHealth,
    rows: FlowSet,
    path: np.ndarray,
    parent: np.ndarray,
    flows: FlowSet,
    *,
    qps: int,
    kind: str,
    seeds: tuple[int, ...],
    model: str,
    indexed: bool = False,
) -> Prediction:
    """Every job's value under the rows' paths (module docstring); `parent[i]` is row i's
    input flow in `flows`. `indexed`: keep the rates indexed, so that `predict_moved` can
    predict a few rows moved without filling every row again (every row must have a TE
    path, and the model be "striped", the one local_rates fills; the same values, to the
    bit)."""
    assignment = Assignment(rows, path)
    fixed = bool((path != UNROUTED).all())
    if indexed:
        if not fixed or model != "striped":
            raise ValueError("an indexed prediction needs a TE path for every row and the "
                             f"striped rate model (got {model!r})")  # fmt: skip
        # every row on its TE path: carried keeps them in order, hashing plays no part
        te = carried(fabric, health, assignment, parent, kind=kind, seed=seeds[0], qps=qps)
        rates = Plane(te.arcs, te.flows.demand, te.weight, health.arc_capacity(fabric))
        return _local_prediction(_Local(rates, te), rates.rate, rates.load, flows, model,
                                 rows=len(te.flows))  # fmt: skip
    use = seeds[:1] if fixed else seeds
    overrides = None if fixed else overrides_of(fabric, assignment)
    cap = health.arc_capacity(fabric)
    num_jobs = _num_jobs(flows)
    shares, values, loads, mlus, planes = [], [], [], [], []
    work = 0
    for seed in use:
        plane = carried(fabric, health, assignment, parent, kind=kind, seed=seed, qps=qps,
                        overrides=overrides)  # fmt: skip
        valid = plane.arcs >= 0
        weights = np.repeat(plane.flows.demand, plane.arcs.shape[1])[valid.ravel()]
        load = np.bincount(plane.arcs[valid], weights=weights, minlength=fabric.num_arcs)
        share = flow_shares(fabric, health, plane.arcs, plane.flows, plane.parent,
                            num_parents=len(flows), weight=plane.weight, model=model)  # fmt: skip
        shares.append(share)
        values.append(job_values(share, flows.job, num_jobs))
        loads.append(load)
        mlus.append(float(_util(load, cap).max(initial=0.0)))
        planes.append(plane)
        work += len(plane.flows)
    load = np.mean(loads, axis=0)
    return Prediction(
        values=np.mean(values, axis=0), share=np.mean(shares, axis=0), util=_util(load, cap),
        load=load, mlu=float(np.mean(mlus)), planes=planes, rows=work,
    )  # fmt: skip


def predict_moved(
    fabric: Fabric,
    rows: FlowSet,
    before: Prediction,
    path_before: np.ndarray,
    path: np.ndarray,
    flows: FlowSet,
    *,
    model: str = "striped",
) -> Prediction:
    """The prediction of `path`, a routing of the same rows as `before`'s (indexed, from
    `predict`, or kept from this), from `before`'s rates: only the rows the moved
    rows reach are filled again (controller.model.local_rates: exact to its tolerance)."""
    if before.local is None:
        raise ValueError("predict_moved needs an indexed prediction (predict)")
    start = before.local.settled()
    base = start.plane
    changed = np.flatnonzero(path != path_before)
    changed_arcs = Assignment(rows.take(changed), path[changed]).arcs(fabric)
    refills = base.refills
    refilled, rates = base.after(base.cap, changed, changed_arcs, np.zeros(0, np.int64))
    # a cascade past the local limit fills every row (its rows out: those whose rate moved)
    filled = base.arcs.shape[0] if base.refills > refills else refilled.size
    rate = base.rate.copy()
    rate[refilled] = rates
    load = base.load_after(changed, changed_arcs)
    # a moved row has arcs before and after: which flows are routed does not change, so
    # the shares are summed over the plane's arcs as they were
    local = _Local(base, start.rows, (changed, changed_arcs, refilled, rates))
    return _local_prediction(local, rate, load, flows, model,
                             rows=changed.size + filled)  # fmt: skip


def settled(pred: Prediction) -> Prediction:
    """`pred` ready to be the start of the next prediction and of proposals: a local
    change made and indexed, its rows as carried (the routing was kept)."""
    if pred.local is None or pred.local.change is None:
        return pred
    local = pred.local.settled()
    return dataclasses.replace(pred, planes=[local.rows], local=local)


def _local_prediction(local: _Local, rate: np.ndarray, load: np.ndarray, flows: FlowSet,
                      model: str, *, rows: int) -> Prediction:  # fmt: skip
    """Values, load and MLU from a fixed plane's rates; its rows as carried only once
    indexed (`settled`)."""
    base = local.plane
    share = shares_of_rates(base.arcs, base.cap, base.demand, rate, base.weight,
                            local.rows.parent, num_parents=len(flows), model=model)  # fmt: skip
    util = _util(load, base.cap)
    return Prediction(
        values=job_values(share, flows.job, _num_jobs(flows)), share=share, util=util,
        load=load, mlu=float(util.max(initial=0.0)),
        planes=[local.rows] if local.change is None else [], rows=rows, local=local,
    )  # fmt: skip


def _util(load: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """load / cap per arc: 0 unloaded, inf for load on a dead arc."""
    out = np.zeros(load.shape)
    live = cap > 0
    out[live] = load[live] / cap[live]
    out[~live & (load > 0)] = np.inf
    return out


def _num_jobs(flows: FlowSet) -> int:
    return max(len(flows.job_ids), int(flows.job.max(initial=-1)) + 1, 1)


# ---- the order ----------------------------------------------------------------------------
def job_priorities(flows: FlowSet) -> np.ndarray:
    """The priority of every job index (0 where the flows name none)."""
    out = np.zeros(_num_jobs(flows), np.int64)
    given = flows.priorities()
    out[: given.size] = given
    return out


def job_order(values: np.ndarray, priority: np.ndarray, jobs: np.ndarray) -> np.ndarray:
    """`jobs` (indices) worst first: priority descending, value ascending (not delivered:
    -1), job index ascending."""
    v = np.where(np.isnan(values[jobs]), -1.0, values[jobs])
    return jobs[np.lexsort((jobs, v, -priority[jobs]))]


def objective_vector(values: np.ndarray, priority: np.ndarray, jobs: np.ndarray) -> np.ndarray:
    """The values of `jobs` in the objective's order (module docstring)."""
    order = job_order(values, priority, jobs)
    return np.where(np.isnan(values[order]), -1.0, values[order])


def over_floor(values: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Per job, its value over its floor (not delivered: -1); NaN where it has no floor
    (NaN or 0)."""
    has = np.isfinite(floor) & (floor > 0)
    ratio = np.where(np.isnan(values), -1.0, values / np.where(has, floor, 1.0))
    return np.where(has, ratio, np.nan)


def floored_vector(
    values: np.ndarray, priority: np.ndarray, jobs: np.ndarray, floor: np.ndarray | None,
    *, by_class: bool = False,
) -> np.ndarray:
    """objective_vector, led by every floored job's value over its floor (at most 1; not
    delivered: -1), ascending: first no job below its floor, then the usual order.
    `by_class`: per priority class instead, the highest first: the class's floored jobs'
    values over their floors, then the class's values; a floor of a lower class then never
    outranks a higher class's values (with one class, the same vector)."""
    if floor is None:
        return objective_vector(values, priority, jobs)
    ratio = over_floor(values, floor)
    if not by_class:
        r = ratio[jobs]
        return np.concatenate([np.sort(np.minimum(1.0, r[~np.isnan(r)])),
                               objective_vector(values, priority, jobs)])  # fmt: skip
    parts = []
    for p in np.unique(priority[jobs])[::-1]:
        mine = jobs[priority[jobs] == p]
        r = ratio[mine]
        parts += [np.sort(np.minimum(1.0, r[~np.isnan(r)])),
                  objective_vector(values, priority, mine)]  # fmt: skip
    return np.concatenate(parts)


def compare(a: np.ndarray, b: np.ndarray, rel_tol: float = REL_TOL) -> int:
    """1 if vector `a` is lexicographically better than `b` (at the first position where they
    differ by more than `rel_tol` relative, a's is larger), -1 if worse, 0 if equal."""
    differ = np.flatnonzero(np.abs(a - b) > rel_tol * np.maximum(np.abs(b), 1.0))
    if not differ.size:
        return 0
    return 1 if a[differ[0]] > b[differ[0]] else -1


# ---- the bound ----------------------------------------------------------------------------
def worst_job_bound(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, lp_mlu: float | None = None
) -> tuple[float, str]:
    """(min(1, 1 / lambda), where lambda came from) for `flows` (module docstring): lambda
    the LP's fractional optimum if given, else the best fractional cut bound."""
    if not len(flows):
        return 1.0, "none"
    parts = lower_bound(fabric, health, flows).parts
    cuts = {k: parts[k] for k in FRACTIONAL if k in parts}
    if lp_mlu is not None:
        cuts["lp"] = max(lp_mlu, cuts.get("access", 0.0))
    name = max(sorted(cuts), key=lambda k: cuts[k]) if cuts else "none"
    lam = cuts.get(name, 0.0)
    return (1.0 if lam <= 1.0 else 1.0 / lam), name


# a priority class's own LP (its max-concurrent-flow bound) is solved up to this many
# commodities (RTSW pairs); beyond, its cut bounds stand in (work, not time)
CLASS_LP_COMMODITIES = 4096
# the seconds all the classes' LPs of one pass share (the solve's lp_time_limit)
CLASS_LP_SECONDS = 30.0


def class_bounds(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    delivered: np.ndarray,
    priority: np.ndarray,
    lp_mlu: float | None,
    *,
    lp_seconds: float = CLASS_LP_SECONDS,
    backend: str = "auto",
) -> tuple[dict[int, float], float, str]:
    """(bound per priority class, the bound over every delivered flow, its source). The LP
    counts only when every flow is delivered (it covers them all). The classes' own LPs
    share `lp_seconds` (0: none, the cut bounds serve, as the solve's `lp="never"` asks):
    an LP that does not converge (a link degraded to 1e-6 of its speed beside line-rate
    flows) costs its time limit, and must not cost it once per class."""
    lp = lp_mlu if bool(delivered.all()) else None
    mine = flows.take(np.flatnonzero(delivered))
    overall, source = worst_job_bound(fabric, health, mine, lp)
    classes = np.unique(priority[flows.job])
    if classes.size <= 1:
        return {int(p): overall for p in classes}, overall, source
    out = {}
    late: list[int] = []  # classes whose LP the shared time cut short: their cuts serve
    deadline = time.perf_counter() + lp_seconds
    for p in classes[::-1].tolist():
        rows = np.flatnonzero(delivered & (priority[flows.job] == p))
        mine = flows.take(rows)
        own, cut_short = (None, False) if lp_seconds <= 0 else _class_lp(
            fabric, health, mine, deadline - time.perf_counter(), backend)
        if cut_short:
            late.append(int(p))
        out[int(p)] = worst_job_bound(fabric, health, mine, own)[0]
    if late:
        # the one outcome here that depends on the machine's speed, not on the inputs: said
        log.warning("job objective: the LP of priority class%s %s did not finish within the "
                    "%g s the classes' LPs share (the solve's LP time limit); the cut bounds "
                    "serve for %s", "es" * (len(late) > 1), ", ".join(map(str, late)),
                    lp_seconds, "them" if len(late) > 1 else "it")  # fmt: skip
    return out, overall, source


def _class_lp(fabric: Fabric, health: LinkHealth, flows: FlowSet, seconds: float,
              backend: str) -> tuple[float | None, bool]:  # fmt: skip
    """(the fractional min-MLU optimum of a class's flows alone (lambda*_class, module
    docstring), when small enough and solvable within `seconds`, else None: the cut bounds
    serve; whether they serve because the LP needed more than `seconds`)."""
    comm = commodities(fabric, flows)
    if not 0 < len(comm) <= CLASS_LP_COMMODITIES:
        return None, False
    if seconds <= 0:
        return None, True
    try:
        lp = solve_lp(fabric, health, comm, backend=backend, time_limit=seconds)
    except LpTimeout:
        return None, True
    except LpError:
        return None, False
    return (None if lp.unroutable.size else float(lp.mlu)), False


# ---- the pass -----------------------------------------------------------------------------
@dataclass
class _State:
    path: np.ndarray
    pred: Prediction
    vector: np.ndarray
    usage: np.ndarray
    levels: _Levels | None = None  # read from `pred` once, on first need
    keys: _Keys | None = None  # the entry keys of `path`, built once, on first need
    follow_first: bool = False  # the move kept last was proposal (e)'s: try (e) first


def raise_worst(
    fabric: Fabric,
    health: LinkHealth,
    rows: FlowSet,
    path: np.ndarray,
    parent: np.ndarray,
    flows: FlowSet,
    *,
    qps: int,
    budget: np.ndarray,
    mlu_bound: float,
    lp_mlu: float | None = None,
    kind: str = "eecmp",
    seeds: tuple[int, ...] = (1, 2, 3, 4),
    model: str = "striped",
    rounds: int = ROUNDS,
    tries: int = TRIES,
    work: int = WORK,
    mlu: float | None = None,
    floor: np.ndarray | None = None,
    local: bool | None = None,
    lp_seconds: float = CLASS_LP_SECONDS,
    backend: str = "auto",
) -> tuple[np.ndarray, JobObjective]:
    """The rows' paths after the pass (module docstring; `path` itself when nothing moved)
    and what it found. `parent[i]`: row i's input flow in `flows` (whose jobs and priorities
    count); `budget`: TE entries per node (inf: unlimited); `mlu_bound`: the solve's MLU
    lower bound; `lp_mlu`: the LP optimum, if the solve ran it; `mlu`: the rows' MLU if
    known (load / capacity at most 1 everywhere: nothing to raise, no load counted);
    `floor`: per job index a value to raise it to before any other job is raised (a
    certificate's reference values; NaN or 0: none), module docstring "Floors"; `local`:
    predict the tries locally where the routing is fixed (None: where a try predicted in
    full would pass half the work limit and `floor` is given), module docstring "Local
    predictions"; `lp_seconds`, `backend`: the priority classes' own LPs (class_bounds)."""
    start = time.perf_counter()
    path = np.asarray(path, np.int64)
    parent = np.asarray(parent, np.int64)
    priority = job_priorities(flows)
    jobs = np.flatnonzero(np.bincount(flows.job, minlength=priority.size) > 0)
    cap = health.arc_capacity(fabric)
    # a job with a flow no path is alive for is 0 under any routing: left out, reported
    dead = stalled_rows(fabric, cap, flows)
    stalled = np.intersect1d(jobs, flows.job[dead]) if dead.size else dead
    jobs = jobs[~np.isin(jobs, stalled)]

    def done(p: np.ndarray, report: JobObjective) -> tuple[np.ndarray, JobObjective]:
        return p, dataclasses.replace(report, stalled=int(stalled.size))

    if not len(rows) or not jobs.size:
        if stalled.size:  # every job at 0 under any routing: its bound too
            return done(path, _report(0.0, 0.0, 0.0, "none", start, stopped=EVERY_JOB_STALLED))
        return done(path, _report(1.0, 1.0, 1.0, "none", start, stopped="no flows"))
    te = path != UNROUTED
    one = len(rows) * (1 if te.all() else len(seeds))
    # a try predicted in full would pass half the work limit: predict tries locally where
    # the routing is fixed (every row on a TE path) and jobs have floors to reach (step 9:
    # the promise at stake), else the pass would only report
    full_too_much = bool(rounds) and 2 * one > work
    local = bool(te.all()) and model == "striped" and (
        full_too_much and floor is not None if local is None else local)
    too_much = full_too_much and not local
    if te.all() and (mlu is None or mlu <= 1.0 or not too_much):
        # every flow gets its demand: every job at 1, the bound (cost: one load count, none
        # when the solve's MLU says so; a pass over the work limit needs no count)
        if mlu is None or mlu > 1.0:
            load = Assignment(rows, path).link_load(fabric)
            over = bool((load > cap * (1 + REL_TOL) + REL_TOL).any())
        else:
            over = False
        if not over:
            return done(path, _report(1.0, 1.0, 1.0, "none", start,
                                      stopped="skipped: no link over capacity"))  # fmt: skip

    if too_much:
        # not even one proposal fits the work limit after the first prediction: the pass
        # would only report, at the price of a prediction as long as the certificate's
        nan = float("nan")
        return done(path, _report(nan, nan, nan, NOT_PREDICTED, start,
                                  stopped=f"skipped: a prediction simulates {one:,} rows, "
                                          f"over half the work limit ({work:,})"))  # fmt: skip

    def run(p: np.ndarray) -> Prediction:
        if local:
            return predict_moved(fabric, rows, state.pred, state.path, p, flows, model=model)
        return predict(fabric, health, rows, p, parent, flows, qps=qps, kind=kind,
                       seeds=seeds, model=model)  # fmt: skip

    first = predict(fabric, health, rows, path, parent, flows, qps=qps, kind=kind,
                    seeds=seeds, model=model, indexed=local)  # fmt: skip
    # the bound over the jobs the pass values: the stalled ones' flows left out too (their
    # load only lowers what the others can get, so the bound stays valid)
    delivered = np.isfinite(first.share) & ~np.isin(flows.job, stalled)
    per_class, bound, source = class_bounds(fabric, health, flows, delivered, priority, lp_mlu,
                                            lp_seconds=lp_seconds, backend=backend)  # fmt: skip
    worst0, mean0 = _worst_mean(first.values, jobs)
    # the work limit counts the start's prediction too, unless the tries are local
    spent = 0 if local else first.rows
    # local predictions are exact to local_rates' tolerance: a kept move must beat it
    tol = 10 * LOCAL_TOL if local else REL_TOL
    vector = floored_vector(first.values, priority, jobs, floor)
    usage = table_usage(fabric, Assignment(rows, path))
    limit = np.maximum(budget, usage)
    ceiling = max(first.mlu, (1 + MLU_SLACK) * mlu_bound)
    state = _State(path, first, vector, usage)
    cand = candidates(fabric, rows)
    host = rows.dst_host(fabric)
    movable = te & (cand.cls != SAME_RACK)
    core = np.repeat(fabric.link_kind != ACCESS, 2)
    moves = tried = 0
    stopped = "no proposal improves the job vector"
    while True:
        below = _below(state.pred.values, priority, jobs, per_class, floor)
        if not below.size:
            stopped = "every job at its bound"
            break
        if moves >= rounds:
            stopped = f"{rounds} moves (the round limit)" if rounds else "job_rounds 0: none tried"
            break
        kept = False
        for target in below[:TARGETS].tolist():
            for moved, follow in _proposals(fabric, target, state, rows, parent, flows, cand,
                                            movable, cap, core, priority, jobs, host,
                                            floor):  # fmt: skip
                if tried >= tries or spent >= work:
                    break
                new = _aligned(fabric, rows, state.path, moved, host, follow)
                if np.array_equal(new, state.path):
                    continue
                after = _usage_after(fabric, rows, state, new, host)
                if after is None or (after > limit).any():
                    continue
                pred = run(new)
                tried += 1
                spent += pred.rows
                if pred.mlu > ceiling * (1 + REL_TOL) + REL_TOL:
                    continue
                vec = floored_vector(pred.values, priority, jobs, floor)
                if compare(vec, state.vector, tol) > 0 and compare(vec, vector, tol) >= 0:
                    state = _State(new, settled(pred), vec, after, follow_first=follow)
                    moves += 1
                    kept = True
                    break
            if kept or tried >= tries or spent >= work:
                break
        if not kept:
            if tried >= tries:
                stopped = f"{tries} routings tried (the try limit)"
            elif spent >= work:
                stopped = f"{work:,} rows simulated (the work limit)"
            break
    worst, mean = _worst_mean(state.pred.values, jobs)
    classes = {}
    for p, b in per_class.items():
        mine = jobs[priority[jobs] == p]
        classes[p] = (_worst_mean(state.pred.values, mine)[0], b)
    out = state.path if moves else path
    return done(out, JobObjective(
        worst=worst, mean=mean, bound=bound, bound_source=source, worst_before=worst0,
        mean_before=mean0, classes=classes, moves=moves, tried=tried,
        work=spent + (first.rows if local else 0),
        rows_moved=int((out != path).sum()), mlu_before=first.mlu, mlu_after=state.pred.mlu,
        mlu_ceiling=ceiling, stopped=stopped, seconds=time.perf_counter() - start,
        floored=0 if floor is None else int((np.isfinite(floor[jobs]) & (floor[jobs] > 0)).sum()),
    ))  # fmt: skip


def _report(worst: float, mean: float, bound: float, source: str, start: float, *,
            stopped: str) -> JobObjective:  # fmt: skip
    return JobObjective(worst=worst, mean=mean, bound=bound, bound_source=source,
                        worst_before=worst, mean_before=mean, classes={}, stopped=stopped,
                        seconds=time.perf_counter() - start)  # fmt: skip


def _worst_mean(values: np.ndarray, jobs: np.ndarray) -> tuple[float, float]:
    v = values[jobs]
    v = v[np.isfinite(v)]
    return (float(v.min()), float(v.mean())) if v.size else (1.0, 1.0)


def _below(
    values: np.ndarray, priority: np.ndarray, jobs: np.ndarray, bound: dict[int, float],
    floor: np.ndarray | None = None,
) -> np.ndarray:
    """Jobs below their floor (the furthest first), then the delivered jobs below their
    class bound, in the objective's order."""
    order = job_order(values, priority, jobs)
    v = values[order]
    b = np.array([bound.get(int(p), 1.0) for p in priority[order]])
    out = order[np.isfinite(v) & (v < b * (1 - 1e-6))]
    if floor is None:
        return out
    ratio = over_floor(values, floor)[jobs]
    under = ratio < 1 - 1e-6  # NaN (no floor): False
    first = jobs[under][np.lexsort((jobs[under], ratio[under]))]
    return np.concatenate([first, out[~np.isin(out, first)]])


# ---- proposals ----------------------------------------------------------------------------
def _proposals(
    fabric: Fabric,
    target: int,
    state: _State,
    rows: FlowSet,
    parent: np.ndarray,
    flows: FlowSet,
    cand: Candidates,
    movable: np.ndarray,
    cap: np.ndarray,
    core: np.ndarray,
    priority: np.ndarray,
    jobs: np.ndarray,
    host: np.ndarray,
    floor: np.ndarray | None = None,
) -> Iterator[tuple[np.ndarray, bool]]:
    """Rows to move and their new paths, as a full path array per proposal, best first, and
    whether the moved rows follow the kept ones where they meet at an entry key (else they
    lead: _aligned). Jobs rank by value, or by value over floor where they have one."""
    pred = state.pred
    value = pred.values[target]
    share = pred.share
    worst = (flows.job == target) & np.isfinite(share) & (share <= value * (1 + 1e-6) + 1e-12)
    over = core & (pred.util > 1 + REL_TOL)
    hot = np.zeros(cap.size, bool)  # over-capacity arcs a worst flow's carried rows cross
    for plane in pred.planes:
        a = plane.arcs[worst[plane.parent]]
        a = a[a >= 0]
        hot[a[over[a]]] = True
    if not hot.any():
        return
    path = state.path
    rank = np.zeros(priority.size, np.int64)
    key = pred.values
    if floor is not None:
        ratio = over_floor(key, floor)
        key = np.where(np.isnan(ratio), key, ratio)
    order = job_order(key, priority, jobs)
    rank[order] = np.arange(order.size)
    chosen = cand.all_chosen(path)
    crossing = movable & np.where(chosen >= 0, hot[np.maximum(chosen, 0)], False).any(axis=1)
    own = np.flatnonzero(crossing & worst[parent])
    # (a) the worst flows' rows, slowest first, each to the path where a QP would get the
    # highest max-min level: offered load does not see that a QP sharing an arc with 200
    # small QPs gets 1/200 of it where 20 large ones would leave it 1/20
    worst_rows = np.flatnonzero(movable & worst[parent])
    if worst_rows.size and state.levels is None:
        state.levels = _arc_levels(pred, path, cap)
    # (e), below, only with floors (the promise at stake), and first where it made the last
    # move kept
    followed = floor is not None
    if followed and state.follow_first:
        yield from _followed(fabric, state, cand, worst_rows, rows, parent, host)
    if worst_rows.size:
        assert state.levels is not None
        batch = _levelled(cand, path, worst_rows, rows.demand, state.levels.copy())
        if (batch != path).any():
            yield batch, False
    # (b) rip up every TE row crossing those arcs and place them again, the worst flows'
    # rows first, then the rows of the jobs worst off: swaps no single move finds
    ripped = np.flatnonzero(crossing)
    if ripped.size:
        key = np.lexsort((ripped, -rows.demand[ripped], rank[rows.job[ripped]],
                          ~worst[parent[ripped]]))  # fmt: skip
        ripped = ripped[key][:RIP_ROWS]
        batch = _rerouted(cand, path, ripped, rows.demand, pred.load, cap)
        if (batch != path).any():
            yield batch, False
    # (c) the worst flows' own rows to their least loaded paths, together, then one by one
    if own.size:
        heat = np.array([pred.util[_row_arcs(cand, r, path[r])].max() for r in own.tolist()])
        own = own[np.lexsort((own, -heat))]
        load = pred.load.copy()
        batch = path.copy()
        for r in own.tolist():
            p = _best_path(cand, r, batch[r], rows.demand[r], load, cap)
            if p is not None:
                _shift(cand, r, batch[r], p, rows.demand[r], load)
                batch[r] = p
        if (batch != path).any():
            yield batch, False
        if own.size > 1:
            for r in own[:ROW_TRIES].tolist():
                p = _best_path(cand, r, path[r], rows.demand[r], pred.load, cap)
                if p is not None:
                    one = path.copy()
                    one[r] = p
                    yield one, False
    # (d) the TE rows of other flows off the hottest arcs, best-off jobs first: where they
    # put no link over capacity, then (rows of jobs after the target in the order) anywhere
    arcs_hot = np.flatnonzero(hot)
    arcs_hot = arcs_hot[np.lexsort((arcs_hot, -pred.util[arcs_hot]))][:HOT_ARCS]
    for loose in (False, True):
        for a in arcs_hot.tolist():
            on = movable & ~worst[parent] & (chosen == a).any(axis=1)
            if loose:
                on &= rank[rows.job] > rank[target]
            on = np.flatnonzero(on)
            if not on.size:
                continue
            on = on[np.lexsort((on, -rows.demand[on], -rank[rows.job[on]]))]
            load = pred.load.copy()
            batch = path.copy()
            for r in on.tolist():
                if load[a] <= cap[a] * (1 + REL_TOL):
                    break
                p = _best_path(cand, r, batch[r], rows.demand[r], load, cap, avoid=a,
                               within=None if loose else 1.0, improve=not loose)  # fmt: skip
                if p is not None:
                    _shift(cand, r, batch[r], p, rows.demand[r], load)
                    batch[r] = p
            if (batch != path).any():
                yield batch, False
    if followed and not state.follow_first:
        yield from _followed(fabric, state, cand, worst_rows, rows, parent, host)


def _followed(fabric: Fabric, state: _State, cand: Candidates, worst_rows: np.ndarray,
              rows: FlowSet, parent: np.ndarray, host: np.ndarray
              ) -> Iterator[tuple[np.ndarray, bool]]:  # fmt: skip
    """Proposal (e): (a) again, each row choosing only among the paths on which it leaves
    every entry key it meets by the next hop the key's rows take (it follows them: a row
    leading a key drags the key's rows along, which (a) expects nothing of); then smaller
    steps: of each worst flow's rows moved, the first half, a quarter, ..., one (every such
    flow must rise for the job to). Moved together, the worst flows' rows can take another
    job further down than they rise (each expects its level as if the others stayed), where
    a few of them would not."""
    if not worst_rows.size:
        return
    path = state.path
    if state.keys is None:
        state.keys = _Keys.of(fabric, rows, path)
    assert state.levels is not None
    levelled: list[int] = []
    batch = _levelled(cand, path, worst_rows, rows.demand, state.levels.copy(), levelled,
                      keys=state.keys.copy(), host=host, rows_of=rows)  # fmt: skip
    if not levelled:
        return
    yield batch, True
    moved = np.asarray(levelled, np.int64)
    place = rank_within(parent[moved])  # among its flow's moved rows, in the order they moved
    k = (int(place.max()) + 1) // 2
    while k >= 1:
        step = path.copy()
        take = moved[place < k]
        step[take] = batch[take]
        yield step, True
        k //= 2


@dataclass
class _Levels:
    """Per arc, the mean over a prediction's planes of: QPs crossing it, capacity its rows
    leave unused, and the highest per-QP rate on it (its max-min level where it is full);
    per TE row, its per-QP rate (NaN: no TE path)."""

    qps: np.ndarray
    spare: np.ndarray
    top: np.ndarray
    row_level: np.ndarray
    weight: np.ndarray  # per TE row, QPs it stands for

    def at(self, arcs: np.ndarray, w: float, per_qp: float) -> np.ndarray:
        """The level a newcomer of w QPs, per_qp demand each, could expect on each of
        `arcs`: its demand where the arc has room for it; else the room left per QP, or the
        arc's level shared with w more QPs, whichever is higher."""
        room = self.spare[arcs] / w
        shared = self.top[arcs] * self.qps[arcs] / (self.qps[arcs] + w)
        return np.where(room >= per_qp * (1 - REL_TOL), per_qp, np.maximum(room, shared))

    def copy(self) -> _Levels:
        return _Levels(self.qps.copy(), self.spare.copy(), self.top.copy(), self.row_level,
                       self.weight)  # fmt: skip

    def move(self, arcs: np.ndarray, w: float, level: float, sign: float) -> None:
        """Count a row of w QPs at `level` per QP onto (sign 1) or off (sign -1) `arcs`."""
        np.add.at(self.qps, arcs, sign * w)
        np.add.at(self.spare, arcs, -sign * w * level)
        if sign > 0:
            full = self.spare[arcs] <= 0
            self.top[arcs[full]] = np.minimum(self.top[arcs[full]], level)


def _arc_levels(pred: Prediction, path: np.ndarray, cap: np.ndarray) -> _Levels:
    """The prediction's max-min rates per row, summed per arc (_Levels). The TE rows come
    first in each carried plane, in row order (controller.model.dataplane.carried)."""
    te = np.flatnonzero(path != UNROUTED)
    num = cap.size
    qps, spare, top = np.zeros(num), np.zeros(num), np.zeros(num)
    row_level = np.zeros(path.size)
    weight = np.ones(path.size)
    for plane in pred.planes:
        if pred.local is not None and pred.local.change is None:  # the rates at hand
            rate = pred.local.plane.rate
        else:
            rate = max_min_rates(plane.arcs, cap, plane.flows.demand, weight=plane.weight)
        valid = plane.arcs >= 0
        hops = plane.arcs.shape[1]
        arcs = plane.arcs[valid]
        level = rate / plane.weight
        qps += np.bincount(arcs, np.repeat(plane.weight, hops)[valid.ravel()], minlength=num)
        spare += np.maximum(cap, 0.0) - np.bincount(
            arcs, np.repeat(rate, hops)[valid.ravel()], minlength=num)  # fmt: skip
        highest = np.zeros(num)
        np.maximum.at(highest, arcs, np.repeat(level, hops)[valid.ravel()])
        top += highest
        row_level[te] += level[: te.size]
        weight[te] = plane.weight[: te.size]
    n = max(len(pred.planes), 1)
    row_level = np.where(path != UNROUTED, row_level / n, np.nan)
    return _Levels(qps / n, spare / n, top / n, row_level, weight)


def _levelled(
    cand: Candidates, path: np.ndarray, rows: np.ndarray, demand: np.ndarray, lv: _Levels,
    moved: list[int] | None = None, *, keys: _Keys | None = None,
    host: np.ndarray | None = None, rows_of: FlowSet | None = None,
) -> np.ndarray:
    """`path` with each of `rows`, the slowest per QP first, moved to its candidate path
    with the highest expected level (_Levels.at, the least over its arcs) where that beats
    what it gets now; the levels are updated move by move. `moved`: gets the rows moved, in
    order. `keys` (with `host` and `rows_of`: every row's destination host and the rows):
    only paths on which the row follows the entry keys it meets (_Keys.followed), the keys
    updated move by move."""
    out = path.copy()
    order = rows[np.lexsort((rows, lv.row_level[rows]))]
    for r in order.tolist():
        arcs = cand.arcs(r)
        if arcs.shape[0] < 2:
            continue
        w = float(lv.weight[r])
        now_level = float(lv.row_level[r])
        now = int(path[r])
        lv.move(arcs[now], w, now_level, -1.0)
        expect = lv.at(arcs, w, demand[r] / w).min(axis=1)
        if keys is not None:
            assert host is not None and rows_of is not None
            at, leaving = keys.pairs(arcs, int(rows_of.src_nic[r]), int(host[r]),
                                     int(rows_of.qp[r]))  # fmt: skip
            keys.add(at[now], leaving[now], -1)
            ok = keys.followed(at, leaving)
            ok[now] = True
            expect = np.where(ok, expect, -np.inf)
        best = int(np.lexsort((np.arange(expect.size), np.arange(expect.size) != now,
                               -expect))[0])  # fmt: skip
        if expect[best] > max(now_level, expect[now]) * (1 + 1e-6):
            out[r] = best
            if moved is not None:
                moved.append(r)
            lv.move(arcs[best], w, float(expect[best]), 1.0)
        else:
            best = now
            lv.move(arcs[now], w, now_level, 1.0)
        if keys is not None:
            keys.add(at[best], leaving[best], 1)
    return out


@dataclass
class _Keys:
    """The TE entry keys a routing's rows meet (controller.routes.entries: entry_keys and
    entry_key, the one definition): per key the next arc its rows leave by and how many rows
    do. An aligned routing leaves each key by one arc. Sorted arrays for the routing, a dict
    for the changes made to it since."""

    fabric: Fabric
    key: np.ndarray  # sorted distinct keys (entry_key)
    out: np.ndarray  # per key: the arc its rows leave by
    count: np.ndarray  # per key: its rows
    top_qp: int  # entry_key's QP span: the rows' largest bucket
    changed: dict[int, tuple[int, int]] = field(default_factory=dict)  # key -> (out, count)

    @classmethod
    def of(cls, fabric: Fabric, rows: FlowSet, path: np.ndarray) -> _Keys:
        top = int(rows.qp.max(initial=ALL_QPS))
        entries = entry_keys(fabric, Assignment(rows, path))
        key = entry_key(fabric, entries.in_arc, entries.dst_host, entries.qp, top)
        order = np.lexsort((entries.out_arc, key))
        key, out = key[order], entries.out_arc[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else key
        count = np.diff(np.r_[starts, key.size])
        return cls(fabric, key[starts], out[starts], count, top)

    def copy(self) -> _Keys:
        return dataclasses.replace(self, changed=dict(self.changed))

    def pairs(self, arcs: np.ndarray, nic: int, host: int, qp: int
              ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """(keys, next arcs) [P, hops] of a row's candidate paths (`arcs`: their core arcs,
        -1 padded) from `nic` to `host` in bucket `qp`: the source RTSW's key (the NIC's
        access arc), then one per core arc followed by another; _NO_KEY where none."""
        f = self.fabric
        source = int(entry_key(f, np.asarray(f.up(f.access_link(nic))), np.asarray(host),
                               np.asarray(qp), self.top_qp))  # fmt: skip
        arriving, leaving = arcs[:, :-1], arcs[:, 1:]
        valid = (arriving >= 0) & (leaving >= 0)
        inner = np.where(valid, entry_key(f, np.maximum(arriving, 0), np.asarray(host),
                                          np.asarray(ALL_QPS), self.top_qp), _NO_KEY)  # fmt: skip
        first = np.where(arcs[:, :1] >= 0, source, _NO_KEY)
        return (np.concatenate([first, inner], axis=1),
                np.concatenate([arcs[:, :1], np.where(valid, leaving, -1)], axis=1))

    def followed(self, keys: np.ndarray, leaving: np.ndarray) -> np.ndarray:
        """Per candidate path (`pairs`' rows): does it leave every key it meets by the arc
        the key's rows take (or meet no rows there)?"""
        out, count = np.full(keys.shape, -1, np.int64), np.zeros(keys.shape, np.int64)
        if self.key.size:
            i = np.minimum(np.searchsorted(self.key, keys), self.key.size - 1)
            hit = self.key[i] == keys
            out[hit], count[hit] = self.out[i[hit]], self.count[i[hit]]
        if self.changed:
            for (p, j) in np.argwhere(np.isin(keys, np.fromiter(self.changed, np.int64))):
                out[p, j], count[p, j] = self.changed[int(keys[p, j])]
        clash = (keys != _NO_KEY) & (count > 0) & (out != leaving)
        return ~clash.any(axis=1)

    def _get(self, k: int) -> tuple[int, int]:
        if k in self.changed:
            return self.changed[k]
        i = int(np.searchsorted(self.key, k))
        if i < self.key.size and int(self.key[i]) == k:
            return int(self.out[i]), int(self.count[i])
        return -1, 0

    def add(self, keys: np.ndarray, leaving: np.ndarray, sign: int) -> None:
        """A row on one path (`pairs`' row of it) joins (+1) or leaves (-1) its keys."""
        for k, out in zip(keys.tolist(), leaving.tolist(), strict=True):
            if k != _NO_KEY:
                now, count = self._get(k)
                self.changed[k] = (out if sign > 0 else now, count + sign)


_NO_KEY = np.iinfo(np.int64).max


def _rerouted(
    cand: Candidates,
    path: np.ndarray,
    ripped: np.ndarray,
    demand: np.ndarray,
    load: np.ndarray,
    cap: np.ndarray,
) -> np.ndarray:
    """`path` with the `ripped` rows taken off and placed again in that order, each on its
    candidate with the least bottleneck utilisation (ties: its current path, then the least
    summed utilisation, then the index)."""
    load = load.copy()
    for r in ripped.tolist():
        np.subtract.at(load, _row_arcs(cand, r, path[r]), demand[r])
    out = path.copy()
    inv = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), np.inf)
    for r in ripped.tolist():
        arcs = cand.arcs(r)
        util = (load[arcs] + demand[r]) * inv[arcs]
        top = util.max(axis=1)
        moved = np.arange(top.size) != path[r]
        best = int(np.lexsort((np.arange(top.size), util.sum(axis=1), moved, top))[0])
        if np.isfinite(top[best]):
            out[r] = best
        np.add.at(load, _row_arcs(cand, r, out[r]), demand[r])
    return out


def _row_arcs(cand: Candidates, r: int, p: int) -> np.ndarray:
    """Core arcs of row r's path p."""
    return cand.arcs(r)[p]


def _shift(cand: Candidates, r: int, old: int, new: int, demand: float, load: np.ndarray) -> None:
    """Move row r's demand in `load` from path `old` to path `new`."""
    np.subtract.at(load, _row_arcs(cand, r, old), demand)
    np.add.at(load, _row_arcs(cand, r, new), demand)


def _best_path(
    cand: Candidates,
    r: int,
    now: int,
    demand: float,
    load: np.ndarray,
    cap: np.ndarray,
    *,
    avoid: int | None = None,
    within: float | None = None,
    improve: bool = True,
) -> int | None:
    """Row r's candidate path other than `now` with the least bottleneck utilisation after
    the move (ties: least summed utilisation, then index); `improve`: only if that is below
    the bottleneck of `now`; `avoid`: an arc the path must not cross; `within`: a
    utilisation the path must stay within. None if no path qualifies."""
    arcs = cand.arcs(r)
    if arcs.shape[0] < 2:
        return None
    mine = np.isin(arcs, arcs[now])
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(cap[arcs] > 0, (load[arcs] + demand * ~mine) / cap[arcs], np.inf)
    top = util.max(axis=1)
    bad = np.zeros(top.size, bool)
    bad[now] = True
    if avoid is not None:
        bad |= (arcs == avoid).any(axis=1)
    if within is not None:
        bad |= top > within * (1 + REL_TOL)
    top = np.where(bad, np.inf, top)
    best = int(np.lexsort((np.arange(top.size), util.sum(axis=1), top))[0])
    if not np.isfinite(top[best]):
        return None
    if improve and top[best] >= float(util[now].max()) * (1 - REL_TOL):
        return None
    return best


def _aligned(
    fabric: Fabric, rows: FlowSet, path: np.ndarray, moved: np.ndarray, host: np.ndarray,
    follow: bool = False,
) -> np.ndarray:
    """`moved` with the entries of the rows to the moved rows' destination hosts aligned
    (controller.routes.entries.align_entries), the moved rows leading: a row moved into a
    key takes the key's other rows with it; or, `follow`, the kept rows leading: a row
    moved into a key leaves it on the hops its rows take, and moves alone."""
    changed = moved != path
    if not changed.any():
        return path
    sub = np.flatnonzero(np.isin(host, host[changed]))
    lead = np.where(changed[sub] != follow, 0.0, 1.0)
    out = moved.copy()
    out[sub] = align_entries(fabric, rows.take(sub), moved[sub], lead)
    return out


def _usage_after(
    fabric: Fabric, rows: FlowSet, state: _State, new: np.ndarray, host: np.ndarray
) -> np.ndarray | None:
    """TE entries per switch under `new`: every entry key holds its destination host, so
    only the rows to the moved rows' hosts are counted again, before and after."""
    changed = new != state.path
    if not changed.any():
        return None
    sub = np.flatnonzero(np.isin(host, host[changed]))
    part = rows.take(sub)
    before = table_usage(fabric, Assignment(part, state.path[sub]))
    after = table_usage(fabric, Assignment(part, new[sub]))
    return state.usage - before + after
