"""Candidate paths from the fabric's structure, enumerated by index rather than search.

Every flow belongs to one of three classes, and its candidate paths are numbered densely:

    same rack   1 path                      nic>rtsw, rtsw>nic
    same pod    C*K*K paths  (c, ku, kd)    + rtsw>ctsw[c,ku], ctsw>rtsw[c,kd]
    cross pod   C*K*A*L*L*K  (c, ku, j, mu, md, kd)
                + rtsw>ctsw[c,ku], ctsw>atsw[j,mu], atsw>ctsw[j,md], ctsw>rtsw[c,kd]

A path is a row of at most MAX_HOPS arc ids, padded with -1. All functions are vectorised
over flows so that 24K-GPU fabrics cost array operations, not Python loops.
"""

from __future__ import annotations

import numpy as np

from controller.model.fabric import Fabric

MAX_HOPS = 6
SAME_RACK, SAME_POD, CROSS_POD = 0, 1, 2


def flow_class(fabric: Fabric, src_nic: np.ndarray, dst_nic: np.ndarray) -> np.ndarray:
    """SAME_RACK, SAME_POD or CROSS_POD for each flow."""
    sr = fabric.rtsw_of_nic(np.asarray(src_nic))
    dr = fabric.rtsw_of_nic(np.asarray(dst_nic))
    cls = np.full(sr.shape, CROSS_POD, dtype=np.int8)
    cls[fabric.pod_of_rtsw(sr) == fabric.pod_of_rtsw(dr)] = SAME_POD
    cls[sr == dr] = SAME_RACK
    return cls


def num_paths(fabric: Fabric) -> tuple[int, int, int]:
    """Candidate path counts for (same rack, same pod, cross pod)."""
    c, k = fabric.ctsws_per_pod, fabric.rack_links
    a, m = fabric.atsws_per_plane, fabric.agg_links
    return 1, c * k * k, c * k * a * m * m * k


