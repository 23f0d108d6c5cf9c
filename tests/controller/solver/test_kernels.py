"""The kernels' path scoring (kernels._score, which the placement, the local search and the
relief pass share) chooses exactly what the rule written as whole-array numpy chooses:
least bottleneck with the flow's own load taken off, ties to the least sum, then the first
path; paths the flow's entry mates hold (its own use taken off) are not allowed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.clos import PRESETS, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.solver.candidates import candidates
from controller.solver.greedy import UNROUTED, _Mates, core_load
from controller.solver.kernels import _score

_TOL = 1e-9


def _reference(cand, chosen, load, inv, demand, mates, path, rows):  # type: ignore[no-untyped-def]
    """The rule written as whole-array numpy, one class at a time."""
    best_p = np.full(rows.size, UNROUTED, np.int64)
    best_w = np.full(rows.size, np.inf)
    for cls, off in cand.offset.items():
        sel = np.flatnonzero(cand.cls[rows] == cls)
        if not sel.size or not off.shape[1]:
            continue
        f = rows[sel]
        h = off.shape[1]
        arcs = cand.base[f, None, :h] + off[None]
        d = demand[f][:, None, None]
        here = load[arcs]
        here = np.where(arcs == chosen[f, None, :h], here - d, here)
        util = (here + d) * inv[arcs]
        worst, total = util.max(axis=-1), util[..., 0].copy()
        for k in range(1, h):
            total += util[..., k]
        g = mates.group[f]
        if (g >= 0).any():
            span = int(mates.span[cls])
            forced = mates.forced[np.maximum(g, 0)]
            up = path[f] // span
            alone = mates.count[np.maximum(g, 0), up] == 1
            forced[np.flatnonzero(alone), up[alone]] = -1  # its own use taken off
            forced[g < 0] = -1
            p = np.arange(off.shape[0])
            held = forced[:, p // span]
            worst = np.where((held < 0) | (held == p % span), worst, np.inf)
        best = worst.min(axis=1)
        tied = worst <= best[:, None] + _TOL
        p = np.argmin(np.where(tied, total, np.inf), axis=1)
        alive = np.isfinite(best)
        best_p[sel[alive]] = p[alive]
        best_w[sel] = best
    return best_p, best_w


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["tiny", "small"]), st.integers(2, 80), st.integers(0, 10_000),
       st.integers(0, 3))  # fmt: skip
def test_score_rows_agrees_with_the_numpy_rule(spec, n_flows, seed, failures):
    fabric = build(PRESETS[spec])
    rng = np.random.default_rng(seed)
    # few sources and destinations, so many flows share a source RTSW and destination host
    # (entry mates), some of them alone on their uplink
    pool = rng.choice(fabric.num_nics, 6, replace=False)
    src = rng.choice(pool, n_flows)
    dst = rng.choice(np.setdiff1d(np.arange(fabric.num_nics), pool)[:6], n_flows)
    same = fabric.host_of_nic(src) == fabric.host_of_nic(dst)
    dst[same] = (dst[same] + fabric.nics_per_host) % fabric.num_nics
    # few distinct demands and loads, so ties (and the tie rules) are common
    flows = FlowSet.build(src, dst, rng.choice([50.0, 100.0, 400.0], n_flows))
    links = fabric.rack_base + rng.choice(fabric.num_rack_links, failures, replace=False)
    health = LinkHealth.all_up(fabric).down(links.tolist())
    cand = candidates(fabric, flows)
    n_paths = np.array([cand.offset[c].shape[0] for c in cand.cls.tolist()])
    path = (rng.integers(0, 1 << 30, n_flows) % n_paths).astype(np.int64)
    chosen = cand.all_chosen(path)
    # the flows' own load, and some from elsewhere
    load = core_load(fabric, flows, chosen) + rng.choice([0.0, 100.0, 400.0], fabric.num_arcs)
    cap = health.arc_capacity(fabric)
    with np.errstate(divide="ignore"):
        inv = np.where(cap > 0, 1.0 / cap, np.inf)
    mates = _Mates(fabric, flows, cand)
    mates.fill(cand.cls, path)
    rows = rng.permutation(n_flows)[: rng.integers(1, n_flows + 1)]
    want = _reference(cand, chosen, load, inv, flows.demand, mates, path, rows)
    buf = cand.kernel_args[2].shape[0]
    for i, f in enumerate(rows.tolist()):
        c = int(cand.cls[f])
        if not cand.offset[c].shape[1]:  # same rack: no hops, nothing to score
            assert want[0][i] == UNROUTED
            continue
        p, worst = _score(f, c, cand.kernel_args, mates.kernel_args, chosen, load, inv,
                          flows.demand, path, np.empty(buf), np.empty(buf))  # fmt: skip
        assert (p, worst) == (want[0][i], want[1][i])
