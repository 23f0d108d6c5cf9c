"""gRPC servicer: thin methods that convert, call the engine and convert back.

Authorization, rate and size limits are applied before these methods run (`guard`); the
what-if methods (Solve, Advise, Score) check their cost cap here, once the request is
converted and before any work, and run under `Limits` slots with a deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc

from controller.advisor.advise import Request, advise, score_many
from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.errors import InputError, JobError, LimitError
from controller.model import validation
from controller.model.assignment import Assignment
from controller.model.counts import Counts
from controller.routes.tables import Entry, RouteSet
from controller.service import convert, route_query, route_upload
from controller.service.engine import Engine, RouteEvent
from controller.service.errors import mapped
from controller.service.limits import Limits, Slots, check_flows
from controller.service.resilience import Sweeps
from controller.service.restored import status_metrics
from controller.solver import SolveOptions

T = TypeVar("T")
RESUME_VERSION_KEY = "resume-version"  # trailing metadata of a dropped watch
RESUME_EPOCH_KEY = "resume-epoch"  # ... and the routes epoch of that version


class TrafficEngineering(pb_grpc.TrafficEngineeringServicer):
    """fabric_te.v1.TrafficEngineering over one Engine."""

    def __init__(self, engine: Engine, limits: Limits | None = None) -> None:
        self.engine = engine
        self.fabric = engine.fabric
        self.limits = limits or Limits()
        self.slots = Slots(self.limits.whatif_slots)
        self.sweeps = Sweeps(self.limits.sweep_workers, self.limits.sweep_seconds)

    def _bounded(self, context: grpc.ServicerContext, what: str, fn: Callable[[float], T]) -> T:
        """Run `fn(seconds)` in a what-if slot, by the server's or the client's deadline."""
        seconds = self.limits.whatif_seconds
        remaining = context.time_remaining()
        if remaining is not None:
            seconds = min(seconds, remaining - 0.05)
        return self.slots.run(lambda: fn(seconds), seconds, what)

    @mapped
    def PutJob(self, request: pb.PutJobRequest, context: grpc.ServicerContext) -> pb.PutJobResponse:
        job = convert.job_from_pb(self.fabric, request.job)
        generation, version = self.engine.put_job(job, request.generation)
        return pb.PutJobResponse(generation=generation, state_version=version)

    @mapped
    def DeleteJob(
        self, request: pb.DeleteJobRequest, context: grpc.ServicerContext
    ) -> pb.DeleteJobResponse:
        validation.text(request.id, "id", JobError)  # as PutJob takes a job's id
        existed, version = self.engine.delete_job(request.id)
        return pb.DeleteJobResponse(existed=existed, state_version=version)

    @mapped
    def ListJobs(
        self, request: pb.ListJobsRequest, context: grpc.ServicerContext
    ) -> pb.ListJobsResponse:
        figures, fabric = self.engine.job_figures(), self.fabric
        entries = [
            pb.JobEntry(job=convert.job_to_pb(fabric, job), generation=gen,
                        figures=convert.job_figures_to_pb(fabric, figures.get(job.id)))  # fmt: skip
            for job, gen in self.engine.jobs()
        ]
        return pb.ListJobsResponse(jobs=entries)

    @mapped
    def ReportLinks(
        self, request: pb.ReportLinksRequest, context: grpc.ServicerContext
    ) -> pb.ReportLinksResponse:
        if not request.reports and not request.replace_all:  # nothing to change: no write
            return pb.ReportLinksResponse(accepted=0, state_version=self.engine.state_version)
        updates, switches = convert.link_reports(self.fabric, request.reports)
        version = self.engine.report_links(updates, request.replace_all, switches)
        return pb.ReportLinksResponse(accepted=len(request.reports), state_version=version)

    @mapped
    def StreamLinkReports(
        self, request_iterator: Iterator[pb.LinkReport], context: grpc.ServicerContext
    ) -> pb.ReportLinksResponse:
        reports = list(request_iterator)  # applied as one batch, all or nothing
        if not reports:  # an empty stream changes nothing: no write
            return pb.ReportLinksResponse(accepted=0, state_version=self.engine.state_version)
        updates, switches = convert.link_reports(self.fabric, reports)
        version = self.engine.report_links(updates, switches=switches)
        return pb.ReportLinksResponse(accepted=len(reports), state_version=version)

    @mapped
    def GetRoutes(
        self, request: pb.GetRoutesRequest, context: grpc.ServicerContext
    ) -> pb.RouteSnapshot:
        version, entries = self._select(request)
        part, token = route_query.page(entries, version, request.page_size, request.page_token,
                                       self.engine.routes_epoch, _scope(request))  # fmt: skip
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
    ) -> tuple[int, Iterator[tuple[list[Entry], str]], int]:
        version, entries = self._select(request)
        parts = route_query.chunks(entries, version, request.page_size, request.page_token,
                                   self.engine.routes_epoch, _scope(request))  # fmt: skip
        return version, parts, len(entries)

    def _select(self, request: pb.GetRoutesRequest) -> tuple[int, route_query.Selection]:
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
        snap.epoch = self.engine.routes_epoch  # one per process: a watch resumes from it
        return snap

    def WatchRoutes(
        self, request: pb.WatchRoutesRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.RouteEvent]:
        watch = self.engine.watch(
            request.since_version, alive=context.is_active, max_lag=self.limits.watch_max_lag,
            epoch=request.since_epoch,
        )  # fmt: skip
        for event in watch:
            if event.kind == "behind":  # dropped rather than buffered: the client resumes
                context.set_trailing_metadata(((RESUME_VERSION_KEY, str(event.version)),
                                               (RESUME_EPOCH_KEY, event.epoch)))  # fmt: skip
                context.abort(grpc.StatusCode.ABORTED,
                              "this watcher fell behind the route changes; resume with "
                              f"since_version={event.version} "
                              f"since_epoch={event.epoch}")  # fmt: skip
            if event.kind == "snapshot":  # large tables go out in chunks, as StreamRoutes
                entries = (
                    route_query.Selection.of(event.entries)
                    if isinstance(event.entries, RouteSet)
                    else list(event.entries)
                )
                for part, token in route_query.chunks(entries, event.version, 0, "",
                                                      event.epoch):  # fmt: skip
                    yield pb.RouteEvent(
                        snapshot=self._snapshot(event.version, part, token, len(entries)))
            else:
                yield self._event(event)

    def _event(self, event: RouteEvent) -> pb.RouteEvent:
        if event.kind == "sync":
            return pb.RouteEvent(sync=pb.Sync(version=event.version, epoch=event.epoch))
        delta = convert.delta_to_pb(self.fabric, event.version, event.entries, event.removed)
        return pb.RouteEvent(delta=delta)

    @mapped
    def Solve(self, request: pb.SolveRequest, context: grpc.ServicerContext) -> pb.SolveResponse:
        updates, switches = convert.link_reports(self.fabric, request.links, "links")
        extra = [
            convert.job_from_pb(self.fabric, job, f"extra_jobs[{i}]")
            for i, job in enumerate(request.extra_jobs)
        ]
        put = [convert.job_from_pb(self.fabric, job, f"put_jobs[{i}]")
               for i, job in enumerate(request.put_jobs)]  # fmt: skip
        delete = list(request.delete_jobs)
        for i, job_id in enumerate(delete):
            validation.text(job_id, f"delete_jobs[{i}]", JobError)
        named: dict[str, str] = {}  # an id once over put_jobs and delete_jobs
        for where, job_id in [*((f"put_jobs[{i}].id", j.id) for i, j in enumerate(put)),
                              *((f"delete_jobs[{i}]", d) for i, d in enumerate(delete))]:
            if job_id in named:
                raise JobError(f"{job_id!r} is also {named[job_id]}", field=where)
            named[job_id] = where
        gone = {job.id for job in put} | set(delete)
        kept = [job for job, _ in self.engine.jobs() if job.id not in gone]
        jobs = kept + extra + put
        # a host in two jobs, named by the request's field (not the combined list's index)
        owner = {h: job.id for job in kept for h in job.hosts}
        for where, job in [*((f"extra_jobs[{i}]", j) for i, j in enumerate(extra)),
                           *((f"put_jobs[{i}]", j) for i, j in enumerate(put))]:  # fmt: skip
            clash = next((h for h in job.hosts if h in owner), None)
            if clash is not None:
                raise JobError(f"{self.fabric.host_name(clash)} is in job {owner[clash]!r} and "
                               f"job {job.id!r}", field=f"{where}.hosts")  # fmt: skip
            owner.update(dict.fromkeys(job.hosts, job.id))
        check_flows(self.fabric, jobs, self.limits.whatif_max_flows,
                    "Solve: jobs + extra_jobs + put_jobs")  # fmt: skip

        def options(seconds: float) -> SolveOptions:
            o = self.engine.options
            return dataclasses.replace(o, lp_time_limit=min(o.lp_time_limit, max(0.1, seconds)))

        if not request.preview:
            metrics = self._bounded(context, "Solve", lambda s: self.engine.what_if(
                updates, extra, options(s), put=put, delete=delete,
                switches=switches).metrics())  # fmt: skip
            return pb.SolveResponse(metrics=metrics)
        if extra:
            raise InputError("extra_jobs: a preview takes put_jobs (created or replaced)")
        seen = self._bounded(context, "Solve", lambda s: self.engine.preview(
            updates, put, delete, options(s), switches))  # fmt: skip
        metrics = seen.result.metrics()
        metrics["subflows"], metrics["flows"] = metrics["flows"], float(seen.plan.flows)
        return pb.SolveResponse(
            metrics=metrics, flows=seen.plan.flows,
            plan=convert.plan_to_pb(seen.plan, True, self.engine.routes_version),
            flows_moved=seen.flows_moved, jobs_affected=seen.jobs_affected,
            certificate=convert.certificate_to_pb(seen.result.certificate),
        )  # fmt: skip

    @mapped
    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusResponse:
        e = self.engine
        version, routes = e.snapshot()
        result = e.last_result  # replaced whole by the worker: read once
        last = status_metrics(result) if result is not None else {}
        if result is not None:  # the solver's "flows" are its rows: subflows
            counts = Counts.of(result.assignment.flows)
            last["subflows"], last["flows"] = last["flows"], float(counts.flows)
        return pb.StatusResponse(
            fabric=convert.str_map(self.fabric.summary()),
            last_solve=last,
            state_version=e.state_version,
            routes_version=version,
            driver=e.driver_name,
            driver_ok=e.driver_ok,
            installed_entries=len(routes),
            last_error=e.last_error,
            links=[pb.LinkState(link=self.fabric.link_name(k), fraction=f, drained_by=by,
                                beneath=under) for k, f, by, under in e.links_not_up()],
            drained=e.drained(),  # fmt: skip
            certificate=convert.certificate_to_pb(e.certificate),
            held=convert.held_to_pb(e.intake.held),
            precomputed=convert.precomputed_to_pb(e.precomputer.fields(), e.precomputer.enabled,
                                                  e.precomputed_hits, e.precomputer.widest()),
            **e.status_fields(),
        )

    @mapped
    def Advise(self, request: pb.AdviseRequest, context: grpc.ServicerContext) -> pb.AdviseResponse:
        req = convert.placement_request_from_pb(self.fabric, request.request)
        jobs = [job for job, _ in self.engine.jobs()]
        self._check_request(req, "Advise")
        health, current = self.engine.health, self._current()
        advice = self._bounded(
            context, "Advise", lambda _: advise(self.fabric, health, jobs, req, current=current)
        )
        return pb.AdviseResponse(candidates=[convert.score_to_pb(self.fabric, s) for s in advice])

    @mapped
    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        req = convert.placement_request_from_pb(self.fabric, request.request)
        placements = [
            convert.placement_from_pb(self.fabric, p, f"placements[{i}]")
            for i, p in enumerate(request.placements)
        ]
        if len(placements) > self.limits.whatif_max_placements:
            raise LimitError(f"placements: {len(placements)} over the cap of "
                             f"{self.limits.whatif_max_placements} per Score call")  # fmt: skip
        self._check_request(req, "Score")
        jobs = [job for job, _ in self.engine.jobs()]
        health, current = self.engine.health, self._current()
        scores = self._bounded(context, "Score", lambda _: score_many(
            self.fabric, health, jobs, placements, req, current=current))  # fmt: skip
        return pb.ScoreResponse(scores=[convert.score_to_pb(self.fabric, s) for s in scores])

    @mapped
    def ApplyRoutes(
        self, request: pb.ApplyRoutesRequest, context: grpc.ServicerContext
    ) -> pb.RoutePlan:
        assignment, routes = route_upload.read(self.fabric, request.name, request.content)
        view = self.engine.apply_routes(assignment, routes, request.name, request.dry_run)
        return convert.plan_to_pb(view, request.dry_run, self.engine.routes_version)

    @mapped
    def RollbackRoutes(
        self, request: pb.RollbackRoutesRequest, context: grpc.ServicerContext
    ) -> pb.RoutePlan:
        view = self.engine.rollback_routes(request.dry_run)
        return convert.plan_to_pb(view, request.dry_run, self.engine.routes_version)

    @mapped
    def ReleaseRoutes(
        self, request: pb.ReleaseRoutesRequest, context: grpc.ServicerContext
    ) -> pb.RoutePlan:
        view = self.engine.release_routes()
        return convert.plan_to_pb(view, False, self.engine.routes_version)

    @mapped
    def Resilience(
        self, request: pb.ResilienceRequest, context: grpc.ServicerContext
    ) -> pb.ResilienceReport:
        asked = convert.sweep_request_from_pb(request)
        e = self.engine
        state_version, routes_version = e.state_version, e.routes_version
        target = e.installer.target  # replaced whole by the worker: read once
        inputs = self.sweeps.inputs(self.fabric, target, e.options, asked, e.hashed_jobs)
        remaining = context.time_remaining()
        result, stats = self.sweeps.run(inputs, asked.workers, context.is_active,
                                        None if remaining is None else remaining - 0.05)
        return convert.resilience_to_pb(result, self.fabric.name, stats, state_version,
                                        routes_version)  # fmt: skip

    def _check_request(self, req: Request, what: str) -> None:
        """The cost cap of a placement request: its GPUs, and the flows its job would make
        (alltoall grows with the square of the hosts), before any work."""
        g = self.fabric.gpus_per_host
        gpus = req.gpus or req.hosts * g
        if gpus > self.limits.whatif_max_gpus:
            raise LimitError(f"request.gpus: {gpus} over the cap of "
                             f"{self.limits.whatif_max_gpus} GPUs per {what} call")  # fmt: skip
        n = -(-gpus // g)
        per_host = {"alltoall": max(n - 1, 0), "pipeline": 2}.get(req.pattern, req.channels)
        flows = n * g * self.fabric.ports_per_nic * per_host
        if flows > self.limits.whatif_max_flows:
            raise LimitError(f"request: a {req.pattern} job on {gpus} GPUs makes up to "
                             f"{flows:,} flows, over the what-if cap of "
                             f"{self.limits.whatif_max_flows:,}")  # fmt: skip

    def _current(self) -> Assignment | None:
        """The live assignment, so advice scores against the routes the fabric has."""
        last = self.engine.last_result
        return last.assignment if last is not None else None


def _scope(request: pb.GetRoutesRequest) -> str:
    """A digest of the request's filters (all but the page fields): the scope of its page
    tokens, so that a token asked with other filters is refused, not read as an offset."""
    import hashlib

    filters = pb.GetRoutesRequest()
    filters.CopyFrom(request)
    filters.ClearField("page_token")
    filters.ClearField("page_size")
    raw = filters.SerializeToString(deterministic=True)
    return hashlib.sha256(raw).hexdigest()[:8] if raw else ""
