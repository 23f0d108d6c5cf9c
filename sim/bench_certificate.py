"""Bench section `certificate`: the promise on seeded random failure scenarios.

Scenario s on a fabric: the seeded job mix (sim.jobmix, seed s); in every pod 1-6 random
RTSW-CTSW links down and 0-3 random switch-to-switch links (any tier) degraded to
0.1-0.9; with probability 0.2 one random CTSW drained. TE is solved as `tectl solve` solves
(certified against E-ECMP, 16 QPs, K = 4 hash seeds, compared with WCMP, whose values are
floors the solve seeks: controller.solver.solve step 9). Every job's TE bus bandwidth (mean
over the 4 seeds where rows ride the defaults) is compared with each rival's: E-ECMP and
WCMP as the certificate defines them (mean over the same seeds), ECMP (mean over them),
pinning and oblivious spray (deterministic); adaptive spray is the fractional optimum's
ceiling min(1, 1 / LP optimum) for the worst job. Where the fabric runs WCMP, the promise is
against WCMP: the first scenarios of each fabric (`WCMP_SCENARIOS`) are solved a second time
certified against WCMP, their TE carried with WCMP as the fabric's hashing, and compared
with WCMP's. The `parallel` row is scenario s on a fabric of its own with 2-3 cables from
each RTSW to each CTSW (`parallel_scenario`).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth, random_failures
from controller.model.jobs import Job, jobs_flows
from controller.solver.certificate import CertifyOptions
from controller.solver.commodities import commodities
from controller.solver.greedy import warm_up
from controller.solver.job_objective import compare, objective_vector
from controller.solver.lp import solve_lp
from controller.solver.solve import SolveOptions, SolveResult, solve
from sim.bench_base import Section, log
from sim.compare import baseline, oblivious_spray, routed
from sim.jobmix import random_jobs

SEEDS = range(1, 5)  # the certificate's default K = 4 hash seeds
RIVALS = ("eecmp", "wcmp", "ecmp", "pinning", "spray")
# not a preset: scenario s is on a fabric of its own (parallel_fabric), as an operator's lab
# or a small cluster is cabled, with 2-3 cables from each RTSW to each CTSW
PARALLEL = "parallel"
# scenarios per fabric (quick: a tenth); `Config.scenarios` caps them (a meta-24k scenario
# takes ~9 s on one core: the rivals are simulated in full, four seeds each)
SCENARIOS = {"small": 1000, "pod": 1000, "meta-24k": 1000, PARALLEL: 1000}
# scenarios (the first ones) also solved with WCMP as the enforced reference; meta-24k's
# second solve and certificate add ~2.5 s to its ~8 s
WCMP_SCENARIOS = {"small": 1000, "pod": 1000, "meta-24k": 200, PARALLEL: 1000}
WORKERS = min(2, os.cpu_count() or 1)  # scenarios at a time, one process each


def scenario_health(fabric: Fabric, seed: int) -> LinkHealth:
    """Scenario `seed`'s failures (module docstring)."""
    rng = np.random.default_rng(seed)
    health = random_failures(fabric, int(rng.integers(1, 7)), seed)
    factors: dict[int, float] = {}
    for _ in range(int(rng.integers(0, 4)) * fabric.pods):
        link = int(rng.integers(fabric.rack_base, fabric.num_links))
        if health.factor[link] > 0:
            factors[link] = round(float(rng.uniform(0.1, 0.9)), 1)
    if rng.random() < 0.2:
        node = fabric.node_id("ctsw", int(rng.integers(fabric.num_ctsws)))
        for link in fabric.switch_links(fabric.node_name(node)).tolist():
            factors[int(link)] = 0.0
    return health.with_factors(factors) if factors else health


