"""Lower bounds: hand-derived values and validity against concrete routings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import Assignment
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth, parse_health
from controller.model.paths import CROSS_POD, SAME_POD
from controller.solver.bounds import lower_bound
from controller.solver.commodities import commodities
from controller.solver.lp import solve_lp


@pytest.fixture
def pod2() -> Fabric:
    return build(ClosSpec(pods=1, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
                          ctsws_per_pod=2))  # fmt: skip


def test_rack_egress_cut(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2], [4, 5, 6], 400.0)
    bound = lower_bound(pod2, LinkHealth.all_up(pod2), flows)
    assert bound.parts["rack-egress"] == pytest.approx(1.5)
    # three unsplit 400G flows over two uplinks: one carries two
    assert bound.parts["rack-egress-unsplit"] == pytest.approx(2.0)
    assert bound.value == pytest.approx(2.0) and bound.name == "rack-egress-unsplit"


def test_unsplit_bound_with_failure(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1], [4, 5], 400.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c1"])
    bound = lower_bound(pod2, health, flows)
    assert bound.parts["rack-egress"] == pytest.approx(2.0)
    assert bound.parts["rack-egress-unsplit"] == pytest.approx(2.0)


def test_largest_flow_over_degraded_paths(pod2: Fabric) -> None:
    flows = FlowSet.build([0], [4], 400.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c0=0.5", "rtsw-p0-r0:ctsw-p0-c1=0.25"])
    assert lower_bound(pod2, health, flows).parts["largest-flow"] == pytest.approx(2.0)


def test_access_bound(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1], [4, 4], 300.0)  # NIC 4 receives 600 over 400
    assert lower_bound(pod2, LinkHealth.all_up(pod2), flows).parts["access"] == 1.5


def test_pod_cut(tiny: Fabric) -> None:
    # 8 flows of 400G out of pod 0 over 4 CTSW->ATSW links of 400G
    src = np.arange(8)
    flows = FlowSet.build(src, src + 8, 400.0)
    bound = lower_bound(tiny, LinkHealth.all_up(tiny), flows)
    assert bound.parts["pod-egress"] == pytest.approx(2.0)
    assert bound.value == pytest.approx(2.0)


def test_a_flow_with_no_path_loads_nothing(pod2: Fabric) -> None:
    """No routing carries a flow whose rack is cut off: it is left out of every part (an
    infinite bound would make every routing's MLU / bound read 0)."""
    flows = FlowSet.build([0], [4], 100.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c0", "rtsw-p0-r0:ctsw-p0-c1"])
    assert lower_bound(pod2, health, flows).value == 0.0
    more = FlowSet.build([0, 4], [4, 0], 100.0)  # the way back is cut too: both left out
    assert lower_bound(pod2, health, more).value == 0.0
    alive = FlowSet.build([4, 5], [6, 7], 100.0)  # within rack 1
    both = FlowSet.concat([flows, alive])
    assert lower_bound(pod2, health, both) == lower_bound(pod2, health, alive)


def test_empty_flows(pod2: Fabric) -> None:
    assert lower_bound(pod2, LinkHealth.all_up(pod2), FlowSet.empty()).value == 0.0


def test_commodities_aggregate_by_rack_pair(tiny: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2, 0, 0], [4, 5, 6, 8, 3], [100.0, 200, 50, 400, 10])
    comm = commodities(tiny, flows)
    assert comm.src_rtsw.tolist() == [0, 0] and comm.dst_rtsw.tolist() == [1, 2]
    assert comm.demand.tolist() == [350.0, 400.0]
    assert comm.cls.tolist() == [SAME_POD, CROSS_POD]
    assert comm.flow_comm.tolist() == [0, 0, 0, 1, -1]  # last flow stays in its rack


@st.composite
def _instances(draw: st.DrawFn) -> tuple[Fabric, LinkHealth, FlowSet]:
    fabric = build(PRESETS[draw(st.sampled_from(["tiny", "wide"]))])
    n = draw(st.integers(1, 12))
    nics = st.integers(0, fabric.num_nics - 1)
    src = np.array(draw(st.lists(nics, min_size=n, max_size=n)))
    dst = np.array(draw(st.lists(nics, min_size=n, max_size=n)))
    npl = fabric.nics_per_host
    dst = np.where(src // npl == dst // npl, (dst + npl) % fabric.num_nics, dst)
    demand = draw(st.lists(st.sampled_from([25.0, 100.0, 400.0]), min_size=n, max_size=n))
    links = st.integers(fabric.rack_base, fabric.num_links - 1)
    factors = st.sampled_from([0.0, 0.5])
    health = LinkHealth.all_up(fabric).with_factors(draw(st.dictionaries(links, factors,
                                                                         max_size=3)))  # fmt: skip
    return fabric, health, FlowSet.build(src, dst, demand)


def _random_routing_mlu(
    random_alive_paths, fabric: Fabric, health: LinkHealth, flows: FlowSet, seed: int
) -> float:
    """Full MLU (access links included) of a random alive path per flow; inf if none."""
    path = random_alive_paths(fabric, health, flows, seed)
    if path is None:
        return float("inf")
    cap = health.arc_capacity(fabric)
    load = Assignment(flows, path).link_load(fabric)
    used = load > 0
    return float((load[used] / cap[used]).max())


@settings(max_examples=60, deadline=None)
@given(_instances(), st.integers(0, 2**31))
def test_every_bound_below_integral_routings_and_cuts_below_lp(
    random_alive_paths, case, seed: int
) -> None:
    fabric, health, flows = case
    comm = commodities(fabric, flows)
    sol = solve_lp(fabric, health, comm, backend="glop")
    bound = lower_bound(fabric, health, flows, sol)
    for qps in (1, 16):  # adding the LP to a bound counted without it: the same bound
        assert lower_bound(fabric, health, flows, qps=qps).with_lp(sol) == lower_bound(
            fabric, health, flows, sol, qps
        )
    mlu = _random_routing_mlu(random_alive_paths, fabric, health, flows, seed)
    for name, value in bound.parts.items():
        assert value <= mlu * (1 + 1e-9) + 1e-9, name
    if sol.unroutable.size == 0:
        for name in ("rack-egress", "rack-ingress", "pod-egress", "pod-ingress"):
            assert bound.parts.get(name, 0.0) <= sol.mlu * (1 + 1e-6) + 1e-9, name


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([1.0, 2.5, 4.0, 7.0]), st.integers(1, 9)),
        max_size=25,
    ),
    st.integers(1, 4),
)
def test_unsplit_with_copies_equals_the_copies_written_out(
    rows: list[tuple[int, float, int]], links: int
) -> None:
    """A row standing for m equal buckets bounds exactly as m rows of one bucket each."""
    from controller.solver.bounds import _unsplit

    cap = np.full((3, links), 100.0)
    cap[1, 0] = 400.0
    group = np.array([g for g, _, _ in rows], np.int64)
    demand = np.array([d for _, d, _ in rows])
    copies = np.array([m for _, _, m in rows], np.int64)
    written = _unsplit(np.repeat(group, copies), np.repeat(demand, copies), cap)
    assert _unsplit(group, demand, cap, copies) == written


