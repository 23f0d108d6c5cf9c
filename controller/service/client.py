"""A typed client of a running controller's gRPC API: plain data in, plain data out.

The one place a client touches the generated protobuf code; `tectl`'s client commands and
the benchmarks speak to a controller through it. Every failed call becomes an `InputError`
naming the gRPC status ("UNAVAILABLE: ..."), as `tectl` prints it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from controller.errors import InputError

RATE_WAIT_S = 60.0  # the most a call waits, in all, on the server's write rate limit


def _retry_after(err: Any) -> float | None:
    """The wait a rate-limit refusal names (RESOURCE_EXHAUSTED 'rate limit: ... retry after
    X s'), else None: other refusals are not retried."""
    import grpc

    if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    found = re.search(r"^rate limit: .*retry after ([0-9.]+) s", err.details() or "")
    return max(float(found.group(1)), 0.01) if found else None

if TYPE_CHECKING:
    from controller.solver.resilience import Resilience

DEFAULT_ADDRESS = "127.0.0.1:50051"
# Route tables of large fabrics run to tens of MB; gRPC's default receive limit is 4 MB.
MAX_RECEIVE_BYTES = 1 << 30
LINK_STATES = ("down", "up", "degrade")

T = TypeVar("T")


def api() -> tuple[Any, Any]:
    """The generated (te_pb2, te_pb2_grpc) modules, or a one-line error naming the fix."""
    try:
        from controller.api.fabric_te.v1 import te_pb2, te_pb2_grpc
    except ImportError:
        raise InputError(
            "the gRPC code is not generated: run `make protos` (make demo/test do it)"
        ) from None
    return te_pb2, te_pb2_grpc


@dataclass(frozen=True)
class Target:
    """Where a controller listens and how to reach it: mTLS with a client certificate, or
    plaintext only when `insecure`."""

    address: str = DEFAULT_ADDRESS
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", _address(self.address))

    @classmethod
    def from_env(cls, address: str | None = None) -> Target:
        """The FABRIC_TE_SERVER / _TLS_CA / _TLS_CERT / _TLS_KEY / _TLS_SERVER_NAME /
        _INSECURE settings `tectl`'s client flags default to."""
        env = os.environ.get
        return cls(
            address=address or env("FABRIC_TE_SERVER", DEFAULT_ADDRESS),
            ca=env("FABRIC_TE_TLS_CA"), cert=env("FABRIC_TE_TLS_CERT"),
            key=env("FABRIC_TE_TLS_KEY"), server_name=env("FABRIC_TE_TLS_SERVER_NAME"),
            insecure=env("FABRIC_TE_INSECURE", "") not in ("", "0"),
        )  # fmt: skip


def _address(address: str) -> str:
    """HOST:PORT as gRPC takes it: a port from 1 to 65535 (gRPC would wrap 99999 to another
    port), the default port where none is given (gRPC would take 443); 'unix:' and other
    URI targets as they are."""
    if ":/" in address or address.startswith("unix:"):
        return address
    if address.startswith("["):  # [IPv6]:PORT
        end = address.find("]")
        host, rest = address[: end + 1], address[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            raise InputError(f"server address {address!r}: give [IPV6]:PORT")
        port = rest[1:]
    elif address.count(":") > 1:  # an IPv6 address alone
        host, port = f"[{address}]", ""
    else:
        host, _, port = address.partition(":")
    if not host:
        raise InputError(f"server address {address!r}: no host; give HOST:PORT")
    if not port:
        return f"{host}:{DEFAULT_ADDRESS.rpartition(':')[2]}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"server address {address!r}: port {port!r} is not in 1-65535")
    return f"{host}:{int(port)}"


def channel(target: Target) -> Any:
    """A gRPC channel to `target` (receive limit raised to MAX_RECEIVE_BYTES)."""
    import grpc

    from controller.service.tls import checked_pems

    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
    if target.insecure:  # asked for: plaintext, whatever TLS files the environment names (a
        # plaintext server refuses TLS, and a TLS server plaintext, loudly either way)
        return grpc.insecure_channel(target.address, options=options)
    if not (target.ca and target.cert and target.key):
        raise InputError("no client certificate: give --tls-ca, --tls-cert and --tls-key "
                         "(or FABRIC_TE_TLS_CA/_CERT/_KEY), or --insecure for a plaintext "
                         "local server")  # fmt: skip
    cert, key, ca = checked_pems(target.cert, target.key, target.ca)
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )
    if target.server_name:
        options.append(("grpc.ssl_target_name_override", target.server_name))
    return grpc.secure_channel(target.address, creds, options=options)


# Plain replies.


@dataclass(frozen=True)
class JobListing:
    """A job the controller holds: its id, generation and host names (rank order), its
    spec and what the installed routing does for it (None: not installed yet), as plain
    values."""

    id: str
    generation: int
    hosts: tuple[str, ...]
    spec: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] | None = None


