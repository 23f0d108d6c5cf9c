"""Real packets in a lab: RoCE-port UDP from a host NIC, per-port counters per namespace,
and the check that every sampled flow leaves each switch by the port its path says.

A sender is a UDP socket opened inside the source host's namespace, bound to the NIC
(SO_BINDTODEVICE), the host loopback and a chosen source port; a receiver is a socket on
port 4791 in the destination host. Counters are the kernel's per-interface packet counts,
read over netlink in each namespace (a netlink socket opened there keeps its namespace).
Every datagram carries (flow tag, sequence number), so streams count loss per flow.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.drivers.linux_plan import ROCE_PORT, SPORT_BASE, LabPlan, sport_range
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from sim.lab import netns

HEADER = struct.Struct("!IQ")  # flow tag, sequence
SO_BINDTODEVICE = 25
SO_NO_CHECK = 11


def flow_sport(flows: Any, row: int) -> int:
    """The source port a verification packet of flow row `row` uses: inside its bucket's
    range for a bucket, below every bucket range for a whole flow."""
    qp = int(flows.qp[row])
    if qp != ALL_QPS:
        first, last = sport_range(qp)
        return first + row % (last - first + 1)
    return 20000 + (row * 7919) % (SPORT_BASE - 20000)


class LabIO:
    """Sockets and counters in the namespaces of one lab."""

    counter_lag = 0.0  # seconds a port counter may trail the packets (the kernel's: none)

    def __init__(self, plan: LabPlan) -> None:
        self.plan = plan
        self.fabric: Fabric = plan.fabric
        self._nl: dict[str, Any] = {}
        self._receivers: dict[int, socket.socket] = {}

    def _netlink(self, node: str) -> Any:
        if node not in self._nl:
            from pyroute2 import IPRoute

            with netns.entered(self.plan.netns(node)):
                self._nl[node] = IPRoute()
        return self._nl[node]

    def tx_packets(self, node: str) -> dict[str, int]:
        """Interface name -> packets sent, in one node's namespace."""
        out = {}
        for link in self._netlink(node).get_links():
            stats = link.get_attr("IFLA_STATS64")
            out[link.get_attr("IFLA_IFNAME")] = int(stats["tx_packets"]) if stats else 0
        return out

    def sender(self, nic: int, sport: int) -> socket.socket:
        """A UDP socket leaving by `nic`, from its host's loopback and `sport`."""
        f = self.fabric
        host = int(f.host_of_nic(nic))
        name = f.host_name(host)
        port = self.plan.port(name, int(f.access_link(nic)))
        with netns.entered(self.plan.netns(name)):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, port.ifname.encode())
        # no UDP checksum: a veth hands packets over with it unfilled (offloaded), and Open
        # vSwitch's userspace datapath forwards them as they are, which receivers then drop
        sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.plan.host_address(host), sport))
        return sock

    def receiver(self, host: int) -> socket.socket:
        if host not in self._receivers:
            with netns.entered(self.plan.netns(self.fabric.host_name(host))):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.bind(("0.0.0.0", ROCE_PORT))
            sock.setblocking(False)
            self._receivers[host] = sock
        return self._receivers[host]

    def drain(self, hosts: Iterable[int], seen: dict[int, set[int]], wait: float = 0.0) -> None:
        """Read every datagram waiting at `hosts` into seen[tag] (sequence numbers)."""
        socks = [self.receiver(h) for h in hosts]
        deadline = time.monotonic() + wait
        while True:
            ready, _, _ = select.select(socks, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return
            for sock in ready:
                while True:
                    try:
                        data = sock.recv(64)
                    except BlockingIOError:
                        break
                    tag, seq = HEADER.unpack_from(data)
                    seen.setdefault(tag, set()).add(seq)

    def close(self) -> None:
        for nl in self._nl.values():
            nl.close()
        for sock in self._receivers.values():
            sock.close()
        self._nl.clear()
        self._receivers.clear()


@dataclass
class VerifyReport:
    """Flows checked against their computed path with real packets."""

    checked: int = 0
    matched: int = 0
    misrouted: int = 0
    dropped: int = 0
    packets: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.checked == self.matched

    def summary(self) -> str:
        return (f"{self.checked} flows checked with {self.packets} packets each: "
                f"{self.matched} matched, {self.misrouted} misrouted, {self.dropped} dropped")


def expected_ports(plan: LabPlan, arcs: np.ndarray) -> list[tuple[str, str]]:
    """(switch, egress port) at every switch hop of a path except the last one down to the
    host, whose NIC the underlay picks."""
    f = plan.fabric
    src, _ = f.arc_ends
    hops = [int(a) for a in arcs if a >= 0]
    out = []
    for arc in hops[1:-1]:
        node = f.node_name(int(src[arc]))
        out.append((node, plan.port(node, arc // 2).ifname))
    return out


def send_burst(io: LabIO, nic: int, sport: int, dst_host: int, tag: int, count: int) -> None:
    sock = io.sender(nic, sport)
    try:
        dst = (io.plan.host_address(dst_host), ROCE_PORT)
        for seq in range(count):
            sock.sendto(HEADER.pack(tag, seq), dst)
    finally:
        sock.close()


def verify(
    io: LabIO, assignment: Assignment, rows: Sequence[int], packets: int = 20
) -> VerifyReport:
    """Send `packets` datagrams for each flow row in turn and check each switch's egress."""
    f = io.fabric
    flows = assignment.flows
    arcs = assignment.arcs(f)
    dst_hosts = flows.dst_host(f)
    report = VerifyReport(packets=packets)
    for row in rows:
        row = int(row)
        if not assignment.routed[row]:
            continue
        ports = expected_ports(io.plan, arcs[row])
        switches = sorted({sw for sw, _ in ports})
        before = {sw: io.tx_packets(sw) for sw in switches}
        dst = int(dst_hosts[row])
        seen: dict[int, set[int]] = {}
        io.drain([dst], seen)  # anything left over from earlier flows
        seen.clear()
        send_burst(io, int(flows.src_nic[row]), flow_sport(flows, row), dst, row, packets)
        # up to 3 s: a next hop not yet resolved holds the burst for one ARP retry (1 s) or
        # more on a loaded machine; the wait ends as soon as every packet is in
        deadline = time.monotonic() + 3.0
        while len(seen.get(row, ())) < packets and time.monotonic() < deadline:
            io.drain([dst], seen, wait=0.05)
        settled = time.monotonic() + io.counter_lag
        while True:  # counters that lag behind the packets (Open vSwitch) are read again
            after = {sw: io.tx_packets(sw) for sw in switches}
            wrong = [f"{sw}:{port}" for sw, port in ports
                     if after[sw].get(port, 0) - before[sw].get(port, 0) < packets]  # fmt: skip
            if not wrong or time.monotonic() >= settled:
                break
            time.sleep(0.05)
        report.checked += 1
        got = len(seen.get(row, ()))
        if got < packets:
            report.dropped += 1
            report.problems.append(f"flow {row}: {packets - got}/{packets} packets lost")
        elif wrong:
            report.misrouted += 1
            report.problems.append(f"flow {row}: not out of {', '.join(wrong)}")
        else:
            report.matched += 1
    return report


@dataclass
class StreamReport:
    sent: int
    lost: int
    per_flow_lost: dict[int, int]


class Streams:
    """A continuous UDP stream per flow (one packet per flow every `interval` seconds)
    until stopped; loss counted per flow from sequence numbers."""

    def __init__(self, io: LabIO, assignment: Assignment, rows: Sequence[int],
                 interval: float = 0.001) -> None:  # fmt: skip
        f = io.fabric
        flows = assignment.flows
        self.io = io
        self.rows = [int(r) for r in rows]
        self.dst = {r: int(flows.dst_host(f)[r]) for r in self.rows}
        self.socks = {r: io.sender(int(flows.src_nic[r]), flow_sport(flows, r))
                      for r in self.rows}  # fmt: skip
        self.interval = interval
        self.sent = dict.fromkeys(self.rows, 0)
        self.seen: dict[int, set[int]] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _send(self) -> None:
        dsts = {r: (self.io.plan.host_address(self.dst[r]), ROCE_PORT) for r in self.rows}
        next_at = time.monotonic()
        while not self._stop.is_set():
            for r in self.rows:
                try:
                    self.socks[r].sendto(HEADER.pack(r, self.sent[r]), dsts[r])
                except OSError:
                    pass  # no route at this instant: a lost packet, counted as such
                self.sent[r] += 1
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _receive(self) -> None:
        hosts = sorted(set(self.dst.values()))
        while not self._stop.is_set():
            self.io.drain(hosts, self.seen, wait=0.02)

    def start(self) -> Streams:
        for r in self.rows:  # open receivers before the first packet
            self.io.receiver(self.dst[r])
        for target in (self._receive, self._send):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, settle: float = 0.3) -> StreamReport:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self.io.drain(sorted(set(self.dst.values())), self.seen, wait=settle)
        for sock in self.socks.values():
            sock.close()
        lost = {r: self.sent[r] - len(self.seen.get(r, ())) for r in self.rows}
        return StreamReport(sum(self.sent.values()), sum(lost.values()), lost)
