"""The `ovs` driver: TE entries as OpenFlow flows on Open vSwitch bridges, one per switch.

An entry <ingress port, destination host[, QP bucket]> -> next hop is one flow in table 0:

    cookie=0xfe7e0000000<realm>, priority=100, ip, in_port=<slot+1>, nw_dst=<host loopback>
        actions=output:<next hop slot+1>
    a bucket:  priority=101, udp, ..., tp_dst=4791, tp_src=<first port>/0xffc0

(ports and addresses as `controller.drivers.ovs_daemons` and the lab's plan lay them out; a
bucket's 64 source ports are one masked match; its flow sits above the whole flow's). The
cookie's top 16 bits mark the flow as ours, its low bits name the owner (the registry of
`controller.drivers.linux`, a file in the run directory). Flows of other cookies are never
read or touched; a flow with the mark that the driver cannot have written (another priority,
another action) makes `read` fail, naming it: it may steer what the entries steer.

Every batch goes to its bridge as one OpenFlow bundle (`ovs-ofctl --bundle`, OpenFlow 1.4):
`add` (which replaces a flow of the same match in place: make before break) and
`delete_strict`, committed all or nothing; the batch is checked against the fabric first.
`read` parses `ovs-ofctl dump-flows`: what the switch holds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from controller.drivers import ovs_daemons
from controller.drivers.interface import Driver, split_ops
from controller.drivers.linux import OwnerRegistry
from controller.drivers.linux_plan import ROCE_PORT, SPORT_BASE, SPORT_WIDTH, LabPlan, sport_range
from controller.errors import DriverError, DriverRejected, DriverTimeout, DriverUnavailable
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.plan import Op
from controller.routes.tables import Entry

MARK = 0xFE7E
COOKIE_MASK = 0xFFFF << 48  # the cookie's bits that hold the mark
PRIORITY = 100  # whole flow; a bucket's flow is one above
SPORT_MASK = 0xFFFF & ~(SPORT_WIDTH - 1)
OPENFLOW = "OpenFlow14"  # bundles
_FLOW = re.compile(r"cookie=0x([0-9a-f]+),.*?priority=(\d+),?([^ ]*) actions=(\S+)$")
_OUTPUT = re.compile(r"output:(\d+)")
# ovs-ofctl's words when the bridge is not there or ovs-vswitchd went away mid-call
_CONNECTION_LOST = ("Connection refused", "No such file", "Broken pipe", "End of file",
                    "Connection reset")  # fmt: skip


class OvsDriver(Driver):
    """Programs the bridges of an Open vSwitch instance running in `rundir` for `fabric`."""

    name = "ovs"

    def __init__(self, fabric: Fabric, rundir: str | Path | None = None, timeout: float = 10.0,
                 lab: str | None = None) -> None:  # fmt: skip
        """Drive the instance in `rundir`, or that of lab `lab` (`tectl lab up --switch ovs`)."""
        self.fabric = fabric
        if (rundir is None) == (lab is None):
            which = "not both" if rundir is not None else "neither was given"
            raise DriverError("ovs driver: give its lab (tectl serve --lab NAME, as `tectl lab "
                              f"up --switch ovs` made it) or its rundir, one of them: {which}")
        try:  # a bad lab name (`lab_dir` checks it) is the operator's error, said as such
            self.rundir = Path(rundir) if rundir is not None else ovs_daemons.lab_rundir(str(lab))
        except ValueError as err:
            raise DriverError(str(err)) from err
        if not (self.rundir / "db.sock").exists():
            if lab is not None and not self.rundir.parent.is_dir():
                raise DriverUnavailable(f"no lab {lab!r} on this machine (no "
                                        f"{self.rundir.parent}): start one with `tectl lab up "
                                        f"--switch ovs --name {lab}`")  # fmt: skip
            if lab is not None and not self.rundir.exists():
                raise DriverUnavailable(f"lab {lab!r} has no Open vSwitch (no {self.rundir}): "
                                        "a lab of Linux namespaces (`tectl lab up --switch "
                                        "linux`) is programmed by the linux driver")  # fmt: skip
            raise DriverUnavailable(f"no Open vSwitch running in {self.rundir} (no db.sock)")
        self.lab = LabPlan(fabric, "ovs")
        self.bridges = ovs_daemons.switch_bridges(fabric)
        self._ports = switch_ports(fabric)
        self.owners = OwnerRegistry(self.rundir / "owners.json")
        self.timeout = timeout
        self._env = ovs_daemons.environment(self.rundir)
        self._owned: ovs_daemons.OvsInstance | None = None
        self._closed = False

    @classmethod
    def for_conformance(cls, fabric: Fabric, workdir: Path) -> OvsDriver:
        """A driver on an Open vSwitch of its own (stopped on close); skips when not root or
        openvswitch-switch is missing."""
        import pytest

        reason = ovs_daemons.missing()
        if reason:
            pytest.skip(f"ovs driver: {reason}")
        rundir = Path(tempfile.mkdtemp(prefix="fte-ovs-"))  # short: unix socket paths
        instance = ovs_daemons.OvsInstance(rundir, fabric)
        try:
            driver = cls(fabric, rundir)
        except BaseException:
            instance.stop()
            raise
        driver._owned = instance
        return driver

    # ---- plumbing ------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise DriverUnavailable("ovs driver is closed")

    def switches(self) -> tuple[str, ...]:
        self._check_open()
        return tuple(sorted(self.bridges))

    def _bridge(self, switch: str) -> str:
        self._check_open()
        bridge = self.bridges.get(switch)
        if bridge is None:
            raise DriverRejected(f"unknown switch {switch!r}")
        return bridge

    def _ofctl(self, switch: str, command: str, *args: str, options: Sequence[str] = (),
               stdin: str | None = None) -> str:  # fmt: skip
        """`ovs-ofctl [options] command <the switch's bridge> [args]`'s output."""
        target = f"unix:{self.rundir / (self._bridge(switch) + '.mgmt')}"
        command_line = ["ovs-ofctl", "-O", OPENFLOW, *options, command, target, *args]
        try:
            done = subprocess.run(command_line, input=stdin, capture_output=True, text=True,
                                  env=self._env, timeout=self.timeout, check=False)  # fmt: skip
        except subprocess.TimeoutExpired as err:
            raise DriverTimeout(f"{switch}: ovs-ofctl {command} timed out") from err
        except OSError as err:
            raise DriverUnavailable(f"{switch}: cannot run ovs-ofctl: {err}") from err
        if done.returncode:
            message = done.stderr.strip().splitlines()
            text = message[-1] if message else f"exit status {done.returncode}"
            if any(lost in done.stderr for lost in _CONNECTION_LOST):  # not the switch's no
                raise DriverUnavailable(f"{switch}: bridge unreachable: {text}")
            raise DriverRejected(f"{switch}: the switch refused the bundle: {text}")
        return done.stdout

    def _port(self, switch: str, link: int) -> int:
        links = self.lab.node_links[switch]
        return links.index(link) + 1

    # ---- flows ---------------------------------------------------------------------
    def _match(self, switch: str, entry: Entry) -> str:
        address = self.lab.host_address(entry.dst_host)
        in_port = self._port(switch, entry.in_port)
        if entry.qp == ALL_QPS:
            return f"priority={PRIORITY},ip,in_port={in_port},nw_dst={address}"
        first, _ = sport_range(entry.qp)
        return (f"priority={PRIORITY + 1},udp,in_port={in_port},nw_dst={address},"
                f"tp_src={first:#x}/{SPORT_MASK:#x},tp_dst={ROCE_PORT}")  # fmt: skip

    def _flow(self, switch: str, entry: Entry) -> str:
        cookie = (MARK << 48) | self.owners.realm(entry.owner)
        out = self._port(switch, entry.next_hop)
        return f"add cookie={cookie:#x},{self._match(switch, entry)},actions=output:{out}"

    def bundle(self, switch: str, lines: Sequence[str]) -> None:
        """Send flow-mod lines to `switch` as one OpenFlow bundle: all or nothing."""
        if lines:
            self._ofctl(switch, "add-flows", "-", options=["--bundle"],
                        stdin="\n".join(lines) + "\n")

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self._bridge(switch)
        install, remove = split_ops(switch, ops)
        for entry in install:
            problem = entry_problem(self.fabric, self._ports, entry)
            if problem:
                raise DriverRejected(problem)
            if entry.qp != ALL_QPS:
                sport_range(entry.qp)  # a bucket the source ports can carry
        lines = [self._flow(switch, e) for e in install]
        for in_port, dst, qp in remove:  # after the adds: a match both set and removed goes
            if not (0 <= dst < self.fabric.num_hosts and in_port in self._ports[switch]):
                continue  # nothing of ours can be there
            gone = Entry(switch, in_port, dst, in_port, qp=qp)
            # only a flow with our mark: a foreign flow of the same match is not ours to remove
            lines.append(f"delete_strict cookie={MARK << 48:#x}/{COOKIE_MASK:#x},"
                         f"{self._match(switch, gone)}")  # fmt: skip
        self.bundle(switch, lines)

    def read(self, switch: str) -> tuple[Entry, ...]:
        out = self._ofctl(switch, "dump-flows", options=["--no-stats"])
        links = self.lab.node_links[switch]
        hosts = self.lab.host_by_address
        entries: dict[tuple[int, int, int], Entry] = {}
        for line in out.splitlines():
            found = _FLOW.search(line.strip())
            if found is None:
                continue
            cookie = int(found.group(1), 16)
            if cookie >> 48 != MARK:
                continue
            action = _OUTPUT.fullmatch(found.group(4))
            if int(found.group(2)) not in (PRIORITY, PRIORITY + 1) or action is None:
                raise DriverError(f"{switch}: a flow with fabric-te's cookie that it does not "
                                  f"write: {line.strip()!r} (remove it: it may steer what TE "
                                  "entries steer)")  # fmt: skip
            fields = dict(part.partition("=")[::2] for part in found.group(3).split(",")
                          if "=" in part)  # fmt: skip
            try:
                qp = ALL_QPS
                if "tp_src" in fields:
                    value = int(fields["tp_src"].split("/")[0], 0)
                    qp = (value - SPORT_BASE) // SPORT_WIDTH
                entry = Entry(switch, links[int(fields["in_port"]) - 1], hosts[fields["nw_dst"]],
                              links[int(action.group(1)) - 1],
                              self.owners.owner(cookie & 0xFFFF), qp)  # fmt: skip
            except (KeyError, IndexError, ValueError) as err:
                raise DriverError(f"{switch}: unexpected TE flow {line.strip()!r}: {err}") from err
            entries[entry.match] = entry
        return tuple(entries[k] for k in sorted(entries))

    def close(self) -> None:
        self._closed = True
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.stop()
            shutil.rmtree(owned.rundir, ignore_errors=True)
