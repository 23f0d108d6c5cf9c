"""The certificate: no job below the fabric's own hashing, checked independently here.

The property test searches for counterexamples rather than enumerating cases: on random
fabrics, failures in every tier, random job mixes, table budgets and QP counts, 200 seeded
examples in the normal run (small fabrics: the same examples every run); `make fuzz`
(FABRIC_TE_FUZZ_EXAMPLES, e.g. 5,000) draws that many fresh ones. Every counterexample
found is kept as an @example of it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from controller.errors import InputError, Superseded
from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.hashing import hashed
from controller.model.health import LinkHealth, parse_health
from controller.model.jobs import Job, jobs_flows
from controller.model.rates import simulate
from controller.routes.entries import route_conflicts
from controller.solver import certificate
from controller.solver.certificate import MAX_ROUNDS, CertifyOptions, certify, prefetch
from controller.solver.repair import RouteIndex, follow_up, repair_indexed
from controller.solver.solve import SolveOptions, mlu_counted, solve
from sim.compare import routed
from sim.jobmix import random_jobs, ring_jobs

solve_module = importlib.import_module("controller.solver.solve")

ISSUE_FAILURES = ["rtsw-p0-r0:ctsw-p0-c1", "rtsw-p0-r1:ctsw-p0-c2=0.5",
                  "ctsw-p1-c3:atsw-c3-a0"]  # fmt: skip


def reference(fabric: Fabric, health: LinkHealth, flows: FlowSet, kind: str, seeds: range,
              qps: int = 16) -> dict[str, float]:  # fmt: skip
    """Per job, the mean busbw over the seeds of the hashing `kind`, from sim's side."""
    runs = []
    for seed in seeds:
        sub, a, parent = hashed(kind, fabric, flows, health, seed, qps)
        runs.append(simulate(fabric, health, a, sub, parent).job_busbw_fraction)
    return {job: float(np.mean([r[job] for r in runs])) for job in runs[0]}


def te_values(fabric: Fabric, health: LinkHealth, res, kind: str, seeds: range,  # type: ignore[no-untyped-def]
              qps: int = 16) -> dict[str, float]:  # fmt: skip
    """Per job, the mean busbw over the seeds of the TE routing as sim.compare carries it."""
    runs = [
        routed("te", fabric, health, res.assignment, 0.0, seed, qps, res.parent,
               hashing=kind).report.job_busbw_fraction
        for seed in seeds
    ]  # fmt: skip
    return {job: float(np.mean([r[job] for r in runs])) for job in runs[0]}


def assert_no_job_below(fabric: Fabric, health: LinkHealth, flows: FlowSet, res,  # type: ignore[no-untyped-def]
                        kind: str = "eecmp", qps: int = 16) -> None:  # fmt: skip
    seeds = range(1, 5)
    ref = reference(fabric, health, flows, kind, seeds, qps)
    te = te_values(fabric, health, res, kind, seeds, qps)
    below = {j: (te[j], ref[j]) for j in ref if te.get(j, 0.0) < ref[j] * (1 - 1e-9)}
    assert not below, below


def test_the_issue_case_gives_every_job_at_least_eecmp_and_wcmp_each_as_reference() -> None:
    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=3))
    health = parse_health(fabric, ISSUE_FAILURES)
    # the MLU solution as it is (the job-level pass raises this case's jobs to E-ECMP and
    # beyond, docs/objective.md), so that the certificate's fallback is what is checked
    as_is = SolveOptions(certify=CertifyOptions(enabled=False), job_rounds=0)
    raw = solve(fabric, health, flows, options=as_is)
    seeds = range(1, 5)
    ref = reference(fabric, health, flows, "eecmp", seeds)
    te = te_values(fabric, health, raw, "eecmp", seeds)
    assert min(te[j] / ref[j] for j in ref) < 0.8  # the solver alone leaves a job far below
    for kind in ("eecmp", "wcmp"):
        opts = SolveOptions(certify=CertifyOptions(reference=kind), job_rounds=0)
        res = solve(fabric, health, flows, options=opts)
        cert = res.certificate
        assert cert is not None and cert.passed and cert.below[kind] == 0
        assert cert.fallback_jobs and cert.fallback_flows == res.handed_back.size
        assert_no_job_below(fabric, health, flows, res, kind)
        assert res.mlu >= res.bound.value * (1 - 1e-9)


