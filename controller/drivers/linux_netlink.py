"""IPv4 routes and policy rules over rtnetlink in bulk: one socket per namespace, many
messages per send.

pyroute2 builds and parses each message in Python objects, one request and one answer at a
time, which held the driver to 0.4-2k routes/s. A TE route is one fixed shape
(table, /32 destination, gateway, output port, realm, protocol), so its message is packed
by one precompiled struct here, hundreds are sent per `send` (the kernel handles them in
that call, in order), and the acknowledgements are read back in bulk; a route dump asks
the kernel for our protocol only (strict dump checking), and is parsed the same way. A
TE rule (`iif PORT [ipproto udp sport A:B dport D] lookup T` at a priority) likewise.

The kernel goes on with the next message after a refused one; `RtnlSocket.send` stops
sending further chunks after a chunk with a refusal and returns every refusal with its
message's index, so the caller can undo what was done.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Sequence
from typing import NamedTuple

from controller.drivers.netns import entered

NLMSG = struct.Struct("=IHHII")  # length, type, flags, seq, port id
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWRULE, RTM_DELRULE, RTM_GETRULE = 32, 33, 34
F_REQUEST, F_ACK, F_ACK_TLVS, F_DUMP = 0x1, 0x4, 0x200, 0x300
F_REPLACE, F_EXCL, F_CREATE = 0x100, 0x200, 0x400
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH, RTA_FLOW, RTA_TABLE = 1, 4, 5, 9, 11, 15
FRA_IIFNAME, FRA_PRIORITY, FRA_TABLE = 3, 6, 15
FRA_IP_PROTO, FRA_SPORT_RANGE, FRA_DPORT_RANGE = 22, 23, 24
FR_ACT_TO_TBL = 1
IFLA_IFNAME, IFLA_OPERSTATE = 3, 16
IF_OPER_UP = 6
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK, NETLINK_GET_STRICT_CHK = 10, 11, 12
RT_SCOPE_UNIVERSE, RT_SCOPE_NOWHERE = 0, 255
RTN_UNICAST = 1
CHUNK = 1024  # messages per send (under the socket's send buffer; refusals fit RCVBUF)
RCVBUF = 8 << 20
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
TIMEOUT = 30.0  # seconds to wait for the kernel's answers

# rtmsg (family, dst_len, src_len, tos, table, protocol, scope, type, flags) + attributes
_RTMSG = "BBBBBBBBI"
_REPLACE = struct.Struct(f"=IHHII{_RTMSG}HH4sHHIHH4sHHIHHI")  # dst, table, gateway, oif, flow
_DELETE = struct.Struct(f"=IHHII{_RTMSG}HH4sHHI")  # dst, table
_DUMP = struct.Struct(f"=IHHII{_RTMSG}")
# how the kernel dumps a route `replace` made: table, dst, gateway, oif, flow
_DUMPED = struct.Struct(f"=IHHII{_RTMSG}HHIHH4sHH4sHHIHHI")
_DUMPED_KINDS = (RTA_TABLE, RTA_DST, RTA_GATEWAY, RTA_OIF, RTA_FLOW)
# fib_rule_hdr (family, dst_len, src_len, tos, table, res1, res2, action, flags)
_RULE = struct.Struct("=IHHIIBBBBBBBBI")
_RULE_DUMP = _RULE
_LINK_DUMP = struct.Struct("=IHHIIBBHiII")  # + ifinfomsg (family, pad, type, index, flags, change)
_ATTR = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")


class Link(NamedTuple):
    """One network interface: its index, name and whether it is operationally up."""

    ifindex: int
    name: str
    up: bool


class Route(NamedTuple):
    """One IPv4 route as the kernel holds it (the fields a TE route uses)."""

    table: int
    dst: int  # host-order IPv4 address
    dst_len: int
    oif: int
    gateway: int
    realm: int
    multipath: bool


class Refusal(NamedTuple):
    """A message the kernel refused: its position in the batch, errno and the kernel's text."""

    at: int
    errno: int
    text: str

    def __str__(self) -> str:
        why = os.strerror(self.errno) + (f": {self.text}" if self.text else "")
        return f"message {self.at}: {why}"


