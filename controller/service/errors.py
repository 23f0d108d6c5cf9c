"""The one map from the error tree (`controller.errors`) to gRPC status codes.

InputError (FabricError, FlowError, JobError, ...)  -> INVALID_ARGUMENT
PreconditionError (a stale generation, ...)           -> FAILED_PRECONDITION
LpTimeout                                             -> DEADLINE_EXCEEDED
SolverError                                           -> INTERNAL
DriverError                                           -> UNAVAILABLE
OverDeadline                                          -> DEADLINE_EXCEEDED
LimitError (size, rate, cost, streams)                -> RESOURCE_EXHAUSTED, with the
                                                         `retry-after-ms` trailer if set
StoreConflict (another replica wrote the key first)   -> ABORTED
StoreAmbiguous (a write sent, no answer: outcome unknown) -> UNKNOWN
StoreError (store unreachable: writes refused, ...)   -> UNAVAILABLE
anything else (a bug)                                 -> INTERNAL, traceback logged
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from controller.errors import (
    DriverError,
    InputError,
    LimitError,
    LpTimeout,
    OverDeadline,
    PreconditionError,
    SolverError,
    StoreAmbiguous,
    StoreConflict,
    StoreError,
)

log = logging.getLogger("fabric_te.service")
F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["RETRY_AFTER_KEY", "mapped", "status_of"]

_STATUS: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (InputError, grpc.StatusCode.INVALID_ARGUMENT),
    (PreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (LpTimeout, grpc.StatusCode.DEADLINE_EXCEEDED),
    (SolverError, grpc.StatusCode.INTERNAL),
    (DriverError, grpc.StatusCode.UNAVAILABLE),
    (OverDeadline, grpc.StatusCode.DEADLINE_EXCEEDED),
    (LimitError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StoreConflict, grpc.StatusCode.ABORTED),
    (StoreAmbiguous, grpc.StatusCode.UNKNOWN),
    (StoreError, grpc.StatusCode.UNAVAILABLE),
)
_EXPECTED = (InputError, PreconditionError, SolverError, DriverError, StoreError, LimitError)
RETRY_AFTER_KEY = "retry-after-ms"  # trailing metadata: how long to wait before retrying


def status_of(err: BaseException) -> grpc.StatusCode:
    """The status code for `err`: the first branch of the tree it belongs to."""
    for cls, code in _STATUS:
        if isinstance(err, cls):
            return code
    return grpc.StatusCode.INTERNAL


def mapped(method: F) -> F:
    """Turn a unary servicer method's domain errors into status codes."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except grpc.RpcError:  # the call was cancelled under us (client gone, shutdown)
            raise  # gRPC knows this error as its own: no traceback, no second status
        except Exception as err:  # noqa: BLE001 - every error leaves as a status
            code = status_of(err)
            if not isinstance(err, _EXPECTED):
                log.exception("%s failed", method.__name__)
            retry = getattr(err, "retry_after", None)
            if retry is not None:
                context.set_trailing_metadata(((RETRY_AFTER_KEY, str(int(retry * 1000) + 1)),))
            context.abort(code, str(err))

    return wrapper  # type: ignore[return-value]