def test_a_stalled_job_is_never_compared_nor_handed_back() -> None:
    """A job with a flow cut off from its destination is 0 under every routing: its other
    flows' shares say nothing of it. Compared on them, it was handed back, and a healthy job
    beside it lost (0.286 -> 0.25 of line rate, the routing a blind spray at 5.5 x the
    bound); now the routing is the solver's and the healthy job is the only one compared."""
    fabric = build(ClosSpec(name="f6", pods=1, racks_per_pod=5, hosts_per_rack=2,
                            nics_per_host=8, ctsws_per_pod=2, rack_link_gbps=800))  # fmt: skip
    h = fabric.host_by_name
    jobs = [Job("j0", tuple(h(f"host-p0-r{r}-h{x}") for r, x in
                            ((0, 0), (0, 1), (1, 0), (3, 1), (4, 0))), dp=5, tp=8, channels=2),
            Job("j1", tuple(h(f"host-p0-r{r}-h{x}") for r, x in ((3, 0), (2, 0), (1, 1))),
                dp=12, tp=2, collectives=("ring", "alltoall"), channels=3),
            Job("j2", (h("host-p0-r4-h1"), h("host-p0-r2-h1")), dp=16, tp=1,
                collectives=("alltoall",), channels=2, priority=5)]  # fmt: skip
    flows = jobs_flows(fabric, jobs)
    health = parse_health(fabric, ["rtsw-p0-r3:ctsw-p0-c0", "rtsw-p0-r3:ctsw-p0-c1",
                                   "rtsw-p0-r0:ctsw-p0-c0=0.1"])  # fmt: skip
    res = solve(fabric, health, flows)
    cert = res.certificate
    assert cert is not None and cert.passed and not cert.fallback_jobs
    assert cert.jobs_checked == 1 and res.mlu <= res.bound.value * 1.01
    assert cert.stalled == 2 and "2 job(s) stalled under any routing" in cert.summary()
    assert cert.to_dict()["jobs_stalled"] == 2
    te = te_values(fabric, health, res, "eecmp", range(1, 5))
    assert te["j2"] > 0.28
    assert_no_job_below(fabric, health, flows, res)
    # the hashings compared beside the reference say 0 for them too (WCMP read 0.56)
    opts = SolveOptions(certify=CertifyOptions(compare=("wcmp",)))
    wcmp = solve(fabric, health, flows, options=opts).certificate.compared_values["wcmp"]  # type: ignore[union-attr]
    assert wcmp[:2].tolist() == [0.0, 0.0] and wcmp[2] > 0


def test_nothing_at_risk_costs_no_reference_and_changes_nothing(small: Fabric) -> None:
    flows = jobs_flows(small, ring_jobs(small, 4, seed=1))
    health = LinkHealth.all_up(small)
    res = solve(small, health, flows)
    cert = res.certificate
    assert cert is not None and cert.passed and res.mlu <= 1.0
    assert cert.jobs_checked == 0 and cert.worst_ratio == {"eecmp": None}
    assert cert.rounds == 1 and not cert.fallback_jobs and res.handed_back.size == 0


def test_everything_handed_back_is_the_reference_exactly(small: Fabric) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=2))
    health = parse_health(small, ISSUE_FAILURES)
    none = Assignment(flows, np.full(len(flows), UNROUTED, np.int64))
    out, cert = certify(small, health, none, qps=16, options=CertifyOptions(compare=("wcmp",)))
    # without a TE row the data plane is the reference, known without simulating it
    assert out is none and cert.passed and cert.rounds == 0
    assert cert.jobs_checked > 0 and cert.worst_ratio["eecmp"] == 1.0


def test_a_shown_certificate_logs_each_round_as_progress(
    small: Fabric, caplog: pytest.LogCaptureFixture
) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=4))
    bad = Assignment(flows, np.zeros(len(flows), np.int64))  # every flow on CTSW 0
    with caplog.at_level(logging.INFO, logger="controller.solver.certificate"):
        _, quiet = certify(small, LinkHealth.all_up(small), bad, qps=16)
        assert quiet.rounds > 1 and not caplog.records  # a sweep's repairs: DEBUG only
        _, cert = certify(small, LinkHealth.all_up(small), bad, qps=16, shown=True)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == cert.rounds - 1  # the last round passed: nothing handed back
    assert lines[0].startswith("certificate round 1: ") and "below eecmp" in lines[0]


