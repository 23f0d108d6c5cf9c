"""The engine's decisions as a table: situation -> step."""

from __future__ import annotations

import pytest

from controller.model.clos import build, preset
from controller.model.health import LinkHealth
from controller.service.rounds import (
    SOLVE_POLL,
    Step,
    Then,
    Wake,
    adopt_stored,
    busy,
    index_beside,
    next_step,
    plan_finish,
    plan_round,
    superseded,
    wait_seconds,
)

FABRIC = build(preset("tiny"))
UP = LinkHealth.all_up(FABRIC)
DOWN = UP.down([FABRIC.rack_base])


@pytest.mark.parametrize(
    ("wake", "step", "is_busy"),
    [
        (Wake(stop=True, fresh=True, solve_ended=True), Step.STOP, True),
        (Wake(takeover=True, fresh=True), Step.TAKE_OVER, True),
        (Wake(takeover=True, leader=False, fresh=True), Step.IDLE, False),  # not the leader
        (Wake(fresh=True), Step.ROUND, True),
        (Wake(fresh=True, solving=True), Step.ROUND, True),  # a link report during a solve
        (Wake(solve_ended=True, fresh=True), Step.FINISH_SOLVE, True),  # result first
        (Wake(solve_ended=True), Step.FINISH_SOLVE, True),
        (Wake(solving=True), Step.ROUND, True),  # only reached when woken for a leader change
        (Wake(sweep_in=0.0), Step.SWEEP, False),
        (Wake(sweeping=True), Step.SWEEP, False),  # a sweep under way goes on step by step
        (Wake(sweeping=True, fresh=True), Step.ROUND, True),  # new inputs go between steps
        (Wake(refresh=True, leader=False), Step.SWEEP, False),  # a follower reads the leader's
        (Wake(refresh=True), Step.IDLE, False),
        (Wake(fresh=True, leader=False), Step.IDLE, False),  # a follower solves nothing
        (Wake(), Step.IDLE, False),
        (Wake(command=True), Step.COMMAND, False),  # an operator's apply/rollback/release
        (Wake(command=True, fresh=True, solving=True), Step.COMMAND, True),  # before a round
        (Wake(command=True, stop=True), Step.STOP, False),
    ],
)
def test_next_step(wake: Wake, step: Step, is_busy: bool) -> None:
    assert next_step(wake) is step
    assert busy(wake) is is_busy


@pytest.mark.parametrize(
    ("wake", "seconds"),
    [
        (Wake(sweep_in=3.0), 3.0),  # sleep until the periodic reconcile is due
        (Wake(sweep_in=0.0), None),
        (Wake(sweep_in=-1.0), None),
        (Wake(fresh=True, sweep_in=3.0), None),
        (Wake(stop=True, solving=True), None),
        (Wake(solve_ended=True, solving=True), None),
        (Wake(solving=True, sweep_in=0.0), SOLVE_POLL),  # a solve runs: only inputs wake it
        (Wake(solving=True, takeover=True), SOLVE_POLL),
        (Wake(takeover=True, sweep_in=3.0), None),
        (Wake(refresh=True, sweep_in=3.0), None),
        (Wake(sweeping=True, sweep_in=3.0), None),
        (Wake(command=True, solving=True, sweep_in=3.0), None),  # a command waits for no solve
    ],
)
def test_wait_seconds(wake: Wake, seconds: float | None) -> None:
    assert wait_seconds(wake) == seconds


@pytest.mark.parametrize(
    ("installed", "health", "solving", "settled", "jobs", "repair", "then"),
    [
        (None, UP, False, None, 1, False, Then.SOLVE),  # nothing installed yet
        (UP, UP, False, 1, 1, False, Then.SOLVE),  # jobs changed, health did not
        (UP, DOWN, False, 1, 1, True, Then.SETTLE),  # a link change, same jobs
        (UP, DOWN, False, 1, 2, True, Then.SOLVE),  # a link change and a job change
        (UP, DOWN, False, None, 1, True, Then.SOLVE),  # no global solve kept (a takeover)
        (UP, DOWN, True, 1, 1, True, Then.WAIT_SOLVE),  # repaired now, the solve re-checked
        (UP, UP, True, 1, 2, False, Then.WAIT_SOLVE),
        (DOWN, UP, False, 3, 3, True, Then.SETTLE),  # a link back up
    ],
)
def test_plan_round(installed, health, solving, settled, jobs, repair, then) -> None:  # type: ignore[no-untyped-def]
    plan = plan_round(installed_health=installed, health=health, solving=solving,
                      settled_jobs=settled, jobs_version=jobs)  # fmt: skip
    assert (plan.repair, plan.then) == (repair, then)


