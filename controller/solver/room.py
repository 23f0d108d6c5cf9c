"""Jobs with room, handed back first: a further routing for step 9 of the solve.

The certificate's fallback hands back the jobs that fall below their reference. Where they
fall because other jobs, served by TE far above what the fabric's hashing gives them, fill
the over-capacity links they cross, that leaves the crowd in place: the failing job gets its
reference on the defaults, the links stay full, and the hand-backs cascade (meta-24k
scenario 110 of the certificate bench: 98 jobs handed back, docs/certificate.md). Handed back
instead, the jobs with room ride the hashing as in the reference, throttled where it
throttles them (on a degraded link E-ECMP does not avoid), and the failing job gets the room.

Which jobs: each job with a row on an over-capacity arc that a row of a failing job crosses
(in the routing as predicted, controller.solver.job_objective.predict), not failing itself
and predicted above its reference value. Each is handed back whole: a job half on hashing is
as slow as its slowest flow. The routing made is a candidate, no more: the solve certifies
it like any other and keeps it only where it is better for the jobs (solve.floored), and
only where its prediction, before any fallback, leaves fewer jobs below their reference and
none further below (a certificate of the meta-24k mix costs 8-14 s where jobs are at stake;
the prediction 1-4 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.model.assignment import UNROUTED
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.rates import REL_TOL
from controller.solver.job_objective import Prediction, predict


@dataclass(frozen=True)
class Below:
    """How a routing, as predicted, stands against the reference."""

    jobs: int  # jobs below their reference value
    worst: float  # the least value over reference (inf: no job valued)

    def bettered_by(self, other: Below) -> bool:
        """Is `other` fewer jobs below, and none further below?"""
        return other.jobs < self.jobs and other.worst >= self.worst


def jobs_with_room(
    fabric: Fabric,
    health: LinkHealth,
    rows: FlowSet,
    path: np.ndarray,
    parent: np.ndarray,
    flows: FlowSet,
    reference: np.ndarray,
    *,
    qps: int,
    kind: str,
    seeds: tuple[int, ...],
    model: str,
) -> tuple[np.ndarray, Below]:
    """Job indices (ascending) of the jobs with room crowding a failing one (module
    docstring), under the rows' paths, and how those paths stand; `reference`: per job, its
    reference value (NaN: not valued); `parent[i]`: row i's input flow in `flows`. No job
    when none fails."""
    none = np.zeros(0, np.int64)
    p, values, valued, failing, below = _judged(
        fabric, health, rows, path, parent, flows, reference, qps=qps, kind=kind, seeds=seeds,
        model=model)  # fmt: skip
    if not failing.any():
        return none, below
    n = failing.size
    hot = p.util > 1 + REL_TOL
    crowded = np.zeros(fabric.num_arcs, bool)
    job_of = np.full(max(n, int(flows.job.max(initial=-1)) + 1), -1, np.int64)
    job_of[:n] = np.arange(n)
    for plane in p.planes:
        job = job_of[flows.job[plane.parent]]
        of_failing = np.zeros(job.size, bool)
        of_failing[job >= 0] = failing[job[job >= 0]]
        a = plane.arcs[of_failing]
        a = a[a >= 0]
        crowded[a[hot[a]]] = True
    if not crowded.any():
        return none, below
    near = np.zeros(n, bool)
    for plane in p.planes:
        on = np.where(plane.arcs >= 0, crowded[np.maximum(plane.arcs, 0)], False).any(axis=1)
        job = job_of[flows.job[plane.parent[on]]]
        near[job[job >= 0]] = True
    room = np.zeros(n, bool)
    room[valued] = values[valued] > reference[:n][valued] * (1 + REL_TOL)
    steered = np.zeros(n, bool)  # jobs with a TE row: the only ones there is to hand back
    te_jobs = rows.job[path != UNROUTED]
    steered[te_jobs[te_jobs < n]] = True
    return np.flatnonzero(near & room & ~failing & steered), below


def _judged(
    fabric: Fabric, health: LinkHealth, rows: FlowSet, path: np.ndarray, parent: np.ndarray,
    flows: FlowSet, reference: np.ndarray, **kw: Any,
) -> tuple[Prediction, np.ndarray, np.ndarray, np.ndarray, Below]:  # fmt: skip
    """The prediction of the rows' paths; per job (as far as both are known) its value,
    whether it and its reference are valued, whether it is below; and how it stands."""
    p = predict(fabric, health, rows, path, parent, flows, **kw)
    n = min(p.values.size, reference.size)
    values, ref = p.values[:n], reference[:n]
    valued = np.isfinite(values) & np.isfinite(ref)
    failing = np.zeros(n, bool)
    failing[valued] = values[valued] < ref[valued] * (1 - REL_TOL)
    ratio = values[valued] / np.maximum(ref[valued], 1e-300)
    return p, values, valued, failing, Below(int(failing.sum()), float(ratio.min(initial=np.inf)))
