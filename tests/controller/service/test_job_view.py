"""The per-job figures of the installed routing: flows steered, flows hashed, and why."""

from __future__ import annotations

import numpy as np

from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows, jobs_over_line_rate
from controller.service.job_view import job_figures
from controller.solver import SolveOptions, solve

POD = build(PRESETS["pod"])


def test_a_job_left_to_the_hashing_says_why_and_has_no_te_flow() -> None:
    moe = Job("moe", tuple(range(40)), dp=40 * 8, collectives=("alltoall",))
    ring = Job("ring", tuple(range(40, 80)), dp=40 * 8)
    flows = jobs_flows(POD, [moe, ring])
    res = solve(POD, LinkHealth.all_up(POD), flows, options=SolveOptions(table_budget=600))
    figures = job_figures(res, {"ring": 1.0})
    assert figures["moe"].te_flows == 0 and figures["moe"].hashed_flows == figures["moe"].flows
    assert "left to the fabric's hashing" in figures["moe"].handed_back
    assert figures["ring"].te_flows == figures["ring"].flows and not figures["ring"].handed_back
    assert figures["ring"].predicted_busbw == 1.0 and figures["moe"].predicted_busbw is None
    assert figures["ring"].over_line_rate == 0.0  # none given: within


def test_a_job_asked_more_than_line_rate_carries_the_ratio() -> None:
    fast = Job("fast", tuple(range(4)), dp=4 * 8, demand_gbps=1200)
    ring = Job("ring", tuple(range(4, 8)), dp=4 * 8)
    flows = jobs_flows(POD, [fast, ring])
    res = solve(POD, LinkHealth.all_up(POD), flows)
    figures = job_figures(res, {}, jobs_over_line_rate(POD, [fast, ring]))
    assert figures["fast"].over_line_rate == 3.0 and figures["ring"].over_line_rate == 0.0
    # planned at what its NICs carry: the MLU is not 3, its NICs' links are at 1
    assert res.mlu <= 1.0 + 1e-9


def test_a_job_with_no_flows_across_the_fabric_has_figures_of_none() -> None:
    """A one-host job is in the routing with nothing to route: zero flows, not absent (which
    reads "not installed yet")."""
    ring = Job("ring", tuple(range(4)), dp=4 * 8)
    solo = Job("solo", (8,), dp=8)
    res = solve(POD, LinkHealth.all_up(POD), jobs_flows(POD, [ring, solo]))
    figures = job_figures(res, {"ring": 1.0})
    assert set(figures) == {"ring", "solo"}
    assert figures["solo"].flows == figures["solo"].te_flows == figures["solo"].hashed_flows == 0
    assert figures["solo"].predicted_busbw is None and figures["ring"].flows > 0



def test_a_job_with_a_nic_link_down_counts_its_stalled_flows() -> None:
    """Flows with no path alive (a NIC's own link down) are counted apart from those that
    ride the hashing: the job is stalled, not merely hashed; the other job has none."""
    ring = Job("ring", tuple(range(4)), dp=4 * 8)
    other = Job("other", tuple(range(4, 8)), dp=4 * 8)
    flows = jobs_flows(POD, [ring, other])
    nic = 0  # host 0's first NIC: its access link down
    health = LinkHealth.all_up(POD).down([int(POD.access_link(nic))])
    res = solve(POD, health, flows)
    figures = job_figures(res, {})
    touching = int(((flows.src_nic == nic) | (flows.dst_nic == nic)).sum())
    assert touching > 0 and figures["ring"].stalled_flows == touching
    assert figures["ring"].hashed_flows >= touching and figures["other"].stalled_flows == 0
    # which NICs to look at: its first flow with no path (by input flow), one of them `nic`
    first = figures["ring"].stalled_flow
    assert first is not None and nic in first and figures["other"].stalled_flow is None
    lowest = int(np.asarray(res.unroutable).min())
    assert first == (int(flows.src_nic[lowest]), int(flows.dst_nic[lowest]))
