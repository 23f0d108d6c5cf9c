"""FRR as the lab's underlay: zebra + bgpd in every namespace, eBGP over every link.

Each node gets its own run directory (pid files, zserv socket, vty sockets) owned by user
`frr`, one private AS number, a peer group with `remote-as external` over its /31 links,
`maximum-paths 64` with `multipath-relax` (ECMP over every equal-length path) and short
timers; hosts announce their loopback. Configuration goes in through vtysh once the daemons
are up.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from controller.drivers.linux_plan import LabPlan
from controller.drivers.pids import stop_pids
from controller.errors import LabError

FRR_BIN = Path("/usr/lib/frr")
ASN_BASE = 4_200_000_000
DAEMONS = ("zebra", "bgpd")


def installed() -> bool:
    return all(os.access(FRR_BIN / d, os.X_OK) for d in DAEMONS) and bool(shutil.which("vtysh"))


def require() -> None:
    if not installed():
        raise LabError("FRR is not installed (Debian package frr: zebra, bgpd, vtysh); "
                       "install it or use --underlay static")  # fmt: skip
    try:
        pwd.getpwnam("frr")
    except KeyError:
        raise LabError("FRR is installed but user 'frr' is missing") from None


def config(plan: LabPlan, node: str) -> str:
    """The vtysh configuration of one node."""
    nodes = plan.hosts + plan.switches
    asn = ASN_BASE + nodes.index(node)
    is_host = node in plan.hosts
    router_id = (plan.host_address(plan.fabric.host_by_name(node)) if is_host
                 else plan.switch_address(node))  # fmt: skip
    lines = [
        # Plain multipath routes, not kernel nexthop objects: after a port flap, FRR 8.4
        # left the kernel's shrunken nexthop groups without the restored path.
        "no zebra nexthop kernel enable",
        f"router bgp {asn}",
        f" bgp router-id {router_id}",
        " no bgp ebgp-requires-policy",
        " no bgp default ipv4-unicast",
        " bgp bestpath as-path multipath-relax",
        " timers bgp 3 9",
        " neighbor fabric peer-group",
        " neighbor fabric remote-as external",
        " neighbor fabric advertisement-interval 0",
        " neighbor fabric timers connect 1",
    ]
    for link in plan.node_links[node]:
        lines.append(f" neighbor {plan.port(node, link).peer_address} peer-group fabric")
    lines += [" address-family ipv4 unicast", "  neighbor fabric activate",
              "  maximum-paths 64"]  # fmt: skip
    if is_host:
        lines.append(f"  network {router_id}/32")
    lines += [" exit-address-family"]
    return "\n".join(lines) + "\n"


def _run_dir(directory: Path, node: str) -> Path:
    return directory / "frr" / node


def start(plan: LabPlan, directory: Path) -> None:
    """Start zebra and bgpd in every namespace of the lab and configure them."""
    user = pwd.getpwnam("frr")
    for node in plan.hosts + plan.switches:
        run = _run_dir(directory, node)
        run.mkdir(parents=True)
        (run / "empty.conf").write_text("")
        (run / "frr.conf").write_text(config(plan, node))
        for path in (run.parent, run, run / "empty.conf", run / "frr.conf"):
            os.chown(path, user.pw_uid, user.pw_gid)
    procs = []
    for daemon in DAEMONS:
        for node in plan.hosts + plan.switches:
            run = _run_dir(directory, node)
            cmd = ["ip", "netns", "exec", plan.netns(node), str(FRR_BIN / daemon), "-d",
                   "-F", "datacenter", "-i", str(run / f"{daemon}.pid"),
                   "-z", str(run / "zserv.api"), "--vty_socket", str(run), "-P", "0",
                   "-f", str(run / "empty.conf")]  # fmt: skip
            procs.append((node, daemon, subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                         stderr=subprocess.PIPE)))  # fmt: skip
        for node, name, proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise LabError(f"{name} in {node} did not start: {err.decode().strip()[:300]}")
        procs.clear()
    _configure(plan, directory)


def _configure(plan: LabPlan, directory: Path, parallel: int = 16) -> None:
    """vtysh -f in every namespace, `parallel` at a time, retrying while a daemon is not
    yet listening."""
    pending = list(plan.hosts + plan.switches)
    deadline = time.monotonic() + 30
    while pending:
        failed: list[tuple[str, str]] = []
        for at in range(0, len(pending), parallel):
            running = []
            for node in pending[at:at + parallel]:
                run = _run_dir(directory, node)
                cmd = ["vtysh", "--vty_socket", str(run), "-f", str(run / "frr.conf")]
                running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                       stderr=subprocess.STDOUT, text=True)))
            for node, proc in running:
                out, _ = proc.communicate()
                if proc.returncode != 0:
                    failed.append((node, out))
        if failed and time.monotonic() > deadline:
            node, out = failed[0]
            raise LabError(f"vtysh could not configure {node}: {out.strip()[:300]}")
        pending = [node for node, _ in failed]
        if pending:
            time.sleep(0.2)


def processes(directory: Path) -> list[int]:
    """Pids of the processes run on the lab's FRR directory: a daemon (`-i` its pid file,
    `-z`, `--vty_socket` there) or a vtysh configuring one, found by its command line, so
    that one still starting, its pid file not yet written, is found too."""
    mark = str(directory / "frr") + "/"
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(flag in ("-i", "-z", "--vty_socket") and value.startswith(mark)
               for flag, value in zip(args, args[1:], strict=False)):  # fmt: skip
            out.append(int(cmdline.parent.name))
    return out


def stop(directory: Path, rounds: int = 3) -> None:
    """Stop every process run on the lab's FRR directory (`processes`); again while any is
    left (a daemon forks once as it starts)."""
    for _ in range(rounds):
        pids = processes(directory)
        if not pids:
            return
        stop_pids(pids, grace=2.0)


def expected_paths(plan: LabPlan) -> dict[str, dict[str, int]]:
    """Switch -> {host address: next hops} of every BGP route the switch should hold once
    converged: each host it can reach over the installed links but is not cabled to, with
    as many next hops as there are shortest paths' first links (eBGP, one AS a node,
    `maximum-paths` and `multipath-relax`)."""
    from sim.lab.underlay import Reach

    reach = Reach.of(plan)
    out: dict[str, dict[str, int]] = {}
    for switch in plan.switches:
        _, on_path = reach.hops(switch)
        dist = reach.dist[reach.switch_index(switch)]
        counts = on_path.sum(axis=0)
        out[switch] = {plan.host_address(h): int(counts[h]) for h in reach.hosts.tolist()
                       if dist[h] > 1 and counts[h] > 0}  # fmt: skip
    return out


def converged(plan: LabPlan, expected: dict[str, dict[str, int]] | None = None) -> bool:
    """Every switch has a BGP route to every host it can reach (not cabled to it) over all
    the equal-cost next hops the installed links give (`expected_paths`)."""
    import json

    for switch, want in (expected if expected is not None else expected_paths(plan)).items():
        if not want:
            continue
        out = subprocess.run(["ip", "-n", plan.netns(switch), "-j", "route", "show", "proto",
                              "bgp"], capture_output=True, text=True).stdout  # fmt: skip
        routes = {r["dst"]: len(r.get("nexthops", [r])) for r in json.loads(out or "[]")}
        if any(routes.get(dst, 0) < hops for dst, hops in want.items()):
            return False
    return True


def wait_converged(plan: LabPlan, timeout: float = 60.0) -> float:
    """Seconds until `converged` (the routes that can exist: host pairs no cabled path
    joins are not waited for); LabError after `timeout`."""
    expected = expected_paths(plan)
    start = time.monotonic()
    while not converged(plan, expected):
        if time.monotonic() - start > timeout:
            raise LabError(f"FRR underlay of lab {plan.lab} not converged in {timeout:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - start