@dataclass(frozen=True)
class RouteLine:
    """An installed TE entry by names: at `switch`, traffic in on `in_port` towards
    `dst_host` (in `qp_bucket`, if bucketed) leaves on `next_hop`."""

    switch: str
    in_port: str
    dst_host: str
    next_hop: str
    qp_bucket: int | None = None


@dataclass(frozen=True)
class RoutesChunk:
    """One streamed piece of the installed routes at `version`."""

    version: int
    total_entries: int
    entries: tuple[RouteLine, ...]


@dataclass(frozen=True)
class Snapshot:
    """A watch's snapshot page; `more` when further pages of the same snapshot follow."""

    version: int
    total_entries: int
    entries: tuple[RouteLine, ...]
    more: bool
    epoch: str = ""  # the routes epoch of `version`


@dataclass(frozen=True)
class InSync:
    """The watch has delivered everything up to `version` of routes epoch `epoch` (resume
    from there with both)."""

    version: int
    epoch: str = ""


@dataclass(frozen=True)
class Delta:
    """Entries added and removed at `version`."""

    version: int
    added: tuple[RouteLine, ...]
    removed: tuple[RouteLine, ...]


@dataclass(frozen=True)
class Resumed:
    """The server dropped the watch for falling behind; it goes on from `version`."""

    version: int
    epoch: str = ""


WatchEvent = Snapshot | InSync | Delta | Resumed


def _line(e: Any) -> RouteLine:
    qp = e.qp_bucket if e.HasField("qp_bucket") else None
    return RouteLine(e.switch, e.in_port, e.dst_host, e.next_hop, qp)


def _lines(entries: Sequence[Any]) -> tuple[RouteLine, ...]:
    return tuple(_line(e) for e in entries)


# what gRPC says when no call reached the server (as opposed to the server's own
# UNAVAILABLE: etcd unreachable, a driver refusing)
_NO_CONNECTION = ("failed to connect", "socket closed", "connection reset",
                  "connection refused", "handshake", "ssl", "dns resolution failed",
                  "connection attempt timed out")  # fmt: skip
_NO_CONNECTION_HINT = ("no call reached the server: check --server (FABRIC_TE_SERVER), that "
                       "it runs, and that the TLS options match it: --insecure speaks "
                       "plaintext, a server with TLS needs --tls-ca (and for mTLS --tls-cert "
                       "and --tls-key)")  # fmt: skip


_CUT = ("stream removed", "cancelling all calls")  # a connection lost, or a server
# stopping, under a stream (with _NO_CONNECTION's)
_CUT_HINT = ("the stream was cut after the server had answered: it stopped, or the "
             "connection dropped; run the command again once it is back")


