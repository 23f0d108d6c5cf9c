"""The solve entry point: optimality where provable, bounds, failures, errors, determinism."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.errors import FlowError, Superseded
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth, parse_health
from controller.model.jobs import jobs_flows
from controller.model.paths import path_alive
from controller.solver.certificate import CertifyOptions
from controller.solver.solve import SolveOptions, repair, solve
from sim.jobmix import random_jobs, ring_jobs

# the solver's own routing, before the certificate hands any job back to hashing
UNCERTIFIED = SolveOptions(certify=CertifyOptions(enabled=False))


def test_full_pod_of_rings_is_collision_free() -> None:
    """A 1:1 pod of equal-rate ring flows: MLU equals the bound, zero collisions."""
    fabric = build(ClosSpec(name="p", racks_per_pod=12, hosts_per_rack=2, nics_per_host=4,
                            ctsws_per_pod=8))  # fmt: skip
    for seed in (1, 2, 3):
        flows = jobs_flows(fabric, ring_jobs(fabric, 4, seed=seed))
        res = solve(fabric, LinkHealth.all_up(fabric), flows)
        assert res.collided_links == 0
        assert res.mlu == res.bound.value == 1.0
        assert res.ratio == 1.0


def _rack0_below_one_to_one():
    fabric = build(ClosSpec(name="p", racks_per_pod=6, hosts_per_rack=1, nics_per_host=4,
                            ctsws_per_pod=4))  # fmt: skip
    flows = jobs_flows(fabric, ring_jobs(fabric, 6))  # one host per rack: all flows leave
    health = parse_health(fabric, ["rtsw-p0-r0:ctsw-p0-c3"])
    return fabric, flows, health


def test_failure_meets_unsplit_bound() -> None:
    fabric, flows, health = _rack0_below_one_to_one()
    res = solve(fabric, health, flows, options=SolveOptions(qps=1))
    # 4 line-rate flows leave rack 0 over 3 alive uplinks: two must share one
    assert res.mlu == pytest.approx(res.bound.value) == pytest.approx(2.0)
    assert res.bound.name == "rack-egress-unsplit"
    assert res.split_flows.size == 0 and not res.assignment.flows.split
    arcs = res.assignment.arcs(fabric)
    assert path_alive(arcs, health.arc_capacity(fabric)).all()


def test_failure_split_into_qp_buckets_meets_bucket_bound() -> None:
    fabric, flows, health = _rack0_below_one_to_one()
    res = solve(fabric, health, flows)  # default: 16 QP buckets
    # 4 flows x 16 buckets = 64 buckets on 3 uplinks: some uplink carries ceil(64/3) = 22
    # buckets of 1/16 line rate each
    assert res.bound.value == pytest.approx(22 / 16)
    assert res.mlu == pytest.approx(22 / 16)
    split = res.assignment.flows
    assert split.split and res.split_flows.size >= 1
    # every split flow keeps its demand over its buckets; only flows into or out of rack 0
    # (whose link failed both ways) split
    total = np.bincount(res.parent, weights=split.demand, minlength=len(flows))
    assert np.allclose(total, flows.demand)
    racks = [fabric.rack_of_nic(nics[res.split_flows])
             for nics in (flows.src_nic, flows.dst_nic)]  # fmt: skip
    assert ((racks[0] == 0) | (racks[1] == 0)).all()
    assert path_alive(res.assignment.arcs(fabric), health.arc_capacity(fabric)).all()


def test_lp_always_reports_lp_bound(small) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=2))
    res = solve(small, LinkHealth.all_up(small), flows, options=SolveOptions(lp="always"))
    assert res.lp is not None and res.bound.parts["lp"] == res.lp.mlu
    assert res.mlu >= res.bound.value * (1 - 1e-9)
    assert res.metrics()["ratio"] == pytest.approx(res.ratio)


@pytest.mark.parametrize("preset", ["small", "pod"])
def test_a_stop_ends_the_solve_at_a_stage_and_a_stop_never_taken_changes_nothing(
    preset: str,
) -> None:
    """`stop` is asked between stages: once it says so the solve raises Superseded; asked
    and never taken, the result is the same as without it, byte for byte."""
    fabric = build(PRESETS[preset])
    health = LinkHealth.all_up(fabric)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=1))
    asked: list[int] = []
    caller = threading.current_thread()

    def never() -> bool:
        # the reference is simulated on another thread that asks `stop` too, as often as
        # its timing allows: only the solve's own stages are counted
        if threading.current_thread() is caller:
            asked.append(1)
        return False

    plain = solve(fabric, health, flows)
    same = solve(fabric, health, flows, stop=never)
    assert len(asked) >= 3  # start, unfit jobs, placement, ...
    assert same.assignment.path.tobytes() == plain.assignment.path.tobytes()
    assert same.mlu == plain.mlu
    for after in range(len(asked)):  # taken at each stage in turn
        calls = iter(range(len(asked) + 1))

        def at(after: int = after, calls: Iterator[int] = calls) -> bool:
            return threading.current_thread() is caller and next(calls) >= after

        with pytest.raises(Superseded):
            solve(fabric, health, flows, stop=at)


def test_bad_flows_rejected(tiny) -> None:
    with pytest.raises(FlowError, match="dst_nic 99 is not a NIC"):
        solve(tiny, LinkHealth.all_up(tiny), FlowSet.build([0], [99], 100.0))
    with pytest.raises(FlowError, match="demand -5.0 must be a positive"):
        solve(tiny, LinkHealth.all_up(tiny), FlowSet.build([0], [5], -5.0))


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="lp must be one of"):
        SolveOptions(lp="sometimes")
    with pytest.raises(ValueError, match="search_tries must be >= 0"):
        SolveOptions(search_tries=-1)
    # refused when the options are made, not only if the LP happens to run
    with pytest.raises(ValueError, match="unknown LP backend 'bogus'; known: auto, pdlp"):
        SolveOptions(backend="bogus")


def test_no_path_left_is_reported_not_dropped(tiny) -> None:
    flows = FlowSet.build([0, 1], [4, 5], 100.0)
    health = parse_health(tiny, [f"rtsw-p0-r0:ctsw-p0-c{c}" for c in range(4)])
    res = solve(tiny, health, flows)
    assert res.unroutable.tolist() == [0, 1]
    assert not res.assignment.routed.any()


def test_repair_moves_only_hit_flows() -> None:
    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, ring_jobs(fabric, 8, seed=3))
    health = LinkHealth.all_up(fabric)
    before = solve(fabric, health, flows, options=UNCERTIFIED)
    arcs = before.assignment.arcs(fabric)
    link = int(arcs[np.flatnonzero(arcs[:, 2] >= 0)[0], 1]) // 2  # a used rack uplink
    after_health = health.down([link])
    after = repair(fabric, after_health, before, options=UNCERTIFIED)
    assert after.certificate is None
    certified = repair(fabric, after_health, before)
    assert certified.certificate is not None and certified.certificate.passed
    hit = (arcs // 2 == link).any(axis=1)
    assert hit.any()
    same = before.assignment.path == after.assignment.path
    assert same[~hit].all()
    assert path_alive(after.assignment.arcs(fabric), after_health.arc_capacity(fabric)).all()


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 3))
def test_deterministic_and_valid(seed: int, failures: int) -> None:
    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=seed, fill=0.8))
    rng = np.random.default_rng(seed)
    down = rng.choice(np.arange(fabric.rack_base, fabric.num_links), failures, replace=False)
    health = LinkHealth.all_up(fabric).down(down.tolist())
    a = solve(fabric, health, flows)
    b = solve(fabric, health, flows)
    assert np.array_equal(a.assignment.path, b.assignment.path)
    routed = a.assignment.routed
    assert path_alive(a.assignment.arcs(fabric)[routed], health.arc_capacity(fabric)).all()
    off = set(a.parent[~routed].tolist())  # type: ignore[index]
    reported = set(a.unroutable.tolist()) | set(a.fallback_ecmp.tolist())
    assert off == reported | set(a.handed_back.tolist())
    assert a.certificate is not None and a.certificate.passed
    assert a.certificate.fallback_flows == a.handed_back.size
    assert a.mlu >= a.bound.value * (1 - 1e-9)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([None, 6, 24]), st.booleans())
def test_the_usage_a_result_carries_is_its_assignments(
    seed: int, budget: int | None, spray: bool
) -> None:
    """The per-switch entry counts a result carries (kept by the engine's route index for
    repairs, instead of counting them again) are those of its assignment, exactly: for the
    spray and one path per flow, within a tight budget or not, re-solved from a previous."""
    from controller.routes.budget import table_usage

    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=seed, fill=0.8))
    health = LinkHealth.all_up(fabric)
    opts = SolveOptions(table_budget=budget, whole_first_flows=0 if spray else 8192)
    first = solve(fabric, health, flows, options=opts)
    again = solve(fabric, health.down([fabric.rack_base]), flows, previous=first.assignment,
                  options=opts)  # fmt: skip
    for res in (first, again):
        assert res.usage is not None
        assert np.array_equal(res.usage, table_usage(fabric, res.assignment))


def test_fabric_table_budget_is_respected_and_the_rest_rides_ecmp() -> None:
    from dataclasses import replace

    from controller.model.assignment import Assignment
    from controller.routes.budget import table_usage
    from controller.routes.entries import build_routes
    from sim.compare import routed
    from sim.switches import EmulatedFabric, verify

    fabric = build(PRESETS["small"])
    health = LinkHealth.all_up(fabric)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=1))
    free = solve(fabric, health, flows)
    used = table_usage(fabric, free.assignment)
    rtsw = used[fabric.node_id("rtsw", 0) : fabric.node_id("ctsw", 0)]
    tight = replace(fabric, te_entries=(int(rtsw.max()) // 2, 3, None))
    checked = solve(tight, health, flows)
    assert checked.certificate is not None and checked.certificate.passed
    res = solve(tight, health, flows, options=UNCERTIFIED)  # the fabric's budget by default
    usage = table_usage(tight, res.assignment)
    assert (usage <= tight.table_budget()).all()
    counts = build_routes(tight, res.assignment).counts()
    assert max(v for k, v in counts.items() if k.startswith("rtsw")) <= rtsw.max() // 2
    assert max(v for k, v in counts.items() if k.startswith("ctsw")) <= 3
    # the remainder is reported, per input flow, and ECMP still delivers it
    assert res.fallback_ecmp.size > 0
    m = res.metrics()
    assert m["fallback_ecmp"] == res.fallback_ecmp.size
    assert m["te_entries"] == usage.sum() and m["te_entries_budget_ctsw"] == 3
    assert m["te_entries_max_ctsw"] <= 3
    em = EmulatedFabric(tight)
    routes = build_routes(tight, res.assignment)
    for switch in routes.switches():
        em.program(switch, routes.table(switch))
    check = verify(tight, em, res.assignment)
    assert check.ok, check.summary()
    row = routed("te", tight, health, res.assignment, 0.0, parent=res.parent)
    assert row.report.unrouted == 0 and row.report.flows == len(flows)
    # an explicit budget overrides the fabric's, for every tier
    one = solve(fabric, health, flows, options=replace(UNCERTIFIED, table_budget=1))
    assert table_usage(fabric, one.assignment).max() <= 1
    assert Assignment(one.assignment.flows, one.assignment.path).routed.any()
    # certified, the ring that one entry per switch leaves below E-ECMP goes back to hashing
    back = solve(fabric, health, flows, options=SolveOptions(table_budget=1))
    assert back.certificate is not None and back.certificate.passed
    assert back.certificate.fallback_jobs


def test_a_job_change_moves_no_bucket_of_the_other_jobs() -> None:
    from controller.model.assignment import moved_pairs

    fabric = build(PRESETS["small"])
    health = LinkHealth.all_up(fabric)
    jobs = random_jobs(fabric, seed=3)
    opts = SolveOptions(whole_first_flows=0)  # spray first, as on a large mix
    full = solve(fabric, health, jobs_flows(fabric, jobs), options=opts)
    assert full.method == "qp-spray" and full.split_flows.size  # type: ignore[union-attr]
    # a job leaves: every other flow keeps its buckets (their indices all shift)
    fewer = solve(fabric, health, jobs_flows(fabric, jobs[1:]), previous=full.assignment,
                  options=opts)  # fmt: skip
    assert fewer.churn == 0 and moved_pairs(full.assignment, fewer.assignment).size == 0
    # and comes back, listed first: only its own flows are new
    again = solve(fabric, health, jobs_flows(fabric, jobs), previous=fewer.assignment,
                  options=opts)  # fmt: skip
    assert again.churn == 0
    assert np.array_equal(again.assignment.path, full.assignment.path)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 4), st.sampled_from([16, 64, None]))
@example(3, 3, 16)  # the solve and the repair both hand flows back
def test_a_repair_settled_on_a_solve_keeps_its_hand_backs_and_says_why(
    seed: int, failures: int, budget: int | None
) -> None:
    """A repair of a solve's routes, as the service settles a link change on it
    (`SolveResult.of(as_of=...)`): every input flow without a TE path is accounted for
    (unroutable, over the table budget, handed back, or its job left to hashing whole), the
    certificate counts and names every flow and job handed back, the solve's ones included
    while they stay off TE paths, and the jobs left to hashing keep their reason."""
    from controller.solver.repair import RouteIndex, repair_indexed
    from controller.solver.solve import SolveResult

    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=seed))
    rng = np.random.default_rng(seed)
    links = np.arange(fabric.rack_base, fabric.num_links)
    down = rng.choice(links, failures + 1, replace=False)
    health = LinkHealth.all_up(fabric).down(down[:-1].tolist())
    solved = solve(fabric, health, flows, options=SolveOptions(table_budget=budget))
    after = health.down([int(down[-1])])
    res, _ = repair_indexed(after, RouteIndex.build(fabric, solved.assignment),
                            old_health=health, table_budget=budget,
                            hashed_jobs=tuple(solved.hashed_jobs))  # fmt: skip
    out = SolveResult.of(res, solved.bound, None, {}, solved.parent, as_of=solved)
    parent = np.asarray(out.parent)
    off = set(parent[~out.assignment.routed].tolist())
    accounted = (set(out.unroutable.tolist()) | set(out.fallback_ecmp.tolist())
                 | set(out.handed_back.tolist()) | set(out.hashed_flows.tolist()))  # fmt: skip
    assert off == accounted
    assert set(out.handed_back.tolist()) >= set(solved.handed_back.tolist()) & off
    cert = out.certificate
    assert cert is not None and cert.passed
    assert cert.fallback_flows == out.handed_back.size
    ids = flows.job_ids
    assert {ids[j] for j in flows.job[out.handed_back]} <= set(cert.fallback_jobs)
    assert out.hashed_jobs == solved.hashed_jobs


def test_an_lp_that_ends_without_a_solution_does_not_fail_the_solve(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The LP guides a pass and tightens the bound; its time limit running out (or a
    backend that returns nothing) leaves the solve to go on without it, said in the
    method and the log, instead of failing the whole solve (a service's global solve)."""
    import importlib

    from controller.errors import LpTimeout

    solve_module = importlib.import_module("controller.solver.solve")

    def timed_out(*args: object, **kwargs: object) -> None:
        raise LpTimeout("LP (pdlp) ended NOT_SOLVED after 0.0 s (limit 0.001 s)")

    monkeypatch.setattr(solve_module, "solve_lp", timed_out)
    fabric = build(PRESETS["pod"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=1))
    res = solve(fabric, LinkHealth.all_up(fabric), flows, options=SolveOptions(lp="always"))
    assert res.lp is None and "+no-lp" in res.method
    assert res.assignment.routed.any() and res.mlu >= res.bound.value * (1 - 1e-9)
    assert "going on without the LP" in caplog.text


