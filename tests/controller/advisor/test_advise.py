"""Placement advice on small fabrics with hand-derived answers."""

from __future__ import annotations

import numpy as np
import pytest

from controller.advisor.advise import (
    Request,
    advise,
    candidates,
    first_fit_hosts,
    random_hosts,
    score,
    score_many,
)
from controller.errors import AdvisorError
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth, parse_health
from controller.model.jobs import Job, jobs_flows
from controller.model.rates import simulate
from controller.solver.solve import solve

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


def test_too_few_free_hosts_says_why_the_others_are_not(small: Fabric) -> None:
    """It said "(with every NIC link up)" whatever kept the hosts: a drained RTSW's hosts,
    the running jobs' and the avoided ones are counted by reason."""
    health = parse_health(small, ["rtsw-p1-r0=drain"])
    with pytest.raises(AdvisorError) as err:
        advise(small, health, RUNNING, Request(hosts=small.num_hosts, avoid_hosts=(31,)))
    taken = len({h for job in RUNNING for h in job.hosts})
    assert str(err.value).endswith(
        f"({taken} in a job; 1 avoided; 2 with a NIC link down or its RTSW drained)")


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
        (Request(gpus=16, tp=3), r"pp 1 x tp 3 = 3 does not divide gpus 16"),
        (Request(gpus=16, tp=4, avoid_hosts=(999,)), "avoid_hosts: host id 999"),
        (Request(gpus=16, tp=4, pattern="mesh"), "pattern: 'mesh'"),
        (Request(hosts=3, gpus=16, tp=4), "hosts: 3 hosts hold 12 GPUs, not gpus 16"),
        (Request(gpus=16, tp=0), r"dp\*pp\*tp: .* must be positive"),
        (Request(gpus=16, tp=4, top=0), "top: 0"),
        (Request(tp=4), "gpus: 0 is not a positive multiple"),
        (Request(gpus=12, dp=4, tp=3), "tp: tensor parallelism 3 must divide the 4 GPUs"),
        (Request(gpus=16, tp=4, channels=0), r"channels: 0 is not within \[1, 64\]"),
        (Request(gpus=16, tp=4, demand_gbps=-1.0), r"demand_gbps: -1.0 is not within"),
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


def test_score_refuses_avoided_hosts_and_says_why_a_host_caps_the_job(small: Fabric) -> None:
    """The defects: Score took a placement on a host the request avoids, and gave busbw 0
    (or 0.5) for a host with a NIC link down (or at half speed) without saying why."""
    health = LinkHealth.all_up(small)
    request = Request(gpus=16, tp=4, avoid_hosts=(18,))
    name = small.host_name(18)
    with pytest.raises(AdvisorError, match=rf"placements\[1\]: {name} is in the request's "
                       "avoid_hosts"):  # fmt: skip
        score_many(small, health, RUNNING, [(20, 21, 22, 23), (16, 17, 18, 19)], request)
    request = Request(gpus=16, tp=4)
    assert score(small, health, RUNNING, (16, 17, 18, 19), request).note == ""
    nic = small.access_link(18 * small.nics_per_host + 1)
    down = score(small, health.down([nic]), RUNNING, (16, 17, 18, 19), request)
    assert down.new_job_busbw == 0
    assert down.note.startswith(f"{name} has a NIC link down")
    slow = score(small, health.with_factors({nic: 0.5}), RUNNING, (16, 17, 18, 19), request)
    assert slow.new_job_busbw == pytest.approx(0.5)
    assert slow.note.startswith(f"{name} has a NIC link at 50% of its speed")


def test_ranks_and_hosts_request(small: Fabric) -> None:
    health = LinkHealth.all_up(small)
    by_gpus = advise(small, health, RUNNING, Request(gpus=16, tp=4, top=4))
    by_hosts = advise(small, health, RUNNING, Request(hosts=4, tp=4, top=4))
    assert by_gpus == by_hosts
    assert [c.rank for c in by_gpus] == list(range(1, len(by_gpus) + 1))
    keys = [c.rank_key() for c in by_gpus]
    assert keys == sorted(keys)
    assert score(small, health, RUNNING, by_gpus[0].hosts, Request(gpus=16, tp=4)).rank == 0



