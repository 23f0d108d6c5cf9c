"""Max-min fair rates are exact and fair; simulation reports count what they claim."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import TIER_NAMES, Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.rates import max_min_rates, simulate
from sim.baselines import ecmp, eecmp


def _classic_water_filling(arcs: np.ndarray, cap: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Textbook progressive filling, one level per round, in plain Python (test oracle)."""
    rates = np.zeros(len(demand))
    active = {f for f in range(len(demand)) if (arcs[f] >= 0).any() and demand[f] > 0}
    remaining = cap.astype(float).copy()
    while active:
        share = {}
        for f in active:
            for a in arcs[f][arcs[f] >= 0]:
                share.setdefault(int(a), 0)
                share[int(a)] += 1
        level = min([remaining[a] / n for a, n in share.items()] + [demand[f] for f in active])
        done = {f for f in active if demand[f] <= level * (1 + 1e-12)}
        tight = {a for a, n in share.items() if remaining[a] / n <= level * (1 + 1e-12)}
        done |= {f for f in active if set(arcs[f][arcs[f] >= 0].tolist()) & tight}
        for f in done:
            rates[f] = level
            for a in arcs[f][arcs[f] >= 0]:
                remaining[a] -= level
        active -= done
    return rates


def test_two_flows_share_a_link_equally() -> None:
    rates = max_min_rates(
        np.array([[0, 1], [0, 2]]), np.array([10.0, 100.0, 100.0]), np.array([50.0, 50.0])
    )
    assert rates.tolist() == [5.0, 5.0]


def test_flow_bottlenecked_elsewhere_leaves_the_rest() -> None:
    # A crosses links 0 and 1; B only 0; C only 1. Link 1 (cap 2) holds A and C to 1 each,
    # so B gets the 9 that A leaves on link 0.
    arcs = np.array([[0, 1], [0, -1], [1, -1]])
    rates = max_min_rates(arcs, np.array([10.0, 2.0]), np.array([100.0, 100.0, 100.0]))
    assert rates == pytest.approx([1.0, 9.0, 1.0])


def test_demand_caps_and_redistribution() -> None:
    arcs = np.array([[0], [0], [0]])
    rates = max_min_rates(arcs, np.array([12.0]), np.array([1.0, 100.0, 100.0]))
    assert rates == pytest.approx([1.0, 5.5, 5.5])
    # everyone under capacity: each gets its demand
    assert max_min_rates(arcs, np.array([12.0]), np.array([1.0, 2.0, 3.0])).tolist() == [
        1.0,
        2.0,
        3.0,
    ]


def test_unrouted_and_dead_paths_get_zero() -> None:
    arcs = np.array([[-1, -1], [0, 1], [1, -1]])
    rates = max_min_rates(arcs, np.array([0.0, 10.0]), np.array([5.0, 5.0, 5.0]))
    assert rates.tolist() == [0.0, 0.0, 5.0]


def test_empty_input() -> None:
    assert max_min_rates(np.zeros((0, 6), np.int64), np.ones(4), np.zeros(0)).size == 0


