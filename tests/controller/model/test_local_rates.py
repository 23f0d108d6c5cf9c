"""Local max-min refills (controller.model.local_rates) against filling the whole plane."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.model import kernels
from controller.model.local_rates import TOL, Plane, arcs_csr
from controller.model.rates import max_min_rates


@st.composite
def planes(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """Rows on up to 4 distinct arcs, capacities, demands, weights, and a change: some rows
    on other paths (or none), some arcs at a lower capacity (or dead)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n, num = draw(st.integers(1, 80)), draw(st.integers(2, 30))

    def paths(k: int) -> np.ndarray:
        out = np.full((k, 4), -1, np.int64)
        for i in range(k):
            u = np.unique(rng.integers(-1, num, size=4))
            u = u[u >= 0]
            out[i, : u.size] = u
        return out

    arcs = paths(n)
    cap = rng.choice([1.0, 2.0, 3.5, 10.0, 400.0 / 3], size=num)
    demand = rng.choice([0.5, 1.0, 2.0, 1 / 3, 12.9], size=n)
    weight = rng.choice([1.0, 4.0, 16.0], size=n)
    changed = np.unique(rng.integers(0, n, size=draw(st.integers(0, 6))))
    lost = np.unique(rng.integers(0, num, size=draw(st.integers(0, 3))))
    cap2 = cap.copy()
    cap2[lost] = rng.choice([0.0, 0.25, 0.5], size=lost.size) * cap[lost]
    return arcs, cap, demand, weight, changed, paths(changed.size), cap2, lost


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(planes())
def test_a_local_refill_is_the_max_min_allocation(case: tuple[np.ndarray, ...]) -> None:
    arcs, cap, demand, weight, changed, new, cap2, lost = case
    plane = Plane(arcs, demand, weight, cap)
    assert np.array_equal(plane.rate, max_min_rates(arcs, cap, demand, weight=weight))
    rows, rates = plane.after(cap2, changed, new, lost)
    got = plane.rate.copy()
    got[rows] = rates
    moved = arcs.copy()
    moved[changed] = new
    want = max_min_rates(moved, cap2, demand, weight=weight)
    np.testing.assert_allclose(got, want, rtol=10 * TOL, atol=1e-9)
    # with no room for a local refill the whole plane is filled again, on the offered load
    # counted from the plane's and the changed rows': the same allocation
    rows, rates = plane.after(cap2, changed, new, lost, most=0)
    whole = plane.rate.copy()
    whole[rows] = rates
    np.testing.assert_allclose(whole, want, rtol=10 * TOL, atol=1e-9)
    # a whole refill regroups a copy of the plane's groups: a second change (the same rows
    # moved, at the capacity before) starts from the plane as it was
    rows, rates = plane.after(cap, changed, new, np.zeros(0, np.int64), most=0)
    again = plane.rate.copy()
    again[rows] = rates
    np.testing.assert_allclose(again, max_min_rates(moved, cap, demand, weight=weight),
                               rtol=10 * TOL, atol=1e-9)  # fmt: skip
    rows, rates = plane.after(cap2, changed, new, lost, most=0)
    assert np.array_equal(rows, np.union1d(np.flatnonzero(whole != plane.rate), changed))
    assert np.array_equal(rates, whole[rows])
    # weights that are not whole QP counts (group sums would not be exact): filled anew
    odd = Plane(arcs, demand, weight * 0.7, cap)
    rows, rates = odd.after(cap2, changed, new, lost, most=0)
    whole = odd.rate.copy()
    whole[rows] = rates
    np.testing.assert_allclose(whole, max_min_rates(moved, cap2, demand, weight=weight * 0.7),
                               rtol=10 * TOL, atol=1e-9)  # fmt: skip
    # the plane is unchanged: the next change starts from the same rates
    assert np.array_equal(plane.rate, max_min_rates(arcs, cap, demand, weight=weight))


def test_a_whole_refill_grows_the_groups_it_regroups_into() -> None:
    """Thousands of rows on distinct over-capacity arc pairs, some of demand 0, then every
    row moved at once: the groups outgrow their arrays and table while regrouping (the
    growth path of kernels.regroup), and the rates are still the max-min ones."""
    rng = np.random.default_rng(7)
    n, num = 3000, 400
    arcs = np.full((n, 3), -1, np.int64)
    arcs[:, :2] = np.sort(rng.choice(num, size=(n, 2)), axis=1)
    arcs[arcs[:, 0] == arcs[:, 1], 1] = -1
    demand = rng.choice([0.0, 1.0, 2.5, 4.0], size=n)
    weight = rng.choice([1.0, 16.0], size=n)
    cap = rng.choice([1.0, 3.0], size=num)
    plane = Plane(arcs, demand, weight, cap)
    changed = np.arange(n)
    new = np.array([np.sort(rng.choice(num, 3, replace=False)) for _ in range(n)])
    rows, rates = plane.after(cap, changed, new, np.zeros(0, np.int64), most=0)
    got = plane.rate.copy()
    got[rows] = rates
    np.testing.assert_allclose(got, max_min_rates(new, cap, demand, weight=weight),
                               rtol=10 * TOL, atol=1e-9)  # fmt: skip


