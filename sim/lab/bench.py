"""Lab benchmarks (root only): build and install rates, FRR convergence, memory, and the
whole failure loop (lab link down -> controller repair -> kernel routes) with real packets.
Run through `python -m sim.bench --only lab-scale` / `--only lab-install` /
`--only lab-failure`."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from controller.drivers.linux import LinuxDriver
from controller.drivers.linux_plan import LabPlan
from controller.model.clos import PRESETS, build
from controller.routes.checks import switch_ports
from controller.routes.plan import Add, Replace
from controller.routes.tables import Entry, RouteSet
from sim.lab import build as lab
from sim.lab.shared import unique_name


def _used_kib() -> int:
    info = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return info["MemTotal"] - info["MemAvailable"]


@dataclass
class BuildFigures:
    fabric: str
    underlay: str
    namespaces: int
    links: int
    up_s: float
    converge_s: float
    down_s: float
    mem_mib: float


# `small` with cables missing (docs/inventory.md): 4 RTSW-CTSW cables, one host of a rack
# that keeps its other one, and a rack's last host
SMALL_GAPS = ("small-gaps", ("rtsw-p0-r0:ctsw-p0-c1", "rtsw-p0-r3:ctsw-p0-c5",
                             "rtsw-p1-r2:ctsw-p1-c0", "rtsw-p1-r7:ctsw-p1-c7"),
              ("host-p0-r5-h1", "host-p1-r1-h1"))  # fmt: skip


def small_gaps_file(directory: Path) -> str:
    """Write the SMALL_GAPS cable list into `directory`; its path (a lab's fabric file)."""
    import json

    from sim.lab.gaps import gapped_cable_list

    name, missing, absent = SMALL_GAPS
    path = directory / f"{name}.json"
    path.write_text(json.dumps(gapped_cable_list(build(PRESETS["small"]), name, missing,
                                                 absent)))  # fmt: skip
    return str(path)


def build_figures(ref: str, underlay: str) -> BuildFigures:
    """Build the fabric `ref` (a preset or a fabric file) as a lab, wait for FRR, remove it."""
    from controller.formats.fabric_file import load_fabric

    fabric = load_fabric(ref)
    name = unique_name("bb")
    before = _used_kib()
    start = time.perf_counter()
    record = lab.up(fabric, name, ref, underlay=underlay)
    up_s = time.perf_counter() - start
    converge = 0.0
    try:
        if underlay == "frr":
            from sim.lab.frr import wait_converged

            converge = wait_converged(LabPlan(fabric, name), timeout=180)
        mem = (_used_kib() - before) / 1024
    finally:
        t0 = time.perf_counter()
        lab.down(name)
        down_s = time.perf_counter() - t0
    return BuildFigures(fabric.name, underlay, len(record.namespaces), record.links, up_s,
                        converge, down_s, mem)  # fmt: skip


def install_rate(preset: str = "small", per_switch: int = 500) -> tuple[int, float, float]:
    """(entries, seconds to install, seconds to read back) through the driver: every RTSW
    gets `per_switch` entries spread over its NIC ports, destinations and uplinks."""
    fabric = build(PRESETS[preset])
    name = unique_name("bi")
    lab.up(fabric, name, preset, underlay="static")
    try:
        driver = LinuxDriver(fabric=fabric, lab=name)
        batches = {}
        for rtsw in range(fabric.num_rtsws):
            switch = fabric.rtsw_name(rtsw)
            nics = [rtsw * fabric.hosts_per_rack * fabric.nics_per_host + i
                    for i in range(fabric.hosts_per_rack * fabric.nics_per_host)]  # fmt: skip
            ops = []
            for i in range(per_switch):
                nic = nics[i % len(nics)]
                dst = (i // len(nics)) % fabric.num_hosts
                up = fabric.rack_link(rtsw, i % fabric.ctsws_per_pod)
                qp = -1 if i < per_switch // 2 else i % 16
                ops.append(Add(Entry(switch, int(nic), dst, int(up), qp=qp)))
            batches[switch] = ops
        start = time.perf_counter()
        for switch, ops in batches.items():
            driver.apply(switch, ops)
        install_s = time.perf_counter() - start
        start = time.perf_counter()
        total = sum(len(driver.read(s)) for s in batches)
        read_s = time.perf_counter() - start
        driver.clear()
        driver.close()
    finally:
        lab.down(name)
    return total, install_s, read_s


@dataclass
class InstallStep:
    step: str
    entries: int
    seconds: float
    result: str


def install_steps(preset: str = "small", seed: int = 3, singles: int = 200) -> list[InstallStep]:
    """The linux driver on a solved job mix of `preset` (seed 3 on small: 8,612 entries on
    32 switches): installed as `lab verify` does (read back, push, read back), read back,
    moved, re-pushed unchanged, cleared; then `install_rate`'s 16 x 1,000 synthetic
    entries; then one-entry batches on the fullest switch (the controller's repairs)."""
    from controller.drivers.push import push, read_back
    from controller.routes.plan import diff
    from controller.routes.tables import Entry
    from sim.lab.cli import install, solved

    fabric = build(PRESETS[preset])
    _, routes = solved(fabric, seed, 1.0)
    name = unique_name("bn")
    lab.up(fabric, name, preset, underlay="static")
    out = []
    try:
        driver = LinuxDriver(fabric=fabric, lab=name)
        start = time.perf_counter()
        install(driver, fabric, routes)
        out.append(InstallStep(f"install job mix seed {seed} (read, push, read back)",
                               len(routes), time.perf_counter() - start,
                               f"{len(routes.switches())} switches"))  # fmt: skip
        start = time.perf_counter()
        held, _ = read_back(driver, driver.switches())
        out.append(InstallStep("read every switch back", len(held), time.perf_counter() - start,
                               "same as pushed" if held == routes else "DIFFERENT"))  # fmt: skip
        moved = []  # every RTSW entry to the next uplink of its rack
        for switch in routes.switches():
            if fabric.switch_kind(switch) != "rtsw":
                continue
            rtsw = fabric.node_by_name(switch) - fabric.node_id("rtsw", 0)
            ups = [int(fabric.rack_link(rtsw, c)) for c in range(fabric.ctsws_per_pod)]
            for e in routes.table(switch):
                hop = ups[(ups.index(e.next_hop) + 1) % len(ups)]  # RTSW: always an uplink
                moved.append(Entry(switch, e.in_port, e.dst_host, hop, e.owner, e.qp))
        others = [e for sw in routes.switches() if fabric.switch_kind(sw) != "rtsw"
                  for e in routes.table(sw)]  # fmt: skip
        target = type(routes).from_entries(moved + others)
        plan = diff(held, target, fabric)
        start = time.perf_counter()
        report = push(driver, plan)
        out.append(InstallStep("move every RTSW entry to another uplink", len(plan),
                               time.perf_counter() - start, report.summary()))  # fmt: skip
        start = time.perf_counter()
        now, _ = read_back(driver, driver.switches())
        report = push(driver, diff(now, target, fabric))
        out.append(InstallStep("the same routes again (read, diff, push)", len(target),
                               time.perf_counter() - start, report.summary()))  # fmt: skip
        start = time.perf_counter()
        driver.clear()
        out.append(InstallStep("clear every switch", len(target), time.perf_counter() - start,
                               "0 left" if not read_back(driver, driver.switches())[0]
                               else "entries left"))  # fmt: skip
        fullest = max(routes.switches(), key=lambda sw: len(routes.table(sw)))
        install(driver, fabric, RouteSet({fullest: routes.table(fullest)}))
        table = list(routes.table(fullest))
        ports = sorted(switch_ports(fabric)[fullest])
        ms = []
        for i in range(singles):  # each time another entry to the port after its next hop
            e = table[i % len(table)]
            hops = [h for h in ports if h != e.in_port]
            hop = hops[(hops.index(e.next_hop) + 1) % len(hops)]
            op = Replace(e, Entry(fullest, e.in_port, e.dst_host, hop, e.owner, e.qp))
            t0 = time.perf_counter()
            driver.apply(fullest, [op])
            ms.append((time.perf_counter() - t0) * 1000)
            table[i % len(table)] = op.entry
        ms.sort()
        out.append(InstallStep(f"one-entry batches on {fullest} ({len(table)} entries)",
                               singles, sum(ms) / 1000,
                               f"median {statistics.median(ms):.2f} ms, "
                               f"p99 {ms[int(0.99 * (len(ms) - 1))]:.2f} ms"))  # fmt: skip
        driver.clear()
        driver.close()
    finally:
        lab.down(name)
    total, install_s, read_s = install_rate(preset, per_switch=1000)
    out.append(InstallStep("install_rate: 1,000 entries on each RTSW", total, install_s,
                           f"read back in {read_s:.2f} s"))  # fmt: skip
    return out


def write_methods(routes: int = 8000, repeats: int = 3) -> list[tuple[str, int, float]]:
    """(method, routes, median routes/s): TE-shaped /32 routes into one table of a scratch
    namespace, by bulk netlink (what the driver does), `ip -batch` (one process per batch)
    and pyroute2 (a request per route; a quarter as many routes, it is slow)."""
    import subprocess

    from controller.drivers import linux_netlink as nl

    ns = unique_name("bm")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    rates: dict[str, list[float]] = {"bulk netlink": [], "ip -batch": [], "pyroute2": []}
    counts = {"bulk netlink": routes, "ip -batch": routes, "pyroute2": routes // 4}
    try:
        for cmd in (["link", "add", "p0", "type", "veth", "peer", "name", "q0"],
                    ["addr", "add", "10.128.0.0/31", "dev", "p0"],
                    ["link", "set", "p0", "up"], ["link", "set", "q0", "up"]):  # fmt: skip
            subprocess.run(["ip", "-n", ns, *cmd], check=True)
        sock = nl.RtnlSocket(ns)
        from pyroute2 import IPRoute

        ipr = IPRoute(netns=ns, flags=0)
        oif = {link.name: link.ifindex for link in sock.links()}["p0"]
        for _ in range(repeats):
            for table, method in enumerate(rates, 1000001):
                n = counts[method]
                start = time.perf_counter()
                if method == "bulk netlink":
                    refused = sock.send([nl.replace(table, 0x0A010000 + i, 0x0A800001, oif, 1,
                                                    84) for i in range(n)])  # fmt: skip
                    assert not refused, refused[:1]
                elif method == "ip -batch":
                    lines = "".join(f"route replace 10.1.{i >> 8}.{i & 255}/32 via 10.128.0.1 "
                                    f"dev p0 table {table} proto 84 realm 1\n" for i in range(n))
                    subprocess.run(["ip", "-n", ns, "-batch", "-"], input=lines, text=True,
                                   check=True)  # fmt: skip
                else:
                    for i in range(n):
                        ipr.route("replace", dst=f"10.1.{i >> 8}.{i & 255}/32", table=table,
                                  proto=84, gateway="10.128.0.1", oif=oif, flow=1)  # fmt: skip
                rates[method].append(n / (time.perf_counter() - start))
                subprocess.run(["ip", "-n", ns, "route", "flush", "table", str(table)],
                               check=True)  # fmt: skip
        ipr.close()
        sock.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)
    return [(m, counts[m], statistics.median(r)) for m, r in rates.items()]


@dataclass
class FailureFigures:
    fabric: str
    underlay: str
    failures: int
    repair_median_ms: float
    repair_p99_ms: float
    sent: int
    lost: int
    lost_per_failure_max: int
    verified: str


def failure_loop(preset: str, underlay: str, failures: int = 20, seed: int = 1,
                 switch: str = "linux") -> FailureFigures:  # fmt: skip
    """Fail `failures` used RTSW uplinks one at a time while their flows stream; time from
    `lab link down` to the controller's repaired routes read back from the switches
    (`switch`: the kernels of namespaces, or Open vSwitch bridges)."""
    from controller.formats.placement import load_jobs
    from controller.service.engine import Engine
    from sim.lab.cli import lab_driver, lab_io
    from sim.lab.links import set_link
    from sim.lab.traffic import Streams, verify

    fabric = build(PRESETS[preset])
    name = unique_name("bf")
    lab.up(fabric, name, preset, underlay=underlay, switch=switch)
    plan = LabPlan(fabric, name)
    try:
        if underlay == "frr":
            from sim.lab.frr import wait_converged

            wait_converged(plan, timeout=180)
        driver = lab_driver(fabric, name)
        engine = Engine(fabric, driver, driver_name=driver.name, debounce=0.0)
        for job in load_jobs(fabric, "random", seed=seed, fill=1.0):
            engine.put_job(job, 0)
        engine.wait_idle(120)
        rng = np.random.default_rng(seed)
        io = lab_io(fabric, name)
        times, sent, lost, worst, bad = [], 0, 0, 0, 0
        for _ in range(failures):
            res = engine.last_result
            assert res is not None
            arcs = res.assignment.arcs(fabric)
            used = np.unique(arcs[:, 1][arcs[:, 1] >= 0] // 2)  # RTSW uplinks in use now
            link = int(rng.choice(used[fabric.link_kind[used] == 1]))
            rows = np.flatnonzero((arcs // 2 == link).any(axis=1)).tolist()
            streams = Streams(io, res.assignment, rows, interval=0.002).start()
            time.sleep(0.2)
            version = engine.snapshot()[0]
            start = time.perf_counter()
            set_link(plan, link, "down")
            engine.report_links({link: 0.0})
            deadline = start + 30
            while engine.snapshot()[0] == version and time.perf_counter() < deadline:
                time.sleep(0.0005)
            if engine.snapshot()[0] == version:
                raise RuntimeError(f"no repair pushed for {fabric.link_name(link)} in 30 s "
                                   f"({engine.last_error})")
            times.append(time.perf_counter() - start)
            time.sleep(0.2)
            report = streams.stop()
            sent += report.sent
            lost += report.lost
            worst = max(worst, report.lost)
            now = engine.last_result
            assert now is not None
            check = verify(io, now.assignment, rows, packets=5)
            bad += check.checked - check.matched
            set_link(plan, link, "up")
            engine.report_links({link: 1.0})
            engine.wait_idle(120)
            if underlay == "frr":  # sessions over the restored link are back before the next
                from sim.lab.frr import wait_converged

                wait_converged(plan, timeout=60)
        io.close()
        engine.close()
        driver.close()
    finally:
        lab.down(name)
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(np.ceil(0.99 * len(ms))) - 1)]
    return FailureFigures(preset, underlay, len(ms), statistics.median(ms), p99, sent, lost,
                          worst, "all moved flows on their new path" if bad == 0
                          else f"{bad} flow checks off their new path")  # fmt: skip


@dataclass
class UpdateFigures:
    update: int
    flows_moved: int
    ops: int
    sent: int
    lost: int


def hitless_updates(preset: str = "small", updates: int = 6,
                    seed: int = 1) -> list[UpdateFigures]:  # fmt: skip
    """Re-solves that move flows (each time another used uplink is taken out of the
    solver's input, the previous one back in), each pushed while every routed flow
    streams; packets sent/lost per update."""
    from controller.drivers.push import push, read_back
    from controller.formats.placement import load_jobs
    from controller.model.assignment import moved_pairs
    from controller.model.health import LinkHealth
    from controller.model.jobs import jobs_flows
    from controller.routes.plan import plan_update
    from controller.solver.solve import SolveOptions, solve
    from sim.lab.traffic import LabIO, Streams

    fabric = build(PRESETS[preset])
    name = unique_name("bh")
    lab.up(fabric, name, preset, underlay="static")
    out = []
    try:
        driver = LinuxDriver(fabric=fabric, lab=name)
        flows = jobs_flows(fabric, load_jobs(fabric, "random", seed=seed, fill=1.0))
        opts = SolveOptions(qps=1)
        healthy = LinkHealth.all_up(fabric)
        current = solve(fabric, healthy, flows, options=opts).assignment
        plan, _ = plan_update(fabric, RouteSet(), current)
        push(driver, plan)
        io = LabIO(LabPlan(fabric, name))
        rng = np.random.default_rng(seed)
        rows = np.flatnonzero(current.routed).tolist()
        for update in range(updates):
            arcs = current.arcs(fabric)
            used = np.unique(arcs[:, 1][arcs[:, 1] >= 0] // 2)
            link = int(rng.choice(used[fabric.link_kind[used] == 1]))
            health = healthy.with_factors({link: 0.0})
            nxt = solve(fabric, health, flows, previous=current, options=opts).assignment
            installed, _ = read_back(driver, driver.switches())
            plan, _ = plan_update(fabric, installed, nxt)
            streams = Streams(io, current, rows, interval=0.002).start()
            time.sleep(0.2)
            report = push(driver, plan)
            time.sleep(0.2)
            stream = streams.stop()
            assert report.ok, report.summary()
            out.append(UpdateFigures(update, int(moved_pairs(current, nxt).size), len(plan),
                                     stream.sent, stream.lost))  # fmt: skip
            current = nxt
        io.close()
        driver.close()
    finally:
        lab.down(name)
    return out
