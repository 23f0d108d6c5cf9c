"""A write whose answer etcd never sent (etcd stopped with SIGSTOP mid-write): the caller is
told the outcome is unknown, never that nothing changed; the write is settled before the
answer when etcd comes back in time; and a retry of the same write succeeds either way."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.etcd import EtcdStore
from controller.service.replica import Replica
from controller.service.server import Running, start
from sim.driver import EmulatedDriver


@pytest.fixture
def served(tiny: Fabric, etcd) -> Iterator[tuple[Running, pb_grpc.TrafficEngineeringStub]]:  # type: ignore[no-untyped-def]
    replica = Replica(tiny, EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny"),
                      replica_id="r0")  # fmt: skip
    engine = Engine(tiny, EmulatedDriver(tiny), debounce=0.0, reconcile_interval=60,
                    replica=replica)  # fmt: skip
    running = start(engine, "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield running, pb_grpc.TrafficEngineeringStub(channel)
    finally:
        channel.close()
        running.stop(grace=0.5)


def _put(fabric: Fabric, generation: int) -> pb.PutJobRequest:
    hosts = [fabric.host_name(h) for h in (0, 1)]
    return pb.PutJobRequest(job=pb.Job(id="a", hosts=hosts, tp=2), generation=generation)


def _generation(stub: pb_grpc.TrafficEngineeringStub) -> int:
    jobs = stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs
    return jobs[0].generation if jobs else 0


def test_unanswered_write_is_unknown_and_its_retry_succeeds(tiny: Fabric, etcd, served) -> None:  # type: ignore[no-untyped-def]
    running, stub = served
    assert stub.PutJob(_put(tiny, 1), timeout=10).generation == 1
    assert etcd.proc is not None
    etcd.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.PutJob(_put(tiny, 2), timeout=30)
        took = time.monotonic() - t0
    finally:
        etcd.proc.send_signal(signal.SIGCONT)
    # never UNAVAILABLE ("nothing changed"): etcd holds the write and may apply it
    assert err.value.code() == grpc.StatusCode.UNKNOWN, err.value.details()
    assert "outcome unknown" in (err.value.details() or "") and took < 10
    # etcd, resumed, may apply the queued write (at once: the state goes to generation 2 on
    # its own within a watch's delay) or drop it with its cancelled call; either is right
    deadline = time.monotonic() + 3
    while _generation(stub) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    landed = _generation(stub) == 2
    # the client's retry of the same write succeeds whether or not the first one landed
    reply = stub.PutJob(_put(tiny, 2), timeout=10)
    assert reply.generation == 2 and _generation(stub) == 2
    version = reply.state_version
    assert stub.PutJob(_put(tiny, 2), timeout=10).state_version == version  # no change again
    # a different job at the same generation is still refused
    other = _put(tiny, 2)
    other.job.hosts[:] = [tiny.host_name(h) for h in (2, 3)]
    with pytest.raises(grpc.RpcError) as stale:
        stub.PutJob(other, timeout=10)
    assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert landed or reply.generation == 2


def test_write_settled_by_its_guarded_resend_when_etcd_returns(tiny: Fabric, etcd, served) -> None:  # type: ignore[no-untyped-def]
    """etcd resumes after the first attempt timed out (2 s) but within the resend's 1 s:
    the answer is the truth (OK, generation 2), found by the guarded resend."""
    running, stub = served
    assert stub.PutJob(_put(tiny, 1), timeout=10).generation == 1
    assert etcd.proc is not None
    etcd.proc.send_signal(signal.SIGSTOP)
    resume = threading.Timer(2.3, etcd.proc.send_signal, (signal.SIGCONT,))
    resume.start()
    try:
        reply = stub.PutJob(_put(tiny, 2), timeout=30)
    finally:
        resume.join()
        etcd.proc.send_signal(signal.SIGCONT)
    assert reply.generation == 2
    assert _generation(stub) == 2
