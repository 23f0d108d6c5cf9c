"""Routes applied from a route file and held, with the checkpoint they replaced.

`tectl routes apply FILE` installs a route file's routes on a running controller and holds
them: while held, the engine solves nothing of its own. Job changes are accepted and stored
but move no route; link reports are still repaired on the held routes (no entry is left on a
link that went down). `tectl routes rollback` re-installs the checkpoint, the routes the
apply replaced (repaired first for links down since): the engine's own routes, after which
the engine resumes and solves the current inputs unless those routes already answer to them;
or, after an apply over an apply, the earlier file's routes, held again (with no checkpoint
left). `tectl routes release` hands the fabric back to the engine, which solves at once.
Both are stored (key `held`), so a restart or a takeover keeps holding.

Pure: what an apply would change (`PlanView`), and the checks a file must pass before
anything is stored or pushed (`check_applicable`), all or nothing, naming the rows at fault.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.errors import RouteError
from controller.model import validation
from controller.model.assignment import Assignment
from controller.model.counts import Counts
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet, pair_keys
from controller.model.health import LinkHealth
from controller.routes.entries import build_routes
from controller.routes.plan import Plan
from controller.routes.tables import RouteSet


@dataclass(frozen=True)
class Held:
    """Routes applied from a file: where from, and what they replaced."""

    source: str  # the file's name, as the client gave it
    flows: int  # flows of the applied routes (controller.model.counts)
    entries: int  # TE entries they make
    # the assignment the apply replaced (no flows: no TE routes were installed); None: no
    # checkpoint is kept (held again by a rollback to a file's routes)
    checkpoint: Assignment | None
    checkpoint_inputs: str = ""  # digest of the inputs the checkpoint answered to, if known
    checkpoint_source: str = ""  # the file whose held routes it is; "": the engine's own
    # the fabric (controller.service.persist.fabric_key) the routes were applied on: their
    # flows and paths are ids, which name other devices once the wiring changes
    fabric: str = ""


@dataclass(frozen=True)
class PlanView:
    """What a change of routes does to the switches: (add, replace, remove) per switch that
    changes, by name, and the totals; `flows`, `subflows` (controller.model.counts) and
    `entries` are the new routes' own."""

    switches: tuple[tuple[str, int, int, int], ...]
    flows: int
    entries: int
    subflows: int = 0
    # a route file against the controller's jobs (`unlike_jobs`): its flows no job of the
    # controller makes, and the jobs' flows it does not route
    flows_of_no_job: int = 0
    job_flows_missing: int = 0

    @classmethod
    def of(cls, plan: Plan, assignment: Assignment, entries: int) -> PlanView:
        per: dict[str, list[int]] = {}
        for _, batch in plan.batches():
            counts = per.setdefault(batch.switch, [0, 0, 0])
            for i, n in enumerate(batch.counts()):
                counts[i] += n
        rows = tuple((sw, a, r, d) for sw, (a, r, d) in sorted(per.items()) if a + r + d)
        made = Counts.of(assignment.flows)
        return cls(rows, made.flows, entries, made.subflows)

    @property
    def totals(self) -> tuple[int, int, int]:
        """(add, replace, remove) over every switch."""
        return (sum(s[1] for s in self.switches), sum(s[2] for s in self.switches),
                sum(s[3] for s in self.switches))  # fmt: skip


def unlike_jobs(assignment: Assignment, jobs: FlowSet) -> tuple[int, int]:
    """How far a route file's flows are from those of the controller's jobs: (its flows,
    as NIC pairs, that no job makes; the jobs' flows it does not route). Routes solved for
    other jobs are applied all the same (the operator may mean it), but said."""
    have, want = (np.unique(keys) for keys in pair_keys(assignment.flows, jobs))
    return (int(np.setdiff1d(have, want, assume_unique=True).size),
            int(np.setdiff1d(want, have, assume_unique=True).size))  # fmt: skip


def check_applicable(
    fabric: Fabric, assignment: Assignment, routes: RouteSet, health: LinkHealth, source: str
) -> None:
    """A route file may be applied: its entries are the ones its flows' paths make (what
    is pushed is built from the flows), and no flow's path crosses a link that is down now.
    RouteError naming `source` and every row at fault (up to validation.MAX_REPORTED);
    flows are rows 0.. as in the file, the links named."""
    problems: list[str] = []
    arcs = assignment.arcs(fabric)
    dead = health.arc_capacity(fabric) <= 0
    crossing = (arcs >= 0) & dead[np.maximum(arcs, 0)]
    f = assignment.flows
    for row in np.flatnonzero(crossing.any(axis=1))[: validation.MAX_REPORTED].tolist():
        arc = int(arcs[row][crossing[row]][0])
        problems.append(
            f"flows[{row}] ({fabric.nic_name(int(f.src_nic[row]))} -> "
            f"{fabric.nic_name(int(f.dst_nic[row]))}): its path crosses "
            f"{fabric.link_name(arc // 2)}, which is down"
        )
    built = build_routes(fabric, assignment)
    if not problems and built != routes:
        for sw in sorted(set(built.switches()) | set(routes.switches())):
            want, have = built.table(sw), routes.table(sw)
            if want != have:
                problems.append(f"switches.{sw}: {len(have):,} entries, but the flows' paths "
                                f"make {len(want):,} (other entries or next hops)")  # fmt: skip
            if len(problems) >= validation.MAX_REPORTED:
                break
    if problems:
        more = int(crossing.any(axis=1).sum()) - validation.MAX_REPORTED
        tail = f"; and {more:,} more" if more > 0 else ""
        raise RouteError(f"{source}: not applied (nothing was changed): "
                         + "; ".join(problems) + tail)  # fmt: skip
