"""Table budgets: how many TE entries each switch holds for an assignment, and fitting an
assignment into the entries each switch has room for (flows that do not fit ride ECMP).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import SWITCH_TIERS, Fabric
from controller.model.flows import ALL_QPS
from controller.routes.entries import RTSW_UP, entry_keys, installed_keys

# Entries per switch: one number, by switch name, or by node id (Fabric.table_budget()).
TableBudget = int | Mapping[str, int] | np.ndarray


def table_usage(
    fabric: Fabric, assignment: Assignment, arcs: np.ndarray | None = None
) -> np.ndarray:
    """Entries each switch holds for the assignment, by node id (int64 [num_nodes]): what
    build_routes installs, one per distinct key with QP buckets folded. `arcs`: the
    assignment's Assignment.arcs, if at hand."""
    keys = entry_keys(fabric, assignment, arcs)
    if not keys.flow.size:
        return np.zeros(fabric.num_nodes, np.int64)
    in_arc = installed_keys(fabric, keys)[0]
    return _per_switch(fabric, in_arc)


def entry_in_arcs(fabric: Fabric, assignment: Assignment) -> tuple[np.ndarray, np.ndarray]:
    """(row, in-arc) of every entry key a routed row of `assignment` needs, one pair per row
    and hop (before keys are shared or buckets folded): the arcs whose keys a row sits in."""
    keys = entry_keys(fabric, assignment)
    return keys.flow, keys.in_arc


def arc_usage(fabric: Fabric, assignment: Assignment) -> np.ndarray:
    """Entries keyed on each arriving arc, by arc id (int64 [num_arcs]); table_usage is their
    sum per switch. The entries on an arc depend only on the rows that use it, so a subset
    of rows counts the arcs all of whose rows it holds exactly."""
    keys = entry_keys(fabric, assignment)
    if not keys.flow.size:
        return np.zeros(fabric.num_arcs, np.int64)
    in_arc = installed_keys(fabric, keys)[0]
    return np.bincount(in_arc, minlength=fabric.num_arcs).astype(np.int64)


def _per_switch(fabric: Fabric, in_arc: np.ndarray) -> np.ndarray:
    return np.bincount(fabric.arc_ends[1][in_arc], minlength=fabric.num_nodes).astype(np.int64)


def switch_budget(fabric: Fabric, budget: TableBudget) -> np.ndarray:
    """The budget of every node, by node id (float64; inf where unlimited)."""
    nodes = np.arange(fabric.num_nodes)
    first = fabric.node_id("rtsw", 0)
    out = np.full(fabric.num_nodes, np.inf)
    out[first:] = _limits(fabric, budget, nodes[first:])
    return out


def fullest_switches(fabric: Fabric, usage: np.ndarray, budget: TableBudget) -> dict[str, int]:
    """Per tier the fabric has, the node id of its fullest switch: the most of its own
    budget used (an inventory may give one switch a budget of its own; with uniform
    budgets, the most entries), the first on a tie."""
    limit = switch_budget(fabric, budget)
    out = {}
    for tier in SWITCH_TIERS:
        if not fabric.tier_size(tier):
            continue
        lo = fabric.node_id(tier, 0)
        hi = lo + fabric.tier_size(tier)
        used, room = usage[lo:hi], limit[lo:hi]
        out[tier] = lo + int(np.argmax(used / np.maximum(room, 1)))
    return out


def _limits(fabric: Fabric, budget: TableBudget, nodes: np.ndarray) -> np.ndarray:
    """The budget of each of `nodes` (inf for a switch a mapping does not name)."""
    if isinstance(budget, np.ndarray):
        return budget[nodes].astype(np.float64)
    if not isinstance(budget, Mapping):
        return np.full(nodes.size, float(budget))
    return np.array([float(budget.get(fabric.node_name(int(n)), np.inf)) for n in nodes])


def tables_fit(fabric: Fabric, assignment: Assignment, budget: TableBudget) -> bool:
    """Whether every switch holds at most its budget of entries for the assignment."""
    usage = table_usage(fabric, assignment)
    nodes = np.flatnonzero(usage)
    return bool((usage[nodes] <= _limits(fabric, budget, nodes)).all())


def fit_tables(fabric: Fabric, assignment: Assignment, budget: TableBudget) -> Assignment:
    """The assignment with flows unrouted (left on ECMP) until every table fits `budget`;
    the assignment itself when it already fits (see _fit)."""
    return _fit(fabric, assignment, budget)[0]


