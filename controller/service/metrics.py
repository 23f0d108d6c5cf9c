"""Prometheus metrics of the controller, on their own registry and port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    """What an operator graphs: solve time, MLU and its bound ratio, churn, push errors and
    the input changes not yet applied."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.solve_seconds = Histogram(
            "fabric_te_solve_seconds", "Wall time of a solve or repair", ["kind"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )  # fmt: skip
        self.mlu = Gauge("fabric_te_mlu", "Max link utilisation of the TE routes", registry=r)
        self.bound_ratio = Gauge(
            "fabric_te_mlu_bound_ratio", "MLU over its lower bound (1 = optimal)", registry=r
        )
        self.churn = Counter("fabric_te_churn_flows", "Flows moved by re-solves", registry=r)
        self.push_errors = Counter("fabric_te_push_errors", "Failed solve/push rounds", registry=r)
        self.ops_pushed = Counter("fabric_te_entry_ops", "Entry operations pushed", registry=r)
        self.queue_depth = Gauge(
            "fabric_te_pending_changes", "Accepted input changes not yet applied", registry=r
        )

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Expose /metrics on `port`."""
        start_http_server(port, addr=address, registry=self.registry)