def replace(table: int, dst: int, gateway: int, oif: int, realm: int, protocol: int) -> bytes:
    """An RTM_NEWROUTE (create or replace) message for a /32 via `gateway` on `oif`; the
    sequence number is set when sent."""
    return _REPLACE.pack(
        _REPLACE.size, RTM_NEWROUTE, F_REQUEST | F_REPLACE | F_CREATE, 0, 0,
        socket.AF_INET, 32, 0, 0, 0, protocol, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0,
        8, RTA_DST, dst.to_bytes(4, "big"), 8, RTA_TABLE, table,
        8, RTA_GATEWAY, gateway.to_bytes(4, "big"), 8, RTA_OIF, oif, 8, RTA_FLOW, realm,
    )  # fmt: skip


def delete(table: int, dst: int, protocol: int) -> bytes:
    """An RTM_DELROUTE message for the /32 `dst` in `table`, of `protocol` only."""
    return _DELETE.pack(
        _DELETE.size, RTM_DELROUTE, F_REQUEST, 0, 0,
        socket.AF_INET, 32, 0, 0, 0, protocol, RT_SCOPE_NOWHERE, 0, 0,
        8, RTA_DST, dst.to_bytes(4, "big"), 8, RTA_TABLE, table,
    )  # fmt: skip


def rule(add: bool, iifname: str, table: int, priority: int,
         sport: tuple[int, int] | None = None, dport: int = 0) -> bytes:  # fmt: skip
    """An RTM_NEWRULE (`add`) or RTM_DELRULE message: packets in on `iifname` (UDP from the
    source ports `sport` to port `dport`, if given) look up `table`, at `priority`."""
    name = iifname.encode() + b"\0"
    attrs = [_attr(FRA_IIFNAME, name), _attr(FRA_PRIORITY, _U32.pack(priority)),
             _attr(FRA_TABLE, _U32.pack(table))]  # fmt: skip
    if sport is not None:
        attrs += [_attr(FRA_IP_PROTO, bytes([socket.IPPROTO_UDP])),
                  _attr(FRA_SPORT_RANGE, struct.pack("=HH", *sport)),
                  _attr(FRA_DPORT_RANGE, struct.pack("=HH", dport, dport))]  # fmt: skip
    body = b"".join(attrs)
    kind, flags = (RTM_NEWRULE, F_CREATE | F_EXCL) if add else (RTM_DELRULE, 0)
    return _RULE.pack(_RULE.size + len(body), kind, F_REQUEST | flags, 0, 0,
                      socket.AF_INET, 0, 0, 0, 0, 0, 0, FR_ACT_TO_TBL, 0) + body  # fmt: skip


def _attr(kind: int, value: bytes) -> bytes:
    size = 4 + len(value)
    return _ATTR.pack(size, kind) + value + b"\0" * (-size % 4)


def _u32(attrs: dict[int, bytes], kind: int) -> int:
    raw = attrs.get(kind)
    return _U32.unpack(raw[:4])[0] if raw is not None else 0


def _address(attrs: dict[int, bytes], kind: int) -> int:
    raw = attrs.get(kind)
    return int.from_bytes(raw[:4], "big") if raw is not None else 0


def _attrs(data: bytes, at: int, end: int) -> dict[int, bytes]:
    out = {}
    while at + 4 <= end:
        size, kind = _ATTR.unpack_from(data, at)
        if size < 4:
            break
        out[kind & 0x3FFF] = data[at + 4 : at + size]
        at += (size + 3) & ~3
    return out


