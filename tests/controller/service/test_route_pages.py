"""GetRoutes filters and pages, and StreamRoutes chunks: a real server on port 0."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.cli.main import main
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.server import Running, start
from sim.driver import EmulatedDriver


def _key(e: pb.RouteEntry) -> tuple[str, str, str, str, int]:
    return (e.switch, e.in_port, e.dst_host, e.next_hop,
            e.qp_bucket if e.HasField("qp_bucket") else -1)  # fmt: skip


@pytest.fixture
def service(small: Fabric) -> Iterator[tuple[Running, pb_grpc.TrafficEngineeringStub]]:
    running = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    stub = pb_grpc.TrafficEngineeringStub(channel)
    hosts = [small.host_name(h) for h in range(small.num_hosts)]
    stub.PutJob(pb.PutJobRequest(job=pb.Job(id="a", hosts=hosts[:12], tp=4)))
    stub.PutJob(pb.PutJobRequest(job=pb.Job(id="b", hosts=hosts[16:28], tp=4)))
    assert running.engine.wait_idle()
    yield running, stub
    channel.close()
    running.stop(grace=0.5)


def test_pages_and_chunks_add_up_to_the_snapshot(service) -> None:
    _, stub = service
    full = stub.GetRoutes(pb.GetRoutesRequest())
    assert full.total_entries == len(full.entries) > 20 and not full.next_page_token
    paged, token = [], ""
    while True:
        page = stub.GetRoutes(pb.GetRoutesRequest(page_size=7, page_token=token))
        assert len(page.entries) <= 7 and page.version == full.version
        paged += page.entries
        token = page.next_page_token
        if not token:
            break
    assert [_key(e) for e in paged] == [_key(e) for e in full.entries]
    chunks = list(stub.StreamRoutes(pb.GetRoutesRequest(page_size=9)))
    assert len(chunks) == -(-len(full.entries) // 9)
    assert all(c.total_entries == full.total_entries for c in chunks)
    assert [_key(e) for c in chunks for e in c.entries] == [_key(e) for e in full.entries]


def test_filters_by_switch_and_job(small: Fabric, service) -> None:
    running, stub = service
    full = stub.GetRoutes(pb.GetRoutesRequest()).entries
    switch = full[0].switch
    only = stub.GetRoutes(pb.GetRoutesRequest(switches=[switch])).entries
    assert only and {e.switch for e in only} == {switch}
    assert len(only) == sum(e.switch == switch for e in full)
    job_a = {small.host_name(h) for h in range(12)}
    mine = stub.GetRoutes(pb.GetRoutesRequest(job="a")).entries
    assert mine and {e.dst_host for e in mine} <= job_a
    assert len(mine) == sum(e.dst_host in job_a for e in full)
    for request, code in [
        (pb.GetRoutesRequest(switches=["host-p0-r0-h0"]), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.GetRoutesRequest(job="nope"), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.GetRoutesRequest(page_token="garbage"), grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        with pytest.raises(grpc.RpcError) as err:
            stub.GetRoutes(request)
        assert err.value.code() == code
        with pytest.raises(grpc.RpcError) as err:
            list(stub.StreamRoutes(request))
        assert err.value.code() == code


def test_a_page_token_from_an_older_version_is_refused(service) -> None:
    running, stub = service
    first = stub.GetRoutes(pb.GetRoutesRequest(page_size=5))
    stub.DeleteJob(pb.DeleteJobRequest(id="b"))
    assert running.engine.wait_idle()
    with pytest.raises(grpc.RpcError) as err:
        stub.GetRoutes(pb.GetRoutesRequest(page_size=5, page_token=first.next_page_token))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "start again" in (err.value.details() or "")


def test_a_page_token_is_good_only_for_the_filters_it_was_issued_for(service) -> None:
    """A token is an offset into one selection: asked with other filters it is refused
    (it was read as an offset there, skipping entries without a word); with the same
    filters, the next page follows; the page size may change."""
    _, stub = service
    full = stub.GetRoutes(pb.GetRoutesRequest()).entries
    switch = full[0].switch
    first = stub.GetRoutes(pb.GetRoutesRequest(page_size=2))
    for other in (pb.GetRoutesRequest(switches=[switch]), pb.GetRoutesRequest(job="a")):
        other.page_token = first.next_page_token
        with pytest.raises(grpc.RpcError) as err:
            stub.GetRoutes(other)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "issued for other filters" in (err.value.details() or "")
    mine = stub.GetRoutes(pb.GetRoutesRequest(switches=[switch], page_size=1))
    assert mine.next_page_token
    nxt = stub.GetRoutes(pb.GetRoutesRequest(switches=[switch], page_size=5,
                                             page_token=mine.next_page_token))  # fmt: skip
    assert [_key(e) for e in list(mine.entries) + list(nxt.entries)][:2] == [
        _key(e) for e in full if e.switch == switch][:2]


def test_routes_show_streams_and_watch_ends_without_a_traceback(service) -> None:
    running, _ = service
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["routes", "show", "--chunk", "5", "--switch", "rtsw-p0-r0", *server]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("# routes version") and len(lines) > 1
    assert all(ln.startswith("rtsw-p0-r0\t") for ln in lines[1:])
    assert f"{len(lines) - 1} entries" in lines[0]

    codes: list[int] = []
    out, err = io.StringIO(), io.StringIO()

    def watch() -> None:
        with redirect_stdout(out), redirect_stderr(err):
            codes.append(main(["routes", "show", "--watch", *server]))

    thread = threading.Thread(target=watch)
    thread.start()
    deadline = threading.Event()
    for _ in range(50):  # until the watch is in sync
        if "in sync" in out.getvalue():
            break
        deadline.wait(0.1)
    running.server.stop(0)  # the server goes away under the watch
    thread.join(timeout=10)
    assert not thread.is_alive() and codes and codes[0] in (0, 2)
    assert "Traceback" not in err.getvalue()


def test_watch_sends_a_large_snapshot_in_chunks(service, monkeypatch) -> None:
    from controller.service import route_query

    monkeypatch.setattr(route_query, "STREAM_CHUNK", 5)
    _, stub = service
    full = stub.GetRoutes(pb.GetRoutesRequest())
    call = stub.WatchRoutes(pb.WatchRoutesRequest())
    chunks = []
    for event in call:
        if event.WhichOneof("event") == "sync":
            break
        chunks.append(event.snapshot)
    call.cancel()
    assert len(chunks) == -(-len(full.entries) // 5)
    assert all(c.next_page_token for c in chunks[:-1]) and not chunks[-1].next_page_token
    assert all(c.total_entries == len(full.entries) for c in chunks)
    assert [_key(e) for c in chunks for e in c.entries] == [_key(e) for e in full.entries]


def _events(stub: pb_grpc.TrafficEngineeringStub, since: int, epoch: str) -> Iterator[str]:
    """The kinds of a watch's events, with the sync's version and epoch."""
    for event in stub.WatchRoutes(pb.WatchRoutesRequest(since_version=since, since_epoch=epoch)):
        kind = event.WhichOneof("event")
        yield f"sync {event.sync.version} {event.sync.epoch}" if kind == "sync" else kind


def test_a_watch_resumes_by_version_and_epoch_and_a_restarted_service_sends_a_snapshot(
    small: Fabric, service
) -> None:
    """Resumed with the epoch of its sync, a watch gets only the deltas after its version;
    a controller started again counts versions from 1 (its own epoch), so the same version
    and the old epoch get a snapshot, never "in sync" with a table they never saw."""
    running, stub = service
    watch = _events(stub, 0, "")
    assert next(watch) == "snapshot"
    _, version, epoch = next(watch).split()
    assert epoch == running.engine.routes_epoch and len(epoch) == 16
    watch.close()
    assert stub.GetRoutes(pb.GetRoutesRequest()).epoch == epoch  # a watch may resume from it
    stub.DeleteJob(pb.DeleteJobRequest(id="b"))
    assert running.engine.wait_idle()
    watch = _events(stub, int(version), epoch)
    assert next(watch) == "delta"
    assert next(watch).startswith("sync ")
    watch.close()
    watch = _events(stub, int(version), "another")  # an epoch not this process's
    assert next(watch) == "snapshot"
    watch.close()

    again = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{again.port}")
    try:
        other = pb_grpc.TrafficEngineeringStub(channel)
        hosts = [small.host_name(h) for h in range(small.num_hosts)]
        other.PutJob(pb.PutJobRequest(job=pb.Job(id="c", hosts=hosts[4:12], tp=4)))
        assert again.engine.wait_idle()
        now = again.engine.routes_version
        assert again.engine.routes_epoch != epoch
        watch = _events(other, now, epoch)  # a version it has, from the other epoch
        assert next(watch) == "snapshot" and next(watch).split()[1:] == [
            str(now), again.engine.routes_epoch]
        watch.close()
        page = other.GetRoutes(pb.GetRoutesRequest(page_size=3))
        with pytest.raises(grpc.RpcError) as err:  # a page token of the first service
            other.GetRoutes(pb.GetRoutesRequest(page_size=3, page_token=stub.GetRoutes(
                pb.GetRoutesRequest(page_size=3)).next_page_token))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert page.next_page_token
    finally:
        channel.close()
        again.stop(grace=0.5)



def test_a_watch_of_an_unknown_switch_is_refused_not_silent(service) -> None:
    """`tectl routes show --watch --switch NAME` filters on the client: a typo printed a
    snapshot of nothing and waited forever. The name is asked of the server first."""
    running, _ = service
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["routes", "show", "--watch", "--switch", "rtsw-p9-r9", *server])
    assert code != 0 and "unknown switch 'rtsw-p9-r9'" in err.getvalue(), err.getvalue()
    assert "snapshot" not in out.getvalue()