@st.composite
def _instances(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    num_arcs = draw(st.integers(1, 8))
    num_flows = draw(st.integers(1, 12))
    rows = []
    for _ in range(num_flows):
        path = draw(st.lists(st.integers(0, num_arcs - 1), max_size=4, unique=True))
        rows.append(path + [-1] * (4 - len(path)))
    caps = draw(
        st.lists(
            st.sampled_from([0.0, 1.0, 2.0, 3.0, 7.5, 10.0, 400.0]),
            min_size=num_arcs,
            max_size=num_arcs,
        )
    )
    demand = draw(
        st.lists(
            st.sampled_from([0.5, 1.0, 4.0, 25.0, 400.0]), min_size=num_flows, max_size=num_flows
        )
    )
    return np.array(rows, dtype=np.int64), np.array(caps), np.array(demand)


@settings(max_examples=300, deadline=None)
@given(_instances())
def test_max_min_properties(instance: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    arcs, cap, demand = instance
    rates = max_min_rates(arcs, cap, demand)
    # feasible: per-arc totals within capacity, each rate within its demand
    valid = arcs >= 0
    per_arc = np.bincount(
        arcs[valid], weights=np.repeat(rates, arcs.shape[1])[valid.ravel()], minlength=cap.size
    )
    assert (per_arc <= cap + 1e-6).all()
    assert (rates <= demand + 1e-9).all() and (rates >= 0).all()
    assert (rates[~valid.any(axis=1)] == 0).all()
    # fair: a flow below its demand has a saturated link where nobody gets more than it
    for f in np.flatnonzero(valid.any(axis=1) & (rates < demand - 1e-9)):
        ok = False
        for a in arcs[f][arcs[f] >= 0]:
            on_a = (arcs == a).any(axis=1)
            if per_arc[a] >= cap[a] - 1e-6 and rates[on_a].max() <= rates[f] + 1e-9:
                ok = True
        assert ok, f"flow {f} at {rates[f]} has no bottleneck link"
    # and equal to the textbook algorithm
    assert rates == pytest.approx(_classic_water_filling(arcs, cap, demand), abs=1e-9)


def test_many_levels_take_few_rounds() -> None:
    # Independent links with k flows each: k distinct levels, all local bottlenecks at once.
    counts = np.arange(1, 201)
    arcs = np.repeat(np.arange(200), counts)[:, None]
    rates = max_min_rates(arcs, np.full(200, 400.0), np.full(arcs.shape[0], 400.0))
    assert rates == pytest.approx(400.0 / np.repeat(counts, counts))


# ---- simulate -----------------------------------------------------------------------


def test_simulate_hand_case(two_rack_pod: Fabric) -> None:
    fab = two_rack_pod
    # NIC 0 and 1 (rack 0) -> NIC 2 and 3 (rack 1); both forced through CTSW 0: path 0.
    flows = FlowSet.build([0, 1], [2, 3], 400.0, job=[0, 1], job_ids=("a", "b"))
    health = LinkHealth.all_up(fab)
    report = simulate(fab, health, Assignment(flows, np.array([0, 0])))
    assert report.mlu == 2.0
    assert report.collided_links == 2  # rtsw0>ctsw0 and ctsw0>rtsw1
    assert report.max_flows_per_link == 2
    assert report.worst_flow_share == 0.5
    assert report.job_busbw_fraction == {"a": 0.5, "b": 0.5}
    assert report.tier_mlu["rtsw>ctsw"] == 2.0 and report.tier_mlu["nic>rtsw"] == 1.0
    assert set(report.tier_mlu) == set(TIER_NAMES)
    # split over both CTSWs: path 1 is c = 1
    good = simulate(fab, health, Assignment(flows, np.array([0, 1])))
    assert (good.mlu, good.collided_links, good.worst_flow_share) == (1.0, 0, 1.0)
    assert good.busbw_fraction_mean == good.busbw_fraction_min == 1.0
    json.dumps(good.to_dict())


def test_simulate_reports_unrouted_and_dead_paths(two_rack_pod: Fabric) -> None:
    fab = two_rack_pod
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    health = LinkHealth.all_up(fab).down([fab.rack_link(0, 0)])
    report = simulate(fab, health, Assignment(flows, np.array([UNROUTED, 0])))
    assert report.unrouted == 1 and report.on_down_links == 1
    assert report.mlu == float("inf") and report.worst_flow_share == 0.0
    report = simulate(fab, health, Assignment(flows, np.array([UNROUTED, 1])))
    assert report.unrouted == 1 and report.worst_flow_share == 1.0 and report.mlu == 1.0


def test_simulate_arcs_and_assignment_agree(tiny: Fabric) -> None:
    nics = np.arange(tiny.num_nics)
    flows = FlowSet.build(nics, (nics + 5) % tiny.num_nics, 400.0)
    health = LinkHealth.all_up(tiny)
    a = ecmp(tiny, flows, health, seed=4)
    assert simulate(tiny, health, a) == simulate(tiny, health, a.arcs(tiny), flows)


def test_subflows_of_one_flow_are_not_a_collision(two_rack_pod: Fabric) -> None:
    fab = two_rack_pod
    flows = FlowSet.build([0], [2], 400.0)
    health = LinkHealth.all_up(fab)
    sub, a, parent = eecmp(fab, flows, health, seed=0, qps=16)
    report = simulate(fab, health, a, parent=parent)
    assert report.flows == 1 and report.subflows == 16
    assert report.collided_links == 0 and report.max_flows_per_link == 1
    assert report.worst_flow_share == pytest.approx(1.0)


def test_eecmp_shares_aggregate_to_parents(tiny: Fabric) -> None:
    nics = np.arange(tiny.num_nics)
    # every NIC sends to the same NIC index of the next pod: 8 flows each way, 1:2 taper
    flows = FlowSet.build(nics, (nics + 8) % 16, 400.0, job=nics // 8, job_ids=("x", "y"))
    health = LinkHealth.all_up(tiny)
    sub, a, parent = eecmp(tiny, flows, health, seed=2, qps=16)
    report = simulate(tiny, health, a, parent=parent)
    assert report.flows == 16 and report.subflows == 256
    assert report.tier_mlu["ctsw>atsw"] >= 2.0 - 1e-9  # the taper alone halves cross-pod
    assert report.throughput_fraction <= 0.5 + 1e-9
    assert report.worst_flow_share <= report.mean_flow_share <= 0.5 + 1e-9
    assert set(report.job_busbw_fraction) == {"x", "y"}
    assert report.busbw_fraction_min == min(report.job_busbw_fraction.values())


def test_simulate_rejects_mismatched_inputs(two_rack_pod: Fabric) -> None:
    flows = FlowSet.build([0, 1], [2, 3], 400.0)
    health = LinkHealth.all_up(two_rack_pod)
    with pytest.raises(ValueError):
        simulate(two_rack_pod, health, np.zeros((3, 6), np.int64), flows)
    with pytest.raises(ValueError):
        simulate(two_rack_pod, health, np.zeros((2, 6), np.int64))
    with pytest.raises(ValueError):
        simulate(two_rack_pod, health, Assignment(flows, np.array([0, 2])))
    with pytest.raises(ValueError):
        simulate(two_rack_pod, health, Assignment(flows, np.array([0, 0])), parent=np.zeros(3))


def test_matches_textbook_on_a_larger_random_instance() -> None:
    rng = np.random.default_rng(11)
    arcs = np.full((300, 4), -1, dtype=np.int64)
    for f in range(300):
        hops = rng.choice(40, size=rng.integers(1, 5), replace=False)
        arcs[f, : hops.size] = hops
    cap = rng.choice([100.0, 200.0, 400.0], size=40)
    demand = rng.choice([50.0, 400.0], size=300)
    rates = max_min_rates(arcs, cap, demand)
    assert rates == pytest.approx(_classic_water_filling(arcs, cap, demand), abs=1e-9)


# ---- queue pairs as the unit of sharing; the striped model --------------------------------


def test_a_flow_of_w_qps_competes_as_w_subflows() -> None:
    one = np.array([[0], [0]])
    cap = np.array([100.0])
    # 3 QPs against 1 on a 100G link: 75 / 25
    assert max_min_rates(one, cap, np.array([1e3, 1e3]), weight=np.array([3, 1])).tolist() == [
        75.0, 25.0]  # fmt: skip
    # demand caps apply per QP: 4 QPs wanting 40 in all (10 each) freeze below the 20 level
    rates = max_min_rates(one, cap, np.array([40.0, 1e3]), weight=np.array([4, 1]))
    assert rates.tolist() == [40.0, 60.0]
    # a flow pinned with 16 QPs beside 15 hashed QPs of another: 16/31 of the link, not 1/16
    arcs = np.zeros((16, 1), np.int64)
    rates = max_min_rates(arcs, np.array([400.0]), np.full(16, 400.0),
                          weight=np.array([16] + [1] * 15))  # fmt: skip
    assert rates[0] == pytest.approx(400 * 16 / 31) and rates[1] == pytest.approx(400 / 31)
    # weight w is the same as w rows on the same path
    expanded = max_min_rates(np.zeros((4, 1), np.int64), cap, np.array([1e3] * 4))
    assert rates.sum() == pytest.approx(400.0) and expanded.tolist() == [25.0] * 4


def test_striped_flow_runs_at_qps_times_its_slowest_qp(two_rack_pod: Fabric) -> None:
    fab = two_rack_pod
    # flow 0 (NIC 0 -> NIC 2) in two 200G buckets, one via CTSW 0 (alone), one via CTSW 1;
    # flow 1 (NIC 1 -> NIC 3) whole with 3 QPs via CTSW 1. Links 400G.
    arcs = Assignment(FlowSet.build([0, 0, 1], [2, 2, 3], [200.0, 200.0, 400.0]),
                      np.array([0, 1, 1])).arcs(fab)  # fmt: skip
    flows = FlowSet.build([0, 0, 1], [2, 2, 3], [200.0, 200.0, 400.0], job=[0, 0, 1],
                          job_ids=("split", "pinned"))  # fmt: skip
    parent = np.array([0, 0, 1])
    health = LinkHealth.all_up(fab)
    striped = simulate(fab, health, arcs, flows, parent, weight=np.array([1, 1, 3]))
    # CTSW 1 carries 1 + 3 QPs: 100G each; flow 0's QPs run at 200 and 100: 2 x 100 = 200
    assert striped.job_busbw_fraction == {"split": 0.5, "pinned": 0.75}
    summed = simulate(fab, health, arcs, flows, parent, weight=np.array([1, 1, 3]),
                      model="summed")  # fmt: skip
    # rows as units, rates added: 200 + 200 for flow 0, 200 for flow 1
    assert summed.job_busbw_fraction == {"split": 1.0, "pinned": 0.5}
    with pytest.raises(ValueError, match="model must be one of"):
        simulate(fab, health, arcs, flows, parent, model="mean")


def test_striped_eecmp_is_no_better_than_summed(tiny: Fabric) -> None:
    nics = np.arange(tiny.num_nics)
    flows = FlowSet.build(nics, (nics + 8) % 16, 400.0, job=nics // 8, job_ids=("x", "y"))
    health = LinkHealth.all_up(tiny)
    sub, a, parent = eecmp(tiny, flows, health, seed=2, qps=16)
    striped = simulate(tiny, health, a, parent=parent)
    summed = simulate(tiny, health, a, parent=parent, model="summed")
    assert striped.busbw_fraction_min <= summed.busbw_fraction_min + 1e-12
    assert striped.mlu == summed.mlu


def test_a_job_with_a_flow_no_routing_can_carry_is_stalled(tiny: Fabric) -> None:
    """A flow whose NIC link is down has no path under any routing: its job reads 0 (not
    the share of its other flows), under hashing as under any assignment; the flow itself
    stays out of the flow shares."""
    from controller.model.health import parse_health

    flows = FlowSet.build([0, 2], [4, 6], 100.0, job=[0, 0], job_ids=("ring",))
    health = parse_health(tiny, ["host-p0-r0-h0/nic0:rtsw-p0-r0"])
    sub, a, parent = eecmp(tiny, flows, health, seed=1, qps=16)
    for report in (simulate(tiny, health, ecmp(tiny, flows, health, seed=1)),
                   simulate(tiny, health, a, parent=parent)):  # fmt: skip
        assert report.job_busbw_fraction == {"ring": 0.0} and report.busbw_fraction_min == 0.0
        assert report.unrouted == 1 and report.worst_flow_share == 1.0
    up = LinkHealth.all_up(tiny)  # all up: the same flows run at their demand
    assert simulate(tiny, up, ecmp(tiny, flows, up, seed=1)).busbw_fraction_min == 1.0