def _dump_messages(data: bytes, what: str, seq: int) -> tuple[list[tuple[int, int, int]], bool]:
    """((type, start, end) of every message of dump `seq` in one read, whether it ended)."""
    out: list[tuple[int, int, int]] = []
    off = 0
    while off + NLMSG.size <= len(data):
        length, kind, _, got, _ = NLMSG.unpack_from(data, off)
        if length < NLMSG.size:
            break
        if got != seq:  # a late answer to an earlier request
            off += (length + 3) & ~3
            continue
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            errno = -_I32.unpack_from(data, off + NLMSG.size)[0]
            raise OSError(errno, f"{what} dump: {os.strerror(errno)}")
        out.append((kind, off, off + length))
        off += (length + 3) & ~3
    return out, False


def parse_routes(data: bytes, protocol: int, seq: int) -> tuple[list[Route], bool]:
    """(IPv4 routes of `protocol` in one read of dump `seq`, whether the dump ended in it)."""
    routes: list[Route] = []
    messages, done = _dump_messages(data, "route", seq)
    for kind, off, end in messages:
        if kind != RTM_NEWROUTE or data[off + 16] != socket.AF_INET:
            continue
        dst_len, table8, proto = data[off + 17], data[off + 20], data[off + 21]
        if proto != protocol:
            continue
        if end - off == _DUMPED.size:  # a TE route as the kernel dumps it: one unpack
            f = _DUMPED.unpack_from(data, off)
            if (f[15], f[18], f[21], f[24], f[27]) == _DUMPED_KINDS:
                routes.append(Route(f[16], int.from_bytes(f[19], "big"), dst_len, f[25],
                                    int.from_bytes(f[22], "big"), f[28], False))  # fmt: skip
                continue
        attrs = _attrs(data, off + NLMSG.size + 12, end)
        routes.append(Route(_u32(attrs, RTA_TABLE) or table8, _address(attrs, RTA_DST), dst_len,
                            _u32(attrs, RTA_OIF), _address(attrs, RTA_GATEWAY),
                            _u32(attrs, RTA_FLOW), RTA_MULTIPATH in attrs))  # fmt: skip
    return routes, done


def parse_rules(data: bytes, seq: int) -> tuple[list[tuple[int, int]], bool]:
    """((priority, table) of the IPv4 rules in one read of dump `seq`, whether it ended)."""
    rules = []
    messages, done = _dump_messages(data, "rule", seq)
    for kind, off, end in messages:
        if kind != RTM_NEWRULE or data[off + 16] != socket.AF_INET:
            continue
        attrs = _attrs(data, off + NLMSG.size + 12, end)
        rules.append((_u32(attrs, FRA_PRIORITY), _u32(attrs, FRA_TABLE) or data[off + 20]))
    return rules, done


def parse_links(data: bytes, seq: int) -> tuple[list[Link], bool]:
    """(interfaces in one read of dump `seq`, whether the dump ended in it)."""
    links = []
    messages, done = _dump_messages(data, "link", seq)
    for kind, off, end in messages:
        if kind != RTM_NEWLINK:
            continue
        index = _I32.unpack_from(data, off + NLMSG.size + 4)[0]
        attrs = _attrs(data, off + NLMSG.size + 16, end)
        name = attrs.get(IFLA_IFNAME, b"").rstrip(b"\0").decode(errors="replace")
        state = attrs.get(IFLA_OPERSTATE, b"\0")[0]
        links.append(Link(index, name, state == IF_OPER_UP))
    return links, done


def parse_acks(data: bytes) -> list[tuple[int, int, str]]:
    """(sequence, errno (0: done), kernel's text) of every acknowledgement in one read."""
    out: list[tuple[int, int, str]] = []
    off = 0
    while off + NLMSG.size <= len(data):
        length, kind, flags, seq, _ = NLMSG.unpack_from(data, off)
        if length < NLMSG.size:
            break
        if kind == NLMSG_ERROR:
            errno = -_I32.unpack_from(data, off + NLMSG.size)[0]
            text = ""
            if flags & F_ACK_TLVS:  # extended ack: after the error and the capped header
                start = off + NLMSG.size + 4 + NLMSG.size
                raw = _attrs(data, start, off + length).get(NLMSGERR_ATTR_MSG, b"")
                text = raw.rstrip(b"\0").decode(errors="replace")
            out.append((seq, errno, text))
        off += (length + 3) & ~3
    return out


