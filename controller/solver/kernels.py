"""Compiled inner loops of the solver (numba): the batched placement, the local search's
and the relief pass's moves, and the scoring of flows' candidate paths on the current load
they all repeat thousands of times; the rows-per-arc index of the repairs.

Candidate paths come as `cand` (greedy.Candidates.kernel_args): each flow's class `cls`
and base arcs `base`, and the offsets of every class stacked in one table `off` [paths, 4]
(-1 padded), class c's at rows first[c] .. first[c] + n_paths[c] with hops[c] hops. Entry
mates (greedy._Mates.kernel_args) come as `mates`: group per flow, span per class, forced
and count per group and uplink.

Each kernel does the arithmetic of the numpy code it replaced in the same order (no
fast-math), so the choices are equal to the bit. Compiled on first use and cached beside
the module (`cache=True`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from controller.model.assignment import UNROUTED
from controller.model.rates import REL_TOL

# (cls, base, off, first, n_paths, hops): the candidate tables (greedy.Candidates.kernel_args)
Cand = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# (group, span, forced, count): the entry mates' arrays (greedy._Mates.kernel_args)
Mates = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@njit(cache=True, nogil=True)
def _score(
    f: int,
    c: int,
    cand: Cand,
    mates: Mates,
    chosen: np.ndarray,
    load: np.ndarray,
    inv: np.ndarray,
    demand: np.ndarray,
    path: np.ndarray,
    worst: np.ndarray,
    total: np.ndarray,
) -> tuple[int, float]:
    """(path, bottleneck utilisation) of flow f's best candidate with f alone taken off
    the load: least bottleneck, ties to the least sum over hops, then the first; only
    paths its entry mates allow, f's own use taken off. (UNROUTED, inf): none alive."""
    _, base, off, first, n_paths, hops = cand
    group, span, forced, count = mates
    d = demand[f]
    g = group[f]
    sp = span[c]
    up_now = -1
    alone = False
    if g >= 0:
        up_now = path[f] // sp
        alone = count[g, up_now] == 1
    lo = first[c]
    best = np.inf
    for p in range(n_paths[c]):
        w = 0.0
        t = 0.0
        for k in range(hops[c]):
            a = base[f, k] + off[lo + p, k]
            x = load[a]
            if a == chosen[f, k]:
                x = x - d
            u = (x + d) * inv[a]
            if k == 0:
                w = u
                t = u
            else:
                if u > w:
                    w = u
                t = t + u
        if g >= 0:
            u_p = p // sp
            held = forced[g, u_p]
            if alone and u_p == up_now:
                held = -1
            if held >= 0 and held != p % sp:
                w = np.inf
        worst[p] = w
        total[p] = t
        if w < best:
            best = w
    if not best < np.inf:
        return UNROUTED, best
    pick = UNROUTED
    low = np.inf
    for p in range(n_paths[c]):
        if worst[p] <= best + REL_TOL and total[p] < low:
            low = total[p]
            pick = p
    return pick, best


@njit(cache=True, nogil=True)
def _fits(f: int, c: int, p: int, now: int, mates: Mates) -> bool:
    """Whether flow f (on path `now`) may take path p as far as its entry mates go."""
    group, span, forced, count = mates
    g = group[f]
    if g < 0:
        return True
    up = p // span[c]
    held = forced[g, up]
    if held < 0 or held == p % span[c]:
        return True
    return now // span[c] == up and count[g, up] == 1


@njit(cache=True, nogil=True)
def _move(f: int, c: int, p: int, cand: Cand, mates: Mates, load: np.ndarray,
          demand: np.ndarray, path: np.ndarray, chosen: np.ndarray) -> None:  # fmt: skip
    """Move flow f (of class c) to path p: its demand off the arcs of its path, then onto
    those of p (in that order: an arc on both ends where it began, to the bit as numpy's
    `load[old] -= d; load[new] += d`), and its entry mates' hold from its uplink to p's."""
    _, base, off, first, _, hops = cand
    group, span, forced, count = mates
    d = demand[f]
    for k in range(hops[c]):
        load[chosen[f, k]] -= d
    g = group[f]
    if g >= 0:  # mates: f leaves its uplink, then takes the new one
        u = path[f] // span[c]
        count[g, u] -= 1
        if count[g, u] == 0:
            forced[g, u] = -1
        u = p // span[c]
        forced[g, u] = p % span[c]
        count[g, u] += 1
    path[f] = p
    row = first[c] + p
    for k in range(hops[c]):
        chosen[f, k] = base[f, k] + off[row, k]
    for k in range(hops[c]):
        load[chosen[f, k]] += d