def test_nothing_changed_refills_nothing() -> None:
    arcs = np.array([[0, 1, -1], [1, 2, -1]])
    plane = Plane(arcs, np.array([2.0, 2.0]), np.ones(2), np.array([1.0, 1.0, 1.0]))
    rows, rates = plane.after(plane.cap, np.zeros(0, np.int64), np.zeros((0, 3), np.int64),
                              np.zeros(0, np.int64))  # fmt: skip
    assert rows.size == 0 and rates.size == 0
    assert np.allclose(plane.rate, [0.5, 0.5])


def test_a_dead_arc_stops_its_rows_and_frees_the_others() -> None:
    """Two rows share arc 1 (capacity 1): 0.5 each; arc 0 dies under row 0: row 0 gets 0
    and row 1 the whole arc 1."""
    arcs = np.array([[0, 1], [1, 2]])
    plane = Plane(arcs, np.array([2.0, 2.0]), np.ones(2), np.array([1.0, 1.0, 1.0]))
    cap = np.array([0.0, 1.0, 1.0])
    rows, rates = plane.after(cap, np.zeros(0, np.int64), np.zeros((0, 2), np.int64),
                              np.array([0]))  # fmt: skip
    got = plane.rate.copy()
    got[rows] = rates
    assert np.allclose(got, [0.0, 1.0])


def test_rows_per_arc() -> None:
    start, rows = arcs_csr(np.array([[2, 0], [0, -1], [1, 2]]), 4)
    assert start.tolist() == [0, 2, 3, 5, 5]
    assert rows.tolist() == [0, 1, 2, 0, 2]


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(planes())
def test_a_plane_moved_is_the_plane_indexed_anew(case: tuple[np.ndarray, ...]) -> None:
    """`moved` (rates given, not filled) indexes the rows as a plane built on the moved
    paths does, and carries the rates the refill gave: the next change starts right."""
    arcs, cap, demand, weight, changed, new, _, _ = case
    plane = Plane(arcs, demand, weight, cap)
    rows, rates = plane.after(cap, changed, new, np.zeros(0, np.int64))
    got = plane.moved(changed, new, rows, rates)
    moved = arcs.copy()
    moved[changed] = new
    fresh = Plane(moved, demand, weight, cap)
    assert np.array_equal(got.arcs, fresh.arcs)
    assert np.array_equal(got.start, fresh.start) and np.array_equal(got.rows, fresh.rows)
    assert np.array_equal(got.load, fresh.load)
    np.testing.assert_allclose(got.rate, fresh.rate, rtol=10 * TOL, atol=1e-9)
    np.testing.assert_allclose(got.base_sum, fresh.base_sum, rtol=10 * TOL, atol=1e-9)
    np.testing.assert_allclose(got.base_max, fresh.base_max, rtol=10 * TOL, atol=1e-9)
    assert np.array_equal(plane.arcs, arcs)  # the plane moved from is left as it was


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(planes())
def test_each_row_below_its_demand_is_indexed_by_a_bottleneck(case: tuple[np.ndarray, ...]) -> None:
    """The index the refill's check reads (kernels.bottleneck_index): every routed row below
    its demand under exactly one arc it crosses, saturated and with no row on it higher, or
    among the loose rows; the rows at their demand nowhere; each arc's top row at its top."""
    arcs, cap, demand, weight = case[:4]
    p = Plane(arcs, demand, weight, cap)
    start, rows, loose, top_row = kernels.bottleneck_index(
        p.arcs, p.rate, p.demand, p.weight, p.cap, p.base_sum, p.base_max, p.start, p.rows, TOL)
    below = np.flatnonzero((p.rate < p.demand * (1 - TOL)) & (p.arcs >= 0).any(axis=1))
    assert np.array_equal(np.sort(np.concatenate([rows, loose])), below)
    level = p.rate / p.weight
    for e in range(cap.size):
        on = rows[start[e] : start[e + 1]]
        assert np.array_equal(on, np.sort(on))
        assert all(e in p.arcs[g] for g in on)
        if on.size:
            assert p.base_sum[e] >= cap[e] * (1 - TOL) - TOL
            assert (level[on] >= p.base_max[e] * (1 - TOL)).all()
        crossing = p.rows[p.start[e] : p.start[e + 1]]
        if crossing.size:
            assert top_row[e] in crossing and level[top_row[e]] == p.base_max[e]
        else:
            assert top_row[e] == -1
    # a max-min allocation leaves no row without a bottleneck (but for rounding)
    assert loose.size == 0
