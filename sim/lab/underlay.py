"""The lab's default routing: the ECMP every switch has before TE, as static multipath
routes (`--underlay static`) or as FRR's eBGP (`sim.lab.frr`).

Both route over the cables that exist (`Fabric.installed`), along shortest paths, which is
what eBGP with one AS a node and `maximum-paths` gives: in a complete Clos that is every
up-down path; with cables missing, the up-down paths that remain (a switch with no path
down to a host is not taken towards it). `Reach` is that computation, shared by the static
routes and by FRR's convergence check; it also names the host pairs no path joins.

Static routes, per node, as `ip -batch` lines for the main table:

    host  10.1.0.0/16 over every cabled NIC (source address: its loopback)
    switch  10.1.0.0/16 over the uplinks most hosts are reached by (an RTSW: every uplink;
          a CTSW with an aggregation layer: every ATSW link), when some hosts are reached
          by going up; each other host it can reach: /32 over its shortest-path links

With several RTSWs a rack (rail-optimized, docs/layouts.md) the lab still addresses hosts,
not NICs, so an RTSW routes each host of its rack over that host's NICs on it, and a CTSW
keeps a packet on the rail it came up: the RTSW of slot s of every rack are reached through
table UNDERLAY_TABLE + s, which a rule at UNDERLAY_PRIORITY selects for every port from a
slot-s RTSW (after the TE rules, before the main table). That is the routing of NIC-to-NIC
flows with per-NIC addresses.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from controller.drivers.linux_plan import HOST_LOOPBACKS, PORT_PRIORITY, TABLE_BASE, LabPlan
from controller.model.fabric import ACCESS, Fabric
from sim.lab.netns import ip_batch

PROTO = "static"
UNDERLAY_PRIORITY = 30_000  # after the TE rules, before the main table (32,766)
UNDERLAY_TABLE = 500  # + slot: a CTSW's routes down to the slot's RTSWs
assert PORT_PRIORITY < UNDERLAY_PRIORITY and UNDERLAY_TABLE + 64 < TABLE_BASE
UNREACHABLE = np.iinfo(np.int32).max  # distance of a node no cabled path joins


@dataclass(frozen=True)
class Reach:
    """Shortest paths over the installed links of a lab, hosts never transit: `dist`
    [switch, host] in hops (UNREACHABLE: none), switches in `plan.switches` order, hosts
    by fabric host id."""

    plan: LabPlan
    dist: np.ndarray

    @classmethod
    def of(cls, plan: LabPlan) -> Reach:
        """All-pairs hop counts between switches (scipy BFS), then one hop to each host
        from the RTSWs its cabled NICs reach."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import shortest_path

        f = plan.fabric
        index = {name: i for i, name in enumerate(plan.switches)}
        lo, hi = f.link_ends
        trunk = np.flatnonzero(f.installed & (f.link_kind != ACCESS))
        names = f.node_names
        a = np.array([index[names[int(n)]] for n in lo[trunk]], dtype=np.int64)
        b = np.array([index[names[int(n)]] for n in hi[trunk]], dtype=np.int64)
        n = len(plan.switches)
        graph = coo_matrix((np.ones(a.size), (a, b)), shape=(n, n)).tocsr()
        between = shortest_path(graph, directed=False, unweighted=True)
        dist = np.full((n, f.num_hosts), UNREACHABLE, dtype=np.int64)
        access = np.flatnonzero(f.installed[: f.num_access_links])
        rtsw = np.array([index[names[int(n)]] for n in hi[access]], dtype=np.int64)
        host = f.host_of_nic(access)
        for h in np.unique(host).tolist():
            best = between[:, np.unique(rtsw[host == h])].min(axis=1) + 1
            dist[:, h] = np.where(np.isfinite(best), best, UNREACHABLE)
        dist.setflags(write=False)
        return cls(plan, dist)

    def switch_index(self, switch: str) -> int:
        return self._index[switch]

    @cached_property
    def _index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.plan.switches)}

    def hops(self, switch: str) -> tuple[list[int], np.ndarray]:
        """(`switch`'s installed links, bool [links, hosts]: the link is on a shortest path
        from `switch` to the host)."""
        plan, f = self.plan, self.plan.fabric
        me = self.dist[self._index[switch]]
        links = list(plan.node_links[switch])
        out = np.zeros((len(links), f.num_hosts), dtype=bool)
        for i, link in enumerate(links):
            if f.link_kind[link] == ACCESS:
                host = int(f.host_of_nic(link))
                out[i, host] = me[host] == 1
            else:
                lower, upper = plan.ends(link)
                peer = upper.node if lower.node == switch else lower.node
                there = self.dist[self._index[peer]]
                out[i] = (me != UNREACHABLE) & (there == me - 1)
        return links, out

    @cached_property
    def hosts(self) -> np.ndarray:
        """Host ids that exist with at least one cabled NIC (the hosts that can talk)."""
        f = self.plan.fabric
        present = f.present[f.node_id("host", 0) : f.node_id("nic", 0)]
        cabled = f.installed[: f.num_access_links].reshape(f.num_hosts, -1).any(axis=1)
        return np.flatnonzero(present & cabled)

    def host_reach(self) -> np.ndarray:
        """bool [hosts, hosts] by host id: a cabled path joins the two (the diagonal: the
        host exists with a cabled NIC)."""
        f = self.plan.fabric
        access = np.flatnonzero(f.installed[: f.num_access_links])
        _, hi = f.link_ends
        names = f.node_names
        out = np.zeros((f.num_hosts, f.num_hosts), dtype=bool)
        for h in self.hosts.tolist():
            mine = access[f.host_of_nic(access) == h]
            rtsws = sorted({self._index[names[int(n)]] for n in hi[mine]})
            out[h] = (self.dist[rtsws] != UNREACHABLE).any(axis=0)
        keep = np.zeros(f.num_hosts, dtype=bool)
        keep[self.hosts] = True
        return out & keep[:, None] & keep[None, :]

    def unreachable_pairs(self) -> list[tuple[str, str]]:
        """(source, destination) host names of every ordered pair of hosts that exist but
        that no cabled path joins (a rack whose every uplink is missing, say)."""
        f = self.plan.fabric
        reach = self.host_reach()
        hosts = self.hosts
        sub = ~reach[np.ix_(hosts, hosts)]
        a, b = np.nonzero(sub)
        return [(f.host_name(int(hosts[i])), f.host_name(int(hosts[j])))
                for i, j in zip(a.tolist(), b.tolist(), strict=True)]  # fmt: skip


