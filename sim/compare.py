"""Side-by-side comparison of routings on the same flows: the baselines and TE.

Every row is simulated on the same fabric, health and flows, so the ratios between rows
are measured in one run. MLU is over switch-to-switch arcs and access arcs alike. Rates
follow the striped model by default (controller.model.rates): a flow split over queue pairs
finishes with its slowest QP, and every QP competes for its link on its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from controller.errors import InputError
from controller.formats.output import Percent
from controller.model.assignment import UNROUTED, Assignment
from controller.model.dataplane import simulate_carried
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import flow_class, num_paths, path_alive, path_arcs
from controller.model.rates import SimReport, simulate, stalled_rows
from controller.routes.entries import build_routes, route_conflicts
from sim.baselines import ecmp, eecmp, pinning, wcmp

BASELINES = ("ecmp", "eecmp", "wcmp", "pinning")
# the spray rivals: a NIC spraying every flow evenly over all live paths without feedback,
# and adaptive spray, modelled as the fractional optimum (no routing's worst job is above it)
RIVALS = ("spray", "adaptive")
# adaptive spray's figures that are not known: it is the optimum's ceiling on the worst job,
# with no per-flow rates (so no mean) and no per-link loads (the table's '-', JSON's null)
UNKNOWN_OF_ADAPTIVE = ("busbw_fraction_mean", "mean_flow_share", "throughput_fraction",
                       "max_flows_per_link", "collided_links")  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One routing's figures."""

    method: str
    report: SimReport
    seconds: float  # time to compute the routing (not to simulate it)
    entries: int = 0  # TE entries the switches need for it (0: ECMP defaults only)

    def to_dict(self, bound: float | None = None) -> dict[str, object]:
        out: dict[str, object] = {
            "method": self.method, "seconds": self.seconds, "te_entries": self.entries,
        }  # fmt: skip
        out.update(self.report.to_dict())
        out["mlu_over_bound"] = self.report.mlu / bound if bound else None
        if self.method == "adaptive-spray":
            out.update(dict.fromkeys(UNKNOWN_OF_ADAPTIVE))
        return out


def baseline(
    name: str,
    fabric: Fabric,
    health: LinkHealth,
    flows: FlowSet,
    seed: int,
    qps: int = 16,
    model: str = "striped",
) -> Row:
    """Route `flows` with one baseline and simulate it under rate `model`
    (controller.model.rates). ECMP and pinning open one QP per flow, E-ECMP `qps`."""
    start = time.perf_counter()
    if name == "ecmp":
        routing = ecmp(fabric, flows, health, seed)
        seconds = time.perf_counter() - start
        return Row("ecmp", simulate(fabric, health, routing, model=model), seconds)
    if name == "eecmp":
        sub, routing, parent = eecmp(fabric, flows, health, seed, qps)
        seconds = time.perf_counter() - start
        report = simulate(fabric, health, routing, sub, parent, model=model)
        return Row(f"eecmp-{qps}qp", report, seconds)
    if name == "wcmp":
        sub, routing, parent = wcmp(fabric, flows, health, seed, qps)
        seconds = time.perf_counter() - start
        report = simulate(fabric, health, routing, sub, parent, model=model)
        return Row(f"wcmp-{qps}qp", report, seconds)
    if name == "pinning":
        routing = pinning(fabric, flows, health)
        seconds = time.perf_counter() - start
        # pinned paths need entries too; where two flows to one host want other next hops
        # at a switch (pinned per destination NIC over parallel links), one entry keyed by
        # <port, destination host> holds the first: a table cannot hold both
        clash = route_conflicts(fabric, routing)
        held = np.where(clash, UNROUTED, routing.path)
        entries = len(build_routes(fabric, Assignment(flows, held)))
        return Row("pinning", simulate(fabric, health, routing, model=model), seconds, entries)
    raise InputError(f"unknown routing {name!r}; known: {', '.join(BASELINES)}")


