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
def per_parent(
    arcs: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray,
    rates: np.ndarray,
    weight: np.ndarray,
    parent: np.ndarray,
    striped: bool,
    slowest: np.ndarray,
    qps: np.ndarray,
    p_rate: np.ndarray,
    p_demand: np.ndarray,
    p_routed: np.ndarray,
    p_dead: np.ndarray,
) -> None:
    """Sum subflows into their parent flows (controller.model.rates._parent_shares): rate
    (striped: QPs x the slowest QP's per-QP rate; else the sum), demand, routed (some
    subflow has an arc) and on a dead arc (some arc with no capacity). Accumulates onto the
    caller's starting values (slowest per-QP rate, QPs, rate, demand, routed, dead)."""
    num = p_rate.size
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
def hashed_per_parent(
    qp_gid: np.ndarray,
    level: np.ndarray,
    per_qp: np.ndarray,
    qps: int,
    striped: bool,
    rate: np.ndarray,
    total: np.ndarray,
    routed: np.ndarray,
) -> None:
    """per_parent for hashed flows whose QPs are not rows (controller.model.rates.
    _hashed_parents): QP q of flow f has rate level[g] for its group g = qp_gid[f * qps + q]
    >= 0, per_qp[f] when it has a path and no group (-1), 0 without a path (-2). Writes each
    flow's rate (striped: qps x its slowest QP; else the sum in QP order), demand (per_qp
    added qps times) and routed; one pass, no QP-sized temporaries."""
    for f in range(rate.size):
        slowest = np.inf
        summed = 0.0
        demand = 0.0
        on = False
        for q in range(qps):
            g = qp_gid[f * qps + q]
            if g >= 0:
                r = level[g]
            elif g == -1:
                r = per_qp[f]
            else:
                r = 0.0
            if r < slowest:
                slowest = r
            summed += r
            demand += per_qp[f]
            on = on or g != -2
        if striped:
            rate[f] = slowest * np.float64(qps) if np.isfinite(slowest) else 0.0
        else:
            rate[f] = summed
        total[f] = demand
        routed[f] = on