def _multipath(plan: LabPlan, node: str, links: list[int]) -> str:
    hops = []
    for link in links:
        port = plan.port(node, link)
        hops.append(f"nexthop via {port.peer_address} dev {port.ifname}")
    return " ".join(hops)


def _upward(plan: LabPlan, node: str, link: int) -> bool:
    """Whether `link` leaves `node` towards the ATSWs."""
    return plan.ends(link)[0].node == node


def _chosen(links: list[int], key: bytes) -> list[int]:
    """The links a next-hop pattern (a bool column's bytes) selects."""
    return [links[i] for i in np.flatnonzero(np.frombuffer(key, dtype=bool))]


def next_hop_sets(plan: LabPlan, reach: Reach,
                  switch: str) -> tuple[list[tuple[list[int], list[int]]], int | None]:  # fmt: skip
    """`switch`'s ECMP next hops: one (links, hosts) per distinct set of shortest-path links
    towards the hosts it reaches, ordered by first host; and the index of the set the range
    route (10.1/16) takes: the one most hosts share (then the widest) when it only goes
    up, else None (every host gets its own /32)."""
    links, on_path = reach.hops(switch)
    patterns: dict[bytes, list[int]] = {}
    for h in reach.hosts.tolist():
        column = on_path[:, h]
        if column.any():
            patterns.setdefault(column.tobytes(), []).append(h)
    ordered = sorted(patterns.items(), key=lambda kv: kv[1][0])
    sets = [(_chosen(links, key), members) for key, members in ordered]
    if not sets:
        return sets, None
    top = min(range(len(sets)), key=lambda i: (-len(sets[i][1]), -len(sets[i][0]), i))
    upward = all(_upward(plan, switch, link) for link in sets[top][0])
    return sets, top if upward else None


