"""The service's limits, each exercised through the API: streams, rates, sizes, costs,
malformed bytes, slow watchers and shutdown."""

from __future__ import annotations

import logging
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.model.fabric import Fabric
from controller.service.client import Client, Delta, InSync, Resumed, Snapshot, Target
from controller.service.engine import Engine
from controller.service.limits import Limits
from controller.service.server import SERVICE_NAME, Running, start
from controller.solver.solve import SolveOptions
from sim.driver import EmulatedDriver
from sim.processes import free_port


def _job(fabric: Fabric, job_id: str, hosts: range, **kw: object) -> pb.Job:
    return pb.Job(id=job_id, hosts=[fabric.host_name(h) for h in hosts], tp=4, **kw)


def _serve(fabric: Fabric, limits: Limits) -> tuple[Running, grpc.Channel]:
    running = start(Engine(fabric, EmulatedDriver(fabric), debounce=0.01), "127.0.0.1:0",
                    limits=limits)  # fmt: skip
    return running, grpc.insecure_channel(f"127.0.0.1:{running.port}")


@pytest.fixture
def limited(
    small: Fabric, request: pytest.FixtureRequest
) -> Iterator[tuple[Running, grpc.Channel]]:
    running, channel = _serve(small, getattr(request, "param", Limits()))
    yield running, channel
    channel.close()
    running.stop(grace=0.5)


def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()  # type: ignore[operator]
    return err.value.code()


@pytest.mark.parametrize("limited", [Limits(workers=2, streams=6, streams_per_identity=6)],
                         indirect=True)  # fmt: skip
def test_idle_streams_do_not_starve_unary_calls(small: Fabric, limited) -> None:
    """The defect: 16 idle WatchRoutes/StreamLinkReports took every worker thread."""
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    watches = [stub.WatchRoutes(pb.WatchRoutesRequest()) for _ in range(3)]
    for w in watches:
        assert next(w).WhichOneof("event") == "snapshot"
    idle = [stub.StreamLinkReports.future(iter(_Forever())) for _ in range(3)]
    deadline = time.monotonic() + 10
    while running.guard.streams.open() < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running.guard.streams.open() == 6
    # the stream budget is full: one more is refused at once, unary calls still answer
    extra = stub.WatchRoutes(pb.WatchRoutesRequest())
    assert _code(lambda: next(extra)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    for _ in range(5):
        assert stub.Status(pb.StatusRequest(), timeout=5).driver_ok
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 8))), timeout=5)
    for w in watches:
        w.cancel()
    for f in idle:
        f.cancel()


class _Forever:
    """A client stream that never sends (an idle StreamLinkReports)."""

    def __iter__(self) -> _Forever:
        return self

    def __next__(self) -> pb.LinkReport:
        time.sleep(60)
        raise StopIteration


def test_watchers_per_client_are_capped(limited) -> None:
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    watches = [stub.WatchRoutes(pb.WatchRoutesRequest()) for _ in range(4)]
    for w in watches:
        next(w)
    fifth = stub.WatchRoutes(pb.WatchRoutesRequest())
    with pytest.raises(grpc.RpcError) as err:
        next(fifth)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "anonymous already holds 4 streams" in err.value.details()
    watches[0].cancel()
    deadline = time.monotonic() + 10
    while running.guard.streams.open() > 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert next(stub.WatchRoutes(pb.WatchRoutesRequest())).WhichOneof("event") == "snapshot"
    sample = running.engine.metrics.registry.get_sample_value
    assert sample("fabric_te_grpc_requests_total",
                  {"method": "WatchRoutes", "code": "RESOURCE_EXHAUSTED"}) == 1  # fmt: skip
    cancelled = {"method": "WatchRoutes", "code": "CANCELLED"}
    while sample("fabric_te_grpc_requests_total", cancelled) is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert sample("fabric_te_grpc_requests_total", cancelled) == 1


