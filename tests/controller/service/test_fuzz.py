"""Fuzzing every RPC of a running server (plaintext, tiny fabric) with hypothesis.

Asserted for every request: the status is one the API documents; a rejected request
changes neither the desired state nor the installed routes; the server logs no traceback;
and the process's memory stays bounded. `make test` runs 400 derandomised examples; `make
fuzz` (FABRIC_TE_FUZZ_EXAMPLES) many more, freshly drawn.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.limits import Limits
from controller.service.server import SERVICE_NAME, Running, start
from sim.driver import EmulatedDriver

FABRIC: Fabric = build(PRESETS["tiny"])
_ASKED = int(os.environ.get("FABRIC_TE_FUZZ_EXAMPLES", "0"))  # make fuzz: more, fresh draws
EXAMPLES = _ASKED or 400
OK, BAD, STALE, LIMIT, LATE = (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT,
                               grpc.StatusCode.FAILED_PRECONDITION,
                               grpc.StatusCode.RESOURCE_EXHAUSTED,
                               grpc.StatusCode.DEADLINE_EXCEEDED)  # fmt: skip
# the status codes each method documents (proto comments, docs/security.md)
DOCUMENTED = {
    "PutJob": {OK, BAD, STALE, LIMIT},
    "DeleteJob": {OK, BAD, LIMIT},
    "ListJobs": {OK, BAD, LIMIT},
    "ReportLinks": {OK, BAD, LIMIT},
    "StreamLinkReports": {OK, BAD, LIMIT},
    "GetRoutes": {OK, BAD, STALE, LIMIT},
    "StreamRoutes": {OK, BAD, STALE, LIMIT},
    "WatchRoutes": {OK, BAD, LIMIT},
    "Solve": {OK, BAD, LIMIT, LATE},
    "Status": {OK, BAD, LIMIT},
    "Advise": {OK, BAD, LIMIT, LATE},
    "Score": {OK, BAD, LIMIT, LATE},
}

host_names = [FABRIC.host_name(h) for h in range(FABRIC.num_hosts)]
link_names = [FABRIC.link_name(i) for i in range(FABRIC.num_links)]
names = st.one_of(st.sampled_from(host_names), st.sampled_from(link_names),
                  st.text(max_size=12), st.just("h" * 5000))  # fmt: skip
uint32 = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 8, 2**31, 2**32 - 1]),
                   st.integers(0, 2**32 - 1))  # fmt: skip
uint64 = st.one_of(st.sampled_from([0, 1, 2, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
doubles = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0, 1e308, 5e-324]),
                    st.floats(allow_nan=True, allow_infinity=True))  # fmt: skip
patterns = st.one_of(st.sampled_from(["ring", "alltoall", "pipeline"]), st.text(max_size=8))


@st.composite
def jobs(draw: st.DrawFn) -> pb.Job:
    return pb.Job(
        id=draw(st.one_of(st.sampled_from(["a", "b"]), st.text(max_size=8))),
        hosts=draw(st.lists(st.one_of(st.sampled_from(host_names), names), max_size=10)),
        dp=draw(uint32), pp=draw(uint32), tp=draw(uint32),
        collectives=draw(st.lists(patterns, max_size=3)),
        channels=draw(uint32),  # 2^32-1 once froze the API building flows
        demand_gbps=draw(doubles), gpus_per_host=draw(uint32),
    )  # fmt: skip


@st.composite
def plausible_jobs(draw: st.DrawFn) -> pb.Job:
    """Jobs that are often valid, so that accepted changes are fuzzed too."""
    return pb.Job(
        id=draw(st.sampled_from(["a", "b", "c"])),
        hosts=draw(st.lists(st.sampled_from(host_names), min_size=1, max_size=4, unique=True)),
        tp=draw(st.sampled_from([0, 1, 2])),
        collectives=draw(st.lists(st.sampled_from(["ring", "alltoall", "pipeline"]),
                                  max_size=2, unique=True)),
        channels=draw(st.integers(0, 4)),
        demand_gbps=draw(st.one_of(st.just(0.0), st.floats(1.0, 800.0))),
    )  # fmt: skip


reports = st.builds(pb.LinkReport, link=names, state=st.integers(0, 5), fraction=doubles)
placement_requests = st.builds(
    pb.PlacementRequest, gpus=uint32, dp=uint32, pp=uint32, tp=uint32, pattern=patterns,
    same_pod=st.one_of(st.sampled_from(["require", "prefer", "any"]), st.text(max_size=6)),
    avoid_hosts=st.lists(names, max_size=4), top=uint32,
)  # fmt: skip
route_queries = st.builds(
    pb.GetRoutesRequest, switches=st.lists(st.one_of(st.sampled_from(
        [FABRIC.rtsw_name(0), FABRIC.ctsw_name(0)]), names), max_size=3),
    job=st.one_of(st.just(""), st.sampled_from(["a", "b"]), names),
    page_size=uint32, page_token=st.one_of(st.just(""), st.text(max_size=40)),
)  # fmt: skip
messages = {
    "PutJob": st.builds(pb.PutJobRequest, job=st.one_of(jobs(), plausible_jobs()),
                        generation=st.one_of(uint64, st.integers(0, 3))),
    "DeleteJob": st.builds(pb.DeleteJobRequest, id=st.one_of(st.just("a"), st.text())),
    "ListJobs": st.just(pb.ListJobsRequest()),
    "ReportLinks": st.builds(pb.ReportLinksRequest, reports=st.lists(reports, max_size=6),
                             replace_all=st.booleans()),  # fmt: skip
    "StreamLinkReports": st.lists(reports, max_size=6),
    "GetRoutes": route_queries,
    "StreamRoutes": route_queries,
    "WatchRoutes": st.builds(pb.WatchRoutesRequest, since_version=uint64),
    "Solve": st.builds(pb.SolveRequest, links=st.lists(reports, max_size=3),
                       extra_jobs=st.lists(jobs(), max_size=2)),  # fmt: skip
    "Status": st.just(pb.StatusRequest()),
    "Advise": st.builds(pb.AdviseRequest, request=placement_requests),
    "Score": st.builds(pb.ScoreRequest, request=placement_requests, placements=st.lists(
        st.builds(pb.Placement, hosts=st.lists(names, max_size=6)), max_size=3)),
}  # fmt: skip
raw_bytes = st.binary(max_size=64)
calls = st.one_of(
    *[st.tuples(st.just(m), s) for m, s in messages.items()],
    st.tuples(st.sampled_from(sorted(DOCUMENTED)), raw_bytes),  # junk (or lucky) bytes
)


class _Problems(logging.Handler):
    """Every log record with a traceback, or at ERROR and above."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


