"""gRPC servicer: thin methods that convert, call the engine and convert back."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from controller.advisor.advise import advise, score_many
from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.errors import InputError
from controller.model.assignment import Assignment
from controller.routes.entries import Entry
from controller.service import convert, route_query
from controller.service.engine import Engine, RouteEvent
from controller.service.errors import mapped


class TrafficEngineering(pb_grpc.TrafficEngineeringServicer):
    """fabric_te.v1.TrafficEngineering over one Engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.fabric = engine.fabric

    @mapped
    def PutJob(self, request: pb.PutJobRequest, context: grpc.ServicerContext) -> pb.PutJobResponse:
        job = convert.job_from_pb(self.fabric, request.job)
        generation, version = self.engine.put_job(job, request.generation)
        return pb.PutJobResponse(generation=generation, state_version=version)

    @mapped
    def DeleteJob(
        self, request: pb.DeleteJobRequest, context: grpc.ServicerContext
    ) -> pb.DeleteJobResponse:
        existed, version = self.engine.delete_job(request.id)
        return pb.DeleteJobResponse(existed=existed, state_version=version)

    @mapped
    def ListJobs(
        self, request: pb.ListJobsRequest, context: grpc.ServicerContext
    ) -> pb.ListJobsResponse:
        entries = [
            pb.JobEntry(job=convert.job_to_pb(self.fabric, job), generation=gen)
            for job, gen in self.engine.jobs()
        ]
        return pb.ListJobsResponse(jobs=entries)

    @mapped
    def ReportLinks(
        self, request: pb.ReportLinksRequest, context: grpc.ServicerContext
    ) -> pb.ReportLinksResponse:
        updates = convert.link_updates(self.fabric, request.reports)
        version = self.engine.report_links(updates, request.replace_all)
        return pb.ReportLinksResponse(accepted=len(request.reports), state_version=version)

    @mapped
    def StreamLinkReports(
        self, request_iterator: Iterator[pb.LinkReport], context: grpc.ServicerContext
    ) -> pb.ReportLinksResponse:
        reports = list(request_iterator)  # applied as one batch, all or nothing
        updates = convert.link_updates(self.fabric, reports)
        version = self.engine.report_links(updates)
        return pb.ReportLinksResponse(accepted=len(reports), state_version=version)

    @mapped
    def GetRoutes(
        self, request: pb.GetRoutesRequest, context: grpc.ServicerContext
    ) -> pb.RouteSnapshot:
        version, entries = self._select(request)
        part, token = route_query.page(entries, version, request.page_size, request.page_token)
        return self._snapshot(version, part, token, len(entries))

    def StreamRoutes(
        self, request: pb.GetRoutesRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.RouteSnapshot]:
        version, parts, total = self._chunks(request, context)
        for part, token in parts:
            yield self._snapshot(version, part, token, total)

    @mapped
    def _chunks(
        self, request: pb.GetRoutesRequest, context: grpc.ServicerContext
    ) -> tuple[int, list[tuple[list[Entry], str]], int]:
        version, entries = self._select(request)
        parts = route_query.chunks(entries, version, request.page_size, request.page_token)
        return version, parts, len(entries)

    def _select(self, request: pb.GetRoutesRequest) -> tuple[int, list[Entry]]:
        hosts = None
        if request.job:
            jobs = {job.id: job for job, _ in self.engine.jobs()}
            if request.job not in jobs:
                raise InputError(f"job: no job {request.job!r}")
            hosts = jobs[request.job].hosts
        query = route_query.RouteQuery.parse(self.fabric, request.switches, hosts)
        version, routes = self.engine.snapshot()
        return version, query.select(routes)

    def _snapshot(
        self, version: int, part: list[Entry], token: str, total: int
    ) -> pb.RouteSnapshot:
        snap = convert.snapshot_to_pb(self.fabric, version, part)
        snap.next_page_token, snap.total_entries = token, total
        return snap

    def WatchRoutes(
        self, request: pb.WatchRoutesRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.RouteEvent]:
        for event in self.engine.watch(request.since_version, alive=context.is_active):
            if event.kind == "snapshot":  # large tables go out in chunks, as StreamRoutes
                entries = list(event.entries)
                for part, token in route_query.chunks(entries, event.version, 0, ""):
                    yield pb.RouteEvent(
                        snapshot=self._snapshot(event.version, part, token, len(entries))
                    )
            else:
                yield self._event(event)

    def _event(self, event: RouteEvent) -> pb.RouteEvent:
        if event.kind == "sync":
            return pb.RouteEvent(sync=pb.Sync(version=event.version))
        delta = convert.delta_to_pb(self.fabric, event.version, event.entries, event.removed)
        return pb.RouteEvent(delta=delta)

    @mapped
    def Solve(self, request: pb.SolveRequest, context: grpc.ServicerContext) -> pb.SolveResponse:
        updates = convert.link_updates(self.fabric, request.links, "links")
        extra = [
            convert.job_from_pb(self.fabric, job, f"extra_jobs[{i}]")
            for i, job in enumerate(request.extra_jobs)
        ]
        return pb.SolveResponse(metrics=self.engine.what_if(updates, extra).metrics())

    @mapped
    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusResponse:
        e = self.engine
        version, routes = e.snapshot()
        last = e.last_result.metrics() if e.last_result is not None else {}
        return pb.StatusResponse(
            fabric=convert.str_map(self.fabric.summary()),
            last_solve=last,
            state_version=e.state_version,
            routes_version=version,
            driver=e.driver_name,
            driver_ok=e.driver_ok,
            installed_entries=len(routes),
            last_error=e.last_error,
            **e.status_fields(),
        )

    @mapped
    def Advise(self, request: pb.AdviseRequest, context: grpc.ServicerContext) -> pb.AdviseResponse:
        req = convert.placement_request_from_pb(self.fabric, request.request)
        jobs = [job for job, _ in self.engine.jobs()]
        advice = advise(self.fabric, self.engine.health, jobs, req, current=self._current())
        return pb.AdviseResponse(candidates=[convert.score_to_pb(self.fabric, s) for s in advice])

    @mapped
    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        req = convert.placement_request_from_pb(self.fabric, request.request)
        placements = [
            convert.placement_from_pb(self.fabric, p, f"placements[{i}]")
            for i, p in enumerate(request.placements)
        ]
        jobs = [job for job, _ in self.engine.jobs()]
        scores = score_many(
            self.fabric, self.engine.health, jobs, placements, req, current=self._current()
        )
        return pb.ScoreResponse(scores=[convert.score_to_pb(self.fabric, s) for s in scores])

    def _current(self) -> Assignment | None:
        """The live assignment, so advice scores against the routes the fabric has."""
        last = self.engine.last_result
        return last.assignment if last is not None else None
