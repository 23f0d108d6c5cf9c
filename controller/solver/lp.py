"""The fractional min-MLU multi-commodity-flow LP, in a layered (exact) form.

Sets
    M  commodities m = (source RTSW r_m, destination RTSW s_m), demand d_m (Gbps)
    O  rack options o = (c, ku, kd): up link (r_m, c, ku), down link (c, s_m, kd)
    G  plane groups g = (source pod, destination pod, plane c) of cross-pod commodities
    Q  aggregation options q = (j, mu, md): CTSW c -> ATSW (c, j) over member mu, down md
    E  arcs, capacity cap_e under the current health
Variables
    x[m, o] >= 0   fraction of commodity m on rack option o (alive links only)
    w[g, q] >= 0   plane-group traffic through aggregation option q (line-rate units)
    u >= 0         maximum link utilisation
Objective
    minimise u
Constraints
    sum_o x[m, o] = 1                                            for every commodity m
    sum_q w[g, q] = sum_{m in g, o with plane c} d_m x[m, o]     for every plane group g
    sum_{(m,o) uses e} d_m x[m, o] + sum_{(g,q) uses e} w[g, q] <= cap_e u   for every arc e

The ATSW hop of a cross-pod path touches only the two pods' CTSW-ATSW links of plane c, never
the racks, so pooling it per (pod pair, plane) is exact: any (x, w) decomposes into path
flows by splitting each commodity's plane-c traffic over q in proportion to w[g, q]. This
keeps the LP at C*K*K variables per commodity instead of C*K*A*L*L*K.

The reported bound is certified by weak duality, not read off the solver's primal u (a
first-order method such as PDLP stops with a slightly infeasible primal whose u can lie below
the optimum). For any arc prices p_e >= 0, not all zero, and any feasible (x, w, u):

    u * sum_e p_e cap_e >= sum_e p_e load_e
                         = sum_(m,o) x[m, o] d_m P(o) + sum_(g,q) w[g, q] P(q)
                         >= sum_(m,o) x[m, o] d_m (P(o) + [m cross-pod] min_q P(g(m, o), q))
                         >= sum_m d_m min_o (P(o) + [m cross-pod] min_q P(g(m, o), q))

where P(.) is the sum of p over an option's arcs; the second step uses the group balance
rows, the last sum_o x[m, o] = 1. So the right-hand side over sum_e p_e cap_e bounds every
fractional (hence every integral) routing, whatever p is. With p the solver's arc-row duals
it equals the optimum up to the solver's tolerance; if the duals certify less than
u * (1 - CERT_REL_TOL) (HiGHS through model_builder returns no usable duals), the solution
falls back to the primal u, shaved by PDLP_REL_TOL for PDLP, and says so (certified=False).

The matrix is built with numpy/scipy.sparse and handed to OR-Tools in one call
(model_builder's fill_model_from_sparse_data); one Python call per coefficient would cost
seconds at 24K GPUs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from ortools.linear_solver.python import model_builder as mb

from controller.errors import InputError, LpError, LpTimeout
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD
from controller.solver.commodities import Commodities

BACKENDS = ("pdlp", "highs", "glop")
DEFAULT_BACKEND = "pdlp"  # see docs/benchmarks.md: predictable at scale, unlike simplex
# Used only when the duals do not certify a bound: PDLP stops at a relative optimality gap
# with a slightly infeasible primal, so its u is shaved by this much (a heuristic margin).
PDLP_REL_TOL = 1e-4
# Dual certificates this close to the primal u are accepted; a tiny relative shave keeps the
# certified value below the optimum despite floating-point rounding.
CERT_REL_TOL = 1e-3
FLOAT_SHAVE = 1e-9


@dataclass(frozen=True)
class LpSolution:
    """The LP optimum and the fractional routing behind it."""

    status: str
    mlu: float  # optimal u: a lower bound on the MLU of any routing over the candidates
    backend: str
    rack_comm: np.ndarray = field(repr=False)  # [X] commodity of each x variable
    rack_option: np.ndarray = field(repr=False)  # [X] option o = (c*K + ku)*K + kd
    rack_share: np.ndarray = field(repr=False)  # [X] x value, sums to 1 per commodity
    group_key: np.ndarray = field(repr=False)  # [G, 3] (src pod, dst pod, plane)
    agg_group: np.ndarray = field(repr=False)  # [W] group of each w variable
    agg_option: np.ndarray = field(repr=False)  # [W] option q = (j*L + mu)*L + md
    agg_share: np.ndarray = field(repr=False)  # [W] fraction of the group's traffic
    unroutable: np.ndarray = field(repr=False)  # commodities with no alive path
    variables: int = 0
    rows: int = 0
    build_seconds: float = 0.0
    solve_seconds: float = 0.0
    objective: float = 0.0  # the solver's primal u, as returned
    certified: bool = True  # mlu comes from the dual certificate (see the module docstring)

    def path_shares(
        self, fabric: Fabric, comm: Commodities, min_share: float = 1e-6
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per full path: (commodity, path index in controller.model.paths numbering, share).

        Cross-pod shares are x[m, o] * w-fraction[g, q]; shares below `min_share` are
        dropped so that the expansion stays small."""
        k = fabric.rack_links
        agg = fabric.atsws_per_plane * fabric.agg_links**2
        keep = self.rack_share > min_share
        m, o, x = self.rack_comm[keep], self.rack_option[keep], self.rack_share[keep]
        same = comm.cls[m] != CROSS_POD
        out_m, out_p, out_s = [m[same]], [o[same]], [x[same]]
        if (~same).any():
            mc, oc, xc = m[~same], o[~same], x[~same]
            c = oc // (k * k)
            pa, pb = fabric.pod_of_rtsw(comm.src_rtsw[mc]), fabric.pod_of_rtsw(comm.dst_rtsw[mc])
            gid = _group_ids(self.group_key, pa, pb, c)
            w_keep = self.agg_share > min_share
            order = np.argsort(self.agg_group[w_keep], kind="stable")
            wg = self.agg_group[w_keep][order]
            wq = self.agg_option[w_keep][order]
            ws = self.agg_share[w_keep][order]
            start = np.searchsorted(wg, gid, side="left")
            count = np.searchsorted(wg, gid, side="right") - start
            rep = np.repeat(np.arange(mc.size), count)
            idx = np.repeat(start, count) + (
                np.arange(rep.size) - np.repeat(count.cumsum() - count, count)
            )
            ku, kd = (oc // k) % k, oc % k
            path = ((c[rep] * k + ku[rep]) * agg + wq[idx]) * k + kd[rep]
            out_m.append(mc[rep])
            out_p.append(path)
            out_s.append(xc[rep] * ws[idx])
        return np.concatenate(out_m), np.concatenate(out_p), np.concatenate(out_s)


def _group_ids(key: np.ndarray, pa: np.ndarray, pb: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Row of (pa, pb, c) in the sorted group table `key`."""
    span = int(max(key.max(initial=0), pa.max(initial=0), pb.max(initial=0), c.max(initial=0))) + 1
    flat = (key[:, 0] * span + key[:, 1]) * span + key[:, 2]
    return np.searchsorted(flat, (pa * span + pb) * span + c)


@dataclass(frozen=True)
class _Model:
    """The LP as arrays: column blocks [x | w | u]."""

    rack_comm: np.ndarray
    rack_option: np.ndarray
    rack_group: np.ndarray  # plane group of each x column, -1 for same-pod commodities
    group_key: np.ndarray
    agg_group: np.ndarray
    agg_option: np.ndarray
    unroutable: np.ndarray
    matrix: sp.csr_matrix
    row_lb: np.ndarray
    row_ub: np.ndarray
    scale: float
    first_arc_row: int  # rows [first_arc_row, end) are the arc rows


def _rack_options(fabric: Fabric, comm: Commodities, cap: np.ndarray) -> tuple[np.ndarray, ...]:
    """Alive (commodity, option, up arc, down arc) rows."""
    k = fabric.rack_links
    n_opt = fabric.ctsws_per_pod * k * k
    m = np.repeat(np.arange(len(comm)), n_opt)
    o = np.tile(np.arange(n_opt), len(comm))
    c, ku, kd = o // (k * k), (o // k) % k, o % k
    up = fabric.up(fabric.rack_link(comm.src_rtsw[m], c, ku))
    down = fabric.down(fabric.rack_link(comm.dst_rtsw[m], c, kd))
    alive = (cap[up] > 0) & (cap[down] > 0)
    return m[alive], o[alive], up[alive], down[alive]


def _agg_options(fabric: Fabric, groups: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, ...]:
    """Alive (group, option, up arc, down arc) rows for plane groups (pa, pb, c)."""
    n_l, n_a = fabric.agg_links, fabric.atsws_per_plane
    n_opt = n_a * n_l * n_l
    g = np.repeat(np.arange(groups.shape[0]), n_opt)
    q = np.tile(np.arange(n_opt), groups.shape[0])
    j, mu, md = q // (n_l * n_l), (q // n_l) % n_l, q % n_l
    pa, pb, c = groups[g, 0], groups[g, 1], groups[g, 2]
    up = fabric.up(fabric.agg_link(pa, c, j, mu))
    down = fabric.down(fabric.agg_link(pb, c, j, md))
    alive = (cap[up] > 0) & (cap[down] > 0)
    return g[alive], q[alive], up[alive], down[alive]


def build_model(fabric: Fabric, health: LinkHealth, comm: Commodities) -> _Model:
    """Assemble the sparse LP; commodities with no alive path are left out and reported."""
    cap = health.arc_capacity(fabric)
    k = fabric.rack_links
    scale = float(comm.demand.max(initial=1.0)) or 1.0
    d = comm.demand / scale
    xm, xo, xup, xdown = _rack_options(fabric, comm, cap)
    cross = comm.cls[xm] == CROSS_POD
    pa = fabric.pod_of_rtsw(comm.src_rtsw[xm])
    pb = fabric.pod_of_rtsw(comm.dst_rtsw[xm])
    plane = xo // (k * k)
    empty = np.zeros((0, 3), dtype=np.int64)
    groups = np.unique(np.stack([pa, pb, plane], 1)[cross], axis=0) if cross.any() else empty
    wg, wq, wup, wdown = _agg_options(fabric, groups, cap)
    # plane groups with no alive ATSW route cannot carry traffic: drop their x options
    if cross.any():
        gid = _group_ids(groups, pa, pb, plane)
        has_route = np.bincount(wg, minlength=groups.shape[0]) > 0
        ok = ~cross | has_route[np.minimum(gid, max(groups.shape[0] - 1, 0))]
        xm, xo, xup, xdown = xm[ok], xo[ok], xup[ok], xdown[ok]
        cross, pa, pb, plane = cross[ok], pa[ok], pb[ok], plane[ok]
        used = np.unique(_group_ids(groups, pa[cross], pb[cross], plane[cross]))
        keep_g = np.zeros(groups.shape[0], bool)
        keep_g[used] = True
        remap = np.cumsum(keep_g) - 1
        w_ok = keep_g[wg]
        wg, wq, wup, wdown = remap[wg[w_ok]], wq[w_ok], wup[w_ok], wdown[w_ok]
        groups = groups[keep_g]
    routable = np.bincount(xm, minlength=len(comm)) > 0
    unroutable = np.flatnonzero(~routable)
    comm_row = np.cumsum(routable) - 1  # row of each routable commodity
    n_x, n_w = xm.size, wg.size
    n_c, n_g = int(routable.sum()), groups.shape[0]
    # arc rows only for arcs that some variable uses
    arcs_used, arc_inv = np.unique(np.concatenate([xup, xdown, wup, wdown]), return_inverse=True)
    arc_row = n_c + n_g + arc_inv
    x_col, w_col, u_col = np.arange(n_x), n_x + np.arange(n_w), n_x + n_w
    xgid = _group_ids(groups, pa[cross], pb[cross], plane[cross]) if n_g else np.zeros(0, int)
    rows = np.concatenate([
        comm_row[xm],  # sum_o x = 1
        n_c + xgid,  # - d x in its plane group's balance
        n_c + wg,  # + w in its group's balance
        arc_row,  # arc loads: x on up and down arcs, w on agg up and down arcs
        n_c + n_g + np.arange(arcs_used.size),  # - cap u
    ])  # fmt: skip
    cols = np.concatenate([
        x_col, x_col[cross], w_col, x_col, x_col, w_col, w_col,
        np.full(arcs_used.size, u_col),
    ])  # fmt: skip
    vals = np.concatenate([
        np.ones(n_x), -d[xm[cross]], np.ones(n_w), d[xm], d[xm], np.ones(n_w), np.ones(n_w),
        -cap[arcs_used] / scale,
    ])  # fmt: skip
    n_rows = n_c + n_g + arcs_used.size
    matrix = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, n_x + n_w + 1))
    matrix.sum_duplicates()
    row_lb = np.concatenate([np.ones(n_c), np.zeros(n_g), np.full(arcs_used.size, -np.inf)])
    row_ub = np.concatenate([np.ones(n_c), np.zeros(n_g), np.zeros(arcs_used.size)])
    x_group = np.full(n_x, -1, dtype=np.int64)
    x_group[cross] = xgid
    return _Model(
        xm, xo, x_group, groups, wg, wq, unroutable, matrix, row_lb, row_ub, scale, n_c + n_g
    )


def certified_bound(a: _Model, n_comm: int, price: np.ndarray) -> float:
    """Weak-duality lower bound on u from arc-row prices (any values; negatives count as 0).

    See the module docstring for the proof; valid whatever solver produced `price`."""
    p = np.clip(np.nan_to_num(price, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    arc = a.matrix[a.first_arc_row :]
    denom = -float(arc[:, -1].toarray().ravel() @ p)  # sum_e p_e cap_e / scale
    if denom <= 0:
        return 0.0
    col = arc[:, :-1].T @ p  # d_m P(o) / scale per x column, P(q) per w column
    n_x = a.rack_comm.size
    cost = col[:n_x]
    n_g = a.group_key.shape[0]
    if n_g:
        best_q = np.full(n_g, np.inf)
        np.minimum.at(best_q, a.agg_group, col[n_x:])
        # a cross-pod x column's coefficient in its group's balance row is -d_m / scale
        balance = a.matrix[a.first_arc_row - n_g : a.first_arc_row, :n_x]
        d_x = -np.asarray(balance.sum(axis=0)).ravel()
        cross = a.rack_group >= 0
        cost = cost + np.where(cross, d_x * best_q[np.maximum(a.rack_group, 0)], 0.0)
    best = np.full(n_comm, np.inf)
    np.minimum.at(best, a.rack_comm, cost)
    total = float(best[np.isfinite(best)].sum())
    return max(total / denom * (1.0 - FLOAT_SHAVE), 0.0)


def even_split(fabric: Fabric, health: LinkHealth, comm: Commodities) -> float:
    """The MLU of one feasible point of the LP, each commodity split evenly over its alive
    rack options and each plane group's traffic evenly over its aggregation options: an
    upper bound on the optimum (a lower one, such as the cuts, meeting it settles the
    optimum without solving). 0 when nothing leaves a rack."""
    a = build_model(fabric, health, comm)
    n_x, n_w = a.rack_comm.size, a.agg_group.size
    if n_x == 0:
        return 0.0
    x = 1.0 / np.bincount(a.rack_comm, minlength=len(comm))[a.rack_comm]
    n_g = a.group_key.shape[0]
    w = np.zeros(n_w)
    if n_g:
        # each group's balance row: sum_q w = sum d x over its cross-pod x columns
        balance = a.matrix[a.first_arc_row - n_g : a.first_arc_row, :n_x]
        total = -(balance @ x)
        w = total[a.agg_group] / np.bincount(a.agg_group, minlength=n_g)[a.agg_group]
    arc = a.matrix[a.first_arc_row :]
    load = arc[:, : n_x + n_w] @ np.concatenate([x, w])  # Gbps / scale per arc row
    cap = -arc[:, -1].toarray().ravel()  # cap / scale
    return float(np.max(load / cap))


def _pick_backend(backend: str) -> str:
    name = DEFAULT_BACKEND if backend == "auto" else backend
    if name not in BACKENDS:
        raise InputError(f"unknown LP backend {backend!r}; known: auto, {', '.join(BACKENDS)}")
    return name


def solve_lp(
    fabric: Fabric,
    health: LinkHealth,
    comm: Commodities,
    *,
    backend: str = "auto",
    time_limit: float = 30.0,
    threads: int = 1,
) -> LpSolution:
    """Solve the min-MLU LP; raise LpError (LpTimeout past `time_limit`) unless optimal."""
    name = _pick_backend(backend)
    start = time.perf_counter()
    model_arrays = build_model(fabric, health, comm)
    a = model_arrays
    n_x, n_w = a.rack_comm.size, a.agg_group.size
    n_var = n_x + n_w + 1
    if n_x == 0:
        return _solution(
            "trivial", 0.0, name, a, np.zeros(0), np.zeros(0), 0, start, start, 0.0, True
        )
    var_lb = np.zeros(n_var)
    var_ub = np.concatenate([np.ones(n_x), np.full(n_w + 1, np.inf)])
    obj = np.zeros(n_var)
    obj[-1] = 1.0
    model = mb.Model()
    # the helper's stubs type arrays by element, not shape: checked by tests instead
    fill = model.helper.fill_model_from_sparse_data
    fill(var_lb, var_ub, obj, a.row_lb, a.row_ub, a.matrix)  # type: ignore[arg-type]
    model.minimize(model.var_from_index(n_var - 1))
    built = time.perf_counter()
    solver = mb.Solver(name)
    if not solver.solver_is_supported():
        raise LpError(f"LP backend {name!r} is not available in this OR-Tools build")
    solver.set_time_limit_in_seconds(time_limit)
    if threads > 1:
        solver.set_solver_specific_parameters(f"num_threads: {threads}" if name == "pdlp" else "")
    status = solver.solve(model)
    if status != mb.SolveStatus.OPTIMAL:
        elapsed = time.perf_counter() - built
        # a time limit shows as NOT_SOLVED or FEASIBLE, depending on the backend
        error = LpTimeout if elapsed >= time_limit or status == mb.SolveStatus.FEASIBLE else LpError
        raise error(
            f"LP ({name}) ended {status.name} after {elapsed:.1f} s "
            f"(limit {time_limit} s, {n_var} variables, {a.matrix.shape[0]} rows)"
        )
    helper = solver._Solver__solve_helper  # type: ignore[attr-defined]
    values = np.asarray(helper.variable_values(), dtype=np.float64)
    objective = float(values[-1])
    duals = np.asarray(helper.dual_values(), dtype=np.float64)[a.first_arc_row :]
    # either sign convention gives a valid bound; take the better one
    cert = max(certified_bound(a, len(comm), duals), certified_bound(a, len(comm), -duals))
    certified = cert >= objective * (1.0 - CERT_REL_TOL)
    if certified:
        u = cert
    else:
        u = objective * (1.0 - PDLP_REL_TOL) if name == "pdlp" else objective
    x = _normalise(np.clip(values[:n_x], 0.0, None), a.rack_comm, len(comm))
    w = _normalise(np.clip(values[n_x : n_x + n_w], 0.0, None), a.agg_group, a.group_key.shape[0])
    return _solution("optimal", u, name, a, x, w, n_var, start, built, objective, certified)


def _normalise(values: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Scale values to sum to 1 within each group (uniform where a group is all zero)."""
    total = np.bincount(group, weights=values, minlength=n_groups)
    count = np.bincount(group, minlength=n_groups)
    zero = total[group] <= 0
    out = np.where(
        zero, 1.0 / np.maximum(count[group], 1), values / np.where(zero, 1, total[group])
    )
    return out


def _solution(
    status: str,
    mlu: float,
    backend: str,
    a: _Model,
    x: np.ndarray,
    w: np.ndarray,
    n_var: int,
    start: float,
    built: float,
    objective: float,
    certified: bool,
) -> LpSolution:
    now = time.perf_counter()
    return LpSolution(
        status=status,
        mlu=mlu,
        backend=backend,
        rack_comm=a.rack_comm,
        rack_option=a.rack_option,
        rack_share=x,
        group_key=a.group_key,
        agg_group=a.agg_group,
        agg_option=a.agg_option,
        agg_share=w,
        unroutable=a.unroutable,
        variables=n_var,
        rows=int(a.matrix.shape[0]),
        build_seconds=built - start,
        solve_seconds=now - built,
        objective=objective,
        certified=certified,
    )
