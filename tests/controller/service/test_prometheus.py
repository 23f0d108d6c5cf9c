"""A real Prometheus (Debian `prometheus`) scrapes a running `tectl serve`, and every query
of the Grafana dashboard returns data through Prometheus's HTTP API.

Prometheus and the controller run as child processes on 127.0.0.1, on ports of their own,
with a throw-away config and storage; both are stopped and the directory removed even when
the test fails."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from sim.processes import free_port, running

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MONITORING = Path(__file__).parents[3] / "docs" / "monitoring"
DASHBOARD = MONITORING / "fabric-te.json"
SCRAPE_MS = 500

pytestmark = pytest.mark.skipif(
    not Path(PROMETHEUS).exists(),
    reason="prometheus not installed (Debian prometheus; `make system-deps` as root)",
)


def _process(args: list[str], **kw: Any) -> AbstractContextManager[subprocess.Popen[str]]:
    return running(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read().decode())


def _wait(what: str, check: Any, proc: subprocess.Popen[str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, ValueError, grpc.RpcError, grpc.FutureTimeoutError):
            pass
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"{what}: the process exited ({proc.returncode}):\n{err[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not ready after {timeout} s")
        time.sleep(0.2)


def dashboard_queries(fabric: str = ".*", instance: str = ".*") -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, Grafana's variables made concrete: the
    $fabric and $instance selectors ("All" is .*), $__rate_interval."""
    doc = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", "1m")
         .replace("$fabric", fabric).replace("$instance", instance))
        for panel in doc["panels"] for target in panel["targets"]
    ]  # fmt: skip


def alert_rules() -> list[tuple[str, str]]:
    """(alert name, PromQL) of every rule in alerts.yml."""
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [(rule["alert"], rule["expr"]) for group in doc["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The fabric_te_ series an expression reads, as the exporter names them (no _bucket,
    _total)."""
    return {name.removesuffix("_bucket").removesuffix("_total")
            for name in re.findall(r"fabric_te_\w+", expr)}  # fmt: skip


def _drive(port: int, stop: threading.Event) -> None:
    """Jobs and link reports until `stop`, so every counter and histogram moves."""
    from controller.api.fabric_te.v1 import te_pb2 as pb
    from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
    from controller.model.clos import PRESETS, build

    fabric = build(PRESETS["tiny"])
    hosts = [fabric.host_name(h) for h in range(fabric.num_hosts)]
    link = fabric.link_name(fabric.rack_link(0, 1))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.TrafficEngineeringStub(channel)
        step = 0
        while not stop.is_set():
            step += 1
            moving = hosts[0:4] if step % 2 else hosts[2:6]
            stub.PutJob(pb.PutJobRequest(job=pb.Job(id="a", hosts=moving)))
            stub.PutJob(pb.PutJobRequest(job=pb.Job(id="b", hosts=hosts[6:8])))
            state = pb.LinkReport.DOWN if step % 2 else pb.LinkReport.UP
            stub.ReportLinks(pb.ReportLinksRequest(reports=[pb.LinkReport(link=link, state=state)]))
            stop.wait(0.4)


def _missing(api: str, instance: str) -> list[str]:
    """Dashboard queries, with the fabric and instance selected, that return no finite
    value now."""
    empty = []
    for title, expr in dashboard_queries("tiny", instance):
        reply = _get(f"{api}/query?" + urllib.parse.urlencode({"query": expr}))
        assert reply["status"] == "success", (title, expr, reply)
        values = [float(r["value"][1]) for r in reply["data"]["result"]]
        if not any(math.isfinite(v) for v in values):
            empty.append(f"{title}: {expr} -> {values}")
    return empty


def test_dashboard_queries_return_data_from_a_real_prometheus() -> None:
    grpc_port, metrics_port, prom_port = free_port(), free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="fabric-te-prometheus-") as tmp:
        config = Path(tmp) / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_MS}ms\n  evaluation_interval: {SCRAPE_MS}ms\n"
            "scrape_configs:\n  - job_name: fabric-te\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{metrics_port}']\n        labels: {{fabric: tiny}}\n"
        )
        serve = [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "tiny",
                 "--insecure", "--listen", f"127.0.0.1:{grpc_port}",
                 "--metrics-port", str(metrics_port), "--debounce", "0.02"]  # fmt: skip
        prom = [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{prom_port}"]  # fmt: skip
        with _process(serve) as controller, _process(prom, cwd=tmp) as prometheus:
            api = f"http://127.0.0.1:{prom_port}/api/v1"
            _wait("tectl serve", lambda: grpc.channel_ready_future(
                grpc.insecure_channel(f"127.0.0.1:{grpc_port}")).result(timeout=1) is None,
                controller)  # fmt: skip
            _wait("prometheus", lambda: _get(f"{api}/status/buildinfo")["status"] == "success",
                  prometheus)  # fmt: skip
            stop, errors = threading.Event(), []

            def drive() -> None:
                try:
                    _drive(grpc_port, stop)
                except Exception as err:  # noqa: BLE001 - reported below
                    errors.append(err)

            driver = threading.Thread(target=drive, daemon=True)
            driver.start()
            try:  # until every query has data: a few scrapes, longer on a busy machine
                deadline = time.monotonic() + 25
                time.sleep(3.0)
                instance = f"127.0.0.1:{metrics_port}"
                while (empty := _missing(api, instance)) and time.monotonic() < deadline:
                    time.sleep(1.0)
                targets = _get(f"{api}/targets")["data"]["activeTargets"]
            finally:
                stop.set()
                driver.join(timeout=10)
            assert not errors, errors
            assert [t["health"] for t in targets] == ["up"], targets
            assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
            per_job = _get(f"{api}/query?query=fabric_te_job_predicted_busbw_ratio")
            labels = [r["metric"] for r in per_job["data"]["result"]]
            assert {m["job_id"] for m in labels} == {"a", "b"}  # not clobbered by `job`
            assert {m["job"] for m in labels} == {"fabric-te"}


def test_dashboard_is_a_well_formed_grafana_dashboard() -> None:
    """Unique panel ids, panels inside Grafana's 24-column grid without overlaps, every
    target with a refId and the dashboard's own Prometheus data source variable."""
    doc = json.loads(DASHBOARD.read_text())
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}  # fmt: skip
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs) and all(t["expr"] for t in p["targets"])
        assert p["datasource"]["uid"] == "${datasource}"
    source, fabric, instance = doc["templating"]["list"]
    assert (source["name"], source["type"], source["query"]) == (
        "datasource", "datasource", "prometheus")  # fmt: skip
    assert fabric["name"] == "fabric" and instance["name"] == "instance"
    for var in (fabric, instance):  # "All" selects every series, a label absent too
        assert var["includeAll"] and var["allValue"] == ".*"
    for title, expr in dashboard_queries("$fabric", "$instance"):  # every series scoped
        for series in re.findall(r"fabric_te_\w+(?:\{[^}]*\})?", expr):
            assert 'fabric=~"$fabric"' in series and 'instance=~"$instance"' in series, (
                f"{title}: {series} ignores the fabric/instance selector")  # fmt: skip