def decode(fabric: Fabric, cls: np.ndarray, index: np.ndarray) -> dict[str, np.ndarray]:
    """Split path indices into their digits (c, ku, j, mu, md, kd); unused digits are 0."""
    k, a, m = fabric.rack_links, fabric.atsws_per_plane, fabric.agg_links
    index = np.asarray(index, dtype=np.int64)
    cross = np.asarray(cls) == CROSS_POD
    if cross.shape == index.shape and (cross.all() or not cross.any()):  # one kind of path
        return _decode_one(index, k, max(a, 1), max(m, 1), bool(cross.any()))
    rest = index.copy()
    kd = rest % k
    rest //= k
    md = np.where(cross, rest % max(m, 1), 0)
    rest = np.where(cross, rest // max(m, 1), rest)
    mu = np.where(cross, rest % max(m, 1), 0)
    rest = np.where(cross, rest // max(m, 1), rest)
    j = np.where(cross, rest % max(a, 1), 0)
    rest = np.where(cross, rest // max(a, 1), rest)
    ku = rest % k
    c = rest // k
    return {"c": c, "ku": ku, "j": j, "mu": mu, "md": md, "kd": kd}


def _decode_one(index: np.ndarray, k: int, a: int, m: int, cross: bool) -> dict[str, np.ndarray]:
    """`decode` of paths all cross-pod (`cross`) or all not."""
    kd, rest = index % k, index // k
    if not cross:
        zero = np.zeros(index.shape, np.int64)
        return {"c": rest // k, "ku": rest % k, "j": zero, "mu": zero, "md": zero, "kd": kd}
    md, rest = rest % m, rest // m
    mu, rest = rest % m, rest // m
    j, rest = rest % a, rest // a
    return {"c": rest // k, "ku": rest % k, "j": j, "mu": mu, "md": md, "kd": kd}


def path_index(fabric: Fabric, cls: np.ndarray, digits: dict[str, np.ndarray]) -> np.ndarray:
    """Inverse of `decode`: structured path index from its digits."""
    k, a, m = fabric.rack_links, max(fabric.atsws_per_plane, 1), fabric.agg_links
    head = digits["c"] * k + digits["ku"]
    cross = ((((head * a + digits["j"]) * m + digits["mu"]) * m + digits["md"]) * k
             + digits["kd"])  # fmt: skip
    pod = head * k + digits["kd"]
    out = np.where(np.asarray(cls) == CROSS_POD, cross, pod)
    return np.where(np.asarray(cls) == SAME_RACK, 0, out).astype(np.int64)


def path_arcs(
    fabric: Fabric, src_nic: np.ndarray, dst_nic: np.ndarray, index: np.ndarray
) -> np.ndarray:
    """Arc ids [F, MAX_HOPS] of path `index` for each flow, padded with -1."""
    src_nic = np.asarray(src_nic, dtype=np.int64)
    dst_nic = np.asarray(dst_nic, dtype=np.int64)
    index = np.asarray(index, dtype=np.int64)
    sr = fabric.rtsw_of_nic(src_nic)
    dr = fabric.rtsw_of_nic(dst_nic)
    out = np.full((src_nic.size, MAX_HOPS), -1, dtype=np.int64)
    out[:, 0] = fabric.up(fabric.access_link(src_nic))
    last = fabric.down(fabric.access_link(dst_nic))
    same_pod = fabric.pod_of_rtsw(sr) == fabric.pod_of_rtsw(dr)
    rack = np.flatnonzero(sr == dr)
    out[rack, 1] = last[rack]
    for cls, rows in ((SAME_POD, np.flatnonzero(same_pod & (sr != dr))),
                      (CROSS_POD, np.flatnonzero(~same_pod))):  # fmt: skip
        if not rows.size:
            continue
        d = decode(fabric, np.full(rows.size, cls), index[rows])
        s, t = sr[rows], dr[rows]
        out[rows, 1] = fabric.up(fabric.rack_link(s, d["c"], d["ku"]))
        down = fabric.down(fabric.rack_link(t, d["c"], d["kd"]))
        if cls == SAME_POD:
            out[rows, 2], out[rows, 3] = down, last[rows]
            continue
        sp, dp = fabric.pod_of_rtsw(s), fabric.pod_of_rtsw(t)
        out[rows, 2] = fabric.up(fabric.agg_link(sp, d["c"], d["j"], d["mu"]))
        out[rows, 3] = fabric.down(fabric.agg_link(dp, d["c"], d["j"], d["md"]))
        out[rows, 4], out[rows, 5] = down, last[rows]
    return out


def hop_arc(
    fabric: Fabric,
    cls: int,
    src_nic: np.ndarray,
    dst_nic: np.ndarray,
    digits: dict[str, np.ndarray],
    pos: int,
) -> np.ndarray:
    """Column `pos` of path_arcs for flows all of class `cls` (SAME_POD or CROSS_POD) whose
    paths are given by their digits (see decode): one arc per flow, without the others."""
    src_nic = np.asarray(src_nic, dtype=np.int64)
    if pos == 0:
        return np.asarray(fabric.up(fabric.access_link(src_nic)))
    sr = fabric.rtsw_of_nic(src_nic)
    if pos == 1:
        return np.asarray(fabric.up(fabric.rack_link(sr, digits["c"], digits["ku"])))
    dr = fabric.rtsw_of_nic(np.asarray(dst_nic, dtype=np.int64))
    last = MAX_HOPS - 1 if cls == CROSS_POD else 3
    if pos == last:
        return np.asarray(fabric.down(fabric.access_link(np.asarray(dst_nic, dtype=np.int64))))
    if pos == last - 1:
        return np.asarray(fabric.down(fabric.rack_link(dr, digits["c"], digits["kd"])))
    if cls == CROSS_POD and pos == 2:
        link = fabric.agg_link(fabric.pod_of_rtsw(sr), digits["c"], digits["j"], digits["mu"])
        return np.asarray(fabric.up(link))
    if cls == CROSS_POD and pos == 3:
        link = fabric.agg_link(fabric.pod_of_rtsw(dr), digits["c"], digits["j"], digits["md"])
        return np.asarray(fabric.down(link))
    raise ValueError(f"no hop {pos} on a path of class {cls}")


def agg_grid(fabric: Fabric) -> np.ndarray:
    """Link ids [pods, C, A, L] of every CTSW's ATSW links."""
    return fabric.agg_link(
        np.arange(fabric.pods)[:, None, None, None],
        np.arange(fabric.ctsws_per_pod)[None, :, None, None],
        np.arange(fabric.atsws_per_plane)[None, None, :, None],
        np.arange(fabric.agg_links)[None, None, None, :],
    )


def best_bottleneck(
    fabric: Fabric, arc_capacity: np.ndarray, src_nic: np.ndarray, dst_nic: np.ndarray
) -> np.ndarray:
    """Per flow, the largest bottleneck capacity over its candidate paths, access links
    included: 0 when no path is alive (its NIC's link down, its RTSW drained, or every way
    out of or into its rack cut), the flow then stalled under any routing.

    Parallel members are independent choices, so the best member of each hop is taken
    first; then the best plane c (and ATSW j) maximises the smallest hop. The best path
    depends on the rack pair only: one row per pair."""
    cap = arc_capacity
    src, dst = np.asarray(src_nic), np.asarray(dst_nic)
    out = np.minimum(cap[fabric.up(src)], cap[fabric.down(dst)])
    sr, dr = fabric.rtsw_of_nic(src), fabric.rtsw_of_nic(dst)
    leave = np.flatnonzero(sr != dr)
    if not leave.size:
        return out
    pair, inv = np.unique(sr[leave] * fabric.num_rtsws + dr[leave], return_inverse=True)
    psr, pdr = pair // fabric.num_rtsws, pair % fabric.num_rtsws
    links = fabric.rack_uplinks()
    rack_up = cap[fabric.up(links)].max(axis=2)  # [racks, C]
    rack_down = cap[fabric.down(links)].max(axis=2)
    plane = np.minimum(rack_up[psr], rack_down[pdr])  # [pairs, C]
    sp, dp = fabric.pod_of_rtsw(psr), fabric.pod_of_rtsw(pdr)
    cross = sp != dp
    if cross.any():
        agg = agg_grid(fabric)
        agg_up = cap[fabric.up(agg)].max(axis=3)  # [pods, C, A]
        agg_down = cap[fabric.down(agg)].max(axis=3)
        via_atsw = np.minimum(agg_up[sp[cross]], agg_down[dp[cross]]).max(axis=2)
        plane[cross] = np.minimum(plane[cross], via_atsw)
    out[leave] = np.minimum(out[leave], plane.max(axis=1)[inv.ravel()])
    return out


def stranded(
    fabric: Fabric, arc_capacity: np.ndarray, src_nic: np.ndarray, dst_nic: np.ndarray
) -> np.ndarray:
    """Per flow, True where no path is alive (`best_bottleneck` is 0), for many flows and few
    failures: only flows near a dead arc are looked at, since a flow whose NIC links, whose
    racks' uplinks and (across pods) whose pods' aggregation links are all alive has one."""
    src, dst = np.asarray(src_nic), np.asarray(dst_nic)
    out = np.zeros(src.size, bool)
    cap = arc_capacity
    if not src.size or not (cap <= 0).any():
        return out
    dead = (cap[0::2] <= 0) | (cap[1::2] <= 0)  # per link, either way
    rack_bad = dead[fabric.rack_uplinks()].any(axis=(1, 2))
    pod_bad = dead[agg_grid(fabric)].any(axis=(1, 2, 3))
    sr, dr = fabric.rtsw_of_nic(src), fabric.rtsw_of_nic(dst)
    sp, dp = fabric.pod_of_rtsw(sr), fabric.pod_of_rtsw(dr)
    near = (dead[fabric.access_link(src)] | dead[fabric.access_link(dst)]
            | ((sr != dr) & (rack_bad[sr] | rack_bad[dr]))
            | ((sp != dp) & (pod_bad[sp] | pod_bad[dp])))  # fmt: skip
    rows = np.flatnonzero(near)
    if rows.size:
        out[rows] = best_bottleneck(fabric, cap, src[rows], dst[rows]) <= 0
    return out


def path_alive(arcs: np.ndarray, arc_capacity: np.ndarray) -> np.ndarray:
    """True where every arc of a padded path row has capacity left."""
    ok = np.where(arcs >= 0, arc_capacity[np.maximum(arcs, 0)] > 0, True)
    return np.asarray(ok.all(axis=1))


def core_arcs(arcs: np.ndarray) -> np.ndarray:
    """Drop the two access arcs (fixed per flow); keep the switch-to-switch hops."""
    out = arcs[:, 1:].copy()
    lengths = (arcs >= 0).sum(axis=1)
    out[np.arange(arcs.shape[0]), lengths - 2] = -1
    return out
