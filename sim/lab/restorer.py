"""The lab switches' own agent: puts back what a flapped port lost, with no controller.

Setting a port admin-down makes the kernel flush every route through it, and nothing the
kernel offers keeps a route across that (see docs/dataplane.md). A real switch keeps its
configuration apart from its forwarding state and re-programs a port that comes back;
this process plays that part for a lab: `lab up` starts one per lab (`start`), `lab down`
stops it (`stop`). It listens to link events in every switch namespace (one netlink socket
each, subscribed to RTNLGRP_LINK) and, when a port of a switch comes up, puts back that
switch's static underlay (static labs) and the TE entries its stored table
(`controller.drivers.linux_store`) wants through ports that are up, through the `linux`
driver's own `reconcile`. It serialises with a running controller through the table's
lock, so it never puts back an entry the controller removed meanwhile.

It exits when its lab's directory is gone (checked every second), so it never outlives
the lab and keeps none of its namespaces alive.

    python -m sim.lab.restorer LAB FABRIC UNDERLAY    # prints "ready" once it listens
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from controller.drivers.linux_plan import lab_dir
from controller.errors import LabError
from sim.lab.owners import owner_alive, owner_of

RTMGRP_LINK = 1
RTM_NEWLINK = 16
IFLA_OPERSTATE = 16
IF_OPER_UP = 6
NLMSG = struct.Struct("=IHHII")
IFINFO = struct.Struct("=BBHiII")
READY = "ready"
START_TIMEOUT = 60.0  # seconds for the process to import, open its sockets and say ready


def link_events(data: bytes) -> Iterator[tuple[int, bool]]:
    """(ifindex, operationally up) of every RTM_NEWLINK message in one netlink read."""
    off = 0
    while off + NLMSG.size <= len(data):
        length, kind = NLMSG.unpack_from(data, off)[:2]
        if length < NLMSG.size:
            return
        if kind == RTM_NEWLINK and length >= NLMSG.size + IFINFO.size:
            index = IFINFO.unpack_from(data, off + NLMSG.size)[3]
            up = False
            at, end = off + NLMSG.size + IFINFO.size, off + length
            while at + 4 <= end:
                size, kind = struct.unpack_from("=HH", data, at)
                if size < 4:
                    break
                if kind & 0x3FFF == IFLA_OPERSTATE and size >= 5:
                    up = data[at + 4] == IF_OPER_UP
                at += (size + 3) & ~3
            yield index, up
        off += (length + 3) & ~3


def run(lab: str, source: str, underlay: str) -> None:
    """Listen to the switch namespaces of lab `lab` (built from fabric `source` with
    `underlay`) and restore each flapped switch; returns when the lab is gone."""
    from controller.drivers.linux import LinuxDriver
    from controller.drivers.linux_plan import LabPlan
    from controller.formats.fabric_file import load_fabric
    from sim.lab import netns
    from sim.lab.underlay import install_static

    fabric = load_fabric(source)
    plan = LabPlan(fabric, lab)
    driver = LinuxDriver(fabric=fabric, lab=lab)
    directory = lab_dir(lab)
    selector = selectors.DefaultSelector()
    for switch in plan.switches:
        with netns.entered(plan.netns(switch)):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((0, RTMGRP_LINK))
        selector.register(sock, selectors.EVENT_READ, (switch, sock))
    print(READY, flush=True)
    while directory.exists():
        dirty: set[str] = set()
        for key, _ in selector.select(timeout=1.0):
            switch, sock = key.data
            try:
                data = sock.recv(1 << 16)
            except OSError:  # ENOBUFS: events were lost; look at the switch anyway
                dirty.add(switch)
                continue
            if any(up for _, up in link_events(data)):
                dirty.add(switch)
        for switch in sorted(dirty):
            try:
                if underlay == "static":
                    install_static(plan, [switch])
                restored = driver.reconcile(switch)
            except Exception as err:  # noqa: BLE001 - the lab is going away, or a port flapped again
                if not directory.exists():
                    break
                print(f"{switch}: restore failed: {err}", file=sys.stderr, flush=True)
                continue
            if restored:
                print(f"{switch}: a port came up; put back {restored} TE entries",
                      file=sys.stderr, flush=True)  # fmt: skip
    driver.close()


# ---- the process, seen from `lab up` and `lab down` ---------------------------------------
_children: dict[str, subprocess.Popen[str]] = {}


def start(lab: str, source: str, underlay: str) -> dict[str, int]:
    """Start lab `lab`'s restorer and wait until it listens; its {"pid", "start"}."""

    root = str(Path(__file__).resolve().parents[2])  # this tree's `sim`, wherever it runs
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))  # fmt: skip
    with open(lab_dir(lab) / "restorer.log", "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sim.lab.restorer", lab, source,
                                 underlay], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    said = proc.stdout.readline().strip() if selector.select(START_TIMEOUT) else ""
    selector.close()
    if said != READY:
        proc.kill()
        proc.wait()
        tail = (lab_dir(lab) / "restorer.log").read_text()[-400:].strip()
        raise LabError(f"lab {lab!r}: the restorer did not start: {tail or 'no output'}")
    _children[lab] = proc
    return owner_of(proc.pid)


def stop(lab: str, process: dict[str, int] | None) -> None:
    """Stop lab `lab`'s restorer (started here or by another process), and wait for it."""
    child = _children.pop(lab, None)
    if child is not None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return
    if process is None or not owner_alive(process):
        return
    os.kill(int(process["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while owner_alive(process) and time.monotonic() < deadline:
        time.sleep(0.02)
    if owner_alive(process):
        os.kill(int(process["pid"]), signal.SIGKILL)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m sim.lab.restorer LAB FABRIC static|frr")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(*sys.argv[1:])