def test_a_job_with_no_flows_has_no_busbw_not_full_rate(small: Fabric) -> None:
    """One host (or a pipeline of one stage): the job exchanges nothing across the fabric,
    so there is no busbw to predict (NaN; before, 100%); candidates still rank, by what
    they do to the running jobs."""
    import math

    health = LinkHealth.all_up(small)
    for request in (Request(hosts=1, tp=4, top=3), Request(gpus=16, tp=4, pattern="pipeline")):
        advice = advise(small, health, RUNNING, request)
        assert advice and all(math.isnan(c.new_job_busbw) for c in advice), request
        keys = [c.rank_key() for c in advice]
        assert keys == sorted(keys)
    ring = advise(small, health, RUNNING, Request(gpus=16, tp=4, top=2))
    assert all(c.new_job_busbw == 1.0 for c in ring)

def test_degraded_racks_packed_last(small: Fabric) -> None:
    # all racks of pod 0 are free and whole; rack 0 lost one uplink, so packing skips it
    health = parse_health(small, ["rtsw-p0-r0:ctsw-p0-c0"])
    named = dict(candidates(small, health, [], Request(gpus=16, tp=4)))
    assert named["pack pod 0"] == (2, 3, 4, 5)
    assert named["first-fit pod 0"] == (0, 1, 2, 3)


def test_seed_changes_only_tie_breaks(small: Fabric) -> None:
    health = LinkHealth.all_up(small)
    a = dict(candidates(small, health, [], Request(gpus=16, tp=4), seed=1))
    b = dict(candidates(small, health, [], Request(gpus=16, tp=4), seed=2))
    assert a["pack pod 0"] == b["pack pod 0"]
    assert len(a["pack pod 0 seed 1"]) == len(b["pack pod 0 seed 2"]) == 4
    assert a == dict(candidates(small, health, [], Request(gpus=16, tp=4), seed=1))


def test_cross_pod_uses_fewest_pods(small: Fabric) -> None:
    # 80 GPUs = 20 hosts: pod 1 (16 free) + pod 0 (6 free); never more than two pods
    named = candidates(small, LinkHealth.all_up(small), RUNNING, Request(gpus=80, tp=4))
    assert named and all(name.startswith("pack pods") for name, _ in named)
    pods = {int(small.pod_of_rack(small.rack_of_host(h))) for _, hosts in named for h in hosts}
    assert pods == {0, 1}
    assert all(not set(hosts) & set(RUNNING[0].hosts) for _, hosts in named)


def test_baselines(small: Fabric) -> None:
    assert first_fit_hosts(small, RUNNING, 3) == (10, 11, 12)
    picked = random_hosts(small, RUNNING, 5, seed=7)
    assert picked == random_hosts(small, RUNNING, 5, seed=7)
    assert len(set(picked)) == 5 and not set(picked) & set(RUNNING[0].hosts)
    with pytest.raises(AdvisorError, match="only 22 free hosts"):
        first_fit_hosts(small, RUNNING, 23)


def test_score_rejects_repeated_host(small: Fabric) -> None:
    with pytest.raises(AdvisorError, match=r"placements\[0\]: a host is listed twice"):
        score(small, LinkHealth.all_up(small), RUNNING, (16, 16, 17, 18), Request(gpus=16, tp=4))


def test_cross_pod_prefers_whole_racks(small: Fabric) -> None:
    # one busy host in racks 0 and 1 (pod 0) and rack 8 (pod 1): 16 hosts fit in no pod;
    # the 14 whole-rack hosts of pod 1 plus one whole rack of pod 0 share no rack with it
    running = [Job(id="spread", hosts=(0, 2, 16), dp=3, tp=4)]
    request = Request(gpus=64, tp=4, top=5)
    named = dict(candidates(small, LinkHealth.all_up(small), running, request))
    assert named["whole racks pods 0,1"] == (*range(18, 32), 4, 5)
    best = advise(small, LinkHealth.all_up(small), running, request)[0]
    assert best.hosts == (*range(18, 32), 4, 5)
    assert (best.pods, best.racks, best.new_job_busbw) == (2, 8, 1.0)


def test_current_assignment_is_kept(small: Fabric) -> None:
    health = LinkHealth.all_up(small)
    request = Request(gpus=16, tp=4, top=4)
    current = solve(small, health, jobs_flows(small, RUNNING)).assignment
    plain = advise(small, health, RUNNING, request)
    assert advise(small, health, RUNNING, request, current=current) == plain
    # matched on (job, source, destination), whatever the order; missing flows are routed
    perm = np.arange(len(current.flows))[::-1].copy()
    shuffled = Assignment(current.flows.take(perm), current.path[perm])
    assert advise(small, health, RUNNING, request, current=shuffled) == plain
    empty = Assignment(FlowSet.empty(), np.zeros(0, np.int64))
    assert advise(small, health, RUNNING, request, current=empty) == plain
    hosts = plain[0].hosts
    assert score(small, health, RUNNING, hosts, request, current=current) == score(
        small, health, RUNNING, hosts, request
    )


