"""An Open vSwitch of one's own for a fabric: `ovsdb-server` and `ovs-vswitchd` (Debian
openvswitch-switch) started with their own run directory, database and sockets (a system
instance is never touched), the userspace `netdev` datapath (no kernel module needed), and
one bridge per switch of the fabric:

    bridge      te<rank>   rank = the switch's place in name order; datapath_type=netdev
    ports       OpenFlow port slot+1 for each of the switch's links (slot = the link's rank
                among its links, the lab's order); a link between two switches is a pair
                of patch ports, a host's link a patch port to the bridge `tehosts`

Links are patch ports (no kernel device); the tap devices the userspace datapath makes for
each bridge live in a network namespace ovs-vswitchd gets of its own (`unshare --net`), so
nothing outside the run directory and that namespace is created. A lab whose hosts are
real namespaces (`tectl lab up --switch ovs`) passes `attach`: called once ovs-vswitchd
runs, it moves one end of a veth pair per host link into that namespace and names them;
each becomes the RTSW bridge's port for the link (a kernel device the userspace datapath
reads and writes), and there is no hosts' bridge.
`stop` (or `stop_rundir`, from any process) ends both daemons by their pid files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from controller.drivers.linux_plan import LabPlan, lab_dir
from controller.drivers.pids import running_pid, stop_pids
from controller.errors import DriverUnavailable
from controller.model.fabric import Fabric

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
HOSTS_BRIDGE = "tehosts"
PROTOCOLS = "OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15"
PORTS_PER_CALL = 100


def missing() -> str | None:
    """None when this process can run Open vSwitch, else why not."""
    if os.geteuid() != 0:
        return "not root: ovs-vswitchd needs root"
    for tool in ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovsdb-tool",
                 "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package openvswitch-switch)"
    if not SCHEMA.exists():
        return f"no {SCHEMA} (Debian package openvswitch-switch)"
    return None


def lab_rundir(lab: str) -> Path:
    """The run directory of the Open vSwitch of lab `lab` (`tectl lab up --switch ovs`)."""
    return lab_dir(lab) / "ovs"


def bridge_name(rank: int) -> str:
    return f"te{rank}"


def switch_bridges(fabric: Fabric) -> dict[str, str]:
    """Switch name -> its bridge."""
    plan = LabPlan(fabric, "ovs")
    return {sw: bridge_name(i) for i, sw in enumerate(sorted(plan.switches))}


def environment(rundir: Path) -> dict[str, str]:
    """The environment that keeps the OVS tools in `rundir`."""
    return os.environ | {"OVS_RUNDIR": str(rundir), "OVS_DBDIR": str(rundir),
                         "OVS_LOGDIR": str(rundir)}  # fmt: skip


Attach = Callable[["OvsInstance"], Mapping[int, str]]


class OvsInstance:
    """ovsdb-server and ovs-vswitchd running in `rundir`, with the bridges of `fabric`;
    `attach(instance)`, if given, makes the host links' devices in ovs-vswitchd's namespace
    and returns link id -> device name."""

    def __init__(self, rundir: Path, fabric: Fabric, attach: Attach | None = None) -> None:
        reason = missing()
        if reason:
            raise DriverUnavailable(reason)
        self.rundir = Path(rundir)
        self.rundir.mkdir(parents=True, exist_ok=True)
        self.db = self.rundir / "db.sock"
        if len(str(self.db)) > 100:
            raise DriverUnavailable(f"run directory too long for unix sockets: {self.rundir}")
        self.env = environment(self.rundir)
        self._started: list[str] = []
        try:
            self._start()
            self._bridges(fabric, attach(self) if attach is not None else None)
        except BaseException:
            self.stop()
            raise

    def _run(self, *args: str, stdin: str | None = None) -> str:
        try:
            done = subprocess.run(args, input=stdin, capture_output=True, text=True,
                                  env=self.env, timeout=120, check=False)  # fmt: skip
        except subprocess.TimeoutExpired as err:
            raise DriverUnavailable(f"{args[0]} timed out") from err
        except OSError as err:
            raise DriverUnavailable(f"cannot run {args[0]}: {err}") from err
        if done.returncode:
            raise DriverUnavailable(f"{' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout

    def vsctl(self, *args: str) -> str:
        return self._run("ovs-vsctl", f"--db=unix:{self.db}", "--timeout=60", *args)

    def _start(self) -> None:
        d = self.rundir
        self._run("ovsdb-tool", "create", str(d / "conf.db"), str(SCHEMA))
        self._run("ovsdb-server", str(d / "conf.db"), f"--remote=punix:{self.db}",
                  f"--pidfile={d / 'ovsdb-server.pid'}", f"--unixctl={d / 'ovsdb-server.ctl'}",
                  "--detach", f"--log-file={d / 'ovsdb-server.log'}")  # fmt: skip
        self._started.append("ovsdb-server")
        self.vsctl("--no-wait", "init")
        # a network namespace of its own: the userspace datapath makes tap devices
        # (ovs-netdev, one per bridge), which must not land in the host's namespace
        self._run("unshare", "--net", "--", "ovs-vswitchd", f"unix:{self.db}",
                  f"--pidfile={d / 'ovs-vswitchd.pid'}", f"--unixctl={d / 'ovs-vswitchd.ctl'}",
                  "--detach", f"--log-file={d / 'ovs-vswitchd.log'}")  # fmt: skip
        self._started.append("ovs-vswitchd")

    def vswitchd_pid(self) -> int:
        """The process id of this instance's ovs-vswitchd (its namespace holds the ports)."""
        try:
            return int((self.rundir / "ovs-vswitchd.pid").read_text().strip())
        except (OSError, ValueError) as err:
            raise DriverUnavailable(f"no ovs-vswitchd pid in {self.rundir}: {err}") from err

    def _bridges(self, fabric: Fabric, host_ports: Mapping[int, str] | None = None) -> None:
        """Every switch a bridge; links as patch-port pairs, or host links as the devices
        `host_ports` names (ovs-vsctl transactions of at most PORTS_PER_CALL ports: a
        command line has a size limit)."""
        plan = LabPlan(fabric, "ovs")
        bridges = switch_bridges(fabric)
        args: list[str] = []
        if host_ports is None:
            args += ["--", "add-br", HOSTS_BRIDGE, "--", "set", "bridge", HOSTS_BRIDGE,
                     "datapath_type=netdev"]  # fmt: skip
        for br in bridges.values():
            args += ["--", "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev",
                     f"protocols={PROTOCOLS}", "fail_mode=secure"]  # fmt: skip
        self.vsctl(*args)
        ports: list[list[str]] = []
        for sw, br in bridges.items():
            for slot, link in enumerate(plan.node_links[sw]):
                lower, upper = plan.ends(link)
                far = lower.node if upper.node == sw else upper.node
                if far not in bridges and host_ports is not None:  # a host's own device
                    device = host_ports[link]
                    ports.append(["--", "add-port", br, device, "--", "set", "interface",
                                  device, f"ofport_request={slot + 1}"])  # fmt: skip
                    continue
                name, peer = f"{br}l{link}", f"{bridges.get(far, HOSTS_BRIDGE)}l{link}"
                ports.append(["--", "add-port", br, name, "--", "set", "interface", name,
                              "type=patch", f"options:peer={peer}",
                              f"ofport_request={slot + 1}"])  # fmt: skip
                if far not in bridges:  # a host's end, on the hosts' bridge
                    ports.append(["--", "add-port", HOSTS_BRIDGE, peer, "--", "set",
                                  "interface", peer, "type=patch", f"options:peer={name}"])
        for i in range(0, len(ports), PORTS_PER_CALL):  # vswitchd catches up after
            self.vsctl("--no-wait",
                       *(arg for port in ports[i : i + PORTS_PER_CALL] for arg in port))
        self._wait_ports(len(ports))
        deadline = time.monotonic() + 60
        waiting = [self.rundir / f"{br}.mgmt" for br in bridges.values()]
        while waiting:
            waiting = [p for p in waiting if not p.exists()]
            if waiting and time.monotonic() > deadline:
                raise DriverUnavailable(f"ovs-vswitchd made no {waiting[0].name} in 60 s")
            if waiting:
                time.sleep(0.05)

    def _wait_ports(self, count: int, timeout: float = 600.0) -> None:
        """Until ovs-vswitchd has given all `count` ports their OpenFlow numbers."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.vsctl("--no-wait", "--bare", "--columns=ofport", "list", "interface")
            done = sum(1 for v in out.split() if v.lstrip("-").isdigit() and int(v) > 0)
            if done >= count:
                return
            if time.monotonic() > deadline:
                raise DriverUnavailable(f"ovs-vswitchd numbered {done} of {count} ports "
                                        f"in {timeout:.0f} s")  # fmt: skip
            time.sleep(0.2)

    def stop(self) -> None:
        """End the daemons this instance started (by their pid files); idempotent."""
        stop_rundir(self.rundir, tuple(reversed(self._started)))
        self._started.clear()


def daemons_down(rundir: Path, daemons: tuple[str, ...] = ("ovsdb-server", "ovs-vswitchd"),
                 ) -> tuple[str, ...]:  # fmt: skip
    """The daemons of the instance in `rundir` that are not running (no pid file, or its
    process gone)."""
    down = []
    for daemon in daemons:
        try:
            pid = int((rundir / f"{daemon}.pid").read_text().strip())
        except (OSError, ValueError):
            pid = 0
        if not pid or not running_pid(pid):
            down.append(daemon)
    return tuple(down)


def stop_rundir(rundir: Path, daemons: tuple[str, ...] = ("ovs-vswitchd", "ovsdb-server"),
                ) -> None:  # fmt: skip
    """End the daemons of the instance in `rundir` by their pid files (from any process),
    one after another; idempotent."""
    for daemon in daemons:
        pidfile = rundir / f"{daemon}.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        stop_pids([pid], grace=10.0)  # in order: the switch before its database
