"""The service's limits: their defaults, and the small mechanisms that enforce them.

- message size per method (`MESSAGE_LIMITS`, bytes) under one server-wide ceiling;
- long-lived streams (WatchRoutes, StreamLinkReports, reflection) get their own thread
  budget, so unary calls always have `workers` threads; at most `streams_per_identity` each;
  callers the policy gives no role (health, reflection only) share a pool of their own
  (`streams_roleless`), so they can never hold a slot a role holder needs; a stream whose
  client sends nothing, or takes nothing sent, for `stream_idle_seconds` is ended;
- writes (PutJob, DeleteJob, ReportLinks, StreamLinkReports, and ApplyRoutes,
  RollbackRoutes, ReleaseRoutes) are rate limited per identity
  by a token bucket (`write_rate` per second, `write_burst` at once);
- what-if Solve, Advise and Score: a cap on the flows they would build, checked before any
  work, at most `whatif_slots` at once, and a deadline of `whatif_seconds` (or the client's,
  if sooner);
- Resilience: one sweep at a time, on at most `sweep_workers` processes, within
  `sweep_seconds` (or the client's deadline, if sooner).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from controller.errors import LimitError, OverDeadline
from controller.model.fabric import Fabric
from controller.model.jobs import Job
from controller.service.priority import background

T = TypeVar("T")
KIB, MIB = 1024, 1024 * 1024

# request bytes per TrafficEngineering method (per message for StreamLinkReports)
MESSAGE_LIMITS: dict[str, int] = {
    "PutJob": 1 * MIB,  # a 24K-GPU job is ~0.5 MB of host names
    "DeleteJob": 4 * KIB,
    "ListJobs": 64,
    "ReportLinks": 4 * MIB,  # every link of a large fabric at once
    "StreamLinkReports": 64 * KIB,  # one report; the field rules name an over-long link
    "GetRoutes": 1 * MIB,  # a filter may name every switch
    "StreamRoutes": 1 * MIB,
    "WatchRoutes": 64,
    "Solve": 4 * MIB,
    "Status": 64,
    "Advise": 1 * MIB,
    "Score": 4 * MIB,
    "ApplyRoutes": 4 * MIB,  # a route file; meta-24k's routes as .npz columns are ~1 MB
    "RollbackRoutes": 64,
    "ReleaseRoutes": 64,
    "Resilience": 1 * KIB,
}
OTHER_MESSAGE_LIMIT = 64 * KIB  # health checking, reflection
# gRPC rejects bigger requests itself, from the message header, before it reads the body
SERVER_MAX_MESSAGE = max(MESSAGE_LIMITS.values())
WRITES = frozenset({"PutJob", "DeleteJob", "ReportLinks", "StreamLinkReports", "ApplyRoutes",
                    "RollbackRoutes", "ReleaseRoutes"})  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """Per-deployment limits; the defaults suit one controller of a large fabric."""

    workers: int = 16  # threads for unary calls
    streams: int = 32  # long-lived streams in all (each holds a thread of its own)
    streams_per_identity: int = 4
    streams_roleless: int = 4  # in all, for callers without a role (health, reflection)
    stream_idle_seconds: float = 60.0  # a stream with no message in, or none taken out, ends
    write_rate: float = 20.0  # writes per second per identity, sustained
    write_burst: int = 40  # writes at once per identity
    whatif_max_flows: int = 200_000  # flows a what-if Solve/Advise/Score may build
    whatif_max_gpus: int = 4096  # GPUs of an Advise request
    whatif_max_placements: int = 64  # placements of one Score request
    whatif_slots: int = 2  # what-if computations at once
    whatif_seconds: float = 20.0
    watch_max_lag: int = 256  # route versions a watcher may fall behind before it is dropped
    stream_max_messages: int = 100_000  # messages of one StreamLinkReports
    # bytes of one StreamLinkReports in all (held until it ends, applied as one batch):
    # 100,000 reports of the longest link names of cluster-100k are ~4.8 MB
    stream_max_bytes: int = 8 * MIB
    sweep_workers: int = 2  # worker processes of a Resilience sweep, at most
    sweep_seconds: float = 3600.0  # a Resilience sweep's deadline (or the client's, if sooner)

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise LimitError(f"limit {name} must be a positive number, got {value!r}")


def flow_bound(fabric: Fabric, job: Job) -> int:
    """An upper bound on the flows `job` makes, from its sizes alone (nothing built)."""
    n, g = job.num_hosts, job.gpus(fabric)
    total = 0
    for pattern in job.collectives:
        if pattern == "ring":
            total += n * g * min(job.channels, max(n - 1, 0))
        elif pattern == "alltoall":
            total += n * g * max(n - 1, 0)
        else:  # pipeline: one flow each way per rank and stage boundary
            total += 2 * n * g
    return total


def check_flows(fabric: Fabric, jobs: Iterable[Job], limit: int, what: str) -> int:
    """The flow bound of `jobs`; LimitError naming `what` if it is over `limit`."""
    total = sum(flow_bound(fabric, j) for j in jobs)
    if total > limit:
        raise LimitError(f"{what}: would build up to {total:,} flows, over the what-if cap of "
                         f"{limit:,}; make the request smaller")  # fmt: skip
    return total


class RateLimiter:
    """Token buckets per key: `rate` per second, `burst` at once. `now` is injected."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> float:
        """0.0 if a token was taken, else the seconds until one will be available."""
        with self._lock:
            now = self.clock()
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            if len(self._buckets) > 100_000:  # identities are few; drop full buckets
                self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.burst}
            return (1.0 - tokens) / self.rate


