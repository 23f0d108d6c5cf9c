"""Incremental repair touches only the flows a failure hit."""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from controller.model.assignment import Assignment
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.model.paths import path_alive
from controller.routes.entries import build_routes, route_conflicts
from controller.solver import repair as repair_module
from controller.solver.bounds import lower_bound
from controller.solver.certificate import CertifyOptions
from controller.solver.greedy import assign_paths
from controller.solver.problem import Problem
from controller.solver.repair import (
    RouteIndex,
    affected_flows,
    bound_after,
    bound_under,
)
from controller.solver.solve import SolveOptions, solve
from sim.jobmix import random_jobs

# The repair's own moves, before the certificate hands any job back to hashing (the
# certificate on repairs is tested in test_certificate.py).
repair = partial(repair_module.repair, certify_options=None)
repair_indexed = partial(repair_module.repair_indexed, certify_options=None)
reoptimise = partial(repair_module.reoptimise, certify_options=None)


def _random_flows(fabric, rng, n: int, demands: list[float]) -> FlowSet:  # type: ignore[no-untyped-def]
    """`n` flows from random NICs to a NIC of another host, of the given demands."""
    src = rng.integers(0, fabric.num_nics, n)
    dst = (src + fabric.nics_per_host * rng.integers(1, fabric.num_hosts, n)) % fabric.num_nics
    return FlowSet.build(src, dst, rng.choice(demands, n))


def test_single_failure_moves_only_its_flow(two_rack_pod):
    fabric = two_rack_pod
    flows = FlowSet.build([0], [2], 400.0)
    a = Assignment(flows, np.array([0]))
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(0, 0)])
    res = repair(fabric, health, a)
    assert res.assignment.path.tolist() == [1]
    assert res.churn.tolist() == [0]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3), st.sampled_from(["tiny", "small"]))
def test_repair_changes_only_affected(seed, failures, name):
    fabric = build(PRESETS[name])
    rng = np.random.default_rng(seed)
    n = 30
    flows = _random_flows(fabric, rng, n, [100.0, 400.0])
    health = LinkHealth.all_up(fabric)
    before = assign_paths(Problem(fabric, health, flows)).assignment
    arcs = before.arcs(fabric)
    core = arcs[:, 1:][arcs[:, 1:] >= 0] // 2
    core = core[core >= fabric.rack_base]
    links = rng.choice(np.unique(core), min(failures, np.unique(core).size), replace=False)
    new = health.down(links.tolist())
    hit = affected_flows(fabric, new, before)
    res = repair(fabric, new, before)
    changed = np.flatnonzero(res.assignment.path != before.path)
    assert set(changed.tolist()) <= set(hit.tolist())
    routed = res.assignment.routed
    assert path_alive(res.assignment.arcs(fabric)[routed], new.arc_capacity(fabric)).all()
    assert set(np.flatnonzero(~routed).tolist()) == set(res.unroutable.tolist())
    again = repair(fabric, new, before)
    assert np.array_equal(again.assignment.path, res.assignment.path)


def test_repair_uses_least_loaded(two_rack_pod):
    fabric = two_rack_pod
    # flow 0 on CTSW 0, flow 1 on CTSW 1; CTSW 0's uplink from rack 0 fails
    flows = FlowSet.build([0, 1], [2, 3], 100.0)
    a = Assignment(flows, np.array([0, 1]))
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(0, 0)])
    res = repair(fabric, health, a)
    assert res.assignment.path.tolist() == [1, 1]
    assert res.mlu == 0.5 or res.mlu == 100.0 / 400.0 * 2