@njit(cache=True, nogil=True)
def relieve(
    over: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    alike: np.ndarray,
    cap: np.ndarray,
    load: np.ndarray,
    inv: np.ndarray,
    demand: np.ndarray,
    path: np.ndarray,
    chosen: np.ndarray,
    cand: Cand,
    mates: Mates,
    limit: int,
    first_batch: int,
) -> int:
    """The drain of greedy.relieve_arcs, in place on load, path, chosen, forced, count:
    each arc of `over` in turn (its movable flows rows[starts[i]:ends[i]], largest first),
    until it is within capacity or its flows are all tried; a batch of flows is scored on
    the load before it, each choice checked again on the load of the moment. Tries count
    one per kind of flow (`alike`) in a batch; at most `limit` (< 0: no limit). Returns
    the tries made."""
    cls, base, off, first, _, hops = cand
    tol = 1.0 + REL_TOL
    worst = np.empty(off.shape[0])
    total = np.empty(off.shape[0])
    on = np.empty(rows.size, np.int64)
    kinds = np.empty(rows.size, np.int64)
    unlimited = limit < 0
    tries = 0
    for i in range(over.size):
        arc = over[i]
        n_on = 0
        for j in range(starts[i], ends[i]):  # still there (not moved off another arc)
            f = rows[j]
            for k in range(chosen.shape[1]):
                if chosen[f, k] == arc:
                    on[n_on] = f
                    n_on += 1
                    break
        # enough flows that a quarter of them would take off the excess, at least
        # first_batch: need = searchsorted(cumsum(demand[on]), excess) + 1
        excess = load[arc] - cap[arc]
        need = 0
        run = 0.0
        for j in range(n_on):
            run = run + demand[on[j]]
            if run < excess:
                need += 1
            else:
                break
        size = max(first_batch, 4 * (need + 1))
        lo = 0
        while lo < n_on and (unlimited or tries < limit) and load[arc] > cap[arc] * tol:
            take = size if unlimited else min(size, limit - tries)
            hi = min(lo + take, n_on)
            size *= 4
            # one try per kind of flow in the batch
            for j in range(lo, hi):
                kinds[j - lo] = alike[on[j]]
            ks = np.sort(kinds[: hi - lo])
            distinct = 0
            for j in range(ks.size):
                if j == 0 or ks[j] != ks[j - 1]:
                    distinct += 1
            tries += distinct
            # scored on the load before the batch's own moves
            n_b = hi - lo
            choice = np.empty(n_b, np.int64)
            score = np.empty(n_b)
            for j in range(n_b):
                f = on[lo + j]
                choice[j], score[j] = _score(f, cls[f], cand, mates, chosen, load, inv, demand,
                                             path, worst, total)  # fmt: skip
            for j in range(n_b):
                f = on[lo + j]
                p = choice[j]
                if p == UNROUTED or p == path[f] or not score[j] <= tol:
                    continue
                if load[arc] <= cap[arc] * tol:
                    break
                c = cls[f]
                d = demand[f]
                row = first[c] + p
                fit = True
                for k in range(hops[c]):
                    a = base[f, k] + off[row, k]
                    x = load[a] if a == chosen[f, k] else load[a] + d
                    if x > cap[a] * tol:
                        fit = False
                        break
                if not fit or not _fits(f, c, p, path[f], mates):
                    continue
                _move(f, c, p, cand, mates, load, demand, path, chosen)
            lo = hi
        if not unlimited and tries >= limit:
            break
    return tries


