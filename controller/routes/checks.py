"""Driver checks: whether an entry can live on its switch (its ports are the switch's links,
its host and bucket in range), and where along a path it sits (its hop role)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.errors import FabricError, RouteError
from controller.model.fabric import AGG, Fabric
from controller.model.flows import ALL_QPS
from controller.routes.entries import ATSW_DOWN, CTSW_DOWN, CTSW_UP, RTSW_UP
from controller.routes.tables import MAX_QP_BUCKETS, Entry


def switch_ports(fabric: Fabric) -> dict[str, frozenset[int]]:
    """Link ids attached to every switch, by switch name (the cabled links of the switches
    that exist, for a fabric from an inventory)."""
    lo, hi = fabric.link_ends
    first_switch = fabric.node_id("rtsw", 0)
    ends = np.concatenate([lo, hi])
    links = np.concatenate([np.arange(fabric.num_links)] * 2)
    keep = (ends >= first_switch) & fabric.present[ends] & fabric.installed[links]
    ends, links = ends[keep], links[keep]
    order = np.argsort(ends, kind="stable")
    ends, links = ends[order], links[order]
    cuts = np.flatnonzero(np.diff(ends)) + 1
    return {
        fabric.node_name(int(group_ends[0])): frozenset(group_links.tolist())
        for group_ends, group_links in zip(np.split(ends, cuts), np.split(links, cuts), strict=True)
    }


def entry_problem(fabric: Fabric, ports: Mapping[str, frozenset[int]], entry: Entry) -> str | None:
    """Why `entry` cannot live on its switch, or None if it can."""
    attached = ports.get(entry.switch)
    if attached is None:
        return f"{entry.switch!r} is not a switch of fabric {fabric.name!r}"
    if entry.in_port not in attached:
        return f"{entry.switch}: in_port {entry.in_port} is not one of its links"
    if entry.next_hop not in attached:
        return f"{entry.switch}: next_hop {entry.next_hop} is not one of its links"
    if not 0 <= entry.dst_host < fabric.num_hosts:
        return f"{entry.switch}: dst_host {entry.dst_host} out of range"
    if not ALL_QPS <= entry.qp < MAX_QP_BUCKETS:
        return (
            f"{entry.switch}: qp {entry.qp} is neither {ALL_QPS} (all buckets) nor a bucket "
            f"below {MAX_QP_BUCKETS}"
        )
    return None


def entry_role(fabric: Fabric, entry: Entry) -> int:
    """RTSW_UP, CTSW_UP, ATSW_DOWN or CTSW_DOWN: where an entry sits along a path."""
    try:
        kind = fabric.switch_kind(entry.switch)
    except FabricError:
        raise RouteError(f"{entry.switch!r} is not a switch name") from None
    if kind == "rtsw":
        return RTSW_UP
    if kind == "atsw":
        return ATSW_DOWN
    up = 0 <= entry.next_hop < fabric.num_links and fabric.link_kind[entry.next_hop] == AGG
    return CTSW_UP if up else CTSW_DOWN