def test_nothing_hit_nothing_changes(small):
    flows = FlowSet.build([0, 5], [40, 70], 400.0)
    a = assign_paths(Problem(small, LinkHealth.all_up(small), flows)).assignment
    unused = [
        link for link in range(small.rack_base, small.agg_base)
        if not (a.arcs(small) // 2 == link).any()
    ][:1]  # fmt: skip
    res = repair(small, LinkHealth.all_up(small).down(unused), a)
    assert res.churn.size == 0
    assert np.array_equal(res.assignment.path, a.path)


def _index_equal(fabric, cached: RouteIndex, assignment: Assignment) -> None:
    """A kept index answers like one built afresh for the same assignment."""
    fresh = RouteIndex.build(fabric, assignment)
    assert np.array_equal(cached.assignment.path, assignment.path)
    assert np.array_equal(cached.count, fresh.count)
    assert np.allclose(cached.load, fresh.load, atol=1e-9)
    assert np.allclose(cached.load, assignment.link_load(fabric), atol=1e-9)
    for arc in range(fabric.num_arcs):
        assert np.array_equal(cached.rows_on(np.array([arc])), fresh.rows_on(np.array([arc])))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_a_kept_index_repairs_like_a_fresh_one_and_touches_only_hit_rows(seed):
    fabric = build(PRESETS["small"])
    rng = np.random.default_rng(seed)
    n = 60
    flows = _random_flows(fabric, rng, n, [100.0, 400.0])
    health = LinkHealth.all_up(fabric)
    current = assign_paths(Problem(fabric, health, flows)).assignment
    index = RouteIndex.build(fabric, current)
    core = np.arange(fabric.rack_base, fabric.num_links)
    # links go down one by one, then come back: each step repairs from the kept index
    links = rng.choice(core, 4, replace=False).tolist()
    steps = [health.down(links[: i + 1]) for i in range(4)] + [health.down(links[:1]), health]
    for new in steps:
        hit = affected_flows(fabric, new, current, health)
        res, index = repair_indexed(new, index, old_health=health)
        plain = repair(fabric, new, current, old_health=health)
        assert np.array_equal(res.assignment.path, plain.assignment.path)  # byte for byte
        assert res.mlu == pytest.approx(plain.mlu)
        assert np.array_equal(np.sort(res.collided_links), np.sort(plain.collided_links))
        moved = np.flatnonzero(res.assignment.path != current.path)
        assert set(moved.tolist()) <= set(hit.tolist()) | set(np.flatnonzero(~current.routed))
        assert set(res.churn.tolist()) == set(moved.tolist())
        _index_equal(fabric, index, res.assignment)
        current, health = res.assignment, new


def test_reoptimise_moves_rows_off_the_hottest_arc_only_while_it_helps(two_rack_pod):
    fabric = two_rack_pod
    # two flows from rack 0 on CTSW 0 (path 0): its uplink carries both
    flows = FlowSet.build([0, 1], [2, 3], 300.0)
    a = Assignment(flows, np.array([0, 0]))
    health = LinkHealth.all_up(fabric)
    index = RouteIndex.build(fabric, a)
    res, after = reoptimise(health, index)
    assert sorted(res.assignment.path.tolist()) == [0, 1]  # one moved, the other stayed
    assert res.churn.size == 1 and res.mlu == pytest.approx(300.0 / 400.0)
    _index_equal(fabric, after, res.assignment)
    again, _ = reoptimise(health, RouteIndex.build(fabric, a))
    assert np.array_equal(again.assignment.path, res.assignment.path)  # deterministic
    none, _ = reoptimise(health, RouteIndex.build(fabric, a), tries=0)
    assert np.array_equal(none.assignment.path, a.path)
    # at the goal already: nothing moves
    still, _ = reoptimise(health, RouteIndex.build(fabric, a), goal=600.0 / 400.0)
    assert still.churn.size == 0


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_bound_after_a_loss_equals_the_full_bound(seed, failures):
    fabric = build(PRESETS["small"])
    rng = np.random.default_rng(seed)
    n = 80
    flows = _random_flows(fabric, rng, n, [25.0, 100.0, 400.0])
    links = rng.choice(fabric.num_links, failures, replace=False)
    old = LinkHealth.all_up(fabric).with_factors({int(links[0]): 0.5})
    new = old.with_factors({int(k): float(rng.choice([0.0, 0.25])) for k in links})
    for qps in (1, 16):
        before = lower_bound(fabric, old, flows, qps=qps)
        derived = bound_after(fabric, flows, old, before, new, qps)
        full = lower_bound(fabric, new, flows, qps=qps)
        if _lost_last_path(fabric, flows, old, new):
            assert derived is None  # bounds leave such a flow out: computed in full
            continue
        assert derived is not None
        assert derived.value == pytest.approx(full.value)
        assert bound_after(fabric, flows, new, derived, old, qps) is None  # capacity came back


def _lost_last_path(fabric, flows, old, new) -> bool:  # type: ignore[no-untyped-def]
    from controller.model.paths import best_bottleneck

    def alive(health: LinkHealth) -> np.ndarray:
        return best_bottleneck(fabric, health.arc_capacity(fabric), flows.src_nic,
                               flows.dst_nic) > 0  # fmt: skip

    return bool((alive(old) & ~alive(new)).any())


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_bound_under_derives_where_it_holds_else_counts_in_full(seed, failures):
    """The service's bound after a link change: bound_after's where no capacity went up,
    the full bound where some did or no bound is known."""
    fabric = build(PRESETS["small"])
    rng = np.random.default_rng(seed)
    flows = _random_flows(fabric, rng, 80, [25.0, 100.0, 400.0])
    links = rng.choice(fabric.num_links, failures, replace=False)
    old = LinkHealth.all_up(fabric).with_factors({int(links[0]): 0.5})
    new = old.with_factors({int(k): float(rng.choice([0.0, 0.25])) for k in links})
    for qps in (1, 16):
        before = lower_bound(fabric, old, flows, qps=qps)
        derived = bound_under(fabric, flows, new, qps, (old, before))
        after = bound_after(fabric, flows, old, before, new, qps)
        assert derived == (lower_bound(fabric, new, flows, qps=qps) if after is None else after)
        assert bound_under(fabric, flows, new, qps, None) == lower_bound(fabric, new, flows,
                                                                         qps=qps)  # fmt: skip
        # capacity came back: nothing is derived from the lower bound under less capacity
        assert bound_under(fabric, flows, old, qps, (new, derived)) == before


def test_a_repair_re_places_at_most_its_bound_and_withdraws_the_rest(
    small, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past REPAIR_ROWS, the rows a failure hit ride ECMP (no path: no entry left on the
    dead link); the largest are re-placed first, and the result is the same every time."""
    import controller.solver.repair as repair_module

    rng = np.random.default_rng(7)
    flows = _random_flows(small, rng, 200, [100.0, 400.0])
    health = LinkHealth.all_up(small)
    before = assign_paths(Problem(small, health, flows)).assignment
    used = before.arcs(small)[:, 1:-1]
    links, counts = np.unique(used[used >= 0] // 2, return_counts=True)
    switch = links >= small.rack_base
    link = int(links[switch][np.argmax(counts[switch])])  # the busiest switch link
    new = health.down([link])
    hit = affected_flows(small, new, before)
    assert hit.size > 3
    monkeypatch.setattr(repair_module, "REPAIR_ROWS", 3)
    results = [repair(small, new, before, retry_unrouted=False) for _ in range(2)]
    res = results[0]
    assert res.assignment.path.tobytes() == results[1].assignment.path.tobytes()
    placed = hit[res.assignment.path[hit] >= 0]
    assert placed.size == 3
    left = np.setdiff1d(hit, placed)
    assert (res.assignment.path[left] == -1).all()  # withdrawn: they ride ECMP
    biggest = np.sort(hit[np.argsort(-flows.demand[hit], kind="stable")[:3]])
    assert placed.tolist() == biggest.tolist()
    arcs = res.assignment.arcs(small)
    assert not (arcs // 2 == link).any()
    unhit = np.setdiff1d(np.arange(len(flows)), hit)
    assert (res.assignment.path[unhit] == before.path[unhit]).all()


def test_a_repair_retries_at_most_its_bound_of_rows_without_a_path_near_the_change_first(
    small, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows with no path are retried up to RETRY_ROWS, those of the racks whose link came
    back first: a repair never walks every row riding ECMP."""
    import controller.solver.repair as repair_module

    rng = np.random.default_rng(3)
    flows = _random_flows(small, rng, 120, [400.0])
    health = LinkHealth.all_up(small)
    routed = assign_paths(Problem(small, health, flows)).assignment
    path = routed.path.copy()
    path[::2] = -1  # half the rows ride ECMP
    before = Assignment(flows, path)
    rack = 1
    link = small.rack_link(rack, 0)
    down = health.down([link])
    monkeypatch.setattr(repair_module, "RETRY_ROWS", 4)
    res = repair(small, health, before, old_health=down)  # the link comes back
    retried = np.flatnonzero((before.path == -1) & (res.assignment.path >= 0))
    assert 1 <= retried.size <= 4
    near = (small.rack_of_nic(flows.src_nic) == rack) | (small.rack_of_nic(flows.dst_nic) == rack)
    waiting = np.flatnonzero((before.path == -1) & near)
    assert 1 <= waiting.size < 4 < np.count_nonzero(before.path == -1)
    assert set(waiting) <= set(retried)  # the rows near the restored link went first


def test_a_repair_never_gives_a_job_left_to_the_hashing_whole_an_entry(small) -> None:
    """A job the solve left to the hashing whole (`hashed_jobs`) is not retried by a
    repair, whichever link changes; the rows without a path of the other jobs still are."""
    rng = np.random.default_rng(5)
    flows = _random_flows(small, rng, 120, [400.0])
    job = (np.arange(len(flows)) % 2).astype(np.int64)  # job 0 on TE paths, job 1 hashed
    flows = FlowSet(flows.src_nic, flows.dst_nic, flows.demand, job, ("te", "hashed"))
    health = LinkHealth.all_up(small)
    routed = assign_paths(Problem(small, health, flows)).assignment
    path = np.where(job == 1, -1, routed.path)
    path[:8:2] = -1  # a few rows of the TE job without a path too
    before = Assignment(flows, path)
    for rack in range(small.num_rtsws):
        down = health.down([small.rack_link(rack, 0)])
        res = repair(small, health, before, old_health=down, hashed_jobs=("hashed",))
        assert not res.assignment.routed[job == 1].any()
    back = health.down([small.rack_link(0, 0)])
    res = repair(small, health, before, old_health=back, hashed_jobs=("hashed",))
    assert res.assignment.routed[:8:2].any()  # the TE job's rows are retried
    assert repair(small, health, before, old_health=back).assignment.routed[job == 1].any()
    # every job on the hashing: a repair gives none of them an entry
    hashed = Assignment(flows, np.full(len(flows), -1))
    index = RouteIndex.build(small, hashed)
    down = health.down([small.rack_link(0, 0)])
    res, index = repair_indexed(down, index, old_health=health, hashed_jobs=("te", "hashed"))
    assert not res.assignment.routed.any()


_ASKED = int(os.environ.get("FABRIC_TE_FUZZ_EXAMPLES", "0"))


@pytest.mark.fuzz
@settings(max_examples=_ASKED or 60, derandomize=not _ASKED, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(st.data())
def test_fuzz_repairs_and_reoptimisations_leave_no_route_conflict(data) -> None:  # type: ignore[no-untyped-def]
    """Rows a repair (or re-optimisation) moves meet rows it keeps at entry keys downstream
    too (a CTSW's (port from an ATSW, destination host), across source racks), not only at
    their source rack's: on fabrics of parallel links, every result builds its routes."""
    pods = data.draw(st.integers(1, 3))
    fabric = build(ClosSpec(
        name="fuzz", pods=pods, racks_per_pod=data.draw(st.integers(1, 3)),
        hosts_per_rack=data.draw(st.integers(1, 3)), nics_per_host=data.draw(st.integers(1, 4)),
        ctsws_per_pod=data.draw(st.integers(1, 3)), rack_links=data.draw(st.integers(1, 3)),
        atsws_per_plane=data.draw(st.integers(1, 2)) if pods > 1 else 0,
        agg_links=data.draw(st.integers(1, 2)),
        taper=data.draw(st.sampled_from([1.0, 2.0, 4.0])) if pods > 1 else None,
    ))  # fmt: skip
    seed = data.draw(st.integers(0, 10_000))
    flows = jobs_flows(fabric, random_jobs(fabric, seed=seed))
    assume(len(flows) > 0)
    health = LinkHealth.all_up(fabric)
    solved = solve(fabric, health, flows, options=SolveOptions(
        qps=data.draw(st.sampled_from([1, 4, 16])), certify=CertifyOptions(enabled=False)))
    index = RouteIndex.build(fabric, solved.assignment)
    build_routes(fabric, solved.assignment)  # the solve's: conflict-free
    links = data.draw(st.lists(st.integers(0, fabric.num_links - 1), min_size=1, max_size=3,
                               unique=True))  # fmt: skip
    factor = data.draw(st.sampled_from([0.0, 0.0, 0.5]))
    after = health.with_factors({link: factor for link in links})
    res, fresh = repair_indexed(after, index, old_health=health)
    assert not route_conflicts(fabric, res.assignment).any()
    build_routes(fabric, res.assignment)
    again, _ = reoptimise(after, fresh, tries=200)
    assert not route_conflicts(fabric, again.assignment).any()
