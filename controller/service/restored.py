"""The result of a routing adopted from the store, as a solve would report it.

A start (or a takeover) whose stored assignment answers to the stored inputs installs it as
it is and pushes nothing; the store keeps the routing, not its figures. They are computed
again here from the routing, its flows and the link health, so that Status, ListJobs and
/metrics go on across a restart: the input flows (a flow's QP buckets together), their lower
bound (the cheap bounds, as a settled link change reports them: an LP bound a solve found is
not kept), the MLU and collisions of the TE rows, the flows with no alive path. What the
routing does not tell is left unknown, never zero: no certificate (the next solve
certifies), no count of rows over the table budget or handed back (`UNKNOWN`); the MLU of a
routing with rows on the fabric's hashing is counted as its certificate counted it (the
mean over the hash seeds), so it reads across a restart as before; a job riding the hashing
whole says so, its reason not kept.
Pure: arrays in, a SolveResult out.
"""

from __future__ import annotations

import numpy as np

from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, distinct
from controller.model.health import LinkHealth
from controller.model.rates import stalled_rows
from controller.solver import SolveResult, bound_under
from controller.solver.certificate import CertifyOptions, input_flows, row_parents
from controller.solver.greedy import collided_arcs, utilisation
from controller.solver.job_objective import predict

RESTORED = "restored"  # SolveResult.method of a routing adopted from the store
# SolveResult.method of routes applied from a file and held (and of a repair of them): not
# solved here either, so figured the same way (controller.service.route_commands)
HELD = "held"
# SolveResult.metrics() keys a restored result cannot know (reported as NaN, not 0)
UNKNOWN = ("fallback_ecmp", "handed_back")
WHY_UNKNOWN = ("rides the fabric's hashing whole; why (the certificate or the table budget) "
               "is not kept across a restart: the next solve says")  # fmt: skip


def restored_result(
    fabric: Fabric, health: LinkHealth, assignment: Assignment, qps: int,
    certify: CertifyOptions | None = None,
) -> SolveResult:  # fmt: skip
    """`assignment`, adopted from the store under `health`, with the figures a solve would
    report of it (module docstring); `qps`: the QP buckets its lower bound allows. With
    `certify` (the options the routing was certified with), the MLU of a routing with rows
    on the fabric's hashing is counted here as its certificate counted it, the mean over
    the hash seeds of the data plane's (a simulation of it under each seed); else NaN."""
    flows, routed = assignment.flows, assignment.routed
    parent = row_parents(flows)
    inputs = input_flows(flows, parent)
    jobs = len(flows.job_ids)
    with_flows = np.bincount(flows.job, minlength=jobs) > 0
    steered = np.bincount(flows.job[routed], minlength=jobs) > 0
    hashed = np.flatnonzero(with_flows & ~steered)
    cap = health.arc_capacity(fabric)
    if routed.all():
        mlu = float(utilisation(fabric, health, assignment).max(initial=0.0))
    elif certify is not None:
        mlu = predict(fabric, health, flows, assignment.path, parent, inputs, qps=qps,
                      kind=certify.reference, seeds=certify.seeds, model=certify.model).mlu
    else:
        mlu = np.nan  # the predictor's simulation fills it in
    return SolveResult(
        assignment=assignment,
        mlu=mlu,
        bound=bound_under(fabric, inputs, health, qps, None),
        lp=None,
        collided_links=int(collided_arcs(fabric, health, assignment).size),
        churn=0,
        unroutable=distinct(parent[stalled_rows(fabric, cap, flows)]),
        fallback_ecmp=np.zeros(0, np.int64),
        method=RESTORED,
        parent=parent,
        split_flows=distinct(parent[flows.qp != ALL_QPS]),
        hashed_jobs={flows.job_ids[j]: WHY_UNKNOWN for j in hashed.tolist()},
        hashed_flows=np.flatnonzero(np.isin(inputs.job, hashed)),
    )


def status_metrics(result: SolveResult) -> dict[str, float]:
    """`result.metrics()` for Status: a restored result's says so (`restored` 1), as held
    routes' do (`held` 1), and has NaN (no number) for what it cannot know (`UNKNOWN`)."""
    out = result.metrics()
    if result.method in (RESTORED, HELD):
        out.update(dict.fromkeys(UNKNOWN, float("nan")))
        out[result.method] = 1.0
    return out
