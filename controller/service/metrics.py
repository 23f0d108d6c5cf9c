"""Prometheus metrics of the controller, on their own registry and port.

Names follow Prometheus conventions: the unit last (`_seconds`, `_ratio`, `_entries`),
counters end in `_total`, latencies are histograms. A training job is labelled `job_id`:
Prometheus gives every scraped series a `job` label of its own (the scrape job), and a
`job` label from here would be renamed `exported_job`. One attribute per metric, grouped by
what it measures; docs/operators.md says what each means and what to alert on, and
docs/monitoring/fabric-te.json graphs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from controller.errors import FabricError
from controller.model.fabric import SWITCH_TIERS, Fabric
from controller.routes.budget import fullest_switches

if TYPE_CHECKING:
    from controller.routes.tables import RouteSet
    from controller.solver import Certificate

PREFIX = "fabric_te_"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """What an operator graphs and alerts on."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry

        # ---- latencies ----------------------------------------------------------------
        self.report_to_installed_seconds = Histogram(
            PREFIX + "report_to_installed_seconds",
            "From an accepted input change (job, link report) to its routes read back "
            "from the switches", registry=r, buckets=LATENCY_BUCKETS,
        )  # fmt: skip
        self.solve_seconds = Histogram(
            PREFIX + "solve_duration_seconds", "Wall time of a solve or repair", ["kind"],
            registry=r, buckets=LATENCY_BUCKETS,
        )  # fmt: skip
        self.push_seconds = Histogram(
            PREFIX + "push_duration_seconds", "Wall time of pushing one plan to the switches",
            registry=r, buckets=LATENCY_BUCKETS,
        )  # fmt: skip

        # ---- routing quality (of the last solve) ------------------------------------
        self.mlu = Gauge(
            PREFIX + "max_link_utilisation_ratio",
            "Offered load over capacity of the busiest link, TE routes (1 = full); NaN before "
            "the first solve", registry=r,
        )  # fmt: skip
        self.mlu_bound = Gauge(
            PREFIX + "max_link_utilisation_bound_ratio",
            "Lower bound on the max link utilisation any routing can reach", registry=r,
        )  # fmt: skip
        self.bound_ratio = Gauge(
            PREFIX + "mlu_over_bound_ratio", "MLU over its lower bound (1 = optimal)",
            registry=r,
        )  # fmt: skip
        for gauge in (self.mlu, self.mlu_bound, self.bound_ratio):
            gauge.set(float("nan"))  # NaN until a routing is solved (0 would read "no load")
        self.job_busbw = Gauge(
            PREFIX + "job_predicted_busbw_ratio",
            "Predicted bus bandwidth of a training job, as a fraction of the most any "
            "routing gives it: its demand, or its NICs' line rate where it asks more",
            ["job_id"], registry=r,
        )  # fmt: skip
        self.links_over_capacity = Gauge(
            PREFIX + "links_over_capacity",
            "Switch-to-switch links whose offered load exceeds their capacity; NaN before "
            "the first rate prediction", registry=r,
        )  # fmt: skip
        self.links_over_capacity.set(float("nan"))  # not 0 beside a NaN MLU: not known yet

        # ---- the certificate: no job below the fabric's own routing -------------------
        self.certificate_passed = Gauge(
            PREFIX + "certificate_passed",
            "1 when no job of the installed routing is predicted below the fabric's own "
            "hashing (docs/certificate.md), else 0; NaN before the first", registry=r,
        )  # fmt: skip
        self.certificate_passed.set(float("nan"))  # NaN until a routing is certified
        self.certificate_worst = Gauge(
            PREFIX + "certificate_worst_ratio",
            "Worst job's predicted bus bandwidth under TE over under the hashing named "
            "(1 where no job was at risk)", ["reference"], registry=r,
        )  # fmt: skip
        self.certificate_below = Gauge(
            PREFIX + "certificate_jobs_below",
            "Jobs predicted below the hashing named under the installed routing",
            ["reference"], registry=r,
        )  # fmt: skip
        self.certificate_pending = Gauge(
            PREFIX + "certificate_pending",
            "1 while the installed routing is a repair whose jobs at risk are not compared yet "
            "(its full certificate, in the solve's thread, follows)", registry=r,
        )  # fmt: skip
        self.certificate_fallback_jobs = Gauge(
            PREFIX + "certificate_fallback_jobs",
            "Jobs whose flows the certificate handed back to the fabric's hashing", registry=r,
        )  # fmt: skip
        self.certificate_jobs_checked = Gauge(
            PREFIX + "certificate_jobs_checked",
            "Jobs compared in full by the last certificate (the rest provably at full rate)",
            registry=r,
        )  # fmt: skip
        for gauge in (self.certificate_fallback_jobs, self.certificate_jobs_checked):
            gauge.set(float("nan"))  # as certificate_passed: no certificate, no count
        self.certificate_seconds = Histogram(
            PREFIX + "certificate_duration_seconds", "Wall time of a certificate",
            registry=r, buckets=LATENCY_BUCKETS,
        )  # fmt: skip

        # ---- tables and pushes ------------------------------------------------------
        self.table_entries = Gauge(
            PREFIX + "table_entries", "TE entries installed, summed over a switch tier",
            ["tier"], registry=r,
        )  # fmt: skip
        self.table_entries_max = Gauge(
            PREFIX + "switch_table_entries_max",
            "TE entries on the fullest switch of a tier (the most of its own budget used)",
            ["tier"], registry=r,
        )  # fmt: skip
        self.table_budget = Gauge(
            PREFIX + "switch_table_budget_entries",
            "TE entries the fullest switch of a tier may hold (its table budget; with no "
            "entry in the tier, the tier's least; +Inf: unlimited)", ["tier"], registry=r,
        )  # fmt: skip
        self.ops_pushed = Counter(
            PREFIX + "entry_operations_total", "Entry operations pushed", registry=r
        )
        self.churn = Counter(PREFIX + "flows_moved_total", "Flows moved by re-solves", registry=r)
        self.push_errors = Counter(
            PREFIX + "push_failures_total", "Solve/push rounds that failed", registry=r
        )
        self.queue_depth = Gauge(
            PREFIX + "pending_changes", "Accepted input changes not yet applied", registry=r
        )
        self.solve_running = Gauge(
            PREFIX + "global_solve_running_seconds",
            "How long the global solve (or a settled link change's certificate) running in "
            "its thread has run; 0 when none runs", registry=r,
        )  # fmt: skip

        # ---- precomputed repairs of single failures ----------------------------------
        self.precomputed = PrecomputeMetrics(r)

    def set_certificate(self, cert: Certificate | None) -> None:
        """The gauges of the certificate of the routing just installed (None: not run, or
        not known: its counts are NaN too, not 0)."""
        self.certificate_worst.clear()
        self.certificate_below.clear()
        if cert is None:
            for gauge in (self.certificate_passed, self.certificate_fallback_jobs,
                          self.certificate_jobs_checked):  # fmt: skip
                gauge.set(float("nan"))
            self.certificate_pending.set(0.0)  # no certificate: none is still to come
            return
        self.certificate_passed.set(float(cert.passed))
        self.certificate_pending.set(float(cert.pending))
        for name, ratio in cert.worst_ratio.items():
            self.certificate_worst.labels(name).set(1.0 if ratio is None else ratio)
            self.certificate_below.labels(name).set(cert.below.get(name, 0))
        self.certificate_fallback_jobs.set(len(cert.fallback_jobs))
        self.certificate_jobs_checked.set(cert.jobs_checked)
        self.certificate_seconds.observe(cert.seconds)

    def set_job_busbw(self, fractions: Mapping[str, float]) -> None:
        """Replace the per-job gauges (jobs that left lose their series)."""
        self.job_busbw.clear()
        for job, value in sorted(fractions.items()):
            self.job_busbw.labels(job).set(value)

    def set_tier_tables(self, totals: Mapping[str, tuple[int, int, float]]) -> None:
        """Entries per tier: (total, its fullest switch's, that switch's budget), as
        `TierCounts.totals` gives them: the alert on max / budget reads one switch."""
        for tier, (total, most, budget) in totals.items():
            self.table_entries.labels(tier).set(total)
            self.table_entries_max.labels(tier).set(most)
            self.table_budget.labels(tier).set(budget)

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Expose /metrics on `port`."""
        start_http_server(port, addr=address, registry=self.registry)


class PrecomputeMetrics:
    """The series of the precomputed repairs (controller.service.precomputed)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.generation = Gauge(
            "fabric_te_precomputed_generation",
            "Generation of the precomputed repairs set (bumped by every change of jobs, "
            "health or installed routing)", registry=r)  # fmt: skip
        self.elements = Gauge(
            "fabric_te_precomputed_elements",
            "Single failures (links, switches) of the installed routing: listed, and with "
            "their repair ready", ["state"], registry=r)  # fmt: skip
        self.bytes = Gauge(
            "fabric_te_precomputed_bytes", "Memory of the precomputed repairs kept",
            registry=r)  # fmt: skip
        self.refresh_seconds = Histogram(
            "fabric_te_precomputed_refresh_duration_seconds",
            "Wall time of a full refresh of the precomputed repairs", registry=r,
            buckets=(0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600))  # fmt: skip
        self.reports = Counter(
            "fabric_te_precomputed_reports",
            "Link reports repaired: from a precomputed repair (hit) or on demand (miss, "
            "by reason)", ["path", "reason"], registry=r)  # fmt: skip
        self.blast_rows = Gauge(
            "fabric_te_precomputed_rows_moved",
            "Rows (flows' QP buckets) the precomputed repairs ready move: the most one moves, "
            "and the mean over them", ["stat"], registry=r)  # fmt: skip
        self.blast_jobs = Gauge(
            "fabric_te_precomputed_jobs_moved",
            "Jobs with a row moved by the precomputed repairs ready: the most one moves, and "
            "the mean over them", ["stat"], registry=r)  # fmt: skip
        self.moving_others = Gauge(
            "fabric_te_precomputed_elements_moving_others",
            "Precomputed repairs ready that move rows whose path did not cross the failed "
            "element (the certificate's hand-backs, full tables, retried rows)",
            registry=r)  # fmt: skip
        self.failed = Gauge(
            "fabric_te_precomputed_failed",
            "1 while the refresh of the current routing's precomputed repairs has failed "
            "(reports are repaired on demand until the next change), else 0",
            registry=r)  # fmt: skip
        self.rows_moved = Gauge(
            "fabric_te_repair_rows_moved",
            "Rows (flows' QP buckets) the last repair applied moved: all, and those whose "
            "path did not cross the failed element", ["which"], registry=r)  # fmt: skip
        self.jobs_moved = Gauge(
            "fabric_te_repair_jobs_moved", "Jobs with a row the last repair applied moved",
            registry=r)  # fmt: skip

    def publish(self, fields: Mapping[str, Any]) -> None:
        self.generation.set(float(fields["generation"]))
        self.elements.labels("ready").set(float(fields["ready"]))
        self.elements.labels("total").set(float(fields["total"]))
        self.bytes.set(float(fields["bytes"]))
        self.blast_rows.labels("max").set(float(fields["rows_moved_max"]))
        self.blast_rows.labels("mean").set(float(fields["rows_moved_mean"]))
        self.blast_jobs.labels("max").set(float(fields["jobs_moved_max"]))
        self.blast_jobs.labels("mean").set(float(fields["jobs_moved_mean"]))
        self.moving_others.set(float(fields["elements_moving_others"]))
        self.failed.set(1.0 if fields.get("failed") else 0.0)

    def refreshed(self, seconds: float) -> None:
        self.refresh_seconds.observe(seconds)

    def report(self, path: str, reason: str = "") -> None:
        self.reports.labels(path, reason).inc()

    def moved(self, rows: int, off_element: int, jobs: int) -> None:
        self.rows_moved.labels("all").set(rows)
        self.rows_moved.labels("off_element").set(off_element)
        self.jobs_moved.set(jobs)


