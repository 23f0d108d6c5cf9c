"""Placement advice on small fabrics with hand-derived answers."""

from __future__ import annotations

import numpy as np
import pytest

from controller.advisor import AdvisorError, Request, advise, score, score_many
from controller.fabric import Fabric
from controller.health import LinkHealth, parse_health
from controller.solver import solve
from sim.flowsim import simulate
from sim.workloads import Job, jobs_flows

# small: 2 pods x 8 racks x 2 hosts x 4 GPUs; 8 CTSWs per pod; 1:2 taper to the ATSWs.
RUNNING = [Job(id="big", hosts=tuple(range(10)), dp=10, tp=4)]  # pod 0, racks 0-4


def test_best_fit_pod_whole_racks(small: Fabric) -> None:
    # pod 0 has 6 free hosts (racks 5-7), pod 1 has 16: best fit is pod 0, two whole racks
    best = advise(small, LinkHealth.all_up(small), RUNNING, Request(gpus=16, tp=4))[0]
    assert best.hosts == (10, 11, 12, 13)
    assert (best.pods, best.racks, best.cross_pod_gbps) == (1, 2, 0.0)
    assert best.new_job_busbw == 1.0 and best.worst_existing_delta == 0.0


def test_fits_one_pod_never_spans_pods(small: Fabric) -> None:
    advice = advise(small, LinkHealth.all_up(small), RUNNING, Request(gpus=48, tp=4, top=9))
    assert advice and all(s.pods == 1 and s.cross_pod_gbps == 0 for s in advice)
    assert all(min(s.hosts) >= 16 for s in advice)  # only pod 1 has 12 free hosts


def test_spans_pods_only_when_needed(small: Fabric) -> None:
    advice = advise(small, LinkHealth.all_up(small), RUNNING, Request(gpus=80, tp=4))
    assert advice[0].pods == 2 and advice[0].cross_pod_gbps > 0
    with pytest.raises(AdvisorError, match="same_pod: no single pod has 20 free hosts"):
        advise(small, LinkHealth.all_up(small), RUNNING,
               Request(gpus=80, tp=4, same_pod="require"))  # fmt: skip


def test_busy_avoided_and_broken_racks_avoided(small: Fabric) -> None:
    # rack 5 (hosts 10, 11) keeps 3 of 8 uplinks: a ring leaving it would share links
    health = parse_health(small, [f"rtsw-p0-r5:ctsw-p0-c{c}" for c in range(5)])
    request = Request(gpus=16, tp=4, avoid_hosts=(14,))
    advice = advise(small, health, RUNNING, request)
    best = advice[0]
    assert not set(best.hosts) & {10, 11, 14}
    assert not set(best.hosts) & set(RUNNING[0].hosts)
    assert best.new_job_busbw == 1.0


def test_score_agrees_with_solver_and_simulator(small: Fabric) -> None:
    health = LinkHealth.all_up(small)
    hosts = (16, 18, 20, 22)  # one host in each of four racks of pod 1
    request = Request(gpus=16, tp=4)
    got = score(small, health, RUNNING, hosts, request)
    job = Job(id="candidate", hosts=hosts, dp=4, tp=4)
    flows = jobs_flows(small, [*RUNNING, job])
    report = simulate(small, health, solve(small, health, flows).assignment)
    assert got.new_job_busbw == pytest.approx(report.job_busbw_fraction["candidate"])
    assert got.te_mlu == pytest.approx(report.mlu)


def test_deterministic(small: Fabric) -> None:
    health = parse_health(small, ["rtsw-p1-r2:ctsw-p1-c3"])
    a = advise(small, health, RUNNING, Request(gpus=32, tp=4, top=5))
    b = advise(small, health, RUNNING, Request(gpus=32, tp=4, top=5))
    assert a == b


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (Request(gpus=200, tp=4), "only 22 are free"),
        (Request(gpus=6, tp=2), "not a positive multiple of 4"),
        (Request(gpus=16, dp=3, tp=4), r"dp\*pp\*tp: 3\*1\*4 = 12 must equal gpus 16"),
        (Request(gpus=16, tp=4, avoid_hosts=(999,)), "avoid_hosts: host id 999"),
        (Request(gpus=16, tp=4, pattern="mesh"), "pattern: 'mesh'"),
    ],
)
def test_bad_requests(small: Fabric, request_: Request, message: str) -> None:
    with pytest.raises(AdvisorError, match=message):
        advise(small, LinkHealth.all_up(small), RUNNING, request_)


def test_score_rejects_busy_and_unknown_hosts(small: Fabric) -> None:
    health = LinkHealth.all_up(small)
    request = Request(gpus=16, tp=4)
    with pytest.raises(AdvisorError, match="host-p0-r0-h0 is already in a running job"):
        score_many(small, health, RUNNING, [(16, 17, 18, 19), (0, 20, 21, 22)], request)
    with pytest.raises(AdvisorError, match="host id 99"):
        score(small, health, RUNNING, (16, 17, 18, 99), request)
    assert np.isfinite(score(small, health, RUNNING, (16, 17, 18, 19), request).bound)
