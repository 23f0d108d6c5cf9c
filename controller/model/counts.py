"""One count vocabulary, used the same way by every output (docs/operators.md, "Counts"):

- job: a training job of the input. A job whose GPUs all share one host has no flows (its
  traffic never leaves the host): it is counted among the jobs and named as having none.
- flow: one NIC-to-NIC stream of a job's collectives (source NIC, destination NIC), counted
  once however the routing splits it. Jobs "with flows" are the ones the routing, the rates
  and the certificate see.
- QP bucket: a share of a flow split over several paths by RoCE queue pair (the QP buckets
  of controller.model.flows); a flow is split into its buckets or not at all.
- subflow: what a routing places on one path and a route file lists as one row: a flow that
  is not split, or one QP bucket of a split flow. subflows = flows - split flows + buckets.
- TE entry: one switch table entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.model.flows import ALL_QPS, FlowSet


@dataclass(frozen=True)
class Counts:
    """Jobs, flows, QP buckets and subflows of a set of flow rows."""

    jobs: int
    jobs_without_flows: tuple[str, ...]
    flows: int
    split_flows: int
    subflows: int

    @classmethod
    def of(cls, rows: FlowSet) -> Counts:
        """The counts of `rows` (input flows, or a routing's rows with QP buckets); every
        job of `rows.job_ids` is counted, those without a row named."""
        per_job = np.bincount(rows.job, minlength=len(rows.job_ids))
        whole = int(np.count_nonzero(rows.qp == ALL_QPS))
        split = int(np.count_nonzero(rows.qp == 0))  # a split flow has every bucket, 0 first
        return cls(len(rows.job_ids),
                   tuple(j for j, n in zip(rows.job_ids, per_job.tolist(), strict=True) if not n),
                   whole + split, split, len(rows))  # fmt: skip

    @property
    def jobs_with_flows(self) -> int:
        return self.jobs - len(self.jobs_without_flows)

    @property
    def qp_buckets(self) -> int:
        """QP buckets of the split flows."""
        return self.subflows - (self.flows - self.split_flows)

    def jobs_text(self) -> str:
        """"12 jobs (11 with flows; ring-04 has none: no collective of it crosses hosts)"
        (its GPUs in one host, or data parallel 1 without a pipeline collective, ...)."""
        g = "{:,}".format
        none = self.jobs_without_flows
        jobs = f"{g(self.jobs)} job" + ("" if self.jobs == 1 else "s")
        if not none:
            return jobs
        named = ", ".join(none[:5]) + (" ..." if len(none) > 5 else "")
        verb = "has none: no collective of it crosses" if len(none) == 1 else (
            "have none: no collective of theirs crosses")
        return f"{jobs} ({g(self.jobs_with_flows)} with flows; {named} {verb} hosts)"

    def flows_text(self) -> str:
        """"11,144 flows (3,488 split into 55,808 QP buckets: 63,464 subflows)"."""
        g = "{:,}".format
        if not self.split_flows:
            return f"{g(self.flows)} flows"
        return (f"{g(self.flows)} flows ({g(self.split_flows)} split into "
                f"{g(self.qp_buckets)} QP buckets: {g(self.subflows)} subflows)")  # fmt: skip

    def text(self) -> str:
        return f"{self.jobs_text()}, {self.flows_text()}"

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "jobs_with_flows": self.jobs_with_flows,
                "jobs_without_flows": list(self.jobs_without_flows), "flows": self.flows,
                "split_flows": self.split_flows, "qp_buckets": self.qp_buckets,
                "subflows": self.subflows}  # fmt: skip
