"""`tectl serve` with the embedded store, restarted by SIGTERM and by kill -9: no input
acknowledged before is lost, and a restart with unchanged inputs pushes nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.model.fabric import Fabric
from sim.processes import free_port


class Serve:
    """One `tectl serve` process on the file driver and a state directory."""

    def __init__(self, tmp: Path, port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "small",
             "--insecure", "--listen", f"127.0.0.1:{port}", "--metrics-port", "0",
             "--debounce", "0.01", "--driver", "file", "--driver-dir", str(tmp / "tables"),
             "--store", f"dir:{tmp / 'state'}"],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = pb_grpc.TrafficEngineeringStub(self.channel)

    def settled(self, timeout: float = 30) -> pb.StatusResponse:
        """Status once the routes answer to every input (two equal readings)."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            s = self.stub.Status(pb.StatusRequest())
            key = (s.state_version, s.routes_version, s.installed_entries, s.ops_pushed)
            if key == last and s.installed_entries and not s.entries_missing:
                return s
            last = key
            time.sleep(0.3)
        raise AssertionError("controller did not settle")

    def figures(self, timeout: float = 30) -> dict[str, tuple[int, int, float]]:
        """Per job (flows, TE flows, predicted busbw), once every job's is predicted."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.stub.ListJobs(pb.ListJobsRequest()).jobs
            if jobs and all(e.HasField("figures") and e.figures.predicted for e in jobs):
                return {e.job.id: (e.figures.flows, e.figures.te_flows, e.figures.predicted_busbw)
                        for e in jobs}  # fmt: skip
            time.sleep(0.2)
        raise AssertionError("the jobs' figures were not predicted")

    def quiet(self, timeout: float = 60) -> tuple[pb.StatusResponse, dict]:
        """Status and figures once both stand still: a repair's push settles first, and a
        global solve may follow it (then its push, then its prediction)."""
        deadline = time.monotonic() + timeout
        status, figures = self.settled(), self.figures()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            again, seen = self.settled(), self.figures()
            if (seen == figures and again.routes_version == status.routes_version
                    and not again.pending_changes):  # fmt: skip
                return again, seen
            status, figures = again, seen
        raise AssertionError("the controller's routes and figures did not stand still")

    def stop(self, sig: int) -> None:
        self.channel.close()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=20)


def _job(fabric: Fabric, i: int) -> pb.Job:
    return pb.Job(id=f"j{i}", hosts=[fabric.host_name(h) for h in (i, 16 + i)], tp=4)


def test_sigterm_restart_keeps_inputs_and_pushes_nothing(small: Fabric, tmp_path: Path) -> None:
    port = free_port()
    srv = Serve(tmp_path, port)
    try:
        for i in range(6):
            srv.stub.PutJob(pb.PutJobRequest(job=_job(small, i)))
        link = small.link_name(small.rack_link(0, 1))
        srv.stub.ReportLinks(pb.ReportLinksRequest(
            reports=[pb.LinkReport(link=link, state=pb.LinkReport.DOWN)]))  # fmt: skip
        before, figures = srv.quiet()
        jobs = [(e.job.id, e.generation) for e in srv.stub.ListJobs(pb.ListJobsRequest()).jobs]
        routes = srv.stub.GetRoutes(pb.GetRoutesRequest()).entries
        assert before.installed_entries > 0 and not any(
            e.next_hop == link for e in routes)  # fmt: skip
    finally:
        srv.stop(signal.SIGTERM)
    srv = Serve(tmp_path, port)
    try:
        after = srv.settled()
        again = [(e.job.id, e.generation) for e in srv.stub.ListJobs(pb.ListJobsRequest()).jobs]
        assert again == jobs
        assert after.ops_pushed == 0 and after.installed_entries == before.installed_entries
        assert after.driver_ok and after.entries_missing == 0 and after.store.startswith("dir:")
        assert list(srv.stub.GetRoutes(pb.GetRoutesRequest()).entries) == list(routes)
        # the figures of the routing restored, as before the restart, not blank until the
        # next change; versions go on from where they were
        assert srv.figures() == figures and all(f[0] for f in figures.values())
        assert after.state_version >= before.state_version
        status = srv.stub.Status(pb.StatusRequest())
        assert status.last_solve["mlu"] == before.last_solve["mlu"]
        assert status.last_solve["restored"] == 1
        # no solve since the start: the status says so, with the restored routing's figures
        from controller.cli.service import status_text
        from controller.service.client import Client

        text = status_text(Client(srv.stub).status())
        assert "last solve  none since this controller started; the routing restored" in text
        assert f"MLU {before.last_solve['mlu']:.4g} over bound" in text
        assert "certificate not kept across a restart" in text
    finally:
        srv.stop(signal.SIGTERM)


def test_kill_9_mid_stream_loses_no_acknowledged_input(small: Fabric, tmp_path: Path) -> None:
    port = free_port()
    srv = Serve(tmp_path, port)
    acked: list[str] = []
    stub = srv.stub

    def writer() -> None:
        for i in range(16):
            try:
                stub.PutJob(pb.PutJobRequest(job=_job(small, i)), timeout=5)
            except grpc.RpcError:
                return
            acked.append(f"j{i}")

    thread = threading.Thread(target=writer)
    thread.start()
    while len(acked) < 6:
        time.sleep(0.005)
    srv.proc.kill()  # kill -9 in the middle of the stream of writes
    srv.proc.wait(timeout=10)
    thread.join(timeout=10)
    srv.channel.close()
    assert 6 <= len(acked) < 16
    srv = Serve(tmp_path, port)
    try:
        srv.settled()
        stored = {e.job.id for e in srv.stub.ListJobs(pb.ListJobsRequest()).jobs}
        assert set(acked) <= stored
        assert not list((tmp_path / "tables").glob(".*.tmp"))  # no orphans left
        s = srv.stub.Status(pb.StatusRequest())
        assert s.driver_ok and s.entries_missing == 0
    finally:
        srv.stop(signal.SIGTERM)
