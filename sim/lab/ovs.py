"""A lab whose switches are Open vSwitch bridges (`tectl lab up --switch ovs`).

Hosts are network namespaces, as in every lab (same names, NICs, addresses: the plan of
`controller.drivers.linux_plan`); the switches are the bridges of one Open vSwitch of the
lab's own (`controller.drivers.ovs_daemons`, run directory `<lab dir>/ovs`, userspace
`netdev` datapath): links between switches are patch-port pairs, and each host NIC is a
veth pair whose far end sits in ovs-vswitchd's namespace as the RTSW bridge's port. TE
entries go in through the `ovs` driver, as OpenFlow flows at priority 100/101.

The underlay is OpenFlow select groups at priority 10 and below, the same ECMP as the static
underlay (over the cables there: missing cables and absent hosts are routed around): per
destination host (or the whole host range towards the layer above), a group over the
links towards it on its shortest paths, hashed on the IP addresses and UDP ports, each
bucket weighted by its link's health (a degraded link gets a bucket weight of its fraction
x 100, a down link none) and watching its port (a bucket whose port is down is skipped). A
bucket towards a host rewrites the destination MAC to the NIC's; hosts reach their RTSW
through a permanent neighbour entry, so nothing answers ARP.

The lab's link health (`health.json` in the lab directory) is what `--fail` and `lab link`
set; `lab link LINK=down` stops both ports (OpenFlow port-mod: no-forward, no-receive) and
takes the link out of the groups, `=up` puts both back, a fraction re-weights the groups.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from controller.drivers import ovs_daemons
from controller.drivers.linux_plan import HOST_LOOPBACKS, LabPlan, lab_dir
from controller.errors import LabError
from controller.model.health import LinkHealth
from sim.lab.netns import ip_batch
from sim.lab.traffic import LabIO
from sim.lab.underlay import Reach, next_hop_sets, static_routes

GATEWAY_MAC = "02:fe:7e:00:00:01"  # what hosts send to; the bridges match on addresses only
PRIORITY_HOST, PRIORITY_RANGE = 10, 5
HASH = "selection_method=hash,fields(ip_src,ip_dst,udp_src,udp_dst)"
OPENFLOW = "OpenFlow15"  # select groups with a hash selection method
_PORT_LINE = re.compile(r"port\s+(\d+): rx pkts=\d+.*?tx pkts=(\d+)", re.S)


def rundir(lab: str) -> Path:
    return ovs_daemons.lab_rundir(lab)


def bridge_ports(plan: LabPlan, node: str) -> dict[int, int]:
    """Link id -> OpenFlow port of `node`'s bridge (slot + 1, as the `ovs` driver numbers)."""
    return {link: slot + 1 for slot, link in enumerate(plan.node_links[node])}


def _ofctl(lab: str, switch: str, bridges: dict[str, str], *args: str,
           stdin: str | None = None) -> str:  # fmt: skip
    target = f"unix:{rundir(lab) / (bridges[switch] + '.mgmt')}"
    command, rest = args[0], args[1:]
    done = subprocess.run(["ovs-ofctl", "-O", OPENFLOW, command, target, *rest], input=stdin,
                          capture_output=True, text=True, timeout=60,
                          env=ovs_daemons.environment(rundir(lab)))  # fmt: skip
    if done.returncode:
        raise LabError(f"ovs-ofctl {command} on {switch}: {done.stderr.strip()[:400]}")
    return done.stdout