CUTS = ("rack-egress", "rack-ingress", "pod-egress", "pod-ingress")  # each has a refinement


@settings(max_examples=60, deadline=None)
@given(_instances(), st.sampled_from([1, 2, 4, 16]), st.integers(0, 2**31))
def test_every_part_holds_for_the_routings_it_claims_and_refines_its_cut(
    case: tuple[Fabric, LinkHealth, FlowSet], qps: int, seed: int
) -> None:
    """Each part of the bound for `qps` buckets is at most the MLU of routings that split
    flows into `qps` equal QPs (E-ECMP, WCMP, the solve), and an integral refinement
    (`*-unsplit`, `*-16qp`) is never below its fractional cut."""
    from controller.model.hashing import hashed
    from controller.model.rates import simulate
    from controller.solver.certificate import CertifyOptions
    from controller.solver.solve import SolveOptions, solve

    fabric, health, flows = case
    bound = lower_bound(fabric, health, flows, qps=qps)
    tag = "unsplit" if qps <= 1 else f"{qps}qp"
    for cut in CUTS:
        if cut in bound.parts:
            assert bound.parts[f"{cut}-{tag}"] >= bound.parts[cut], cut
    mlus = []
    for kind in ("eecmp", "wcmp"):
        sub, a, parent = hashed(kind, fabric, flows, health, seed, qps)
        if a.routed.all():
            mlus.append(simulate(fabric, health, a, sub, parent).mlu)
    res = solve(fabric, health, flows,
                options=SolveOptions(qps=qps, certify=CertifyOptions(enabled=False)))  # fmt: skip
    if not res.unroutable.size and not res.fallback_ecmp.size:
        mlus.append(res.mlu)
    for mlu in mlus:
        for name, value in bound.parts.items():
            assert value <= mlu * (1 + 1e-9) + 1e-9, (name, value, mlu)


def test_a_refinement_is_never_below_its_cut(tiny: Fabric) -> None:
    # many small buckets against fat links: the pigeonhole alone says little, the cut a lot
    src = np.repeat(np.arange(4), 4)
    dst = (src + 4 + np.tile(np.arange(4), 4)) % tiny.num_nics
    dst = np.where(tiny.host_of_nic(dst) == tiny.host_of_nic(src), (dst + 2) % 16, dst)
    flows = FlowSet.build(src, dst, 400.0)
    bound = lower_bound(tiny, LinkHealth.all_up(tiny), flows, qps=16)
    assert bound.parts["rack-egress"] > 1.0
    assert bound.parts["rack-egress-16qp"] == bound.parts["rack-egress"]
