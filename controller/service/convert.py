"""Protobuf <-> plain data, in one place."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from controller.advisor.advise import SAME_POD, Request, Score
from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.errors import AdvisorError, FabricError
from controller.formats.placement import INT_KEYS, dump_placement, parse_job
from controller.model import validation
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.model.jobs import PATTERNS, Job
from controller.routes.tables import Entry
from controller.service.held import Held, PlanView
from controller.service.job_view import JobFigures
from controller.service.precomputed import PrecomputedRepair
from controller.service.resilience import SweepRequest
from controller.solver import Certificate
from controller.solver.resilience import KINDS, ROUTINGS, Resilience
from controller.solver.sweep_runners import RunStats


def job_from_pb(fabric: Fabric, msg: pb.Job, field: str = "job") -> Job:
    """A validated Job; errors name the field as the client wrote it, under `field`
    (e.g. 'job.hosts[3]: unknown host ...', 'extra_jobs[1].channels: ...')."""
    doc: dict[str, object] = {"id": msg.id, "hosts": list(msg.hosts)}
    for name in INT_KEYS:  # proto3 scalars: 0 is unset
        value = getattr(msg, name)
        if value:
            doc[name] = int(value)
    if msg.collectives:
        doc["collectives"] = list(msg.collectives)
    if msg.demand_gbps:
        doc["demand_gbps"] = float(msg.demand_gbps)
    if msg.priority:
        doc["priority"] = int(msg.priority)
    return parse_job(fabric, doc, field)


def job_to_pb(fabric: Fabric, job: Job) -> pb.Job:
    doc = dump_placement(fabric, [job])["jobs"][0]
    return pb.Job(
        id=doc["id"], hosts=doc["hosts"], dp=doc.get("dp", 0), pp=doc.get("pp", 0),
        tp=doc.get("tp", 0), collectives=doc.get("collectives", []),
        channels=doc.get("channels", 0), demand_gbps=doc.get("demand_gbps", 0.0),
        gpus_per_host=doc.get("gpus_per_host") or 0, priority=doc.get("priority", 0),
    )  # fmt: skip


def link_reports(
    fabric: Fabric, reports: Sequence[pb.LinkReport], field: str = "reports"
) -> tuple[dict[int, float], dict[int, bool]]:
    """(link id -> capacity factor, switch node id -> drained); errors name the report by
    index under `field`.

    UP and DOWN take no fraction (0, or exactly 1 for UP, 0 for DOWN); DEGRADED takes one
    within [MIN_FRACTION, 1). A link reported twice (in either orientation) is an error,
    and so is a link reported otherwise than its switch in the same request."""
    validation.listing(reports, field, validation.MAX_LINKS, FabricError)
    out: dict[int, float] = {}
    switches: dict[int, bool] = {}
    of_switch: set[int] = set()  # links given by their switch's report
    first: dict[int, int] = {}
    for i, report in enumerate(reports):
        where = f"{field}[{i}]"
        if not report.link:
            raise FabricError(f"{where}.link: missing")
        name = validation.text(
            report.link, f"{where}.link", FabricError, limit=4 * validation.MAX_NAME
        )
        try:
            link = fabric.link_by_name(name)
            links = None
        except FabricError as err:
            links = _switch_links(fabric, name)
            if links is None:
                raise FabricError(f"{where}.link: {err}") from None
        if links is not None:
            # a switch: drained (DOWN: every link of it down) or back (UP: every link up)
            if report.state not in (pb.LinkReport.UP, pb.LinkReport.DOWN) or report.fraction:
                raise FabricError(f"{where}: {name!r} is a switch: it is drained (DOWN, "
                                  "tectl: SWITCH=drain) or brought back (UP), whole; degrade "
                                  "its links one by one")  # fmt: skip
            value = 1.0 if report.state == pb.LinkReport.UP else 0.0
            node = fabric.node_by_name(name)
            if node in switches:
                before = next(j for j in range(i) if reports[j].link == name)
                raise FabricError(f"{where}.link: switch {name!r} is given twice (also in "
                                  f"{field}[{before}]); report it once")  # fmt: skip
            for k in links.tolist():
                if out.get(k, value) != value:
                    raise FabricError(f"{where}.link: switch {name!r} has link "
                                      f"{fabric.link_name(k)}, reported otherwise in "
                                      f"{field}[{first[k]}]")  # fmt: skip
                if k not in first:
                    out[k] = value
                    of_switch.add(k)
                first.setdefault(k, i)
            switches[node] = value == 0.0
            continue
        if link in first and link in of_switch:
            raise FabricError(f"{where}.link: {name!r} is a link of switch "
                              f"{reports[first[link]].link!r}, reported in "
                              f"{field}[{first[link]}]; report the switch or its links, "
                              "not both")  # fmt: skip
        if link in first:
            raise FabricError(
                f"{where}.link: {name!r} is the same link as {field}[{first[link]}].link"
            )
        first[link] = i
        fraction = report.fraction
        if report.state == pb.LinkReport.UP:
            if fraction not in (0.0, 1.0):
                raise FabricError(
                    f"{where}.fraction: {fraction!r} given with state UP; only DEGRADED "
                    "takes a fraction"
                )
            out[link] = 1.0
        elif report.state == pb.LinkReport.DOWN:
            if fraction != 0.0:
                raise FabricError(
                    f"{where}.fraction: {fraction!r} given with state DOWN; only DEGRADED "
                    "takes a fraction"
                )
            out[link] = 0.0
        elif report.state == pb.LinkReport.DEGRADED:
            value = validation.fraction(fraction, f"{where}.fraction", FabricError)
            if not 0.0 < value < 1.0:
                raise FabricError(
                    f"{where}.fraction: {value!r} is not within (0, 1): use DOWN or UP"
                )
            out[link] = value
        else:
            raise FabricError(f"{where}.state: must be UP, DOWN or DEGRADED")
    return {k: v for k, v in out.items() if k not in of_switch}, switches


def _entries_to_pb(fabric: Fabric, entries: Iterable[Entry]) -> list[pb.RouteEntry]:
    """Entries as messages; link and host names are looked up once per id (a route table
    names few distinct links and hosts many times over)."""
    links: dict[int, str] = {}
    hosts: dict[int, str] = {}
    out = []
    for e in entries:
        in_port = links.get(e.in_port)
        if in_port is None:
            in_port = links[e.in_port] = fabric.link_name(e.in_port)
        next_hop = links.get(e.next_hop)
        if next_hop is None:
            next_hop = links[e.next_hop] = fabric.link_name(e.next_hop)
        dst = hosts.get(e.dst_host)
        if dst is None:
            dst = hosts[e.dst_host] = fabric.host_name(e.dst_host)
        msg = pb.RouteEntry(switch=e.switch, in_port=in_port, dst_host=dst, next_hop=next_hop)
        if e.qp != ALL_QPS:
            msg.qp_bucket = e.qp
        out.append(msg)
    return out


def snapshot_to_pb(fabric: Fabric, version: int, routes: Iterable[Entry]) -> pb.RouteSnapshot:
    return pb.RouteSnapshot(version=version, entries=_entries_to_pb(fabric, routes))


def delta_to_pb(
    fabric: Fabric, version: int, added: Iterable[Entry], removed: Iterable[Entry]
) -> pb.RouteDelta:
    return pb.RouteDelta(
        version=version,
        added=_entries_to_pb(fabric, added),
        removed=_entries_to_pb(fabric, removed),
    )


def str_map(values: Mapping[str, object]) -> dict[str, str]:
    return {k: str(v) for k, v in values.items()}


def _hosts(fabric: Fabric, names: Iterable[str], field: str) -> tuple[int, ...]:
    """Host ids for names; an unknown one is named with its index under `field`."""
    out = []
    for i, name in enumerate(names):
        try:
            out.append(fabric.host_by_name(name))
        except FabricError as err:
            raise FabricError(f"{field}[{i}]: {err}") from None
    return tuple(out)


def placement_request_from_pb(
    fabric: Fabric, msg: pb.PlacementRequest, field: str = "request"
) -> Request:
    """An advisor Request; sizes bounded and host names resolved, errors naming the field."""
    for name in ("gpus", "hosts", "dp", "pp", "tp"):
        validation.integer(
            getattr(msg, name), f"{field}.{name}", 0, validation.MAX_GPUS, AdvisorError
        )
    validation.integer(msg.top, f"{field}.top", 0, validation.MAX_ADVICE, AdvisorError)
    for name, allowed in (("pattern", PATTERNS), ("same_pod", SAME_POD)):
        value = getattr(msg, name)
        if value and validation.text(value, f"{field}.{name}", AdvisorError) not in allowed:
            raise AdvisorError(f"{field}.{name}: {value!r} is not one of {', '.join(allowed)}")
    n = fabric.gpus_per_host
    if msg.hosts and msg.gpus:
        raise AdvisorError(f"{field}: give gpus or hosts, not both")
    if not msg.hosts and (msg.gpus % n or not msg.gpus):
        raise AdvisorError(f"{field}.gpus: {msg.gpus} is not a positive multiple of {n} per host")
    validation.listing(msg.avoid_hosts, f"{field}.avoid_hosts", validation.MAX_GPUS, AdvisorError)
    return Request(
        gpus=msg.gpus or msg.hosts * n, hosts=msg.hosts, dp=msg.dp, pp=msg.pp or 1, tp=msg.tp or 1,
        pattern=msg.pattern or "ring", same_pod=msg.same_pod or "prefer",
        avoid_hosts=_hosts(fabric, msg.avoid_hosts, f"{field}.avoid_hosts"), top=msg.top or 3,
    )  # fmt: skip


def placement_from_pb(fabric: Fabric, msg: pb.Placement, field: str) -> tuple[int, ...]:
    validation.listing(msg.hosts, f"{field}.hosts", validation.MAX_GPUS, AdvisorError)
    return _hosts(fabric, msg.hosts, f"{field}.hosts")


def score_to_pb(fabric: Fabric, s: Score) -> pb.PlacementScore:
    return pb.PlacementScore(
        hosts=[fabric.host_name(h) for h in s.hosts], pods=s.pods, racks=s.racks,
        cross_pod_gbps=s.cross_pod_gbps, te_mlu=s.te_mlu, bound=s.bound,
        mlu_ratio=s.mlu_ratio, new_job_busbw=s.new_job_busbw,
        worst_existing_delta=s.worst_existing_delta, strategy=s.strategy,
        mlu_before=s.mlu_before, note=s.note, new_job_gbps=s.new_job_gbps,
    )  # fmt: skip


def job_figures_to_pb(fabric: Fabric, figures: JobFigures | None) -> pb.JobFigures | None:
    """A job's figures as a message (None: the job is not in an installed routing yet)."""
    if figures is None:
        return None
    busbw = figures.predicted_busbw
    first = figures.stalled_flow
    return pb.JobFigures(
        flows=figures.flows, te_flows=figures.te_flows, hashed_flows=figures.hashed_flows,
        predicted=busbw is not None, predicted_busbw=0.0 if busbw is None else busbw,
        handed_back=figures.handed_back, over_line_rate=figures.over_line_rate,
        stalled_flows=figures.stalled_flows, demand_gbps=figures.demand_gbps,
        line_rate_gbps=figures.line_rate_gbps,
        stalled_example="" if first is None else
        f"{fabric.nic_name(first[0])} -> {fabric.nic_name(first[1])}",
    )  # fmt: skip


