"""The min-MLU LP: hand-derived optima, validity as a bound, the sparse model hand-off."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.linear_solver.python import model_builder as mb

from controller.errors import InputError
from controller.model.assignment import Assignment
from controller.model.clos import ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth, parse_health
from controller.model.paths import num_paths
from controller.solver.bounds import lower_bound
from controller.solver.commodities import commodities
from controller.solver.lp import even_split, solve_lp

TOL = 2e-4  # PDLP's relative tolerance, and the bound's conservative shave


@pytest.fixture
def pod2() -> Fabric:
    """1 pod, 2 racks x 2 hosts x 2 NICs, 2 CTSWs: two 400G uplinks per rack (1:2 NIC:up)."""
    return build(ClosSpec(pods=1, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
                          ctsws_per_pod=2))  # fmt: skip


def _lp(fabric: Fabric, health: LinkHealth, flows: FlowSet, backend: str = "auto") -> float:
    return solve_lp(fabric, health, commodities(fabric, flows), backend=backend).mlu


def test_fill_model_from_sparse_data_works() -> None:
    """The one-call model hand-off this package relies on (pinned OR-Tools minor)."""
    model = mb.Model()
    # min y s.t. x0 + x1 = 1, x0 - y <= 0, x1 - y <= 0  -> y = 0.5
    a = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [1.0, 0.0, -1.0], [0.0, 1.0, -1.0]]))
    model.helper.fill_model_from_sparse_data(
        np.zeros(3), np.full(3, np.inf), np.array([0.0, 0.0, 1.0]),
        np.array([1.0, -np.inf, -np.inf]), np.array([1.0, 0.0, 0.0]), a,
    )  # fmt: skip
    model.minimize(model.var_from_index(2))
    solver = mb.Solver("glop")
    assert solver.solve(model) == mb.SolveStatus.OPTIMAL
    assert solver.objective_value == pytest.approx(0.5)


@pytest.mark.parametrize("backend", ["pdlp", "glop", "highs"])
def test_four_flows_over_two_uplinks(pod2: Fabric, backend: str) -> None:
    flows = FlowSet.build([0, 1, 2, 3], [4, 5, 6, 7], 400.0)
    assert _lp(pod2, LinkHealth.all_up(pod2), flows, backend) == pytest.approx(2.0, rel=TOL)


def test_uplink_down_and_degraded(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2, 3], [4, 5, 6, 7], 400.0)
    down = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c1"])
    assert _lp(pod2, down, flows) == pytest.approx(4.0, rel=TOL)
    half = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c1=0.5"])
    assert _lp(pod2, half, flows) == pytest.approx(1600 / 600, rel=TOL)


def test_cross_pod_through_taper(tiny: Fabric) -> None:
    # rack p0-r0's 4 NICs send 400G each to pod 1; 4 planes x one 400G ATSW link each
    flows = FlowSet.build([0, 1, 2, 3], [8, 9, 10, 11], 400.0)
    assert _lp(tiny, LinkHealth.all_up(tiny), flows) == pytest.approx(1.0, rel=TOL)
    # one plane's ATSW link from pod 0 down: 1600G over 3 x 400G
    health = parse_health(tiny, ["ctsw-p0-c0:atsw-c0-a0"])
    assert _lp(tiny, health, flows) == pytest.approx(1600 / 1200, rel=TOL)


def test_unroutable_commodity_reported(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 4], [4, 0], 100.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c0", "rtsw-p0-r0:ctsw-p0-c1"])
    comm = commodities(pod2, flows)
    sol = solve_lp(pod2, health, comm)
    assert sol.unroutable.tolist() == [0, 1]  # both directions use rack 0's links
    assert sol.status == "trivial" and sol.mlu == 0.0


def test_unknown_backend(pod2: Fabric) -> None:
    flows = FlowSet.build([0], [4], 100.0)
    with pytest.raises(InputError, match="unknown LP backend 'cplex'"):
        _lp(pod2, LinkHealth.all_up(pod2), flows, backend="cplex")


def test_path_shares_expand_to_full_paths(tiny: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2, 3, 4], [8, 9, 10, 11, 0], 400.0)
    health = LinkHealth.all_up(tiny)
    comm = commodities(tiny, flows)
    sol = solve_lp(tiny, health, comm)
    m, path, share = sol.path_shares(tiny, comm)
    total = np.bincount(m, weights=share, minlength=len(comm))
    assert np.allclose(total, 1.0, atol=1e-5)
    assert (path < num_paths(tiny)[2]).all()


@st.composite
def random_flows(draw: st.DrawFn) -> tuple[Fabric, LinkHealth, FlowSet]:
    fabric = build(ClosSpec(pods=2, racks_per_pod=2, hosts_per_rack=1, nics_per_host=2,
                            ctsws_per_pod=2, atsws_per_plane=draw(st.integers(1, 2)),
                            taper=draw(st.sampled_from([1.0, 2.0]))))  # fmt: skip
    n = draw(st.integers(1, 10))
    src = draw(st.lists(st.integers(0, fabric.num_nics - 1), min_size=n, max_size=n))
    dst = [(s + draw(st.integers(1, fabric.num_nics - 1))) % fabric.num_nics for s in src]
    dst = [
        d if d // 2 != s // 2 else (d + 2) % fabric.num_nics for s, d in zip(src, dst, strict=True)
    ]
    demand = draw(st.lists(st.sampled_from([50.0, 100.0, 400.0]), min_size=n, max_size=n))
    down = draw(st.lists(st.integers(fabric.rack_base, fabric.num_links - 1), max_size=2))
    health = LinkHealth.all_up(fabric).down(down)
    return fabric, health, FlowSet.build(src, dst, demand)


@settings(max_examples=40, deadline=None)
@given(random_flows(), st.integers(0, 2**31))
def test_lp_between_cheap_bounds_and_any_routing(random_alive_paths, case, seed: int) -> None:
    """LP >= every fractional cut bound; LP <= the utilisation of any concrete routing."""
    fabric, health, flows = case
    comm = commodities(fabric, flows)
    sol = solve_lp(fabric, health, comm, backend="glop")
    parts = lower_bound(fabric, health, flows).parts
    core_bounds = [parts.get(k, 0.0) for k in ("rack-egress", "rack-ingress", "pod-egress",
                                                "pod-ingress")]  # fmt: skip
    if sol.unroutable.size == 0:
        assert sol.mlu >= max(core_bounds) * (1 - 1e-6) - 1e-9
    # a random alive path per flow is a routing; its core MLU is >= the LP
    path = random_alive_paths(fabric, health, flows, seed)
    if path is None:
        return  # unroutable: nothing to compare
    cap = health.arc_capacity(fabric)
    load = Assignment(flows, path).link_load(fabric)
    core = np.repeat(fabric.link_kind != 0, 2) & (cap > 0)
    assert sol.mlu <= (load[core] / cap[core]).max() + 1e-6


@settings(max_examples=40, deadline=None)
@given(random_flows())
def test_the_even_split_is_a_feasible_point_above_the_optimum(case) -> None:  # type: ignore[no-untyped-def]
    fabric, health, flows = case
    comm = commodities(fabric, flows)
    sol = solve_lp(fabric, health, comm, backend="glop")
    if sol.unroutable.size:
        return
    assert even_split(fabric, health, comm) >= sol.mlu * (1 - 1e-6) - 1e-9


def test_the_even_split_by_hand(pod2: Fabric) -> None:
    """1200G out of rack 0 over its two uplinks: even is optimal while they are equal."""
    flows = FlowSet.build([0, 1, 2], [4, 5, 6], 400.0)
    comm = commodities(pod2, flows)
    for specs, expected in [([], 1.5), (["rtsw-p0-r0:ctsw-p0-c1"], 3.0),
                            (["rtsw-p0-r0:ctsw-p0-c1=0.5"], 3.0)]:  # fmt: skip
        assert even_split(pod2, parse_health(pod2, specs), comm) == pytest.approx(expected)


def test_deterministic(tiny: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2, 3, 5], [8, 9, 10, 11, 1], [400.0, 100, 200, 50, 400])
    health = LinkHealth.all_up(tiny)
    a = solve_lp(tiny, health, commodities(tiny, flows))
    b = solve_lp(tiny, health, commodities(tiny, flows))
    assert a.mlu == b.mlu
    assert np.array_equal(a.rack_share, b.rack_share)


@pytest.mark.parametrize("backend", ["pdlp", "glop", "highs"])
def test_three_flows_hand_optima(pod2: Fabric, backend: str) -> None:
    """1200G out of rack 0 over its uplinks: 2 x 400G, one down, one at half."""
    flows = FlowSet.build([0, 1, 2], [4, 5, 6], 400.0)
    cases = [([], 1.5), (["rtsw-p0-r0:ctsw-p0-c1"], 3.0), (["rtsw-p0-r0:ctsw-p0-c1=0.5"], 2.0)]
    for specs, expected in cases:
        health = parse_health(pod2, specs)
        assert _lp(pod2, health, flows, backend) == pytest.approx(expected, rel=TOL)


def _fractional_mlu(fabric: Fabric, health: LinkHealth, flows: FlowSet) -> tuple[float, float]:
    """(LP bound, core MLU of the LP's own fractional routing expanded to full paths)."""
    from controller.model.paths import core_arcs, path_arcs

    comm = commodities(fabric, flows)
    sol = solve_lp(fabric, health, comm, backend="pdlp")
    m, path, share = sol.path_shares(fabric, comm, min_share=0.0)
    nic = fabric.hosts_per_rack * fabric.nics_per_host  # first NIC of each rack
    arcs = core_arcs(path_arcs(fabric, comm.src_rtsw[m] * nic, comm.dst_rtsw[m] * nic, path))
    flat = arcs.reshape(-1)
    weight = np.repeat(comm.demand[m] * share, arcs.shape[1])
    load = np.bincount(flat[flat >= 0], weights=weight[flat >= 0], minlength=fabric.num_arcs)
    cap = health.arc_capacity(fabric)
    used = load > 0
    return sol.mlu, float((load[used] / cap[used]).max())


def test_pdlp_bound_is_certified_and_tight(small: Fabric) -> None:
    """The dual certificate sits below the routing PDLP found, within solver tolerance."""
    rng = np.random.default_rng(3)
    hosts = rng.permutation(small.num_hosts)
    nxt = np.empty_like(hosts)
    nxt[hosts] = np.roll(hosts, -1)
    n = small.nics_per_host
    src = (np.arange(small.num_hosts)[:, None] * n + np.arange(n)).ravel()
    dst = (nxt[:, None] * n + np.arange(n)).ravel()
    flows = FlowSet.build(src, dst, 400.0)
    health = parse_health(small, ["rtsw-p0-r0:ctsw-p0-c0", "ctsw-p1-c2:atsw-c2-a1=0.5"])
    sol = solve_lp(small, health, commodities(small, flows), backend="pdlp")
    assert sol.certified
    exact = _lp(small, health, flows, backend="glop")
    assert exact * (1 - 1e-6) <= _fractional_mlu(small, health, flows)[1] + 1e-9
    assert sol.mlu <= exact * (1 + 1e-9)
    assert sol.mlu == pytest.approx(exact, rel=TOL)


def test_certificate_is_valid_for_any_prices(tiny: Fabric) -> None:
    """Weak duality: arbitrary non-negative arc prices never certify more than the optimum."""
    from controller.solver.lp import build_model, certified_bound

    flows = FlowSet.build([0, 1, 2, 3, 4, 9], [8, 9, 10, 11, 0, 5], [400.0, 400, 200, 100, 400, 50])
    health = parse_health(tiny, ["ctsw-p0-c1:atsw-c1-a0=0.5"])
    comm = commodities(tiny, flows)
    exact = solve_lp(tiny, health, comm, backend="glop").mlu
    model = build_model(tiny, health, comm)
    rng = np.random.default_rng(0)
    n_arc_rows = model.matrix.shape[0] - model.first_arc_row
    for _ in range(50):
        price = rng.exponential(size=n_arc_rows) * (rng.random(n_arc_rows) < 0.5)
        assert certified_bound(model, len(comm), price) <= exact * (1 + 1e-9)
    assert certified_bound(model, len(comm), np.zeros(n_arc_rows)) == 0.0


def test_highs_falls_back_to_its_primal(pod2: Fabric) -> None:
    """HiGHS via model_builder gives no usable duals: the exact primal u is reported instead."""
    flows = FlowSet.build([0, 1, 2], [4, 5, 6], 400.0)
    sol = solve_lp(pod2, LinkHealth.all_up(pod2), commodities(pod2, flows), backend="highs")
    assert sol.mlu == pytest.approx(1.5) and sol.objective == pytest.approx(1.5)


def test_lp_not_above_all_on_path_zero(small: Fabric) -> None:
    flows = FlowSet.build(np.arange(0, 64), np.arange(64, 128), 400.0)
    health = LinkHealth.all_up(small)
    load = Assignment(flows, np.zeros(len(flows), np.int64)).link_load(small)
    cap = health.arc_capacity(small)
    core = np.repeat(small.link_kind != 0, 2)
    assert _lp(small, health, flows) <= (load[core] / cap[core]).max() * (1 + 1e-9)
