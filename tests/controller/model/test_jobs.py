"""Flows generated from jobs: exact flows on `tiny`, demands, validation and invariants.

`tiny`: 2 pods x 2 racks x 2 hosts x 2 NICs. Host h = ((pod*2 + rack)*2 + slot), NIC = 2h + n.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import JobError
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.jobs import (
    Job,
    asked_flows,
    check_job,
    job_flows,
    jobs_flows,
    jobs_over_line_rate,
    over_line_rate,
)


def triples(flows) -> list[tuple[int, int, float]]:  # type: ignore[no-untyped-def]
    return [
        (int(s), int(d), float(x))
        for s, d, x in zip(flows.src_nic, flows.dst_nic, flows.demand, strict=True)
    ]


def nic_totals(flows, fabric, side: str = "src_nic") -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.bincount(getattr(flows, side), weights=flows.demand, minlength=fabric.num_nics)


# ---- ring ------------------------------------------------------------------------------
def test_ring_on_tiny_one_channel_exact_flows(tiny: Fabric) -> None:
    # Ring over hosts 0 -> 1 -> 2 -> 3 -> 0, rail-aligned: NIC n of host h -> NIC n of next.
    flows = job_flows(tiny, Job("r", (0, 1, 2, 3), dp=8))
    assert triples(flows) == [
        (0, 2, 400.0), (1, 3, 400.0),  # host-p0-r0-h0 -> host-p0-r0-h1
        (2, 4, 400.0), (3, 5, 400.0),  # host-p0-r0-h1 -> host-p0-r1-h0
        (4, 6, 400.0), (5, 7, 400.0),  # host-p0-r1-h0 -> host-p0-r1-h1
        (6, 0, 400.0), (7, 1, 400.0),  # host-p0-r1-h1 -> host-p0-r0-h0
    ]  # fmt: skip
    assert flows.job_ids == ("r",)
    assert tiny.nic_name(6) == "host-p0-r1-h1/nic0"


def test_ring_follows_rank_order_not_host_ids(tiny: Fabric) -> None:
    flows = job_flows(tiny, Job("r", (6, 0, 3), dp=6))  # ring 6 -> 0 -> 3 -> 6
    assert triples(flows) == [
        (0, 6, 400.0), (1, 7, 400.0),  # host 0 -> host 3
        (6, 12, 400.0), (7, 13, 400.0),  # host 3 -> host 6
        (12, 0, 400.0), (13, 1, 400.0),  # host 6 -> host 0
    ]  # fmt: skip


def test_ring_two_channels_go_both_ways(tiny: Fabric) -> None:
    # One host per rack, across both pods: channel 0 goes +1, channel 1 goes -1 (200 G each).
    flows = job_flows(tiny, Job("r", (0, 2, 4, 6), dp=8, channels=2))
    expected = []
    order = [0, 2, 4, 6]
    for k, host in enumerate(order):
        for n in range(2):
            for nxt in (order[(k + 1) % 4], order[(k - 1) % 4]):
                expected.append((2 * host + n, 2 * nxt + n, 200.0))
    assert triples(flows) == sorted(expected)


def test_ring_channels_merge_when_they_land_on_the_same_host(tiny: Fabric) -> None:
    # Two hosts: +1 and -1 are the same neighbour, so the channels merge into one flow.
    flows = job_flows(tiny, Job("r", (0, 7), dp=4, channels=3))
    assert triples(flows) == [(0, 14, 400.0), (1, 15, 400.0), (14, 0, 400.0), (15, 1, 400.0)]


def test_ring_demand_and_partial_gpus(tiny: Fabric) -> None:
    flows = job_flows(tiny, Job("r", (1, 2), dp=2, gpus_per_host=1, demand_gbps=100))
    assert triples(flows) == [(2, 4, 100.0), (4, 2, 100.0)]  # only rail 0 is used


def test_single_host_job_has_no_flows(tiny: Fabric) -> None:
    flows = job_flows(tiny, Job("solo", (5,), dp=1, tp=2, collectives=("ring", "alltoall")))
    assert len(flows) == 0 and flows.job_ids == ("solo",)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 16),
    channels=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_ring_nic_totals_are_exactly_line_rate(
    small: Fabric, n: int, channels: int, seed: int
) -> None:
    hosts = tuple(np.random.default_rng(seed).permutation(small.num_hosts)[:n].tolist())
    job = Job("r", hosts, dp=n * 4, channels=channels)
    flows = job_flows(small, job)
    out, inn = nic_totals(flows, small), nic_totals(flows, small, "dst_nic")
    used = (np.asarray(hosts)[:, None] * 4 + np.arange(4)).reshape(-1)
    expected = 400.0 if n > 1 else 0.0
    assert np.allclose(out[used], expected) and np.allclose(inn[used], expected)
    assert out.sum() == pytest.approx(expected * used.size)
    if channels == 1 and n > 1:  # exactly one outgoing and one incoming flow per NIC
        assert np.all(np.bincount(flows.src_nic, minlength=small.num_nics)[used] == 1)
        assert np.all(np.bincount(flows.dst_nic, minlength=small.num_nics)[used] == 1)


# ---- all-to-all --------------------------------------------------------------------------
def test_alltoall_counts_and_demands(tiny: Fabric) -> None:
    hosts = (0, 3, 5, 6)
    flows = job_flows(tiny, Job("a", hosts, dp=8, collectives=("alltoall",)))
    assert len(flows) == 4 * 3 * 2  # n(n-1) host pairs x 2 rails
    assert np.allclose(flows.demand, 400.0 / 3)
    assert np.allclose(nic_totals(flows, tiny)[[0, 1, 6, 7, 10, 11, 12, 13]], 400.0)
    assert np.all(flows.src_nic % 2 == flows.dst_nic % 2)
    pairs = {(int(s) // 2, int(d) // 2) for s, d in zip(flows.src_nic, flows.dst_nic, strict=True)}
    assert pairs == {(a, b) for a in hosts for b in hosts if a != b}


def test_alltoall_and_ring_share_the_nic_budget(tiny: Fabric) -> None:
    flows = job_flows(tiny, Job("m", (0, 1, 2), dp=6, collectives=("ring", "alltoall")))
    assert np.allclose(nic_totals(flows, tiny)[:6], 400.0)
    # Ring 0->1 (200) and all-to-all 0->1 (100) merge into one (src NIC, dst host) flow.
    assert (0, 2, 300.0) in triples(flows)
    assert (0, 4, 100.0) in triples(flows)


# ---- pipeline ----------------------------------------------------------------------------
def test_pipeline_one_host_per_stage(tiny: Fabric) -> None:
    # pp=4 stages of dp*tp = 2 GPUs = one host each: 0 <-> 1 <-> 2 <-> 3, 200 G each way.
    flows = job_flows(tiny, Job("p", (0, 1, 2, 3), dp=1, pp=4, tp=2, collectives=("pipeline",)))
    assert triples(flows) == [
        (0, 2, 200.0), (1, 3, 200.0),  # host 0 -> 1
        (2, 0, 200.0), (2, 4, 200.0), (3, 1, 200.0), (3, 5, 200.0),  # host 1 -> 0, 2
        (4, 2, 200.0), (4, 6, 200.0), (5, 3, 200.0), (5, 7, 200.0),  # host 2 -> 1, 3
        (6, 4, 200.0), (7, 5, 200.0),  # host 3 -> 2
    ]  # fmt: skip


def test_pipeline_stages_smaller_than_a_host_use_the_receivers_rail(tiny: Fabric) -> None:
    # 4 stages of one GPU on 2 hosts: only stage 1 (host 0, GPU 1) -> stage 2 (host 1, GPU 0)
    # crosses the network, forward on rail 0 and backward on rail 1.
    flows = job_flows(tiny, Job("p", (0, 1), dp=1, pp=4, collectives=("pipeline",)))
    assert triples(flows) == [(0, 2, 200.0), (3, 1, 200.0)]


def test_pipeline_with_ring_in_each_stage(tiny: Fabric) -> None:
    job = Job("p", (0, 1, 2, 3), dp=2, pp=2, tp=2, collectives=("ring", "pipeline"))
    flows = job_flows(tiny, job)
    t = triples(flows)
    assert (0, 2, 200.0) in t and (2, 0, 200.0) in t  # ring inside stage 0 (hosts 0, 1)
    assert (0, 4, 100.0) in t and (4, 0, 100.0) in t  # pipeline stage 0 <-> 1
    pairs = {(s // 2, d // 2) for s, d, _ in t}  # no ring between stages: 0-3, 1-2 absent
    assert pairs == {(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0), (1, 3), (3, 1)}
    assert np.all(nic_totals(flows, tiny) <= 400.0 + 1e-9)


# ---- tensor parallel ---------------------------------------------------------------------
def test_tensor_parallel_stays_in_host(tiny: Fabric) -> None:
    assert len(job_flows(tiny, Job("t", (4,), dp=1, tp=2))) == 0
    # tp does not change the network flows of a ring over the same hosts.
    a = job_flows(tiny, Job("a", (0, 1, 2), dp=6, tp=1))
    b = job_flows(tiny, Job("b", (0, 1, 2), dp=3, tp=2))
    assert triples(a) == triples(b)
    # Pipeline stages of one host and tp = the whole host: no data-parallel ring traffic.
    c = job_flows(tiny, Job("c", (0, 1), dp=1, pp=2, tp=2, collectives=("ring",)))
    assert len(c) == 0


# ---- validation --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("job", "field", "words"),
    [
        (lambda: Job("x", (0, 1), dp=3), "dp*pp*tp", "must equal the job's GPU count"),
        (lambda: Job("x", (0, 1), dp=4, tp=3), "tp", "must divide"),
        (lambda: Job("x", (0, 8), dp=4), "hosts[1]", "out of range [0, 8)"),
        (lambda: Job("x", (-1,), dp=2), "hosts[0]", "out of range"),
        (lambda: Job("x", (0,), dp=3, gpus_per_host=3), "gpus_per_host", "exceeds the 2"),
        (lambda: Job("x", (0, 1, 2), dp=2, pp=2, tp=2), "dp*pp*tp", "2*2*2 = 8"),
        (lambda: Job("x", (0, 1, 2), dp=3, pp=2, tp=1), "pp", "multiple or a divisor"),
    ],
)
def test_fabric_checks_name_the_field(tiny: Fabric, job, field: str, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(JobError) as info:
        job_flows(tiny, job())
    assert info.value.field == field
    assert str(info.value).startswith(f"job 'x': {field}: ")
    assert words in str(info.value)
    with pytest.raises(JobError):
        check_job(tiny, job())


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"collectives": ("ring", "allgather")}, "collectives[1]", "unknown pattern 'allgather'"),
        ({"collectives": ("ring", "ring")}, "collectives[1]", "listed twice"),
        ({"collectives": ()}, "collectives", "at least one pattern"),
        ({"collectives": "ring"}, "collectives", "list of pattern names"),
        ({"hosts": (0, 1, 0)}, "hosts[2]", "duplicate host 0 (also hosts[0])"),
        ({"hosts": ()}, "hosts", "at least one host"),
        ({"hosts": (0, "1")}, "hosts[1]", "must be an integer"),
        ({"dp": 0}, "dp", "0 is not within [1, 262144]"),
        ({"pp": True}, "pp", "must be an integer, got True"),
        ({"channels": 0}, "channels", "0 is not within [1, 64]"),
        ({"channels": 2**32 - 1}, "channels", "4294967295 is not within [1, 64]"),
        ({"demand_gbps": -1}, "demand_gbps", "-1.0 is not within"),
        ({"demand_gbps": float("nan")}, "demand_gbps", "must be a finite number"),
        ({"demand_gbps": 1e308}, "demand_gbps", "is not within [0.001, 100000]"),
        ({"demand_gbps": 5e-324}, "demand_gbps", "is not within"),
        ({"gpus_per_host": 0}, "gpus_per_host", "0 is not within [1, 64]"),
        ({"id": ""}, "id", "must not be empty"),
        ({"id": 123}, "id", "must be a string, got 123"),
        ({"id": "a\nb"}, "id", "control characters"),
    ],
)
def test_job_checks_name_the_field(kwargs: dict, field: str, words: str) -> None:
    args = {"id": "x", "hosts": (0, 1), "dp": 4} | kwargs
    with pytest.raises(JobError, match=r"^" + field.replace("[", r"\[").replace("]", r"\]")):
        Job(**args)
    with pytest.raises(JobError) as info:
        Job(**args)
    assert info.value.field == field and words in str(info.value)


def test_job_normalises_numpy_ints() -> None:
    job = Job("x", np.array([3, 1]), dp=np.int64(4))
    assert job.hosts == (3, 1) and type(job.hosts[0]) is int and type(job.dp) is int


# ---- many jobs ---------------------------------------------------------------------------
def test_jobs_flows_concatenates_in_job_order(tiny: Fabric) -> None:
    jobs = [
        Job("b", (4, 5), dp=4),
        Job("solo", (7,), dp=2),
        Job("a", (0, 1, 2), dp=6, collectives=("alltoall",)),
    ]
    flows = jobs_flows(tiny, jobs)
    assert flows.job_ids == ("b", "solo", "a")
    assert len(flows) == 4 + 0 + 12
    assert set(flows.job[:4].tolist()) == {0} and set(flows.job[4:].tolist()) == {2}
    flows.validate(tiny)
    assert len(jobs_flows(tiny, [])) == 0


def test_jobs_flows_rejects_shared_hosts_and_ids(tiny: Fabric) -> None:
    with pytest.raises(JobError,
                       match=r"jobs\[1\].hosts: host-p0-r1-h0 is in job 'a' and job 'b'"):
        jobs_flows(tiny, [Job("a", (0, 2), dp=4), Job("b", (1, 2), dp=4)])
    with pytest.raises(JobError, match=r"jobs\[1\].id: duplicate job id 'a'"):
        jobs_flows(tiny, [Job("a", (0,), dp=2), Job("a", (1,), dp=2)])


# ---- property: every flow is inside its job and crosses hosts ------------------------------
@st.composite
def jobs_on(draw, fabric):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, min(fabric.num_hosts, 8)))
    perm = draw(st.permutations(range(fabric.num_hosts)))
    g = draw(st.integers(1, fabric.nics_per_host))
    tp = draw(st.sampled_from([d for d in range(1, g + 1) if g % d == 0]))
    total = n * g
    pps = [
        pp
        for pp in range(1, total + 1)
        if total % pp == 0
        and (total // pp) % tp == 0
        and ((total // pp) % g == 0 or g % (total // pp) == 0)
    ]
    pp = draw(st.sampled_from(pps))
    patterns = draw(
        st.lists(st.sampled_from(["ring", "alltoall", "pipeline"]), min_size=1, unique=True)
    )
    return Job(
        "j", tuple(perm[:n]), dp=total // (pp * tp), pp=pp, tp=tp, gpus_per_host=g,
        collectives=tuple(patterns), channels=draw(st.integers(1, 4)),
        demand_gbps=draw(st.sampled_from([100.0, 400.0])),
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(data=st.data(), preset=st.sampled_from(["tiny", "small"]))
def test_flows_stay_inside_the_job_and_leave_the_host(  # type: ignore[no-untyped-def]
    tiny: Fabric, small: Fabric, data, preset: str
) -> None:
    fabric = tiny if preset == "tiny" else small
    job = data.draw(jobs_on(fabric))
    flows = job_flows(fabric, job)
    flows.validate(fabric)
    src_h, dst_h = fabric.host_of_nic(flows.src_nic), fabric.host_of_nic(flows.dst_nic)
    assert np.all(src_h != dst_h)
    assert np.all(np.isin(src_h, job.hosts)) and np.all(np.isin(dst_h, job.hosts))
    rails_src = flows.src_nic % fabric.nics_per_host
    assert np.all(rails_src == flows.dst_nic % fabric.nics_per_host)  # rail-aligned
    assert np.all(rails_src < job.gpus(fabric))
    key = flows.src_nic * fabric.num_hosts + dst_h
    assert np.unique(key).size == len(flows)  # (src NIC, dst host) is unique
    assert np.all(np.diff(key) > 0)  # sorted by that key
    limit = job.demand_gbps + 1e-9
    assert np.all(nic_totals(flows, fabric) <= limit)
    assert np.all(nic_totals(flows, fabric, "dst_nic") <= limit)


# ---- NICs of several ports (dual-ToR) ------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(data=st.data(), ports=st.sampled_from([2, 4]))
def test_a_nic_of_p_ports_splits_each_flow_evenly_port_to_port(  # type: ignore[no-untyped-def]
    tiny: Fabric, data, ports: int
) -> None:
    """The same job on `tiny` and on `tiny` with every NIC of `ports` ports (nics_per_host
    counting ports): each flow becomes one flow per port p, NIC i's port p to the peer NIC
    i's port p, with 1/ports of the demand; so a NIC (all its ports) sends what it did."""
    from dataclasses import replace

    from controller.model.clos import PRESETS, ClosSpec, build

    spec = ClosSpec(**{**PRESETS["tiny"].__dict__, "name": "ported"})
    wide = build(replace(spec, nics_per_host=spec.nics_per_host * ports, ports_per_nic=ports))
    assert wide.gpus_per_host == tiny.gpus_per_host == tiny.nics_per_host
    job = data.draw(jobs_on(tiny))
    one, split = job_flows(tiny, job), job_flows(wide, job)
    n, w = tiny.nics_per_host, wide.nics_per_host
    want = sorted(
        ((s // n) * w + (s % n) * ports + p, (d // n) * w + (d % n) * ports + p, x / ports)
        for s, d, x in triples(one) for p in range(ports)
    )  # fmt: skip
    got = sorted(triples(split))
    assert [g[:2] for g in got] == [x[:2] for x in want]
    assert np.allclose([g[2] for g in got], [x[2] for x in want], rtol=1e-12)
    # a GPU's NIC sends and receives at most its budget, summed over its ports
    gpu_out = np.bincount(split.src_nic // ports, weights=split.demand)
    assert np.all(gpu_out <= job.demand_gbps + 1e-9)


def test_ports_per_nic_must_divide_the_ports_of_a_host() -> None:
    from controller.errors import FabricError
    from controller.model.clos import ClosSpec, build

    with pytest.raises(FabricError, match=r"ports_per_nic: 3 must be an integer in \[1, 8\] "
                       r"that divides nics_per_host \(8"):  # fmt: skip
        build(ClosSpec(name="x", nics_per_host=8, ports_per_nic=3))
    with pytest.raises(JobError, match="exceeds the 2 GPUs/NICs per host"):
        job_flows(build(ClosSpec(name="x", nics_per_host=4, ports_per_nic=2, ctsws_per_pod=2)),
                  Job("j", (0, 1), dp=8, gpus_per_host=4))  # fmt: skip


def test_over_line_rate_names_the_jobs_a_nic_of_which_is_asked_too_much(tiny) -> None:  # type: ignore[no-untyped-def]
    """Send or receive: a ring of two hosts at 2.5 x the NIC's rate, one within it."""
    line = float(tiny.capacity[0])
    fast = Job("fast", (0, 1), dp=2, gpus_per_host=1, demand_gbps=2.5 * line)
    ok = Job("ok", (2, 3), dp=2, gpus_per_host=1, demand_gbps=line)
    asked = FlowSet.concat([asked_flows(tiny, fast), asked_flows(tiny, ok)])
    assert over_line_rate(tiny, asked) == {"fast": pytest.approx(2.5)}
    assert over_line_rate(tiny, asked.take(np.flatnonzero(asked.job == 1))) == {}
    assert jobs_over_line_rate(tiny, [fast, ok]) == {"fast": pytest.approx(2.5)}
    # planned at what its NICs carry: 1 / 2.5 of what it asks; the other as asked
    flows = jobs_flows(tiny, [fast, ok])
    assert over_line_rate(tiny, flows) == {}
    np.testing.assert_allclose(flows.demand, asked.demand / np.where(asked.job == 0, 2.5, 1.0))


def test_a_job_without_a_demand_asks_its_slowest_nics_line_rate(tiny, nic_speeds) -> None:  # type: ignore[no-untyped-def]
    """The defect: the default demand was 400 Gbps whatever the NICs, so every job on 200G
    NICs was named 'asked 2 x its line rate', and a job on 800G NICs was planned at half."""
    mixed = nic_speeds(tiny, {0: 200.0, 1: 200.0, 2: 800.0, 3: 800.0, 4: 800.0})
    slow, fast, both = (Job(name, hosts, dp=2, tp=tiny.nics_per_host)
                        for name, hosts in (("slow", (0, 1)), ("fast", (2, 3)), ("both", (4, 5))))
    assert (slow.demand(mixed), fast.demand(mixed), both.demand(mixed)) == (200.0, 800.0, 400.0)
    assert jobs_over_line_rate(mixed, [slow, fast, both]) == {}
    flows = jobs_flows(mixed, [slow, fast])
    sent = np.bincount(flows.src_nic, weights=flows.demand, minlength=mixed.num_nics)
    line = mixed.capacity[mixed.up(np.arange(mixed.num_nics))]
    used = np.flatnonzero(sent)
    np.testing.assert_allclose(sent[used], line[used])  # every NIC asked its line rate
    # a demand given is kept, and named where over a NIC's rate
    given_ = Job("given", (0, 1), dp=2, tp=tiny.nics_per_host, demand_gbps=400.0)
    assert given_.demand(mixed) == 400.0
    assert jobs_over_line_rate(mixed, [given_]) == {"given": pytest.approx(2.0)}


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 8), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
       st.lists(st.sampled_from(["ring", "alltoall", "pipeline"]), min_size=1, max_size=3,
                unique=True),
       st.integers(1, 3), st.floats(0.1, 8.0), st.integers(0, 2**31))  # fmt: skip
def test_a_job_is_planned_within_its_nics_line_rate(
    hosts: int, tp: int, pp: int, collectives: list[str], channels: int, times: float, seed: int
) -> None:
    """Any job shape and demand: no NIC is asked more than its line rate by the flows as
    planned; a job within it is planned as asked; one over it is named by
    jobs_over_line_rate, which builds flows only for jobs asking more than a NIC's rate
    (so a job at line rate never asks a NIC more, whatever its collectives)."""
    fabric = build(PRESETS["small"])
    line = float(fabric.capacity[fabric.up(0)])
    rng = np.random.default_rng(seed)
    chosen = tuple(int(h) for h in rng.choice(fabric.num_hosts, hosts, replace=False))
    gpus, per_host = hosts * fabric.nics_per_host, fabric.nics_per_host
    stage = gpus // pp
    if gpus % (tp * pp) or (stage % per_host and per_host % stage):
        return  # not a job shape (check_job)
    job = Job("j", chosen, dp=gpus // (tp * pp), pp=pp, tp=tp, collectives=tuple(collectives),
              channels=channels, demand_gbps=times * line)  # fmt: skip
    asked, planned = asked_flows(fabric, job), job_flows(fabric, job)
    nics = fabric.num_nics
    for flows in (asked, planned):
        assert flows.demand.shape == asked.demand.shape
    for side in (planned.src_nic, planned.dst_nic):
        load = np.bincount(side, weights=planned.demand, minlength=nics)
        assert (load <= line * (1 + 1e-9)).all()
    over = over_line_rate(fabric, asked)
    assert jobs_over_line_rate(fabric, [job]) == over
    if not over:
        assert planned is asked or np.array_equal(planned.demand, asked.demand)
    if times <= 1.0:
        assert not over
