"""The gRPC controller end to end: a real server on port 0 over the emulated fabric."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.server import SERVICE_NAME, Running, start
from sim.driver import EmulatedDriver
from sim.switches import verify


def _job(fabric: Fabric, job_id: str, hosts: range) -> pb.Job:
    return pb.Job(id=job_id, hosts=[fabric.host_name(h) for h in hosts], tp=4)


@pytest.fixture
def driver(small: Fabric) -> EmulatedDriver:
    return EmulatedDriver(small)


@pytest.fixture
def service(
    small: Fabric, driver: EmulatedDriver
) -> Iterator[tuple[Running, pb_grpc.TrafficEngineeringStub]]:
    running = start(Engine(small, driver, debounce=0.01), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    yield running, pb_grpc.TrafficEngineeringStub(channel)
    channel.close()
    running.stop(grace=0.5)


def test_jobs_in_routes_installed_and_forwarding(small: Fabric, service, driver) -> None:
    running, stub = service
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 8))))
    stub.PutJob(pb.PutJobRequest(job=_job(small, "b", range(16, 24))))
    assert running.engine.wait_idle()
    routes = stub.GetRoutes(pb.GetRoutesRequest())
    assert len(routes.entries) > 0
    assignment = running.engine.last_result.assignment
    assert verify(small, driver.emulated, assignment).ok
    status = stub.Status(pb.StatusRequest())
    assert status.installed_entries == len(routes.entries) and status.driver_ok
    assert status.last_solve["ratio"] == pytest.approx(1.0)
    # the certificate of the routes installed, through the API
    assert status.last_solve["certificate_passed"] == 1.0
    assert status.last_solve["certificate_jobs"] == 2.0
    assert status.last_solve["certificate_below_eecmp"] == 0.0
    assert [e.job.id for e in stub.ListJobs(pb.ListJobsRequest()).jobs] == ["a", "b"]
    registry = running.engine.metrics.registry
    value = registry.get_sample_value
    assert value("fabric_te_max_link_utilisation_ratio") == running.engine.last_result.mlu
    assert value("fabric_te_solve_duration_seconds_count", {"kind": "solve"}) >= 1
    assert value("fabric_te_push_duration_seconds_count") >= 1
    assert value("fabric_te_report_to_installed_seconds_count") >= 1
    assert value("fabric_te_pending_changes") == 0
    assert value("fabric_te_entry_operations_total") >= len(routes.entries)
    assert running.engine.wait_predicted()  # the rate prediction follows the settle
    assert value("fabric_te_job_predicted_busbw_ratio", {"job_id": "a"}) == pytest.approx(1.0)
    assert value("fabric_te_links_over_capacity") == 0
    tiers = sum(value("fabric_te_table_entries", {"tier": t}) for t in ("rtsw", "ctsw", "atsw"))
    assert tiers == len(routes.entries)


def test_link_down_moves_only_affected_flows(small: Fabric, service, driver) -> None:
    running, stub = service
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 16))))
    assert running.engine.wait_idle()
    before = running.engine.last_result.assignment
    arcs = before.arcs(small)
    link = int(arcs[np.flatnonzero(arcs[:, 2] >= 0)[0], 1]) // 2
    stub.ReportLinks(pb.ReportLinksRequest(reports=[
        pb.LinkReport(link=small.link_name(link), state=pb.LinkReport.DOWN)]))  # fmt: skip
    assert running.engine.wait_idle()
    after = running.engine.last_result.assignment
    hit = (arcs // 2 == link).any(axis=1)
    assert hit.any() and (after.path[hit] != before.path[hit]).all()
    assert np.array_equal(after.path[~hit], before.path[~hit])
    assert verify(small, driver.emulated, after).ok


def test_watch_gets_snapshot_sync_then_deltas(small: Fabric, service) -> None:
    running, stub = service
    events: list[pb.RouteEvent] = []
    got_delta = threading.Event()
    call = stub.WatchRoutes(pb.WatchRoutesRequest())

    def read() -> None:
        try:
            for event in call:
                events.append(event)
                if event.WhichOneof("event") == "delta":
                    got_delta.set()
        except grpc.RpcError as err:  # the test cancels the stream when done
            assert err.code() == grpc.StatusCode.CANCELLED

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 8))))
    assert got_delta.wait(10)
    call.cancel()
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[:3] == ["snapshot", "sync", "delta"]
    assert events[2].delta.version == events[1].sync.version + 1
    # resuming from the sync version replays the delta, no snapshot
    resumed = stub.WatchRoutes(pb.WatchRoutesRequest(since_version=events[1].sync.version,
                                                     since_epoch=events[1].sync.epoch))
    first = next(resumed)
    resumed.cancel()
    assert first.WhichOneof("event") == "delta"


def test_restart_with_same_inputs_pushes_nothing(small: Fabric, driver) -> None:
    jobs = [_job(small, "a", range(0, 8)), _job(small, "b", range(8, 20))]
    first = Engine(small, driver, debounce=0.01)
    for job in jobs:
        from controller.service.convert import job_from_pb

        first.put_job(job_from_pb(small, job), 0)
    assert first.wait_idle()
    installed = first.snapshot()[1]
    first.close()
    second = Engine(small, driver, debounce=0.01)  # reads the tables back, pushes nothing
    assert second.snapshot()[1] == installed and second.ops_pushed == 0
    for job in jobs:
        second.put_job(job_from_pb(small, job), 0)
    assert second.wait_idle()
    assert second.ops_pushed == 0
    assert second.snapshot()[1] == installed
    second.close()


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (pb.PutJobRequest(job=pb.Job(id="x", hosts=["host-p9-r0-h0"])),
         grpc.StatusCode.INVALID_ARGUMENT, "unknown host 'host-p9-r0-h0'"),
        (pb.PutJobRequest(job=pb.Job(id="x", hosts=["host-p0-r0-h0"], demand_gbps=-5)),
         grpc.StatusCode.INVALID_ARGUMENT, "demand"),
        (pb.PutJobRequest(job=pb.Job(id="x", hosts=["host-p0-r0-h0", "host-p0-r0-h0"])),
         grpc.StatusCode.INVALID_ARGUMENT, "host"),
        (pb.PutJobRequest(job=pb.Job(id="dup", hosts=["host-p0-r0-h0"])),
         grpc.StatusCode.INVALID_ARGUMENT,
         "host-p0-r0-h0 is already in job 'a' (a job takes whole hosts"),
        (pb.PutJobRequest(job=pb.Job(id="a", hosts=["host-p0-r1-h0"]), generation=1),
         grpc.StatusCode.FAILED_PRECONDITION, "generation 1 is not newer than 5"),
        (pb.ReportLinksRequest(reports=[pb.LinkReport(link="rtsw-p0-r0:ctsw-p0-c99",
                                                      state=pb.LinkReport.DOWN)]),
         grpc.StatusCode.INVALID_ARGUMENT, "reports[0].link: unknown link"),
        (pb.ReportLinksRequest(reports=[pb.LinkReport(link="rtsw-p0-r0:ctsw-p0-c1",
                                                      state=pb.LinkReport.DEGRADED,
                                                      fraction=1.5)]),
         grpc.StatusCode.INVALID_ARGUMENT, "reports[0].fraction"),
    ],
)  # fmt: skip
def test_bad_requests_change_nothing(small: Fabric, service, request_, code, message) -> None:
    running, stub = service
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 4)), generation=5))
    assert running.engine.wait_idle()
    version = running.engine.state_version
    method = stub.PutJob if isinstance(request_, pb.PutJobRequest) else stub.ReportLinks
    with pytest.raises(grpc.RpcError) as err:
        method(request_)
    assert err.value.code() == code
    assert message in err.value.details()
    assert running.engine.state_version == version
    assert [e.job.id for e in stub.ListJobs(pb.ListJobsRequest()).jobs] == ["a"]


def test_what_if_solve_pushes_nothing(small: Fabric, service) -> None:
    running, stub = service
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 16))))
    assert running.engine.wait_idle()
    version = stub.GetRoutes(pb.GetRoutesRequest()).version
    link = small.link_name(small.rack_link(0, 0))
    down = pb.LinkReport(link=link, state=pb.LinkReport.DOWN)
    reply = stub.Solve(pb.SolveRequest(links=[down]))
    assert reply.metrics["mlu"] >= reply.metrics["bound"] * (1 - 1e-9)
    assert stub.GetRoutes(pb.GetRoutesRequest()).version == version


def test_stream_link_reports(small: Fabric, service) -> None:
    running, stub = service
    reports = iter([pb.LinkReport(link=small.link_name(small.rack_link(1, c)),
                                  state=pb.LinkReport.DOWN) for c in range(2)])  # fmt: skip
    reply = stub.StreamLinkReports(reports)
    assert reply.accepted == 2
    assert running.engine.wait_idle()


def test_health_and_reflection(service) -> None:
    running, _ = service
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
    assert check.status == health_pb2.HealthCheckResponse.SERVING
    services = ProtoReflectionDescriptorDatabase(channel).get_services()
    assert SERVICE_NAME in services and "grpc.health.v1.Health" in services
    channel.close()


def test_full_snapshot_of_link_health_replaces_earlier_reports(small: Fabric, service) -> None:
    running, stub = service
    a, b = (small.link_name(small.rack_link(0, c)) for c in (0, 1))
    down = pb.LinkReport.DOWN
    stub.ReportLinks(pb.ReportLinksRequest(reports=[pb.LinkReport(link=a, state=down)]))
    stub.ReportLinks(pb.ReportLinksRequest(reports=[pb.LinkReport(link=b, state=down)],
                                           replace_all=True))  # fmt: skip
    assert running.engine.health.down_links().tolist() == [small.rack_link(0, 1)]


def test_advise_and_score_over_grpc(small: Fabric, service) -> None:
    running, stub = service
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 10))))
    assert running.engine.wait_idle()
    request = pb.PlacementRequest(gpus=16, tp=4, avoid_hosts=["host-p0-r6-h0"])
    advice = stub.Advise(pb.AdviseRequest(request=request)).candidates
    assert advice and advice[0].pods == 1 and advice[0].new_job_busbw == 1.0
    assert "host-p0-r6-h0" not in advice[0].hosts
    assert not set(advice[0].hosts) & {small.host_name(h) for h in range(10)}
    scores = stub.Score(pb.ScoreRequest(request=request, placements=[
        pb.Placement(hosts=list(advice[0].hosts)),
        pb.Placement(hosts=[small.host_name(h) for h in (16, 18, 20, 22)])])).scores  # fmt: skip
    assert [list(s.hosts) for s in scores][0] == list(advice[0].hosts)
    assert scores[0].new_job_busbw == advice[0].new_job_busbw
    # a host the request avoids is refused; one with a NIC at half speed is said why
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(pb.ScoreRequest(request=request, placements=[
            pb.Placement(hosts=["host-p0-r6-h0", *advice[0].hosts[1:]])]))  # fmt: skip
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "host-p0-r6-h0 is in the request's avoid_hosts" in err.value.details()
    nic = small.link_name(small.access_link(16 * small.nics_per_host))
    stub.ReportLinks(pb.ReportLinksRequest(reports=[
        pb.LinkReport(link=nic, state=pb.LinkReport.DEGRADED, fraction=0.5)]))  # fmt: skip
    slow = stub.Score(pb.ScoreRequest(request=request, placements=[
        pb.Placement(hosts=[small.host_name(h) for h in (16, 18, 20, 22)])])).scores[0]  # fmt: skip
    assert slow.note.startswith(f"{small.host_name(16)} has a NIC link at 50%")
    with pytest.raises(grpc.RpcError) as err:
        stub.Advise(pb.AdviseRequest(request=pb.PlacementRequest(gpus=4000, tp=4)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "free hosts" in err.value.details()


def test_stream_link_reports_bad_link_changes_nothing(small: Fabric, service) -> None:
    running, stub = service
    version = running.engine.state_version
    good = pb.LinkReport(link=small.link_name(small.rack_link(1, 0)), state=pb.LinkReport.DOWN)
    bad = pb.LinkReport(link="rtsw-p0-r0:nowhere", state=pb.LinkReport.DOWN)
    with pytest.raises(grpc.RpcError) as err:
        stub.StreamLinkReports(iter([good, bad]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("reports[1].link: unknown link")
    assert running.engine.state_version == version
    assert running.engine.health.down_links().tolist() == []


def test_an_lp_time_out_in_solve_leaves_the_solve_to_go_on(small: Fabric, driver) -> None:
    """The LP running out of time fails no solve (it guides a pass and tightens the bound):
    the what-if answers with the routing found without it (no LP figure), and installs
    nothing. Before, the RPC failed with DEADLINE_EXCEEDED."""
    import math

    from controller.solver.solve import SolveOptions

    options = SolveOptions(lp="always", lp_time_limit=1e-9)
    running = start(Engine(small, driver, debounce=0.01, options=options), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        stub = pb_grpc.TrafficEngineeringStub(channel)
        reply = stub.Solve(pb.SolveRequest(extra_jobs=[_job(small, "w", range(0, 16))]))
        assert reply.metrics["flows"] > 0 and math.isnan(reply.metrics["lp_mlu"])
        assert reply.metrics["mlu"] >= reply.metrics["bound"] * (1 - 1e-9)
        assert stub.GetRoutes(pb.GetRoutesRequest()).entries == []
    finally:
        channel.close()
        running.stop(grace=0.5)


def test_status_and_metrics_show_the_certificate_of_what_is_installed(
    small: Fabric, service
) -> None:
    """The case that once left a job at 32% where hashing gave 53%: through the API, every
    job of what is installed is certified against E-ECMP, and Status and /metrics say so."""
    from controller.service.convert import job_to_pb
    from sim.jobmix import random_jobs

    running, stub = service
    jobs = random_jobs(small, seed=3)
    for job in jobs:
        stub.PutJob(pb.PutJobRequest(job=job_to_pb(small, job)))
    down, half = pb.LinkReport.DOWN, pb.LinkReport.DEGRADED
    stub.ReportLinks(pb.ReportLinksRequest(reports=[
        pb.LinkReport(link="rtsw-p0-r0:ctsw-p0-c1", state=down),
        pb.LinkReport(link="rtsw-p0-r1:ctsw-p0-c2", state=half, fraction=0.5),
        pb.LinkReport(link="ctsw-p1-c3:atsw-c3-a0", state=down),
    ]))  # fmt: skip
    assert running.engine.wait_idle(60)
    cert = stub.Status(pb.StatusRequest()).certificate
    assert stub.Status(pb.StatusRequest()).HasField("certificate")
    assert cert.passed and cert.reference == "eecmp" and cert.qps == 16
    assert cert.jobs == len({job.id for job in jobs}) and cert.jobs_checked <= cert.jobs
    assert cert.below["eecmp"] == 0 and cert.worst_ratio["eecmp"] >= 1 - 1e-9
    value = running.engine.metrics.registry.get_sample_value
    assert value("fabric_te_certificate_passed") == 1.0
    assert value("fabric_te_certificate_jobs_below", {"reference": "eecmp"}) == 0
    ratio = value("fabric_te_certificate_worst_ratio", {"reference": "eecmp"})
    assert ratio == pytest.approx(cert.worst_ratio["eecmp"])
    assert value("fabric_te_certificate_duration_seconds_count") >= 1
    assert value("fabric_te_certificate_fallback_jobs") == len(cert.fallback_jobs)