def test_a_bad_routing_is_handed_back_until_certified(small: Fabric) -> None:
    # every flow on path 0: CTSW 0 carries all of it; the certificate must undo that
    flows = jobs_flows(small, random_jobs(small, seed=4))
    health = LinkHealth.all_up(small)
    bad = Assignment(flows, np.zeros(len(flows), np.int64))
    out, cert = certify(small, health, bad, qps=16)
    assert cert.passed and cert.fallback_jobs and cert.rounds > 1
    assert (out.path == UNROUTED).sum() >= cert.fallback_flows > 0
    res = replace(solve(small, health, flows), assignment=out,
                  parent=np.arange(len(flows), dtype=np.int64))  # fmt: skip
    assert_no_job_below(small, health, flows, res)
    # deterministic: the same rows handed back, the same figures
    again, cert2 = certify(small, health, bad, qps=16)
    assert np.array_equal(out.path, again.path)
    same = {"seconds": 0, "reference_runs": 0}  # the second reads the memoised reference
    assert {**cert.to_dict(), **same} == {**cert2.to_dict(), **same}


def test_a_prefetched_reference_is_the_one_the_certificate_uses(small: Fabric) -> None:
    """`prefetch` simulates the reference of the input flows while a solve runs; the
    certificate of a routing of them then reads it (no run of its own) and is the same as
    one computed from scratch."""
    flows = jobs_flows(small, random_jobs(small, seed=4))
    health = LinkHealth.all_up(small)
    bad = Assignment(flows, np.zeros(len(flows), np.int64))
    certificate._MEMO.clear()
    _, cold = certify(small, health, bad, qps=16)
    assert cold.reference_runs > 0
    certificate._MEMO.clear()
    prefetch(small, health, flows, qps=16)
    _, warm = certify(small, health, bad, qps=16, inputs=flows)
    assert warm.reference_runs == 0  # read from the prefetch (done or waited for)
    same = {"seconds": 0, "reference_runs": 0}
    assert {**cold.to_dict(), **same} == {**warm.to_dict(), **same}


def test_a_stopped_prefetch_leaves_the_reference_to_whoever_needs_it(small: Fabric) -> None:
    """A prefetch of a superseded solve ends early; the next asker computes the values
    itself (nothing left in flight, no Superseded of another solve's raised here)."""
    flows = jobs_flows(small, random_jobs(small, seed=6))
    health = LinkHealth.all_up(small)
    certificate._MEMO.clear()
    opts = CertifyOptions(seed=300)
    prefetch(small, health, flows, qps=16, options=opts, stop=lambda: True)
    num_jobs = int(flows.job.max()) + 1
    ref = certificate._Reference(small, health, flows, 16, num_jobs, opts)
    values = ref.values("eecmp")
    assert ref.computed == len(opts.seeds) and np.isfinite(values).any()
    assert not certificate._IN_FLIGHT


