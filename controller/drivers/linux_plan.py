"""The naming and addressing plan of a fabric built in Linux network namespaces.

One place for every name and number the `linux` driver and the lab builder must agree on:

    namespace   "<lab>-<node>"              one per host and per switch, e.g. fte-rtsw-p0-r0
    port        the inventory's port name (`Fabric.ports`: Ethernet48, eth0) when every
                cabled link names both its ports, each a name the kernel takes (1-15 of
                A-Z a-z 0-9 _ . -, not lo) and unique on its node; otherwise (a preset, or
                one such name) the short name of the far end:
                host:  nic<n>               RTSW: h<h>n<n> (down), c<c>[k<k>] (up)
                CTSW:  r<r>[k<k>] (down), a<j>[m<m>] (up)      ATSW: p<p>[m<m>] (down)
                every port's alias is the fabric's own link name
    host        loopback 10.1.<h/256>.<h%256>/32 = the host's destination prefix
    switch      loopback 10.2.<s/256>.<s%256>/32 (router id; s counts RTSWs, CTSWs, ATSWs)
    link l      10.128.0.0/9 + 2l as a /31: the lower end (towards the hosts) holds 2l,
                the upper end 2l+1
    TE table    TABLE_BASE + port_slot * BUCKET_SLOTS + (qp + 1), where port_slot is the
                ingress port's rank among its switch's links and qp = -1 is the whole flow
    TE rules    `iif PORT lookup T` at PORT_PRIORITY; `iif PORT ipproto udp dport 4791
                sport A:B lookup T'` at BUCKET_PRIORITY (before the port rules); misses fall
                through to the main table, which holds the underlay's ECMP routes
    QP bucket   q is sent from UDP source ports SPORT_BASE + q*SPORT_WIDTH .. + SPORT_WIDTH-1
    routes      TE routes carry protocol ROUTE_PROTO; an entry's owner is its route realm
    LLDP        (lab up --lldp) lldpd per namespace, system name = the node's fabric name,
                control socket lldp_dir(lab)/<node>.sock

The driver touches only tables in [TABLE_BASE, TABLE_END), rules at the two priorities
pointing at them, and routes of protocol ROUTE_PROTO in them.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from controller.errors import DriverRejected, LabError
from controller.model.fabric import ACCESS, AGG, RACK, Fabric
from controller.model.flows import ALL_QPS

IFNAMSIZ = 15  # longest interface name the kernel takes
_IFNAME = re.compile(rf"[A-Za-z0-9_.-]{{1,{IFNAMSIZ}}}")  # an inventory port name taken as is
HOST_LOOPBACKS = ipaddress.IPv4Network("10.1.0.0/16")
SWITCH_LOOPBACKS = ipaddress.IPv4Network("10.2.0.0/16")
LINK_NETS = ipaddress.IPv4Network("10.128.0.0/9")
ROCE_PORT = 4791
SPORT_BASE = 49152
SPORT_WIDTH = 64
MAX_BUCKETS = (65536 - SPORT_BASE) // SPORT_WIDTH  # 256 QP buckets
BUCKET_SLOTS = MAX_BUCKETS + 1  # the whole flow, then one table per bucket
TABLE_BASE = 1_000_000
TABLE_END = 2_000_000
BUCKET_PRIORITY = 20_000
PORT_PRIORITY = 20_001
ROUTE_PROTO = 84  # "fabric-te"; the reserved list stops at 42 below 99
DEFAULT_REALM = 1  # owner "fabric-te"
LAB_NAME_MAX = 12
# Where a lab keeps its record (what `lab up` made), its owner registry and FRR's run files.
LAB_STATE_ROOT = Path(os.environ.get("FABRIC_TE_LAB_ROOT", "/run/fabric-te/labs"))


def lab_dir(lab: str) -> Path:
    return LAB_STATE_ROOT / check_lab_name(lab)


def lldp_dir(lab: str) -> Path:
    """Where a lab run with LLDP keeps each node's lldpd files: NODE.sock (its control
    socket, for `lldpcli -u`), NODE.pid, NODE.conf."""
    return lab_dir(lab) / "lldp"


def check_lab_name(name: str) -> str:
    """A lab name: lower-case letters, digits and '-', 1..12 characters, starting with a
    letter; it prefixes every namespace the lab makes."""
    ok = name[:1].isalpha() and all(ch.isalnum() or ch == "-" for ch in name)
    if not ok or len(name) > LAB_NAME_MAX or name != name.lower():
        raise LabError(
            f"bad lab name {name!r}: use 1-{LAB_NAME_MAX} lower-case letters, digits or '-',"
            " starting with a letter"
        )
    return name


@dataclass(frozen=True)
class Port:
    """One end of a link: the namespace it sits in, its interface name and /31 address."""

    link: int
    node: str  # fabric node name (host name for a host NIC)
    ifname: str
    address: str
    peer_address: str


class LabPlan:
    """Names and addresses of `fabric` built as lab `lab`."""

    def __init__(self, fabric: Fabric, lab: str) -> None:
        self.fabric = fabric
        self.lab = check_lab_name(lab)

    # ---- namespaces ----------------------------------------------------------------
    def netns(self, node: str) -> str:
        """Namespace of a host or switch (by fabric name)."""
        return f"{self.lab}-{node}"

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        """The hosts that exist (every host of a preset), by id."""
        f = self.fabric
        present = f.present[f.node_id("host", 0) : f.node_id("nic", 0)]
        return tuple(f.host_name(h) for h in range(f.num_hosts) if present[h])

    @cached_property
    def switches(self) -> tuple[str, ...]:
        """The switches that exist: RTSWs, CTSWs, ATSWs, by id."""
        return self.fabric.switch_names()

    def namespaces(self) -> tuple[str, ...]:
        return tuple(self.netns(n) for n in self.hosts + self.switches)

    # ---- addresses -----------------------------------------------------------------
    def host_address(self, host: int) -> str:
        return str(HOST_LOOPBACKS.network_address + int(host))

    def switch_address(self, switch: str) -> str:
        return str(SWITCH_LOOPBACKS.network_address + self.switches.index(switch) + 1)

    def link_addresses(self, link: int) -> tuple[str, str]:
        """(lower end, upper end) addresses of a link's /31."""
        base = LINK_NETS.network_address + 2 * int(link)
        return str(base), str(base + 1)

    # ---- ports ---------------------------------------------------------------------
    @cached_property
    def why_own_ports(self) -> str:
        """Why the lab names the ports itself; "" when it takes the inventory's names
        (module docstring: every cabled link names both ends, each a kernel name unique on
        its node)."""
        f, w = self.fabric, self.fabric.wiring
        if w is None:
            return "the fabric names no ports (a preset)"
        seen: dict[tuple[str, str], int] = {}
        for link in np.flatnonzero(f.installed).tolist():
            upper = f.node_name(self._ends(link)[1])
            for node, name in ((self._lower_node(link), w.lower_ports[link]),
                               (upper, w.upper_ports[link])):  # fmt: skip
                if not _IFNAME.fullmatch(name) or name in ("lo", ".", ".."):
                    return (f"port {name!r} of {node} ({f.link_name(link)}) is not a Linux "
                            "interface name")  # fmt: skip
                if (node, name) in seen:
                    return (f"port {name!r} of {node} is on two links "
                            f"({f.link_name(seen[(node, name)])}, {f.link_name(link)})")
                seen[(node, name)] = link
        return ""

    def _ends(self, link: int) -> tuple[int, int]:
        lo, hi = self.fabric.link_ends
        return int(lo[link]), int(hi[link])

    def _lower_node(self, link: int) -> str:
        """Namespace owner of a link's lower end: the host for an access link."""
        f = self.fabric
        if f.link_kind[link] == ACCESS:
            return f.host_name(f.host_of_nic(link))
        return f.node_name(self._ends(link)[0])

    def ends(self, link: int) -> tuple[Port, Port]:
        """(lower, upper) ports of a link."""
        f = self.fabric
        link = int(link)
        lo_addr, hi_addr = self.link_addresses(link)
        kind = int(f.link_kind[link])
        upper = f.node_name(self._ends(link)[1])
        w = f.wiring
        if w is not None and not self.why_own_ports:  # the inventory's names
            names = (w.lower_ports[link], w.upper_ports[link])
        elif kind == ACCESS:
            host, n = divmod(link, f.nics_per_host)
            h = host % f.hosts_per_rack
            names = (f"nic{n}", f"h{h}n{n}")
        elif kind == RACK:
            rel = link - f.rack_base
            rtsw, rest = divmod(rel, f.ctsws_per_pod * f.rack_links)
            c, k = divmod(rest, f.rack_links)
            r = rtsw % f.rtsws_per_pod
            member = f"k{k}" if f.rack_links > 1 else ""
            names = (f"c{c}{member}", f"r{r}{member}")
        else:
            assert kind == AGG
            rel = link - f.agg_base
            ctsw, rest = divmod(rel, f.atsws_per_plane * f.agg_links)
            j, m = divmod(rest, f.agg_links)
            p = ctsw // f.ctsws_per_pod
            member = f"m{m}" if f.agg_links > 1 else ""
            names = (f"a{j}{member}", f"p{p}{member}")
        for name in names:
            if len(name) > IFNAMSIZ:
                raise ValueError(f"port name {name!r} longer than {IFNAMSIZ} characters")
        lower = self._lower_node(link)
        return (
            Port(link, lower, names[0], lo_addr, hi_addr),
            Port(link, upper, names[1], hi_addr, lo_addr),
        )

    def port(self, node: str, link: int) -> Port:
        """The end of `link` that sits in `node`."""
        lower, upper = self.ends(link)
        if lower.node == node:
            return lower
        if upper.node == node:
            return upper
        raise DriverRejected(f"link {self.fabric.link_name(link)} does not touch {node}")

    @cached_property
    def node_links(self) -> dict[str, tuple[int, ...]]:
        """Every node's links, ascending: a switch's port slots are ranks in this list."""
        out: dict[str, list[int]] = {n: [] for n in self.hosts + self.switches}
        for link in np.flatnonzero(self.fabric.installed).tolist():  # the cabled links
            lower, upper = self.ends(link)
            out[lower.node].append(link)
            out[upper.node].append(link)
        return {n: tuple(links) for n, links in out.items()}

    # ---- TE tables -----------------------------------------------------------------
    def table(self, switch: str, in_port: int, qp: int) -> int:
        """Kernel table of (ingress port, QP bucket) on `switch`."""
        links = self.node_links.get(switch)
        if links is None or switch in self.hosts:
            raise DriverRejected(f"unknown switch {switch!r}")
        if in_port not in links:
            raise DriverRejected(f"{switch}: link {in_port} is not one of its ports")
        if not ALL_QPS <= qp < MAX_BUCKETS:
            raise DriverRejected(f"QP bucket {qp} outside 0..{MAX_BUCKETS - 1}")
        table = TABLE_BASE + links.index(in_port) * BUCKET_SLOTS + (qp + 1)
        if table >= TABLE_END:
            raise DriverRejected(f"{switch}: too many ports for the TE table range")
        return table

    def table_key(self, switch: str, table: int) -> tuple[int, int]:
        """(ingress link, qp) of one of our tables on `switch`; inverse of `table`."""
        slot, q = divmod(table - TABLE_BASE, BUCKET_SLOTS)
        return self.node_links[switch][slot], q - 1

    @cached_property
    def host_by_address(self) -> dict[str, int]:
        return {self.host_address(h): h for h in range(self.fabric.num_hosts)}


def sport_range(qp: int) -> tuple[int, int]:
    """UDP source ports (first, last) of QP bucket `qp`."""
    if not 0 <= qp < MAX_BUCKETS:
        raise DriverRejected(f"QP bucket {qp} outside 0..{MAX_BUCKETS - 1}")
    first = SPORT_BASE + qp * SPORT_WIDTH
    return first, first + SPORT_WIDTH - 1


def is_own_table(table: int) -> bool:
    return TABLE_BASE <= table < TABLE_END
