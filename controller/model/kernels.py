"""Compiled inner loops of the model (numba): max-min progressive filling, and E-ECMP's
hop-by-hop hashing of every queue pair. Both run per subflow (a meta-24k mix hashed with 16
QPs is a million of them, four seeds per certificate), where numpy pays a pass over every
array per step.

Each kernel does the arithmetic of the numpy form it replaced (controller.model.rates'
rounds, controller.model.hashing.route with hash_chooser) in the same order, with no
fast-math, so the results are equal to the bit; tests/controller/model/test_kernels.py
checks both against the numpy forms. Compiled on first use and cached beside the module
(`cache=True`); `warm_up` compiles them on a tiny instance.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S8 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(8)


@njit(cache=True, nogil=True)
def fill(
    arcs: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    slack: float,
    rates: np.ndarray,
) -> int:
    """Progressive filling (controller.model.rates' docstring): subflow i crosses arcs[i]
    (-1 padded) with demand[i] for weight[i] QPs; writes rates[i] and returns the rounds.

    Per round: count[e] = weight crossing arc e; share[e] = remaining[e] / count[e]; a
    subflow's ceiling is min(its arcs' shares, its per-QP demand); an arc is a bottleneck
    when no subflow on it has ceiling * slack below its share; a subflow freezes at its
    ceiling (times its weight) when its demand is within slack of it or it crosses a
    bottleneck, and its rate is taken from what its arcs have left."""
    n, hops = arcs.shape
    num = capacity.size
    remaining = np.empty(num)
    for e in range(num):
        remaining[e] = capacity[e] if capacity[e] > 0.0 else 0.0
    idx = np.empty(n, np.int64)
    dm = np.empty(n)
    m = 0
    for i in range(n):
        rates[i] = 0.0
        routed = False
        for h in range(hops):
            if arcs[i, h] >= 0:
                routed = True
        if routed and demand[i] > 0:
            idx[m] = i
            dm[i] = demand[i] / weight[i]
            m += 1
    count = np.empty(num)
    share = np.empty(num)
    blocked = np.empty(num, np.int64)
    used = np.empty(num)
    ceiling = np.empty(n)
    rounds = 0
    while m > 0:
        rounds += 1
        count[:] = 0.0
        for ii in range(m):
            i = idx[ii]
            for h in range(hops):
                e = arcs[i, h]
                if e >= 0:
                    count[e] += weight[i]
        for e in range(num):
            share[e] = remaining[e] / count[e] if count[e] > 0 else np.inf
        blocked[:] = 0
        for ii in range(m):
            i = idx[ii]
            low = np.inf
            for h in range(hops):
                e = arcs[i, h]
                if e >= 0 and share[e] < low:
                    low = share[e]
            c = low if low < dm[i] else dm[i]
            ceiling[i] = c
            for h in range(hops):
                e = arcs[i, h]
                if e >= 0 and c * slack < share[e]:
                    blocked[e] += 1
        used[:] = 0.0
        kept = 0
        for ii in range(m):
            i = idx[ii]
            c = ceiling[i]
            frozen = dm[i] <= c * slack
            if not frozen:
                for h in range(hops):
                    e = arcs[i, h]
                    if e >= 0 and blocked[e] == 0:
                        frozen = True
                        break
            if frozen:
                rate = c * weight[i]
                rates[i] = rate
                for h in range(hops):
                    e = arcs[i, h]
                    if e >= 0:
                        used[e] += rate
            else:
                idx[kept] = i
                kept += 1
        for e in range(num):
            r = remaining[e] - used[e]
            remaining[e] = r if r > 0.0 else 0.0
        m = kept
    return rounds


@njit(cache=True, nogil=True)
def group_hot(
    arcs: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    gid: np.ndarray,
    g_arcs: np.ndarray,
    g_dm: np.ndarray,
    g_w: np.ndarray,
) -> int:
    """The reduced problem of controller.model.rates' docstring, grouped: subflows with
    demand crossing some arc offered more than its capacity, keyed by those arcs (in path
    order) and their per-QP demand; equal keys make one group, their weights summed (equal
    subflows get equal rates). Writes gid[i] (-1: crosses no such arc, or no demand) and
    the groups' arcs (-1 padded), per-QP demand and weight; returns the number of groups."""
    n, hops = arcs.shape
    num = capacity.size
    load = np.zeros(num)
    for i in range(n):
        for h in range(hops):
            e = arcs[i, h]
            if e >= 0:
                load[e] += demand[i]
    over = np.empty(num, np.bool_)
    for e in range(num):
        over[e] = load[e] > (capacity[e] if capacity[e] > 0.0 else 0.0)
    size = 2
    while size < 2 * max(n, 1):
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, np.int64)
    key = np.empty(hops, np.int64)
    groups = 0
    for i in range(n):
        gid[i] = -1
        if not demand[i] > 0:
            continue
        k = 0
        for h in range(hops):
            e = arcs[i, h]
            if e >= 0 and over[e]:
                key[k] = e
                k += 1
        if k == 0:
            continue
        dm = demand[i] / weight[i]
        hv = _splitmix64(np.uint64(k))
        for x in range(k):
            hv = _splitmix64(hv ^ np.uint64(key[x]))
        slot = np.int64(hv & mask)
        while True:
            g = table[slot]
            if g < 0:
                for x in range(hops):
                    g_arcs[groups, x] = key[x] if x < k else -1
                g_dm[groups] = dm
                g_w[groups] = weight[i]
                table[slot] = groups
                gid[i] = groups
                groups += 1
                break
            same = g_dm[g] == dm and (k == hops or g_arcs[g, k] < 0)
            for x in range(k):
                if same and g_arcs[g, x] != key[x]:
                    same = False
            if same:
                g_w[g] += weight[i]
                gid[i] = g
                break
            slot = (slot + 1) & (size - 1)
    return groups