def static_routes(plan: LabPlan, reach: Reach | None = None) -> dict[str, list[str]]:
    """Node name -> `ip route replace` batch lines of its ECMP underlay over the installed
    links."""
    f: Fabric = plan.fabric
    reach = reach if reach is not None else Reach.of(plan)
    out: dict[str, list[str]] = {}
    every = str(HOST_LOOPBACKS)
    for h in reach.hosts.tolist():
        host = f.host_name(h)
        out[host] = [
            f"route replace {every} proto {PROTO} src {plan.host_address(h)} "
            + _multipath(plan, host, list(plan.node_links[host]))
        ]
    S = f.rtsws_per_rack
    for switch in plan.switches:
        lines: list[str] = []
        sets, aggregate = next_hop_sets(plan, reach, switch)
        for i, (chosen, members) in enumerate(sets):
            route = _multipath(plan, switch, chosen)
            if i == aggregate:
                lines.insert(0, f"route replace {every} proto {PROTO} {route}")
                continue
            lines += [f"route replace {plan.host_address(h)}/32 proto {PROTO} {route}"
                      for h in members]  # fmt: skip
        if S > 1 and f.node_kind(f.node_by_name(switch)) == "ctsw":
            lines += _rail_routes(plan, reach, switch, list(plan.node_links[switch]))
        out[switch] = lines
    return out


def _rail_routes(plan: LabPlan, reach: Reach, ctsw: str, links: list[int]) -> list[str]:
    """A CTSW's routes of table UNDERLAY_TABLE + s: each host over the links down to the
    slot-s RTSW of its rack, where that RTSW has the host's NIC of its slot cabled."""
    f = plan.fabric
    S, base = f.rtsws_per_rack, f.node_id("rtsw", 0)
    lines = []
    downs: dict[str, list[int]] = {}
    for link in links:
        lower = plan.ends(link)[0].node
        if lower != ctsw:
            downs.setdefault(lower, []).append(link)
    for rtsw, via in sorted(downs.items(), key=lambda kv: kv[1][0]):
        t = f.node_by_name(rtsw) - base
        at = reach.dist[reach.switch_index(rtsw)]
        route = _multipath(plan, ctsw, via)
        for h in reach.hosts[at[reach.hosts] == 1].tolist():
            lines.append(f"route replace {plan.host_address(h)}/32 proto {PROTO} table "
                         f"{UNDERLAY_TABLE + t % S} {route}")  # fmt: skip
    return lines


def static_rules(plan: LabPlan) -> dict[str, list[tuple[str, int]]]:
    """CTSW name -> (ingress port, table) of the rules that keep a packet on its rail: every
    port from an RTSW of slot s looks up UNDERLAY_TABLE + s (none with one RTSW a rack)."""
    f: Fabric = plan.fabric
    S = f.rtsws_per_rack
    if S == 1:
        return {}
    out: dict[str, list[tuple[str, int]]] = {}
    base = f.node_id("rtsw", 0)
    for node in plan.switches:
        if f.node_kind(f.node_by_name(node)) != "ctsw":
            continue
        downs = [(link, plan.ends(link)[0].node) for link in plan.node_links[node]]
        out[node] = [(plan.port(node, link).ifname,
                      UNDERLAY_TABLE + (f.node_by_name(rtsw) - base) % S)
                     for link, rtsw in downs if rtsw != node]  # fmt: skip
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