def _exported() -> set[str]:
    """Every metric name a running service exports: an engine's registry, with what the
    server adds to it (per-RPC figures, TLS handshake failures)."""
    from controller.model.clos import PRESETS, build
    from controller.service.engine import Engine
    from controller.service.metrics import RpcMetrics
    from controller.service.tls import HandshakeFailures
    from sim.driver import EmulatedDriver

    fabric = build(PRESETS["tiny"])
    engine = Engine(fabric, EmulatedDriver(fabric), debounce=0.0, reconcile_interval=3600.0)
    try:
        RpcMetrics(engine.metrics.registry)
        HandshakeFailures(engine.metrics.registry)
        return {m.name for m in engine.metrics.registry.collect()}
    finally:
        engine.close()


def test_dashboard_and_alert_rules_name_only_metrics_the_controller_exports() -> None:
    exported = _exported()
    queries = [(f"panel {t}", e) for t, e in dashboard_queries()]
    queries += [(f"alert {a}", e) for a, e in alert_rules()]
    for where, expr in queries:
        for name in metric_names(expr):
            assert name in exported, f"{where}: {name} is not exported"
    # what the issue asked the dashboard and the rules to cover
    used = set().union(*(metric_names(e) for _, e in dashboard_queries()))
    for name in ("switches_differing", "entries_missing", "leader", "certificate_passed",
                 "certificate_worst_ratio", "certificate_jobs_below"):  # fmt: skip
        assert "fabric_te_" + name in used, f"no panel shows fabric_te_{name}"
    ruled = set().union(*(metric_names(e) for _, e in alert_rules()))
    for name in ("leader", "switch_table_entries_max", "links_over_capacity",
                 "tls_handshake_failures", "certificate_passed"):  # fmt: skip
        assert "fabric_te_" + name in ruled, f"no alert rule reads fabric_te_{name}"


PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.mark.skipif(
    not Path(PROMTOOL).exists(), reason="promtool not installed (Debian prometheus)"
)
def test_scrape_config_and_alert_rules_pass_promtool() -> None:
    """promtool accepts the example config and the rules, and the rules fire (only) when
    they should, on synthetic series."""
    with tempfile.TemporaryDirectory(prefix="fabric-te-promtool-") as tmp:
        for name in ("prometheus.yml", "alerts.yml"):
            shutil.copy(MONITORING / name, tmp)
        for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"]):
            done = subprocess.run([PROMTOOL, *args], cwd=tmp, capture_output=True, text=True,
                                  timeout=30)  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
        Path(tmp, "alerts_test.yml").write_text(ALERT_TESTS)
        done = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=tmp,
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