@pytest.mark.parametrize("limited", [Limits(write_rate=0.5, write_burst=3)], indirect=True)
def test_writes_are_rate_limited_with_retry_advice(small: Fabric, limited) -> None:
    """The defect: 2,000 link reports from one client in 2.6 s, all accepted."""
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    for _ in range(3):
        stub.DeleteJob(pb.DeleteJobRequest(id="none"), timeout=5)
    link = small.link_name(small.rack_link(0, 1))
    report = pb.ReportLinksRequest(reports=[pb.LinkReport(link=link, state=pb.LinkReport.DOWN)])
    version = running.engine.state_version
    with pytest.raises(grpc.RpcError) as err:
        stub.ReportLinks(report, timeout=5)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "retry after" in err.value.details()
    retry_ms = dict(err.value.trailing_metadata())["retry-after-ms"]
    assert 0 < int(retry_ms) <= 2001
    assert running.engine.state_version == version  # nothing committed
    assert stub.Status(pb.StatusRequest(), timeout=5).driver_ok  # reads are not limited


@pytest.mark.parametrize("limited", [Limits(write_rate=20.0, write_burst=3)], indirect=True)
def test_the_client_paces_its_writes_to_the_rate_limit(small: Fabric, limited) -> None:
    """The defect: `tectl job put` of a file of more jobs than the burst failed at the
    burst's end (RESOURCE_EXHAUSTED, 'retry after 0.02 s'), every time it was run. The
    client waits as the refusal says and sends again; other refusals are not retried."""
    from controller.service.client import Client

    running, channel = limited
    client = Client(pb_grpc.TrafficEngineeringStub(channel), timeout=10)
    hosts = [small.host_name(h) for h in range(small.num_hosts)]
    for i in range(8):  # more than the burst of 3: paced at 20 writes/s
        assert client.put_job({"id": f"j{i}", "hosts": hosts[2 * i : 2 * i + 2]}) == 1
    assert {j.id for j in client.list_jobs()} == {f"j{i}" for i in range(8)}
    with pytest.raises(Exception, match="unknown host"):  # refused, not retried
        client.put_job({"id": "bad", "hosts": ["no-such-host"]})


