"""`tectl routes show --watch` resumes by itself when the server drops it for falling behind
(the server side, with its `resume-version` trailer, is tested through the API in
tests/controller/service/test_limits.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.cli.service import _watch
from controller.errors import InputError
from controller.service.client import Client


class _Dropped(grpc.RpcError):
    def __init__(self, resume: str | None, code: grpc.StatusCode = grpc.StatusCode.ABORTED):
        self._resume, self._code = resume, code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "fell behind"

    def trailing_metadata(self) -> Any:
        return (("resume-version", self._resume),) if self._resume else ()


class _Stub:
    """WatchRoutes: the first call is dropped at version 7, the second resumes from it."""

    def __init__(self, drop: _Dropped) -> None:
        self.asked: list[int] = []
        self.drop = drop

    def WatchRoutes(self, request: pb.WatchRoutesRequest) -> Iterator[pb.RouteEvent]:
        self.asked.append(request.since_version)
        yield pb.RouteEvent(sync=pb.Sync(version=request.since_version or 5))
        if len(self.asked) == 1:
            raise self.drop
        yield pb.RouteEvent(delta=pb.RouteDelta(version=8))


def test_watch_resumes_from_the_version_the_server_names(capsys) -> None:
    stub = _Stub(_Dropped("7"))
    _watch(Client(stub), 0)
    assert stub.asked == [0, 7]
    out = capsys.readouterr().out
    assert "# fell behind; resuming from version 7" in out and "# delta version 8" in out


def test_a_drop_without_a_version_resumes_from_the_last_one_received(capsys) -> None:
    """A stalled watcher is ended by the guard, which can give no trailer: the watch goes on
    from the last version it received whole (the sync at 5 here)."""
    stub = _Stub(_Dropped(None))
    _watch(Client(stub), 0)
    assert stub.asked == [0, 5]
    assert "# fell behind; resuming from version 5" in capsys.readouterr().out


def test_other_ends_of_a_watch_are_not_retried() -> None:
    stub = _Stub(_Dropped("7", grpc.StatusCode.UNAVAILABLE))
    with pytest.raises(InputError, match="^UNAVAILABLE: fell behind$"):
        _watch(Client(stub), 0)
    assert stub.asked == [0]