ALERT_TESTS = """
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'fabric_te_push_failures_total{job="fabric-te"}'
        values: '0 0 0 1 1 1'
      - series: 'fabric_te_job_predicted_busbw_ratio{job="fabric-te", job_id="llm-1"}'
        values: '1x5 0.5x20'
      - series: 'fabric_te_pending_changes{job="fabric-te"}'
        values: '0x30'
      - series: 'fabric_te_switches_differing{job="fabric-te"}'
        values: '0 0 1x10'
      - series: 'fabric_te_leader{job="fabric-te", instance="a", fabric="pod"}'
        values: '1x5 0x20'
      - series: 'fabric_te_leader{job="fabric-te", instance="b", fabric="pod"}'
        values: '0x25'
      - series: 'fabric_te_switch_table_entries_max{job="fabric-te", tier="rtsw"}'
        values: '100x5 1900x20'
      - series: 'fabric_te_switch_table_budget_entries{job="fabric-te", tier="rtsw"}'
        values: '2048x25'
      - series: 'fabric_te_switch_table_entries_max{job="fabric-te", tier="ctsw"}'
        values: '10x25'
      - series: 'fabric_te_switch_table_budget_entries{job="fabric-te", tier="ctsw"}'
        values: 'INF_X25'  # unlimited: never near full
      - series: 'fabric_te_links_over_capacity{job="fabric-te"}'
        values: '0x3 2x22'
      - series: 'fabric_te_max_link_utilisation_bound_ratio{job="fabric-te"}'
        values: '0.8x25'
      - series: 'fabric_te_certificate_passed{job="fabric-te"}'
        values: '1x3 0x22'
      - series: 'fabric_te_tls_handshake_failures_total{reason="expired_certificate"}'
        values: '0+1x25'
      - series: 'fabric_te_tls_handshake_failures_total{job="fabric-te", reason="other"}'
        values: '0x5 1x20'
    alert_rule_test:
      - eval_time: 2m
        alertname: FabricTePushFailing
        exp_alerts: []
      - eval_time: 4m
        alertname: FabricTePushFailing
        exp_alerts:
          - exp_labels: {severity: page, job: fabric-te}
            exp_annotations:
              summary: "fabric-te solve/push rounds are failing"
              description: "See `tectl status` (last_error) and `tectl routes show`."
      - eval_time: 10m
        alertname: FabricTeJobSlowedByFabric
        exp_alerts: []
      - eval_time: 25m
        alertname: FabricTeJobSlowedByFabric
        exp_alerts:
          - exp_labels: {severity: ticket}
            exp_annotations:
              summary: "a job is predicted below 90% of its bus bandwidth"
      - eval_time: 25m
        alertname: FabricTeBacklog
        exp_alerts: []
      - eval_time: 5m
        alertname: FabricTeSwitchesDiffer
        exp_alerts: []
      - eval_time: 8m
        alertname: FabricTeSwitchesDiffer
        exp_alerts:
          - exp_labels: {severity: ticket, job: fabric-te}
            exp_annotations:
              summary: "switches have differed from the wanted routes for 5 minutes"
              description: "`tectl status` lists them (differing); reconcile keeps retrying."
      - eval_time: 4m
        alertname: FabricTeNoLeader
        exp_alerts: []
      - eval_time: 8m
        alertname: FabricTeNoLeader
        exp_alerts:
          - exp_labels: {severity: page, fabric: pod}
            exp_annotations:
              summary: "0 replicas of fabric pod lead (want 1)"
              description: "0: nothing pushes (store unreachable; routes stay). Over 1: scrape gap."
      - eval_time: 15m
        alertname: FabricTeTableNearlyFull
        exp_alerts: []
      - eval_time: 22m
        alertname: FabricTeTableNearlyFull
        exp_alerts:
          - exp_labels: {severity: ticket, job: fabric-te, tier: rtsw}
            exp_annotations:
              summary: "the fullest rtsw switch holds over 90% of its TE table budget"
              description: "Flows beyond it ride ECMP (see `tectl solve --table-budget N`)."
      - eval_time: 15m
        alertname: FabricTeLinksOverCapacity
        exp_alerts: []
      - eval_time: 20m
        alertname: FabricTeLinksOverCapacity
        exp_alerts:
          - exp_labels: {severity: ticket, job: fabric-te}
            exp_annotations:
              summary: "links are over capacity although a routing without any exists"
      - eval_time: 5m
        alertname: FabricTeCertificateFailed
        exp_alerts: []
      - eval_time: 10m
        alertname: FabricTeCertificateFailed
        exp_alerts:
          - exp_labels: {severity: ticket, job: fabric-te}
            exp_annotations:
              summary: "a job of the installed routing is predicted below the fabric's own hashing"
              description: "`tectl status` names the jobs handed back (docs/certificate.md)."
      - eval_time: 4m
        alertname: FabricTeTlsHandshakeFailures
        exp_alerts: []
      - eval_time: 8m
        alertname: FabricTeTlsHandshakeFailures
        exp_alerts:
          - exp_labels: {severity: info, job: fabric-te}
            exp_annotations:
              summary: "TLS handshakes refused: a client without a valid certificate"
              description: "A scanner, a wrong CA or a plaintext client (docs/security.md)."
      - eval_time: 20m
        alertname: FabricTeTlsHandshakeFailures
        exp_alerts: []
""".replace("INF_X25", " ".join(["Inf"] * 26))  # promtool has no `Infx25`