@njit(cache=True, nogil=True)
def per_parent(
    arcs: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray,
    rates: np.ndarray,
    weight: np.ndarray,
    parent: np.ndarray,
    striped: bool,
    p_rate: np.ndarray,
    p_demand: np.ndarray,
    p_routed: np.ndarray,
    p_dead: np.ndarray,
) -> None:
    """Sum subflows into their parent flows (controller.model.rates._parent_shares): rate
    (striped: QPs x the slowest QP's per-QP rate; else the sum), demand, routed (some
    subflow has an arc) and on a dead arc (some arc with no capacity)."""
    num = p_rate.size
    slowest = np.full(num, np.inf)
    qps = np.zeros(num)
    p_rate[:] = 0.0
    p_demand[:] = 0.0
    p_routed[:] = False
    p_dead[:] = False
    for i in range(arcs.shape[0]):
        p = parent[i]
        if striped:
            r = rates[i] / weight[i]
            if r < slowest[p]:
                slowest[p] = r
            qps[p] += weight[i]
        else:
            p_rate[p] += rates[i]
        p_demand[p] += demand[i]
        for h in range(arcs.shape[1]):
            e = arcs[i, h]
            if e >= 0:
                p_routed[p] = True
                if capacity[e] <= 0:
                    p_dead[p] = True
    if striped:
        for p in range(num):
            p_rate[p] = slowest[p] * qps[p] if np.isfinite(slowest[p]) else 0.0


@njit(cache=True, nogil=True)
def _splitmix64(x: np.uint64) -> np.uint64:
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _MUL1
    z = (z ^ (z >> _S27)) * _MUL2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True)
def _nth(usable: np.ndarray, size: int, h: np.uint64) -> int:
    """The (h mod usable count)-th usable option of usable[:size] (hashing.nth_usable)."""
    count = 0
    for o in range(size):
        if usable[o]:
            count += 1
    rank = h % np.uint64(count)
    seen = np.uint64(0)
    for o in range(size):
        if usable[o]:
            if seen == rank:
                return o
            seen += np.uint64(1)
    return 0


