"""`lab up`, `lab down`, `lab status`: a fabric as network namespaces, and nothing else.

`up` makes one namespace per host and switch (named by `controller.drivers.linux_plan`),
sets their sysctls (forwarding, L4 multipath hash, ignore routes with link down, no rp
filter, no IPv6), joins them with one veth pair per link, addresses every end, and starts
the underlay and the lab's restorer (`sim.lab.restorer`: a port that comes back up gets the
routes the kernel flushed with it, with no controller running). It first writes a record
of what it is about to make, so that `down` removes exactly that (and a failed `up` cleans
up after itself through the same path).

The record names the lab's owner: the process that built it (pid and start time, so a
reused pid is not mistaken for it), or none for a lab `tectl lab up` keeps until `lab down`.
A lab whose owner is gone (a test run killed before its exit hooks ran) is an orphan:
`reap` removes those, and only those (`tectl lab gc`, every `tectl lab up`, the start of a
test run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from controller.drivers.linux_plan import LabPlan, check_lab_name, lab_dir
from controller.errors import LabError
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from sim.lab import netns
from sim.lab.netns import ip_batch
from sim.lab.owners import owner_alive, owner_of
from sim.lab.underlay import install_static

# Measured on a 2-core, 24 GiB machine (see docs/dataplane.md): 392 namespaces and 1,472
# links (static underlay) build in 11.5 s using 302 MiB; FRR costs about 24 MiB a namespace.
MAX_NAMESPACES = 400
MAX_LINKS = 2000
MAX_FRR_NAMESPACES = 100  # about 20 MiB per zebra+bgpd pair
UNREACHABLE_SHOWN = 8  # host pairs with no cabled path a lab record names

SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.fib_multipath_hash_policy": "1",
    "net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
    "net.ipv4.conf.default.ignore_routes_with_linkdown": "1",
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
}


@dataclass
class LabRecord:
    """What `lab up` made: kept in the lab's directory, read by down, status and the driver."""

    lab: str
    fabric: str  # the preset name or fabric file it was built from
    underlay: str  # static | frr
    namespaces: list[str]
    links: int
    state: str = "building"  # building | up
    build_seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    owner: dict[str, int] | None = None  # {"pid", "start"} of the building process; None: kept
    restorer: dict[str, int] | None = None  # {"pid", "start"} of its restorer (sim.lab.restorer)
    switch: str = "linux"  # linux: switches are namespaces; ovs: Open vSwitch bridges
    lldp: bool = False  # lldpd runs in every namespace (sim.lab.lldp)
    not_installed: int = 0  # links of the fabric with no cable: built as no veth
    unreachable: int = 0  # ordered pairs of existing hosts that no cabled path joins
    unreachable_shown: list[str] = field(default_factory=list)  # the first few, "a>b"
    # why the ports are not the inventory's names ("" when they are, or for a preset)
    own_ports: str = ""

    def save(self) -> None:
        path = lab_dir(self.lab) / "lab.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, path)


def load_record(lab: str) -> LabRecord:
    path = lab_dir(lab) / "lab.json"
    try:
        return LabRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise LabError(f"no lab {lab!r} (no {path})") from None
    except (ValueError, TypeError) as err:
        raise LabError(f"lab {lab!r}: corrupt record {path}: {err}") from err


def labs() -> list[LabRecord]:
    """The record of every lab on this machine (unreadable records are left out)."""
    root = lab_dir("x").parent
    out = []
    for path in sorted(root.glob("*/lab.json")) if root.exists() else []:
        try:
            out.append(load_record(path.parent.name))
        except (LabError, ValueError):
            continue
    return out


def reap() -> list[LabRecord]:
    """Remove every lab whose owner is gone; the records of those removed."""
    if os.geteuid() != 0:
        return []
    gone = [r for r in labs() if not owner_alive(r.owner)]
    for record in gone:
        _remove(record)
    return gone


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("lab needs root: network namespaces cannot be made or entered otherwise")


def check_size(fabric: Fabric, underlay: str, switch: str = "linux") -> None:
    """LabError when a lab cannot build `fabric` with `underlay` and `switch`es: too big
    for one machine, or a layout the lab cannot route. Links not installed are built as
    missing cables (no veth), absent hosts and switches as no namespace."""
    if fabric.rtsws_per_rack > 1 and (underlay != "static" or fabric.pods > 1):
        # the lab addresses hosts, not NICs: a CTSW keeps a packet on the rail it came up
        # (sim.lab.underlay), which a packet from an ATSW, FRR's BGP or an OVS group
        # cannot tell
        raise LabError(
            f"fabric {fabric.name} has {fabric.rtsws_per_rack} RTSWs per rack (rail-optimized "
            "or dual-ToR): a lab builds it in one pod, with switches as namespaces and "
            "--underlay static only"
        )
    nodes = int(fabric.present[: fabric.node_id("nic", 0)].sum()) + len(fabric.switch_names())
    links = int(fabric.installed.sum())
    if nodes > MAX_NAMESPACES or links > MAX_LINKS:
        raise LabError(
            f"fabric {fabric.name} needs {nodes} namespaces and {links} links; "
            f"a lab holds at most {MAX_NAMESPACES} and {MAX_LINKS} on one machine"
        )
    if underlay == "frr" and nodes > MAX_FRR_NAMESPACES:
        raise LabError(
            f"fabric {fabric.name} needs {nodes} FRR instances; at most "
            f"{MAX_FRR_NAMESPACES} (use --underlay static)"
        )