def test_a_prefetch_ends_once_its_solve_has_returned(small: Fabric, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A solve's prefetch that its certificate did not need stops (before its next seed)
    once the solve returns, rather than keeping a core busy under what follows."""
    import threading
    import time

    flows = jobs_flows(small, random_jobs(small, seed=4))
    health = LinkHealth.all_up(small)
    real, seeds = certificate.flow_shares, []

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "certificate-prefetch":
            seeds.append(1)
            time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(certificate, "flow_shares", slow)
    certificate._MEMO.clear()
    res = solve(small, health, flows, options=SolveOptions(
        certify=CertifyOptions(seed=400)))  # fmt: skip
    assert res.certificate is not None and res.certificate.reference_runs == 0  # not needed
    deadline = time.monotonic() + 10
    while certificate._IN_FLIGHT and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not certificate._IN_FLIGHT and len(seeds) < 4 and not certificate._MEMO


def test_concurrent_askers_of_one_reference_compute_it_once(small: Fabric) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=5))
    health = LinkHealth.all_up(small)
    certificate._MEMO.clear()
    opts = CertifyOptions(workers=1)
    num_jobs = int(flows.job.max()) + 1
    refs = [certificate._Reference(small, health, flows, 16, num_jobs, opts) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        values = list(pool.map(lambda ref: ref.values("eecmp"), refs))
    assert sum(ref.computed for ref in refs) == len(opts.seeds)
    assert all(np.array_equal(v, values[0], equal_nan=True) for v in values)
    assert not certificate._IN_FLIGHT


@pytest.mark.parametrize("seed", [2, 4])
def test_a_stop_ends_the_certificate_before_a_seed_and_one_never_taken_changes_nothing(
    small: Fabric, seed: int
) -> None:
    """`stop` is asked before each seed's walk (reference, planes, shares, the reference
    MLU); once it says so Superseded is raised; never taken, the certificate is the same."""
    flows = jobs_flows(small, random_jobs(small, seed=seed))
    health = LinkHealth.all_up(small)
    for path in (np.zeros(len(flows), np.int64), np.full(len(flows), UNROUTED, np.int64)):
        routing = Assignment(flows, path)  # a bad routing, and one with no TE row at all
        opts = CertifyOptions(seed=100 + seed, workers=1)  # its own seeds: nothing memoised
        asked: list[int] = []

        def never(asked: list[int] = asked) -> bool:
            asked.append(1)
            return False

        out, cert = certify(small, health, routing, qps=16, options=opts, stop=never)
        plain, cert2 = certify(small, health, routing, qps=16, options=opts)
        assert len(asked) >= len(opts.seeds)
        assert np.array_equal(out.path, plain.path)
        same = {"seconds": 0, "reference_runs": 0}
        assert {**cert.to_dict(), **same} == {**cert2.to_dict(), **same}
        with pytest.raises(Superseded):
            certify(small, health, routing, qps=16, options=replace(opts, seed=200 + seed),
                    stop=lambda: True)  # fmt: skip


def test_a_deferred_certificate_computes_no_reference_and_says_it_is_pending(
    small: Fabric,
) -> None:
    """The reaction path (CertifyOptions.defer_above): past the work bound the routing is
    left as it is, pending, with nothing computed; within it the check is the full one."""
    flows = jobs_flows(small, random_jobs(small, seed=4))
    health = LinkHealth.all_up(small)
    bad = Assignment(flows, np.zeros(len(flows), np.int64))
    out, cert = certify(small, health, bad, qps=16, options=CertifyOptions(defer_above=0))
    assert out is bad and cert.pending and not cert.passed and cert.reference_runs == 0
    assert cert.jobs_checked == 0 and not cert.fallback_jobs and "pending" in cert.summary()
    work = len(flows) * 16 * 4  # rows: one per flow here
    full, checked = certify(small, health, bad, qps=16,
                            options=CertifyOptions(defer_above=work))  # fmt: skip
    assert not checked.pending and checked.passed and checked.fallback_jobs  # handed back
    assert (full.path == -1).any()


def test_repairs_and_follow_ups_are_certified(small: Fabric) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=3))
    health = LinkHealth.all_up(small)
    res = solve(small, health, flows)
    index = RouteIndex.build(small, res.assignment)
    hurt = parse_health(small, ISSUE_FAILURES)
    repaired, rindex = repair_indexed(hurt, index, old_health=health)
    assert repaired.certificate is not None and repaired.certificate.passed
    assert rindex.assignment is repaired.assignment
    as_solve = replace(res, assignment=repaired.assignment)
    assert_no_job_below(small, hurt, flows, as_solve)
    judged = follow_up(hurt, repaired, rindex, 1.0, 1.0, move_threshold=0.0, spray_gap=0.0)
    assert judged.result.certificate is not None and judged.result.certificate.passed
    assert_no_job_below(small, hurt, flows, replace(res, assignment=judged.result.assignment))


def test_options_are_checked() -> None:
    with pytest.raises(InputError, match="unknown reference"):
        CertifyOptions(reference="ospf")
    with pytest.raises(InputError, match="hashes"):
        CertifyOptions(hashes=0)


def test_tectl_solve_shows_the_certificate(capsys: pytest.CaptureFixture[str]) -> None:
    from controller.cli.main import main

    # --job-rounds 0: the MLU solution, whose jobs the certificate hands back (the job-level
    # pass leaves none below E-ECMP on this case)
    base = ["solve", "--fabric", "small", "--jobs", "random", "--seed", "3", "--job-rounds", "0",
            *[a for f in ISSUE_FAILURES for a in ("--fail", f)]]  # fmt: skip
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "certificate: passed against eecmp (4 seeds, 16 QPs)" in out
    assert "handed back to eecmp" in out
    assert main([*base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cert = data["certificate"]
    assert cert["passed"] and cert["below"] == {"eecmp": 0, "wcmp": cert["below"]["wcmp"]}
    assert cert["seeds"] == [3, 4, 5, 6] and data["te"]["certificate_passed"] == 1.0


_ASKED = int(os.environ.get("FABRIC_TE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_ASKED or 200,
    derandomize=not _ASKED,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@st.composite
def fabrics(draw: st.DrawFn) -> Fabric:
    """Tiny to wide shapes: pods, racks, CTSWs, rack links, taper, ATSWs, agg links; one
    RTSW a rack, or several (rail-optimized, S = N), in planes (rail-only, Q = S; dual-plane,
    Q = 2) with NICs of one or two ports (HPN)."""
    pods = draw(st.integers(1, 3))
    nics = draw(st.integers(1, 4))
    layout = draw(st.sampled_from(["one", "one", "rail", "rail-only", "dual-plane"]))
    if nics % 2:  # the layouts need an even number of NICs a host
        layout = "one"
    slots = {"one": 1, "rail": nics, "rail-only": nics}.get(layout) or draw(
        st.sampled_from([2, nics]))
    planes = {"one": 1, "rail": 1, "rail-only": slots, "dual-plane": 2}[layout]
    spec = ClosSpec(
        name="fuzz",
        pods=pods,
        racks_per_pod=draw(st.integers(1, 4)),
        hosts_per_rack=draw(st.integers(1, 3)),
        nics_per_host=nics,
        ctsws_per_pod=planes * draw(st.integers(1, 4 // planes or 1)),
        # a CTSW tells a host's RTSWs apart across pods only by one link to each (or planes)
        rack_links=draw(st.integers(1, 2)) if pods == 1 or planes == slots else 1,
        atsws_per_plane=draw(st.integers(1, 2)) if pods > 1 else 0,
        agg_links=draw(st.integers(1, 2)),
        taper=draw(st.sampled_from([1.0, 1.5, 2.0, 4.0])) if pods > 1 else None,
        rtsws_per_rack=slots,
        planes=planes,
        ports_per_nic=draw(st.sampled_from([1, 2])) if layout == "dual-plane" else 1,
    )
    fabric = build(spec)
    speeds = draw(st.lists(st.tuples(st.integers(0, fabric.num_links - 1),
                                     st.sampled_from([0.25, 0.5, 2.0])), max_size=4))  # fmt: skip
    if not speeds:
        return fabric
    # mixed speeds, as an operator's cables: NICs at 100-800G beside 400G, slower uplinks
    cap = fabric.capacity.copy()
    for link, times in speeds:
        cap[2 * link] = cap[2 * link + 1] = fabric.capacity[2 * link] * times
    return replace(fabric, capacity=cap)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Fabric, LinkHealth, int, int | None, int, str]:
    """(fabric, health, job seed, table budget, QPs, reference)."""
    fabric = draw(fabrics())
    factors: dict[int, float] = {}
    for _ in range(draw(st.integers(0, 6))):  # links down or degraded, any tier
        link = draw(st.integers(0, fabric.num_links - 1))
        factors[link] = draw(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9]))
    if draw(st.booleans()):  # a drained switch
        kind = draw(st.sampled_from(["rtsw", "ctsw", "atsw"] if fabric.num_atsws else
                                    ["rtsw", "ctsw"]))  # fmt: skip
        count = {"rtsw": fabric.num_rtsws, "ctsw": fabric.num_ctsws, "atsw": fabric.num_atsws}
        node = fabric.node_id(kind, draw(st.integers(0, count[kind] - 1)))
        for link in fabric.switch_links(fabric.node_name(node)).tolist():
            factors[int(link)] = 0.0
    health = LinkHealth.all_up(fabric).with_factors(factors)
    budget = draw(st.sampled_from([None, 16, 64, 256, 2048]))
    qps = draw(st.sampled_from([1, 2, 4, 16]))
    kind = draw(st.sampled_from(["eecmp", "wcmp"]))
    return fabric, health, draw(st.integers(0, 2**16)), budget, qps, kind


def _tight(real):  # type: ignore[no-untyped-def]
    """raise_worst with a work limit under two predictions in full (module solve step 9)."""

    def tight(fabric, health, rows, path, *args, **kw):  # type: ignore[no-untyped-def]
        kw["work"] = 2 * len(rows) - 1
        return real(fabric, health, rows, path, *args, **kw)

    return tight


def _mix(fabric: Fabric, seed: int, fill: float, frag: float) -> FlowSet:
    """The fuzz tests' random job mix (rings, pipelines, all-to-all of 2-8 hosts), as flows;
    an example without any flow is rejected."""
    jobs = random_jobs(fabric, seed=seed, fill=fill, sizes={2: 2, 3: 1, 4: 2, 8: 1},
                       patterns={"ring": 2, "pipeline": 1, "alltoall": 1},
                       fragmentation=frag)  # fmt: skip
    if seed % 2:  # a demand given, the fabric's slowest NIC's rate: faster NICs ask less
        # (else none: each job asks its own slowest NIC's line rate)
        least = float(fabric.capacity[fabric.up(np.arange(fabric.num_nics))].min())
        jobs = [replace(job, demand_gbps=least * fabric.ports_per_nic) for job in jobs]
    flows = jobs_flows(fabric, jobs)
    assume(len(flows) > 0)
    return flows


# counterexamples found (to the test's own claims), kept: every NIC link of a one-rack
# fabric down (the bound is infinite), and flows the table budget leaves on hashing (the
# MLU that meets the bound is the whole data plane's, not the TE rows')
_DEAD = build(ClosSpec(name="fuzz", pods=1, racks_per_pod=1, hosts_per_rack=2, nics_per_host=1,
                       ctsws_per_pod=1, rack_links=1, atsws_per_plane=0))  # fmt: skip
_BUDGET = build(ClosSpec(name="fuzz", pods=2, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
                         ctsws_per_pod=1, rack_links=2, atsws_per_plane=1, taper=1.0))  # fmt: skip


@pytest.mark.fuzz
@FUZZ
@given(cases(), st.floats(0.3, 1.0), st.floats(0.0, 1.0), st.booleans())
@example(case=(_DEAD, LinkHealth(np.zeros(_DEAD.num_links)), 0, None, 1, "eecmp"), fill=1.0,
         frag=0.0, tight=False)  # fmt: skip
@example(case=(_BUDGET, LinkHealth.all_up(_BUDGET), 116, 16, 1, "eecmp"), fill=1.0, frag=0.0,
         tight=False)  # fmt: skip
def test_fuzz_no_job_below_the_fabrics_own_hashing(case, fill: float, frag: float,  # type: ignore[no-untyped-def]
                                                   tight: bool) -> None:  # fmt: skip
    fabric, health, seed, budget, qps, kind = case
    flows = _mix(fabric, seed, fill, frag)
    # the other hashing compared, as `tectl solve` does: its values become floors the solve
    # seeks (controller.solver.solve step 9), which must never cost the reference's promise
    other = "wcmp" if kind == "eecmp" else "eecmp"
    opts = SolveOptions(table_budget=budget, qps=qps,
                        certify=CertifyOptions(reference=kind, compare=(other,)))  # fmt: skip
    if tight:  # the job pass over its work limit, as on the meta-24k mix: step 9 runs it
        with mock.patch.object(solve_module, "raise_worst", _tight(solve_module.raise_worst)):
            res = solve(fabric, health, flows, options=opts)
    else:
        res = solve(fabric, health, flows, options=opts)
    cert = res.certificate
    assert cert is not None and cert.passed and cert.below[kind] == 0
    assert cert.rounds <= MAX_ROUNDS + 1
    # every flow routed or reported
    parent = np.asarray(res.parent)
    assert np.array_equal(np.unique(parent), np.arange(len(flows)))
    off = set(parent[~res.assignment.routed].tolist())
    reported = set(res.unroutable.tolist()) | set(res.fallback_ecmp.tolist())
    assert off == reported | set(res.handed_back.tolist()) | set(res.hashed_flows.tolist())
    assert set(res.hashed_flows.tolist()) == set(
        np.flatnonzero(np.isin(np.asarray(flows.job_ids)[flows.job], list(res.hashed_jobs)))
    )
    # installable: no two rows meeting at an entry key want different next hops
    assert not route_conflicts(fabric, res.assignment).any()
    # the MLU of the data plane installed (TE rows, and the rows on the defaults) is never
    # below the bound (where every flow has a path: a dead NIC link makes it infinite)
    if not res.unroutable.size:
        assert cert.mlu >= res.bound.value * (1 - 1e-9) - 1e-12
    # checked from sim's side: every job at least its reference, per the documented mean
    seeds = range(1, 5)
    ref = reference(fabric, health, flows, kind, seeds, qps)
    te = te_values(fabric, health, res, kind, seeds, qps)
    below = {j: (te.get(j), r) for j, r in ref.items() if te.get(j, 0.0) < r * (1 - 1e-9)}
    assert not below, below


@pytest.mark.fuzz
@FUZZ
@given(cases(), st.floats(0.3, 1.0), st.floats(0.0, 1.0), st.integers(0, 2**16))
def test_fuzz_parts_left_unsimulated_change_nothing(case, fill: float, frag: float,  # type: ignore[no-untyped-def]
                                                   drop: int) -> None:  # fmt: skip
    """The certificate simulates only the parts TE can touch (controller.model.coupling):
    on random fabrics, failures and mixes, some jobs' TE rows dropped (so they ride the
    reference), it hands back exactly the rows, and counts the same MLU, as simulating
    every job; the jobs it left unsimulated share no part with a TE row."""
    fabric, health, seed, budget, qps, kind = case
    flows = _mix(fabric, seed, fill, frag)
    opts = SolveOptions(table_budget=budget, qps=qps,
                        certify=CertifyOptions(reference=kind, enabled=False))  # fmt: skip
    res = solve(fabric, health, flows, options=opts)
    rows = res.assignment.flows
    gone = np.random.default_rng(drop).random(len(flows.job_ids)) < 0.5
    path = np.where(gone[rows.job], UNROUTED, res.assignment.path)
    assignment = Assignment(rows, path)
    parts = CertifyOptions(reference=kind)
    whole = replace(parts, parts=False)
    out, cert = certify(fabric, health, assignment, qps=qps, parent=res.parent, options=parts,
                        inputs=flows)  # fmt: skip
    ref_out, ref_cert = certify(fabric, health, assignment, qps=qps, parent=res.parent,
                                options=whole, inputs=flows)  # fmt: skip
    assert np.array_equal(out.path, ref_out.path)
    assert (cert.passed, cert.rounds, cert.jobs, cert.fallback_flows, cert.walked) == (
        ref_cert.passed, ref_cert.rounds, ref_cert.jobs, ref_cert.fallback_flows,
        ref_cert.walked)  # fmt: skip
    assert set(cert.fallback_jobs) == set(ref_cert.fallback_jobs)
    assert cert.mlu == pytest.approx(ref_cert.mlu, rel=1e-9, abs=1e-12)
    assert cert.jobs_checked + len(cert.alike_jobs) >= ref_cert.jobs_checked
    if cert.alike_jobs:  # none of them has a TE row, nor a flow to a host one steers to
        alike = np.isin(rows.job, cert.alike_jobs)
        steered = np.isin(rows.dst_host(fabric), rows.dst_host(fabric)[path != UNROUTED])
        assert not (alike & ((path != UNROUTED) | steered)).any()
    # left to count after the push, it comes to the same MLU
    later = replace(parts, mlu_later=True)
    _, pending = certify(fabric, health, assignment, qps=qps, parent=res.parent, options=later,
                         inputs=flows)  # fmt: skip
    if pending.mlu_pending:
        left = flows.take(np.flatnonzero(np.isin(flows.job, pending.alike_jobs))) \
            if pending.alike_jobs else flows
        counted = pending.with_reference_mlus(certificate.reference_mlus(
            fabric, health, left, qps, later))  # fmt: skip
        assert counted.mlu == pytest.approx(ref_cert.mlu, rel=1e-9, abs=1e-12)


def test_a_routing_without_te_entries_is_the_reference_itself() -> None:
    """No row with a TE path: the data plane is the fabric's hashing, so the certificate
    passes at once (no simulation) with every job at exactly its reference, and reports
    the reference's MLU (mean over the seeds); with a TE row it compares as before."""
    fabric = build(PRESETS["small"])
    health = parse_health(fabric, ISSUE_FAILURES)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=3))
    none = Assignment(flows, np.full(len(flows), UNROUTED))
    out, cert = certify(fabric, health, none, qps=16)
    assert out is none and cert.passed and cert.rounds == 0 and cert.jobs_checked == 0
    assert cert.worst_ratio == {"eecmp": 1.0} and cert.walked == 16 * len(flows)
    mlus = []
    for seed in (1, 2, 3, 4):
        _, routing, parent = hashed("eecmp", fabric, flows, health, seed, 16)
        mlus.append(simulate(fabric, health, routing, parent=parent).mlu)
    assert cert.mlu == pytest.approx(np.mean(mlus), rel=1e-12)
    # one TE row: compared in full again
    res = solve(fabric, health, flows, options=SolveOptions(certify=CertifyOptions(enabled=False)))
    _, full = certify(fabric, health, res.assignment, qps=16)
    assert full.rounds >= 1