def test_a_spray_kept_away_from_its_cut_bound_reports_the_lp_bound() -> None:
    """The defect: a spray that beat one path per flow but was not within spray_gap of
    its cut bound was returned before the LP, so a weak cut bound (many failures, which
    the cuts do not see) read as a spray 1.38x from the optimum where the LP's optimum
    put it within 3%."""
    from controller.model.health import random_failures

    fabric = build(PRESETS["pod"])
    health = random_failures(fabric, per_pod=400, seed=4)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=4))
    opts = SolveOptions(whole_first_flows=0)
    res = solve(fabric, health, flows, options=opts)
    lp = solve(fabric, health, flows, options=SolveOptions(lp="always"))
    assert res.method == "qp-spray" and res.lp is not None
    assert res.bound.value == pytest.approx(lp.bound.value)
    assert res.mlu >= res.bound.value * (1 - 1e-9) and res.ratio < 1.05


def test_a_switch_holds_no_more_than_its_own_budget_under_a_larger_option() -> None:
    """The defect: `--table-budget 256` replaced an inventory's per-switch budget too, so a
    switch that says it holds 3 TE entries was given 29."""
    from controller.model.inventory import fabric_from_cables
    from controller.model.name_templates import named_cable_list
    from controller.routes.budget import table_usage

    devices, cables = named_cable_list(build(PRESETS["small"]))
    plain = fabric_from_cables("dc1", devices, cables)
    flows = jobs_flows(plain, random_jobs(plain, seed=1))
    health = LinkHealth.all_up(plain)
    free = solve(plain, health, flows, options=UNCERTIFIED)
    usage = table_usage(plain, free.assignment)
    busy = int(np.argmax(usage))
    assert usage[busy] > 3
    name = plain.node_name(busy)
    devices = [replace(d, te_entries=3) if d.name == name else d for d in devices]
    fabric = fabric_from_cables("dc1", devices, cables)
    res = solve(fabric, health, flows, options=replace(UNCERTIFIED, table_budget=256))
    usage = table_usage(fabric, res.assignment)
    assert usage[busy] <= 3 and res.fallback_ecmp.size > 0
    assert (usage <= 256).all()


def test_the_fullest_switch_is_named_with_its_own_budget() -> None:
    """The defect: with one switch of a tier given a budget of its own (an inventory), the
    figures paired the tier's most entries (another switch's) with its least budget:
    'rtsw 32/3' where no switch was over."""
    from controller.solver.solve import table_figures

    fabric = build(PRESETS["tiny"])
    budget = np.full(fabric.num_nodes, 2048.0)
    small, busy = fabric.node_id("rtsw", 0), fabric.node_id("rtsw", 1)
    budget[small] = 3
    usage = np.zeros(fabric.num_nodes)
    usage[small], usage[busy] = 3, 32
    out = table_figures(fabric, usage, budget)
    assert (out["te_entries_max_rtsw"], out["te_entries_budget_rtsw"]) == (3, 3)
    usage[small] = 1  # 1 of 3 is still fuller than 32 of 2,048
    out = table_figures(fabric, usage, budget)
    assert (out["te_entries_max_rtsw"], out["te_entries_budget_rtsw"]) == (1, 3)
    budget[small] = 2048  # uniform budgets: the most entries on one switch
    out = table_figures(fabric, usage, budget)
    assert (out["te_entries_max_rtsw"], out["te_entries_budget_rtsw"]) == (32, 2048)