def port_lines(plan: LabPlan) -> dict[str, list[str]]:
    """Node -> `ip -batch` lines that address and raise its ports and loopback (the
    installed links' ports; hosts and switches that exist)."""
    f = plan.fabric
    out: dict[str, list[str]] = {n: ["link set dev lo up"] for n in plan.hosts + plan.switches}
    for host in plan.hosts:
        out[host].append(f"addr add {plan.host_address(f.host_by_name(host))}/32 dev lo")
    for sw in plan.switches:
        out[sw].append(f"addr add {plan.switch_address(sw)}/32 dev lo")
    for link in np.flatnonzero(f.installed).tolist():
        for port in plan.ends(link):
            out[port.node] += [
                f"addr add {port.address}/31 dev {port.ifname}",
                f"link set dev {port.ifname} up",
            ]
    return out


def set_aliases(plan: LabPlan) -> None:
    """Every port's alias = the fabric's link name (set over netlink: `ip -batch` would read
    the '#' of a parallel member's name as a comment)."""
    from pyroute2 import IPRoute

    for node, links in plan.node_links.items():
        with netns.entered(plan.netns(node)):
            ipr = IPRoute()
        try:
            index = {ln.get_attr("IFLA_IFNAME"): ln["index"] for ln in ipr.get_links()}
            for link in links:
                port = plan.port(node, link)
                ipr.link("set", index=index[port.ifname], ifalias=plan.fabric.link_name(link))
        finally:
            ipr.close()


def veth_lines(plan: LabPlan) -> list[str]:
    """One veth pair per installed link (a missing cable has none)."""
    lines = []
    for link in np.flatnonzero(plan.fabric.installed).tolist():
        lo, hi = plan.ends(link)
        lines.append(
            f"link add dev {lo.ifname} netns {plan.netns(lo.node)} type veth "
            f"peer name {hi.ifname} netns {plan.netns(hi.node)}"
        )
    return lines


def up(fabric: Fabric, lab: str, source: str, underlay: str = "static",
       owner: int | None = -1, switch: str = "linux",
       health: LinkHealth | None = None, lldp: bool = False) -> LabRecord:  # fmt: skip
    """Build `fabric` as lab `lab`; on any failure remove what was made and raise. `owner`:
    the pid the lab lives and dies with (default this process; None: kept until `down`).
    `switch`: linux (every switch a namespace) or ovs (every switch an Open vSwitch bridge,
    the underlay select groups weighted by `health`; `sim.lab.ovs`). `lldp`: lldpd in every
    namespace (`sim.lab.lldp`), returning once every node hears its planned neighbours."""
    check_lab_name(lab)
    require_root()
    if switch not in ("linux", "ovs"):
        raise LabError(f"unknown switch kind {switch!r}: linux or ovs")
    if lldp:
        from sim.lab import lldp as lldpd

        if switch != "linux":
            raise LabError("--lldp: needs switches as namespaces (--switch linux); Open "
                           "vSwitch bridges do not speak LLDP here")  # fmt: skip
        reason = lldpd.missing()
        if reason:
            raise LabError(f"--lldp: {reason}")
    if switch == "ovs":
        from controller.drivers.ovs_daemons import missing

        reason = missing()
        if reason:
            raise LabError(f"--switch ovs: {reason}")
        underlay = "groups"
    elif underlay not in ("static", "frr"):
        raise LabError(f"unknown underlay {underlay!r}: static or frr")
    check_size(fabric, underlay, switch)
    if underlay == "frr":
        from sim.lab import frr

        frr.require()
    plan = LabPlan(fabric, lab)
    names = list(plan.namespaces()) if switch == "linux" else [plan.netns(h) for h in plan.hosts]
    clash = sorted(set(names) & netns.existing())
    directory = lab_dir(lab)
    if directory.exists():
        raise LabError(
            f"lab {lab!r} exists already ({directory}); `tectl lab down --name {lab}` first"
        )
    if clash:  # not this lab's: another's (names can meet), or no lab's at all
        whose = next((f"lab {r.lab!r}'s" for r in labs() if clash[0] in r.namespaces),
                     "made by no lab")  # fmt: skip
        raise LabError(f"namespace {clash[0]} exists already, {whose}: lab {lab!r} cannot "
                       "be built under that name; choose another --name")  # fmt: skip
    # a kept lab (owner None) is owned by its builder until it is up: a build killed
    # half-way is an orphan that `reap` removes, not a lab kept until `down`
    owned = owner_of(os.getpid() if owner in (-1, None) else owner)
    pairs: list[tuple[str, str]] = []
    from sim.lab.underlay import Reach  # host pairs no cabled path joins: named, not waited for

    pairs = Reach.of(plan).unreachable_pairs()
    directory.mkdir(parents=True)
    record = LabRecord(lab, source, underlay, names, int(fabric.installed.sum()), owner=owned,
                       switch=switch, lldp=lldp, not_installed=int((~fabric.installed).sum()),
                       unreachable=len(pairs),
                       own_ports=plan.why_own_ports if fabric.wiring is not None else "",
                       unreachable_shown=[f"{a}>{b}" for a, b in pairs[:UNREACHABLE_SHOWN]])
    record.save()
    start = time.perf_counter()
    try:
        ip_batch([f"netns add {ns}" for ns in names])
        record.phases["namespaces"] = time.perf_counter() - start
        for ns in names:
            netns.write_sysctls(ns, SYSCTLS)
        record.phases["sysctls"] = time.perf_counter() - start
        if switch == "ovs":  # hosts' NICs into the bridges, hosts addressed, underlay
            from sim.lab import ovs

            ovs.build(plan, health if health is not None else LinkHealth.all_up(fabric))
            record.phases["switches"] = time.perf_counter() - start
            record.state = "up"
            record.owner = owned if owner is not None else None
            record.build_seconds = time.perf_counter() - start
            record.save()
            return record
        ip_batch(veth_lines(plan))
        record.phases["veth"] = time.perf_counter() - start
        for node, lines in port_lines(plan).items():
            ip_batch(lines, plan.netns(node))
        set_aliases(plan)
        record.phases["addresses"] = time.perf_counter() - start
        if underlay == "static":
            install_static(plan)
        else:
            from sim.lab import frr

            frr.start(plan, directory)
        record.phases["underlay"] = time.perf_counter() - start
        if lldp:
            from sim.lab import lldp as lldpd

            lldpd.start(plan)
            lldpd.wait_neighbours(plan)
            record.phases["lldp"] = time.perf_counter() - start
        from sim.lab import restorer

        record.restorer = restorer.start(lab, source, underlay)  # flapped ports get routes back
        record.save()
        record.phases["restorer"] = time.perf_counter() - start
    except BaseException:
        _remove(record)
        raise
    record.state = "up"
    record.owner = owned if owner is not None else None
    record.build_seconds = time.perf_counter() - start
    record.save()
    return record


