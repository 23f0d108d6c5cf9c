"""Three `tectl serve` replicas on a real etcd, sharing one fabric's switch tables (the file
driver): inputs sent to any replica reach all; kill -9 of the leader hands over without
pushing; a paused and resumed old leader pushes nothing; with etcd gone the routes stay,
writes are refused with UNAVAILABLE, and no acknowledged input is lost."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.cli.main import main
from controller.cli.service import status_text
from controller.drivers.file import FileDriver
from controller.errors import DriverUnavailable
from controller.model.fabric import Fabric
from controller.service.client import Client


def _job(fabric: Fabric, i: int) -> pb.Job:
    return pb.Job(id=f"j{i}", hosts=[fabric.host_name(h) for h in (i, 16 + i)], tp=4)


def _until(pred, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = pred()
        except (grpc.RpcError, DriverUnavailable):  # a table file emptied as it was listed
            got = None
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {pred}")


def _tables(fabric: Fabric, path: Path) -> dict[str, tuple]:
    driver = FileDriver(path, fabric=fabric)
    return {sw: driver.read(sw) for sw in driver.switches()}


def _args(etcd, tmp: Path, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    return ["--fabric", "small", "--store", f"etcd://{etcd.endpoint}/fte", "--driver", "file",
            "--driver-dir", str(tmp / "tables"), "--debounce", "0.01", "--lease-ttl", "1",
            "--reconcile-interval", "0.5", "--replica-id", name]  # fmt: skip


def _leader(replicas):  # type: ignore[no-untyped-def]
    for r in replicas:
        if r.proc.poll() is None and r.status().role == "leader":
            return r
    return None


def _settled(replicas, jobs: int):  # type: ignore[no-untyped-def]
    """Every replica knows `jobs` jobs and the tables hold the leader's routes."""
    leader = _leader(replicas)
    if leader is None:
        return None
    for r in replicas:
        s = r.status()
        if len(r.stub.ListJobs(pb.ListJobsRequest()).jobs) != jobs or s.entries_missing:
            return None
        if s.store_revision != leader.status().store_revision:
            return None
    s = leader.status()
    if any(r.status().installed_entries != s.installed_entries for r in replicas):
        return None  # a follower has not read the leader's last push yet
    return leader if s.installed_entries and s.driver_ok and not s.pending_changes else None