def host_macs(plan: LabPlan) -> dict[int, str]:
    """Cabled access link id -> the MAC address of its host NIC."""
    out = {}
    for host in plan.hosts:
        shown = subprocess.run(["ip", "-n", plan.netns(host), "-j", "link", "show"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        by_name = {ln["ifname"]: ln["address"] for ln in json.loads(shown)}
        for link in plan.node_links[host]:
            out[link] = by_name[plan.port(host, link).ifname]
    return out


def _group(gid: int, links: Iterable[int], ports: dict[int, int], health: LinkHealth,
           macs: dict[int, str]) -> str:  # fmt: skip
    """A select group over `links` (weights by health; down links left out); a bucket
    towards a host NIC (a link in `macs`) rewrites the destination MAC to the NIC's."""
    buckets = []
    for i, link in enumerate(links):
        factor = float(health.factor[link])
        if factor <= 0:
            continue
        rewrite = f"mod_dl_dst:{macs[link]}," if link in macs else ""
        buckets.append(f"bucket=bucket_id:{i},weight:{max(1, round(factor * 100))},"
                       f"watch_port:{ports[link]},actions={rewrite}output:{ports[link]}")
    return f"group_id={gid},type=select,{HASH}" + "".join(f",{b}" for b in buckets)


def underlay(plan: LabPlan, health: LinkHealth,
             macs: dict[int, str]) -> dict[str, tuple[list[str], list[str]]]:  # fmt: skip
    """Switch -> (groups, flows) of its ECMP underlay, as `ovs-ofctl` lines: the static
    underlay's next hops (`sim.lab.underlay.Reach`: shortest paths over the cables there,
    so missing cables and absent hosts are routed around), one select group per next-hop
    set, a flow per host towards it, and one range flow for the set most hosts share when
    it only goes up. Group ids follow the cabling, not the health, so a link change
    rewrites groups in place."""
    reach = Reach.of(plan)
    every = str(HOST_LOOPBACKS)
    out: dict[str, tuple[list[str], list[str]]] = {}
    for switch in plan.switches:
        ports = bridge_ports(plan, switch)
        groups, flows = [], []
        sets, aggregate = next_hop_sets(plan, reach, switch)
        for gid, (links, members) in enumerate(sets, 1):
            groups.append(_group(gid, links, ports, health, macs))
            if gid - 1 == aggregate:
                flows.append(f"priority={PRIORITY_RANGE},ip,nw_dst={every},actions=group:{gid}")
                continue
            flows += [f"priority={PRIORITY_HOST},ip,nw_dst={plan.host_address(h)},"
                      f"actions=group:{gid}" for h in members]  # fmt: skip
        out[switch] = (groups, flows)
    return out


def save_health(lab: str, health: LinkHealth) -> None:
    factors = {str(link): float(health.factor[link])
               for link in range(health.factor.size) if health.factor[link] != 1.0}
    (lab_dir(lab) / "health.json").write_text(json.dumps(factors, sort_keys=True) + "\n")


def load_health(plan: LabPlan) -> LinkHealth:
    """The lab's link health as `--fail` and `lab link` set it."""
    try:
        factors = json.loads((lab_dir(plan.lab) / "health.json").read_text())
    except FileNotFoundError:
        factors = {}
    return LinkHealth.all_up(plan.fabric).with_factors({int(k): v for k, v in factors.items()})


def install_underlay(plan: LabPlan, health: LinkHealth, switches: Iterable[str] | None = None,
                     first: bool = False) -> None:  # fmt: skip
    """Write (or, not `first`, rewrite in place) the underlay of `switches` (all)."""
    bridges = ovs_daemons.switch_bridges(plan.fabric)
    lines = underlay(plan, health, host_macs(plan))
    for switch in sorted(switches if switches is not None else lines):
        groups, flows = lines[switch]
        if first:
            _ofctl(plan.lab, switch, bridges, "add-groups", "-", stdin="\n".join(groups) + "\n")
            _ofctl(plan.lab, switch, bridges, "add-flows", "-", stdin="\n".join(flows) + "\n")
        else:  # a link changed: the groups' buckets, in place
            for group in groups:
                _ofctl(plan.lab, switch, bridges, "mod-group", group)


def set_port(plan: LabPlan, link: int, up: bool) -> None:
    """Both ends of `link` passing packets or not: a bridge's port forwards and receives
    nothing (OpenFlow no-forward, no-receive: a patch port has no device to set down), a
    host's NIC is set down (`ip link`)."""
    bridges = ovs_daemons.switch_bridges(plan.fabric)
    for port in plan.ends(link):
        if port.node in bridges:
            number = str(bridge_ports(plan, port.node)[link])
            for mode in ("forward", "receive"):
                _ofctl(plan.lab, port.node, bridges, "mod-port", number,
                       mode if up else f"no-{mode}")  # fmt: skip
        else:
            ip_batch([f"link set dev {port.ifname} {'up' if up else 'down'}"],
                     plan.netns(port.node))


def build(plan: LabPlan, health: LinkHealth) -> None:
    """The switches of `plan` as the bridges of a new Open vSwitch, the hosts' NICs
    attached, the hosts addressed and routed, and the underlay written; the host
    namespaces must exist already."""
    access = {link: host for host in plan.hosts for link in plan.node_links[host]}

    def attach(instance: ovs_daemons.OvsInstance) -> dict[int, str]:
        pid = instance.vswitchd_pid()
        lines, names = [], {}
        for link, host in sorted(access.items()):
            names[link] = f"v{link}"
            lines.append(f"link add dev {plan.port(host, link).ifname} netns "
                         f"{plan.netns(host)} type veth peer name v{link} netns {pid}")
        ip_batch(lines)
        done = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-batch", "-"],
                              input="".join(f"link set dev {n} up\n" for n in names.values()),
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode:
            raise LabError(f"cannot raise the host ports in ovs-vswitchd's namespace: "
                           f"{done.stderr.strip()[:400]}")
        return names

    ovs_daemons.OvsInstance(rundir(plan.lab), plan.fabric, attach=attach)
    routes = static_routes(plan)
    for host in plan.hosts:
        h = plan.fabric.host_by_name(host)
        lines = ["link set dev lo up", f"addr add {plan.host_address(h)}/32 dev lo"]
        for link in plan.node_links[host]:
            port = plan.port(host, link)
            lines += [f"addr add {port.address}/31 dev {port.ifname}",
                      f"link set dev {port.ifname} up",
                      f"neigh replace {port.peer_address} lladdr {GATEWAY_MAC} dev "
                      f"{port.ifname} nud permanent"]  # fmt: skip
        ip_batch(lines + routes.get(host, []), plan.netns(host))
    save_health(plan.lab, health)
    install_underlay(plan, health, first=True)
    for link in health.down_links().tolist():
        if plan.fabric.installed[link]:  # a missing cable has no port to stop
            set_port(plan, int(link), up=False)


def stop(lab: str) -> None:
    """End the lab's Open vSwitch (from any process); idempotent."""
    ovs_daemons.stop_rundir(rundir(lab))


def tx_packets(plan: LabPlan, switch: str) -> dict[str, int]:
    """Port name (the plan's) -> packets the switch's bridge sent out of it."""
    bridges = ovs_daemons.switch_bridges(plan.fabric)
    names = {number: plan.port(switch, link).ifname
             for link, number in bridge_ports(plan, switch).items()}  # fmt: skip
    out = {}
    for number, tx in _PORT_LINE.findall(_ofctl(plan.lab, switch, bridges, "dump-ports")):
        if int(number) in names:
            out[names[int(number)]] = int(tx)
    return out


class OvsLabIO(LabIO):
    """Sockets in the hosts' namespaces; per-port counters from the bridges (which count a
    patch port's packets when the revalidators next pass, every 500 ms)."""

    counter_lag = 1.5

    def tx_packets(self, node: str) -> dict[str, int]:
        if node in self.plan.hosts:
            return super().tx_packets(node)
        return tx_packets(self.plan, node)
