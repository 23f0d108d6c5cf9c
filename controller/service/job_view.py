"""What the installed routing does for each job: its flows, how many TE steers and how many
ride the fabric's hashing, its predicted bus bandwidth, and why the certificate handed it
back (for ListJobs and `tectl job describe`). A job of the routing with no flows across the
fabric (one host, or GPUs that exchange nothing over it) has figures of none: nothing to
route, which is not "not installed". Plain data in, plain data out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from controller.solver import SolveResult


@dataclass(frozen=True)
class JobFigures:
    flows: int  # NIC-to-host flows of the job (input flows, not QP-bucket rows)
    te_flows: int  # with a TE path
    hashed_flows: int  # riding the hashing: no path, over the table budget, handed back
    # share of its demand as planned, the most any routing gives it (a job asking its NICs
    # for more than line rate is planned at line rate); None: not predicted yet, or no flows
    predicted_busbw: float | None
    # why the job rides the hashing whole, if it does: the certificate handed it back, or
    # it needs more TE entries than a table holds (controller.solver.unfit_jobs)
    handed_back: str = ""
    # the most one of its NICs is asked over its line rate (controller.model.jobs.
    # over_line_rate); 0: within it
    over_line_rate: float = 0.0
    # of hashed_flows, those with no path alive at all (SolveResult.unroutable): the job
    # is stalled under any routing
    stalled_flows: int = 0
    # what each NIC of it is asked to send (Job.demand), and its slowest NIC's line rate,
    # Gbps; 0: not known (no job given)
    demand_gbps: float = 0.0
    line_rate_gbps: float = 0.0
    # (source NIC, destination NIC) of its first flow with no path alive, if it is stalled:
    # which NIC to look at (its link, or its switch)
    stalled_flow: tuple[int, int] | None = None


def job_figures(
    result: SolveResult | None,
    busbw: Mapping[str, float],
    over: Mapping[str, float] | None = None,
    rates: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, JobFigures]:
    """Per job id of `result`'s flows (jobs with none too), its figures (`busbw`: the last
    prediction; `over`: controller.model.jobs.jobs_over_line_rate of the jobs; `rates`:
    per job, (its demand, its slowest NIC's line rate) in Gbps)."""
    if result is None:
        return {}
    flows, parent = result.assignment.flows, result.parent
    assert parent is not None
    n = int(parent.max()) + 1 if parent.size else 0
    job_of = np.zeros(n, np.int64)
    job_of[parent] = flows.job
    steered = np.zeros(n, bool)
    steered[parent[result.assignment.path >= 0]] = True
    ids = flows.job_ids
    total = np.bincount(job_of, minlength=len(ids))
    te = np.bincount(job_of[steered], minlength=len(ids))
    stranded = np.sort(np.asarray(result.unroutable, np.int64))
    stalled = np.bincount(job_of[stranded], minlength=len(ids))
    # each job's first stranded flow, by its NICs
    src, dst = np.zeros(n, np.int64), np.zeros(n, np.int64)
    src[parent], dst[parent] = flows.src_nic, flows.dst_nic
    first: dict[int, tuple[int, int]] = {}
    for f in stranded[np.unique(job_of[stranded], return_index=True)[1]].tolist():
        first[int(job_of[f])] = (int(src[f]), int(dst[f]))
    fell = {} if result.certificate is None else result.certificate.fallback_jobs
    return {
        job: JobFigures(int(total[j]), int(te[j]), int(total[j] - te[j]), busbw.get(job),
                        fell.get(job, "") or result.hashed_jobs.get(job, ""),
                        (over or {}).get(job, 0.0), int(stalled[j]),
                        *(rates or {}).get(job, (0.0, 0.0)), first.get(j))  # fmt: skip
        for j, job in enumerate(ids)
    }