def plan_to_pb(view: PlanView, dry_run: bool, routes_version: int) -> pb.RoutePlan:
    """What a change of routes does to the switches, as a message."""
    add, replace, remove = view.totals
    return pb.RoutePlan(
        dry_run=dry_run, add=add, replace=replace, remove=remove, flows=view.flows,
        subflows=view.subflows,
        entries=view.entries, routes_version=routes_version,
        flows_of_no_job=view.flows_of_no_job, job_flows_missing=view.job_flows_missing,
        switches=[pb.SwitchPlan(switch=sw, add=a, replace=r, remove=d)
                  for sw, a, r, d in view.switches],
    )  # fmt: skip


def held_to_pb(held: Held | None) -> pb.HeldRoutes | None:
    """The routes held from a file, as a message (None: the engine routes)."""
    if held is None:
        return None
    point = held.checkpoint
    return pb.HeldRoutes(
        source=held.source, flows=held.flows, entries=held.entries,
        checkpoint=point is not None, checkpoint_source=held.checkpoint_source,
        checkpoint_flows=0 if point is None else len(point.flows),
    )  # fmt: skip


def certificate_to_pb(cert: Certificate | None) -> pb.Certificate | None:
    """A certificate as a message (None: not certified)."""
    if cert is None:
        return None
    return pb.Certificate(
        passed=cert.passed, reference=cert.reference, seeds=len(cert.seeds), qps=cert.qps,
        jobs=cert.jobs, jobs_checked=cert.jobs_checked,
        worst_ratio={k: 1.0 if v is None else v for k, v in cert.worst_ratio.items()},
        below=dict(cert.below), fallback_jobs=dict(cert.fallback_jobs),
        fallback_flows=cert.fallback_flows, seconds=cert.seconds, pending=cert.pending,
        jobs_stalled=cert.stalled,
    )  # fmt: skip