class StreamBudget:
    """Open long-lived streams, in all and per identity."""

    def __init__(self, total: int, per_identity: int, who: str = "") -> None:
        self.total, self.per_identity, self.who = total, per_identity, who
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def acquire(self, identity: str) -> None:
        """Count a new stream, or LimitError naming the budget it would exceed."""
        with self._lock:
            mine = self._open.get(identity, 0)
            if mine >= self.per_identity:
                raise LimitError(f"{identity} already holds {mine} streams, the most one "
                                 "client may hold; close one first", retry_after=1.0)  # fmt: skip
            if sum(self._open.values()) >= self.total:
                raise LimitError(f"the server holds its maximum of {self.total} streams"
                                 f"{self.who}; retry later", retry_after=5.0)  # fmt: skip
            self._open[identity] = mine + 1

    def release(self, identity: str) -> None:
        with self._lock:
            left = self._open.get(identity, 0) - 1
            if left > 0:
                self._open[identity] = left
            else:
                self._open.pop(identity, None)

    def open(self) -> int:
        with self._lock:
            return sum(self._open.values())


class Slots:
    """At most `n` what-if computations at once, each with a deadline.

    The work runs on a thread of its own; when the deadline passes the caller gets
    OverDeadline at once, and the work's slot stays taken until it ends (its solver time
    limits are cut to the deadline too), so abandoned work cannot pile up."""

    def __init__(self, n: int) -> None:
        self._sem = threading.BoundedSemaphore(n)
        self.n = n

    def run(self, fn: Callable[[], T], seconds: float, what: str) -> T:
        if seconds <= 0.01:
            raise OverDeadline(f"{what}: the deadline leaves no time to start")
        if not self._sem.acquire(blocking=False):
            raise LimitError(f"{what}: {self.n} what-if computations already running; retry "
                             "shortly", retry_after=1.0)  # fmt: skip
        box: dict[str, object] = {}
        done = threading.Event()

        def work() -> None:
            background()
            try:
                box["value"] = fn()
            except BaseException as err:  # noqa: BLE001 - handed back to the caller
                box["error"] = err
            finally:
                self._sem.release()
                done.set()

        threading.Thread(target=work, name="fabric-te-whatif", daemon=True).start()
        if not done.wait(seconds):
            raise OverDeadline(f"{what}: not done within its deadline of {seconds:.1f} s")
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]  # type: ignore[return-value]
