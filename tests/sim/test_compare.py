"""Side-by-side comparisons: flows without a TE entry ride hashed ECMP, as in the data plane."""

from __future__ import annotations

import numpy as np

from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.health import random_failures
from controller.model.jobs import jobs_flows
from controller.solver.solve import SolveOptions, solve
from sim.compare import baseline, routed
from sim.jobmix import ring_jobs


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
