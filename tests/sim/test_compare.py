"""Side-by-side comparisons: flows without a TE entry ride hashed ECMP, as in the data plane."""

from __future__ import annotations

import numpy as np

from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.health import random_failures
from controller.model.jobs import jobs_flows
from controller.solver.solve import SolveOptions, solve
from sim.compare import baseline, routed
from sim.jobmix import random_jobs, ring_jobs


def test_unrouted_flows_are_carried_like_eecmp(small: Fabric) -> None:
    fabric = small
    health = random_failures(fabric, 2, seed=4)
    flows = jobs_flows(fabric, ring_jobs(fabric, 8, seed=4))
    none = Assignment(flows, np.full(len(flows), -1, np.int64))
    te = routed("te", fabric, health, none, 0.0, seed=4).report
    ee = baseline("eecmp", fabric, health, flows, 4, 16).report
    assert te.busbw_fraction_min == ee.busbw_fraction_min
    assert te.mlu == ee.mlu and te.unrouted == 0


def test_partly_routed_keeps_every_flow(small: Fabric) -> None:
    fabric = small
    health = random_failures(fabric, 1, seed=2)
    flows = jobs_flows(fabric, ring_jobs(fabric, 8, seed=2))
    path = solve(fabric, health, flows, options=SolveOptions(qps=1)).assignment.path.copy()
    path[::3] = -1  # a third of the flows without TE entries
    report = routed("te", fabric, health, Assignment(flows, path), 0.0).report
    assert report.flows == len(flows) and report.unrouted == 0
    assert 0 < report.busbw_fraction_min <= 1


def test_spray_rivals_oblivious_and_adaptive(small: Fabric) -> None:
    from controller.model.health import LinkHealth
    from controller.model.paths import flow_class, num_paths
    from controller.solver.commodities import commodities
    from controller.solver.lp import solve_lp
    from sim.compare import BASELINES, adaptive_spray, oblivious_spray
    from sim.jobmix import random_jobs

    flows = jobs_flows(small, random_jobs(small, seed=5))
    healthy = LinkHealth.all_up(small)
    row = oblivious_spray(small, healthy, flows)
    paths = np.array(num_paths(small))[flow_class(small, flows.src_nic, flows.dst_nic)]
    assert row.report.subflows == paths.sum() and row.report.unrouted == 0
    health = random_failures(small, 3, 5)
    sprayed = oblivious_spray(small, health, flows).report
    assert sprayed.subflows < paths.sum()  # dead paths carry nothing
    assert sprayed.on_down_links == 0
    optimum = solve_lp(small, health, commodities(small, flows)).mlu
    ceiling = adaptive_spray(small, health, flows, optimum).report
    assert ceiling.busbw_fraction_min == min(1.0, 1.0 / optimum)
    assert ceiling.links_over_capacity is None  # the optimum's loads are not known: not 0
    # no routing's worst job is above the ceiling
    res = solve(small, health, flows)
    rows = [routed("te", small, health, res.assignment, 0.0, parent=res.parent).report, sprayed]
    rows += [baseline(name, small, health, flows, 1).report for name in BASELINES]
    for report in rows:
        assert report.busbw_fraction_min <= ceiling.busbw_fraction_min * (1 + 1e-9)


def test_pinning_over_parallel_links_counts_the_entries_a_table_can_hold() -> None:
    """Pinned per destination NIC, two NICs of one host take other members of a parallel
    link at a CTSW; the entries, keyed by destination host, hold one: counted, not an error
    (which ended `tectl solve` and `simulate` on such a fabric with exit 2)."""
    from dataclasses import replace

    from controller.model.clos import PRESETS, build
    from controller.model.health import LinkHealth

    fabric = build(replace(PRESETS["wide"], nics_per_host=4))
    assert fabric.rack_links > 1 and fabric.nics_per_host > fabric.ctsws_per_pod
    flows = jobs_flows(fabric, random_jobs(fabric, seed=1))
    row = baseline("pinning", fabric, LinkHealth.all_up(fabric), flows, 1)
    assert 0 < row.entries and row.report.job_busbw_fraction