def parallel_fabric(seed: int) -> Fabric:
    """Scenario `seed`'s fabric of the `parallel` row: a random Clos of 1-2 pods, 2-4 racks
    of 1-3 hosts (2 or 4 NICs), 2-4 CTSWs a pod, 2-3 cables from each RTSW to each CTSW,
    1-2 ATSWs a plane and 1-2 cables from each CTSW to each, taper 1-3."""
    rng = np.random.default_rng(seed)
    pods = int(rng.integers(1, 3))
    return build(ClosSpec(
        name=PARALLEL, pods=pods, racks_per_pod=int(rng.integers(2, 5)),
        hosts_per_rack=int(rng.integers(1, 4)), nics_per_host=int(rng.choice([2, 4])),
        ctsws_per_pod=int(rng.integers(2, 5)), rack_links=int(rng.integers(2, 4)),
        atsws_per_plane=int(rng.integers(1, 3)) if pods > 1 else 0,
        agg_links=int(rng.integers(1, 3)),
        taper=float(rng.choice([1.0, 2.0, 3.0])) if pods > 1 else None,
    ))  # fmt: skip


def parallel_scenario(seed: int) -> tuple[Fabric, LinkHealth, list[Job]]:
    """Scenario `seed` of the `parallel` row: its fabric, 1-3 random switch-to-switch links
    down or degraded (to 0.25 or 0.5), and a job mix of 2-4 hosts a job (rings, pipelines,
    all-to-all), half of them scattered."""
    fabric = parallel_fabric(seed)
    rng = np.random.default_rng([seed, 1])
    factors: dict[int, float] = {}
    for _ in range(int(rng.integers(1, 4))):
        link = int(rng.integers(fabric.rack_base, fabric.num_links))
        factors[link] = float(rng.choice([0.0, 0.0, 0.5, 0.25]))
    jobs = random_jobs(fabric, seed=seed, sizes={2: 2, 3: 2, 4: 1}, fragmentation=0.5,
                       patterns={"ring": 3, "pipeline": 1, "alltoall": 1})  # fmt: skip
    return fabric, LinkHealth.all_up(fabric).with_factors(factors), jobs


def _mean_jobs(reports: list[dict[str, float]]) -> dict[str, float]:
    return {job: float(np.mean([r.get(job, np.nan) for r in reports])) for job in reports[0]}


def hashed_jobs(name: str, fabric: Fabric, health: LinkHealth, flows: FlowSet) -> dict[str, float]:
    """Every job's bus bandwidth under the hashing `name` ("eecmp", "wcmp", "ecmp"), the
    mean over SEEDS, as the certificate defines the reference."""
    return _mean_jobs([baseline(name, fabric, health, flows, s).report.job_busbw_fraction
                       for s in SEEDS])  # fmt: skip


def _rivals(fabric: Fabric, health: LinkHealth, flows: FlowSet) -> dict[str, dict[str, float]]:
    out = {}
    for name in ("eecmp", "wcmp", "ecmp"):
        out[name] = hashed_jobs(name, fabric, health, flows)
    out["pinning"] = baseline("pinning", fabric, health, flows, 1).report.job_busbw_fraction
    out["spray"] = oblivious_spray(fabric, health, flows).report.job_busbw_fraction
    return out


def te_jobs(
    fabric: Fabric, health: LinkHealth, res: SolveResult, hashing: str
) -> dict[str, float]:
    """Every job's TE bus bandwidth as the data plane carries `res`, rows without a TE
    entry riding `hashing` (the mean over SEEDS where some do)."""
    seeds = SEEDS if (~res.assignment.routed).any() else SEEDS[:1]
    return _mean_jobs([routed("te", fabric, health, res.assignment, 0.0, s, 16, res.parent,
                              hashing=hashing).report.job_busbw_fraction
                       for s in seeds])  # fmt: skip


