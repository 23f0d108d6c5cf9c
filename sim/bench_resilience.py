"""Bench section `resilience`: the single-failure sweep (controller.solver.resilience) of
the meta-24k mix and of cluster-100k: what an element costs by kind, the wall time of a
stratified sample on 1 and 2 local workers and on a 2-node local Ray cluster, the memory of
a worker, and the full sweep's wall time projected from the measured per-element costs."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from controller.model.clos import PRESETS, build
from controller.model.fabric import AGG
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.solver.resilience import Sweep, SweepInputs
from controller.solver.solve import solve
from controller.solver.sweep_runners import run_local
from sim.bench_base import Config, Section, log
from sim.jobmix import random_jobs

# elements timed per group (fabric -> group -> count); groups: rack and aggregation links
# apart (an aggregation link is read by every cross-pod flow of two pods' walks)
SAMPLE = {
    "meta-24k": {"rack link": 120, "agg link": 12, "rtsw": 24, "ctsw": 3, "atsw": 3},
    "cluster-100k": {"rack link": 60, "agg link": 6, "rtsw": 12, "ctsw": 2, "atsw": 2},
}
QUICK = {"rack link": 20, "agg link": 2, "rtsw": 4, "ctsw": 1, "atsw": 1}
MACHINES = (1, 2, 8, 32, 128)  # projected on this many 2-core machines


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _groups(sweep: Sweep) -> dict[str, np.ndarray]:
    f, fab = sweep.failures, sweep.inputs.fabric
    first = f.links[f.start[:-1]]
    agg = (f.kind == 0) & (fab.link_kind[first] == AGG)
    return {"rack link": np.flatnonzero((f.kind == 0) & ~agg), "agg link": np.flatnonzero(agg),
            "rtsw": np.flatnonzero(f.kind == 1), "ctsw": np.flatnonzero(f.kind == 2),
            "atsw": np.flatnonzero(f.kind == 3)}  # fmt: skip


def _pick(ids: np.ndarray, count: int) -> np.ndarray:
    """`count` ids evenly spread over `ids` (deterministic)."""
    if ids.size <= count:
        return ids
    return ids[np.linspace(0, ids.size - 1, count).round().astype(np.int64)]


RAY_DRIVER = textwrap.dedent("""
    import pickle, sys, time
    from controller.solver.sweep_runners import run_ray
    inputs, sample = pickle.load(open(sys.argv[1], "rb"))
    result, stats = run_ray(inputs, address=sys.argv[2], elements=sample)
    pickle.dump((result, stats), open(sys.argv[3], "wb"))
