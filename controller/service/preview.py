"""A dry run of input changes (`tectl job put --dry-run`, `tectl link ... --dry-run`): what
the would-be routing moves against what is installed, and its certificate.

Pure: the what-if solve's result (a global solve of the changed inputs, from the installed
assignment, as a job change gets; a real link report is first repaired, moving only the hit
flows, so what it moves can be less) compared with the installed routes and assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.model.assignment import Assignment, moved_pairs
from controller.model.fabric import Fabric
from controller.model.flows import pair_keys
from controller.routes.plan import plan_update
from controller.routes.tables import RouteSet
from controller.service.held import PlanView
from controller.solver import SolveResult


@dataclass(frozen=True)
class Preview:
    """The would-be routing of changed inputs, against what is installed."""

    result: SolveResult  # the what-if solve (its metrics and certificate)
    plan: PlanView  # entries to add, replace, remove per switch
    flows_moved: int  # NIC pairs routed before and after whose paths differ
    jobs_affected: tuple[str, ...]  # jobs with a flow moved, and the jobs changed, sorted


def preview(
    fabric: Fabric,
    installed: RouteSet,
    before: Assignment | None,
    result: SolveResult,
    changed: Sequence[str],
) -> Preview:
    """Compare `result` (a what-if solve) with the `installed` routes and the assignment
    `before` them; `changed`: the ids of the jobs put or deleted."""
    after = result.assignment
    plan, wanted = plan_update(fabric, installed, after)
    view = PlanView.of(plan, after, len(wanted))
    affected = set(changed)
    moved = 0
    if before is not None and len(before.flows) and len(after.flows):
        keys = moved_pairs(before, after)
        moved = int(keys.size)
        _, pairs = pair_keys(before.flows, after.flows)
        rows = np.isin(pairs, keys)
        ids = after.flows.job_ids
        affected |= {ids[j] for j in np.unique(after.flows.job[rows]).tolist()}
    return Preview(result, view, moved, tuple(sorted(affected)))
