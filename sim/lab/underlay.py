"""The lab's default routing: the ECMP every switch has before TE, as static multipath
routes (`--underlay static`) or as FRR's eBGP (`sim.lab.frr`).

Static routes, per node, as `ip -batch` lines for the main table:

    host  10.1.0.0/16 over every NIC (source address: its loopback)
    RTSW  each of its hosts' /32 over that host's NICs; 10.1.0.0/16 over every uplink
    CTSW  each host of its pod: /32 over the links to the host's RTSW; 10.1.0.0/16 over
          every ATSW link (when there is an aggregation layer)
    ATSW  each host: /32 over the links to the CTSW of the host's pod in its plane

which is what eBGP with `maximum-paths` gives in a Clos. With several RTSWs a rack (rail-
optimized, docs/layouts.md) the lab still addresses hosts, not NICs, so an RTSW routes each
host of its rack over that host's NICs on it, and a CTSW keeps a packet on the rail it came
up: the RTSW of slot s of every rack are reached through table UNDERLAY_TABLE + s, which a
rule at UNDERLAY_PRIORITY selects for every port from a slot-s RTSW (after the TE rules,
before the main table). That is the routing of NIC-to-NIC flows with per-NIC addresses.
"""

from __future__ import annotations

import json
import subprocess

from controller.drivers.linux_plan import HOST_LOOPBACKS, PORT_PRIORITY, TABLE_BASE, LabPlan
from controller.model.fabric import Fabric
from sim.lab.netns import ip_batch

PROTO = "static"
UNDERLAY_PRIORITY = 30_000  # after the TE rules, before the main table (32,766)
UNDERLAY_TABLE = 500  # + slot: a CTSW's routes down to the slot's RTSWs
assert PORT_PRIORITY < UNDERLAY_PRIORITY and UNDERLAY_TABLE + 64 < TABLE_BASE


def _multipath(plan: LabPlan, node: str, links: list[int]) -> str:
    hops = []
    for link in links:
        port = plan.port(node, link)
        hops.append(f"nexthop via {port.peer_address} dev {port.ifname}")
    return " ".join(hops)


def static_routes(plan: LabPlan) -> dict[str, list[str]]:
    """Node name -> `ip route replace` batch lines of its ECMP underlay."""
    f: Fabric = plan.fabric
    out: dict[str, list[str]] = {}
    every = str(HOST_LOOPBACKS)
    nics = f.nics_per_host
    for h, host in enumerate(plan.hosts):
        links = [int(f.access_link(f.nic_id(h, n))) for n in range(nics)]
        out[host] = [
            f"route replace {every} proto {PROTO} src {plan.host_address(h)} "
            + _multipath(plan, host, links)
        ]
    c_count, k_count = f.ctsws_per_pod, f.rack_links
    a_count, m_count = f.atsws_per_plane, f.agg_links
    S = f.rtsws_per_rack
    for rtsw in range(f.num_rtsws):
        node = f.rtsw_name(rtsw)
        lines = []
        mine = [n for n in range(nics) if n % S == rtsw % S]  # its NICs of each host
        for hh in range(f.hosts_per_rack):
            h = rtsw // S * f.hosts_per_rack + hh
            links = [int(f.access_link(f.nic_id(h, n))) for n in mine]
            lines.append(
                f"route replace {plan.host_address(h)}/32 proto {PROTO} "
                + _multipath(plan, node, links)
            )
        ups = [int(f.rack_link(rtsw, c, k)) for c in range(c_count) for k in range(k_count)]
        lines.append(f"route replace {every} proto {PROTO} " + _multipath(plan, node, ups))
        out[node] = lines
    for ctsw in range(f.num_ctsws):
        node = f.ctsw_name(ctsw)
        pod, c = divmod(ctsw, c_count)
        lines = []
        for r in range(f.racks_per_pod):
            rack = pod * f.racks_per_pod + r
            rtsws = range(rack * S, (rack + 1) * S)
            downs = [int(f.rack_link(t, c, k)) for t in rtsws for k in range(k_count)]
            for hh in range(f.hosts_per_rack):
                h = rack * f.hosts_per_rack + hh
                lines.append(
                    f"route replace {plan.host_address(h)}/32 proto {PROTO} "
                    + _multipath(plan, node, downs)
                )
                if S > 1:  # on the rail it came up: slot s's RTSW of the host's rack
                    for t in rtsws:
                        slot_downs = [int(f.rack_link(t, c, k)) for k in range(k_count)]
                        lines.append(
                            f"route replace {plan.host_address(h)}/32 proto {PROTO} table "
                            f"{UNDERLAY_TABLE + t % S} " + _multipath(plan, node, slot_downs)
                        )
        if a_count:
            ups = [int(f.agg_link(pod, c, j, m)) for j in range(a_count) for m in range(m_count)]
            lines.append(f"route replace {every} proto {PROTO} " + _multipath(plan, node, ups))
        out[node] = lines
    for atsw in range(f.num_atsws):
        node = f.atsw_name(atsw)
        c, j = divmod(atsw, max(a_count, 1))
        lines = []
        for pod in range(f.pods):
            downs = [int(f.agg_link(pod, c, j, m)) for m in range(m_count)]
            route = _multipath(plan, node, downs)
            for h in range(pod * f.racks_per_pod * f.hosts_per_rack,
                           (pod + 1) * f.racks_per_pod * f.hosts_per_rack):  # fmt: skip
                lines.append(f"route replace {plan.host_address(h)}/32 proto {PROTO} {route}")
        out[node] = lines
    return out


def static_rules(plan: LabPlan) -> dict[str, list[tuple[str, int]]]:
    """CTSW name -> (ingress port, table) of the rules that keep a packet on its rail: every
    port from an RTSW of slot s looks up UNDERLAY_TABLE + s (none with one RTSW a rack)."""
    f: Fabric = plan.fabric
    S = f.rtsws_per_rack
    if S == 1:
        return {}
    out: dict[str, list[tuple[str, int]]] = {}
    for ctsw in range(f.num_ctsws):
        node = f.ctsw_name(ctsw)
        pod, c = divmod(ctsw, f.ctsws_per_pod)
        out[node] = [
            (plan.port(node, int(f.rack_link(t, c, k))).ifname, UNDERLAY_TABLE + t % S)
            for t in range(pod * f.rtsws_per_pod, (pod + 1) * f.rtsws_per_pod)
            for k in range(f.rack_links)
        ]
    return out


def install_static(plan: LabPlan, nodes: list[str] | None = None) -> None:
    """(Re)install the static ECMP underlay of `nodes` (all by default); idempotent."""
    routes = static_routes(plan)
    rules = static_rules(plan)
    for node in nodes if nodes is not None else list(routes):
        ns = plan.netns(node)
        ip_batch(routes[node], ns)
        if rules.get(node):
            shown = subprocess.run(["ip", "-n", ns, "-j", "rule", "show", "priority",
                                    str(UNDERLAY_PRIORITY)], capture_output=True, text=True)
            have = {(r.get("iif"), int(r.get("table", 0))) for r in json.loads(shown.stdout or
                                                                            "[]")}  # fmt: skip
            ip_batch([f"rule add iif {port} lookup {table} priority {UNDERLAY_PRIORITY}"
                      for port, table in rules[node] if (port, table) not in have], ns)
