"""The service's predicted bus bandwidth per job is the data plane's, as `tectl solve` says."""

from __future__ import annotations

import threading
import time

import pytest

from controller.formats.fabric_file import load_fabric
from controller.model.dataplane import simulate_carried
from controller.model.health import random_failures
from controller.model.jobs import jobs_flows
from controller.model.rates import simulate
from controller.service.metrics import Metrics
from controller.service.predictor import Predictor
from controller.solver import solve
from sim.jobmix import random_jobs


def test_qp_buckets_are_predicted_as_carried_a_bucket_one_qp_a_whole_flow_all() -> None:
    """A flow split into QP buckets shares a link with whole flows as one QP against 16:
    the prediction (gauges, `job ls`) is the carried model's, not one share a row."""
    fabric = load_fabric("small")
    health = random_failures(fabric, per_pod=6, seed=10)
    result = solve(fabric, health, jobs_flows(fabric, random_jobs(fabric, seed=10)))
    assert result.parent is not None and len(set(result.parent.tolist())) < len(result.parent)
    assert (result.assignment.path >= 0).all()
    carried = simulate_carried(fabric, health, result.assignment, result.parent,
                               kind="eecmp", seed=1, qps=16).job_busbw_fraction  # fmt: skip
    rowwise = simulate(fabric, health, result.assignment, parent=result.parent)
    assert rowwise.job_busbw_fraction != pytest.approx(carried)  # the case tells them apart

    cond = threading.Condition()
    metrics = Metrics()
    stop = threading.Event()
    predictor = Predictor(fabric, metrics, cond, busy=lambda: False, stopped=stop.is_set)
    predictor.record(result, health)
    deadline = time.monotonic() + 60
    with cond:
        while not predictor.answered() and time.monotonic() < deadline:
            cond.wait(0.5)
        answered = predictor.answered()
        stop.set()
        cond.notify_all()
    assert answered
    assert predictor.job_busbw == pytest.approx(carried, rel=1e-12)