def test_malformed_bytes_are_invalid_argument_without_traceback(
    limited, caplog: pytest.LogCaptureFixture
) -> None:
    """The defect: INTERNAL with a traceback per call."""
    running, channel = limited
    junk = b"\x0a\xff\xff\xff\xff\x0f"  # field 1, length-delimited, length past the end
    with caplog.at_level(logging.DEBUG):
        for method in ("PutJob", "ReportLinks", "Solve", "Advise", "Status", "DeleteJob"):
            call = channel.unary_unary(f"/{SERVICE_NAME}/{method}")
            code = _code(lambda call=call: call(junk, timeout=5))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, method
        watch = channel.unary_stream(f"/{SERVICE_NAME}/WatchRoutes")
        assert _code(lambda: next(watch(junk, timeout=5))) == grpc.StatusCode.INVALID_ARGUMENT
        stream = channel.stream_unary(f"/{SERVICE_NAME}/StreamLinkReports")
        with pytest.raises(grpc.RpcError) as err:
            stream(iter([junk, junk]), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "message 0" in err.value.details()
    assert "Traceback" not in caplog.text and "Exception" not in caplog.text
    assert running.engine.state_version == 0


def test_oversized_put_job_names_the_field_without_parsing_it(
    limited, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2 MB PutJob (over its 1 MiB limit) names `job.hosts` from the wire lengths, and
    the request is never parsed; 10 MB is stopped by the server-wide ceiling (the largest
    method limit) from the message header, before its body is read."""
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    parsed: list[int] = []
    real = running.guard._parse

    def counting(method: str, ours: bool, raw: bytes, parse: Any, descriptor: Any = None) -> Any:
        return real(method, ours, raw, lambda b: parsed.append(len(b)) or parse(b), descriptor)

    monkeypatch.setattr(running.guard, "_parse", counting)
    job = pb.Job(id="big", hosts=["h" * 100] * 20_000)
    with pytest.raises(grpc.RpcError) as err:
        stub.PutJob(pb.PutJobRequest(job=job), timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "job.hosts" in err.value.details() and "PutJob" in err.value.details()
    assert parsed == []  # refused on its length; the hint came from the tags alone
    job = pb.Job(id="big", hosts=["h" * 100] * 100_000)
    with pytest.raises(grpc.RpcError) as err:
        stub.PutJob(pb.PutJobRequest(job=job), timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in err.value.details() and parsed == []
    assert not running.engine.jobs()


@pytest.mark.parametrize("limited", [Limits(whatif_max_flows=2_000, whatif_max_gpus=128)],
                         indirect=True)  # fmt: skip
def test_what_if_cost_is_capped_before_any_work(small: Fabric, limited) -> None:
    """The defect: a what-if all-to-all Solve on every host took 70 s and 1.7 GB; Advise for
    2,048 GPUs all-to-all 24 s."""
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    everyone = _job(small, "all", range(small.num_hosts), collectives=["alltoall"])
    with pytest.raises(grpc.RpcError) as err:
        stub.Solve(pb.SolveRequest(extra_jobs=[everyone]), timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "flows" in err.value.details() and "cap" in err.value.details()
    advise = pb.AdviseRequest(request=pb.PlacementRequest(gpus=256, pattern="alltoall"))
    with pytest.raises(grpc.RpcError) as err:
        stub.Advise(advise, timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "request.gpus" in err.value.details()
    advise = pb.AdviseRequest(request=pb.PlacementRequest(gpus=128, pattern="alltoall"))
    assert _code(lambda: stub.Advise(advise, timeout=30)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    eight = _job(small, "s", range(0, 8))
    assert stub.Solve(pb.SolveRequest(extra_jobs=[eight]), timeout=60).metrics["mlu"] >= 0


@pytest.mark.parametrize("limited", [Limits(whatif_seconds=0.005)], indirect=True)
def test_what_if_deadline(small: Fabric, limited) -> None:
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    code = _code(lambda: stub.Solve(pb.SolveRequest(extra_jobs=[_job(small, "s", range(0, 8))])))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED


class _StallingRelay:
    """A TCP relay between a client and the server that can stop reading from the server:
    a watcher on a stalled network, whose unread data backs up into the server."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = port
        self.paused, self.closed = threading.Event(), threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        down, _ = self.listener.accept()
        up = socket.socket()
        up.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        up.connect(("127.0.0.1", self.target))
        with down, up, self.listener:
            while not self.closed.is_set():
                readable = [down] if self.paused.is_set() else [down, up]
                for s in select.select(readable, [], [], 0.05)[0]:
                    data = s.recv(65536)
                    if not data:
                        self.closed.set()
                        break
                    (up if s is down else down).sendall(data)


def test_slow_watcher_is_dropped_with_a_resumable_version(small: Fabric) -> None:
    """A watcher that stops reading is dropped (ABORTED, `resume-version` trailer) rather
    than buffered; resuming from that version gets the deltas it missed."""
    engine = Engine(small, EmulatedDriver(small), debounce=0.0,
                    options=SolveOptions(lp="never", qps=1))  # fmt: skip
    running = start(engine, "127.0.0.1:0", limits=Limits(watch_max_lag=2))
    relay = _StallingRelay(running.port)
    direct = pb_grpc.TrafficEngineeringStub(grpc.insecure_channel(f"127.0.0.1:{running.port}"))
    slow = pb_grpc.TrafficEngineeringStub(grpc.insecure_channel(f"127.0.0.1:{relay.port}"))
    try:
        watch = slow.WatchRoutes(pb.WatchRoutesRequest(), timeout=120)
        assert [next(watch).WhichOneof("event") for _ in range(2)] == ["snapshot", "sync"]
        relay.paused.set()
        for i in range(40):  # ~6 MB of deltas: more than the socket buffers hold
            hosts = range(0, 16) if i % 2 == 0 else range(16, 32)
            direct.PutJob(pb.PutJobRequest(job=_job(small, "a", hosts, collectives=["alltoall"])))
            assert engine.wait_idle(30)
        relay.paused.clear()
        seen = []
        with pytest.raises(grpc.RpcError) as err:
            for event in watch:
                seen.append(event.delta.version)
        assert err.value.code() == grpc.StatusCode.ABORTED, err.value.details()
        trailer = dict(err.value.trailing_metadata())
        resume, epoch = int(trailer["resume-version"]), trailer["resume-epoch"]
        assert epoch == engine.routes_epoch
        assert seen and resume == seen[-1] < engine.routes_version
        assert f"since_version={resume}" in err.value.details()
        again = direct.WatchRoutes(pb.WatchRoutesRequest(since_version=resume, since_epoch=epoch),
                                   timeout=30)  # fmt: skip
        rest = [next(again) for _ in range(engine.routes_version - resume)]
        assert [e.delta.version for e in rest] == list(range(resume + 1, engine.routes_version + 1))
        again.cancel()
    finally:
        relay.closed.set()
        running.stop(grace=0.5)


def test_shutdown_completes_after_malformed_stream_messages() -> None:
    """The defect: after two malformed StreamLinkReports messages SIGTERM never completed."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "tiny", "--insecure",
         "--listen", f"127.0.0.1:{port}", "--metrics-port", "0", "--grace", "1"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        stream = channel.stream_unary(f"/{SERVICE_NAME}/StreamLinkReports")
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as err:
                stream(iter([b"\xff\xff", b"\x0a\x05ab"]), timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        idle = stream.future(iter(_Forever()))  # and one stream left open
        channel.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        err_text = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in err_text
        idle.cancel()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_flows_of_a_new_job_are_built_outside_the_engine_lock(
    pod: Fabric, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect: PutJob built the job's flows holding the engine lock (2^32-1 channels froze
    the API for 115 s). The channel count is now refused at once; a large valid job still
    takes a while to check, and a link report sent meanwhile commits first. The job's flow
    building is held until the report has answered, so the order does not depend on how
    busy the machine is: built under the lock, the report would time out."""
    import controller.service.intake as intake_module

    building, release = threading.Event(), threading.Event()
    real = intake_module.job_flows

    def held(fabric: Fabric, job: Any) -> Any:
        if job.id == "wide" and not release.is_set():
            building.set()
            release.wait(30)
        return real(fabric, job)

    monkeypatch.setattr(intake_module, "job_flows", held)
    running = start(Engine(pod, EmulatedDriver(pod), debounce=3.0), "127.0.0.1:0")
    stub = pb_grpc.TrafficEngineeringStub(grpc.insecure_channel(f"127.0.0.1:{running.port}"))
    hosts = [pod.host_name(h) for h in range(pod.num_hosts)]
    put: dict[str, int] = {}
    worker = None
    try:
        with pytest.raises(grpc.RpcError) as err:
            stub.PutJob(pb.PutJobRequest(job=pb.Job(id="w", hosts=hosts[:2], channels=2**32 - 1)),
                        timeout=10)  # fmt: skip
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "channels" in err.value.details()

        def put_job() -> None:
            job = pb.Job(id="wide", hosts=hosts[:64], collectives=["alltoall"])
            put["version"] = stub.PutJob(pb.PutJobRequest(job=job), timeout=60).state_version

        worker = threading.Thread(target=put_job)
        worker.start()
        assert building.wait(30)  # the PutJob is in the server, building its flows
        link = pod.link_name(pod.rack_link(0, 1))
        report = stub.ReportLinks(pb.ReportLinksRequest(
            reports=[pb.LinkReport(link=link, state=pb.LinkReport.DOWN)]), timeout=10)  # fmt: skip
        release.set()
        worker.join(60)
        assert report.state_version < put["version"]
        stub.DeleteJob(pb.DeleteJobRequest(id="wide"), timeout=10)
    finally:
        release.set()
        if worker is not None:
            worker.join(60)
        running.stop(grace=0.5)


def test_generation_overflow_commits_nothing(small: Fabric, limited) -> None:
    """The defect: generation 2^64-1 then 0 replied INVALID_ARGUMENT yet moved the job, and
    ListJobs then failed for every client. Neither the out-of-range generation nor the put
    that would pass the largest one may change anything."""
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 8)), generation=2**64 - 1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and not running.engine.jobs()
    top = 2**63 - 1  # the largest generation the input rules accept
    stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 8)), generation=top), timeout=10)
    assert running.engine.wait_idle()
    before = (running.engine.state_version, running.engine.snapshot())
    with pytest.raises(grpc.RpcError) as err:
        stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(8, 16))), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert running.engine.wait_idle()
    assert (running.engine.state_version, running.engine.snapshot()) == before
    [entry] = stub.ListJobs(pb.ListJobsRequest(), timeout=10).jobs
    assert entry.generation == top and entry.job.hosts[0] == small.host_name(0)