def run_scenario(fabric: Fabric | None, seed: int, enforce_wcmp: bool = False) -> dict[str, Any]:
    """TE against every rival on scenario `seed` of `fabric` (None: of the `parallel`
    row, its own fabric); with `enforce_wcmp` also TE certified against WCMP, as `te_wcmp`
    (None otherwise)."""
    if fabric is None:
        fabric, health, jobs = parallel_scenario(seed)
        flows = jobs_flows(fabric, jobs)
    else:
        flows = jobs_flows(fabric, random_jobs(fabric, seed=seed))
        health = scenario_health(fabric, seed)
    opts = SolveOptions(certify=CertifyOptions(compare=("wcmp",)))
    start = time.perf_counter()
    res = solve(fabric, health, flows, options=opts)
    solve_s = time.perf_counter() - start
    cert = res.certificate
    assert cert is not None
    te = te_jobs(fabric, health, res, "eecmp")
    te_wcmp, wcmp_passed = None, True
    if enforce_wcmp:
        opts = SolveOptions(certify=CertifyOptions(reference="wcmp", compare=("eecmp",)))
        res_w = solve(fabric, health, flows, options=opts)
        assert res_w.certificate is not None
        wcmp_passed = res_w.certificate.passed
        te_wcmp = te_jobs(fabric, health, res_w, "wcmp")
    comm = commodities(fabric, flows)
    optimum = max(solve_lp(fabric, health, comm).mlu if len(comm.demand) else 0.0,
                  res.bound.parts.get("access", 0.0))  # fmt: skip
    return {
        "te": te, "rivals": _rivals(fabric, health, flows),
        "ceiling": min(1.0, 1.0 / optimum) if optimum > 0 else 1.0,
        "cert_s": cert.seconds, "solve_s": solve_s, "fell_back": len(cert.fallback_jobs),
        "passed": cert.passed, "te_wcmp": te_wcmp, "wcmp_passed": wcmp_passed,
    }  # fmt: skip


def summarise(label: str, runs: list[dict[str, Any]]) -> list[list[object]]:
    """Table rows: one per rival (jobs below, the scenarios where the rival is better by
    TE's own objective, worst ratio, mean gain)."""
    rows: list[list[object]] = []
    enforced = [run for run in runs if run["te_wcmp"] is not None]
    for name, te, of in [(rival, "te", runs) for rival in RIVALS] + [
            ("wcmp", "te_wcmp", enforced)]:  # fmt: skip
        if not of:
            continue
        ratios = []
        better = 0
        for run in of:
            ref = run["rivals"][name]
            for job, value in ref.items():
                if value > 0 and job in run[te]:
                    ratios.append(run[te][job] / value)
            better += rival_better(run[te], ref)
        r = np.array(ratios)
        rows.append([label, len(of), name if te == "te" else "wcmp, enforced", r.size,
                     int((r < 1 - 1e-9).sum()), better, float(r.min()),
                     float(r.mean())])  # fmt: skip
    return rows


def rival_better(te: dict[str, float], rival: dict[str, float]) -> bool:
    """Is the rival's routing better for the jobs than TE's by the objective TE seeks
    (lexicographic max-min of the job values, every job of equal priority: the worst job,
    then the next; controller.solver.job_objective), over the jobs both value?"""
    jobs = sorted(set(te) & set(rival))
    every, equal = np.arange(len(jobs)), np.zeros(len(jobs), np.int64)
    mine = objective_vector(np.array([te[j] for j in jobs], float), equal, every)
    theirs = objective_vector(np.array([rival[j] for j in jobs], float), equal, every)
    return compare(theirs, mine) > 0


_FABRIC: dict[str, Fabric] = {}


def _scenario(name: str, seed: int) -> dict[str, Any]:
    """Scenario `seed` on preset `name`, in a worker process (the fabric built once)."""
    if name == PARALLEL:
        return run_scenario(None, seed, seed <= WCMP_SCENARIOS.get(name, 0))
    if name not in _FABRIC:
        _FABRIC[name] = build(PRESETS[name])
    return run_scenario(_FABRIC[name], seed, seed <= WCMP_SCENARIOS.get(name, 0))