@njit(cache=True, nogil=True)
def search(
    hot_arcs: np.ndarray,
    hot_index: np.ndarray,
    weight: np.ndarray,
    util: np.ndarray,
    may: np.ndarray,
    load: np.ndarray,
    inv: np.ndarray,
    demand: np.ndarray,
    path: np.ndarray,
    chosen: np.ndarray,
    cand: Cand,
    mates: Mates,
    limit: int,
    first_batch: int,
) -> int:
    """The moves of greedy.local_search, in place on util, load, path, chosen, forced,
    count: while the most utilised arc (`util` over `hot_arcs`, first of equal maxima)
    has a flow (largest first, then by row) whose best path goes below it, the first such
    flow moves there. Flows are scored in batches (first_batch, then 4x as many; the next
    first batch is one more than the last move took); tries count the flows scored up to
    and including the move. At most `limit` tries (< 0: no limit). Returns the tries."""
    cls, _, off, _, _, hops = cand
    movable = chosen.copy()  # the rows that may move, by arc (arc_csr of their paths)
    for f in range(chosen.shape[0]):
        if not may[f]:
            movable[f] = -1
    init, start, _, _ = arc_csr(movable, demand, load.size)
    # rows moved onto an arc since the start: a list per arc (head, next)
    head = np.full(load.size, -1, np.int64)
    extra_row = np.empty(1024, np.int64)
    extra_next = np.empty(1024, np.int64)
    n_extra = 0
    worst = np.empty(off.shape[0])
    total = np.empty(off.shape[0])
    unlimited = limit < 0
    tries = 0
    batch0 = first_batch
    while (unlimited or tries < limit) and hot_arcs.size:
        i = 0
        top = util[0]
        for j in range(1, util.size):
            if util[j] > top:
                top = util[j]
                i = j
        if top <= REL_TOL:
            break
        arc = hot_arcs[i]
        # the flows on it: as at the start, and moved there since; in ascending order
        n_cand = start[arc + 1] - start[arc]
        e = head[arc]
        while e >= 0:
            n_cand += 1
            e = extra_next[e]
        cand_rows = np.empty(n_cand, np.int64)
        cand_rows[: start[arc + 1] - start[arc]] = init[start[arc] : start[arc + 1]]
        at = start[arc + 1] - start[arc]
        e = head[arc]
        while e >= 0:
            cand_rows[at] = extra_row[e]
            at += 1
            e = extra_next[e]
        cand_rows = np.unique(cand_rows)
        still = np.zeros(cand_rows.size, np.bool_)
        for j in range(cand_rows.size):
            f = cand_rows[j]
            for k in range(chosen.shape[1]):
                if chosen[f, k] == arc:
                    still[j] = True
                    break
        on = cand_rows[still]
        on = on[np.argsort(-demand[on], kind="mergesort")]
        moved = False
        lo = 0
        size = batch0
        while lo < on.size and (unlimited or tries < limit):
            take = size if unlimited else min(size, limit - tries)
            hi = min(lo + take, on.size)
            pick = -1
            p = UNROUTED
            for j in range(lo, hi):
                f = on[j]
                c = cls[f]
                if hops[c] == 0:
                    continue
                p, w = _score(f, c, cand, mates, chosen, load, inv, demand, path, worst, total)
                if p != UNROUTED and p != path[f] and w < top - REL_TOL:
                    pick = j
                    break
            if pick < 0:
                tries += hi - lo
                lo = hi
                size *= 4
                continue
            tries += pick - lo + 1
            batch0 = max(first_batch, pick + 2)
            f = on[pick]
            c = cls[f]
            old = chosen[f].copy()
            _move(f, c, p, cand, mates, load, demand, path, chosen)
            for k in range(chosen.shape[1]):  # the utilisation of the arcs left and taken
                for a in (old[k], chosen[f, k]):
                    if a >= 0 and hot_index[a] >= 0:
                        util[hot_index[a]] = load[a] * weight[hot_index[a]]
            for k in range(hops[c]):  # f is on these arcs now
                a = chosen[f, k]
                if n_extra == extra_row.size:
                    extra_row = np.concatenate((extra_row, np.empty(extra_row.size, np.int64)))
                    extra_next = np.concatenate((extra_next, np.empty(extra_next.size, np.int64)))
                extra_row[n_extra] = f
                extra_next[n_extra] = head[a]
                head[a] = n_extra
                n_extra += 1
            moved = True
            break
        if not moved:
            break
    return tries