def test_what_if_deadline_and_slots_hold_while_abandoned_work_runs(pod: Fabric) -> None:
    """The defect: a what-if Solve on a large all-to-all ran 70 s, three at once 139 s each.
    Past its deadline the caller gets DEADLINE_EXCEEDED; the abandoned solve keeps its slot
    until it ends, so another what-if meanwhile is RESOURCE_EXHAUSTED with retry advice."""
    limits = Limits(whatif_seconds=0.2, whatif_slots=1)
    running = start(Engine(pod, EmulatedDriver(pod)), "127.0.0.1:0", limits=limits)
    stub = pb_grpc.TrafficEngineeringStub(grpc.insecure_channel(f"127.0.0.1:{running.port}"))
    job = pb.Job(id="x", hosts=[pod.host_name(h) for h in range(64)], collectives=["alltoall"])
    request = pb.SolveRequest(extra_jobs=[job])  # 32K flows: about a second of solving
    try:
        start_t = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.Solve(request, timeout=60)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "0.2 s" in err.value.details() and time.monotonic() - start_t < 10
        with pytest.raises(grpc.RpcError) as err:
            stub.Solve(pb.SolveRequest(), timeout=60)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert int(dict(err.value.trailing_metadata())["retry-after-ms"]) > 0
        deadline = time.monotonic() + 60
        while True:  # once the abandoned solve ends, its slot is free again
            try:
                stub.Solve(pb.SolveRequest(), timeout=60)
                break
            except grpc.RpcError as e:
                assert e.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    grpc.StatusCode.DEADLINE_EXCEEDED)  # fmt: skip
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        running.stop(grace=0.5)