@njit(cache=True, nogil=True)
def _pick(usable: np.ndarray, weight: np.ndarray, size: int, h: np.uint64,
          cum: np.ndarray) -> int:  # fmt: skip
    """hashing._weighted: the option whose cumulative weight (usable ones, negative as 0)
    first exceeds u x total, u = (h >> 11) / 2^53; plain ECMP among the usable where the
    weights sum to 0."""
    run = 0.0
    for o in range(size):
        w = weight[o] if usable[o] and weight[o] > 0.0 else 0.0
        run = w if o == 0 else run + w
        cum[o] = run
    total = cum[size - 1]
    if not total > 0.0:
        return _nth(usable, size, h)
    cut = np.float64(h >> np.uint64(11)) * (1.0 / 9007199254740992.0) * total
    for o in range(size):
        if cum[o] > cut:
            return o
    return 0


@njit(cache=True, nogil=True)
def walk(
    src: np.ndarray,
    dst: np.ndarray,
    seed: np.uint64,
    qps: int,
    alive: np.ndarray,
    shape: np.ndarray,
    path: np.ndarray,
    arcs: np.ndarray,
    demand: np.ndarray,
    load: np.ndarray,
    weighted: bool,
    bw: tuple[np.ndarray, ...],
) -> None:
    """E-ECMP (hashing.route with hash_chooser), or with `weighted` capacity-aware WCMP
    (wcmp_chooser), for every QP of every flow: subflow f * qps + q gets its path index in
    path[] and its arcs (-1 padded) in arcs[] when path has a row per subflow (else nothing
    is stored); when load has an entry per arc, each routed QP adds demand[f] / qps to every
    arc it crosses (the offered load, without a row per subflow in memory).

    shape: (pods, racks per pod, CTSWs per pod, rack links, ATSWs per plane, agg links,
    NICs per rack, rack_base, agg_base) of the fabric. bw (WCMP only; hashing._Bandwidth):
    rack_cap [rack, C, K], its sum over K [rack, C], b3 [rack, C], the bandwidth behind an
    uplink of a cross-pod flow [source pod, destination rack, C], agg_up [pod, C, A, L],
    its sum over L [pod, C, A], b2 [rack, C, A], agg_down [pod, C, A, L], rack_down
    [rack, C, K], each summed by numpy as the chooser sums them."""
    rack_cap, rack_total, b3, behind_x, agg_up, agg_total, b2, agg_down, rack_down = bw
    R, C, K = shape[1], shape[2], shape[3]
    A, L, per_rack = shape[4], shape[5], shape[6]
    rack_base, agg_base = shape[7], shape[8]
    store = path.size == src.size * qps
    add = load.size > 0
    usable = np.zeros(max(C * K, A * L, L, K, 1), np.bool_)
    uplinks = np.zeros(max(C * K, 1), np.bool_)
    weight = np.zeros(max(C * K, A * L, L, K, 1))
    up_weight = np.zeros(max(C * K, 1))
    cum = np.zeros(max(C * K, A * L, L, K, 1))
    reach = np.zeros(max(C, 1), np.bool_)
    buf = np.empty(6, np.int64)
    s0 = _splitmix64(seed)
    for f in range(src.size):
        s, d = src[f], dst[f]
        sr, dr = s // per_rack, d // per_rack
        sp, dp = sr // R, dr // R
        first = f * qps
        share = demand[f] / qps if add else 0.0
        if store:
            for q in range(qps):
                path[first + q] = -1
                for x in range(arcs.shape[1]):
                    arcs[first + q, x] = -1
        if not (alive[s] and alive[d]):
            continue
        if sr == dr:
            for q in range(qps):
                if store:
                    path[first + q] = 0
                    arcs[first + q, 0] = 2 * s
                    arcs[first + q, 1] = 2 * d + 1
                if add:
                    load[2 * s] += share
                    load[2 * d + 1] += share
            continue
        cross = sp != dp
        any_usable = False
        for c in range(C):
            ok = False
            for k in range(K):
                if alive[rack_base + (dr * C + c) * K + k]:
                    ok = True
            if ok and cross:
                both = False
                for j in range(A):
                    a1 = False
                    a2 = False
                    for m in range(L):
                        if alive[agg_base + ((sp * C + c) * A + j) * L + m]:
                            a1 = True
                        if alive[agg_base + ((dp * C + c) * A + j) * L + m]:
                            a2 = True
                    if a1 and a2:
                        both = True
                ok = both
            reach[c] = ok
        for c in range(C):
            for k in range(K):
                u = reach[c] and alive[rack_base + (sr * C + c) * K + k]
                uplinks[c * K + k] = u
                any_usable = any_usable or u
        if not any_usable:
            continue
        if weighted:  # the uplinks' weights: capacity x min(1, bandwidth behind / parallel)
            for c in range(C):
                behind = behind_x[sp, dr, c] if cross else b3[dr, c]
                total = rack_total[sr, c]
                frac = behind / total if total > 0 else 0.0
                frac = frac if frac < 1.0 else 1.0
                for k in range(K):
                    up_weight[c * K + k] = rack_cap[sr, c, k] * frac
        pair = _splitmix64(_splitmix64(s0 ^ np.uint64(s)) ^ np.uint64(d))
        for q in range(qps):
            row = first + q
            qph = np.uint64(q) << _S8
            h = _splitmix64(pair ^ (qph | np.uint64(0)))
            if weighted:
                up = _pick(uplinks, up_weight, C * K, h, cum)
            else:
                up = _nth(uplinks, C * K, h)
            c, ku = up // K, up % K
            j, mu, md = 0, 0, 0
            if cross:
                for jj in range(A):
                    ok = False
                    for m in range(L):
                        if alive[agg_base + ((dp * C + c) * A + jj) * L + m]:
                            ok = True
                    base = agg_base + (sp * C + c) * A * L + jj * L
                    if weighted:
                        total = agg_total[sp, c, jj]
                        frac = b2[dr, c, jj] / total if total > 0 else 0.0
                        frac = frac if frac < 1.0 else 1.0
                    for m in range(L):
                        usable[jj * L + m] = ok and alive[base + m]
                        if weighted:
                            weight[jj * L + m] = agg_up[sp, c, jj, m] * frac
                h = _splitmix64(pair ^ (qph | np.uint64(1)))
                ju = _pick(usable, weight, A * L, h, cum) if weighted else _nth(usable, A * L, h)
                j, mu = ju // L, ju % L
                for m in range(L):
                    usable[m] = alive[agg_base + ((dp * C + c) * A + j) * L + m]
                    if weighted:
                        weight[m] = agg_down[dp, c, j, m]
                h = _splitmix64(pair ^ (qph | np.uint64(2)))
                md = _pick(usable, weight, L, h, cum) if weighted else _nth(usable, L, h)
            for k in range(K):
                usable[k] = alive[rack_base + (dr * C + c) * K + k]
                if weighted:
                    weight[k] = rack_down[dr, c, k]
            h = _splitmix64(pair ^ (qph | np.uint64(3)))
            kd = _pick(usable, weight, K, h, cum) if weighted else _nth(usable, K, h)
            buf[0] = 2 * s
            buf[1] = 2 * (rack_base + (sr * C + c) * K + ku)
            if cross:
                index = ((((c * K + ku) * A + j) * L + mu) * L + md) * K + kd
                buf[2] = 2 * (agg_base + ((sp * C + c) * A + j) * L + mu)
                buf[3] = 2 * (agg_base + ((dp * C + c) * A + j) * L + md) + 1
                buf[4] = 2 * (rack_base + (dr * C + c) * K + kd) + 1
                buf[5] = 2 * d + 1
                hops = 6
            else:
                index = (c * K + ku) * K + kd
                buf[2] = 2 * (rack_base + (dr * C + c) * K + kd) + 1
                buf[3] = 2 * d + 1
                hops = 4
            if store:
                path[row] = index
                for x in range(hops):
                    arcs[row, x] = buf[x]
            if add:
                for x in range(hops):
                    load[buf[x]] += share


