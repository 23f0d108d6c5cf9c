"""Routes and rules over rtnetlink in bulk: the messages and their parsing, and (as root, in
a namespace of its own) a bulk send that the kernel refuses partly."""

from __future__ import annotations

import errno
import os
import secrets
import socket
import struct
import subprocess

import pytest

from controller.drivers import linux_netlink as nl

PROTO = 84


def _dumped(seq: int, attrs: list[tuple[int, bytes]], proto: int = PROTO) -> bytes:
    """An RTM_NEWROUTE message as a dump gives it, with `attrs` in that order."""
    body = b"".join(struct.pack("=HH", 4 + len(v), k) + v for k, v in attrs)
    rtm = struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, 252, proto, 0, 1, 0)
    return struct.pack("=IHHII", 16 + 12 + len(body), nl.RTM_NEWROUTE, 2, seq, 0) + rtm + body


def _done(seq: int) -> bytes:
    return struct.pack("=IHHIIi", 20, nl.NLMSG_DONE, 2, seq, 0, 0)


def test_routes_parse_the_same_in_either_attribute_order() -> None:
    u32, ip = (lambda v: struct.pack("=I", v)), socket.inet_aton  # noqa: E731
    kernel = [(nl.RTA_TABLE, u32(1000258)), (nl.RTA_DST, ip("10.1.0.7")),
              (nl.RTA_GATEWAY, ip("10.128.0.3")), (nl.RTA_OIF, u32(5)), (nl.RTA_FLOW, u32(2))]
    other = [kernel[1], kernel[3], kernel[0], kernel[4], kernel[2]]
    foreign = _dumped(7, kernel, proto=4)  # another protocol: not ours, left out
    for attrs in (kernel, other):
        routes, done = nl.parse_routes(_dumped(7, attrs) + foreign + _done(7), PROTO, 7)
        assert done and routes == [nl.Route(1000258, int.from_bytes(ip("10.1.0.7"), "big"), 32,
                                            5, int.from_bytes(ip("10.128.0.3"), "big"), 2, False)]
    late = _dumped(6, kernel)  # an answer to an earlier dump is not part of this one
    assert nl.parse_routes(late, PROTO, 7) == ([], False)


def test_a_refusal_carries_its_sequence_errno_and_the_kernels_text() -> None:
    text = b"Nexthop device is not up\0"
    tlv = struct.pack("=HH", 4 + len(text), nl.NLMSGERR_ATTR_MSG) + text + b"\0" * (-len(text) % 4)
    inner = struct.pack("=IHHII", 68, nl.RTM_NEWROUTE, 0x501, 41, 0)  # the capped request
    body = struct.pack("=i", -errno.ENETDOWN) + inner + tlv
    refused = struct.pack("=IHHII", 16 + len(body), nl.NLMSG_ERROR, nl.F_ACK_TLVS, 41, 0) + body
    ok = struct.pack("=IHHII", 36, nl.NLMSG_ERROR, 0, 42, 0) + struct.pack("=i", 0) + inner
    assert nl.parse_acks(refused + ok) == [(41, errno.ENETDOWN, "Nexthop device is not up"),
                                           (42, 0, "")]  # fmt: skip


def test_messages_have_the_shapes_the_kernel_takes() -> None:
    route = nl.replace(1000001, 0x0A010001, 0x0A800001, 3, 1, PROTO)
    assert len(route) == struct.unpack_from("=I", route)[0] == 68
    assert struct.unpack_from("=H", route, 6)[0] == nl.F_REQUEST | nl.F_REPLACE | nl.F_CREATE
    gone = nl.delete(1000001, 0x0A010001, PROTO)
    assert struct.unpack_from("=IH", gone) == (44, nl.RTM_DELROUTE)
    rule = nl.rule(True, "h0n1", 1000005, 20000, (49408, 49471), 4791)
    assert len(rule) % 4 == 0 and struct.unpack_from("=I", rule)[0] == len(rule)
    assert struct.pack("=HH", 49408, 49471) in rule and b"h0n1\0" in rule


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a namespace")


@pytest.fixture
def scratch():
    """A namespace of this test's own with one veth pair up, removed afterwards."""
    name = f"tnl{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for cmd in (["link", "add", "p0", "type", "veth", "peer", "name", "q0"],
                    ["addr", "add", "10.128.0.0/31", "dev", "p0"],
                    ["link", "set", "p0", "up"], ["link", "set", "q0", "up"]):  # fmt: skip
            subprocess.run(["ip", "-n", name, *cmd], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


@needs_root
def test_a_bulk_send_reports_the_refused_message_and_stops_after_its_chunk(scratch) -> None:
    sock = nl.RtnlSocket(scratch)
    try:
        index = {link.name: link.ifindex for link in sock.links()}
        assert {"p0", "q0"} <= set(index) and all(ln.up for ln in sock.links() if ln.name != "lo")
        gw = 0x0A800001
        total, bad = 3 * nl.CHUNK, nl.CHUNK + 10  # the bad one in the second chunk
        messages = [nl.replace(1000001, 0x0A010000 + i, gw, 999 if i == bad else index["p0"],
                               1, PROTO) for i in range(total)]  # fmt: skip
        refused = sock.send(messages)
        assert [r.at for r in refused] == [bad]  # no such device: unreachable
        assert refused[0].errno in (errno.ENODEV, errno.ENETUNREACH)
        held = sock.dump(PROTO)
        assert len(held) == 2 * nl.CHUNK - 1  # its chunk went on after it; the third never went
        assert {r.table for r in held} == {1000001} and all(r.oif == index["p0"] for r in held)
        shown = subprocess.run(["ip", "-n", scratch, "route", "show", "table", "1000001"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert len(shown.splitlines()) == len(held) and "realm" in shown
        rule = nl.rule(True, "p0", 1000001, 20000, (49152, 49215), 4791)
        assert sock.send([rule]) == []
        assert (20000, 1000001) in sock.rules()
        assert [r.errno for r in sock.send([rule])] == [errno.EEXIST]
        gone = [nl.delete(1000001, 0x0A010000 + i, PROTO) for i in range(total)]
        refused = sock.send(gone)  # the ones never installed are refused: ESRCH
        assert {r.errno for r in refused} == {errno.ESRCH} and sock.dump(PROTO)[:1] == []
    finally:
        sock.close()
