"""A fabric from a cable list, with a missing cable, a partial rack and the operator's names,
through everything: solve and its certificate, simulate, advise, the exports, the file and
emulated drivers, route files; and the README's example file through `tectl solve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from controller.cli.main import main
from controller.errors import FabricError
from controller.formats.fabric_file import load_fabric
from controller.formats.topology import FORMATS, export
from controller.model.fabric import ABSENT, Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.solver import solve
from sim.jobmix import random_jobs

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "tiny-cables.yaml"


@pytest.fixture(scope="module")
def partial_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, with host gpu-b11 never racked and a CTSW-ATSW cable missing too."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["name"] = "partial"
    doc["devices"] = [d for d in doc["devices"] if d["name"] != "gpu-b11"]
    doc["cables"] = [c for c in doc["cables"] if c["a"] != "gpu-b11"
                     and (c["a"], c["b"]) != ("spine-b1", "super-1")]  # fmt: skip
    for d in doc["devices"]:
        if d["name"] == "leaf-a0":
            d["te_entries"] = 1
    path = tmp_path_factory.mktemp("inventory") / "partial.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def partial(partial_file: Path) -> Fabric:
    return load_fabric(str(partial_file))


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_tectl_solve_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["solve", "--fabric", str(EXAMPLE), "--seed", "1", "--json"])
    te = data["rows"][0]
    assert te["method"] == "fabric-te" and te["mlu"] >= data["bound"]["value"] * (1 - 1e-9)
    assert data["certificate"]["passed"]


def test_solve_and_certificate_never_use_what_is_not_there(partial: Fabric) -> None:
    jobs = random_jobs(partial, seed=4)
    hosts = {h for job in jobs for h in job.hosts}
    assert hosts <= set(partial.usable_hosts.tolist()) and len(hosts) == 7
    flows = jobs_flows(partial, jobs)
    result = solve(partial, LinkHealth.all_up(partial), flows)
    arcs = result.assignment.arcs(partial)
    used = np.unique(arcs[arcs >= 0] // 2)
    assert partial.installed[used].all()  # no path over a cable never installed
    assert result.certificate is not None and result.certificate.passed
    budget = partial.table_budget()
    assert budget[partial.node_by_name("leaf-a0")] == 1


def test_simulate_advise_and_the_drivers(partial_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    fabric = ["--fabric", str(partial_file)]
    sim = _json(capsys, ["simulate", *fabric, "--seed", "2", "--json"])
    assert [r["method"] for r in sim["rows"]] == ["ecmp", "eecmp-16qp", "wcmp-16qp", "pinning"]
    advice = _json(capsys, ["advise", *fabric, "--jobs", "none", "--hosts", "4", "--json"])
    names = {h for c in advice for h in c["hosts"]}
    assert names and all(n.startswith("gpu-") for n in names) and "gpu-b11" not in names
    routes, tables = tmp_path / "routes.npz", tmp_path / "tables"
    data = _json(capsys, ["solve", *fabric, "--seed", "2", "--json", "--out", str(routes),
                          "--apply", "file", "--driver-dir", str(tables)])  # fmt: skip
    assert data["apply"]["push_ok"]
    written = {p.stem for p in tables.glob("*.json")}
    assert written and all(n.startswith("leaf-") for n in written)
    row = json.loads(next(iter(tables.glob("*.json"))).read_text())["entries"][0]
    assert row["in_port_port"].startswith("Ethernet") and row["dst_host_name"].startswith("gpu-")
    verify = _json(capsys, ["routes", "verify", str(routes), *fabric, "--json"])
    assert verify["ok"]
    applied = _json(capsys, ["solve", *fabric, "--seed", "2", "--json", "--apply", "emulated"])
    assert applied["apply"]["verify_ok"]


def test_a_missing_cable_cannot_be_brought_up(
    partial_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["solve", "--fabric", str(partial_file), "--fail", "spine-b1:super-1=up"]) == 2
    assert "spine-b1:super-1 is not installed" in capsys.readouterr().err


def test_exports_name_the_inventory(partial: Fabric) -> None:
    for fmt in FORMATS:
        text = export(partial, fmt)
        assert ("gpu-a00" in text or "gpu-a[00-01]" in text) and "gpu-b11" not in text
        assert ABSENT not in text and "host-p" not in text
    labels = json.loads(export(partial, "k8s-labels"))
    assert len(labels) == 7 and all("kubernetes.io/hostname" not in v for v in labels.values())
    conf = export(partial, "slurm-conf")
    assert "SwitchName=leaf-b1 Nodes=gpu-b10\n" in conf
    assert "SwitchName=leaf-a0 Nodes=gpu-a[00-01]\n" in conf


def test_route_files_of_a_renamed_fabric_are_refused(partial_file: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    routes = tmp_path / "routes.json"
    assert main(["solve", "--fabric", str(partial_file), "--seed", "1", "--out", str(routes)]) == 0
    renamed = tmp_path / "partial.yaml"  # the same fabric name, one host renamed
    renamed.write_text(partial_file.read_text().replace("gpu-a01", "gpu-q01"))
    capsys.readouterr()
    assert main(["routes", "verify", str(routes), "--fabric", str(renamed)]) == 2
    assert "fingerprint" in capsys.readouterr().err


def test_the_service_speaks_the_inventorys_names(partial: Fabric) -> None:
    import grpc

    from controller.api.fabric_te.v1 import te_pb2 as pb
    from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
    from controller.service.engine import Engine
    from controller.service.server import start
    from sim.driver import EmulatedDriver

    running = start(Engine(partial, EmulatedDriver(partial), debounce=0.01), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        stub = pb_grpc.TrafficEngineeringStub(channel)
        stub.PutJob(pb.PutJobRequest(job=pb.Job(id="a", hosts=["gpu-a00", "gpu-a10", "gpu-b00"],
                                                tp=2)))  # fmt: skip
        assert running.engine.wait_idle()
        entries = stub.GetRoutes(pb.GetRoutesRequest()).entries
        assert entries and {e.switch for e in entries} <= set(partial.switch_names())
        assert all(e.dst_host.startswith("gpu-") for e in entries)
        with pytest.raises(grpc.RpcError) as err:
            stub.ReportLinks(pb.ReportLinksRequest(reports=[
                pb.LinkReport(link="spine-b1:super-1", state=pb.LinkReport.UP)]))  # fmt: skip
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not installed" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.PutJob(pb.PutJobRequest(job=pb.Job(id="b", hosts=["gpu-b11"], tp=2)))
        assert "unknown host 'gpu-b11'" in err.value.details()
        assert not stub.Status(pb.StatusRequest()).links  # a missing cable is not "down"
    finally:
        channel.close()
        running.stop(grace=0.5)


def test_unknown_names_in_a_fabric_are_errors(partial: Fabric) -> None:
    with pytest.raises(FabricError, match="unknown node"):
        partial.host_by_name("host-p0-r0-h0")  # the index model's names are not the fabric's