def _remove(record: LabRecord) -> None:
    from sim.lab import restorer

    restorer.stop(record.lab, record.restorer)  # first: its sockets hold the namespaces
    if record.switch == "ovs":
        from sim.lab import ovs

        ovs.stop(record.lab)
    if record.underlay == "frr":
        from sim.lab import frr

        frr.stop(lab_dir(record.lab))
    if record.lldp:
        from sim.lab import lldp

        lldp.stop(record.lab)
    present = netns.existing()
    doomed = [ns for ns in record.namespaces if ns in present]
    if doomed:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(
            f"netns del {ns}\n" for ns in doomed), capture_output=True, text=True)  # fmt: skip
    shutil.rmtree(lab_dir(record.lab), ignore_errors=True)


def down(lab: str) -> LabRecord:
    """Remove exactly what `up` made for `lab`."""
    require_root()
    record = load_record(lab)
    _remove(record)
    left = sorted(set(record.namespaces) & netns.existing())
    if left:
        raise LabError(f"lab {lab!r}: could not remove {', '.join(left[:5])}")
    return record


@dataclass(frozen=True)
class LabStatus:
    lab: str
    fabric: str
    underlay: str
    state: str
    namespaces: int
    namespaces_present: int
    ports_up: int
    ports: int
    build_seconds: float
    switch: str = "linux"
    restorer: str = "none"  # running, gone, or none (labs of Open vSwitch bridges)
    daemons_down: tuple[str, ...] = ()  # Open vSwitch daemons not running (ovs labs)


def status(lab: str) -> LabStatus:
    """What the lab's record says and what the kernel still has of it."""
    record = load_record(lab)
    present = [ns for ns in record.namespaces if ns in netns.existing()]
    up_count = total = 0
    for ns in present:
        done = subprocess.run(["ip", "-n", ns, "-j", "link", "show"], capture_output=True,
                              text=True)  # fmt: skip
        if done.returncode == 0:
            for link in json.loads(done.stdout or "[]"):
                if link.get("ifname") == "lo":
                    continue
                total += 1
                up_count += "UP" in link.get("flags", []) and link.get("operstate") == "UP"
    restorer = "none" if record.restorer is None else (
        "running" if owner_alive(record.restorer) else "gone")  # fmt: skip
    down: tuple[str, ...] = ()
    if record.switch == "ovs":
        from controller.drivers.ovs_daemons import daemons_down, lab_rundir

        down = daemons_down(lab_rundir(lab))
    return LabStatus(record.lab, record.fabric, record.underlay, record.state,
                     len(record.namespaces), len(present), up_count, total,
                     record.build_seconds, record.switch, restorer, down)  # fmt: skip


def lab_path(lab: str) -> Path:
    return lab_dir(lab)
