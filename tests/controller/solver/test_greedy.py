"""Greedy + local search assignment, stability, table budget and bounds."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import ClosSpec, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import path_alive
from controller.routes.budget import table_usage
from controller.solver.bounds import lower_bound
from controller.solver.greedy import (
    Guidance,
    assign_paths,
    greedy,
    local_search,
)
from controller.solver.problem import Problem


def _max_util(fabric, health, assignment):
    load = assignment.link_load(fabric)
    cap = health.arc_capacity(fabric)
    return float(np.max(np.where(cap > 0, load / np.where(cap > 0, cap, 1), 0)))


def test_two_flows_split_over_two_ctsws(two_rack_pod):
    fabric = two_rack_pod
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    res = assign_paths(Problem(fabric, LinkHealth.all_up(fabric), flows))
    assert res.mlu == 1.0 and res.collided_links.size == 0
    assert sorted(res.assignment.path.tolist()) == [0, 1]


def test_unequal_demands_hand_optimum(two_rack_pod):
    fabric = two_rack_pod
    flows = FlowSet.build([0, 0, 1, 1], [2, 3, 2, 3], [300.0, 100.0, 200.0, 100.0])
    health = LinkHealth.all_up(fabric)
    res = assign_paths(Problem(fabric, health, flows))
    # NIC 2 receives 300 + 200 over its 400G access link: 1.25 is forced. On the rack
    # links the best split is {300, 100} | {200, 100}: at most 400 on any uplink.
    rack_arcs = slice(2 * fabric.rack_base, 2 * fabric.agg_base)
    assert res.assignment.link_load(fabric)[rack_arcs].max() <= 400.0
    assert res.mlu == 1.25


def test_all_down_is_unroutable(two_rack_pod):
    fabric = two_rack_pod
    health = LinkHealth.all_up(fabric).down(
        [fabric.rack_link(0, 0), fabric.rack_link(0, 1)]
    )
    flows = FlowSet.build([0], [2], 400.0)
    res = assign_paths(Problem(fabric, health, flows))
    assert res.unroutable.tolist() == [0]
    assert res.assignment.path[0] == UNROUTED


@st.composite
def cases(draw):
    spec = draw(st.sampled_from(["tiny", "small"]))
    n_flows = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 10_000))
    equal = draw(st.booleans())
    failures = draw(st.integers(0, 3))
    return spec, n_flows, seed, failures, equal


@settings(max_examples=40, deadline=None)
@given(cases())
def test_properties(random_instance, case):
    fabric, health, flows = random_instance(*case)
    res = assign_paths(Problem(fabric, health, flows))
    a = res.assignment
    routed = a.routed
    cap = health.arc_capacity(fabric)
    assert path_alive(a.arcs(fabric)[routed], cap).all()
    assert set(np.flatnonzero(~routed).tolist()) == set(res.unroutable.tolist())
    assert res.mlu >= lower_bound(fabric, health, flows.take(np.flatnonzero(routed))).value - 1e-9
    assert abs(res.mlu - _max_util(fabric, health, a)) < 1e-9
    again = assign_paths(Problem(fabric, health, flows))
    assert np.array_equal(again.assignment.path, a.path) and again.method == res.method


def test_local_search_never_worse(random_instance, small):
    fabric, health, flows = random_instance("small", 60, 3, 0, equal=False)
    path = greedy(Problem(fabric, health, flows))
    better = local_search(Problem(fabric, health, flows), path)
    assert _max_util(fabric, health, Assignment(flows, better)) <= _max_util(
        fabric, health, Assignment(flows, path)
    ) + 1e-12


def test_local_search_fixes_a_bad_start(two_rack_pod):
    fabric = two_rack_pod
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    health = LinkHealth.all_up(fabric)
    better = local_search(Problem(fabric, health, flows), np.array([0, 0]))
    assert sorted(better.tolist()) == [0, 1]


def test_stability_keeps_previous_paths(random_instance, small):
    fabric, health, flows = random_instance("small", 30, 5, 0, equal=True)
    first = assign_paths(Problem(fabric, health, flows))
    # a new flow joins; everyone else keeps their path
    extra = FlowSet.build([1], [40], 400.0)
    more = FlowSet.concat([flows, extra])
    second = assign_paths(
        Problem(fabric, health, more), previous=first.assignment, move_threshold=0.5
    )
    assert second.churn.size == 0
    assert np.array_equal(second.assignment.path[: len(flows)], first.assignment.path)


def test_empty_previous_keeps_nothing(random_instance, small):
    fabric, health, flows = random_instance("small", 30, 6, 0, equal=True)
    none = Assignment(FlowSet.empty(), np.zeros(0, np.int64))
    res = assign_paths(Problem(fabric, health, flows), previous=none)
    assert res.churn.size == 0 and res.assignment.routed.all()
    assert path_alive(res.assignment.arcs(fabric), health.arc_capacity(fabric)).all()


def test_stability_moves_broken_flows(random_instance, small):
    fabric, health, flows = random_instance("small", 30, 6, 0, equal=True)
    first = assign_paths(Problem(fabric, health, flows))
    arcs = first.assignment.arcs(fabric)
    victim = int(np.flatnonzero(first.assignment.path >= 0)[0])
    link = int(arcs[victim, 1] // 2)
    broken = health.down([link])
    second = assign_paths(
        Problem(fabric, broken, flows), previous=first.assignment, move_threshold=1.0
    )
    assert victim in second.churn.tolist()
    hit = (arcs // 2 == link).any(axis=1)
    assert set(second.churn.tolist()) <= set(np.flatnonzero(hit).tolist())


@settings(max_examples=25, deadline=None)
@given(cases(), st.integers(1, 6))
def test_table_budget_respected(random_instance, case, budget):
    fabric, health, flows = random_instance(*case)
    res = assign_paths(Problem(fabric, health, flows), table_budget=budget)
    assert table_usage(fabric, res.assignment).max(initial=0) <= budget
    assert not np.isin(res.fallback_ecmp, np.flatnonzero(res.assignment.routed)).any()
    # the largest flows keep TE first: an ECMP flow is never bigger than every TE flow
    if res.fallback_ecmp.size and res.assignment.routed.any():
        assert flows.demand[res.fallback_ecmp].min() <= flows.demand[res.assignment.routed].max()


def test_guidance_is_followed(two_rack_pod):
    fabric = two_rack_pod
    flows = FlowSet.build([0], [2], 100.0)
    guide = Guidance(np.array([0]), np.array([1]), np.array([1]), np.array([1.0]))
    res = assign_paths(Problem(fabric, LinkHealth.all_up(fabric), flows), lp_guidance=guide)
    assert res.assignment.path[0] == 1


def test_meets_bound_on_one_to_one_pod():
    fabric = build(ClosSpec(name="p", racks_per_pod=8, hosts_per_rack=2, nics_per_host=4,
                            ctsws_per_pod=8))  # fmt: skip
    nics = np.arange(fabric.num_nics)
    host = nics // 4
    flows = FlowSet.build(nics, ((host + 2) % fabric.num_hosts) * 4 + nics % 4, 400.0)
    health = LinkHealth.all_up(fabric)
    res = assign_paths(Problem(fabric, health, flows))
    assert res.mlu == lower_bound(fabric, health, flows).value == 1.0
    assert res.collided_links.size == 0


@settings(max_examples=30, deadline=None)
@given(cases())
def test_greedy_batched_places_every_alive_flow_and_keeps_fixed(random_instance, case):
    from controller.solver.greedy import greedy_batched

    fabric, health, flows = random_instance(*case)
    fixed = np.full(len(flows), UNROUTED, np.int64)
    problem = Problem(fabric, health, flows)
    fixed[::3] = greedy(problem)[::3]
    path = greedy_batched(problem, fixed=fixed)
    keep = fixed >= 0
    assert (path[keep] == fixed[keep]).all()
    a = Assignment(flows, path)
    want = greedy(problem) >= 0  # greedy routes exactly the flows with a path
    assert (a.routed == (want | keep)).all()
    assert path_alive(a.arcs(fabric)[a.routed], health.arc_capacity(fabric)).all()
    assert np.array_equal(path, greedy_batched(problem, fixed=fixed))


@settings(max_examples=30, deadline=None)
@given(cases())
def test_batched_arcs_and_local_search_from_them_equal_the_recomputed(random_instance, case):
    """The core arcs greedy_batched_arcs hands on are cand.all_chosen of its paths, and a
    local search started from them moves exactly as one that computes them itself."""
    from controller.solver.greedy import greedy_batched_arcs

    fabric, health, flows = random_instance(*case)
    problem = Problem(fabric, health, flows)
    cand = problem.candidates
    fixed = np.full(len(flows), UNROUTED, np.int64)
    fixed[::2] = greedy(problem)[::2]
    path, chosen = greedy_batched_arcs(problem, fixed=fixed)
    assert np.array_equal(chosen, cand.all_chosen(path))
    handed = local_search(problem, path, chosen=chosen)
    assert np.array_equal(handed, local_search(problem, path))


def test_greedy_batched_matches_greedy_when_racks_do_not_meet(two_rack_pod):
    from controller.solver.greedy import greedy_batched

    # two flows from rack 0 to rack 1 (one batch each, in demand order), then the reverse
    flows = FlowSet.build([0, 1, 2], [2, 3, 0], [400.0, 300.0, 200.0])
    health = LinkHealth.all_up(two_rack_pod)
    none = np.full(3, UNROUTED)
    path = greedy_batched(Problem(two_rack_pod, health, flows), fixed=none)
    assert sorted(path[:2].tolist()) == [0, 1]  # both CTSWs
    assert path.tolist() == greedy(Problem(two_rack_pod, health, flows)).tolist()


def _scalar_local_search(fabric, health, flows, path, max_tries):
    """The local search one try at a time (take the flow off, score its candidates, put it
    back unless it moves): the rule local_search batches."""
    from controller.model.fabric import ACCESS
    from controller.model.paths import SAME_RACK
    from controller.solver.candidates import candidates
    from controller.solver.greedy import _best_path, _Mates, core_load
    from controller.solver.problem import inverse as _inverse

    inv = _inverse(health.arc_capacity(fabric))
    cand = candidates(fabric, flows)
    path = path.copy()
    chosen = cand.all_chosen(path)
    load = core_load(fabric, flows, chosen)
    may = (path >= 0) & (cand.cls != SAME_RACK)
    mates = _Mates(fabric, flows, cand)
    mates.fill(cand.cls, path)
    core = np.repeat(fabric.link_kind != ACCESS, 2)
    weight = np.where(core & np.isfinite(inv), inv, 0.0)
    tries = 0
    while max_tries is None or tries < max_tries:
        util = load * weight
        top = float(util.max(initial=0.0))
        if top <= 1e-9:
            break
        arc = int(np.argmax(util))
        on = np.flatnonzero((chosen == arc).any(axis=1) & may)
        on = on[np.argsort(-flows.demand[on], kind="stable")]
        moved = False
        for f in on.tolist():
            if max_tries is not None and tries >= max_tries:
                break
            tries += 1
            d, cls = float(flows.demand[f]), int(cand.cls[f])
            old = chosen[f, chosen[f] >= 0]
            load[old] -= d
            mates.remove(f, cls, int(path[f]))
            arcs = cand.arcs(f)
            p, worst = _best_path(arcs, load, inv, d, mates.allowed(f, cls, arcs.shape[0]))
            if p != UNROUTED and p != path[f] and worst < top - 1e-9:
                path[f] = p
                chosen[f, : arcs.shape[1]] = arcs[p]
                load[arcs[p]] += d
                mates.add(f, cls, p)
                moved = True
                break
            load[old] += d
            mates.add(f, cls, int(path[f]))
        if not moved:
            break
    return path


@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from([None, 1, 2, 5, 40]))
def test_local_search_tries_like_one_flow_at_a_time(random_instance, case, tries):
    fabric, health, flows = random_instance(*case)
    problem = Problem(fabric, health, flows)
    start = greedy(problem)
    start[start >= 0] = 0  # everything on the first candidate: plenty to move
    want = _scalar_local_search(fabric, health, flows, start, tries)
    assert np.array_equal(local_search(problem, start, max_tries=tries), want)


@settings(max_examples=20, deadline=None)
@given(cases())
def test_candidates_of_buckets_are_their_flows(random_instance, case):
    """A QP bucket has its flow's candidates, so the spray takes them by parent index."""
    from controller.solver.candidates import candidates
    from controller.solver.qp_buckets import split_flows

    fabric, _, flows = random_instance(*case)
    new, parent = split_flows(flows, np.arange(0, len(flows), 2), 4)
    want, got = candidates(fabric, new), candidates(fabric, flows).take(parent)
    assert np.array_equal(want.cls, got.cls) and np.array_equal(want.base, got.base)
