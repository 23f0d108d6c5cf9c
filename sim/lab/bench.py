"""Lab benchmarks (root only): build and install rates, FRR convergence, memory, and the
whole failure loop (lab link down -> controller repair -> kernel routes) with real packets.
Run through `python -m sim.bench --only lab-scale` / `--only lab-failure`."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from controller.drivers.linux import LinuxDriver
from controller.drivers.linux_plan import LabPlan
from controller.model.clos import PRESETS, build
from controller.routes.plan import Add
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


def build_figures(preset: str, underlay: str) -> BuildFigures:
    fabric = build(PRESETS[preset])
    name = unique_name("bb")
    before = _used_kib()
    start = time.perf_counter()
    record = lab.up(fabric, name, preset, underlay=underlay)
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
    return BuildFigures(preset, underlay, len(record.namespaces), fabric.num_links, up_s,
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


def failure_loop(preset: str, underlay: str, failures: int = 20, seed: int = 1) -> FailureFigures:
    """Fail `failures` used RTSW uplinks one at a time while their flows stream; time from
    `lab link down` to the controller's repaired routes read back from the kernel."""
    from controller.formats.placement import load_jobs
    from controller.service.engine import Engine
    from sim.lab.links import set_link
    from sim.lab.traffic import LabIO, Streams, verify

    fabric = build(PRESETS[preset])
    name = unique_name("bf")
    lab.up(fabric, name, preset, underlay=underlay)
    plan = LabPlan(fabric, name)
    try:
        if underlay == "frr":
            from sim.lab.frr import wait_converged

            wait_converged(plan, timeout=180)
        driver = LinuxDriver(fabric=fabric, lab=name)
        engine = Engine(fabric, driver, driver_name="linux", debounce=0.0)
        for job in load_jobs(fabric, "random", seed=seed, fill=1.0):
            engine.put_job(job, 0)
        engine.wait_idle(120)
        rng = np.random.default_rng(seed)
        io = LabIO(plan)
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
