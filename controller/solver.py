"""The TE solve: flows in, one path per flow out, with a proof of how good it is.

    1. validate the flows against the fabric (unknown NIC, bad demand -> FlowError)
    2. cheap lower bounds on MLU (controller.bounds)
    3. integral assignment (controller.assign): exact edge colouring where it applies,
       largest-first greedy and local search elsewhere, stability against `previous`
    4. if the result is above the cheap bound, the min-MLU LP over aggregated commodities
       (controller.lp) gives the tight bound and path shares; the assignment is re-run
       guided by them and the better result is kept
    5. the ratio MLU / bound is reported with every result

An assignment whose MLU equals a valid lower bound is optimal, so step 4 is skipped when the
cheap bound is already met (the usual case in a healthy 1:1 pod). `lp="always"` forces it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from controller import assign as assign_mod
from controller.assign import AssignResult, Guidance
from controller.assignment import Assignment
from controller.bounds import Bound, lower_bound
from controller.commodities import Commodities, commodities
from controller.fabric import Fabric
from controller.flows import FlowSet
from controller.health import LinkHealth
from controller.lp import LpSolution, solve_lp
from controller.repair import repair as repair_assignment

_TOL = 1e-9
LP_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class SolveOptions:
    """Knobs of a solve; the defaults suit a production controller."""

    lp: str = "auto"  # auto: only when the cheap bound is not met; always; never
    backend: str = "auto"  # OR-Tools LP backend (see controller.lp)
    lp_time_limit: float = 30.0  # seconds
    search_time: float | None = 5.0  # seconds of local search per assignment run
    move_threshold: float = 0.02  # re-place kept flows only if MLU improves by > 2%
    table_budget: int | None = None  # TE entries per switch; None = unlimited

    def __post_init__(self) -> None:
        if self.lp not in LP_MODES:
            raise ValueError(f"lp must be one of {', '.join(LP_MODES)}, got {self.lp!r}")
        if self.lp_time_limit <= 0:
            raise ValueError(f"lp_time_limit must be positive, got {self.lp_time_limit}")
        if self.move_threshold < 0:
            raise ValueError(f"move_threshold must be >= 0, got {self.move_threshold}")
        if self.table_budget is not None and self.table_budget < 0:
            raise ValueError(f"table_budget must be >= 0, got {self.table_budget}")


@dataclass(frozen=True)
class SolveResult:
    """An assignment, its quality against the lower bound, and what it cost."""

    assignment: Assignment
    mlu: float  # max utilisation over all arcs, TE-routed flows
    bound: Bound
    lp: LpSolution | None
    collided_links: int  # switch-to-switch arcs with more than one flow
    churn: int  # flows moved against `previous`
    unroutable: np.ndarray = field(repr=False)  # flow indices with no healthy path
    fallback_ecmp: np.ndarray = field(repr=False)  # flow indices over the table budget
    method: str = ""
    times: dict[str, float] = field(default_factory=dict)

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
            "collided_links": float(self.collided_links),
            "churn": float(self.churn),
            "unroutable": float(self.unroutable.size),
            "fallback_ecmp": float(self.fallback_ecmp.size),
        }
        out.update({f"{name}_seconds": value for name, value in self.times.items()})
        return out


def _guidance(fabric: Fabric, comm: Commodities, lp: LpSolution) -> Guidance:
    """LP path shares per (src RTSW, dst RTSW, path) for the guided assignment."""
    m, path, share = lp.path_shares(fabric, comm)
    return Guidance(src_rtsw=comm.src_rtsw[m], dst_rtsw=comm.dst_rtsw[m], path=path, share=share)


def _result(
    fabric: Fabric,
    res: AssignResult,
    bound: Bound,
    lp: LpSolution | None,
    times: dict[str, float],
) -> SolveResult:
    return SolveResult(
        assignment=res.assignment,
        mlu=res.mlu,
        bound=bound,
        lp=lp,
        collided_links=int(res.collided_links.size),
        churn=int(res.churn.size),
        unroutable=res.unroutable,
        fallback_ecmp=res.fallback_ecmp,
        method=res.method,
        times=times,
    )


def solve(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    *,
    previous: Assignment | None = None,
    options: SolveOptions | None = None,
) -> SolveResult:
    """Assign every flow a path; report MLU, the lower bound and their ratio."""
    opts = options or SolveOptions()
    times: dict[str, float] = {}
    start = time.perf_counter()
    flows.validate(fabric)
    bound = lower_bound(fabric, health, flows)
    times["bound"] = time.perf_counter() - start

    def run(guidance: Guidance | None) -> AssignResult:
        return assign_mod.assign(
            fabric,
            health,
            flows,
            previous=previous,
            move_threshold=opts.move_threshold,
            table_budget=opts.table_budget,
            lp_guidance=guidance,
            time_budget=opts.search_time,
        )

    lp: LpSolution | None = None
    t = time.perf_counter()
    res = run(None)
    times["assign"] = time.perf_counter() - t
    need_lp = opts.lp == "always" or (
        opts.lp == "auto" and res.mlu > bound.value * (1 + _TOL) + _TOL
    )
    if need_lp and len(flows):
        t = time.perf_counter()
        comm = commodities(fabric, flows)
        lp = solve_lp(fabric, health, comm, backend=opts.backend, time_limit=opts.lp_time_limit)
        times["lp"] = time.perf_counter() - t
        bound = lower_bound(fabric, health, flows, lp)
        t = time.perf_counter()
        guided = run(_guidance(fabric, comm, lp))
        times["guided_assign"] = time.perf_counter() - t
        if (guided.mlu, guided.collided_links.size) < (res.mlu, res.collided_links.size):
            res = guided
    times["total"] = time.perf_counter() - start
    return _result(fabric, res, bound, lp, times)


def repair(
    fabric: Fabric,
    health: LinkHealth,
    previous: SolveResult,
    *,
    old_health: LinkHealth | None = None,
) -> SolveResult:
    """Re-place only the flows the health change hit; everything else stays put.

    The bound is recomputed from the cheap bounds only (milliseconds); run `solve` with
    `previous=` afterwards for a global re-optimisation."""
    start = time.perf_counter()
    res = repair_assignment(fabric, health, previous.assignment, old_health=old_health)
    t_repair = time.perf_counter() - start
    bound = lower_bound(fabric, health, previous.assignment.flows)
    times = {"repair": t_repair, "total": time.perf_counter() - start}
    return _result(fabric, res, bound, None, times)
