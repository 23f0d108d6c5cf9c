"""Random job mixes and packed ring jobs: determinism, disjointness, fill, fragmentation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import JobError
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.jobs import check_job, jobs_flows
from sim.jobmix import ALLTOALL_MAX_HOSTS, random_jobs, ring_jobs


def all_hosts(jobs) -> list[int]:  # type: ignore[no-untyped-def]
    return [h for job in jobs for h in job.hosts]


def test_same_seed_same_jobs_other_seed_other_jobs(pod: Fabric) -> None:
    assert random_jobs(pod, 7) == random_jobs(pod, 7)
    assert random_jobs(pod, 7, fill=0.6) == random_jobs(pod, 7, fill=0.6)
    assert random_jobs(pod, 7) != random_jobs(pod, 8)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    fill=st.floats(0, 1),
    frag=st.floats(0, 1),
    preset=st.sampled_from(["tiny", "small", "pod"]),
)
def test_jobs_are_disjoint_valid_and_fill_the_fraction(
    tiny: Fabric, small: Fabric, pod: Fabric, seed: int, fill: float, frag: float, preset: str
) -> None:
    fabric = {"tiny": tiny, "small": small, "pod": pod}[preset]
    jobs = random_jobs(fabric, seed, fill=fill, fragmentation=frag)
    hosts = all_hosts(jobs)
    assert len(hosts) == len(set(hosts)) == round(fill * fabric.num_hosts)
    assert all(0 <= h < fabric.num_hosts for h in hosts)
    assert len({job.id for job in jobs}) == len(jobs)
    for job in jobs:
        check_job(fabric, job)
        if "alltoall" in job.collectives:
            assert job.num_hosts <= ALLTOALL_MAX_HOSTS
    jobs_flows(fabric, jobs).validate(fabric)


def test_mix_has_partial_racks_fragmented_jobs_and_all_kinds(pod: Fabric) -> None:
    jobs = random_jobs(pod, 3, fill=0.9, fragmentation=0.3)
    kinds = {job.id.split("-")[0] for job in jobs}
    assert kinds == {"ring", "pipeline", "alltoall"}
    owner = {h: k for k, job in enumerate(jobs) for h in job.hosts}
    racks = [[owner.get(r * 2 + s) for s in range(2)] for r in range(pod.num_racks)]
    assert any(a != b for a, b in racks)  # some rack is shared by two jobs or half idle
    fragmented = [
        job for job in jobs if list(job.hosts) != list(range(job.hosts[0], job.hosts[-1] + 1))
    ]
    assert fragmented
    assert any(len({pod.rack_of_host(h) for h in job.hosts}) > job.num_hosts // 2 + 1
               for job in fragmented)  # fmt: skip
    sizes = [job.num_hosts * 8 for job in jobs]
    assert min(sizes) >= 8 and max(sizes) <= 2048


def test_no_fragmentation_gives_contiguous_jobs(pod: Fabric) -> None:
    for job in random_jobs(pod, 11, fill=0.8, fragmentation=0.0):
        assert list(job.hosts) == list(range(job.hosts[0], job.hosts[0] + job.num_hosts))


def test_patterns_and_sizes_can_be_chosen(small: Fabric) -> None:
    jobs = random_jobs(small, 1, patterns={"ring": 1}, sizes={4: 1})
    assert all(job.collectives == ("ring",) and job.num_hosts == 4 for job in jobs)
    assert len(jobs) == small.num_hosts // 4
    jobs = random_jobs(small, 1, patterns={"alltoall": 1, "ring": 0}, sizes={64: 1})
    assert all(job.collectives == ("alltoall",) for job in jobs)
    assert all(job.num_hosts <= ALLTOALL_MAX_HOSTS for job in jobs)
    jobs = random_jobs(small, 1, patterns={"pipeline": 1}, sizes={8: 1})
    assert all(job.pp in (2, 4, 8) and "pipeline" in job.collectives for job in jobs)


def test_empty_fill_gives_no_jobs(small: Fabric) -> None:
    assert random_jobs(small, 5, fill=0.0) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"fill": 1.5}, "fill"),
        ({"fill": -0.1}, "fill"),
        ({"fragmentation": 2}, "fragmentation"),
        ({"sizes": {0: 1}}, "sizes[0]"),
        ({"sizes": {4: -1}}, "sizes[4]"),
        ({"sizes": {4: 0}}, "sizes"),
        ({"patterns": {"moe": 1}}, "patterns['moe']"),
        ({"patterns": {}}, "patterns"),
    ],
)
def test_bad_mix_parameters_name_the_field(small: Fabric, kwargs: dict, field: str) -> None:
    with pytest.raises(JobError) as info:
        random_jobs(small, 0, **kwargs)
    assert info.value.field == field


def test_ring_jobs_pack_the_fabric_in_order(tiny: Fabric) -> None:
    jobs = ring_jobs(tiny, 3)
    assert [job.hosts for job in jobs] == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert [job.id for job in jobs] == ["ring-0", "ring-1", "ring-2"]
    assert all(job.collectives == ("ring",) and job.tp == 2 for job in jobs)
    flows = jobs_flows(tiny, jobs)
    assert len(flows) == tiny.num_nics  # every NIC sends exactly one flow
    assert np.allclose(flows.demand, 400.0)


def test_ring_jobs_scattered_by_seed(pod: Fabric) -> None:
    jobs = ring_jobs(pod, 16, seed=4)
    assert jobs == ring_jobs(pod, 16, seed=4) != ring_jobs(pod, 16, seed=5)
    assert sorted(all_hosts(jobs)) == list(range(pod.num_hosts))
    assert all(list(job.hosts) == sorted(job.hosts) for job in jobs)
    with pytest.raises(JobError, match="hosts_per_job"):
        ring_jobs(pod, 0)


def test_full_meta_24k_of_two_channel_rings() -> None:
    """Speed is measured by `make bench`; here only the shape at full scale."""
    fabric = build(PRESETS["meta-24k"])
    flows = jobs_flows(fabric, ring_jobs(fabric, 16, channels=2))
    assert len(flows) == 2 * fabric.num_nics


def test_each_job_asks_its_own_nics_line_rate(small: Fabric, nic_speeds) -> None:  # type: ignore[no-untyped-def]
    """The defect: every job of the mix asked the fabric's slowest NIC's rate, written in,
    so a job on 800G hosts of a fabric with some 200G NICs was planned at 200."""
    mixed = nic_speeds(small, {0: 200.0})  # host 0 on 200G NICs, the rest 400G
    jobs = random_jobs(mixed, seed=4, fill=1.0)  # 5 jobs, one of them on host 0
    assert all(job.demand_gbps is None for job in jobs) and len(jobs) > 1
    for job in jobs:
        assert job.demand(mixed) == (200.0 if 0 in job.hosts else 400.0)
    flows = jobs_flows(mixed, jobs)
    sent = np.bincount(flows.src_nic, weights=flows.demand, minlength=mixed.num_nics)
    line = mixed.capacity[mixed.up(np.arange(mixed.num_nics))]
    assert (sent <= line * (1 + 1e-9)).all()
