"""Lower bounds on maximum link utilisation (MLU) for any routing of a set of flows.

Each bound is a cut or a single-flow argument; all are valid for every integral routing over
the candidate paths, and all but `largest-flow` for fractional routings too:

- access: a NIC's traffic has exactly one access link each way; its load is fixed.
- rack-egress / rack-ingress: every flow leaving rack r crosses one of r's alive uplinks, so
  some uplink carries at least egress(r) / alive uplink capacity(r) (pigeonhole over the
  cut); likewise for traffic entering r over its downlinks.
- pod-egress / pod-ingress: every cross-pod flow from pod p crosses an alive CTSW->ATSW link
  of p; likewise for traffic entering p.
- rack-egress-unsplit (and ingress, pod-*): flows are not split, so if a cut has U alive
  links of capacity at most cap_max, the i-th largest flow d_i (i = t*U, counting from 0)
  and the t*U flows before it cannot all sit on different links: some link carries t+1
  flows of at least d_i each, so MLU >= (t+1) d_i / cap_max. A routing of unsplit flows is
  also a routing of the cut, so the part is the larger of that and the cut's own bound: a
  refinement is never below its fractional counterpart (the pigeonhole alone can be far
  below it when flows are small against the links, e.g. QP buckets).
- largest-flow: an unsplit flow of demand d on a path whose smallest capacity is b puts at
  least d / b on that arc; the best path has the largest b.
- lp: the fractional min-MLU optimum (controller.solver.lp) bounds every routing.

Flows with no alive path (controller.model.paths.best_bottleneck is 0: a NIC link down, a
drained RTSW, a rack cut off) are left out of every part: no routing carries them, so they
load nothing (they are reported unroutable, and their jobs stalled).

With `qps` > 1 the bounds hold for routings that may split each flow into up to `qps` equal
QP buckets (controller.solver.qp_buckets): the unsplit and largest-flow bounds then count buckets of
demand / qps instead of whole flows (and the unsplit ones are named rack-egress-16qp etc.).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import CROSS_POD, SAME_RACK, agg_grid, best_bottleneck, flow_class
from controller.solver.lp import LpSolution


@dataclass(frozen=True)
class Bound:
    """The best lower bound and every part it was taken from."""

    value: float
    name: str
    parts: dict[str, float] = field(default_factory=dict)

    def with_lp(self, lp: LpSolution) -> Bound:
        """This bound with the LP's fractional optimum as one more part: what
        `lower_bound(..., lp)` gives for the same fabric, health, flows and QPs, without
        counting the cuts again."""
        return _best({**self.parts, "lp": lp.mlu})


def _ratio(load: np.ndarray, cap: np.ndarray) -> float:
    """max load/cap over groups; load on zero capacity is infinite."""
    loaded = load > 0
    if not loaded.any():
        return 0.0
    if (loaded & (cap <= 0)).any():
        return float("inf")
    return float((load[loaded] / cap[loaded]).max())


def lower_bound(
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    lp: LpSolution | None = None,
    qps: int = 1,
) -> Bound:
    """The largest valid lower bound on MLU (see the module docstring)."""
    src, dst = flows.src_nic, flows.dst_nic
    bound = cheap_bound(fabric, health.arc_capacity(fabric), flows, flow_class(fabric, src, dst),
                        fabric.rtsw_of_nic(src), fabric.rtsw_of_nic(dst), qps)  # fmt: skip
    return bound if lp is None else bound.with_lp(lp)


def cheap_bound(
    fabric: Fabric,
    cap: np.ndarray,
    flows: FlowSet,
    cls: np.ndarray,
    sr: np.ndarray,
    dr: np.ndarray,
    qps: int = 1,
) -> Bound:
    """`lower_bound` without the LP, from the arc capacities `cap` and the flows' classes
    and source and destination racks (controller.model.paths), as a Problem holds them."""
    parts: dict[str, float] = {}
    best = best_bottleneck(fabric, cap, flows.src_nic, flows.dst_nic)
    alive = best > 0
    if not alive.all():  # stalled under any routing: they load nothing
        keep = np.flatnonzero(alive)
        flows, cls, sr, dr, best = flows.take(keep), cls[keep], sr[keep], dr[keep], best[keep]
    if len(flows):
        src, dst, d = flows.src_nic, flows.dst_nic, flows.demand
        nic_out = np.bincount(src, weights=d, minlength=fabric.num_nics)
        nic_in = np.bincount(dst, weights=d, minlength=fabric.num_nics)
        nics = np.arange(fabric.num_nics)
        parts["access"] = max(
            _ratio(nic_out, cap[fabric.up(nics)]), _ratio(nic_in, cap[fabric.down(nics)])
        )
        leaves = cls != SAME_RACK
        racks = fabric.num_rtsws
        rack_links = fabric.rack_uplinks().reshape(racks, -1)
        up_cap = cap[fabric.up(rack_links)].sum(axis=1)
        down_cap = cap[fabric.down(rack_links)].sum(axis=1)
        parts["rack-egress"] = _ratio(np.bincount(sr[leaves], d[leaves], racks), up_cap)
        parts["rack-ingress"] = _ratio(np.bincount(dr[leaves], d[leaves], racks), down_cap)
        up, down = cap[fabric.up(rack_links)], cap[fabric.down(rack_links)]
        # unsplit bounds count QP buckets when flows may be split (qps > 1)
        mult = np.where(flows.qp == ALL_QPS, max(qps, 1), 1)
        unit = d / mult

        tag = "unsplit" if qps <= 1 else f"{qps}qp"

        def unsplit(group: np.ndarray, rows: np.ndarray, link_cap: np.ndarray) -> float:
            return _unsplit(group, unit[rows], link_cap, mult[rows])

        parts[f"rack-egress-{tag}"] = max(parts["rack-egress"], unsplit(sr[leaves], leaves, up))
        parts[f"rack-ingress-{tag}"] = max(
            parts["rack-ingress"], unsplit(dr[leaves], leaves, down)
        )
        cross = cls == CROSS_POD
        if cross.any():
            pods = fabric.pods
            agg = agg_grid(fabric).reshape(pods, -1)
            sp, dp = fabric.pod_of_rtsw(sr[cross]), fabric.pod_of_rtsw(dr[cross])
            parts["pod-egress"] = _ratio(
                np.bincount(sp, d[cross], pods), cap[fabric.up(agg)].sum(axis=1)
            )
            parts["pod-ingress"] = _ratio(
                np.bincount(dp, d[cross], pods), cap[fabric.down(agg)].sum(axis=1)
            )
            parts[f"pod-egress-{tag}"] = max(
                parts["pod-egress"], unsplit(sp, cross, cap[fabric.up(agg)])
            )
            parts[f"pod-ingress-{tag}"] = max(
                parts["pod-ingress"], unsplit(dp, cross, cap[fabric.down(agg)])
            )
        parts["largest-flow"] = _largest_flow(fabric, unit, best)
    return _best(parts)


def _best(parts: dict[str, float]) -> Bound:
    """The largest part (ties by name), or 0 when there is none."""
    if not parts:
        return Bound(0.0, "none", parts)
    name = max(sorted(parts), key=lambda k: parts[k])
    return Bound(parts[name], name, parts)


def _unsplit(
    group: np.ndarray, demand: np.ndarray, link_cap: np.ndarray, copies: np.ndarray | None = None
) -> float:
    """Pigeonhole bound for unsplit flows crossing per-group cuts of links [G, links]; row i
    stands for `copies[i]` equal flows (QP buckets) of demand[i] each (default 1)."""
    if group.size == 0:
        return 0.0
    alive = (link_cap > 0).sum(axis=1)
    cap_max = link_cap.max(axis=1)
    n_links = alive[group]
    if (n_links == 0).any():
        return float("inf")
    m = np.ones(group.size, np.int64) if copies is None else np.asarray(copies, np.int64)
    order = np.lexsort((-demand, group))
    g, dm, m, u = group[order], demand[order], m[order], n_links[order]
    # the copies of sorted row i hold ranks [lo, hi] within the group's descending order;
    # rank t*U (t >= 1) bounds by (t+1) d / cap_max, the largest such t in [lo, hi] counts
    end = np.cumsum(m)
    first = np.searchsorted(g, g, side="left")
    before = np.r_[0, end][first]
    hi = end - 1 - before
    lo = hi - m + 1
    t = hi // u
    pick = (t * u >= lo) & (t >= 1)
    if not pick.any():
        return 0.0
    return float(((t[pick] + 1) * dm[pick] / cap_max[g[pick]]).max())


def _largest_flow(fabric: Fabric, unit: np.ndarray, best: np.ndarray) -> float:
    """max over flows of demand (the unsplittable unit) / (best alive path's bottleneck,
    controller.model.paths.best_bottleneck), access links included."""
    return _ratio(unit, best)