def test_candidates_name_the_operators_pods(named_tiny: Fabric) -> None:
    """With named pods, a candidate says which pod by its name."""
    names = [name for name, _ in candidates(named_tiny, LinkHealth.all_up(named_tiny), [],
                                            Request(gpus=4, tp=2))]  # fmt: skip
    assert "pack pod Hall-A" in names and not any(n.endswith("pod 0") for n in names)


def test_hosts_cut_off_are_never_offered_and_no_set_twice(small: Fabric) -> None:
    """A host with a NIC link down, or behind a drained RTSW, would stall any job placed
    there: no candidate holds one. A set of hosts is offered once, whatever order a
    strategy took them in."""
    for fail in (["host-p0-r0-h0/nic0:rtsw-p0-r0"], ["rtsw-p0-r0=drain"]):
        health = parse_health(small, fail)
        cut = {0} if "nic0" in fail[0] else {0, 1}
        for request in (Request(gpus=8, tp=4), Request(gpus=16, tp=4)):
            offered = candidates(small, health, [], request)
            assert offered and not any(cut & set(hosts) for _, hosts in offered)
            keys = [tuple(sorted(hosts)) for _, hosts in offered]
            assert len(keys) == len(set(keys))
            for advice in advise(small, health, [], request):
                assert advice.new_job_busbw > 0


def test_a_degraded_nic_is_ranked_below_healthy_free_hosts(small: Fabric) -> None:
    """A host whose NIC runs at half speed halves any job there: among free hosts the
    healthy ones are offered first, and the best advice runs at line rate."""
    for fail in ("host-p0-r0-h0/nic1:rtsw-p0-r0=0.5", "host-p0-r5-h1/nic3:rtsw-p0-r5=0.3"):
        health = parse_health(small, [fail])
        hurt = small.host_by_name(fail.split("/")[0])
        for request in (Request(gpus=8, tp=4), Request(gpus=16, tp=4)):
            offered = dict(candidates(small, health, RUNNING[:0], request))
            assert hurt not in offered["pack pod 0"]
            assert hurt not in offered.get("healthy pod 0", ())
            best = advise(small, health, [], request)[0]
            assert hurt not in best.hosts and best.new_job_busbw == 1.0


def test_same_pod_any_offers_a_placement_across_pods_where_one_pod_fits(small: Fabric) -> None:
    offered = candidates(small, LinkHealth.all_up(small), RUNNING,
                         Request(gpus=32, tp=4, same_pod="any"))  # fmt: skip
    pods = [{int(small.pod_of_rack(small.rack_of_host(h))) for h in hosts}
            for _, hosts in offered]  # fmt: skip
    assert {1} in pods and {0, 1} in pods
    split = [hosts for name, hosts in offered if name.startswith("split pods")]
    assert split and all(len(hosts) == 8 for hosts in split)


def test_candidates_on_faster_nics_rank_first_and_say_their_gbps(  # type: ignore[no-untyped-def]
    small: Fabric, nic_speeds
) -> None:
    """The defect: on a fabric of mixed NICs a candidate on 200G NICs and one on 800G both
    read 'new job busbw 100.0%' (each of its own line rate) and ranked as equals. Each
    candidate now gives its Gbps a NIC, and candidates are ranked by it."""
    mixed = nic_speeds(small, {16: 800.0, 17: 800.0, 18: 200.0, 19: 200.0})  # pod 1, racks 0-1
    health = LinkHealth.all_up(mixed)
    advice = advise(mixed, health, RUNNING, Request(hosts=2, tp=4, top=9, same_pod="any"))
    fast = next(s for s in advice if set(s.hosts) == {16, 17})
    slow = [s for s in advice if set(s.hosts) & {18, 19}]
    assert fast.planned_gbps == 800.0 and fast.new_job_gbps == fast.new_job_busbw * 800.0
    assert advice[0] is fast or advice[0].new_job_gbps >= fast.new_job_gbps
    assert all(s.planned_gbps == 200.0 and advice.index(s) > advice.index(fast) for s in slow)