class TierCounts:
    """Entries per switch, grouped by tier (the fabric's, whatever the switches' names),
    changed one switch at a time: a push that reads back a few switches updates their
    tiers' figures without counting the others. `budget`: entries per node id
    (Fabric.table_budget), to find each tier's fullest switch by its own budget."""

    def __init__(self, fabric: Fabric, budget: np.ndarray) -> None:
        self._fabric, self._budget = fabric, budget
        self._usage = np.zeros(fabric.num_nodes, np.int64)  # entries per node id

    def update(self, routes: RouteSet, switches: Iterable[str]) -> None:
        """Take the entry counts of `switches` from `routes` (absent: none)."""
        for sw in switches:
            try:
                node = self._fabric.node_by_name(sw)
            except FabricError:
                continue
            if self._fabric.node_kind(node) in SWITCH_TIERS:
                self._usage[node] = len(routes.table(sw))

    def totals(self) -> dict[str, tuple[int, int, float]]:
        """Per tier, (entries, entries on its fullest switch, that switch's budget): the
        fullest as the solve's table figures pick it (routes.budget.fullest_switches);
        with no entry, 0 and the tier's least budget; a tier the fabric has no switch of
        (one pod, no ATSW) has no figures (not an unlimited budget)."""
        f, out = self._fabric, {}
        fullest = fullest_switches(f, self._usage, self._budget)
        for tier in SWITCH_TIERS:
            if not f.tier_size(tier):
                continue
            lo = f.node_id(tier, 0)
            used = self._usage[lo : lo + f.tier_size(tier)]
            if not used.any():
                out[tier] = (0, 0, float(self._budget[lo : lo + f.tier_size(tier)]
                                         .min(initial=np.inf)))  # fmt: skip
                continue
            node = fullest[tier]
            out[tier] = (int(used.sum()), int(self._usage[node]), float(self._budget[node]))
        return out


class RpcMetrics:
    """The gRPC API per method: calls by status code, unary latency, streams open."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter(
            "fabric_te_grpc_requests", "Finished RPCs by method and status code",
            ["method", "code"], registry=r,
        )  # fmt: skip
        self.seconds = Histogram(
            "fabric_te_grpc_request_duration_seconds", "Wall time of unary RPCs", ["method"],
            registry=r, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30),
        )  # fmt: skip
        self.streams = Gauge("fabric_te_grpc_open_streams", "Long-lived streams open", registry=r)