def sweep_request_from_pb(msg: pb.ResilienceRequest) -> SweepRequest:
    """A checked SweepRequest (errors name the field)."""
    return SweepRequest(tuple(msg.kinds), int(msg.workers), int(msg.doubles),
                        int(msg.seed)).checked()  # fmt: skip


def resilience_to_pb(
    r: Resilience, fabric_name: str, stats: RunStats, state_version: int, routes_version: int
) -> pb.ResilienceReport:
    """The sweep's arrays as they are (row-major), for the client to rebuild `r` exactly."""
    return pb.ResilienceReport(
        fabric=fabric_name, routings=list(ROUTINGS), jobs=list(r.job_ids),
        has_flows=r.has_flows.tolist(), before=r.before.ravel().tolist(),
        elements=list(r.names), kind_names=list(KINDS), kind=r.kind.tolist(),
        after=r.after.ravel().tolist(), flows_moved=r.moved_flows.tolist(),
        jobs_moved=r.moved_jobs.tolist(), flows_crossed=r.crossed_flows.tolist(),
        jobs_crossed=r.crossed_jobs.tolist(), handed_back=r.handed_back.tolist(), keep=r.keep,
        seconds=stats.seconds, workers=stats.workers, runner=stats.runner,
        state_version=state_version, routes_version=routes_version,
    )  # fmt: skip


