"""The relief pass: links over capacity below the maximum are drained, nothing else worsens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import Assignment
from controller.model.clos import ClosSpec, build
from controller.model.fabric import ACCESS, Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import path_alive
from controller.routes.budget import table_usage
from controller.routes.entries import route_conflicts
from controller.solver.certificate import CertifyOptions
from controller.solver.greedy import local_search, relieve_arcs, utilisation
from controller.solver.problem import Problem
from controller.solver.solve import SolveOptions, solve

_TOL = 1e-9


def relieve(fabric: Fabric, health: LinkHealth, flows: FlowSet, path: np.ndarray,
            **kw: object) -> np.ndarray:  # fmt: skip
    """The paths relieve_arcs returns."""
    return relieve_arcs(Problem(fabric, health, flows), path, **kw)[0]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pinned() -> tuple[Fabric, LinkHealth, FlowSet, np.ndarray]:
    """One pod, 4 racks of one host (NICs 2r, 2r+1), 3 CTSWs. Rack 1 keeps only its uplink
    to CTSW 0, so the 500G from rack 0 to rack 1 pins the maximum at 1.25 there; rack 2
    sends 450G to rack 3 over CTSW 1 (1.125: over capacity, below the maximum), and CTSWs
    0 and 2 have room for either of those flows."""
    fabric = build(ClosSpec(name="pinned", pods=1, racks_per_pod=4, hosts_per_rack=1,
                            nics_per_host=2, ctsws_per_pod=3))  # fmt: skip
    health = LinkHealth.all_up(fabric).down([fabric.rack_link(1, 1), fabric.rack_link(1, 2)])
    flows = FlowSet.build([0, 1, 4, 5], [2, 3, 6, 7], [300.0, 200.0, 300.0, 150.0])
    return fabric, health, flows, np.array([0, 0, 1, 1])


def _core(fabric: Fabric) -> np.ndarray:
    return np.repeat(fabric.link_kind != ACCESS, 2)


def test_local_search_leaves_the_arc_below_the_maximum(pinned):
    fabric, health, flows, path = pinned
    assert np.array_equal(local_search(Problem(fabric, health, flows), path), path)


def test_relief_drains_the_arc_below_the_maximum(pinned):
    fabric, health, flows, path = pinned
    before = utilisation(fabric, health, Assignment(flows, path))
    new = relieve(fabric, health, flows, path)
    after = utilisation(fabric, health, Assignment(flows, new))
    assert before.max() == after.max() == 1.25  # pinned by the rack with one uplink
    assert np.array_equal(new[:2], path[:2])  # those flows have nowhere else to go
    # the largest flow on the 1.125 arc leaves it for an empty CTSW: nothing over there now
    assert new[2] != 1 and new[3] == 1
    over = _core(fabric) & (after > 1 + _TOL)
    assert np.array_equal(np.flatnonzero(over), np.flatnonzero(_core(fabric) & (before > 1.2)))


def test_relief_tries_bound_the_work(pinned):
    fabric, health, flows, path = pinned
    assert np.array_equal(relieve(fabric, health, flows, path, max_tries=0), path)


def test_relief_keeps_flows_that_may_not_move(pinned):
    fabric, health, flows, path = pinned
    movable = np.array([True, True, False, True])
    new = relieve(fabric, health, flows, path, movable=movable)
    assert new[2] == 1 and new[3] != 1  # the 150G flow goes instead


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    spec = draw(st.sampled_from(["tiny", "small"]))
    n_flows = draw(st.integers(2, 60))
    seed = draw(st.integers(0, 10_000))
    failures = draw(st.integers(0, 3))
    return spec, n_flows, seed, failures


@settings(max_examples=40, deadline=None)
@given(cases())
def test_relief_from_any_start_never_worsens(random_instance, random_alive_paths, case):
    fabric, health, flows = random_instance(*case)
    path = random_alive_paths(fabric, health, flows, case[2])
    if path is None:
        return
    new = relieve(fabric, health, flows, path)
    before = utilisation(fabric, health, Assignment(flows, path))
    after = utilisation(fabric, health, Assignment(flows, new))
    core = _core(fabric)
    assert after.max() <= before.max() + _TOL
    assert not (core & (after > 1 + _TOL) & (before <= 1 + _TOL)).any()
    # an arc over capacity only ever loses load
    assert (after[before > 1 + _TOL] <= before[before > 1 + _TOL] + _TOL).all()
    assert (new >= 0).all()
    assert path_alive(Assignment(flows, new).arcs(fabric), health.arc_capacity(fabric)).all()
    assert np.array_equal(relieve(fabric, health, flows, path), new)  # deterministic


@settings(max_examples=30, deadline=None)
@given(cases(), st.sampled_from([None, 2, 6]), st.sampled_from([1, 16]))
def test_solve_with_relief_never_worse_than_without(random_instance, case, budget, qps):
    fabric, health, flows = random_instance(*case)
    off = CertifyOptions(enabled=False)  # the solver's routing, before any job is handed back
    # job_rounds=0: relief alone (the job-level pass after it may trade a link within
    # capacity for a better job vector, docs/objective.md)
    opts = SolveOptions(table_budget=budget, qps=qps, certify=off, job_rounds=0)
    no_relief = SolveOptions(table_budget=budget, qps=qps, relief_tries=0, certify=off,
                             job_rounds=0)  # fmt: skip
    plain = solve(fabric, health, flows, options=no_relief)
    res = solve(fabric, health, flows, options=opts)
    a, b = plain.assignment, res.assignment
    u_plain, u = utilisation(fabric, health, a), utilisation(fabric, health, b)
    core = _core(fabric)
    assert res.mlu <= plain.mlu + _TOL and abs(res.mlu - u.max(initial=0.0)) < _TOL
    assert not (core & (u > 1 + _TOL) & (u_plain <= 1 + _TOL)).any()
    # the same rows (whole flows and buckets), routed or left on ECMP as before
    assert np.array_equal(np.asarray(res.parent), np.asarray(plain.parent))
    assert np.array_equal(b.flows.qp, a.flows.qp) and np.array_equal(b.routed, a.routed)
    assert np.array_equal(res.fallback_ecmp, plain.fallback_ecmp)
    usage = table_usage(fabric, b)
    if budget is not None:
        assert usage.max(initial=0) <= budget
    assert res.tables["te_entries"] == usage.sum()
    assert not route_conflicts(fabric, b).any()
    over = core & (u > 1 + _TOL)
    count = np.bincount(b.arcs(fabric).reshape(-1) + 1, minlength=fabric.num_arcs + 1)[1:]
    assert res.collided_links == int((over & (count > 1)).sum())


def test_negative_relief_tries_is_refused():
    from controller.errors import InputError

    with pytest.raises(InputError, match="relief_tries"):
        SolveOptions(relief_tries=-1)
