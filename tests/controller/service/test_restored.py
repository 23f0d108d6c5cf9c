"""The figures of a routing adopted from the store, computed again from it: what the
routing tells is as its solve reported it, what it does not is unknown, never 0."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
from controller.service.job_view import job_figures
from controller.service.restored import RESTORED, WHY_UNKNOWN, restored_result, status_metrics
from controller.solver import SolveOptions, solve
from controller.solver.certificate import CertifyOptions


def _stored(assignment: Assignment) -> Assignment:
    """The assignment as the store gives it back: the same rows, no solver state."""
    return Assignment(assignment.flows, np.array(assignment.path))


def test_a_restored_routing_reports_what_its_solve_did(small: Fabric) -> None:
    health = LinkHealth.all_up(small).with_factors({int(small.rack_link(0, 1)): 0.0})
    jobs = [Job("a", (0, 2, 4, 16), dp=16), Job("b", (6, 8, 18, 20), dp=16),
            Job("solo", (10,), dp=4)]  # fmt: skip
    solved = solve(small, health, jobs_flows(small, jobs))
    assert solved.assignment.routed.all()
    restored = restored_result(small, health, _stored(solved.assignment), qps=16)
    assert restored.method == RESTORED and restored.certificate is None
    assert restored.mlu == pytest.approx(solved.mlu)
    assert 0 < restored.bound.value <= restored.mlu + 1e-9
    assert restored.collided_links == solved.collided_links and restored.churn == 0
    assert job_figures(restored, {}) == job_figures(solved, {})
    shown = status_metrics(restored)
    assert shown["restored"] == 1.0 and shown["mlu"] == pytest.approx(solved.mlu)
    assert math.isnan(shown["fallback_ecmp"]) and math.isnan(shown["handed_back"])
    assert "restored" not in status_metrics(solved)


def test_rows_on_the_hashing_leave_the_mlu_unknown_and_say_a_job_rides_it(
    small: Fabric,
) -> None:
    health = LinkHealth.all_up(small)
    flows = jobs_flows(small, [Job("a", (0, 2, 4, 6, 16, 18, 20, 22), dp=32)])
    solved = solve(small, health, flows, options=SolveOptions(table_budget=2))
    assert not solved.assignment.routed.any()  # handed back whole
    restored = restored_result(small, health, _stored(solved.assignment), qps=16)
    assert math.isnan(restored.mlu)  # counted with the rate prediction, not 0
    # given the certificate's options, counted as the certificate counted it
    counted = restored_result(small, health, _stored(solved.assignment), qps=16,
                              certify=CertifyOptions())  # fmt: skip
    assert counted.mlu > 0 and (math.isnan(solved.mlu) or counted.mlu == pytest.approx(solved.mlu))
    assert restored.hashed_jobs == {"a": WHY_UNKNOWN}
    assert restored.hashed_flows.size == len(flows)
    figures = job_figures(restored, {})["a"]
    assert figures.hashed_flows == len(flows) and figures.handed_back == WHY_UNKNOWN