def test_the_mlu_of_a_routing_left_to_hashing_can_be_counted_after_the_push() -> None:
    """`mlu_later`: a solve whose every job is left to hashing returns its certificate
    with the MLU pending (NaN: the service counts it after the push); `mlu_counted` gives
    exactly the figures of the solve that counted it inline. A routing with a TE row
    counts it as before."""
    fabric = build(PRESETS["small"])
    health = parse_health(fabric, ISSUE_FAILURES)
    moe = Job("moe", tuple(range(fabric.num_hosts)), dp=fabric.num_hosts * fabric.nics_per_host,
              collectives=("alltoall",))  # fmt: skip
    flows = jobs_flows(fabric, [moe])
    inline = SolveOptions(table_budget=16)
    later = replace(inline, certify=replace(inline.certify, mlu_later=True))
    now = solve(fabric, health, flows, options=inline)
    left = solve(fabric, health, flows, options=later)
    assert "moe" in left.hashed_jobs and not (left.assignment.path != UNROUTED).any()
    assert left.mlu_pending and np.isnan(left.mlu) and left.metrics()["mlu_pending"] == 1.0
    counted = mlu_counted(fabric, health, left, flows, later)
    assert not counted.mlu_pending and not now.mlu_pending
    assert counted.mlu == now.mlu > 0 and counted.ratio == now.ratio
    assert counted.certificate is not None and now.certificate is not None
    seconds = {"seconds": 0.0}
    assert (counted.certificate.to_dict() | seconds) == (now.certificate.to_dict() | seconds)
    assert mlu_counted(fabric, health, counted, flows, later) is counted  # nothing left
    # with a TE row the certificate counts the MLU itself
    ring = solve(fabric, health, jobs_flows(fabric, random_jobs(fabric, seed=3)), options=later)
    assert not ring.mlu_pending and ring.mlu > 0


def test_other_hashings_are_compared_only_up_to_a_size() -> None:
    """`compare` hashings are reported, never enforced: above compare_above subflows they are
    skipped and said so, with or without TE rows; below it a routing without TE rows is
    compared against them too."""
    fabric = build(PRESETS["small"])
    health = parse_health(fabric, ISSUE_FAILURES)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=3))
    none = Assignment(flows, np.full(len(flows), UNROUTED))
    _, cert = certify(fabric, health, none, qps=16, options=CertifyOptions(compare=("wcmp",)))
    assert cert.passed and set(cert.worst_ratio) == {"eecmp", "wcmp"} and not cert.not_compared
    assert cert.jobs_checked == cert.jobs
    small = CertifyOptions(compare=("wcmp",), compare_above=len(flows) * 16 - 1)
    _, cert = certify(fabric, health, none, qps=16, options=small)
    assert set(cert.worst_ratio) == {"eecmp"} and cert.not_compared == ("wcmp",)
    assert "wcmp not compared" in cert.summary()
    res = solve(fabric, health, flows, options=SolveOptions(certify=small))
    assert res.certificate is not None and res.certificate.not_compared == ("wcmp",)
    assert "wcmp" not in res.certificate.worst_ratio