def precomputed_to_pb(
    fields: Mapping[str, Any], enabled: bool, hits: int, widest: Sequence[PrecomputedRepair]
) -> pb.PrecomputedRepairs:
    """The precomputed set's figures (Precomputer.fields) and its widest repairs."""
    return pb.PrecomputedRepairs(
        enabled=enabled, generation=fields["generation"], ready=fields["ready"],
        total=fields["total"], bytes=fields["bytes"], done=fields["done"],
        seconds=fields["seconds"], hits=hits, rows_moved_max=fields["rows_moved_max"],
        rows_moved_mean=fields["rows_moved_mean"], jobs_moved_max=fields["jobs_moved_max"],
        jobs_moved_mean=fields["jobs_moved_mean"],
        elements_moving_others=fields["elements_moving_others"], failed=fields["failed"],
        widest=[pb.PrecomputedElement(element=r.name, kind=r.kind, rows_moved=r.rows_moved,
                                      rows_off_element=r.rows_off_element,
                                      jobs_moved=r.jobs_moved) for r in widest],
    )  # fmt: skip


def _switch_links(fabric: Fabric, name: str) -> np.ndarray | None:
    """The installed links of switch `name` (a report of a switch drains or restores it
    whole), or None when `name` names no switch."""
    try:
        links = fabric.switch_links(name)
    except FabricError:
        return None
    return links[fabric.installed[links]]
