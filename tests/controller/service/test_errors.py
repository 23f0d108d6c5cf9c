"""The one map from the error tree to gRPC status codes."""

from __future__ import annotations

import grpc
import pytest

from controller import errors
from controller.service.errors import status_of

Code = grpc.StatusCode


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.FabricError("x"), Code.INVALID_ARGUMENT),
        (errors.JobError("x", "hosts[0]"), Code.INVALID_ARGUMENT),
        (errors.RouteConflict("x"), Code.INVALID_ARGUMENT),
        (errors.AdvisorError("x"), Code.INVALID_ARGUMENT),
        (errors.PreconditionError("x"), Code.FAILED_PRECONDITION),
        (errors.LpError("x"), Code.INTERNAL),
        (errors.LpTimeout("x"), Code.DEADLINE_EXCEEDED),
        (errors.DriverRejected("x"), Code.UNAVAILABLE),
        (errors.DriverTimeout("x"), Code.UNAVAILABLE),
        (ValueError("a bug, not an input error"), Code.INTERNAL),
        (KeyError("x"), Code.INTERNAL),
    ],
)
def test_each_branch_of_the_tree_has_one_status(error: Exception, code: grpc.StatusCode) -> None:
    assert status_of(error) == code


def test_every_error_class_is_in_the_drawing() -> None:
    drawing = errors.__doc__ or ""
    classes = [
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.FabricTeError)
    ]
    assert len(classes) >= 16
    assert [name for name in classes if name not in drawing] == []