@njit(cache=True, nogil=True)
def place(
    rows: np.ndarray,
    cuts: np.ndarray,
    load: np.ndarray,
    inv: np.ndarray,
    demand: np.ndarray,
    path: np.ndarray,
    chosen: np.ndarray,
    cand: Cand,
) -> None:
    """The placement of greedy.greedy_batched_arcs, in place on load, path, chosen: batch
    after batch (rows[cuts[i]:cuts[i + 1]]), class after class, every flow of the class
    goes to its best path (see _score; no mates) on the load before the class's own
    flows are added."""
    cls, base, off, first, _, hops = cand
    worst = np.empty(off.shape[0])
    total = np.empty(off.shape[0])
    nomates = np.full((1, 1), -1, np.int64)  # no flow has mates here
    mates = (np.full(demand.size, -1, np.int64), np.zeros(hops.size, np.int64), nomates, nomates)
    pick = np.empty(rows.size, np.int64)
    alive = np.empty(rows.size, np.bool_)
    for i in range(cuts.size - 1):
        for c in range(hops.size):
            if hops[c] == 0:
                continue
            for j in range(cuts[i], cuts[i + 1]):
                f = rows[j]
                if cls[f] != c:
                    continue
                p, w = _score(f, c, cand, mates, chosen, load, inv, demand, path, worst, total)
                pick[j] = p
                alive[j] = w < np.inf
            for j in range(cuts[i], cuts[i + 1]):
                f = rows[j]
                if cls[f] != c or not alive[j]:
                    continue
                path[f] = pick[j]
                row = first[c] + pick[j]
                for k in range(hops[c]):
                    chosen[f, k] = base[f, k] + off[row, k]
            for j in range(cuts[i], cuts[i + 1]):
                f = rows[j]
                if cls[f] != c or not alive[j]:
                    continue
                for k in range(hops[c]):
                    load[chosen[f, k]] += demand[f]


@njit(cache=True, nogil=True)
def arc_csr(
    arcs: np.ndarray, demand: np.ndarray, num_arcs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, start, count, load) of paths `arcs` [rows, hops] (-1 padded): the rows on
    each arc, arc a's at rows[start[a]:start[a + 1]] in the order of the hop-major flat
    arcs (a stable counting sort), how many there are and the demand they put on it (added
    in that order, as numpy's bincount adds its weights)."""
    count = np.zeros(num_arcs, np.int64)
    load = np.zeros(num_arcs)
    for k in range(arcs.shape[1]):
        for f in range(arcs.shape[0]):
            a = arcs[f, k]
            if a >= 0:
                count[a] += 1
                load[a] += demand[f]
    start = np.zeros(num_arcs + 1, np.int64)
    for a in range(num_arcs):
        start[a + 1] = start[a] + count[a]
    fill = start[:-1].copy()
    rows = np.empty(start[num_arcs], np.int64)
    for k in range(arcs.shape[1]):
        for f in range(arcs.shape[0]):
            a = arcs[f, k]
            if a >= 0:
                rows[fill[a]] = f
                fill[a] += 1
    return rows, start, count, load


@njit(cache=True, nogil=True)
def chosen_arcs(path: np.ndarray, cand: Cand) -> np.ndarray:
    """Core arcs [rows, 4] of each row's path (greedy.Candidates.all_chosen), -1 padded
    and for unrouted rows."""
    cls, base, off, first, _, hops = cand
    out = np.full(base.shape, -1, np.int64)
    for f in range(path.size):
        p = path[f]
        if p < 0:
            continue
        c = cls[f]
        row = first[c] + p
        for k in range(hops[c]):
            out[f, k] = base[f, k] + off[row, k]
    return out
