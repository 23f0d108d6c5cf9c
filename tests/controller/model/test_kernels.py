"""The model's compiled loops equal, to the bit, the numpy forms they stand for."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from controller.model import kernels
from controller.model.assignment import Assignment
from controller.model.clos import ClosSpec, build
from controller.model.flows import FlowSet
from controller.model.hashing import (
    chooser,
    hashed_arcs,
    hashed_load,
    hashed_routes,
    route,
    split_qps,
)
from controller.model.health import LinkHealth
from controller.model.rates import _parent_shares, max_min_rates


def _numpy_fill(arcs, capacity, demand, rel_tol, weight):  # type: ignore[no-untyped-def]
    """The progressive filling of controller.model.rates as numpy rounds (its docstring)."""
    rates = np.zeros(arcs.shape[0])
    valid = arcs >= 0
    used = np.flatnonzero(np.bincount(arcs[valid], minlength=capacity.size))
    num_links = used.size
    remaining = np.maximum(capacity[used], 0.0)
    to_local = np.full(capacity.size + 1, num_links, dtype=np.int64)
    to_local[used] = np.arange(num_links)
    active = np.flatnonzero(valid.any(axis=1) & (demand > 0))
    lk, wt = to_local[arcs][active], weight[active]
    dm = demand[active] / wt
    slack = 1.0 + rel_tol
    while active.size:
        flat = lk.ravel()
        count = np.bincount(flat, weights=np.repeat(wt, lk.shape[1]), minlength=num_links + 1)
        count = count[:num_links]
        share = np.full(num_links + 1, np.inf)
        np.divide(remaining, count, out=share[:num_links], where=count > 0)
        ceiling = np.minimum(share[lk].min(axis=1), dm)
        below = np.repeat(ceiling * slack, lk.shape[1]) < share[flat]
        bottleneck = np.bincount(flat, weights=below, minlength=num_links + 1) == 0
        bottleneck[num_links] = False
        freeze = (dm <= ceiling * slack) | bottleneck[lk].any(axis=1)
        rate = ceiling[freeze] * wt[freeze]
        rates[active[freeze]] = rate
        fl = lk[freeze]
        used_cap = np.bincount(fl.ravel(), weights=np.repeat(rate, fl.shape[1]),
                               minlength=num_links + 1)  # fmt: skip
        remaining = np.maximum(remaining - used_cap[:num_links], 0.0)
        keep = ~freeze
        active, lk, dm, wt = active[keep], lk[keep], dm[keep], wt[keep]
    return rates


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 300), st.integers(2, 40), st.integers(1, 6))
def test_progressive_filling_equals_its_numpy_rounds(seed: int, flows: int, links: int,
                                                     hops: int) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    arcs = rng.integers(-1, links, size=(flows, hops))
    capacity = rng.choice([0.0, 50.0, 100.0, 400.0], size=links) * rng.random(links).round(1)
    demand = rng.choice([0.0, 25.0, 100.0, 400.0, 1e-3], size=flows)
    weight = rng.integers(1, 17, size=flows).astype(float)
    full = np.empty(flows)
    kernels.fill(arcs, capacity, demand, weight, 1.0 + 1e-9, full)
    want = _numpy_fill(arcs, capacity, demand, 1e-9, weight)
    assert full.tobytes() == want.tobytes()
    # over the arcs offered more than their capacity only, equal subflows grouped (the
    # default): the same rates
    reduced = max_min_rates(arcs, capacity, demand, weight=weight)
    assert np.allclose(reduced, want, rtol=1e-9, atol=1e-12)


SHAPES = st.builds(
    lambda p, r, h, n, c, k, a, m: ClosSpec(
        name="k", pods=p, racks_per_pod=r, hosts_per_rack=h, nics_per_host=n,
        ctsws_per_pod=c, rack_links=k, atsws_per_plane=a, agg_links=m, taper=1.0,
    ),  # fmt: skip
    st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2),
    st.integers(1, 4), st.integers(1, 2), st.integers(1, 3), st.integers(1, 2),
)


@settings(max_examples=150, deadline=None)
@given(SHAPES, st.integers(0, 2**64 - 1), st.integers(1, 17), st.sampled_from(["eecmp", "wcmp"]),
       st.data())  # fmt: skip
def test_the_compiled_walk_equals_the_hop_by_hop_numpy_walk(
    spec: ClosSpec, seed: int, qps: int, kind: str, data: st.DataObject
) -> None:
    fabric = build(spec)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = data.draw(st.integers(1, 60))
    flows = FlowSet.build(rng.integers(0, fabric.num_nics, n), rng.integers(0, fabric.num_nics, n),
                          100.0)  # fmt: skip
    factor = rng.choice([0.0, 0.1, 0.5, 0.7, 1.0], size=fabric.num_links,
                        p=[0.25, 0.05, 0.1, 0.05, 0.55])  # fmt: skip
    health = LinkHealth(factor)
    sub, parent, qp = split_qps(flows, qps)
    want = route(fabric, sub, health, chooser(kind, fabric, health, seed, sub, qp))
    path, arcs = hashed_routes(kind, fabric, flows, health, seed, qps)
    assert path.tobytes() == want.tobytes()
    assert arcs.tobytes() == Assignment(sub, want).arcs(fabric).tobytes()
    _, arcs2, parent2 = hashed_arcs(kind, fabric, flows, health, seed, qps)
    assert arcs2.tobytes() == arcs.tobytes() and parent2.tobytes() == parent.tobytes()
    # the load form: what those rows offer each arc, summed in the same order
    load = hashed_load(kind, fabric, flows, health, seed, qps)
    want_load = np.zeros(fabric.num_arcs)
    valid = arcs >= 0
    for row, hop in zip(*np.nonzero(valid), strict=True):
        want_load[arcs[row, hop]] += sub.demand[row]
    assert load.tobytes() == want_load.tobytes()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 200), st.integers(1, 50),
       st.sampled_from(["striped", "summed"]))  # fmt: skip
def test_parent_sums_equal_their_numpy_form(seed: int, rows: int, parents: int,
                                            model: str) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    arcs = rng.integers(-1, 12, size=(rows, 4))
    cap = rng.choice([0.0, 100.0, 400.0], size=12)
    demand = rng.choice([0.0, 25.0, 100.0], size=rows)
    w = rng.integers(1, 5, size=rows).astype(float)
    parent = rng.integers(0, parents, size=rows)
    share, p_rate, p_demand, p_routed, p_dead, _, _ = _parent_shares(arcs, cap, demand, parent,
                                                                     parents, w, model)  # fmt: skip
    rates = max_min_rates(arcs, cap, demand, weight=w if model == "striped" else None)
    valid = arcs >= 0
    if model == "striped":
        slowest = np.full(parents, np.inf)
        np.minimum.at(slowest, parent, rates / w)
        qps = np.bincount(parent, weights=w, minlength=parents)
        with np.errstate(invalid="ignore"):  # inf x 0 for a parent without rows
            want_rate = np.where(np.isfinite(slowest), slowest * qps, 0.0)
    else:
        want_rate = np.bincount(parent, weights=rates, minlength=parents)
    want_demand = np.bincount(parent, weights=demand, minlength=parents)
    assert p_rate.tobytes() == want_rate.tobytes()
    assert p_demand.tobytes() == want_demand.tobytes()
    assert (p_routed == (np.bincount(parent, valid.any(axis=1), minlength=parents) > 0)).all()
    dead = (valid & (cap[np.maximum(arcs, 0)] <= 0)).any(axis=1)
    assert (p_dead == (np.bincount(parent, dead, minlength=parents) > 0)).all()
    assert share.tobytes() == np.divide(want_rate, want_demand, out=np.ones(parents),
                                        where=want_demand > 0).tobytes()  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 200), st.integers(1, 50), st.booleans())
def test_distinct_parents_per_arc_equal_a_set_count(seed: int, rows: int, parents: int,
                                                     grouped: bool) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    arcs = rng.integers(-1, 12, size=(rows, 4))
    parent = rng.integers(0, parents, size=rows)
    if grouped:
        parent = np.sort(parent)
    counted = rng.random(12) < 0.7
    order = np.argsort(parent, kind="stable")
    out = np.zeros(12, np.int64)
    kernels.parents_per_arc(arcs, parent, order, counted, out)
    want = [len({int(parent[i]) for i, h in zip(*np.nonzero(arcs == e), strict=True)})
            if counted[e] else 0 for e in range(12)]  # fmt: skip
    assert out.tolist() == want


@settings(max_examples=80, deadline=None)
@given(SHAPES, st.integers(0, 2**32 - 1), st.sampled_from(["eecmp", "wcmp"]), st.data())
def test_the_carried_plane_walks_every_row_as_the_entries_and_hashes_do(
    spec: ClosSpec, seed: int, kind: str, data: st.DataObject
) -> None:
    """Rows towards hosts no entry steers are hashed by the compiled kernel; the plane is
    the one a hop-by-hop walk of every QP through the entries gives, arc for arc."""
    from controller.model.dataplane import carried, overrides_of
    from controller.model.flows import ALL_QPS
    from controller.model.hashing import chooser, overriding
    from controller.solver.certificate import CertifyOptions
    from controller.solver.solve import SolveOptions, solve

    fabric = build(spec)
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, 40))
    src, dst = rng.integers(0, fabric.num_nics, n), rng.integers(0, fabric.num_nics, n)
    ok = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    assume(ok.any())
    flows = FlowSet.build(src[ok], dst[ok], rng.choice([50.0, 100.0], int(ok.sum())))
    health = LinkHealth(rng.choice([0.0, 0.5, 1.0], size=fabric.num_links, p=[0.1, 0.1, 0.8]))
    off_opts = SolveOptions(certify=CertifyOptions(enabled=False), job_rounds=0)
    res = solve(fabric, health, flows, options=off_opts)
    path = res.assignment.path.copy()
    path[rng.random(path.size) < 0.5] = -1  # some rows ride the defaults
    asg = Assignment(res.assignment.flows, path)
    parent = np.asarray(res.parent)
    qps = data.draw(st.integers(1, 5))
    plane = carried(fabric, health, asg, parent, kind=kind, seed=seed, qps=qps)
    # the hop-by-hop walk of every QP of every row without a path
    rows = asg.flows
    off = np.flatnonzero(path == -1)
    count = np.where(rows.qp[off] == ALL_QPS, qps, 1)
    row = np.repeat(off, count)
    first = np.cumsum(count) - count
    within = np.arange(row.size) - np.repeat(first, count)
    qp = np.where(np.repeat(rows.qp[off] == ALL_QPS, count), within, rows.qp[row])
    sub = FlowSet(rows.src_nic[row], rows.dst_nic[row], rows.demand[row], rows.job[row],
                  rows.job_ids, qp)  # fmt: skip
    base = chooser(kind, fabric, health, seed, sub, qp)
    if (path != -1).any():
        base = overriding(fabric, sub, qp, overrides_of(fabric, asg), base)
    want = Assignment(sub, route(fabric, sub, health, base)).arcs(fabric)
    te = int((path != -1).sum())
    assert plane.arcs[te:].tobytes() == want.tobytes()
    assert plane.walked == row.size


@settings(max_examples=120, deadline=None)
@given(SHAPES, st.integers(0, 2**32 - 1), st.sampled_from(["eecmp", "wcmp"]),
       st.sampled_from(["striped", "summed"]), st.data())  # fmt: skip
def test_hashed_flows_walked_where_needed_share_as_their_rows_would(
    spec: ClosSpec, seed: int, kind: str, model: str, data: st.DataObject
) -> None:
    """Whole flows kept as hashing.Hashed (walked by the kernels, never a row per QP) get
    the shares, loads and flags the same QPs get as rows after the others, to the bit."""
    from controller.model.hashing import Hashed
    from controller.model.rates import flow_shares, flow_shares_crossing, offered_load

    fabric = build(spec)
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, 60))
    flows = FlowSet.build(rng.integers(0, fabric.num_nics, n), rng.integers(0, fabric.num_nics, n),
                          rng.choice([0.0, 50.0, 100.0, 400.0 / 3], n))  # fmt: skip
    health = LinkHealth(rng.choice([0.0, 0.3, 1.0], size=fabric.num_links, p=[0.15, 0.1, 0.75]))
    qps = data.draw(st.integers(1, 6))
    cut = data.draw(st.integers(0, n))  # flows [0, cut) as rows, the rest hashed
    sub, arcs, parent = hashed_arcs(kind, fabric, flows, health, seed, qps)
    want = flow_shares(fabric, health, arcs, sub, parent, num_parents=n, model=model)
    rows = np.arange(cut * qps)
    rest = np.arange(cut, n)
    hashed = Hashed(kind, flows.take(rest), rest, seed, qps)
    got = flow_shares(fabric, health, arcs[rows], sub.take(rows), parent[rows], num_parents=n,
                      model=model, hashed=hashed)  # fmt: skip
    assert got.tobytes() == want.tobytes()
    load = offered_load(fabric, health, arcs[rows], sub.take(rows), hashed)
    assert load.tobytes() == offered_load(fabric, health, arcs, sub).tobytes()
    mask = rng.random(fabric.num_arcs) < 0.2
    crossing = (mask[np.maximum(arcs, 0)] & (arcs >= 0)).any(axis=1).reshape(n, qps).any(axis=1)
    assert (hashed.crossing(fabric, health, mask) == crossing[cut:]).all()
    # the same answer read from the fill's groups, for arcs offered more than their capacity
    over = mask & (load > np.maximum(health.arc_capacity(fabric), 0.0))
    share, crossed = flow_shares_crossing(fabric, health, arcs[rows], sub.take(rows),
                                          parent[rows], num_parents=n, hashed=hashed, load=load,
                                          mask=over, model=model)  # fmt: skip
    assert share.tobytes() == want.tobytes()
    crossing = (over[np.maximum(arcs, 0)] & (arcs >= 0)).any(axis=1).reshape(n, qps).any(axis=1)
    assert (crossed == crossing[cut:]).all()
    back, of = hashed.arcs_of(fabric, health, np.arange(rest.size))
    assert back.tobytes() == arcs[cut * qps :].tobytes() and (rest[of] == parent[cut * qps :]).all()
