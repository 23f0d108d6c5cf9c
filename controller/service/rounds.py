"""The engine's decisions as values: what its worker does next, what a round of new inputs
needs, and what becomes of a global result when it ends.

Pure: no thread, no driver, no clock of its own (times come in as numbers). The engine
gathers what it knows under its lock into a record (`Wake`, or the arguments below), asks
here, and runs the step it is told; `tests/controller/service/test_rounds.py` reads as a
table of situations and steps.

    Wake -> next_step -> STOP | TAKE_OVER | COMMAND | SWEEP | IDLE | FINISH_SOLVE | ROUND
    ROUND -> plan_round -> repair first? then WAIT_SOLVE | SETTLE | SOLVE
    while it runs: superseded -> the solve stops at its next stage (a job changed since)
    FINISH_SOLVE -> plan_finish -> push, re-based on new health or not; dropped if stale
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

import numpy as np

from controller.model.assignment import Assignment
from controller.model.health import LinkHealth
from controller.model.jobs import Job
from controller.service.persist import generations_digest

SOLVE_POLL = 0.2  # s between looks while a global solve runs and nothing else is new
# a round that failed (a solver or driver error) is taken again after this many seconds,
# doubling up to the most: the routes stay what they were, the changes pending meanwhile
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 60.0


@dataclass(frozen=True)
class Taken:
    """The inputs the worker took for a round: the jobs (sorted by id), the link health,
    the state version they answer to, and the (job id, generation) pairs the digest the
    store keeps with an assignment is made of, when first asked for (a repair pushes
    before it is needed)."""

    jobs: tuple[Job, ...]
    health: LinkHealth
    version: int
    generations: tuple[tuple[str, int], ...]
    fabric: str = ""  # the fabric's wiring and link speeds (controller.service.persist.fabric_key)

    @functools.cached_property
    def digest(self) -> str:
        return generations_digest(self.generations, self.health, self.fabric)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(j.id for j in self.jobs)


@dataclass(frozen=True)
class Target:
    """The assignment the switches are told to hold, the jobs and link health it answers
    to (a repair starts from these)."""

    assignment: Assignment
    ids: tuple[str, ...]
    health: LinkHealth


class Step(enum.Enum):
    """What the worker does when it wakes."""

    STOP = "stop"
    TAKE_OVER = "take over"  # this replica became the leader
    COMMAND = "command"  # an operator's command on the routes (apply, rollback, release)
    SWEEP = "sweep"  # the next switches of a periodic reconcile
    IDLE = "idle"  # nothing to do yet
    FINISH_SOLVE = "finish solve"  # a global solve ended: push its result
    ROUND = "round"  # take the new inputs


@dataclass(frozen=True)
class Wake:
    """What the worker knows when it looks."""

    stop: bool = False
    fresh: bool = False  # inputs accepted since the worker last took them
    solve_ended: bool = False
    solving: bool = False  # a global solve runs in its own thread
    takeover: bool = False  # the replica became the leader since the last look
    refresh: bool = False  # another replica stored a new assignment
    leader: bool = True
    sweeping: bool = False  # a periodic reconcile is under way
    sweep_in: float = 1.0  # s until the next periodic reconcile is due (<= 0: due)
    command: bool = False  # an operator's command waits (see Engine.apply_routes)
    # s until the precomputed repairs' refresh may start (inf: none waits for a settled target)
    precompute_in: float = float("inf")


def wait_seconds(w: Wake) -> float | None:
    """How long the worker sleeps before it looks again; None: it acts now. While a global
    solve runs, only new inputs, the solve's end or a stop wake it."""
    if w.stop or w.fresh or w.solve_ended or w.command:
        return None
    if w.solving:
        return SOLVE_POLL
    if w.sweep_in <= 0 or w.takeover or w.refresh or w.sweeping:
        return None
    if w.precompute_in <= 0:  # a refresh is due: started on the way round
        return None
    return min(w.sweep_in, w.precompute_in)


def busy(w: Wake) -> bool:
    """Whether the worker has a round to answer (what `Engine.wait_idle` waits for). A
    follower has none: it solves nothing, the leader's assignment is what it wants."""
    return (w.fresh and w.leader) or w.solve_ended or w.solving


def next_step(w: Wake) -> Step:
    """The step for what the worker knows."""
    if w.stop:
        return Step.STOP
    if w.takeover and w.leader:
        return Step.TAKE_OVER
    if w.command:  # between rounds, never inside one; a follower refuses it
        return Step.COMMAND
    if not busy(w):
        if w.sweep_in <= 0 or (w.refresh and not w.leader) or w.sweeping:
            return Step.SWEEP
        return Step.IDLE
    if w.solve_ended:
        return Step.FINISH_SOLVE
    return Step.ROUND


class Then(enum.Enum):
    """What follows the repair (if any) in a round of new inputs."""

    WAIT_SOLVE = "wait for the solve"  # one runs: its result is re-checked when it ends
    SETTLE = "settle"  # jobs unchanged since the last global solve: settle from the repair
    SOLVE = "solve"  # a global solve of the inputs taken


