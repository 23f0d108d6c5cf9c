"""Commodities (flows aggregated by RTSW pair), and the layered LP against a path-based oracle.

The oracle is the plain path formulation over every alive candidate path of controller.model.paths:

    min u  s.t.  sum_q x_q = 1 per commodity,  sum_{q uses e} d_q x_q - cap_e u <= 0,  x >= 0

Its optimum must equal controller.solver.lp's layered optimum, which pools the ATSW hop per
(pod pair, plane) and claims to lose nothing by it.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.linear_solver.python import model_builder as mb

from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import (
    CROSS_POD,
    SAME_POD,
    core_arcs,
    num_paths,
    path_alive,
    path_arcs,
)
from controller.solver.commodities import Commodities, commodities
from controller.solver.lp import solve_lp


def _alive_paths(
    fabric: Fabric, health: LinkHealth, comm: Commodities
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(commodity, path index, core arcs [Q, 4]) of every alive candidate path."""
    cap = health.arc_capacity(fabric)
    n = np.array(num_paths(fabric))[comm.cls]
    m = np.repeat(np.arange(len(comm)), n)
    q = np.arange(m.size) - np.repeat(np.cumsum(n) - n, n)
    nic_of_rack = np.arange(fabric.num_racks) * fabric.hosts_per_rack * fabric.nics_per_host
    arcs = core_arcs(path_arcs(fabric, nic_of_rack[comm.src_rtsw[m]],
                               nic_of_rack[comm.dst_rtsw[m]], q))  # fmt: skip
    alive = path_alive(arcs, cap)
    return m[alive], q[alive], arcs[alive]


def _path_lp(fabric: Fabric, health: LinkHealth, comm: Commodities) -> float:
    """The path-based min-MLU LP, solved with GLOP (exact simplex)."""
    cap = health.arc_capacity(fabric)
    m, _, arcs = _alive_paths(fabric, health, comm)
    n_x = m.size
    rows_c, cols_c = np.nonzero(arcs >= 0)
    arc = arcs[rows_c, cols_c]
    used, arc_row = np.unique(arc, return_inverse=True)
    n_m = len(comm)
    matrix = sp.csr_matrix(
        (
            np.concatenate([np.ones(n_x), comm.demand[m[rows_c]], -cap[used]]),
            (
                np.concatenate([m, n_m + arc_row, n_m + np.arange(used.size)]),
                np.concatenate([np.arange(n_x), rows_c, np.full(used.size, n_x)]),
            ),
        ),
        shape=(n_m + used.size, n_x + 1),
    )
    obj = np.zeros(n_x + 1)
    obj[-1] = 1.0
    model = mb.Model()
    model.helper.fill_model_from_sparse_data(
        np.zeros(n_x + 1), np.full(n_x + 1, np.inf), obj,
        np.concatenate([np.ones(n_m), np.full(used.size, -np.inf)]),
        np.concatenate([np.ones(n_m), np.zeros(used.size)]), matrix,
    )  # fmt: skip
    model.minimize(model.var_from_index(n_x))
    solver = mb.Solver("glop")
    solver.set_time_limit_in_seconds(30.0)
    assert solver.solve(model) == mb.SolveStatus.OPTIMAL
    return float(solver.objective_value)


def test_aggregates_by_rack_pair_sorted(tiny: Fabric) -> None:
    # NICs 0-3 rack p0-r0, 4-7 p0-r1, 8-11 p1-r0, 12-15 p1-r1
    flows = FlowSet.build([9, 0, 1, 2, 5, 3], [4, 8, 12, 3, 1, 13], [10.0, 1, 2, 4, 8, 16])
    comm = commodities(tiny, flows)
    assert comm.src_rtsw.tolist() == [0, 0, 1, 2]
    assert comm.dst_rtsw.tolist() == [2, 3, 0, 1]
    assert comm.cls.tolist() == [CROSS_POD, CROSS_POD, SAME_POD, CROSS_POD]
    assert comm.demand.tolist() == [1.0, 18.0, 8.0, 10.0]
    assert comm.flow_comm.tolist() == [3, 0, 1, -1, 2, 1]
    assert comm.src_pod(tiny).tolist() == [0, 0, 0, 1]
    assert comm.dst_pod(tiny).tolist() == [1, 1, 0, 0]


def test_same_rack_only_and_empty(tiny: Fabric) -> None:
    comm = commodities(tiny, FlowSet.build([0, 1], [2, 3], 100.0))
    assert len(comm) == 0 and comm.flow_comm.tolist() == [-1, -1]
    assert len(commodities(tiny, FlowSet.empty())) == 0