@pytest.mark.parametrize(
    ("solved", "jobs", "dropped_last", "changed", "stale", "drop", "rebase"),
    [
        (5, 5, False, False, False, False, False),  # fresh: pushed as it is
        (5, 4, False, True, False, False, True),  # health changed while it ran: re-based
        (5, 6, False, False, True, True, False),  # stale: dropped, the latest solved
        (5, 6, True, False, True, False, False),  # stale again: pushed all the same
        (5, 6, True, True, True, False, True),
    ],
)
def test_plan_finish(solved, jobs, dropped_last, changed, stale, drop, rebase) -> None:  # type: ignore[no-untyped-def]
    plan = plan_finish(solved_version=solved, jobs_version=jobs, dropped_last=dropped_last,
                       health_changed=changed)  # fmt: skip
    assert (plan.stale, plan.drop, plan.rebase) == (stale, drop, rebase)


@pytest.mark.parametrize(
    ("solved", "jobs", "dropped_last", "stops"),
    [
        (5, 5, False, False),  # the jobs it solves are the latest: it runs on
        (5, 3, False, False),  # a link change since (jobs older): it runs on, re-based later
        (5, 6, False, True),  # a job changed since it started: it stops at its next stage
        (5, 6, True, False),  # ... unless the one before was dropped: it runs, is pushed
    ],
)
def test_a_solve_is_superseded_only_by_newer_jobs_and_never_twice_in_a_row(
    solved: int, jobs: int, dropped_last: bool, stops: bool
) -> None:
    assert superseded(solved_version=solved, jobs_version=jobs,
                      dropped_last=dropped_last) is stops  # fmt: skip
    # a result that ends superseded is dropped by the same rule
    plan = plan_finish(solved_version=solved, jobs_version=jobs, dropped_last=dropped_last,
                       health_changed=False)  # fmt: skip
    assert plan.drop is stops


@pytest.mark.parametrize(
    ("drop", "rebase", "rows", "churn", "pushed", "beside"),
    [
        (False, False, 1000, 0, None, False),  # a first install: after its push
        (False, False, 1000, 10, 1000, True),  # a small change: beside
        (False, False, 1000, 300, 1000, False),  # much of the fabric moves: after
        (False, False, 1000, 0, 600, False),  # many rows added
        (False, True, 1000, 300, 1000, True),  # re-based: the repair needs it first
        (True, False, 1000, 300, None, True),  # dropped: let its thread go at once
    ],
)
def test_index_beside(drop, rebase, rows, churn, pushed, beside) -> None:  # type: ignore[no-untyped-def]
    assert index_beside(drop=drop, rebase=rebase, rows=rows, churn=churn,
                        pushed_rows=pushed) is beside  # fmt: skip


def test_adopt_stored_only_when_it_answers_to_the_inputs() -> None:
    assert adopt_stored("abc", "abc")
    assert not adopt_stored("abc", "abd")
    assert not adopt_stored(None, "abc")


def test_capacity_back_solves_only_where_the_certificate_handed_every_job_back() -> None:
    from controller.service.rounds import solve_on_capacity_back

    assert solve_on_capacity_back(routed_now=False, routed_last=False, handed_back=True,
                                  capacity_up=True)  # fmt: skip
    for routed_now, routed_last, handed_back, up in (
            (True, False, True, True), (False, True, True, True),  # something to judge
            (False, False, False, True),  # left to hashing for its size, or no job
            (False, False, True, False)):  # no capacity the last solve lacked  # fmt: skip
        assert not solve_on_capacity_back(routed_now=routed_now, routed_last=routed_last,
                                          handed_back=handed_back, capacity_up=up)


def test_a_restore_leaving_links_over_capacity_the_bound_does_not_need_solves() -> None:
    from controller.service.rounds import solve_on_restore_over_capacity as solve_again

    assert solve_again(capacity_up=True, mlu=1.03, bound=1.0)
    assert not solve_again(capacity_up=False, mlu=1.03, bound=1.0)  # a failure: threshold
    assert not solve_again(capacity_up=True, mlu=1.0, bound=1.0)  # nothing over capacity
    assert not solve_again(capacity_up=True, mlu=1.2, bound=1.125)  # the fabric is short
    assert not solve_again(capacity_up=True, mlu=float("nan"), bound=1.0)  # not counted


def test_a_repair_that_hands_back_a_job_the_last_solve_did_not_solves_again() -> None:
    from controller.service.rounds import solve_on_new_hand_back

    assert solve_on_new_hand_back(handed_now={"a"}, handed_last=set())
    assert solve_on_new_hand_back(handed_now={"a", "b"}, handed_last={"a"})
    assert not solve_on_new_hand_back(handed_now={"a"}, handed_last={"a", "b"})  # none new
    assert not solve_on_new_hand_back(handed_now=set(), handed_last={"a"})