@njit(cache=True, nogil=True)
def grouped_crossing(qp_gid: np.ndarray, keyed: np.ndarray, qps: int, out: np.ndarray) -> None:
    """out[f] |= some QP of hashed flow f is in a group g with keyed[g]."""
    for i in range(qp_gid.size):
        g = qp_gid[i]
        if g >= 0 and keyed[g]:
            out[i // qps] = True


@njit(cache=True, nogil=True)
def parents_per_arc(arcs: np.ndarray, parent: np.ndarray, order: np.ndarray,
                    counted: np.ndarray, out: np.ndarray) -> None:
    """Distinct parent flows on each counted arc (controller.model.rates.simulate's
    collisions), added into `out`. `order` visits the rows grouped by parent (every row of a
    parent next to the others), so an arc counts a parent when it first meets it."""
    last = np.full(out.size, -1, np.int64)
    for k in range(order.size):
        i = order[k]
        p = parent[i]
        for h in range(arcs.shape[1]):
            e = arcs[i, h]
            if e >= 0 and counted[e] and last[e] != p:
                last[e] = p
                out[e] += 1


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


@njit(cache=True, nogil=True, inline="always")
def _flow_walk(
    s: int,
    d: int,
    s0: np.uint64,
    qps: int,
    alive: np.ndarray,
    shape: np.ndarray,
    weighted: bool,
    bw: tuple[np.ndarray, ...],
    scratch: tuple[np.ndarray, ...],
    qp_path: np.ndarray,
    qp_arcs: np.ndarray,
    qp_hops: np.ndarray,
) -> None:
    """Every QP q of the flow from NIC s to NIC d (`walk`): qp_path[q] its path index (-1:
    no usable path) and its arcs qp_arcs[q, :qp_hops[q]]."""
    rack_cap, rack_total, b3, behind_x, agg_up, agg_total, b2, agg_down, rack_down = bw
    usable, uplinks, weight, up_weight, cum, reach = scratch
    R, C, K = shape[1], shape[2], shape[3]
    A, L, per_rack = shape[4], shape[5], shape[6]
    rack_base, agg_base = shape[7], shape[8]
    N, S = shape[9], shape[10]
    sr, dr = s // per_rack * S + s % N % S, d // per_rack * S + d % N % S
    sp, dp = sr // R, dr // R
    for q in range(qps):
        qp_path[q] = -1
        qp_hops[q] = 0
    if not (alive[s] and alive[d]):
        return
    if sr == dr:
        for q in range(qps):
            qp_path[q] = 0
            qp_arcs[q, 0] = 2 * s
            qp_arcs[q, 1] = 2 * d + 1
            qp_hops[q] = 2
        return
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
        return
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
        qp_arcs[q, 0] = 2 * s
        qp_arcs[q, 1] = 2 * (rack_base + (sr * C + c) * K + ku)
        if cross:
            qp_path[q] = ((((c * K + ku) * A + j) * L + mu) * L + md) * K + kd
            qp_arcs[q, 2] = 2 * (agg_base + ((sp * C + c) * A + j) * L + mu)
            qp_arcs[q, 3] = 2 * (agg_base + ((dp * C + c) * A + j) * L + md) + 1
            qp_arcs[q, 4] = 2 * (rack_base + (dr * C + c) * K + kd) + 1
            qp_arcs[q, 5] = 2 * d + 1
            qp_hops[q] = 6
        else:
            qp_path[q] = (c * K + ku) * K + kd
            qp_arcs[q, 2] = 2 * (rack_base + (dr * C + c) * K + kd) + 1
            qp_arcs[q, 3] = 2 * d + 1
            qp_hops[q] = 4


@njit(cache=True, nogil=True)
def _scratch(shape: np.ndarray) -> tuple[np.ndarray, ...]:
    """`_flow_walk`'s work arrays for a fabric of `shape`."""
    C, K, A, L = shape[2], shape[3], shape[4], shape[5]
    n = max(C * K, A * L, L, K, 1)
    return (np.zeros(n, np.bool_), np.zeros(max(C * K, 1), np.bool_), np.zeros(n),
            np.zeros(max(C * K, 1)), np.zeros(n), np.zeros(max(C, 1), np.bool_))  # fmt: skip


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
    arc it crosses (the offered load, without a row per subflow in memory), in row order.

    shape: (pods, RTSWs per pod, CTSWs per pod, rack links, ATSWs per plane, agg links,
    NICs per rack, rack_base, agg_base, NICs per host, RTSWs per rack) of the fabric (an
    RTSW id is rack * S + n % S for NIC n of a host). bw (WCMP only; hashing._Bandwidth):
    rack_cap [rack, C, K], its sum over K [rack, C], b3 [rack, C], the bandwidth behind an
    uplink of a cross-pod flow [source pod, destination rack, C], agg_up [pod, C, A, L],
    its sum over L [pod, C, A], b2 [rack, C, A], agg_down [pod, C, A, L], rack_down
    [rack, C, K], each summed by numpy as the chooser sums them."""
    store = path.size == src.size * qps
    add = load.size > 0
    scratch = _scratch(shape)
    qp_path = np.empty(qps, np.int64)
    qp_arcs = np.empty((qps, 6), np.int64)
    qp_hops = np.empty(qps, np.int64)
    s0 = _splitmix64(seed)
    for f in range(src.size):
        _flow_walk(src[f], dst[f], s0, qps, alive, shape, weighted, bw, scratch, qp_path,
                   qp_arcs, qp_hops)  # fmt: skip
        first = f * qps
        if store:
            for q in range(qps):
                path[first + q] = qp_path[q]
                for x in range(arcs.shape[1]):
                    arcs[first + q, x] = qp_arcs[q, x] if x < qp_hops[q] else -1
        if add:
            share = demand[f] / qps
            for q in range(qps):
                for x in range(qp_hops[q]):
                    load[qp_arcs[q, x]] += share


@njit(cache=True, nogil=True, inline="always")
def _slot(key: np.ndarray, k: int, dm: float, table: np.ndarray, g_arcs: np.ndarray,
          g_dm: np.ndarray) -> tuple[int, int]:  # fmt: skip
    """(slot, group) of the key (arcs key[:k], per-QP demand dm) in the open-addressing
    table; group -1: not there, and slot is where it goes."""
    mask = np.uint64(table.size - 1)
    hv = _splitmix64(np.uint64(k))
    for x in range(k):
        hv = _splitmix64(hv ^ np.uint64(key[x]))
    slot = np.int64(hv & mask)
    hops = g_arcs.shape[1]
    while True:
        g = table[slot]
        if g < 0:
            return int(slot), -1
        same = g_dm[g] == dm and (k == hops or g_arcs[g, k] < 0)
        for x in range(k):
            if same and g_arcs[g, x] != key[x]:
                same = False
        if same:
            return int(slot), int(g)
        slot = (slot + 1) & (table.size - 1)


@njit(cache=True, nogil=True)
def _rehashed(groups: int, g_arcs: np.ndarray, g_dm: np.ndarray, size: int) -> np.ndarray:
    """A table of `size` slots holding groups 0..groups-1."""
    table = np.full(size, -1, np.int64)
    key = np.empty(g_arcs.shape[1], np.int64)
    for g in range(groups):
        k = 0
        while k < g_arcs.shape[1] and g_arcs[g, k] >= 0:
            key[k] = g_arcs[g, k]
            k += 1
        slot, _ = _slot(key, k, g_dm[g], table, g_arcs, g_dm)
        table[slot] = g
    return table


@njit(cache=True, nogil=True)
def _grown(a: np.ndarray) -> np.ndarray:
    out = np.empty((2 * a.shape[0],) + a.shape[1:], a.dtype)
    out[: a.shape[0]] = a
    return out


@njit(cache=True, nogil=True)
def hot_groups(
    arcs: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    over: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    p_demand: np.ndarray,
    seed: np.uint64,
    qps: int,
    alive: np.ndarray,
    shape: np.ndarray,
    weighted: bool,
    bw: tuple[np.ndarray, ...],
    gid: np.ndarray,
    qp_gid: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reduced problem of controller.model.rates' docstring, grouped, over the rows
    [arcs (-1 padded), demand, weight], then every QP of every hashed flow f (src[f] to
    dst[f], walked as `walk` does, demand p_demand[f] / qps, weight 1), in that order:
    subflows with demand crossing an arc in `over`, keyed by those arcs (in path order) and
    their per-QP demand; equal keys make one group, their weights summed in row order.
    qp_gid[f * qps + q] gets QP q of hashed flow f's group, -1 when it has a path but no
    group (its rate is its demand, 0 without demand), -2 when it has no path.
    Writes gid[i] for the rows (-1: crosses no such arc, or no demand); returns (groups,
    their arcs (-1 padded), per-QP demand, weight, and the lookup table). The hashed QPs'
    arcs are never held in memory, only their group (4 bytes a QP)."""
    n, width = arcs.shape
    hops = max(width, 6) if src.size else width
    cap = 1024
    g_arcs = np.full((cap, hops), -1, np.int64)
    g_dm, g_w = np.empty(cap), np.empty(cap)
    table = np.full(2 * cap, -1, np.int64)
    key = np.empty(hops, np.int64)
    groups = 0
    qp_path = np.empty(max(qps, 1), np.int64)
    qp_arcs = np.empty((max(qps, 1), 6), np.int64)
    qp_hops = np.empty(max(qps, 1), np.int64)
    scratch = _scratch(shape)
    s0 = _splitmix64(seed)
    total = n + src.size * qps
    i = 0
    while i < total:
        if i < n:  # a row
            gid[i] = -1
            dm_i, w_i = demand[i], weight[i]
            k = _over_key(arcs[i], over, key)
            i += 1
            if not dm_i > 0 or k == 0:
                continue
            g, groups, g_arcs, g_dm, g_w, table = _join(key, k, dm_i / w_i, w_i, groups, g_arcs,
                                                        g_dm, g_w, table)  # fmt: skip
            gid[i - 1] = g
            continue
        f = (i - n) // qps  # a hashed flow: all its QPs at once
        i += qps
        share = p_demand[f] / qps
        _flow_walk(src[f], dst[f], s0, qps, alive, shape, weighted, bw, scratch, qp_path,
                   qp_arcs, qp_hops)  # fmt: skip
        for q in range(qps):
            qp_gid[f * qps + q] = -1 if qp_hops[q] > 0 else -2
            if not share > 0:
                continue
            k = 0
            for h in range(qp_hops[q]):
                e = qp_arcs[q, h]
                if over[e]:
                    key[k] = e
                    k += 1
            if k == 0:
                continue
            g, groups, g_arcs, g_dm, g_w, table = _join(key, k, share, 1.0, groups, g_arcs,
                                                        g_dm, g_w, table)  # fmt: skip
            qp_gid[f * qps + q] = g
    return groups, g_arcs, g_dm, g_w, table


@njit(cache=True, nogil=True)
def regroup(
    demand: np.ndarray,
    weight: np.ndarray,
    over: np.ndarray,
    rows: np.ndarray,
    rows_arcs: np.ndarray,
    gid: np.ndarray,
    groups: int,
    g_arcs: np.ndarray,
    g_dm: np.ndarray,
    g_w: np.ndarray,
    table: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`hot_groups`' groups of rows (gid, groups, g_arcs, g_dm, g_w, table), updated in place
    for rows `rows` on paths `rows_arcs` under the over-capacity arcs `over`: each leaves its
    group (its weight taken off; a group of weight 0 is empty) and joins the group of its
    new key, made when new. Every row not listed must keep its key (its arcs, and whether
    each is in `over`). Returns (groups, g_arcs, g_dm, g_w, table): the arrays grow when full."""
    for x in range(rows.size):
        g = gid[rows[x]]
        if g >= 0:
            g_w[g] -= weight[rows[x]]
    key = np.empty(g_arcs.shape[1], np.int64)
    for x in range(rows.size):
        i = rows[x]
        gid[i] = -1
        dm_i, w_i = demand[i], weight[i]
        k = _over_key(rows_arcs[x], over, key)
        if not dm_i > 0 or k == 0:
            continue
        g, groups, g_arcs, g_dm, g_w, table = _join(key, k, dm_i / w_i, w_i, groups, g_arcs,
                                                    g_dm, g_w, table)  # fmt: skip
        gid[i] = g
    return groups, g_arcs, g_dm, g_w, table


@njit(cache=True, nogil=True)
def grouped_rates(
    arcs: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    gid: np.ndarray,
    level: np.ndarray,
    rates: np.ndarray,
) -> None:
    """Each row's rate from its group's per-QP level (rates[i] = level[gid[i]] * weight[i]),
    or, in no group, its demand when routed (0 when not), as controller.model.rates fills."""
    n, hops = arcs.shape
    for i in range(n):
        g = gid[i]
        if g >= 0:
            rates[i] = level[g] * weight[i]
            continue
        routed = False
        for h in range(hops):
            if arcs[i, h] >= 0:
                routed = True
        rates[i] = demand[i] if routed and demand[i] > 0 else 0.0


@njit(cache=True, nogil=True, inline="always")
def _over_key(path: np.ndarray, over: np.ndarray, key: np.ndarray) -> int:
    """A row's group key: the arcs of `path` (-1 padded) in `over`, in path order, written
    to `key`; how many."""
    k = 0
    for h in range(path.size):
        e = path[h]
        if e >= 0 and over[e]:
            key[k] = e
            k += 1
    return k


@njit(cache=True, nogil=True, inline="always")
def _join(key: np.ndarray, k: int, dm: float, w: float, groups: int, g_arcs: np.ndarray,
          g_dm: np.ndarray, g_w: np.ndarray, table: np.ndarray
          ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A subflow of weight w joins the group of its key (arcs key[:k], per-QP demand dm),
    made when new (the arrays and table grown when full): (its group, groups, arrays)."""
    slot, g = _slot(key, k, dm, table, g_arcs, g_dm)
    if g >= 0:
        g_w[g] += w
        return g, groups, g_arcs, g_dm, g_w, table
    if groups == g_arcs.shape[0]:
        g_arcs, g_dm, g_w = _grown(g_arcs), _grown(g_dm), _grown(g_w)
        g_arcs[groups:] = -1
        table = _rehashed(groups, g_arcs, g_dm, 2 * g_arcs.shape[0])
        slot, g = _slot(key, k, dm, table, g_arcs, g_dm)
    for x in range(k):
        g_arcs[groups, x] = key[x]
    g_dm[groups] = dm
    g_w[groups] = w
    table[slot] = groups
    return groups, groups + 1, g_arcs, g_dm, g_w, table


@njit(cache=True, nogil=True)
def hashed_crossing(
    src: np.ndarray,
    dst: np.ndarray,
    seed: np.uint64,
    qps: int,
    alive: np.ndarray,
    shape: np.ndarray,
    weighted: bool,
    bw: tuple[np.ndarray, ...],
    mask: np.ndarray,
    out: np.ndarray,
) -> None:
    """out[f]: some QP of hashed flow f crosses an arc in `mask`."""
    qp_path = np.empty(max(qps, 1), np.int64)
    qp_arcs = np.empty((max(qps, 1), 6), np.int64)
    qp_hops = np.empty(max(qps, 1), np.int64)
    scratch = _scratch(shape)
    s0 = _splitmix64(seed)
    for f in range(src.size):
        _flow_walk(src[f], dst[f], s0, qps, alive, shape, weighted, bw, scratch, qp_path,
                   qp_arcs, qp_hops)  # fmt: skip
        hit = False
        for q in range(qps):
            for h in range(qp_hops[q]):
                if mask[qp_arcs[q, h]]:
                    hit = True
        out[f] = hit


@njit(cache=True, nogil=True, inline="always")
def _take_arc(e: int, stamp: int, na: int, arc_mark: np.ndarray, arc_slot: np.ndarray,
              arc_ids: np.ndarray) -> int:  # fmt: skip
    """Arc e joins `refill`'s arc set of this round (once, in slot na); the set's new size,
    -1 when it is full."""
    if arc_mark[e] == stamp:
        return na
    if na >= arc_ids.size:
        return -1
    arc_mark[e] = stamp
    arc_slot[e] = na
    arc_ids[na] = e
    return na + 1


@njit(cache=True, nogil=True, inline="always")
def _admit(g: int, d: int, epoch: int, most: int, mark: np.ndarray, where: np.ndarray,
           out_rows: np.ndarray) -> int:  # fmt: skip
    """Row g joins `refill`'s set D (its slot recorded while D fits `most`); D's new size."""
    mark[g] = epoch
    if d < most:
        where[g] = d
        out_rows[d] = g
    return d + 1


@njit(cache=True, nogil=True, inline="always")
def _top(a: int, e: int, top: np.ndarray, known: np.ndarray, start: np.ndarray,
         rows: np.ndarray, rate: np.ndarray, weight: np.ndarray, mark: np.ndarray,
         where: np.ndarray, epoch: int, filled: int, top_row: np.ndarray,
         base_max: np.ndarray) -> float:  # fmt: skip
    """The highest per-QP level on arc e (slot a of `refill`'s round): D's, which top[a]
    holds, and, read once per round when first asked, the rows' outside D as the round
    began (rows admitted since have slots from `filled` on): the base's top row's level
    unless that row is in D, else a scan of the arc's rows."""
    if known[a]:
        return top[a]
    known[a] = True
    g = top_row[e]
    if g >= 0 and (mark[g] != epoch or where[g] >= filled):
        out = base_max[e]
    else:
        out = 0.0
        for k in range(start[e], start[e + 1]):
            g = rows[k]
            if mark[g] != epoch or where[g] >= filled:
                lv = rate[g] / weight[g]
                if lv > out:
                    out = lv
    if out > top[a]:
        top[a] = out
    return top[a]


@njit(cache=True, nogil=True, inline="always")
def _bottlenecked(g: int, arcs: np.ndarray, rate: np.ndarray, weight: np.ndarray,
                  cap: np.ndarray, base_sum: np.ndarray, base_max: np.ndarray,
                  arc_mark: np.ndarray, arc_slot: np.ndarray, stamp: int, sat: np.ndarray,
                  top: np.ndarray, known: np.ndarray, start: np.ndarray, rows: np.ndarray,
                  mark: np.ndarray, where: np.ndarray, epoch: int, filled: int,
                  top_row: np.ndarray, tol: float) -> bool:  # fmt: skip
    """Whether row g (outside `refill`'s D, below its demand) crosses a saturated arc where
    no row has a higher per-QP level: this round's sums for the arcs in the set (stamped),
    the base's elsewhere."""
    lv = rate[g] / weight[g]
    for h in range(arcs.shape[1]):
        f = arcs[g, h]
        if f < 0:
            continue
        if arc_mark[f] == stamp:
            b = arc_slot[f]
            if sat[b] and lv >= _top(b, f, top, known, start, rows, rate, weight, mark, where,
                                     epoch, filled, top_row, base_max) * (1.0 - tol):  # fmt: skip
                return True
        elif _base_neck(f, lv, cap, base_sum, base_max, tol):
            return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _base_neck(f: int, lv: float, cap: np.ndarray, base_sum: np.ndarray, base_max: np.ndarray,
               tol: float) -> bool:  # fmt: skip
    """Whether arc f bottlenecks a row at per-QP level lv in the base: saturated, and no
    row on it higher."""
    c = cap[f] if cap[f] > 0.0 else 0.0
    return base_sum[f] >= c * (1.0 - tol) - tol and lv >= base_max[f] * (1.0 - tol)


@njit(cache=True, nogil=True)
def bottleneck_index(
    arcs: np.ndarray,
    rate: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    cap: np.ndarray,
    base_sum: np.ndarray,
    base_max: np.ndarray,
    start: np.ndarray,
    rows: np.ndarray,
    tol: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What `refill` reads instead of scanning every row of an arc: (neck_start,
    neck_rows), the rows below their demand by the first arc that bottlenecks them in the
    base (saturated, no row on it at a higher per-QP level), arc e's at
    neck_rows[neck_start[e]:neck_start[e + 1]] in row order; `loose`, the rows below their
    demand with no such arc (rounding); and per arc the first row (by the CSR) at its
    highest per-QP level, -1 when none crosses it. Rows on no arc are in neither."""
    n, hops = arcs.shape
    num = cap.size
    neck = np.full(n, -1, np.int64)
    counts = np.zeros(num + 1, np.int64)
    n_loose = 0
    for i in range(n):
        if rate[i] >= demand[i] * (1.0 - tol):
            neck[i] = -2
            continue
        lv = rate[i] / weight[i]
        routed = False
        for h in range(hops):
            f = arcs[i, h]
            if f < 0:
                continue
            routed = True
            if _base_neck(f, lv, cap, base_sum, base_max, tol):
                neck[i] = f
                break
        if not routed:  # on no arc: no check ever reaches it
            neck[i] = -2
        elif neck[i] >= 0:
            counts[neck[i] + 1] += 1
        else:
            n_loose += 1
    neck_start = np.cumsum(counts)
    fill_at = neck_start[:num].copy()
    neck_rows = np.empty(neck_start[num], np.int64)
    loose = np.empty(n_loose, np.int64)
    m = 0
    for i in range(n):
        if neck[i] >= 0:
            neck_rows[fill_at[neck[i]]] = i
            fill_at[neck[i]] += 1
        elif neck[i] == -1:
            loose[m] = i
            m += 1
    top_row = np.full(num, -1, np.int64)
    for e in range(num):
        best = -1.0
        for k in range(start[e], start[e + 1]):
            g = rows[k]
            lv = rate[g] / weight[g]
            if lv > best:
                best = lv
                top_row[e] = g
    return neck_start, neck_rows, loose, top_row


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
    neck_start: np.ndarray,
    neck_rows: np.ndarray,
    loose: np.ndarray,
    top_row: np.ndarray,
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
    (base_max), and the base's bottlenecks (`bottleneck_index`). Scratch: mark/where per row
    and arc_mark/arc_slot per arc, stamped with `epoch` (a number never used before with
    them), so nothing is cleared per call."""
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
    known = np.empty(arc_ids.size, np.bool_)
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
            na = _take_arc(lost[x], stamp, na, arc_mark, arc_slot, arc_ids)
            if na < 0:
                return -1
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
                    if e >= 0:
                        na = _take_arc(e, stamp, na, arc_mark, arc_slot, arc_ids)
                        if na < 0:
                            return -1
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
        # sums over the arc set, now, and D's highest per-QP levels (those of the rows
        # outside D are read when a check first needs them: _top)
        for a in range(na):
            e = arc_ids[a]
            c = cap[e] if cap[e] > 0.0 else 0.0
            total[a] = c - resid[a]
            top[a] = 0.0
            known[a] = False
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
                        d = _admit(g, d, epoch, most, mark, where, out_rows)
                        added += 1
                        if d > most:
                            return -1
        # every row on the arc set needs a bottleneck: at its demand, or on a saturated arc
        # where no row has a higher per-QP level. A row whose base bottleneck is outside the
        # set keeps it (nothing on that arc changed), so only the rows bottlenecked on an
        # arc of the set, and those with none in the base, are checked
        for a in range(na):
            e = arc_ids[a]
            for k in range(neck_start[e], neck_start[e + 1]):
                g = neck_rows[k]
                if mark[g] == epoch:
                    continue
                if not _bottlenecked(g, arcs, rate, weight, cap, base_sum, base_max, arc_mark,
                                     arc_slot, stamp, sat, top, known, start, rows, mark,
                                     where, epoch, filled, top_row, tol):  # fmt: skip
                    d = _admit(g, d, epoch, most, mark, where, out_rows)
                    added += 1
                    if d > most:
                        return -1
        for x in range(loose.size):
            g = loose[x]
            if mark[g] == epoch:
                continue
            on = False
            for h in range(hops):
                f = arcs[g, h]
                if f >= 0 and arc_mark[f] == stamp:
                    on = True
            if on and not _bottlenecked(
                g, arcs, rate, weight, cap, base_sum, base_max, arc_mark, arc_slot, stamp, sat,
                top, known, start, rows, mark, where, epoch, filled, top_row, tol):  # fmt: skip
                d = _admit(g, d, epoch, most, mark, where, out_rows)
                added += 1
                if d > most:
                    return -1
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
                if a >= 0 and sat[a] and lv >= _top(a, arc_ids[a], top, known, start, rows,
                                                    rate, weight, mark, where, epoch, filled,
                                                    top_row, base_max) * (1.0 - tol):  # fmt: skip
                    ok = True
            if ok:
                continue
            unsat += 1
            for h in range(hops):  # the rows above it on its saturated arcs, outside D, join
                a = local[s, h]
                if a < 0 or not sat[a]:
                    continue
                e = arc_ids[a]
                for k in range(start[e], start[e + 1]):
                    g = rows[k]
                    if mark[g] != epoch and rate[g] / weight[g] > lv * (1.0 + tol):
                        d = _admit(g, d, epoch, most, mark, where, out_rows)
                        added += 1
                        if d > most:  # too many: the whole plane (and slots stay valid)
                            return -1
        if added == 0:
            return -2 if unsat else d
        if d > most:
            return -1
        for s in range(filled, d):
            cur_of[s] = -1