class RtnlSocket:
    """An rtnetlink socket opened inside one named network namespace."""

    def __init__(self, netns: str) -> None:
        with entered(netns):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        try:
            for option in (NETLINK_CAP_ACK, NETLINK_EXT_ACK, NETLINK_GET_STRICT_CHK):
                sock.setsockopt(SOL_NETLINK, option, 1)
            try:  # root may exceed rmem_max: a chunk's acknowledgements must all fit
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            sock.bind((0, 0))
            sock.settimeout(TIMEOUT)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._seq = 0

    def _next(self, count: int) -> int:
        first = self._seq + 1
        self._seq = (self._seq + count) & 0x7FFFFFFF
        return first

    def dump(self, protocol: int) -> list[Route]:
        """Every IPv4 route of `protocol`, in every table."""
        seq = self._next(1)
        self.sock.send(_DUMP.pack(_DUMP.size, RTM_GETROUTE, F_REQUEST | F_DUMP, seq, 0,
                                  socket.AF_INET, 0, 0, 0, 0, protocol, 0, 0, 0))  # fmt: skip
        routes: list[Route] = []
        while True:
            got, done = parse_routes(self.sock.recv(1 << 20), protocol, seq)
            routes += got
            if done:
                return routes

    def links(self) -> list[Link]:
        """Every interface of the namespace."""
        seq = self._next(1)
        self.sock.send(_LINK_DUMP.pack(_LINK_DUMP.size, RTM_GETLINK, F_REQUEST | F_DUMP, seq,
                                       0, socket.AF_UNSPEC, 0, 0, 0, 0, 0))  # fmt: skip
        links: list[Link] = []
        while True:
            got, done = parse_links(self.sock.recv(1 << 20), seq)
            links += got
            if done:
                return links

    def rules(self) -> list[tuple[int, int]]:
        """(priority, table) of every IPv4 policy rule."""
        seq = self._next(1)
        self.sock.send(_RULE_DUMP.pack(_RULE_DUMP.size, RTM_GETRULE, F_REQUEST | F_DUMP, seq,
                                       0, socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0))  # fmt: skip
        rules: list[tuple[int, int]] = []
        while True:
            got, done = parse_rules(self.sock.recv(1 << 20), seq)
            rules += got
            if done:
                return rules

    def send(self, messages: Sequence[bytes]) -> list[Refusal]:
        """Send `messages` (from `replace`, `delete`, `rule`) in chunks and wait until the
        kernel has handled each chunk; the refused messages. Only a chunk's last message asks
        for an acknowledgement (the kernel handles a send's messages in order, within the
        send, and answers a refusal whether asked or not), so a chunk costs one answer
        when all goes well. After a chunk with a refusal, later chunks are not sent."""
        refused: list[Refusal] = []
        for start in range(0, len(messages), CHUNK):
            chunk = messages[start : start + CHUNK]
            first = self._next(len(chunk))
            buf = bytearray(b"".join(chunk))
            off = 0
            for i, message in enumerate(chunk):  # sequence numbers: first + index
                struct.pack_into("=I", buf, off + 8, (first + i) & 0x7FFFFFFF)
                off += len(message)
            last = off - len(chunk[-1])
            flags = struct.unpack_from("=H", buf, last + 6)[0]
            struct.pack_into("=H", buf, last + 6, flags | F_ACK)
            self.sock.send(buf)
            done = False
            while not done:
                for seq, errno, text in parse_acks(self.sock.recv(1 << 20)):
                    index = (seq - first) & 0x7FFFFFFF
                    if index >= len(chunk):
                        continue  # a late answer to an earlier, abandoned request
                    if errno:
                        refused.append(Refusal(start + index, errno, text))
                    done = done or index == len(chunk) - 1
            if refused:
                break
        return refused

    def close(self) -> None:
        self.sock.close()
