"""Side-by-side comparison of routings on the same flows: the baselines and TE.

Every row is simulated on the same fabric, health and flows, so the ratios between rows
are measured in one run. MLU is over switch-to-switch arcs and access arcs alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from controller.errors import InputError
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.rates import SimReport, simulate
from sim.baselines import ecmp, eecmp, pinning

BASELINES = ("ecmp", "eecmp", "pinning")


@dataclass(frozen=True)
class Row:
    """One routing's figures."""

    method: str
    report: SimReport
    seconds: float  # time to compute the routing (not to simulate it)

    def to_dict(self, bound: float | None = None) -> dict[str, object]:
        out: dict[str, object] = {"method": self.method, "seconds": self.seconds}
        out.update(self.report.to_dict())
        if bound:
            out["mlu_over_bound"] = self.report.mlu / bound
        return out


def baseline(
    name: str, fabric: Fabric, health: LinkHealth, flows: FlowSet, seed: int, qps: int = 16
) -> Row:
    """Route `flows` with one baseline and simulate it."""
    start = time.perf_counter()
    if name == "ecmp":
        routing = ecmp(fabric, flows, health, seed)
        seconds = time.perf_counter() - start
        return Row("ecmp", simulate(fabric, health, routing), seconds)
    if name == "eecmp":
        sub, routing, parent = eecmp(fabric, flows, health, seed, qps)
        seconds = time.perf_counter() - start
        return Row(f"eecmp-{qps}qp", simulate(fabric, health, routing, sub, parent), seconds)
    if name == "pinning":
        routing = pinning(fabric, flows, health)
        seconds = time.perf_counter() - start
        return Row("pinning", simulate(fabric, health, routing), seconds)
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
) -> Row:
    """Simulate a TE routing as the data plane carries it: flows without a TE entry (the
    assignment's unrouted ones) ride the ECMP defaults, their `qps` queue pairs hashed.
    `parent` maps the assignment's rows to the flows they are part of (QP buckets of one
    flow, see SolveResult.parent); shares are counted per flow."""
    flows = assignment.flows
    rows = np.arange(len(flows), dtype=np.int64) if parent is None else np.asarray(parent)
    te_arcs = assignment.arcs(fabric)
    fallback = np.flatnonzero(~assignment.routed)
    if fallback.size == 0:
        return Row(method, simulate(fabric, health, te_arcs, flows, rows), seconds)
    sub, sub_routing, sub_parent = eecmp(fabric, flows.take(fallback), health, seed, qps)
    routed_idx = np.flatnonzero(assignment.routed)
    arcs = np.concatenate([te_arcs[routed_idx], sub_routing.arcs(fabric)])
    parent = np.concatenate([rows[routed_idx], rows[fallback[sub_parent]]])
    te = flows.take(routed_idx)
    all_flows = FlowSet(  # one job table: the subflows keep their parents' job indices
        np.concatenate([te.src_nic, sub.src_nic]),
        np.concatenate([te.dst_nic, sub.dst_nic]),
        np.concatenate([te.demand, sub.demand]),
        np.concatenate([te.job, sub.job]),
        flows.job_ids,
    )
    return Row(method, simulate(fabric, health, arcs, all_flows, parent), seconds)


HEADER = (
    "routing", "MLU", "MLU/bound", "collided links", "max flows/link", "worst flow share",
    "busbw mean", "busbw worst job", "unrouted", "time s",
)  # fmt: skip


def table_rows(rows: list[Row], bound: float | None) -> list[list[object]]:
    """Cells for `controller.report.format_table(HEADER, ...)`."""
    out: list[list[object]] = []
    for row in rows:
        r = row.report
        out.append([
            row.method, r.mlu, (r.mlu / bound) if bound else None, r.collided_links,
            r.max_flows_per_link, r.worst_flow_share, r.busbw_fraction_mean,
            r.busbw_fraction_min, r.unrouted, row.seconds,
        ])  # fmt: skip
    return out