""")


def _ray_run(inputs: SweepInputs, sample: np.ndarray, tmp: Path) -> tuple[object, object] | str:
    """The sample on a 2-node local Ray cluster (sim.ray_cluster), or why not."""
    import pickle

    from sim.ray_cluster import in_ns, local_cluster, usable

    why = usable()
    if why:
        return why
    src, out = tmp / "ray-in.pkl", tmp / "ray-out.pkl"
    with open(src, "wb") as fh:
        pickle.dump((inputs, sample), fh)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root, "RAY_DISABLE_USAGE_STATS": "1"}
    with local_cluster(nodes=2, cpus=1, stem="bray", object_store=2_000_000_000) as (ns, addr):
        done = in_ns(ns, [sys.executable, "-c", RAY_DRIVER, str(src), addr, str(out)], env=env,
                     timeout=7200)  # fmt: skip
    if done.returncode:
        return f"the Ray run failed: {done.stderr[-500:]}"
    with open(out, "rb") as fh:
        return pickle.load(fh)  # type: ignore[no-any-return]


def bench_resilience(cfg: Config) -> Iterator[Section]:
    import tempfile

    sec = Section("Resilience sweep: every single failure, fabric-te vs E-ECMP vs WCMP")
    sec.text(
        "The sweep of `tectl resilience` (controller/solver/resilience.py, docs/resilience.md) "
        "on the job mix `--jobs random --seed 1`, table budget 2,048, 16 QPs, certificate "
        "against E-ECMP over 4 seeds. A stratified sample of elements (evenly spread ids per "
        "group) is timed one by one in one process (s/element: mean and max), then the same "
        "sample is run on 1 and 2 local workers and on a 2-node local Ray cluster (one CPU "
        "per node, in a loopback-only namespace); the full sweep's wall time is projected "
        "as the worker build plus the sum over groups of (elements x mean s/element), divided "
        "by the workers and the parallel efficiency measured on 2 local workers. "
        "Figures from a shared 2-core machine (other jobs were running)."
    )  # fmt: skip
    sec.text("")
    rows_cost: list[list[object]] = []
    rows_run: list[list[object]] = []
    rows_proj: list[list[object]] = []
    for name in ("meta-24k", "cluster-100k"):
        fabric = build(PRESETS[name])
        health = LinkHealth.all_up(fabric)
        flows = jobs_flows(fabric, random_jobs(fabric, seed=1))
        t = time.perf_counter()
        res = solve(fabric, health, flows)
        t_solve = time.perf_counter() - t
        inputs = SweepInputs(fabric, health, res.assignment)
        rss0 = _rss_mb()
        t = time.perf_counter()
        sweep = Sweep(inputs)
        t_build = time.perf_counter() - t
        rss = _rss_mb() - rss0
        log(f"  resilience {name}: solved {t_solve:.1f} s, sweep built {t_build:.1f} s, "
            f"{rss:,.0f} MB")  # fmt: skip
        groups = _groups(sweep)
        want = QUICK if cfg.quick else SAMPLE[name]
        sample_parts, total = [], 0.0
        for group, ids in groups.items():
            pick = _pick(ids, want[group])
            times = []
            for i in pick.tolist():
                t = time.perf_counter()
                sweep.outcome(i)
                times.append(time.perf_counter() - t)
            mean = float(np.mean(times)) if times else 0.0
            total += mean * ids.size
            sample_parts.append(pick)
            rows_cost.append([name, group, int(ids.size), int(pick.size), round(mean, 4),
                              round(max(times, default=0.0), 3),
                              round(mean * ids.size, 1)])  # fmt: skip
            log(f"    {group}: {ids.size:,} elements, {mean:.4f} s each (sample {pick.size})")
        sample = np.sort(np.concatenate(sample_parts))
        full = sweep.header().names
        del sweep
        load1 = os.getloadavg()[0]
        one, s1 = run_local(inputs, workers=1, elements=sample)
        load2 = os.getloadavg()[0]
        two, s2 = run_local(inputs, workers=2, elements=sample)
        load3 = os.getloadavg()[0]
        same = all(a.tobytes() == b.tobytes() for a, b in zip(
            one.digest_arrays(), two.digest_arrays(), strict=True))  # fmt: skip
        run: list[list[object]] = [[name, "local, 1 worker", int(sample.size), round(s1.seconds, 1),
                round(s1.build_seconds, 1), f"{load1:.1f}-{load2:.1f}", "-"],
               [name, "local, 2 workers", int(sample.size), round(s2.seconds, 1),
                round(s2.build_seconds, 1), f"{load2:.1f}-{load3:.1f}",
                "same" if same else "DIFFERENT"]]  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            got = _ray_run(inputs, sample, Path(tmp))
        load4 = os.getloadavg()[0]
        if isinstance(got, str):
            run.append([name, "Ray, 2 nodes", int(sample.size), "-", "-", "-",
                        f"skipped: {got}"])  # fmt: skip
        else:
            r_res, r_stats = got
            r_same = all(a.tobytes() == b.tobytes() for a, b in zip(
                one.digest_arrays(), r_res.digest_arrays(),  # type: ignore[attr-defined]
                strict=True))  # fmt: skip
            run.append([name, "Ray, 2 nodes", int(sample.size),
                        round(r_stats.seconds, 1),  # type: ignore[attr-defined]
                        round(r_stats.build_seconds, 1),  # type: ignore[attr-defined]
                        f"{load3:.1f}-{load4:.1f}", "same" if r_same else "DIFFERENT"])  # fmt: skip
        rows_run += run
        work1 = s1.seconds - s1.build_seconds
        work2 = s2.seconds - s2.build_seconds
        eff = min(1.0, work1 / (2 * work2)) if work2 > 0 else 1.0
        for machines in MACHINES:
            workers = 2 * machines
            wall = t_build + total / (workers * eff)
            ideal = t_build + total / workers
            rows_proj.append([name, len(full), machines, workers, round(eff, 2),
                              round(wall / 60, 1), round(ideal / 60, 1)])  # fmt: skip
        rows_proj.append([name, len(full), "-", "(solve)", "-", "-", round(t_solve / 60, 2)])
        rows_cost.append([name, "worker memory (RSS of one Sweep)", "-", "-", "-", "-",
                          f"{rss:,.0f} MB"])  # fmt: skip
        rows_cost.append([name, "worker build (index, 8 hashed planes, TE plane)", "-", "-",
                          round(t_build, 1), "-", "-"])  # fmt: skip
    sec.text("Per-element cost by group (one process; `elements x s` is that group's share "
             "of a full sweep on one worker):")  # fmt: skip
    sec.text("")
    sec.table(["fabric", "group", "elements", "sampled", "s/element (mean)", "max s",
               "elements x s"], rows_cost)  # fmt: skip
    sec.text("")
    sec.text("The same sample on each runner (wall s includes each worker's build; load: the "
             "machine's 1-minute load average before and after, other helpers' work included; "
             "`result`: the arrays against 1 local worker, byte for byte):")  # fmt: skip
    sec.text("")
    sec.table(["fabric", "runner", "elements", "wall s", "build s", "load", "result"], rows_run)
    sec.text("")
    sec.text("The full sweep projected on N 2-core machines (2 workers each; minutes): with the "
             "parallel efficiency measured on 2 local workers here (work seconds on 1 worker / "
             "(2 x on 2), at most 1; on a machine shared with other work it is low), and with "
             "ideal scaling. Either way the floor is the worker build plus the slowest element "
             "(see `max s`).")  # fmt: skip
    sec.text("")
    sec.table(["fabric", "elements", "machines", "workers", "efficiency", "wall min",
               "wall min (ideal)"], rows_proj)  # fmt: skip
    yield sec