def _failed(err: Any, answered: bool = False) -> InputError:
    """A call's gRPC error as an InputError; `answered`: a stream had received messages
    (then a lost connection is a cut, not a server never reached)."""
    details = str(err.details())
    text = f"{err.code().name}: {details}"
    lost = any(s in details.lower() for s in _NO_CONNECTION + _CUT)
    if err.code().name == "UNAVAILABLE" and lost:
        text += f" ({_CUT_HINT if answered else _NO_CONNECTION_HINT})"
    return InputError(text)


class Client:
    """The TrafficEngineering API as plain-data methods, over one stub."""

    def __init__(self, stub: Any, conn: Any = None, timeout: float | None = None) -> None:
        self._pb = api()[0]
        self._stub, self._conn, self._timeout = stub, conn, timeout

    @classmethod
    def connect(cls, target: Target, timeout: float | None = None) -> Client:
        """A client on a new channel to `target`; `timeout` (s) bounds each unary call."""
        conn = channel(target)
        return cls(api()[1].TrafficEngineeringStub(conn), conn, timeout)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, fn: Callable[..., T], request: Any) -> T:
        """One call; a write the server's rate limit refused (it says when to retry, and
        applied nothing) is sent again after that wait, for up to RATE_WAIT_S in all, so a
        file of many jobs goes through at the limit's pace instead of failing at its burst."""
        import grpc

        waited = 0.0
        while True:
            try:
                return fn(request, timeout=self._timeout)
            except grpc.RpcError as err:
                wait = _retry_after(err)
                if wait is None or waited + wait > RATE_WAIT_S:
                    raise _failed(err) from None
                time.sleep(wait)
                waited += wait

    def put_job(self, job: Mapping[str, Any]) -> int:
        """Create or replace a job (fields as in a placement file's job); its generation."""
        msg = self._pb.Job(**{k: v for k, v in job.items() if v is not None})
        reply = self._call(self._stub.PutJob, self._pb.PutJobRequest(job=msg))
        return int(reply.generation)

    def delete_job(self, job_id: str) -> bool:
        """Delete a job (idempotent); whether it existed."""
        return bool(self._call(self._stub.DeleteJob, self._pb.DeleteJobRequest(id=job_id)).existed)

    def list_jobs(self) -> list[JobListing]:
        reply = self._call(self._stub.ListJobs, self._pb.ListJobsRequest())
        return [
            JobListing(e.job.id, int(e.generation), tuple(e.job.hosts),
                       _plain(e.job), _plain(e.figures) if e.HasField("figures") else None)
            for e in reply.jobs
        ]  # fmt: skip

    def report_link(self, link: str, state: str, fraction: float | None = None) -> int:
        """Report `link` down, up or degraded to `fraction` of its capacity; the new state
        version."""
        return self.report_links([(link, state, fraction)])

    def report_links(self, links: Sequence[tuple[str, str, float | None]]) -> int:
        """Report every (link, state, fraction) in one request: all taken, or none (an
        unknown link refuses the lot); the new state version."""
        reports = [self._report(link, state, fraction) for link, state, fraction in links]
        request = self._pb.ReportLinksRequest(reports=reports)
        reply = self._call(self._stub.ReportLinks, request)
        return int(reply.state_version)

    def status(self) -> dict[str, Any]:
        """The controller's status as a JSON-ready dict: every field of StatusResponse by
        its name, numbers as numbers (the fabric summary's too), the certificate when the
        installed routing has one."""
        s = self._call(self._stub.Status, self._pb.StatusRequest())
        out = _plain(s)
        out["fabric"] = {k: _number(v) for k, v in out["fabric"].items()}
        return out

    def advise(self, request: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Where the controller would place a new job (PlacementRequest's fields by name),
        among its own jobs and health: the candidates, best first, as plain values."""
        msg = self._pb.PlacementRequest(**{k: v for k, v in request.items() if v is not None})
        reply = self._call(self._stub.Advise, self._pb.AdviseRequest(request=msg))
        return [_plain(c) for c in reply.candidates]

    def preview(
        self,
        put: Sequence[Mapping[str, Any]] = (),
        delete: Sequence[str] = (),
        links: Sequence[tuple[str, str, float | None]] = (),
    ) -> dict[str, Any]:
        """A dry run of job puts, deletes and link reports (link, state, fraction): what
        the would-be routing moves, its plan and certificate; nothing is stored or pushed."""
        pb = self._pb
        request = pb.SolveRequest(
            put_jobs=[pb.Job(**{k: v for k, v in job.items() if v is not None}) for job in put],
            delete_jobs=list(delete), links=[self._report(*link) for link in links],
            preview=True,
        )  # fmt: skip
        return _plain(self._call(self._stub.Solve, request))

    def resilience(
        self, kinds: Sequence[str] = (), workers: int = 0, doubles: int = 0, seed: int = 1
    ) -> tuple[Resilience, str, dict[str, Any]]:
        """The resilience sweep of what the controller has installed: the result (the same
        arrays as an offline sweep), the fabric's name and how the run went (seconds,
        workers, runner, elements, state and routes versions)."""
        import numpy as np

        from controller.solver.resilience import KINDS, Resilience

        m = self._call(self._stub.Resilience, self._pb.ResilienceRequest(
            kinds=list(kinds), workers=workers, doubles=doubles, seed=seed))  # fmt: skip
        if tuple(m.kind_names) != KINDS:
            raise InputError(f"the controller's element kinds {list(m.kind_names)} are not "
                             f"this client's {list(KINDS)}: versions differ")  # fmt: skip
        n, jobs, routings = len(m.elements), len(m.jobs), len(m.routings)

        def counts(values: Any) -> np.ndarray:
            return np.array(values, dtype=np.int64)

        result = Resilience(
            names=tuple(m.elements), kind=np.array(m.kind, dtype=np.int8),
            job_ids=tuple(m.jobs), has_flows=np.array(m.has_flows, dtype=bool),
            before=np.array(m.before, dtype=np.float64).reshape(routings, jobs),
            after=np.array(m.after, dtype=np.float64).reshape(n, routings, jobs),
            moved_flows=counts(m.flows_moved), moved_jobs=counts(m.jobs_moved),
            crossed_flows=counts(m.flows_crossed), crossed_jobs=counts(m.jobs_crossed),
            handed_back=counts(m.handed_back), keep=m.keep,
        )  # fmt: skip
        run = {"seconds": m.seconds, "workers": m.workers, "runner": m.runner, "elements": n,
               "state_version": m.state_version, "routes_version": m.routes_version}
        return result, m.fabric, run

    def _report(self, link: str, state: str, fraction: float | None) -> Any:
        """A LinkReport message: `state` down, up or degrade (to `fraction`)."""
        if state not in LINK_STATES:
            raise InputError(f"link state {state!r}: expected one of {', '.join(LINK_STATES)}")
        if state == "degrade" and fraction is None:
            raise InputError("link degrade needs a FRACTION of capacity, e.g. 0.5")
        pb = self._pb
        code = {"down": pb.LinkReport.DOWN, "up": pb.LinkReport.UP,
                "degrade": pb.LinkReport.DEGRADED}[state]  # fmt: skip
        return pb.LinkReport(link=link, state=code, fraction=fraction or 0.0)

    def apply_routes(self, name: str, content: bytes, dry_run: bool = False) -> dict[str, Any]:
        """Install (and hold) a route file's routes, or only plan it; the plan as a dict
        (RoutePlan's fields)."""
        request = self._pb.ApplyRoutesRequest(name=name, content=content, dry_run=dry_run)
        return _plain(self._call(self._stub.ApplyRoutes, request))

    def rollback_routes(self, dry_run: bool = False) -> dict[str, Any]:
        """Re-install the checkpoint the last apply kept, or only plan it."""
        request = self._pb.RollbackRoutesRequest(dry_run=dry_run)
        return _plain(self._call(self._stub.RollbackRoutes, request))

    def release_routes(self) -> dict[str, Any]:
        """Stop holding routes applied from a file: the engine solves again."""
        return _plain(self._call(self._stub.ReleaseRoutes, self._pb.ReleaseRoutesRequest()))

    def stream_routes(
        self, switches: Sequence[str] = (), job: str = "", chunk: int = 10_000
    ) -> Iterator[RoutesChunk]:
        """The installed entries (only `switches`' and towards `job`'s hosts, if given),
        `chunk` entries a message, as they arrive."""
        import grpc

        request = self._pb.GetRoutesRequest(switches=list(switches), job=job, page_size=chunk)
        answered = False
        try:
            for msg in self._stub.StreamRoutes(request):
                answered = True
                yield RoutesChunk(msg.version, msg.total_entries, _lines(msg.entries))
        except grpc.RpcError as err:  # a stream ends with a status
            raise _failed(err, answered) from None

    def watch_routes(self, since: int = 0, epoch: str = "") -> Iterator[WatchEvent]:
        """Route changes after version `since` of routes epoch `epoch` (as an InSync gave
        them; 0, or another epoch than the server's: a snapshot first). When the server
        drops the watch (ABORTED: it fell behind, or stopped reading), a `Resumed` event,
        and the watch goes on from the version the server names, or else from the last
        one received whole; any other end raises."""
        import grpc

        from controller.service.servicer import RESUME_EPOCH_KEY, RESUME_VERSION_KEY

        seen = InSync(since, epoch)  # the last version received whole (not a snapshot's)
        answered = False
        while True:
            watch = self._watch_once(seen)
            try:
                for event in watch:
                    answered = True
                    if isinstance(event, InSync):
                        seen = event
                    elif isinstance(event, Delta):  # after a sync, or after `seen` itself
                        seen = InSync(event.version, seen.epoch)
                    yield event
                return
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.ABORTED:
                    raise _failed(err, answered) from None
                trailer = dict(err.trailing_metadata() or ())
                resume = trailer.get(RESUME_VERSION_KEY)
                if resume is not None:
                    seen = InSync(int(resume), str(trailer.get(RESUME_EPOCH_KEY, "")))
            yield Resumed(seen.version, seen.epoch)

    def _watch_once(self, since: InSync) -> Iterator[WatchEvent]:
        """One WatchRoutes call from `since`."""
        request = self._pb.WatchRoutesRequest(since_version=since.version,
                                              since_epoch=since.epoch)  # fmt: skip
        for event in self._stub.WatchRoutes(request):
            kind = event.WhichOneof("event")
            if kind == "snapshot":
                s = event.snapshot
                yield Snapshot(s.version, s.total_entries, _lines(s.entries),
                               bool(s.next_page_token), s.epoch)  # fmt: skip
            elif kind == "sync":
                yield InSync(event.sync.version, event.sync.epoch)
            else:
                d = event.delta
                yield Delta(d.version, _lines(d.added), _lines(d.removed))


def _plain(msg: Any) -> dict[str, Any]:
    """A message as plain values, field by field (int64s stay numbers, unlike the JSON
    mapping; a message field absent is left out)."""
    out: dict[str, Any] = {}
    for desc in msg.DESCRIPTOR.fields:
        name, value = desc.name, getattr(msg, desc.name)
        if desc.message_type is not None and desc.message_type.GetOptions().map_entry:
            out[name] = dict(value)
        elif hasattr(value, "extend"):  # a repeated field
            out[name] = [_plain(v) if hasattr(v, "DESCRIPTOR") else v for v in value]
        elif desc.message_type is not None:
            if msg.HasField(name):
                out[name] = _plain(value)
        else:
            out[name] = value
    return out


def _number(text: str) -> Any:
    """A summary value as the number it spells (floats to 12 significant digits), or as is."""
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return float(f"{value:.12g}") if kind is float else value
    return text
