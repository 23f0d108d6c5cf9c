"""The one map from domain errors to gRPC status codes.

ValueError (FabricError, FlowError, WorkloadError, ...)  -> INVALID_ARGUMENT
PreconditionError (stale generation, ...)                  -> FAILED_PRECONDITION
DriverError                                                -> UNAVAILABLE
anything else                                              -> INTERNAL
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from controller.drivers import DriverError
from controller.service.state import PreconditionError

log = logging.getLogger("fabric_te.service")
F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["PreconditionError", "mapped", "status_of"]


def status_of(err: BaseException) -> grpc.StatusCode:
    if isinstance(err, PreconditionError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(err, DriverError):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(err, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


def mapped(method: F) -> F:
    """Turn a unary servicer method's domain errors into status codes."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as err:  # noqa: BLE001 - every error leaves as a status
            code = status_of(err)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method.__name__)
            context.abort(code, str(err))

    return wrapper  # type: ignore[return-value]