RSS_AT_START: list[float] = []


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Running, grpc.Channel, _Problems]]:
    RSS_AT_START.append(_rss_mb())
    problems = _Problems()
    logging.getLogger().addHandler(problems)
    engine = Engine(FABRIC, EmulatedDriver(FABRIC), debounce=0.0)
    running = start(engine, "127.0.0.1:0", limits=Limits(write_rate=1e6, write_burst=10**6))
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    yield running, channel, problems
    channel.close()
    running.stop(grace=0.5)
    logging.getLogger().removeHandler(problems)


def _call(channel: grpc.Channel, method: str, request: Any) -> grpc.StatusCode:
    path = f"/{SERVICE_NAME}/{method}"
    raw = isinstance(request, bytes)
    ser = None if raw else (lambda m: m.SerializeToString())
    try:
        if method == "WatchRoutes" and raw:  # lucky bytes may parse: read one event
            stream = channel.unary_stream(path)(request, timeout=10)
            next(stream, None)
            stream.cancel()
        elif method == "WatchRoutes":
            stream = channel.unary_stream(path, request_serializer=ser,
                                          response_deserializer=pb.RouteEvent.FromString)(
                request, timeout=10)  # fmt: skip
            for event in stream:  # up to the sync marker: the watch is then live
                if event.WhichOneof("event") == "sync":
                    break
            stream.cancel()
        elif method == "StreamRoutes":
            stream = channel.unary_stream(path, request_serializer=ser)(request, timeout=10)
            for _ in stream:
                pass
        elif method == "StreamLinkReports":
            items = [request] if raw else request
            channel.stream_unary(path, request_serializer=ser)(iter(items), timeout=10)
        else:
            channel.unary_unary(path, request_serializer=ser)(request, timeout=30)
    except grpc.RpcError as err:
        return err.code()
    return OK


def _state(running: Running) -> tuple[int, list[Any], Any]:
    engine = running.engine
    assert engine.wait_idle(30)
    return engine.state_version, engine.jobs(), engine.snapshot()[1]


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not _ASKED,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(call=calls)  # fmt: skip
def test_every_rpc_fuzzed(served, call: tuple[str, Any]) -> None:
    running, channel, problems = served
    method, request = call
    before = _state(running)
    code = _call(channel, method, request)
    assert code in DOCUMENTED[method] | {LIMIT}, f"{method} -> {code}: {request!r:.300}"
    if code != OK:
        assert _state(running) == before, f"rejected {method} changed the state"
    assert not problems.records, [r.getMessage() for r in problems.records][:3]


def test_fuzzing_kept_memory_bounded(served) -> None:
    """After the fuzz run: the server answers and the process did not balloon."""
    running, channel, problems = served
    assert _call(channel, "Status", pb.StatusRequest()) == OK
    grown = _rss_mb() - RSS_AT_START[0]
    assert grown < 300, f"RSS grew by {grown:.0f} MB over the fuzz run"
    assert not problems.records