def _run_all(name: str, n: int) -> list[dict[str, Any]]:
    """Scenarios 1..n on preset `name`, WORKERS at a time, in seed order; a line of progress
    every 5% (a meta-24k thousand takes more than an hour)."""
    step = max(n // 20, 1)
    runs = []
    ctx = multiprocessing.get_context("spawn")  # no copy of this process's threads
    with ProcessPoolExecutor(WORKERS, mp_context=ctx, initializer=warm_up) as pool:
        start = time.perf_counter()
        for seed, run in enumerate(pool.map(_scenario, [name] * n, range(1, n + 1)), 1):
            runs.append(run)
            if seed % step == 0 or seed == n:
                log(f"  certificate {name}: {seed}/{n} scenarios, "
                    f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    return runs


def bench_certificate(cfg: Any) -> Iterator[Any]:
    """The certificate's promise and cost on seeded random failure scenarios."""

    sec = Section("Never slower than hashing: the certificate on random failure scenarios")
    rows: list[list[object]] = []
    cost: list[list[object]] = []
    for name, count in SCENARIOS.items():
        n = max(count // 10, 2) if cfg.quick else count
        cap = cfg.scenarios.get(name, cfg.scenarios.get(""))
        n = n if cap is None else min(n, cap)
        if not n:
            continue
        runs = _run_all(name, n)
        label = {"meta-24k": "meta-24k mix", PARALLEL: "parallel cables"}.get(name, name)
        rows.extend(summarise(label, runs))
        cert_s = [r["cert_s"] for r in runs]
        gap = [min(r["te"].values()) / r["ceiling"] for r in runs if r["te"]]
        cost.append([
            label, n, sum(r["passed"] and r["wcmp_passed"] for r in runs),
            sum(r["fell_back"] > 0 for r in runs), sum(r["fell_back"] for r in runs),
            statistics.median(cert_s), float(np.percentile(cert_s, 99)), max(cert_s),
            statistics.median([r["solve_s"] for r in runs]), float(np.mean(gap)),
            float(np.min(gap)),
        ])  # fmt: skip
    sec.text(
        "Scenario s: the seeded job mix (seed s); per pod 1-6 random RTSW-CTSW links down and "
        "0-3 random links degraded to 0.1-0.9; a random CTSW drained with probability 0.2. "
        "TE solved as `tectl solve` solves (certified against E-ECMP, 16 QPs, the mean over "
        "hash seeds 1-4, compared with WCMP, whose values the solve seeks as floors; "
        "docs/certificate.md, docs/objective.md). Per job, TE's bus bandwidth over each rival's: "
        "E-ECMP, WCMP and ECMP as the mean over the same 4 seeds, pinning and oblivious spray "
        "(every flow evenly over all live paths) as they are. `below`: jobs under the rival "
        "(target 0 for eecmp, the reference enforced). `rival better`: scenarios where the "
        "rival's job values are better than TE's by the objective TE seeks (the worst job "
        "higher, or equal and the next higher, and so on: a job below a rival where this is "
        "0 is a trade, another job gaining more than it lost). Where the fabric runs WCMP, WCMP is "
        "the reference (`tectl solve --reference wcmp`): `wcmp, enforced` is the first "
        f"scenarios of each fabric (small {WCMP_SCENARIOS['small']:,}, pod "
        f"{WCMP_SCENARIOS['pod']:,}, meta-24k {WCMP_SCENARIOS['meta-24k']:,}) solved again "
        "so, TE's rows without an entry riding WCMP, against WCMP (target 0). The "
        "`parallel cables` row: scenario s on a fabric of its own, as an operator's lab or a "
        "small cluster is cabled (1-2 pods of 2-4 racks, 2-3 cables from each RTSW to each "
        "CTSW: `sim.bench_certificate.parallel_fabric`), 1-3 random switch-to-switch links "
        "down or degraded to 0.25-0.5, jobs of 2-4 hosts."
    )
    sec.text("")
    sec.table(["fabric", "scenarios", "rival", "jobs", "below", "rival better",
               "worst TE/rival", "mean TE/rival"], rows)  # fmt: skip
    sec.text("")
    sec.text(
        "The certificate's cost and outcome (`certified`: both certificates passed where a "
        "scenario was solved twice; the seconds are the default solve's), and the gap to "
        "adaptive spray (the fractional optimum's ceiling min(1, 1 / LP optimum) on the "
        "worst job; TE's worst job over it). "
        f"The scenarios run {WORKERS} at a time, one process each on this machine's cores: "
        "the certificate's and the solve's seconds are those of a loaded machine (the "
        "certificate simulates its reference on a second thread); `solver` times the mix "
        "alone."
    )
    sec.text("")
    sec.table(["fabric", "scenarios", "certified", "with fallback", "jobs handed back",
               "cert median s", "cert p99 s", "cert max s", "solve median s",
               "worst job / ceiling mean", "min"], cost)  # fmt: skip
    yield sec
