"""The one server interceptor: every call passes here before any servicer code runs.

In order, per call: who is calling (`auth.identity_of`), may they call this method (the
policy; PERMISSION_DENIED, logged with the identity), the write rate of that identity
(RESOURCE_EXHAUSTED with a `retry-after-ms` trailer), the stream budget for long-lived calls,
then the request bytes: over the method's size limit is RESOURCE_EXHAUSTED naming the largest
field, bytes that do not parse are INVALID_ARGUMENT (gRPC's own deserializer would log a
traceback and answer INTERNAL, and leave a client stream hanging). Every call is counted by
method and status code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError, Message

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


class Refused(Exception):
    """A call the guard turns away before the servicer sees it."""

    def __init__(self, code: grpc.StatusCode, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.code, self.retry_after = code, retry_after


def largest_field(msg: Message, prefix: str = "") -> tuple[str, int]:
    """(field path, bytes) of the field holding most of `msg`, descending into messages."""
    best, size = "", 0
    for fd, value in msg.ListFields():
        part = type(msg)()
        if fd.is_repeated:
            getattr(part, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(part, fd.name).CopyFrom(value)
        else:
            setattr(part, fd.name, value)
        n = part.ByteSize()
        if n > size:
            best, size = fd.name, n
            chosen, repeated = value, fd.is_repeated
    if not best:
        return prefix.rstrip(".") or "request", msg.ByteSize()
    if not repeated and isinstance(chosen, Message):
        return largest_field(chosen, f"{prefix}{best}.")
    return f"{prefix}{best}", size


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

    # ---- checks -----------------------------------------------------------------------
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

    def _parse(self, method: str, ours: bool, raw: bytes, parse: Callable[[bytes], Any]) -> Any:
        limit = MESSAGE_LIMITS.get(method, OTHER_MESSAGE_LIMIT) if ours else OTHER_MESSAGE_LIMIT
        if not isinstance(raw, bytes):
            return raw
        if len(raw) > limit:
            where = "request"
            try:
                field, size = largest_field(parse(raw))
                where = f"{field} ({size:,} bytes of it)"
            except Exception:  # noqa: BLE001 - the size is the error; the field is a hint
                pass
            raise LimitError(f"{method}: request of {len(raw):,} bytes is over the "
                             f"{limit:,}-byte limit of {method}; largest field: {where}")
        try:
            return parse(raw)
        except (DecodeError, ValueError, TypeError) as err:
            raise InputError(f"{method}: malformed request bytes: {err}") from None

    # ---- the interceptor --------------------------------------------------------------
    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:  # fmt: skip
        handler = continuation(details)
        if handler is None:
            return None
        service, _, method = details.method.lstrip("/").rpartition("/")
        ours = service == self.service
        label = method if ours else f"{service}/{method}"
        parse = handler.request_deserializer or (lambda raw: raw)
        kwargs = {"request_deserializer": None,
                  "response_serializer": handler.response_serializer}  # fmt: skip
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method, label, ours, parse), **kwargs)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(handler.unary_stream, method, label, ours, parse), **kwargs)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._stream_in(handler.stream_unary, method, label, ours, parse), **kwargs)
        return grpc.stream_stream_rpc_method_handler(
            self._stream_stream(handler.stream_stream, method, label, ours, parse), **kwargs)

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

    def _unary(self, behaviour: Any, method: str, label: str, ours: bool, parse: Any) -> Any:
        def call(raw: bytes, context: grpc.ServicerContext) -> Any:
            start, failed = time.perf_counter(), True
            try:
                try:
                    self._admit(method, ours, context)
                    request = self._parse(method, ours, raw, parse)
                except (Refused, InputError, LimitError) as err:
                    self._refuse(context, err)
                reply = behaviour(request, context)
                failed = False
                return reply
            finally:
                self._finish(label, context, start, failed)

        return call

    @contextmanager
    def _stream_slot(self, method: str, label: str, ours: bool, context: grpc.ServicerContext,
                     parse_first: Callable[[], Any] | None = None) -> Iterator[Any]:  # fmt: skip
        """Admit a streaming call (and parse its request, if it has one) and hold one of the
        caller's stream slots while it runs; refusals end the call before a slot is taken."""
        failed, held = True, None
        try:
            try:
                identity = self._admit(method, ours, context)
                request = parse_first() if parse_first is not None else None
                self.streams.acquire(identity.name)
                held = identity.name
            except (Refused, InputError, LimitError) as err:
                self._refuse(context, err)
            self.metrics.streams.inc()
            try:
                yield request
            finally:
                self.metrics.streams.dec()
            failed = False
        finally:
            if held is not None:
                self.streams.release(held)
            self._finish(label, context, None, failed)

    def _unary_stream(self, behaviour: Any, method: str, label: str, ours: bool,
                      parse: Any) -> Any:  # fmt: skip
        def call(raw: bytes, context: grpc.ServicerContext) -> Iterator[Any]:
            first = partial(self._parse, method, ours, raw, parse)
            with self._stream_slot(method, label, ours, context, first) as request:
                yield from behaviour(request, context)

        return call

    def _messages(self, requests: Iterator[bytes], method: str, ours: bool, parse: Any,
                  context: grpc.ServicerContext) -> Iterator[Any]:  # fmt: skip
        """Parse a client stream; errors end the call (as a domain error for our servicer,
        which maps it; as an abort for the others)."""
        for i, raw in enumerate(requests):
            try:
                if i >= self.limits.stream_max_messages:
                    raise LimitError(f"{method}: more than {self.limits.stream_max_messages:,} "
                                     "messages in one stream; send them in batches")  # fmt: skip
                try:
                    yield self._parse(method, ours, raw, parse)
                except (InputError, LimitError) as err:
                    raise type(err)(f"message {i}: {err}") from None
            except (InputError, LimitError) as err:
                if ours:
                    raise
                self._refuse(context, err)

    def _stream_in(self, behaviour: Any, method: str, label: str, ours: bool,
                   parse: Any) -> Any:  # fmt: skip
        def call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            with self._stream_slot(method, label, ours, context):
                return behaviour(self._messages(requests, method, ours, parse, context), context)

        return call

    def _stream_stream(self, behaviour: Any, method: str, label: str, ours: bool,
                       parse: Any) -> Any:  # fmt: skip
        def call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
            with self._stream_slot(method, label, ours, context):
                yield from behaviour(self._messages(requests, method, ours, parse, context),
                                     context)  # fmt: skip

        return call