def fit_and_count(
    fabric: Fabric, assignment: Assignment, budget: TableBudget, arcs: np.ndarray | None = None
) -> tuple[Assignment, np.ndarray]:
    """fit_tables, and the table_usage of its result (counted once when the assignment
    already fits). `arcs`: the assignment's Assignment.arcs, if at hand."""
    fitted, usage = _fit(fabric, assignment, budget, arcs)
    if usage is None:
        if arcs is not None:
            arcs = np.where(fitted.routed[:, None], arcs, -1)
        usage = table_usage(fabric, fitted, arcs)
    return fitted, usage


def _fit(
    fabric: Fabric, assignment: Assignment, budget: TableBudget, arcs: np.ndarray | None = None
) -> tuple[Assignment, np.ndarray | None]:
    """(fitted assignment, its usage if it is `assignment` itself, else None).

    The unit admitted is everything one source RTSW entry key steers: the flows (or QP
    buckets) from one NIC to one destination host, whole or not at all, so no flow is steered
    on only part of its path and no bucket is left following another's entry. Units are
    admitted greedily by their largest flow's demand (a split flow counts with the sum of
    its buckets), ties by first row; an entry shared with an admitted unit costs nothing,
    a unit's own source RTSW entries cost what they fold to.
    """
    keys = entry_keys(fabric, assignment, arcs)
    if not keys.flow.size:
        return assignment, np.zeros(fabric.num_nodes, np.int64)
    in_arc, _, _, _, first = installed_keys(fabric, keys)
    switch_of = fabric.arc_ends[1]
    usage = _per_switch(fabric, in_arc)
    nodes = np.flatnonzero(usage)
    limits = np.full(fabric.num_nodes, np.inf)
    limits[nodes] = _limits(fabric, budget, nodes)
    if (usage[nodes] <= limits[nodes]).all():
        return assignment, usage
    flows = assignment.flows
    unit_key = flows.src_nic * np.int64(fabric.num_hosts) + flows.dst_host(fabric)
    _, unit = np.unique(unit_key, return_inverse=True)
    pair = flows.src_nic * np.int64(fabric.num_nics) + flows.dst_nic
    _, pair_id = np.unique(pair, return_inverse=True)
    flow_demand = np.bincount(pair_id, weights=flows.demand)[pair_id]
    flow_demand = np.where(flows.qp == ALL_QPS, flows.demand, flow_demand)
    routed = np.flatnonzero(assignment.routed)
    # priority per unit: largest flow demand, then first row
    order = routed[np.lexsort((routed, -flow_demand[routed]))]
    _, lead = np.unique(unit[order], return_index=True)
    unit_order = unit[order[np.sort(lead)]]
    # cost per unit: its folded source RTSW entries, and the downstream keys it needs
    src_rtsw = keys.role[first] == RTSW_UP
    own = np.bincount(unit[keys.flow[first[src_rtsw]]], minlength=unit.max() + 1)
    rtsw_of = np.zeros(unit.max() + 1, np.int64)
    at_rtsw = keys.role == RTSW_UP
    rtsw_of[unit[keys.flow[at_rtsw]]] = switch_of[keys.in_arc[at_rtsw]]
    down = np.flatnonzero(keys.role != RTSW_UP)
    down_key = keys.key(fabric)[down]
    down_switch = switch_of[keys.in_arc[down]]
    by_unit: dict[int, list[tuple[int, int]]] = {}
    for u, sw, k in zip(unit[keys.flow[down]].tolist(), down_switch.tolist(),
                        down_key.tolist(), strict=True):  # fmt: skip
        by_unit.setdefault(u, []).append((sw, k))
    used = np.zeros(fabric.num_nodes, np.int64).tolist()
    limit = limits.tolist()
    installed: set[int] = set()
    dropped: list[int] = []
    own_l, rtsw_l = own.tolist(), rtsw_of.tolist()
    for u in unit_order.tolist():
        extra: dict[int, int] = {}
        if own_l[u]:
            extra[rtsw_l[u]] = own_l[u]
        new = {k: sw for sw, k in by_unit.get(u, ()) if k not in installed}
        for sw in new.values():
            extra[sw] = extra.get(sw, 0) + 1
        if all(used[sw] + n <= limit[sw] for sw, n in extra.items()):
            installed.update(new)
            for sw, n in extra.items():
                used[sw] += n
        else:
            dropped.append(u)
    path = assignment.path.copy()
    path[np.isin(unit, dropped)] = UNROUTED
    return Assignment(flows, path), None
