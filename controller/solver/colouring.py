"""Collision-free path assignment by bipartite edge colouring (Konig's theorem).

Flows are edges of a bipartite multigraph: source RTSW on the left, destination RTSW on the
right. A colour is an uplink slot (c, k, s): CTSW index c, parallel member k, slot s < S where
S flows of the (equal) demand fit on one link. A flow coloured (c, k, s) goes up on rack link
(src, c, k) and down on rack link (dst, c, k). A proper colouring puts at most S flows on every
RTSW<->CTSW arc of every pod. Intra-pod and cross-pod flows are coloured together, because a
cross-pod path uses the same CTSW index c in both pods.

Algorithm (`edge_colouring`):

1. Edges beyond a vertex's number of usable colours cannot be coloured; they are set aside
   (latest edge index first) and reported as failures.
2. Pad the graph to a Delta-regular multigraph with dummy edges between vertices that have
   spare colours (Delta = number of colours).
3. For each colour in turn, take a maximum matching of the pairs allowed for that colour
   (Hopcroft-Karp in scipy's C code). A Delta-regular bipartite multigraph always has a
   perfect matching, and removing one leaves a (Delta-1)-regular one, so without forbidden
   colours this peels off exactly Delta colour classes. A forbidden colour at a vertex (a down
   or degraded uplink) may only be matched there through a dummy edge.
4. Any real edge left over (only possible with forbidden colours) is retried with Kempe-chain
   recolouring: flip an (a, b)-alternating path so that a colour free at both ends appears.
   What still fails is returned as colour -1 for the caller to place another way.

Cross-pod flows then need an ATSW j and agg members. Within plane c this is again a bipartite
multigraph (source pod, destination pod); splitting every pod vertex into copies of degree at
most A*L and colouring with the A*L colours (j, m) gives an equitable colouring: every alive
CTSW->ATSW and ATSW->CTSW arc of a pod carries ceil(d/alive) or fewer of its d flows. Up and
down agg members are equal (mu == md).

Everything is deterministic: ties are broken by edge index and colour index.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import rank_within
from controller.model.paths import CROSS_POD, SAME_RACK, path_index
from controller.solver.problem import Problem

_EPS = 1e-9


def edge_colouring(
    left: np.ndarray,
    right: np.ndarray,
    num_colours: int,
    *,
    num_left: int | None = None,
    num_right: int | None = None,
    forbid_left: np.ndarray | None = None,
    forbid_right: np.ndarray | None = None,
) -> np.ndarray:
    """Properly colour the edges (left[e], right[e]) of a bipartite multigraph.

    `forbid_left[u, x]` / `forbid_right[v, x]` forbid colour x at a vertex. Returns an int64
    colour per edge, -1 where no colour could be given. With no forbidden colours and every
    degree <= num_colours, every edge is coloured (Konig).
    """
    left = np.asarray(left, np.int64).reshape(-1)
    right = np.asarray(right, np.int64).reshape(-1)
    n_edges = left.size
    colour = np.full(n_edges, -1, np.int64)
    if n_edges == 0 or num_colours <= 0:
        return colour
    nl = int(num_left if num_left is not None else left.max() + 1)
    nr = int(num_right if num_right is not None else right.max() + 1)
    n = max(nl, nr)
    delta = int(num_colours)
    fl = np.zeros((n, delta), bool)
    fr = np.zeros((n, delta), bool)
    if forbid_left is not None:
        fl[:nl] = forbid_left
    if forbid_right is not None:
        fr[:nr] = forbid_right
    fl[nl:] = True  # padding vertices only take dummy edges
    fr[nr:] = True
    avail_l = delta - fl.sum(axis=1)
    avail_r = delta - fr.sum(axis=1)

    # 1. keep at most `avail` edges per vertex (earliest edge index first)
    keep = (rank_within(left) < avail_l[left]) & (rank_within(right) < avail_r[right])
    kept = np.flatnonzero(keep)
    kl, kr = left[kept], right[kept]

    # 2. pad to a delta-regular multigraph
    def_l = delta - np.bincount(kl, minlength=n)
    def_r = delta - np.bincount(kr, minlength=n)
    dl = np.repeat(np.arange(n), def_l)
    dr = np.repeat(np.arange(n), def_r)
    pair_key = np.concatenate([kl * n + kr, dl * n + dr])
    is_real = np.r_[np.ones(kept.size, bool), np.zeros(dl.size, bool)]
    keys, inverse = np.unique(pair_key, return_inverse=True)
    real = np.bincount(inverse[is_real], minlength=keys.size)
    dummy = np.bincount(inverse[~is_real], minlength=keys.size)
    pu, pv = keys // n, keys % n
    # real edge ids grouped by pair, consumed front to back
    real_order = kept[np.argsort(inverse[: kept.size], kind="stable")]
    real_start = np.r_[0, np.cumsum(real)[:-1]]
    real_used = np.zeros(keys.size, np.int64)

    # 3. peel one (maximum) matching per colour
    for x in range(delta):
        real_ok = (real > 0) & ~fl[pu, x] & ~fr[pv, x]
        ok = real_ok | (dummy > 0)
        idx = np.flatnonzero(ok)
        if not idx.size:
            continue
        rows = pu[idx]
        indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=n))]
        graph = csr_matrix((np.ones(idx.size, np.int8), pv[idx], indptr), shape=(n, n))
        match = maximum_bipartite_matching(graph, perm_type="column")
        u = np.flatnonzero(match >= 0)
        p = np.searchsorted(keys, u * n + match[u])
        use_real = real_ok[p]
        pr = p[use_real]
        colour[real_order[real_start[pr] + real_used[pr]]] = x
        real_used[pr] += 1
        real[pr] -= 1
        dummy[p[~use_real]] -= 1

    # 4. Kempe-chain retries for what is left
    left_over = np.flatnonzero(colour < 0)
    if left_over.size:
        _kempe_fill(left, right, colour, left_over, n, delta, fl, fr)
    return colour


def _kempe_fill(
    left: np.ndarray,
    right: np.ndarray,
    colour: np.ndarray,
    todo: np.ndarray,
    n: int,
    delta: int,
    fl: np.ndarray,
    fr: np.ndarray,
) -> None:
    """Colour edges in `todo` by alternating-path flips, in place; failures stay -1."""
    at_l = np.full((n, delta), -1, np.int64)
    at_r = np.full((n, delta), -1, np.int64)
    done = np.flatnonzero(colour >= 0)
    at_l[left[done], colour[done]] = done
    at_r[right[done], colour[done]] = done
    at = (at_l, at_r)  # at[side][vertex, colour] -> edge
    forbid = (fl, fr)
    ends = (left, right)
    for e in todo.tolist():
        u, v = int(left[e]), int(right[e])
        free_u = np.flatnonzero((at_l[u] < 0) & ~fl[u])
        free_v = np.flatnonzero((at_r[v] < 0) & ~fr[v])
        if not free_u.size or not free_v.size:
            continue
        both = np.intersect1d(free_u, free_v)
        if both.size:
            x = int(both[0])
        else:
            x = -1
            for a in free_u.tolist():
                if fr[v, a]:
                    continue
                for b in free_v.tolist():
                    if fl[u, b]:
                        continue
                    path = _alternating_path(at, ends, v, a, b)
                    last_side, last_vertex, last_colour = path[-1]
                    new = b if last_colour == a else a
                    if forbid[last_side][last_vertex, new]:
                        continue
                    _flip(at, ends, colour, path, a, b)
                    x = a
                    break
                if x >= 0:
                    break
            if x < 0:
                continue
        colour[e] = x
        at_l[u, x] = e
        at_r[v, x] = e


def _alternating_path(
    at: tuple[np.ndarray, np.ndarray],
    ends: tuple[np.ndarray, np.ndarray],
    v: int,
    a: int,
    b: int,
) -> list[tuple[int, int, int]]:
    """Edges of the a/b path from right vertex v (starting with colour a), as
    (side of the vertex reached, vertex reached, colour of the edge); [(1, v, -1)] if none."""
    out = [(1, v, -1)]
    side, vertex, want = 1, v, a
    while True:
        e = int(at[side][vertex, want])
        if e < 0:
            return out
        side = 1 - side
        vertex = int(ends[side][e])
        out.append((side, vertex, want))
        want = b if want == a else a


def _flip(
    at: tuple[np.ndarray, np.ndarray],
    ends: tuple[np.ndarray, np.ndarray],
    colour: np.ndarray,
    path: list[tuple[int, int, int]],
    a: int,
    b: int,
) -> None:
    """Swap colours a and b along an alternating path, keeping the vertex tables in step."""
    edges = []
    side, vertex = path[0][0], path[0][1]
    for _, _, col in path[1:]:
        edges.append(int(at[side][vertex, col]))
        side = 1 - side
        vertex = int(ends[side][edges[-1]])
    for e in edges:
        old = int(colour[e])
        at[0][ends[0][e], old] = -1
        at[1][ends[1][e], old] = -1
    for e in edges:
        new = b if colour[e] == a else a
        colour[e] = new
        at[0][ends[0][e], new] = e
        at[1][ends[1][e], new] = e


# ---- the fabric-level colouring ------------------------------------------------------------
@dataclass(frozen=True)
class ColourOutcome:
    """Paths from the colouring; `failed` flows got no path (UNROUTED) and need a fallback."""

    assignment: Assignment
    failed: np.ndarray = field(repr=False)  # int64 flow indices
    slots: int  # flows per rack link the colouring allowed at most


def rack_slots(fabric: Fabric, arc_capacity: np.ndarray, demand: float) -> tuple[np.ndarray, ...]:
    """Flows of `demand` that fit on each (rtsw, c, k) uplink and downlink: two [R, C*K]."""
    r, ck = fabric.num_rtsws, fabric.ctsws_per_pod * fabric.rack_links
    links = fabric.rack_base + np.arange(r * ck)
    up = np.floor(arc_capacity[2 * links] / demand + _EPS).astype(np.int64).reshape(r, ck)
    down = np.floor(arc_capacity[2 * links + 1] / demand + _EPS).astype(np.int64).reshape(r, ck)
    return up, down


def _vertex_slots(slots: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """Smallest per-vertex slot cap s >= 1 with sum(min(slots, s)) >= degree; where no cap
    reaches the degree (the vertex's links down, or too few), its own largest slot count,
    beyond which a cap changes none of its colours. Found by bisection (the sum grows with
    s): a link holds capacity / demand slots, 1e8 for flows of 1 Mb/s on a 100 Tb/s link,
    too many to try one by one, and a vertex cut off must not raise every vertex's cap (the
    colours of the colouring) to the largest slot count of the fabric."""
    own = slots.max(axis=1, initial=0)
    fits = slots.sum(axis=1) >= degree
    lo = np.ones(slots.shape[0], np.int64)
    hi = np.where(fits, np.maximum(own, 1), lo)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        ok = np.minimum(slots, mid[:, None]).sum(axis=1) >= degree
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid + 1)
    return np.where(fits, lo, own)


def colour_assign(problem: Problem) -> ColourOutcome | None:
    """Colour all the problem's flows onto paths; None when not applicable (unequal
    demands, or a demand above every rack link's capacity). Flows the colouring cannot
    place are UNROUTED and listed in `failed`."""
    fabric, flows = problem.fabric, problem.flows
    n_flows = len(flows)
    path = np.full(n_flows, UNROUTED, np.int64)
    if n_flows == 0:
        return ColourOutcome(Assignment(flows, path), np.zeros(0, np.int64), 0)
    demand = float(flows.demand[0])
    if not np.all(flows.demand == demand):
        return None
    cap, cls = problem.arc_capacity, problem.cls
    sr, dr = problem.src_rack, problem.dst_rack
    access = np.r_[fabric.up(flows.src_nic), fabric.down(flows.dst_nic)]
    access_ok = (cap[access] > 0).reshape(2, -1).all(axis=0)
    path[(cls == SAME_RACK) & access_ok] = 0
    nominal_up, _ = rack_slots(fabric, fabric.capacity, demand)
    if nominal_up.max(initial=0) < 1:
        return None
    up, down = rack_slots(fabric, cap, demand)
    e = np.flatnonzero((cls != SAME_RACK) & access_ok)
    ck = fabric.ctsws_per_pod * fabric.rack_links
    n_r = fabric.num_rtsws
    s_l = _vertex_slots(up, np.bincount(sr[e], minlength=n_r))
    s_r = _vertex_slots(down, np.bincount(dr[e], minlength=n_r))
    slots = int(max(s_l.max(initial=1), s_r.max(initial=1)))
    s_index = np.arange(slots)[None, :, None]
    forbid_l = (s_index >= np.minimum(up, s_l[:, None])[:, None, :]).reshape(n_r, slots * ck)
    forbid_r = (s_index >= np.minimum(down, s_r[:, None])[:, None, :]).reshape(n_r, slots * ck)
    col = edge_colouring(
        sr[e], dr[e], slots * ck, num_left=n_r, num_right=n_r,
        forbid_left=forbid_l, forbid_right=forbid_r,
    )  # fmt: skip
    ok = col >= 0
    e, col = e[ok], col[ok]
    uplink = col % ck
    c, k = uplink // fabric.rack_links, uplink % fabric.rack_links
    digits = {
        "c": c,
        "ku": k,
        "j": np.zeros_like(c),
        "mu": np.zeros_like(c),
        "md": np.zeros_like(c),
        "kd": k,
    }
    cross = cls[e] == CROSS_POD
    if cross.any():
        j, m, placed = _agg_colouring(problem, e[cross], c[cross])
        digits["j"][cross], digits["mu"][cross], digits["md"][cross] = j, m, m
        keep = np.ones(e.size, bool)
        keep[np.flatnonzero(cross)[~placed]] = False
        e = e[keep]
        digits = {name: d[keep] for name, d in digits.items()}
    path[e] = path_index(fabric, cls[e], digits)
    failed = np.flatnonzero(path == UNROUTED)
    return ColourOutcome(Assignment(flows, path), failed, slots)


def _agg_colouring(
    problem: Problem, idx: np.ndarray, plane: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equitable (j, m) for cross-pod flows `idx` already on plane `plane`; returns j, m and
    a mask of the flows that got one."""
    fabric, cap = problem.fabric, problem.arc_capacity
    a, m_links, c_per = fabric.atsws_per_plane, fabric.agg_links, fabric.ctsws_per_pod
    am = a * m_links
    sp, dp = problem.src_pod[idx], problem.dst_pod[idx]
    # alive (j, m) per (pod, plane): both directions of an agg link share its health
    links = fabric.agg_base + np.arange(fabric.num_agg_links)
    alive = ((cap[2 * links] > 0) & (cap[2 * links + 1] > 0)).reshape(fabric.pods * c_per, am)
    src_v, dst_v = sp * c_per + plane, dp * c_per + plane
    n_avail = alive.sum(axis=1)

    def split(vertex: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        per = np.maximum(n_avail[vertex], 1)
        copy = rank_within(vertex) // per
        uniq, ids = np.unique(vertex * (idx.size + 1) + copy, return_inverse=True)
        return ids, uniq // (idx.size + 1)

    lid, lvert = split(src_v)
    rid, rvert = split(dst_v)
    usable = (n_avail[src_v] > 0) & (n_avail[dst_v] > 0)
    col = edge_colouring(
        lid, rid, am, num_left=lvert.size, num_right=rvert.size,
        forbid_left=~alive[lvert], forbid_right=~alive[rvert],
    )  # fmt: skip
    placed = (col >= 0) & usable
    col = np.maximum(col, 0)
    return col // m_links, col % m_links, placed


def collision_count(fabric: Fabric, assignment: Assignment, kinds: tuple[int, ...] = (1,)) -> int:
    """Arcs of the given link kinds (default RTSW-CTSW) carrying more than one flow."""
    arcs = assignment.arcs(fabric).reshape(-1)
    arcs = arcs[arcs >= 0]
    counts = np.bincount(arcs, minlength=fabric.num_arcs)
    kind = np.repeat(fabric.link_kind, 2)
    return int(((counts > 1) & np.isin(kind, kinds)).sum())