@dataclass(frozen=True)
class RoundPlan:
    repair: bool  # repair the installed routes for the new link health first, at once
    then: Then


def plan_round(
    *,
    installed_health: LinkHealth | None,
    health: LinkHealth,
    solving: bool,
    settled_jobs: int | None,
    jobs_version: int,
) -> RoundPlan:
    """A round of new inputs. A link change is repaired against what is installed, even
    while a global solve runs. With the jobs unchanged since the last global solve pushed
    (`settled_jobs`, the jobs version it answers to; None: none kept), the round settles
    from the repair; job changes get a global solve, or the one running is re-checked
    against the new inputs when it ends."""
    repair = installed_health is not None and not np.array_equal(
        installed_health.factor, health.factor
    )
    if solving:
        then = Then.WAIT_SOLVE
    elif repair and settled_jobs is not None and settled_jobs >= jobs_version:
        then = Then.SETTLE
    else:
        then = Then.SOLVE
    return RoundPlan(repair, then)


@dataclass(frozen=True)
class FinishPlan:
    stale: bool  # the jobs changed while it ran: the latest are solved after it
    drop: bool  # dropped unpushed, the latest solved at once
    rebase: bool  # link health changed while it ran: repair it for the new health first


def superseded(*, solved_version: int, jobs_version: int, dropped_last: bool) -> bool:
    """Whether a global solve of the inputs at `solved_version` is no longer wanted: the
    jobs changed since (`jobs_version`, accepted, taken or not), so a solve of them all is
    due, unless the result before it was dropped too (a stream of job changes faster than
    the solves still gets every second one pushed: it never starves the pushes). Asked
    while the solve runs (it stops at its next stage: the burst of puts behind it is
    solved once, at once) and when it ends (its result is dropped unpushed)."""
    return jobs_version > solved_version and not dropped_last


def plan_finish(
    *, solved_version: int, jobs_version: int, dropped_last: bool, health_changed: bool
) -> FinishPlan:
    """A global result that ended. One already stale is dropped when `superseded`: pushing
    it would hold the re-solve back by a push of routes already out of date."""
    stale = jobs_version > solved_version
    drop = superseded(solved_version=solved_version, jobs_version=jobs_version,
                      dropped_last=dropped_last)  # fmt: skip
    return FinishPlan(stale, drop, health_changed)


def index_beside(
    *, drop: bool, rebase: bool, rows: int, churn: int, pushed_rows: int | None
) -> bool:
    """Whether a global result's RouteIndex is built beside its push (else after it): at
    once when it is re-based (the repair needs it before the push) or its push is a small
    part of the routes, so that a link report arriving as the round settles finds it ready;
    after the push when that installs much of the fabric (a full install beside the build
    took twice as long on 2 cores). A dropped result is never indexed: its thread is let go
    at once."""
    big = pushed_rows is None or abs(rows - pushed_rows) + churn > rows // 4
    return drop or rebase or not big


def adopt_stored(stored_digest: str | None, digest: str) -> bool:
    """On start or takeover, the stored assignment is adopted (the switches only
    reconciled towards it) when it answers to the current inputs; else they are solved."""
    return stored_digest is not None and stored_digest == digest


def solve_on_new_hand_back(*, handed_now: set[str], handed_last: set[str]) -> bool:
    """A link-change round solves globally when its repair's certificate handed back to
    hashing a job the last solve did not: the repair re-places only what the change touched,
    and a solve (its step 9 included) may find a routing nobody is handed back from. The
    repair stays installed meanwhile (it is certified); a job the last solve handed back
    too asks for nothing new (else every change would solve again)."""
    return bool(handed_now - handed_last)


def solve_on_capacity_back(*, routed_now: bool, routed_last: bool, handed_back: bool,
                           capacity_up: bool) -> bool:  # fmt: skip
    """A link-change round solves globally when nothing is routed before or after it (the
    repair has no TE row to re-place), the last solve's certificate handed jobs back to
    hashing, and some capacity is above that solve's: TE may certify again. Jobs left to
    hashing for their size, or no job with flows, come back the same: not solved again."""
    return not routed_now and not routed_last and handed_back and capacity_up


def solve_on_restore_over_capacity(*, capacity_up: bool, mlu: float, bound: float) -> bool:
    """A link-change round that brought capacity back solves globally when its settled
    routing still has links over capacity (MLU above 1) though the bound says the fabric
    need have none (at most 1): the jobs on those links run slower than the fabric allows,
    and with the jobs unchanged nothing else would move them (a drain undone left 244
    links over capacity at 1.03 x the bound, within `move_threshold`, until a job
    changed). A failure's repair is judged by the threshold alone: a solve at every link
    down would move flows the repair kept."""
    return capacity_up and mlu > 1.0 + 1e-9 and 0 < bound <= 1.0 + 1e-9


def retry_after(last_s: float, first_s: float = RETRY_FIRST_S) -> float:
    """The wait before a failed round is taken again, the last wait being `last_s` (0: the
    first failure): `first_s`, doubling up to RETRY_MAX_S."""
    return min(RETRY_MAX_S, max(first_s, 2 * last_s))