def routed(
    method: str,
    fabric: Fabric,
    health: LinkHealth,
    assignment: Assignment,
    seconds: float,
    seed: int = 1,
    qps: int = 16,
    parent: np.ndarray | None = None,
    entries: int = 0,
    model: str = "striped",
    hashing: str = "eecmp",
) -> Row:
    """Simulate a TE routing as the data plane carries it (controller.model.dataplane):
    every flow's NIC opens `qps` queue pairs; a whole flow's QPs share its TE path, a QP
    bucket is one QP, and rows without a TE entry ride the fabric's defaults (`hashing`,
    hash `seed`), their QPs walked through the installed entries and hashed elsewhere.
    `parent` maps the assignment's rows to the flows they are part of (QP buckets of one
    flow, see SolveResult.parent); shares are counted per flow, under `model`."""
    report = simulate_carried(fabric, health, assignment, parent, kind=hashing, seed=seed,
                              qps=qps, model=model)  # fmt: skip
    return Row(method, report, seconds, entries)


def oblivious_spray(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, model: str = "striped"
) -> Row:
    """Every flow split evenly over all its live candidate paths (no congestion feedback):
    one row per (flow, live path) of demand / paths, finishing with its slowest part."""
    start = time.perf_counter()
    counts = np.array(num_paths(fabric))[flow_class(fabric, flows.src_nic, flows.dst_nic)]
    row = np.repeat(np.arange(len(flows)), counts)
    index = np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts)
    arcs = path_arcs(fabric, flows.src_nic[row], flows.dst_nic[row], index)
    alive = path_alive(arcs, health.arc_capacity(fabric))
    # a flow with no live path keeps one row with no arcs: unrouted, its job stalled
    none = np.flatnonzero(np.bincount(row[alive], minlength=len(flows)) == 0)
    first = np.cumsum(counts) - counts
    alive[first[none]] = True
    arcs[first[none]] = -1
    row, arcs = row[alive], arcs[alive]
    live = np.maximum(np.bincount(row, minlength=len(flows)), 1)
    sub = FlowSet(flows.src_nic[row], flows.dst_nic[row], flows.demand[row] / live[row],
                  flows.job[row], flows.job_ids)  # fmt: skip
    seconds = time.perf_counter() - start
    report = simulate(fabric, health, arcs, sub, row, model=model)
    return Row("spray", report, seconds)


def adaptive_spray(
    fabric: Fabric, health: LinkHealth, flows: FlowSet, optimum: float, seconds: float = 0.0
) -> Row:
    """Adaptive spray as the fractional optimum `optimum` (min-MLU LP, access links
    included): every flow gets min(1, 1 / optimum) of its demand, the most any routing can
    give its worst job (were every flow above it, the rates would route at a lower MLU)."""
    share = min(1.0, 1.0 / optimum) if optimum > 0 else 1.0
    dead = stalled_rows(fabric, health.arc_capacity(fabric), flows)  # no routing carries
    stalled = set(flows.job[dead].tolist())
    jobs = {name: 0.0 if j in stalled else share
            for j, name in enumerate(flows.job_ids) if (flows.job == j).any()}  # fmt: skip
    values = list(jobs.values()) or [share]
    report = SimReport(
        flows=len(flows), subflows=len(flows), unrouted=int(dead.size), on_down_links=0,
        mlu=optimum, links_over_capacity=None,  # only the optimum is known, not its loads
        max_flows_per_link=0, collided_links=0, worst_flow_share=share, mean_flow_share=share,
        throughput_fraction=share, busbw_fraction_mean=float(np.mean(values)),
        busbw_fraction_min=min(values),
        job_busbw_fraction=jobs,
    )  # fmt: skip
    return Row("adaptive-spray", report, seconds)


# What a job owner reads first: the bus bandwidth their job gets (the worst job's and the
# mean over jobs, as a share of line rate), then the fabric's view: max link utilisation
# and its ratio to the lower bound, links whose offered load exceeds capacity (one rule for
# every routing, however it splits flows), the TE entries it needs, and its compute time.
HEADER = (
    "routing", "worst job busbw", "mean job busbw", "MLU", "MLU/bound",
    "links over capacity", "TE entries", "time s",
)  # fmt: skip


def table_rows(rows: list[Row], bound: float | None) -> list[list[object]]:
    """Cells for `controller.formats.output.format_table(HEADER, ...)`."""
    out: list[list[object]] = []
    for row in rows:
        r = row.report
        # adaptive spray is known as its worst job's ceiling only: its mean is not a figure
        mean = None if row.method == "adaptive-spray" else Percent(r.busbw_fraction_mean)
        out.append([
            row.method, Percent(r.busbw_fraction_min), mean, r.mlu,
            (r.mlu / bound) if bound else None, r.links_over_capacity, row.entries,
            round(row.seconds, 3),
        ])  # fmt: skip
    return out