def test_demand_is_conserved_and_order_independent(small: Fabric) -> None:
    rng = np.random.default_rng(3)
    src = rng.integers(0, small.num_nics, 500)
    dst = (src + rng.integers(1, small.num_nics, 500)) % small.num_nics
    demand = rng.uniform(1, 400, 500)
    comm = commodities(small, FlowSet.build(src, dst, demand))
    leaves = comm.flow_comm >= 0
    assert comm.demand.sum() == pytest.approx(demand[leaves].sum())
    key = comm.src_rtsw * small.num_racks + comm.dst_rtsw
    assert (np.diff(key) > 0).all()
    perm = rng.permutation(500)
    again = commodities(small, FlowSet.build(src[perm], dst[perm], demand[perm]))
    assert np.array_equal(again.src_rtsw, comm.src_rtsw)
    assert np.allclose(again.demand, comm.demand)
    assert np.array_equal(again.flow_comm, comm.flow_comm[perm])


def test_path_oracle_hand_cases() -> None:
    """The oracle itself reproduces the hand-derived optima of a 2-rack pod."""
    pod2 = build(ClosSpec(pods=1, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
                          ctsws_per_pod=2))  # fmt: skip
    comm = commodities(pod2, FlowSet.build([0, 1, 2, 3], [4, 5, 6, 7], 400.0))
    up = LinkHealth.all_up(pod2)
    assert _path_lp(pod2, up, comm) == pytest.approx(2.0)
    link = pod2.rack_link(0, 1)
    assert _path_lp(pod2, up.down([link]), comm) == pytest.approx(4.0)
    assert _path_lp(pod2, up.with_factors({link: 0.5}), comm) == pytest.approx(1600 / 600)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Fabric, LinkHealth, FlowSet]:
    name = draw(st.sampled_from(["tiny", "wide"]))
    fabric = build(PRESETS[name])
    n = draw(st.integers(1, 12))
    src = np.array(draw(st.lists(st.integers(0, fabric.num_nics - 1), min_size=n, max_size=n)))
    step = np.array(draw(st.lists(st.integers(1, fabric.num_nics - 1), min_size=n, max_size=n)))
    demand = draw(st.lists(st.sampled_from([50.0, 100.0, 400.0]), min_size=n, max_size=n))
    links = st.integers(fabric.rack_base, fabric.num_links - 1)
    factors = draw(st.dictionaries(links, st.sampled_from([0.0, 0.25, 0.5]), max_size=3))
    health = LinkHealth.all_up(fabric).with_factors(factors)
    return fabric, health, FlowSet.build(src, (src + step) % fabric.num_nics, demand)


@settings(max_examples=40, deadline=None)
@given(_cases())
def test_layered_lp_equals_path_lp(case: tuple[Fabric, LinkHealth, FlowSet]) -> None:
    fabric, health, flows = case
    comm = commodities(fabric, flows)
    sol = solve_lp(fabric, health, comm, backend="glop")
    if len(comm) == 0:
        assert sol.mlu == 0.0
        return
    m, _, _ = _alive_paths(fabric, health, comm)
    unroutable = np.flatnonzero(np.bincount(m, minlength=len(comm)) == 0)
    assert sol.unroutable.tolist() == unroutable.tolist()
    keep = np.setdiff1d(np.arange(len(comm)), unroutable)
    if keep.size == 0:
        return
    sub = Commodities(comm.src_rtsw[keep], comm.dst_rtsw[keep], comm.cls[keep],
                      comm.demand[keep], comm.flow_comm)  # fmt: skip
    assert sol.mlu == pytest.approx(_path_lp(fabric, health, sub), rel=1e-6, abs=1e-9)


def test_path_shares_respect_capacities(tiny: Fabric) -> None:
    """Loading every arc with the expanded path shares stays within mlu * capacity."""
    flows = FlowSet.build(
        [0, 1, 2, 3, 4, 12], [8, 9, 10, 11, 0, 5], [400.0, 400, 200, 100, 400, 50]
    )
    health = LinkHealth.all_up(tiny).down([tiny.agg_link(0, 1, 0)])
    comm = commodities(tiny, flows)
    sol = solve_lp(tiny, health, comm, backend="glop")
    m, path, share = sol.path_shares(tiny, comm, min_share=0.0)
    nic_of_rack = np.arange(tiny.num_racks) * tiny.hosts_per_rack * tiny.nics_per_host
    arcs = core_arcs(path_arcs(tiny, nic_of_rack[comm.src_rtsw[m]],
                               nic_of_rack[comm.dst_rtsw[m]], path))  # fmt: skip
    weight = np.repeat(comm.demand[m] * share, arcs.shape[1])
    flat = arcs.reshape(-1)
    load = np.bincount(flat[flat >= 0], weights=weight[flat >= 0], minlength=tiny.num_arcs)
    cap = health.arc_capacity(tiny)
    assert (load[cap == 0] == 0).all()
    assert (load <= sol.mlu * cap + 1e-6).all()
    assert np.allclose(np.bincount(m, weights=share, minlength=len(comm)), 1.0)
