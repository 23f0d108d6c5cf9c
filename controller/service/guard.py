"""The one server interceptor: every call passes here before any servicer code runs.

In order, per call: who is calling (`auth.identity_of`), may they call this method (the
policy; PERMISSION_DENIED, logged with the identity), the write rate of that identity
(RESOURCE_EXHAUSTED with a `retry-after-ms` trailer), the stream budget for long-lived calls,
then the request bytes: over the method's size limit is RESOURCE_EXHAUSTED naming the largest
field (found from the wire format's lengths, the message is not parsed), bytes that do not
parse are INVALID_ARGUMENT (gRPC's own deserializer would log a traceback and answer
INTERNAL, and leave a client stream hanging). Every call is counted by method and status code.

Every method is served as a client stream at the wire (a unary request is one message), so
a request's body is read only once its caller is admitted: a caller without the role gets
PERMISSION_DENIED with nothing of the body read beyond gRPC's flow-control window. Streams
of callers without a role (health watches, reflection) come from a pool of their own; a
client stream with no message for `stream_idle_seconds` is ended (DEADLINE_EXCEEDED), and so
is a server stream whose client took no message for as long (gRPC holds the handler in its
send, so the handler's own checks never run: a route watch ends ABORTED, to resume); after
a policy reload, `revoke` ends the open streams the new policy no longer allows
(PERMISSION_DENIED).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from controller.errors import InputError, LimitError
from controller.service.auth import Identity, PolicyStore, identity_of
from controller.service.errors import RETRY_AFTER_KEY
from controller.service.limits import (
    MESSAGE_LIMITS,
    OTHER_MESSAGE_LIMIT,
    WRITES,
    Limits,
    RateLimiter,
    StreamBudget,
)
from controller.service.metrics import RpcMetrics

log = logging.getLogger("fabric_te.guard")
# how a server stream ends whose client stopped reading: a route watch as when it falls
# behind (the client resumes from the last version it received), others as too slow
STALLED_CODE = {"WatchRoutes": grpc.StatusCode.ABORTED}


class Refused(Exception):
    """A call the guard turns away before the servicer sees it."""

    def __init__(self, code: grpc.StatusCode, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.code, self.retry_after = code, retry_after


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def wire_largest_field(raw: bytes, descriptor: Any, prefix: str = "") -> tuple[str, int]:
    """(field path, bytes) of the field holding most of the serialized message `raw`, read
    from the wire format's tags and lengths alone (nothing is parsed or copied), descending
    into a non-repeated message field; ("request", len) if the bytes do not scan."""
    sizes: dict[int, int] = {}
    last: dict[int, tuple[int, int]] = {}
    at = 0
    try:
        while at < len(raw):
            key, body = _varint(raw, at)
            number, kind = key >> 3, key & 7
            if kind == 0:
                _, end = _varint(raw, body)
            elif kind == 1:
                end = body + 8
            elif kind == 5:
                end = body + 4
            elif kind == 2:
                length, body = _varint(raw, body)
                end = body + length
            else:
                raise ValueError(f"wire type {kind}")
            if end > len(raw):
                raise ValueError("truncated")
            sizes[number] = sizes.get(number, 0) + end - at
            last[number] = (body, end)
            at = end
    except (IndexError, ValueError):
        pass
    if not sizes:
        return prefix.rstrip(".") or "request", len(raw)
    number = max(sizes, key=lambda n: sizes[n])
    field = descriptor.fields_by_number.get(number) if descriptor is not None else None
    if field is None:
        return f"{prefix}field {number}", sizes[number]
    if field.message_type is not None and not _repeated(field):
        body, end = last[number]
        return wire_largest_field(raw[body:end], field.message_type, f"{prefix}{field.name}.")
    return f"{prefix}{field.name}", sizes[number]


def _repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


def end_call(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> None:
    """End a call from any thread with `code` and `details` (CANCELLED where gRPC offers no
    way to give a status from outside the handler)."""
    call = getattr(getattr(context, "_rpc_event", None), "call", None)
    context.set_code(code)  # the code the call is counted under, when its handler ends
    try:
        call.cancel(code.value[0], details)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - not this gRPC's internals: cancel as the API allows
        context.cancel()  # type: ignore[attr-defined]


@dataclass
class OpenStream:
    """A long-lived call in progress, as the guard watches it."""

    identity: Identity
    method: str
    label: str
    ours: bool
    context: grpc.ServicerContext
    client_sends: bool  # a client stream: idle when no message came for a while
    roleless: bool
    last: float = field(default_factory=time.monotonic)
    sending: float | None = None  # when the message gRPC is sending now was handed over


class Guard(grpc.ServerInterceptor):
    """Authorization, limits, parsing and metrics for every method of the server."""

    def __init__(
        self,
        service: str,
        limits: Limits,
        metrics: RpcMetrics,
        policy: PolicyStore | None = None,
    ) -> None:
        self.service = service  # full name of the TrafficEngineering service
        self.limits = limits
        self.metrics = metrics
        self.policy = policy  # None: no authorization (plaintext local demo)
        self.rate = RateLimiter(limits.write_rate, limits.write_burst)
        self.streams = StreamBudget(limits.streams, limits.streams_per_identity)
        self.roleless_streams = StreamBudget(
            limits.streams_roleless, limits.streams_per_identity, " for callers without a role"
        )
        self._lock = threading.Lock()
        self._open: dict[int, OpenStream] = {}
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # ---- checks -----------------------------------------------------------------------
    def _roles(self, identity: Identity) -> frozenset[str] | None:
        """The caller's roles; None without a policy (everyone may do everything)."""
        return None if self.policy is None else self.policy.policy.roles_of(identity)

    def _admit(self, method: str, ours: bool, context: grpc.ServicerContext) -> Identity:
        identity = identity_of(context.auth_context())
        if ours and self.policy is not None and not self.policy.policy.allows(identity, method):
            roles = sorted(self.policy.policy.roles_of(identity))
            log.warning("permission denied", extra={  # peer-controlled: fields of their own
                "identity": identity.name, "method": method, "roles": roles})  # fmt: skip
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"{identity.name} may not call {method}")  # fmt: skip
        if ours and method in WRITES:
            wait = self.rate.take(identity.name)
            if wait > 0:
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"rate limit: {self.limits.write_rate:g} writes/s per client (burst "
                    f"{self.limits.write_burst}) for {identity.name}; retry after {wait:.2f} s",
                    retry_after=wait,
                )
        return identity

    def _parse(self, method: str, ours: bool, raw: bytes, parse: Callable[[bytes], Any],
               descriptor: Any = None) -> Any:  # fmt: skip
        """Over the method's limit: LimitError naming the largest field, found from the
        wire format's lengths; the message itself is never parsed."""
        limit = MESSAGE_LIMITS.get(method, OTHER_MESSAGE_LIMIT) if ours else OTHER_MESSAGE_LIMIT
        if not isinstance(raw, bytes):
            return raw
        if len(raw) > limit:
            field, size = wire_largest_field(raw, descriptor)
            raise LimitError(f"{method}: request of {len(raw):,} bytes is over the "
                             f"{limit:,}-byte limit of {method}; largest field: {field} "
                             f"({size:,} bytes of it)")  # fmt: skip
        try:
            return parse(raw)
        except (DecodeError, ValueError, TypeError) as err:
            raise InputError(f"{method}: malformed request bytes: {err}") from None

    # ---- the interceptor --------------------------------------------------------------
    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:  # fmt: skip
        """Every method is served as a client stream at the wire, so that nothing of a
        request is read before its caller was admitted (a unary call is one message)."""
        handler = continuation(details)
        if handler is None:
            return None
        service, _, method = details.method.lstrip("/").rpartition("/")
        ours = service == self.service
        label = method if ours else f"{service}/{method}"
        parse = handler.request_deserializer or (lambda raw: raw)
        descriptor = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
        if descriptor is None:  # FromString is a static method: find its message class
            owner = getattr(parse, "__qualname__", "").rpartition(".")[0]
            module = sys.modules.get(getattr(parse, "__module__", "") or "")
            descriptor = getattr(getattr(module, owner, None), "DESCRIPTOR", None)
        kwargs = {"request_deserializer": None,
                  "response_serializer": handler.response_serializer}  # fmt: skip
        call = Call(method, label, ours, parse, descriptor)
        if handler.unary_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.unary_unary, call), **kwargs)
        if handler.unary_stream:
            return grpc.stream_stream_rpc_method_handler(
                self._unary_stream(handler.unary_stream, call), **kwargs)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._stream_in(handler.stream_unary, call), **kwargs)
        return grpc.stream_stream_rpc_method_handler(
            self._stream_stream(handler.stream_stream, call), **kwargs)

    def _finish(self, label: str, context: grpc.ServicerContext, start: float | None,
                failed: bool) -> None:  # fmt: skip
        code = context.code()  # type: ignore[attr-defined]
        if code is None and not context.is_active():  # the client went away
            code = grpc.StatusCode.CANCELLED
        elif code is None:
            code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
        self.metrics.requests.labels(label, code.name).inc()
        if start is not None:
            self.metrics.seconds.labels(label).observe(time.perf_counter() - start)

    def _refuse(self, context: grpc.ServicerContext, err: Exception) -> NoReturn:
        code = err.code if isinstance(err, Refused) else (
            grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(err, LimitError)
            else grpc.StatusCode.INVALID_ARGUMENT)  # fmt: skip
        retry = getattr(err, "retry_after", None)
        if retry is not None:
            context.set_trailing_metadata(((RETRY_AFTER_KEY, str(int(retry * 1000) + 1)),))
        context.abort(code, str(err))
        raise AssertionError("abort returns only by raising")  # pragma: no cover

    def _first(self, call: Call, requests: Iterator[bytes]) -> Any:
        """The one request message of a unary-request call, checked and parsed."""
        raw = next(requests, None)
        if raw is None:
            raise InputError(f"{call.method}: no request message")
        return self._parse(call.method, call.ours, raw, call.parse, call.descriptor)

    def _unary(self, behaviour: Any, call: Call) -> Any:
        def run(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            start, failed = time.perf_counter(), True
            try:
                try:
                    self._admit(call.method, call.ours, context)
                    request = self._first(call, requests)
                except (Refused, InputError, LimitError) as err:
                    self._refuse(context, err)
                reply = behaviour(request, context)
                failed = False
                return reply
            finally:
                self._finish(call.label, context, start, failed)

        return run

    @contextmanager
    def _stream_slot(self, call: Call, context: grpc.ServicerContext, client_sends: bool,
                     parse_first: Callable[[], Any] | None = None) -> Iterator[Any]:  # fmt: skip
        """Admit a streaming call (and parse its request, if it has one) and hold one of the
        caller's stream slots while it runs; refusals end the call before a slot is taken.
        Callers without a role take theirs from a pool of their own."""
        failed, held, entry = True, None, None
        try:
            try:
                identity = self._admit(call.method, call.ours, context)
                request = parse_first() if parse_first is not None else None
                roleless = self._roles(identity) == frozenset()
                budget = self.roleless_streams if roleless else self.streams
                budget.acquire(identity.name)
                held = (budget, identity.name)
            except (Refused, InputError, LimitError) as err:
                self._refuse(context, err)
            entry = OpenStream(identity, call.method, call.label, call.ours, context,
                               client_sends, roleless)  # fmt: skip
            self._watch(entry)
            self.metrics.streams.inc()
            try:
                yield request, entry
            finally:
                self.metrics.streams.dec()
            failed = False
        finally:
            if entry is not None:
                with self._lock:
                    self._open.pop(id(entry), None)
            if held is not None:
                held[0].release(held[1])
            self._finish(call.label, context, None, failed)

    def _unary_stream(self, behaviour: Any, call: Call) -> Any:
        def run(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
            first = partial(self._first, call, requests)
            with self._stream_slot(call, context, False, first) as (request, entry):
                for message in behaviour(request, context):
                    entry.sending = time.monotonic()  # gRPC sends it before asking again:
                    yield message  # a client that stopped reading holds us here
                    entry.sending = None

        return run

    def _messages(self, requests: Iterator[bytes], call: Call, entry: OpenStream,
                  context: grpc.ServicerContext) -> Iterator[Any]:  # fmt: skip
        """Parse a client stream; errors end the call (as a domain error for our servicer,
        which maps it; as an abort for the others). Each message resets the idle clock."""
        received = 0
        for i, raw in enumerate(requests):
            entry.last = time.monotonic()
            received += len(raw) if isinstance(raw, bytes) else 0
            try:
                if i >= self.limits.stream_max_messages:
                    raise LimitError(f"{call.method}: more than "
                                     f"{self.limits.stream_max_messages:,} messages in one "
                                     "stream; send them in batches")  # fmt: skip
                if received > self.limits.stream_max_bytes:
                    raise LimitError(f"{call.method}: more than "
                                     f"{self.limits.stream_max_bytes:,} bytes in one stream "
                                     f"(message {i}); send them in batches")  # fmt: skip
                try:
                    yield self._parse(call.method, call.ours, raw, call.parse, call.descriptor)
                except (InputError, LimitError) as err:
                    raise type(err)(f"message {i}: {err}") from None
            except (InputError, LimitError) as err:
                if call.ours:
                    raise
                self._refuse(context, err)

    def _stream_in(self, behaviour: Any, call: Call) -> Any:
        def run(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            with self._stream_slot(call, context, True) as (_, entry):
                return behaviour(self._messages(requests, call, entry, context), context)

        return run

    def _stream_stream(self, behaviour: Any, call: Call) -> Any:
        def run(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
            with self._stream_slot(call, context, True) as (_, entry):
                yield from behaviour(self._messages(requests, call, entry, context), context)

        return run

    # ---- open streams: idle ones end, revoked ones end ----------------------------------
    def _watch(self, entry: OpenStream) -> None:
        with self._lock:
            self._open[id(entry)] = entry
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._idle_loop, daemon=True,
                                                  name="fabric-te-stream-idle")  # fmt: skip
                self._watchdog.start()

    def open_streams(self) -> list[OpenStream]:
        """The long-lived calls in progress."""
        with self._lock:
            return list(self._open.values())

    def _idle_loop(self) -> None:
        limit = self.limits.stream_idle_seconds
        while not self._stop.wait(min(max(limit / 4, 0.05), 5.0)):
            now = time.monotonic()
            for entry in self.open_streams():
                idle = entry.client_sends and now - entry.last > limit
                sending = entry.sending
                stalled = sending is not None and now - sending > limit
                if not (idle or stalled):
                    continue
                with self._lock:
                    if self._open.pop(id(entry), None) is None:
                        continue
                log.info("stalled stream ended" if stalled else "idle stream ended", extra={
                    "identity": entry.identity.name, "method": entry.label,
                    "idle_seconds": round(now - (sending or entry.last), 1)})  # fmt: skip
                if stalled:  # a server stream its client stopped reading: the watch resumes
                    end_call(entry.context, STALLED_CODE.get(entry.method,
                                                             grpc.StatusCode.DEADLINE_EXCEEDED),
                             f"{entry.label}: the client took no message for {limit:g} s; "
                             "stream closed (a route watch resumes from the last version "
                             "it received)")  # fmt: skip
                else:
                    end_call(entry.context, grpc.StatusCode.DEADLINE_EXCEEDED,
                             f"{entry.label}: no message for {limit:g} s; stream closed, "
                             "open a new one when there is something to send")  # fmt: skip

    def revoke(self) -> int:
        """End the open streams the current policy no longer allows (after a reload), and
        those held in the role holders' pool by a caller left without a role; the count."""
        if self.policy is None:
            return 0
        policy, ended = self.policy.policy, 0
        for entry in self.open_streams():
            allowed = policy.allows(entry.identity, entry.method) if entry.ours else (
                entry.roleless or bool(policy.roles_of(entry.identity)))  # fmt: skip
            if allowed:
                continue
            with self._lock:
                if self._open.pop(id(entry), None) is None:
                    continue
            ended += 1
            log.warning("stream revoked", extra={"identity": entry.identity.name,
                                                 "method": entry.label})  # fmt: skip
            end_call(entry.context, grpc.StatusCode.PERMISSION_DENIED,
                     f"{entry.identity.name} may no longer call {entry.label} (policy "
                     "reloaded)")  # fmt: skip
        return ended

    def close(self) -> None:
        """Stop watching streams for idleness."""
        self._stop.set()


@dataclass(frozen=True)
class Call:
    """What the guard knows of a method before any call to it arrives."""

    method: str
    label: str
    ours: bool
    parse: Callable[[bytes], Any]
    descriptor: Any
