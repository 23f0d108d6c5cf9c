"""Bad requests against a real server on port 0: each is refused with the field as the client
wrote it, and an error reply never commits a change (jobs, link health, routes)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.model import validation
from controller.model.clos import PRESETS, build
from controller.service.engine import Engine
from controller.service.server import Running, start
from sim.driver import EmulatedDriver

FABRIC = build(PRESETS["small"])
LINK = FABRIC.link_name(FABRIC.rack_link(0, 1))
HOSTS = [FABRIC.host_name(h) for h in range(4)]


@pytest.fixture
def service() -> Iterator[tuple[Running, pb_grpc.TrafficEngineeringStub]]:
    running = start(Engine(FABRIC, EmulatedDriver(FABRIC), debounce=0.01), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    stub = pb_grpc.TrafficEngineeringStub(channel)
    stub.PutJob(pb.PutJobRequest(job=pb.Job(id="a", hosts=HOSTS, tp=4)))
    assert running.engine.wait_idle()
    yield running, stub
    channel.close()
    running.stop(grace=0.5)


def _state(running: Running, stub: pb_grpc.TrafficEngineeringStub) -> tuple[object, ...]:
    assert running.engine.wait_idle()
    jobs = [(e.job.SerializeToString(), e.generation)
            for e in stub.ListJobs(pb.ListJobsRequest()).jobs]  # fmt: skip
    routes = stub.GetRoutes(pb.GetRoutesRequest())
    return (running.engine.state_version, jobs, running.engine.health.factor.tobytes(),
            routes.version, routes.SerializeToString())  # fmt: skip


def _refused(call: object, request: object, code: grpc.StatusCode, message: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call(request)  # type: ignore[operator]
    assert err.value.code() == code, err.value.details()
    assert err.value.details().startswith(message), err.value.details()
    return str(err.value.details())


def _job(**fields: object) -> pb.Job:
    base: dict[str, object] = {"id": "x", "hosts": [FABRIC.host_name(8)], "tp": 4}
    return pb.Job(**(base | fields))


BAD_JOBS = [
    (_job(hosts=["host-p9-r0-h0"]), "job.hosts[0]: unknown host 'host-p9-r0-h0'"),
    (_job(hosts=["h"]), "job.hosts[0]: unknown host 'h'"),
    (_job(demand_gbps=float("nan")), "job.demand_gbps: must be a finite number"),
    (_job(demand_gbps=float("inf")), "job.demand_gbps: must be a finite number"),
    (_job(demand_gbps=1e308), "job.demand_gbps: 1e+308 is not within"),
    (_job(demand_gbps=5e-324), "job.demand_gbps: 5e-324 is not within"),
    (_job(channels=2**32 - 1), "job.channels: 4294967295 is not within [1, 64]"),
    (_job(dp=2**32 - 1), "job.dp: 4294967295 is not within"),
    (_job(gpus_per_host=2**32 - 1), "job.gpus_per_host: 4294967295 is not within"),
    (_job(id=""), "job.id: must not be empty"),
    (_job(id="x" * 1000), "job.id: is 1000 characters long"),
    (_job(id="a\nb"), "job.id: 'a\\nb' contains control characters"),
    (_job(collectives=["ring", "ring"]), "job.collectives[1]: pattern 'ring' is listed twice"),
    (_job(collectives=["bcast"]), "job.collectives[0]: unknown pattern 'bcast'"),
    (
        _job(hosts=[FABRIC.host_name(8), HOSTS[1]]),
        f"job.hosts[1]: {HOSTS[1]} is already in job 'a' (a job takes whole hosts, one job a host)",
    ),
]


@pytest.mark.parametrize(("job", "message"), BAD_JOBS)
def test_put_job_names_the_request_field(service, job: pb.Job, message: str) -> None:
    running, stub = service
    before = _state(running, stub)
    started = time.monotonic()
    _refused(stub.PutJob, pb.PutJobRequest(job=job), grpc.StatusCode.INVALID_ARGUMENT, message)
    assert time.monotonic() - started < 5  # refused before any flow is built
    assert _state(running, stub) == before


@pytest.mark.parametrize(("job", "message"), BAD_JOBS[:4])
def test_what_if_solve_names_extra_jobs(service, job: pb.Job, message: str) -> None:
    _, stub = service
    request = pb.SolveRequest(extra_jobs=[job])
    _refused(stub.Solve, request, grpc.StatusCode.INVALID_ARGUMENT,
             message.replace("job.", "extra_jobs[0].", 1))  # fmt: skip


def test_what_if_names_the_request_field_of_a_host_in_two_jobs(service) -> None:
    """A what-if job on a host a running job holds (or another job of the request): the
    request's own field is named, not an index into the controller's combined job list."""
    _, stub = service
    hosts = [FABRIC.host_name(h) for h in range(FABRIC.num_hosts - 4, FABRIC.num_hosts)]
    stub.PutJob(pb.PutJobRequest(job=pb.Job(id="run", hosts=hosts[:2], tp=4)))
    on_run = pb.Job(id="e1", hosts=hosts[1:3], tp=4)
    _refused(stub.Solve, pb.SolveRequest(extra_jobs=[on_run]), grpc.StatusCode.INVALID_ARGUMENT,
             f"extra_jobs[0].hosts: {hosts[1]} is in job 'run' and job 'e1'")  # fmt: skip
    twice = [pb.Job(id="x", hosts=hosts[2:3], tp=4), pb.Job(id="x", hosts=hosts[3:4], tp=4)]
    _refused(stub.Solve, pb.SolveRequest(extra_jobs=twice), grpc.StatusCode.INVALID_ARGUMENT,
             "extra_jobs[1]: job id 'x' is already in extra_jobs[0]")  # fmt: skip
    again = pb.Job(id="run", hosts=hosts[2:3], tp=4)
    _refused(stub.Solve, pb.SolveRequest(extra_jobs=[again]), grpc.StatusCode.INVALID_ARGUMENT,
             "extra_jobs[0]: job id 'run' is already in the controller's jobs")  # fmt: skip
    free = [pb.Job(id="p1", hosts=hosts[2:4], tp=4), pb.Job(id="p2", hosts=hosts[3:4], tp=4)]
    _refused(stub.Solve, pb.SolveRequest(put_jobs=free, preview=True),
             grpc.StatusCode.INVALID_ARGUMENT,
             f"put_jobs[1].hosts: {hosts[3]} is in job 'p1' and job 'p2'")  # fmt: skip


def test_generation_overflow_commits_nothing_and_list_jobs_keeps_working(service) -> None:
    running, stub = service
    before = _state(running, stub)
    job = pb.Job(id="a", hosts=HOSTS, tp=4, channels=2)
    _refused(
        stub.PutJob,
        pb.PutJobRequest(job=job, generation=2**64 - 1),
        grpc.StatusCode.INVALID_ARGUMENT,
        "generation: 18446744073709551615 is not within",
    )
    assert _state(running, stub) == before
    # the largest generation is accepted; the next automatic one would not fit
    reply = stub.PutJob(pb.PutJobRequest(job=job, generation=validation.MAX_GENERATION))
    assert reply.generation == validation.MAX_GENERATION
    after = _state(running, stub)
    moved = pb.Job(id="a", hosts=[FABRIC.host_name(h) for h in range(8, 12)], tp=4)
    _refused(
        stub.PutJob,
        pb.PutJobRequest(job=moved, generation=0),
        grpc.StatusCode.FAILED_PRECONDITION,
        "job 'a': generation 9223372036854775807 is",
    )
    assert _state(running, stub) == after
    entries = stub.ListJobs(pb.ListJobsRequest()).jobs
    assert [(e.job.id, e.generation) for e in entries] == [("a", validation.MAX_GENERATION)]
    assert list(entries[0].job.hosts) == HOSTS


def _report(state: int, fraction: float = 0.0, link: str = LINK) -> pb.LinkReport:
    return pb.LinkReport(link=link, state=state, fraction=fraction)  # type: ignore[arg-type]


UP, DOWN, DEGRADED = pb.LinkReport.UP, pb.LinkReport.DOWN, pb.LinkReport.DEGRADED
OTHER_WAY = ":".join(reversed(LINK.split(":")))


@pytest.mark.parametrize(
    ("reports", "message"),
    [
        ([_report(UP, 2.0)], "reports[0].fraction: 2.0 given with state UP"),
        ([_report(DOWN, 0.5)], "reports[0].fraction: 0.5 given with state DOWN"),
        ([_report(DEGRADED, 5e-324)], "reports[0].fraction: 5e-324 is below the smallest"),
        ([_report(DEGRADED, float("nan"))], "reports[0].fraction: must be a finite number"),
        ([_report(DEGRADED, -0.5)], "reports[0].fraction: -0.5 is not within"),
        ([_report(DEGRADED, 1.0)], "reports[0].fraction: 1.0 is not within (0, 1)"),
        ([_report(DEGRADED, 0.0)], "reports[0].fraction: 0.0 is not within (0, 1)"),
        ([_report(DOWN), _report(UP, link=OTHER_WAY)],
         f"reports[1].link: '{OTHER_WAY}' is the same link as reports[0].link"),
        ([_report(DOWN, link="x" * 10_000)], "reports[0].link: is 10000 characters long"),
        ([_report(7)], "reports[0].state: must be UP, DOWN or DEGRADED"),
        ([_report(DEGRADED, 0.5, link="ctsw-p0-c1")],
         "reports[0]: 'ctsw-p0-c1' is a switch: it is drained (DOWN"),
        ([_report(DOWN, link="ctsw-p0-c1"), _report(UP, link="rtsw-p0-r0")],
         "reports[1].link: switch 'rtsw-p0-r0' has link rtsw-p0-r0:ctsw-p0-c1, reported "
         "otherwise in reports[0]"),
        # one switch drained and brought back in one request: said as such (it read
        # "has link rtsw-p0-r0:ctsw-p0-c0, reported otherwise")
        ([_report(DOWN, link="rtsw-p0-r0"), _report(UP, link="rtsw-p0-r0")],
         "reports[1].link: switch 'rtsw-p0-r0' is given twice (also in reports[0])"),
        ([_report(DOWN, link="rtsw-p0-r0"), _report(DOWN, link="rtsw-p0-r0")],
         "reports[1].link: switch 'rtsw-p0-r0' is given twice (also in reports[0])"),
        # a switch and one of its links: it read "is the same link as reports[0].link"
        ([_report(DOWN, link="ctsw-p0-c1"), _report(DOWN, link=LINK)],
         f"reports[1].link: '{LINK}' is a link of switch 'ctsw-p0-c1', reported in "
         "reports[0]; report the switch or its links, not both"),
    ],
)  # fmt: skip
def test_link_reports_are_checked(service, reports: list[pb.LinkReport], message: str) -> None:
    running, stub = service
    before = _state(running, stub)
    _refused(stub.ReportLinks, pb.ReportLinksRequest(reports=reports),
             grpc.StatusCode.INVALID_ARGUMENT, message)  # fmt: skip
    _refused(stub.StreamLinkReports, iter(reports), grpc.StatusCode.INVALID_ARGUMENT, message)
    _refused(stub.Solve, pb.SolveRequest(links=reports), grpc.StatusCode.INVALID_ARGUMENT,
             message.replace("reports", "links"))  # fmt: skip
    assert _state(running, stub) == before


def test_a_switch_reported_down_is_drained_and_up_brought_back(service) -> None:
    """A switch's name in a link report (tectl link SWITCH=drain, SWITCH=up): every link
    of it down, then up; what `--fail SWITCH=drain` does offline."""
    from controller.model.health import parse_health

    running, stub = service
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DOWN, link="ctsw-p0-c1")]))
    drained = parse_health(FABRIC, ["ctsw-p0-c1=drain"]).factor
    assert (running.engine.health.factor == drained).all()
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(UP, link="ctsw-p0-c1")]))
    assert (running.engine.health.factor == 1.0).all()


def test_a_good_degraded_report_is_accepted(service) -> None:
    running, stub = service
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DEGRADED, 0.25), _report(UP, 1.0,
        link=FABRIC.link_name(FABRIC.rack_link(1, 1)))]))  # fmt: skip
    assert running.engine.health.factor[FABRIC.rack_link(0, 1)] == 0.25


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.PlacementRequest(gpus=2**32 - 1, tp=4), "request.gpus: 4294967295 is not within"),
        (pb.PlacementRequest(gpus=16, tp=4, top=2**32 - 1), "request.top: 4294967295 is not"),
        (pb.PlacementRequest(gpus=16, tp=4, avoid_hosts=["h"]), "request.avoid_hosts[0]: "),
        (pb.PlacementRequest(gpus=16, tp=4, pattern="\x00"), "request.pattern: '\\x00' contains"),
    ],
)
def test_advise_bounds(service, request_: pb.PlacementRequest, message: str) -> None:
    _, stub = service
    _refused(stub.Advise, pb.AdviseRequest(request=request_), grpc.StatusCode.INVALID_ARGUMENT,
             message)  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.PlacementRequest(gpus=6, tp=2), "request.gpus: 6 is not a positive multiple of 4"),
        (pb.PlacementRequest(tp=4), "request.gpus: 0 is not a positive multiple"),
        (pb.PlacementRequest(gpus=16, pattern="mesh"), "request.pattern: 'mesh' is not one of"),
        (pb.PlacementRequest(gpus=16, same_pod="x"), "request.same_pod: 'x' is not one of"),
        (pb.PlacementRequest(gpus=16, hosts=4), "request: give gpus or hosts, not both"),
        (pb.PlacementRequest(hosts=2**32 - 1), "request.hosts: 4294967295 is not within"),
    ],
)
def test_advise_and_score_name_the_request_field(
    service, request_: pb.PlacementRequest, message: str
) -> None:
    _, stub = service
    _refused(stub.Advise, pb.AdviseRequest(request=request_), grpc.StatusCode.INVALID_ARGUMENT,
             message)  # fmt: skip
    _refused(stub.Score, pb.ScoreRequest(request=request_), grpc.StatusCode.INVALID_ARGUMENT,
             message)  # fmt: skip


@pytest.mark.parametrize(("rpc", "request_", "message"), [
    ("DeleteJob", pb.DeleteJobRequest(id=""), "id: must not be empty"),
    ("DeleteJob", pb.DeleteJobRequest(id="a\nb"), "id: 'a\\nb' contains control characters"),
    ("Solve", pb.SolveRequest(preview=True, put_jobs=[_job(id="n"), _job(id="n")]),
     "put_jobs[1].id: 'n' is also put_jobs[0].id"),
    ("Solve", pb.SolveRequest(preview=True, put_jobs=[_job(id="a")], delete_jobs=["a"]),
     "delete_jobs[0]: 'a' is also put_jobs[0].id"),
    ("Solve", pb.SolveRequest(preview=True, delete_jobs=[""]),
     "delete_jobs[0]: must not be empty"),
])  # fmt: skip
def test_job_ids_are_taken_as_put_job_takes_them(service, rpc: str, request_,
                                                  message: str) -> None:  # fmt: skip
    """DeleteJob and a preview's ids: checked as PutJob checks a job's, once each."""
    running, stub = service
    before = _state(running, stub)
    _refused(getattr(stub, rpc), request_, grpc.StatusCode.INVALID_ARGUMENT, message)
    assert _state(running, stub) == before


def test_the_end_of_a_drain_gives_each_link_back_the_state_it_has_beneath(service) -> None:
    """The defect: a link down on its own, then its switch drained and brought back, came
    back up: routes went over a dead link. The state remembers what each drained link is
    beneath the drain (as it was, or as reported meanwhile), and a link that both its
    ends' drains hold stays down until the last one ends."""
    running, stub = service
    dead = FABRIC.link_name(FABRIC.rack_link(0, 1))  # rtsw-p0-r0 : ctsw-p0-c1
    slow = FABRIC.link_name(FABRIC.rack_link(1, 1))
    fixed = FABRIC.link_name(FABRIC.rack_link(2, 1))
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DOWN, link=dead),
                                                    _report(DOWN, link=fixed)]))  # fmt: skip
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DOWN, link="ctsw-p0-c1")]))
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DOWN, link="rtsw-p0-r0")]))
    # reports while drained change what the link is beneath, not what it carries
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DEGRADED, 0.5, link=slow),
                                                    _report(UP, link=fixed)]))  # fmt: skip
    factor = running.engine.health.factor
    drained = FABRIC.switch_links("ctsw-p0-c1")
    assert (factor[drained] == 0).all()
    # Status names the drains, and each held link with what it gets back
    from controller.cli.service import status_text
    from controller.service.client import Client

    status = Client(stub).status()
    assert status["drained"] == ["ctsw-p0-c1", "rtsw-p0-r0"]
    by_name = {link["link"]: link for link in status["links"]}
    assert by_name[dead]["drained_by"] == "rtsw-p0-r0,ctsw-p0-c1"
    assert by_name[dead]["beneath"] == 0.0 and by_name[slow]["beneath"] == 0.5
    assert by_name[fixed]["beneath"] == 1.0
    assert "links       ctsw-p0-c1, rtsw-p0-r0 drained (" in status_text(status)
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(UP, link="ctsw-p0-c1")]))
    factor = running.engine.health.factor
    assert factor[FABRIC.link_by_name(slow)] == 0.5 and factor[FABRIC.link_by_name(fixed)] == 1
    assert factor[FABRIC.link_by_name(dead)] == 0  # down beneath, and rtsw-p0-r0 still drained
    others = [k for k in drained.tolist() if FABRIC.link_name(k).split(":")[0] != "rtsw-p0-r0"
              and k not in {FABRIC.link_by_name(n) for n in (slow, fixed)}]  # fmt: skip
    assert (factor[others] == 1).all()
    # a link no drain holds: what it has once none does is its own state ('beneath' read
    # 0.0 for it, which says "down when the drain ends")
    by_name = {link["link"]: link for link in Client(stub).status()["links"]}
    assert (by_name[slow]["drained_by"], by_name[slow]["fraction"], by_name[slow]["beneath"]) \
        == ("", 0.5, 0.5)
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(UP, link="rtsw-p0-r0")]))
    factor = running.engine.health.factor
    assert factor[FABRIC.link_by_name(dead)] == 0  # down on its own: stays down
    assert (factor[FABRIC.switch_links("rtsw-p0-r0")] > 0).sum() == FABRIC.switch_links(
        "rtsw-p0-r0").size - 1  # fmt: skip
    # a switch not drained brought back: every link of it up, as before
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(UP, link="ctsw-p0-c1")]))
    assert running.engine.health.factor[FABRIC.link_by_name(dead)] == 1


def test_a_full_report_replaces_link_states_beneath_a_drain_and_keeps_it(service) -> None:
    """replace_all (a monitor's complete set of links not up) is not an operator's end of a
    drain: the switch stays drained; what its links get back is the report's."""
    running, stub = service
    dead = FABRIC.link_name(FABRIC.rack_link(0, 1))  # rtsw-p0-r0 : ctsw-p0-c1
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DOWN, link="ctsw-p0-c1")]))
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(DOWN, link=dead)],
                                           replace_all=True))  # fmt: skip
    health = running.engine.health
    assert (health.factor[FABRIC.switch_links("ctsw-p0-c1")] == 0).all()
    assert health.beneath[FABRIC.link_by_name(dead)] == 0.0
    stub.ReportLinks(pb.ReportLinksRequest(reports=[_report(UP, link="ctsw-p0-c1")]))
    factor = running.engine.health.factor
    assert factor[FABRIC.link_by_name(dead)] == 0 and (factor == 0).sum() == 1
