"""Flows: source NIC -> destination host demands, as parallel arrays.

A flow is routed by (source NIC, destination host), as Meta's TE keys its entries on
<ingress port, destination host prefix>. `dst_nic` is the NIC of the destination host that
receives it (rail-aligned traffic goes GPU i -> GPU i), which fixes the last hop.

A flow may also be one QP bucket of a larger flow: `qp[f] >= 0` names the bucket (RoCE
spreads a flow over its queue pairs, and the source RTSW can tell them apart by UDP source
port), `qp[f] == ALL_QPS` the whole flow. The solver splits flows this way only where one
path per flow cannot avoid an overloaded link (see controller.solver.qp_buckets).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.errors import FlowError
from controller.model.fabric import Fabric

ALL_QPS = -1  # qp value of a flow that is not split into QP buckets


@dataclass(frozen=True)
class FlowSet:
    """F flows as arrays; `job` indexes `job_ids` (and `job_priority`, one per job id, or
    empty: every job at priority 0)."""

    src_nic: np.ndarray = field(repr=False)  # int64 [F]
    dst_nic: np.ndarray = field(repr=False)  # int64 [F]
    demand: np.ndarray = field(repr=False)  # float64 [F], Gbps
    job: np.ndarray = field(repr=False)  # int64 [F]
    job_ids: tuple[str, ...] = ()
    qp: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]  # int64 [F]
    job_priority: tuple[int, ...] = ()  # per job id: its class in the job-level objective

    def __post_init__(self) -> None:
        if self.job_priority and len(self.job_priority) != len(self.job_ids):
            raise FlowError(
                f"job_priority has {len(self.job_priority)} entries for {len(self.job_ids)} job ids"
            )
        if self.qp is None:
            object.__setattr__(self, "qp", np.full(self.src_nic.shape, ALL_QPS, np.int64))
        for name in ("src_nic", "dst_nic", "demand", "job", "qp"):
            arr = getattr(self, name)
            if arr.shape != self.src_nic.shape or arr.ndim != 1:
                raise FlowError(
                    f"flow field {name} has shape {arr.shape}, expected 1-D like src_nic"
                )
            arr.setflags(write=False)

    @classmethod
    def build(
        cls,
        src_nic: object,
        dst_nic: object,
        demand: object,
        job: object | None = None,
        job_ids: tuple[str, ...] = ("job",),
    ) -> FlowSet:
        src = np.asarray(src_nic, dtype=np.int64).reshape(-1)
        n = src.size
        return cls(
            src_nic=src,
            dst_nic=np.asarray(dst_nic, dtype=np.int64).reshape(-1),
            demand=np.broadcast_to(np.asarray(demand, dtype=np.float64), (n,)).copy(),
            job=np.zeros(n, np.int64) if job is None else np.asarray(job, np.int64).reshape(-1),
            job_ids=tuple(job_ids),
        )

    @classmethod
    def empty(cls) -> FlowSet:
        return cls.build([], [], [], [], ())

    def __len__(self) -> int:
        return int(self.src_nic.size)

    def dst_host(self, fabric: Fabric) -> np.ndarray:
        return fabric.host_of_nic(self.dst_nic)

    def validate(self, fabric: Fabric) -> None:
        """Raise FlowError naming the first bad flow (by index) and field."""
        for name in ("src_nic", "dst_nic"):
            arr = getattr(self, name)
            bad = np.flatnonzero((arr < 0) | (arr >= fabric.num_nics))
            if bad.size:
                raise FlowError(
                    f"flow {bad[0]}: {name} {arr[bad[0]]} is not a NIC of fabric "
                    f"{fabric.name!r} (0..{fabric.num_nics - 1})"
                )
        bad = np.flatnonzero(~np.isfinite(self.demand) | (self.demand <= 0))
        if bad.size:
            raise FlowError(
                f"flow {bad[0]}: demand {self.demand[bad[0]]} must be a positive Gbps value"
            )
        same = np.flatnonzero(fabric.host_of_nic(self.src_nic) == fabric.host_of_nic(self.dst_nic))
        if same.size:
            raise FlowError(f"flow {same[0]}: source and destination are on the same host")
        bad = np.flatnonzero((self.job < 0) | (self.job >= max(len(self.job_ids), 1)))
        if bad.size:
            raise FlowError(f"flow {bad[0]}: job index {self.job[bad[0]]} has no job id")
        bad = np.flatnonzero(self.qp < ALL_QPS)
        if bad.size:
            raise FlowError(
                f"flow {bad[0]}: qp bucket {self.qp[bad[0]]} must be >= 0 (or {ALL_QPS}: all)"
            )

    @property
    def split(self) -> bool:
        """Whether any flow is a single QP bucket of a larger flow."""
        return bool((self.qp != ALL_QPS).any())

    def priorities(self) -> np.ndarray:
        """The priority of every job id, by job index (int64; 0 where none was given)."""
        if self.job_priority:
            return np.asarray(self.job_priority, np.int64)
        return np.zeros(len(self.job_ids), np.int64)

    def take(self, index: np.ndarray) -> FlowSet:
        """The subset of flows at `index` (same job table)."""
        return FlowSet(
            self.src_nic[index], self.dst_nic[index], self.demand[index], self.job[index],
            self.job_ids, self.qp[index], self.job_priority,
        )

    @staticmethod
    def concat(parts: list[FlowSet]) -> FlowSet:
        """Join flow sets, merging their job tables."""
        if not parts:
            return FlowSet.empty()
        ids: list[str] = []
        jobs = []
        for part in parts:
            jobs.append(part.job + len(ids))
            ids.extend(part.job_ids)
        ranked = any(p.job_priority for p in parts)
        return FlowSet(
            np.concatenate([p.src_nic for p in parts]),
            np.concatenate([p.dst_nic for p in parts]),
            np.concatenate([p.demand for p in parts]),
            np.concatenate(jobs),
            tuple(ids),
            np.concatenate([p.qp for p in parts]),
            tuple(int(x) for p in parts for x in p.priorities()) if ranked else (),
        )


def pair_keys(*sets: FlowSet) -> list[np.ndarray]:
    """The (source NIC, destination NIC) of every row of each set as one int64 key,
    src * (largest dst NIC + 1) + dst: equal across the sets exactly when the pairs are, so
    a flow can be found again in another solve's flows (whose indices all shift)."""
    big = np.int64(max((int(s.dst_nic.max(initial=0)) for s in sets), default=0) + 1)
    return [s.src_nic * big + s.dst_nic for s in sets]


