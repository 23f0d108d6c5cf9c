"""The one map from the error tree (`controller.errors`) to gRPC status codes.

InputError (FabricError, FlowError, JobError, ...)  -> INVALID_ARGUMENT
PreconditionError (a stale generation, ...)           -> FAILED_PRECONDITION
LpTimeout                                             -> DEADLINE_EXCEEDED
SolverError                                           -> INTERNAL
DriverError                                           -> UNAVAILABLE
StoreConflict (another replica wrote the key first)   -> ABORTED
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
    LpTimeout,
    PreconditionError,
    SolverError,
    StoreConflict,
    StoreError,
)

log = logging.getLogger("fabric_te.service")
F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["mapped", "status_of"]

_STATUS: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (InputError, grpc.StatusCode.INVALID_ARGUMENT),
    (PreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (LpTimeout, grpc.StatusCode.DEADLINE_EXCEEDED),
    (SolverError, grpc.StatusCode.INTERNAL),
    (DriverError, grpc.StatusCode.UNAVAILABLE),
    (StoreConflict, grpc.StatusCode.ABORTED),
    (StoreError, grpc.StatusCode.UNAVAILABLE),
)


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
        except Exception as err:  # noqa: BLE001 - every error leaves as a status
            code = status_of(err)
            expected = InputError | PreconditionError | SolverError | DriverError | StoreError
            if not isinstance(err, expected):
                log.exception("%s failed", method.__name__)
            context.abort(code, str(err))

    return wrapper  # type: ignore[return-value]
