"""The Resilience RPC: a real server on the tiny fabric; its report equals the offline
`tectl resilience` of the same routing, health and options, and one sweep runs at a time."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.errors import LimitError
from controller.formats.route_file import write_routes
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.resilience import SweepRequest, Sweeps
from controller.service.server import Running, start
from sim.driver import EmulatedDriver

DOWN = "rtsw-p0-r0:ctsw-p0-c1"


@pytest.fixture
def service(tiny: Fabric) -> Iterator[tuple[Running, pb_grpc.TrafficEngineeringStub]]:
    engine = Engine(tiny, EmulatedDriver(tiny), debounce=0.01, precompute=False)
    running = start(engine, "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    yield running, pb_grpc.TrafficEngineeringStub(channel)
    channel.close()
    running.stop(grace=0.5)


def _jobs(tiny: Fabric, stub: pb_grpc.TrafficEngineeringStub) -> None:
    """Two jobs across racks and pods, and a link down: the sweep has losses to rank."""
    hosts = [tiny.host_name(h) for h in range(tiny.num_hosts)]
    stub.PutJob(pb.PutJobRequest(job=pb.Job(id="a", hosts=hosts[0:2] + hosts[4:6], tp=2)))
    stub.PutJob(pb.PutJobRequest(job=pb.Job(id="b", hosts=hosts[2:4] + hosts[6:8], tp=2)))
    down = pb.LinkReport(link=DOWN, state=pb.LinkReport.DOWN)
    stub.ReportLinks(pb.ReportLinksRequest(reports=[down]))


def _run(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    from controller.cli.main import main

    assert main(args) == 0
    return capsys.readouterr().out


def test_the_rpc_report_equals_the_offline_sweep(
    tiny: Fabric, service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    running, stub = service
    _jobs(tiny, stub)
    assert running.engine.wait_idle()
    target = running.engine.installer.target
    assert target is not None and (target.health.factor == 0).sum() == 1
    routes = tmp_path / "installed.npz"
    write_routes(routes, tiny, target.assignment, running.engine.installed)
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    offline = ["--fabric", "tiny", "--routes", str(routes), "--fail", f"{DOWN}=down",
               "--workers", "1"]  # fmt: skip
    # (offline, --seed is the first hash seed too: the service's is 1)
    for extra in (["--json"], ["--json", "--kinds", "link,ctsw", "--doubles", "5"]):
        served = json.loads(_run(capsys, ["resilience", *server, *extra]))
        local = json.loads(_run(capsys, ["resilience", *offline, *extra]))
        run = served.pop("run")
        local.pop("run")
        assert served == local
        assert run["runner"] == "local" and run["workers"] == 2  # the default bound
        assert run["state_version"] == running.engine.state_version
        assert any(e["worst_loss"]["fabric-te"] > 0 for e in served["elements"])
    # the text report too, top 3
    text = _run(capsys, ["resilience", *server, "--top", "3"])
    assert text == _run(capsys, ["resilience", *offline, "--top", "3"])
    assert "elements ranked by the jobs they stall" in text
    # nothing was pushed or changed by the sweeps
    assert running.engine.installer.target is target


def test_bad_requests_and_nothing_installed(tiny: Fabric, service) -> None:  # type: ignore[no-untyped-def]
    running, stub = service
    with pytest.raises(grpc.RpcError) as err:
        stub.Resilience(pb.ResilienceRequest(), timeout=30)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no routing is installed" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.Resilience(pb.ResilienceRequest(kinds=["link", "cable"]), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "kinds" in err.value.details() and "cable" in err.value.details()


def test_server_owned_options_are_refused_with_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from controller.cli.main import main

    assert main(["resilience", "--server", "127.0.0.1:1", "--insecure", "--hashes", "8"]) == 2
    assert "--hashes: not with --server" in capsys.readouterr().err
    # the controller's own fabric is swept: another named here was ignored, as was --fill
    assert main(["resilience", "--server", "127.0.0.1:1", "--insecure", "--fabric", "tiny",
                 "--fill", "0.5"]) == 2  # fmt: skip
    assert "--fabric, --fill: not with --server" in capsys.readouterr().err
    # --kinds is read as offline, before the call: '' (and a typo) are errors, not all kinds
    for kinds in ("", "link,cable"):
        assert main(["resilience", "--server", "127.0.0.1:1", "--insecure", "--kinds",
                     kinds]) == 2  # fmt: skip
        assert "--kinds: unknown element kind(s)" in capsys.readouterr().err


def test_one_sweep_at_a_time(tiny: Fabric, service) -> None:  # type: ignore[no-untyped-def]
    """A second sweep while one runs is refused at once (RESOURCE_EXHAUSTED over gRPC)."""
    running, stub = service
    _jobs(tiny, stub)
    assert running.engine.wait_idle()
    sweeps = Sweeps(max_workers=1, seconds=600)
    e = running.engine
    inputs = sweeps.inputs(tiny, e.installer.target, e.options, SweepRequest(kinds=("rtsw",)))
    started, release = threading.Event(), threading.Event()

    def alive() -> bool:  # called after each batch: holds the first sweep open
        started.set()
        return release.wait(60)

    first = threading.Thread(target=sweeps.run, args=(inputs, 1, alive), daemon=True)
    first.start()
    try:
        assert started.wait(120) and sweeps.running
        with pytest.raises(LimitError, match="already running") as err:
            sweeps.run(inputs, 1, lambda: True)
        assert err.value.retry_after is not None
    finally:
        release.set()
        first.join(120)
    assert not sweeps.running
    result, stats = sweeps.run(inputs, 1, lambda: True)
    assert stats.workers == 1 and len(result.names) == tiny.num_racks