def test_three_replicas_share_inputs_fail_over_without_pushing_and_fence(
    small: Fabric,
    etcd, serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    replicas = [serve(_args(etcd, tmp_path, f"r{i}")) for i in range(3)]
    for r in replicas:
        r.ready()
    leader = _until(lambda: _leader(replicas))
    # inputs through every replica, leader or not
    for i, r in enumerate(replicas):
        r.stub.PutJob(pb.PutJobRequest(job=_job(small, i)))
    link = small.link_name(small.rack_link(0, 1))
    follower = next(r for r in replicas if r is not leader)
    follower.stub.ReportLinks(pb.ReportLinksRequest(
        reports=[pb.LinkReport(link=link, state=pb.LinkReport.DOWN)]))  # fmt: skip
    leader = _until(lambda: _settled(replicas, 3))
    for r in replicas:
        s = r.status()
        assert s.leader == leader.status().replica and s.store_revision > 0
        assert [e.job.id for e in r.stub.ListJobs(pb.ListJobsRequest()).jobs] == ["j0", "j1", "j2"]
        assert not any(e.next_hop == link for e in r.stub.GetRoutes(pb.GetRoutesRequest()).entries)
    assert {r.status().ops_pushed > 0 for r in replicas} == {True, False}  # the leader only
    tables = _tables(small, tmp_path / "tables")
    # a follower says who has the routing's figures, not "none yet" / "not installed yet"
    follower = next(r for r in replicas if r is not leader)
    text = status_text(Client(follower.stub).status())
    assert f"last solve  none here: the leader, {leader.status().replica}," in text
    assert "latency     no change" not in text and "precomputed none yet" not in text
    capsys.readouterr()
    assert main(["job", "describe", "j0", "--server", f"127.0.0.1:{follower.port}",
                 "--insecure"]) == 0  # fmt: skip
    described = capsys.readouterr().out
    assert f"figures kept by the leader, {leader.status().replica}" in described
    assert "not installed yet" not in described

    # kill -9 the leader: another takes over and pushes nothing (inputs unchanged)
    leader.proc.kill()
    start = time.monotonic()
    rest = [r for r in replicas if r is not leader]
    new = _until(lambda: _leader(rest), 10)
    took = time.monotonic() - start
    assert took < 3.0
    time.sleep(0.6)  # one reconcile interval
    assert new.status().ops_pushed == 0 and new.status().driver_ok
    assert _tables(small, tmp_path / "tables") == tables

    # SIGSTOP the new leader; a change goes in through the other; SIGCONT: no push from it
    other = next(r for r in rest if r is not new)
    pushed_before = new.status().ops_pushed
    new.proc.send_signal(signal.SIGSTOP)
    other.stub.PutJob(pb.PutJobRequest(job=_job(small, 5)))
    _until(lambda: other.status().role == "leader", 10)
    _until(lambda: other.status().ops_pushed > 0 and not other.status().entries_missing, 10)
    new.proc.send_signal(signal.SIGCONT)
    _until(lambda: new.status().role == "follower", 5)
    _until(lambda: len(new.stub.ListJobs(pb.ListJobsRequest()).jobs) == 4, 5)
    time.sleep(0.6)
    s = new.status()
    assert s.ops_pushed == pushed_before and s.leader == other.status().replica
    assert other.status().driver_ok and not other.status().entries_missing


def test_etcd_down_keeps_routes_refuses_writes_and_loses_no_acknowledged_input(
    small: Fabric,
    etcd, serve, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    replicas = [serve(_args(etcd, tmp_path, f"r{i}")).ready() for i in range(2)]
    acked: list[str] = []
    refused: list[str] = []
    stop, down = threading.Event(), threading.Event()

    def writer() -> None:  # a stream of inputs, alternating replicas, across the outage
        i = 0
        while not stop.is_set() and i < 16:
            if i == 8 and not down.wait(30):  # the second half across it, however fast
                break
            try:
                replicas[i % 2].stub.PutJob(pb.PutJobRequest(job=_job(small, i)), timeout=5)
                acked.append(f"j{i}")
                i += 1
            except grpc.RpcError as err:
                refused.append(f"{err.code().name}: {err.details()}")
                time.sleep(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        _until(lambda: len(acked) >= 4 and any(_tables(small, tmp_path / "tables").values()))
        etcd.stop()  # kill -9 mid-stream
        before = len(acked)
        down.set()
        _until(lambda: len(refused) >= 3, 10)
        assert len(acked) <= before + 1  # at most the write in flight
        assert any(r.startswith("UNAVAILABLE") and "etcd unreachable" in r for r in refused)
        tables = _tables(small, tmp_path / "tables")
        assert sum(len(t) for t in tables.values()) > 0
        for r in replicas:  # fail-static: reads still served, routes stay, nobody leads
            _until(lambda r=r: not r.status().store_ok and r.status().role == "follower", 5)
            assert r.stub.GetRoutes(pb.GetRoutesRequest()).entries
            doc = Client(r.stub).status()
            assert doc["leader"]  # the name from before the store went: said to be stale
            assert f"leader {doc['leader']} as last seen)" in status_text(doc)
        time.sleep(0.6)
        assert _tables(small, tmp_path / "tables") == tables
        etcd.start()
        _until(lambda: len(acked) == 16, 30)
    finally:
        stop.set()
        thread.join(timeout=30)
    _until(lambda: _settled(replicas, 16), 30)
    for r in replicas:
        stored = {e.job.id for e in r.stub.ListJobs(pb.ListJobsRequest()).jobs}
        assert set(acked) <= stored and r.status().store_ok