def test_empty_link_reports_change_nothing(small: Fabric, limited) -> None:
    """An empty ReportLinks (or StreamLinkReports, or a report of what is already so) is a
    no-op: the state version stays, nothing is written."""
    _, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    version = stub.Status(pb.StatusRequest(), timeout=10).state_version
    reply = stub.ReportLinks(pb.ReportLinksRequest(), timeout=10)
    assert (reply.accepted, reply.state_version) == (0, version)
    assert stub.StreamLinkReports(iter(()), timeout=10).state_version == version
    up = pb.LinkReport(link=small.link_name(small.rack_base), state=pb.LinkReport.UP)
    same = stub.ReportLinks(pb.ReportLinksRequest(reports=[up]), timeout=10)
    assert same.state_version == version
    assert stub.Status(pb.StatusRequest(), timeout=10).state_version == version
    down = pb.LinkReport(link=small.link_name(small.rack_base), state=pb.LinkReport.DOWN)
    after = stub.ReportLinks(pb.ReportLinksRequest(reports=[down]), timeout=10).state_version
    assert after == version + 1  # a real change still counts


@pytest.mark.parametrize("limited", [Limits(stream_max_bytes=200_000)], indirect=True)
def test_a_link_report_stream_is_capped_in_bytes(small: Fabric, limited) -> None:
    """The defect: a StreamLinkReports was held whole until it ended, 100,000 messages of
    up to 64 KiB each (6.5 GB from one stream, four streams per identity): its bytes in all
    are capped, and the stream ends RESOURCE_EXHAUSTED naming the cap."""
    running, channel = limited
    stub = pb_grpc.TrafficEngineeringStub(channel)
    big = (pb.LinkReport(link="x" * 50_000, state=pb.LinkReport.DOWN) for _ in range(100))
    with pytest.raises(grpc.RpcError) as err:
        stub.StreamLinkReports(big, timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "200,000 bytes in one stream (message 3)" in err.value.details()
    assert running.engine.state_version == 0
    down = pb.LinkReport(link=small.link_name(small.rack_base), state=pb.LinkReport.DOWN)
    assert stub.StreamLinkReports(iter([down]), timeout=10).accepted == 1  # under it: applied


def test_a_watcher_that_stops_reading_is_ended_and_its_client_resumes(small: Fabric) -> None:
    """The defect: a watcher whose application stopped reading (its connection still
    alive) was never dropped. gRPC holds the handler in its send once the stream's window
    is full, so the watch's own lag check never ran again, and the stream held its slot
    and thread for as long as the client lived. The guard ends it after
    `stream_idle_seconds` with no message taken (ABORTED); the client resumes from the last
    version it received whole, so no change is lost across the gap."""
    engine = Engine(small, EmulatedDriver(small), debounce=0.0,
                    options=SolveOptions(lp="never", qps=1))  # fmt: skip
    running = start(engine, "127.0.0.1:0",
                    limits=Limits(watch_max_lag=100_000, stream_idle_seconds=1.0))  # fmt: skip
    target = f"127.0.0.1:{running.port}"
    direct = pb_grpc.TrafficEngineeringStub(grpc.insecure_channel(target))
    client = Client.connect(Target(address=target, insecure=True), timeout=30)
    sample = running.engine.metrics.registry.get_sample_value
    aborted = {"method": "WatchRoutes", "code": "ABORTED"}
    try:
        events = client.watch_routes()
        assert isinstance(next(events), Snapshot)
        while not isinstance(next(events), InSync):
            pass
        for i in range(40):  # ~6 MB of deltas, none read: more than the stream's window
            hosts = range(0, 16) if i % 2 == 0 else range(16, 32)
            direct.PutJob(pb.PutJobRequest(job=_job(small, "a", hosts, collectives=["alltoall"])))
            assert engine.wait_idle(30)
        deadline = time.monotonic() + 30
        while running.guard.streams.open() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.guard.streams.open() == 0  # its slot is free while it still reads nothing
        assert sample("fabric_te_grpc_requests_total", aborted) == 1
        versions, resumed = [], []
        for event in events:
            if isinstance(event, Resumed):
                resumed.append(event.version)
            elif isinstance(event, Delta):
                versions.append(event.version)
            if versions and versions[-1] == engine.routes_version:
                break
        assert resumed and resumed[0] < engine.routes_version
        assert versions == list(range(2, engine.routes_version + 1))  # none lost, none twice
    finally:
        running.stop(grace=0.5)


def test_a_route_stream_whose_client_stops_reading_is_ended(small: Fabric) -> None:
    """StreamRoutes, as a watch: a client that takes nothing for `stream_idle_seconds` while
    the table is sent is ended (DEADLINE_EXCEEDED) and its slot freed."""
    engine = Engine(small, EmulatedDriver(small), debounce=0.0,
                    options=SolveOptions(lp="never", qps=1))  # fmt: skip
    running = start(engine, "127.0.0.1:0", limits=Limits(stream_idle_seconds=1.0))
    # no window growth: the client takes ~64 KB unread, far less than the table's ~0.5 MB
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}",
                                    options=[("grpc.http2.bdp_probe", 0)])  # fmt: skip
    stub = pb_grpc.TrafficEngineeringStub(channel)
    sample = running.engine.metrics.registry.get_sample_value
    try:
        stub.PutJob(pb.PutJobRequest(job=_job(small, "a", range(0, 32), collectives=["alltoall"])))
        assert engine.wait_idle(30) and len(engine.installed) > 4_000
        stream = stub.StreamRoutes(pb.GetRoutesRequest(page_size=1), timeout=60)
        assert next(stream).entries  # then nothing more is read
        deadline = time.monotonic() + 30
        while running.guard.streams.open() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.guard.streams.open() == 0
        ended = {"method": "StreamRoutes", "code": "DEADLINE_EXCEEDED"}
        assert sample("fabric_te_grpc_requests_total", ended) == 1
        stream.cancel()
    finally:
        channel.close()
        running.stop(grace=0.5)
