"""Bench section layouts: rail-optimized, rail-only and dual-ToR dual-plane presets solved
with their seeded job mixes next to meta-24k: solve time and quality against the bound and
the fabric's own hashing (docs/layouts.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import partial

from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.solver.solve import solve
from sim.bench_base import Config, Section, log, timed
from sim.compare import baseline, routed
from sim.jobmix import random_jobs

FABRICS = (
    ("meta-24k", PRESETS["meta-24k"]),
    ("superpod-4su", PRESETS["superpod-4su"]),
    ("superpod-4su, planes 8 (rail-only)",
     replace(PRESETS["superpod-4su"], name="superpod-4su-rail-only", planes=8)),
    ("hpn-pod", PRESETS["hpn-pod"]),
)  # fmt: skip


def bench_layouts(cfg: Config) -> Iterator[Section]:
    """Each layout's preset full of its seeded job mix: solve time, MLU/bound, worst jobs."""
    rows = []
    for label, spec in FABRICS:
        fabric = build(spec)
        health = LinkHealth.all_up(fabric)
        for seed in cfg.seeds if fabric.num_nics < 4096 else cfg.seeds[:2]:  # small: every seed
            flows = jobs_flows(fabric, random_jobs(fabric, seed=seed))
            t, res = timed(partial(solve, fabric, health, flows), cfg.repeats)
            te = routed("te", fabric, health, res.assignment, t, seed, parent=res.parent).report
            ee = baseline("eecmp", fabric, health, flows, seed, 16).report
            wc = baseline("wcmp", fabric, health, flows, seed, 16).report
            ec = baseline("ecmp", fabric, health, flows, seed).report
            cert = res.certificate
            gpus = fabric.num_nics // fabric.ports_per_nic
            rows.append([label, seed, gpus, fabric.ports_per_nic, fabric.rtsws_per_rack,
                         fabric.planes, len(flows), t, res.ratio, te.busbw_fraction_min,
                         ee.busbw_fraction_min, wc.busbw_fraction_min, ec.busbw_fraction_min,
                         "passed" if cert is not None and cert.passed else "no"])  # fmt: skip
            log(f"  layouts: {label} seed {seed} solved in {t:.2f} s")
    sec = Section("Layouts: rail-optimized, rail-only and dual-plane presets next to meta-24k")
    sec.text("Each preset full of its seeded job mix (sim.jobmix; a NIC sends at its line "
             "rate). S = RTSWs per rack (rail leaves of a scalable unit, ToRs of a segment), "
             "Q = planes. The rail-only row is superpod-4su with `planes: 8`: each rail's "
             "leaves reach only its 2 spines (4 x 400G up for 32 x 400G down). P = ports per "
             "NIC: each of hpn-pod's NICs has two 200G ports, one per plane, and splits every "
             "flow over them (a NIC sends 400G). Worst job = the slowest job's "
             "bus bandwidth as a share of its NICs' line rate; solve s = `solve` alone, the "
             "median of the repeats. The 1,024-GPU presets run every seed, the large ones "
             "the first two.")  # fmt: skip
    sec.text("")
    sec.table(["fabric", "seed", "GPUs", "P", "S", "Q", "flows", "solve s", "MLU/bound",
               "TE worst job", "E-ECMP worst job", "WCMP worst job", "ECMP worst job",
               "certificate"], rows)  # fmt: skip
    yield sec