@njit(cache=True, nogil=True)
def refill(
    arcs: np.ndarray,
    rate: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    start: np.ndarray,
    rows: np.ndarray,
    base_sum: np.ndarray,
    base_max: np.ndarray,
    cap: np.ndarray,
    changed: np.ndarray,
    changed_arcs: np.ndarray,
    lost: np.ndarray,
    mark: np.ndarray,
    where: np.ndarray,
    arc_mark: np.ndarray,
    arc_slot: np.ndarray,
    epoch: int,
    most: int,
    tol: float,
    slack: float,
    out_rows: np.ndarray,
    out_rates: np.ndarray,
) -> int:
    """Max-min rates after a local change, from the rates before (controller.model.
    local_rates' docstring): rows `changed` take paths `changed_arcs`, arcs take capacity
    `cap` (those whose capacity changed listed in `lost`). Writes the rows whose rate was
    filled again (out_rows) and their rates (out_rates); returns how many, or -1 when more
    than `most` would be needed, -2 when a row of D has no bottleneck and no row outside D
    explains it (either way: fill the whole plane instead).

    Base: row i crossed arcs[i] at rate[i] (demand[i] for weight[i] QPs), rows per arc in
    the CSR (start, rows), per arc the sum of rates (base_sum) and the highest per-QP level
    (base_max). Scratch: mark/where per row and arc_mark/arc_slot per arc, stamped with
    `epoch` (a number never used before with them), so nothing is cleared per call."""
    n, hops = arcs.shape
    if changed.size > most:
        return -1
    d = 0
    for x in range(changed.size):  # D starts as the changed rows
        i = changed[x]
        mark[i] = epoch
        where[i] = d
        out_rows[d] = i
        d += 1
    # for row i in D: its current arcs (changed_arcs for the changed rows, else its own)
    cur_of = np.full(most, -1, np.int64)  # slot in D -> index into changed (-1: base)
    for x in range(changed.size):
        cur_of[x] = x
    arc_ids = np.empty(max(16, 4 * most * hops + lost.size), np.int64)
    local = np.empty((most, hops), np.int64)
    resid = np.empty(arc_ids.size)
    total = np.empty(arc_ids.size)
    top = np.empty(arc_ids.size)
    sat = np.empty(arc_ids.size, np.bool_)
    r_dm = np.empty(most)
    r_w = np.empty(most)
    r_rate = np.empty(most)
    stamp = epoch
    while True:
        if d > most:
            return -1
        stamp += 1  # a fresh arc stamp for this round's arc set
        na = 0
        for x in range(lost.size):
            e = lost[x]
            if arc_mark[e] != stamp:
                arc_mark[e] = stamp
                arc_slot[e] = na
                arc_ids[na] = e
                na += 1
        for s in range(d):
            i = out_rows[s]
            for h in range(hops):
                for side in range(2):
                    if side == 0:
                        e = arcs[i, h]
                    elif cur_of[s] >= 0:
                        e = changed_arcs[cur_of[s], h]
                    else:
                        e = -1
                    if e >= 0 and arc_mark[e] != stamp:
                        if na >= arc_ids.size:
                            return -1
                        arc_mark[e] = stamp
                        arc_slot[e] = na
                        arc_ids[na] = e
                        na += 1
        # what the rows outside D leave of each arc
        for a in range(na):
            e = arc_ids[a]
            c = cap[e] if cap[e] > 0.0 else 0.0
            resid[a] = c - base_sum[e]
        for s in range(d):
            i = out_rows[s]
            for h in range(hops):
                e = arcs[i, h]
                if e >= 0:
                    resid[arc_slot[e]] += rate[i]
        for s in range(d):
            i = out_rows[s]
            for h in range(hops):
                e = changed_arcs[cur_of[s], h] if cur_of[s] >= 0 else arcs[i, h]
                local[s, h] = arc_slot[e] if e >= 0 else -1
            r_dm[s] = demand[i]
            r_w[s] = weight[i]
        fill(local[:d], resid[:na], r_dm[:d], r_w[:d], slack, r_rate[:d])
        filled = d
        for s in range(d):
            out_rates[s] = r_rate[s]
        # sums and highest per-QP levels over the arc set, now
        for a in range(na):
            e = arc_ids[a]
            c = cap[e] if cap[e] > 0.0 else 0.0
            total[a] = c - resid[a]
            top[a] = 0.0
            for k in range(start[e], start[e + 1]):
                g = rows[k]
                if mark[g] != epoch:
                    lv = rate[g] / weight[g]
                    if lv > top[a]:
                        top[a] = lv
        for s in range(d):
            lv = r_rate[s] / r_w[s]
            for h in range(hops):
                a = local[s, h]
                if a >= 0:
                    total[a] += r_rate[s]
                    if lv > top[a]:
                        top[a] = lv
        added = 0
        unsat = 0
        for a in range(na):
            e = arc_ids[a]
            c = cap[e] if cap[e] > 0.0 else 0.0
            sat[a] = total[a] >= c * (1.0 - tol) - tol
            if total[a] > c * (1.0 + tol) + tol:  # over: its rows outside D join
                for k in range(start[e], start[e + 1]):
                    g = rows[k]
                    if mark[g] != epoch:
                        mark[g] = epoch
                        if d < most:
                            where[g] = d
                            out_rows[d] = g
                        d += 1
                        added += 1
        # every row on the arc set needs a bottleneck: at its demand, or on a saturated arc
        # where no row has a higher per-QP level
        for a in range(na):
            e = arc_ids[a]
            for k in range(start[e], start[e + 1]):
                g = rows[k]
                if mark[g] == epoch or rate[g] >= demand[g] * (1.0 - tol):
                    continue
                lv = rate[g] / weight[g]
                ok = False
                for h in range(hops):
                    f = arcs[g, h]
                    if f < 0:
                        continue
                    if arc_mark[f] == stamp:
                        b = arc_slot[f]
                        if sat[b] and lv >= top[b] * (1.0 - tol):
                            ok = True
                    else:
                        c = cap[f] if cap[f] > 0.0 else 0.0
                        if base_sum[f] >= c * (1.0 - tol) - tol and lv >= base_max[f] * (1.0 - tol):
                            ok = True
                if not ok:
                    mark[g] = epoch
                    if d < most:
                        where[g] = d
                        out_rows[d] = g
                    d += 1
                    added += 1
        for s in range(filled):
            i = out_rows[s]
            if r_rate[s] >= demand[i] * (1.0 - tol):
                continue
            lv = r_rate[s] / r_w[s]
            ok = True
            for h in range(hops):
                a = local[s, h]
                if a >= 0:
                    ok = False
            for h in range(hops):
                a = local[s, h]
                if a >= 0 and sat[a] and lv >= top[a] * (1.0 - tol):
                    ok = True
            if ok:
                continue
            unsat += 1
            for h in range(hops):  # the rows above it on its arcs, outside D, join
                a = local[s, h]
                if a < 0:
                    continue
                e = arc_ids[a]
                for k in range(start[e], start[e + 1]):
                    g = rows[k]
                    if mark[g] != epoch and rate[g] / weight[g] > lv * (1.0 + tol):
                        mark[g] = epoch
                        if d < most:
                            where[g] = d
                            out_rows[d] = g
                        d += 1
                        added += 1
        if added == 0:
            return -2 if unsat else d
        if d > most:
            return -1
        for s in range(filled, d):
            cur_of[s] = -1
