"""Changing a lab link for real: down (both ends admin-down, which also makes the kernel drop
every route through them), up (and the static underlay put back), degrade (a `tc` rate
limit on both ends). In a lab of Open vSwitch bridges (`sim.lab.ovs`): the bridge ports
down or up, and a degraded link's weight in the underlay's select groups."""

from __future__ import annotations

import subprocess

import numpy as np

from controller.drivers.linux_plan import LabPlan
from controller.errors import FabricError, LabError
from controller.model.health import LinkHealth
from sim.lab.build import install_static, load_record


def _ip(ns: str, *args: str) -> None:
    done = subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise LabError(f"ip -n {ns} {' '.join(args)}: {done.stderr.strip()}")


def _tc(ns: str, *args: str, missing_ok: bool = False) -> None:
    done = subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0 and not missing_ok:
        raise LabError(f"tc {' '.join(args)} in {ns}: {done.stderr.strip()}")


def set_link(plan: LabPlan, link: int, state: str, rate: str = "1gbit",
             fraction: float | None = None) -> None:  # fmt: skip
    """state: down, up or degrade (to `rate`; on Open vSwitch, to weight `fraction`); a
    link degraded is up at that rate, a down one brought back (LINK=0.5 is up at half, as
    the controller reads it); a link not installed (no cable, so no ports in the lab) is
    refused, naming it."""
    try:
        plan.fabric.check_installed([link])
    except FabricError as err:
        raise LabError(f"lab {plan.lab}: {err}") from None
    record = load_record(plan.lab)
    if record.switch == "ovs":
        _set_ovs_link(plan, link, state, fraction)
        return
    ends = plan.ends(link)
    if state == "down":
        for port in ends:
            _ip(plan.netns(port.node), "link", "set", "dev", port.ifname, "down")
    elif state == "up":
        for port in ends:
            _tc(plan.netns(port.node), "qdisc", "del", "dev", port.ifname, "root",
                missing_ok=True)  # no rate limit to remove is fine
            _ip(plan.netns(port.node), "link", "set", "dev", port.ifname, "up")
        if record.underlay == "static":
            install_static(plan, [port.node for port in ends])
    elif state == "degrade":
        for port in ends:
            _tc(plan.netns(port.node), "qdisc", "replace", "dev", port.ifname, "root", "tbf",
                "rate", rate, "burst", "64kb", "latency", "50ms")  # fmt: skip
            _ip(plan.netns(port.node), "link", "set", "dev", port.ifname, "up")
        if record.underlay == "static":
            install_static(plan, [port.node for port in ends])
    else:
        raise LabError(f"unknown link state {state!r}: down, up or degrade")


def _set_ovs_link(plan: LabPlan, link: int, state: str, fraction: float | None) -> None:
    from sim.lab import ovs

    if state not in ("down", "up", "degrade"):
        raise LabError(f"unknown link state {state!r}: down, up or degrade")
    factor = {"down": 0.0, "up": 1.0}.get(state, 0.5 if fraction is None else fraction)
    health = ovs.load_health(plan).with_factors({link: factor})
    ovs.save_health(plan.lab, health)
    if state in ("up", "degrade"):
        ovs.set_port(plan, link, up=True)
    ovs.install_underlay(plan, health, [p.node for p in plan.ends(link)
                                        if p.node not in plan.hosts])  # fmt: skip
    if state == "down":
        ovs.set_port(plan, link, up=False)


def lab_health(plan: LabPlan) -> LinkHealth:
    """Link health as the lab's kernels see it: a link whose either end is not up is down
    (degradations are not read back); in a lab of Open vSwitch bridges, as `--fail` and
    `lab link` set it."""
    from pyroute2 import IPRoute

    from sim.lab import netns

    if load_record(plan.lab).switch == "ovs":
        from sim.lab import ovs

        return ovs.load_health(plan)

    up: dict[str, set[str]] = {}
    for node in plan.node_links:
        with netns.entered(plan.netns(node)):
            ipr = IPRoute()
        try:
            up[node] = {ln.get_attr("IFLA_IFNAME") for ln in ipr.get_links()
                        if ln.get_attr("IFLA_OPERSTATE") == "UP"}  # fmt: skip
        finally:
            ipr.close()
    down = {}
    for link in np.flatnonzero(plan.fabric.installed).tolist():  # the rest: factor 0 anyway
        if any(port.ifname not in up[port.node] for port in plan.ends(link)):
            down[link] = 0.0
    return LinkHealth.all_up(plan.fabric).with_factors(down)
