"""lldpd in every namespace of a lab (`tectl lab up --lldp`), so that the lab can be
discovered as a real cluster is (`tectl fabric discover --lab NAME`).

One daemon per namespace, hosts and switches alike, each with its own control socket, pid
file and configuration under `linux_plan.lldp_dir(lab)`: system name = the node's fabric
name, a 1 s transmit interval, the port id = the interface name (`portidsubtype ifname`),
and honest capabilities (hosts a Station, switches Bridge and Router: every lab namespace
forwards, and lldpd in its chroot cannot see that anyway). They are stopped as every lldpd
running in the lab's own namespaces (found there, so one whose pid file is not yet written
too), and only those.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from controller.drivers.linux_plan import LabPlan, lldp_dir
from controller.drivers.netns import NETNS_DIR
from controller.drivers.pids import stop_pids
from controller.errors import FabricError, LabError
from controller.formats.lldp import read_table

STOP_GRACE = 2.0  # seconds after SIGTERM before SIGKILL


def missing() -> str | None:
    """Why lldpd cannot run here, or None."""
    if not (shutil.which("lldpd") and shutil.which("lldpcli")):
        return "lldpd is not installed (Debian package lldpd: lldpd, lldpcli)"
    return None


def config(plan: LabPlan, node: str) -> str:
    """The lldpcli commands lldpd runs at start (its -O file) for one node."""
    capabilities = "station" if node in plan.hosts else "bridge,router"
    return "\n".join([
        f"configure system hostname {node}",
        f"configure system capabilities enabled {capabilities}",
        "configure lldp tx-interval 1",
        "configure lldp portidsubtype ifname",
    ]) + "\n"  # fmt: skip


def socket(lab: str, node: str) -> Path:
    return lldp_dir(lab) / f"{node}.sock"


def start(plan: LabPlan) -> None:
    """Start lldpd in every namespace of the lab; LabError naming the first that failed."""
    reason = missing()
    if reason:
        raise LabError(f"--lldp: {reason}")
    directory = lldp_dir(plan.lab)
    directory.mkdir(parents=True)
    procs = []
    for node in plan.hosts + plan.switches:
        conf = directory / f"{node}.conf"
        conf.write_text(config(plan, node))
        cmd = ["ip", "netns", "exec", plan.netns(node), "lldpd", "-u", str(socket(plan.lab, node)),
               "-p", str(directory / f"{node}.pid"), "-O", str(conf)]  # fmt: skip
        procs.append((node, subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE)))  # fmt: skip
    failed = []
    for node, proc in procs:  # lldpd returns once it has daemonized
        _, err = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"{node}: {err.decode().strip()[:300]}")
    if failed:
        raise LabError(f"lldpd did not start in {len(failed)} namespaces: {failed[0]}")


def table(lab: str, node: str, details: bool = True) -> str:
    """lldpcli's json0 neighbour table of one node (LabError when it cannot be read)."""
    cmd = ["lldpcli", "-u", str(socket(lab, node)), "-f", "json0", "show", "neighbors"]
    done = subprocess.run(cmd + (["details"] if details else []), capture_output=True,
                          text=True, timeout=10)  # fmt: skip
    if done.returncode != 0:
        raise LabError(f"lldpcli for {node} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def expected(plan: LabPlan, node: str) -> set[tuple[str, str, str]]:
    """(own port, peer, peer port) of every link of `node`, as the lab's plan names them."""
    out = set()
    for link in plan.node_links[node]:
        lower, upper = plan.ends(link)
        mine, far = (lower, upper) if lower.node == node else (upper, lower)
        out.add((mine.ifname, far.node, far.ifname))
    return out


def heard(plan: LabPlan, node: str) -> set[tuple[str, str, str]]:
    """(own port, peer, peer port) of every neighbour `node`'s lldpd hears now."""
    try:
        records = read_table(node, table(plan.lab, node, details=False))
    except (LabError, FabricError, subprocess.TimeoutExpired):
        return set()
    return {(n.port, n.peer, n.peer_port) for n in records}


def wait_neighbours(plan: LabPlan, timeout: float = 30.0) -> float:
    """Seconds until every node hears exactly its planned neighbours; LabError naming the
    nodes still short after `timeout`."""
    start = time.monotonic()
    pending = list(plan.hosts + plan.switches)
    while True:
        pending = [n for n in pending if heard(plan, n) != expected(plan, n)]
        if not pending:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise LabError(f"lab {plan.lab}: lldpd in {len(pending)} namespaces did not hear "
                           f"all their neighbours in {timeout:g} s: {', '.join(pending[:5])}")
        time.sleep(0.2)


def stop(lab: str, rounds: int = 3) -> None:
    """Stop every lldpd running in a namespace of the lab's LLDP nodes (those with a
    NODE.conf, which `start` writes before it launches any daemon: namespace LAB-NODE, as
    LabPlan names it), found by namespace rather than pid file, so that one still starting,
    its pid file not yet written, is stopped too; again while any is left (lldpd forks as it
    starts)."""
    directory = lldp_dir(lab)
    nets = set()
    for conf in sorted(directory.glob("*.conf")) if directory.exists() else []:
        try:
            nets.add(os.stat(NETNS_DIR / f"{lab}-{conf.stem}").st_ino)
        except OSError:
            continue
    for _ in range(rounds):
        pids = _running_in(nets) if nets else []
        if not pids:
            return
        stop_pids(pids, grace=STOP_GRACE)


def _running_in(nets: set[int]) -> list[int]:
    """The lldpd processes whose network namespace is one of `nets` (inode numbers)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() == "lldpd" and (
                os.stat(proc / "ns" / "net").st_ino in nets
            ):
                out.append(int(proc.name))
        except OSError:
            continue
    return out