def match_pairs(rows: FlowSet, within: FlowSet) -> np.ndarray:
    """For every row of `rows`, the index of the first row of `within` with the same
    (source NIC, destination NIC), else -1."""
    key, other = pair_keys(rows, within)
    uk, first = np.unique(other, return_index=True)
    if not uk.size:
        return np.full(len(rows), -1, np.int64)
    pos = np.minimum(np.searchsorted(uk, key), uk.size - 1)
    return np.where(uk[pos] == key, first[pos], -1).astype(np.int64)


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique of integer ids, in one pass when they are already in order (the parent
    flows of a solve's rows are: a flow's rows follow each other)."""
    return distinct_counts(values)[0]


def distinct_below(ids: np.ndarray, n: int) -> np.ndarray:
    """np.unique of integer ids all below `n`: a mask over [0, n) when they are many (a
    hash or sort of hundreds of thousands costs far more than one pass over a mask)."""
    ids = np.asarray(ids, np.int64)
    if ids.size * 16 < n:
        return np.unique(ids)
    mask = np.zeros(n, bool)
    mask[ids] = True
    return np.flatnonzero(mask)


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_counts=True), in one pass when they are already in order
    (keys built from flows in the order jobs_flows makes them usually are)."""
    values = np.asarray(values)
    if values.size > 1 and (values[1:] >= values[:-1]).all():
        starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
        return values[starts], np.diff(np.r_[starts, values.size])
    return np.unique(values, return_counts=True)


def rank_within(groups: np.ndarray) -> np.ndarray:
    """0-based rank of every element among equal `groups` values, in index order."""
    order = np.argsort(groups, kind="stable")
    g = groups[order]
    start = np.r_[True, g[1:] != g[:-1]] if g.size else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(start, np.arange(g.size), 0))
    rank = np.empty(groups.size, np.int64)
    rank[order] = np.arange(g.size) - first
    return rank
