"""`tectl routes apply|rollback|release` against a running controller, as an operator runs
them: dry runs change nothing, an apply installs a route file's routes and holds them
(job changes move nothing, link reports are repaired on them), a rollback restores the
checkpoint, a bad file is refused naming its rows with nothing changed, and the held
routes and their checkpoint survive a restart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.formats.route_file import read_routes
from controller.model.fabric import Fabric
from controller.model.jobs import Job
from controller.routes.tables import RouteSet
from controller.service.engine import Engine
from controller.service.server import Running, start
from sim.driver import EmulatedDriver
from sim.processes import free_port


def _route_file(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    """A route file as an operator makes one: `tectl solve ... --out`."""
    assert main(["solve", "--fabric", "small", "--jobs", "random", "--seed", "1",
                 "--out", str(path), *extra]) == 0  # fmt: skip
    capsys.readouterr()


def _tectl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _status(capsys: pytest.CaptureFixture[str], server: list[str]) -> dict:
    code, out, _ = _tectl(capsys, "status", "-o", "json", *server)
    assert code == 0
    return json.loads(out)


def _used_uplink(fabric: Fabric, routes: RouteSet) -> str:
    """A rack-to-CTSW link some entry of `routes` forwards over."""
    for sw in routes.switches():
        for hop in routes.table(sw).next_hop.tolist():
            name = fabric.link_name(hop)
            if name.startswith("rtsw") and ":ctsw" in name:
                return name
    raise AssertionError("no uplink used")


def _hops(engine: Engine) -> set[str]:
    installed = engine.installed
    return {engine.fabric.link_name(h) for sw in installed.switches()
            for h in installed.table(sw).next_hop.tolist()}  # fmt: skip


def _dst_hosts(engine: Engine) -> set[str]:
    installed = engine.installed
    return {engine.fabric.host_name(h) for sw in installed.switches()
            for h in installed.table(sw).dst_host.tolist()}  # fmt: skip


@pytest.fixture
def running(small: Fabric) -> Running:
    served = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0",
                   insecure=True)  # fmt: skip
    yield served
    served.stop(grace=0.5)


def test_apply_holds_rollback_restores(
    small: Fabric, running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine, server = running.engine, ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    jobs = tmp_path / "jobs.json"  # the engine's own routing first: one job over 4 racks
    jobs.write_text(json.dumps({"jobs": [{"id": "own", "tp": 4, "hosts": [
        small.host_name(h) for h in (0, 2, 4, 6)]}]}))  # fmt: skip
    assert _tectl(capsys, "job", "put", str(jobs), *server)[0] == 0
    assert engine.wait_idle()
    own = engine.installed
    assert len(own) > 0
    path = tmp_path / "routes.npz"
    _route_file(path, capsys)
    _, file_routes = read_routes(path, small)

    # dry run: the plan, and nothing changes
    before = _status(capsys, server)
    code, out, _ = _tectl(capsys, "routes", "apply", str(path), "--dry-run", "-o", "json",
                          *server)  # fmt: skip
    plan = json.loads(out)
    assert code == 0 and plan["dry_run"] and plan["entries"] == len(file_routes)
    # solved for the seeded mix, not for the controller's one job: said, not refused
    assert plan["flows_of_no_job"] > 0 and plan["job_flows_missing"] > 0
    assert plan["add"] + plan["replace"] + plan["remove"] > 0
    assert plan["add"] == sum(s["add"] for s in plan["switches"])
    after = _status(capsys, server)
    assert after["routes_version"] == before["routes_version"] and "held" not in after
    assert engine.installed == own
    code, out, _ = _tectl(capsys, "routes", "apply", str(path), "--dry-run", *server)
    assert code == 0 and out.startswith("dry run: apply of routes of routes.npz")
    assert "nothing changed" in out and "warning: these routes were made for other jobs" in out

    # apply: the file's routes installed and held
    code, out, _ = _tectl(capsys, "routes", "apply", str(path), *server)
    assert code == 0 and out.startswith("applied routes of routes.npz"), out
    assert engine.installed == file_routes
    status = _status(capsys, server)
    assert status["held"]["source"] == "routes.npz" and status["held"]["checkpoint"]
    assert status["held"]["entries"] == len(file_routes)
    assert "certificate" not in status  # a file's routes are not certified
    code, text, _ = _tectl(capsys, "status", *server)
    assert "held        routes of routes.npz" in text and "checkpoint kept" in text

    # held: a job change moves nothing; a link report is repaired on the held routes
    jobs.write_text(json.dumps({"jobs": [{"id": "late", "tp": 4, "hosts": [
        small.host_name(h) for h in (1, 3, 5, 7)]}]}))  # fmt: skip
    assert _tectl(capsys, "job", "put", str(jobs), *server)[0] == 0
    assert engine.wait_idle()
    assert engine.installed == file_routes
    link = _used_uplink(small, file_routes)
    moved = engine.metrics.registry.get_sample_value("fabric_te_flows_moved_total") or 0.0
    assert _tectl(capsys, "link", f"{link}=down", *server)[0] == 0
    assert engine.wait_idle()
    assert link not in _hops(engine) and engine.installed != file_routes
    status = _status(capsys, server)
    assert status["held"]["source"] == "routes.npz"
    # the repair's certificate and its flows moved are shown, as for any repair
    assert "certificate" in status and status["certificate"]["passed"]
    assert engine.metrics.registry.get_sample_value("fabric_te_flows_moved_total") > moved

    # rollback: dry run first, then the checkpoint (the engine's routes) is back, repaired
    # for the link down since; the engine resumes and solves the jobs that came meanwhile
    version = engine.routes_version
    code, out, _ = _tectl(capsys, "routes", "rollback", "--dry-run", "-o", "json", *server)
    assert code == 0 and json.loads(out)["dry_run"] and engine.routes_version == version
    code, out, _ = _tectl(capsys, "routes", "rollback", *server)
    assert code == 0 and "rolled back to the checkpoint" in out and "engine routes again" in out
    assert engine.wait_idle()
    status = _status(capsys, server)
    assert "held" not in status and status["certificate"]["passed"]
    assert link not in _hops(engine) and len(engine.installed) > 0
    assert engine.installed != file_routes
    code, _, err = _tectl(capsys, "routes", "rollback", *server)
    assert code == 2 and "FAILED_PRECONDITION: nothing to roll back" in err

    # release: apply again (the link is up again first), then hand back to the engine
    assert _tectl(capsys, "link", f"{link}=up", *server)[0] == 0
    assert engine.wait_idle()
    assert _tectl(capsys, "routes", "apply", str(path), *server)[0] == 0
    assert engine.installed == file_routes
    code, out, _ = _tectl(capsys, "routes", "release", *server)
    assert code == 0 and out.startswith("released")
    assert engine.wait_idle()
    assert "held" not in _status(capsys, server) and engine.installed != file_routes
    ours = {small.host_name(h) for h in range(8)}  # the hosts of the jobs "own" and "late"
    assert _dst_hosts(engine) and _dst_hosts(engine) <= ours  # the engine's routes again


def test_apply_over_apply_rolls_back_to_the_first_file(
    small: Fabric, running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    first, second = tmp_path / "first.npz", tmp_path / "second.json"
    _route_file(first, capsys)
    _route_file(second, capsys, "--seed", "2")
    _, routes_1 = read_routes(first, small)
    _, routes_2 = read_routes(second, small)
    assert routes_1 != routes_2
    assert _tectl(capsys, "routes", "apply", str(first), *server)[0] == 0
    assert _tectl(capsys, "routes", "apply", str(second), *server)[0] == 0
    # applied again (a retry): nothing changes, and the checkpoint is still first's
    assert _tectl(capsys, "routes", "apply", str(second), *server)[0] == 0
    assert running.engine.installed == routes_2
    code, out, _ = _tectl(capsys, "routes", "rollback", *server)
    assert code == 0 and "routes of first.npz held again (no checkpoint left)" in out
    assert running.engine.installed == routes_1
    held = _status(capsys, server)["held"]
    assert held["source"] == "first.npz" and not held["checkpoint"]
    code, _, err = _tectl(capsys, "routes", "rollback", *server)
    assert code == 2 and "nothing to roll back to" in err


def test_bad_files_are_refused_naming_the_rows_and_change_nothing(
    small: Fabric, running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine, server = running.engine, ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    good = tmp_path / "routes.json"
    _route_file(good, capsys)
    assert _tectl(capsys, "routes", "apply", str(good), *server)[0] == 0
    installed, version = engine.installed, engine.routes_version
    doc = json.loads(good.read_text())

    def refused(name: str, text: str) -> str:
        bad = tmp_path / name
        bad.write_text(text)
        code, _, err = _tectl(capsys, "routes", "apply", str(bad), *server)
        assert code == 2, err
        assert engine.installed == installed and engine.routes_version == version
        assert _status(capsys, server)["held"]["source"] == "routes.json"
        return err

    rows = json.loads(json.dumps(doc))
    rows["flows"][3][0] = "host-p9-r9-h9/nic0"
    rows["flows"][5][4] = 10**6
    err = refused("rows.json", json.dumps(rows))
    assert "INVALID_ARGUMENT: rows.json" in err and "flows[3]" in err and "flows[5]" in err
    entries = json.loads(json.dumps(doc))
    switch = sorted(entries["switches"])[0]
    entries["switches"][switch] = entries["switches"][switch][1:]
    err = refused("entries.json", json.dumps(entries))
    assert f"switches.{switch}" in err and "flows' paths make" in err
    assert "fabric-te-apply" not in err  # the file's own name, not the server's copy
    other = json.loads(json.dumps(doc))
    other["fabric"] = "pod"
    assert "pod" in refused("other.json", json.dumps(other))
    assert "not JSON" in refused("broken.json", "{") or "JSON" in refused("broken.json", "{")
    # a .npz that is no archive: said so, as offline (it read as JSON: "not UTF-8 text")
    assert "a .npz route file is a zip archive" in refused("junk.npz", "junk")

    # a path over a link that is down now: refused, naming the flow and the link
    link = _used_uplink(small, read_routes(good, small)[1])
    assert _tectl(capsys, "routes", "release", *server)[0] == 0
    assert engine.wait_idle()
    assert _tectl(capsys, "link", f"{link}=down", *server)[0] == 0
    assert engine.wait_idle()
    installed, version = engine.installed, engine.routes_version
    code, _, err = _tectl(capsys, "routes", "apply", str(good), "--dry-run", *server)
    assert code == 2 and f"crosses {link}, which is down" in err and "flows[" in err
    code, _, err = _tectl(capsys, "routes", "apply", str(good), *server)
    assert code == 2 and "nothing was changed" in err
    assert engine.installed == installed and engine.routes_version == version
    assert "held" not in _status(capsys, server)


def test_a_file_over_the_request_limit_is_refused_before_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((4 << 20) + 1))
    code, _, err = _tectl(capsys, "routes", "apply", str(big), "--server", "127.0.0.1:1",
                          "--insecure")  # fmt: skip
    assert code == 2 and "over the 4 MiB" in err and ".npz" in err


class _Serve:
    """`tectl serve` on the file driver and a state directory."""

    def __init__(self, tmp: Path, port: int) -> None:
        self.address = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "small",
             "--insecure", "--listen", self.address, "--metrics-port", "0",
             "--debounce", "0.01", "--driver", "file", "--driver-dir", str(tmp / "tables"),
             "--store", f"dir:{tmp / 'state'}"],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def tectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "controller.cli.main", *args, "--server", self.address,
             "--insecure"], capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def status(self) -> dict:
        deadline = time.monotonic() + 30
        while True:
            done = self.tectl("status", "-o", "json")
            if done.returncode == 0:
                return json.loads(done.stdout)
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)


def _tables(directory: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def test_held_routes_and_their_checkpoint_survive_a_restart(
    small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "routes.npz"
    _route_file(path, capsys)
    _, file_routes = read_routes(path, small)
    port = free_port()
    srv = _Serve(tmp_path, port)
    try:
        srv.status()
        done = srv.tectl("routes", "apply", str(path))
        assert done.returncode == 0, done.stderr
        held = srv.status()
        assert held["held"]["source"] == "routes.npz"
        assert held["installed_entries"] == len(file_routes)
        tables = _tables(tmp_path / "tables")
    finally:
        srv.stop()
    srv = _Serve(tmp_path, port)
    try:
        again = srv.status()
        assert again["held"] == held["held"] and again["installed_entries"] == len(file_routes)
        assert _tables(tmp_path / "tables") == tables and again["ops_pushed"] == 0
        done = srv.tectl("routes", "rollback")  # the checkpoint: no TE routes at all
        assert done.returncode == 0, done.stderr
        assert "rolled back to the checkpoint (0 flows, 0 TE entries)" in done.stdout
        after = srv.status()
        assert "held" not in after and after["installed_entries"] == 0
    finally:
        srv.stop()
    assert not any(table["entries"] for table in _tables(tmp_path / "tables").values())


def test_a_rollback_after_a_restart_shows_the_figures_of_the_routes_rolled_back_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's own routes, a file's held over them, a restart (which adopts the held
    routes and their figures), a rollback: Status and /metrics were left with the held
    routes' figures (flows, MLU, links over capacity) though the engine's were installed."""
    jobs, path = tmp_path / "jobs.json", tmp_path / "routes.npz"
    assert main(["solve", "--fabric", "small", "--jobs", "random", "--seed", "2",
                 "--jobs-out", str(jobs)]) == 0  # fmt: skip
    _route_file(path, capsys)  # the mix of seed 1: other jobs, other flows
    port = free_port()
    srv = _Serve(tmp_path, port)
    try:
        srv.status()
        assert srv.tectl("job", "put", str(jobs)).returncode == 0
        deadline = time.monotonic() + 60
        while (own := srv.status())["pending_changes"] and time.monotonic() < deadline:
            time.sleep(0.1)
        done = srv.tectl("routes", "apply", str(path))
        assert done.returncode == 0, done.stderr
    finally:
        srv.stop()
    srv = _Serve(tmp_path, port)
    try:
        adopted = srv.status()
        assert adopted["last_solve"]["flows"] != own["last_solve"]["flows"]  # the file's
        done = srv.tectl("routes", "rollback")
        assert done.returncode == 0, done.stderr
        after = srv.status()
        assert "held" not in after and after["installed_entries"] == own["installed_entries"]
        assert after["last_solve"]["flows"] == own["last_solve"]["flows"]
        assert after["last_solve"]["mlu"] == pytest.approx(own["last_solve"]["mlu"])
    finally:
        srv.stop()


def test_routes_solved_for_the_controller_s_jobs_apply_without_a_warning(
    running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file and the controller hold the same jobs: every flow matches, nothing said."""
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    jobs, path = tmp_path / "jobs.json", tmp_path / "routes.npz"
    _route_file(path, capsys, "--jobs-out", str(jobs))
    assert _tectl(capsys, "job", "put", str(jobs), *server)[0] == 0
    assert running.engine.wait_idle()
    code, out, _ = _tectl(capsys, "routes", "apply", str(path), "--dry-run", "-o", "json",
                          *server)  # fmt: skip
    plan = json.loads(out)
    assert code == 0 and plan["flows_of_no_job"] == plan["job_flows_missing"] == 0
    code, out, _ = _tectl(capsys, "routes", "apply", str(path), "--dry-run", *server)
    assert code == 0 and "warning" not in out


def test_while_routes_are_held_status_metrics_and_jobs_describe_them(
    small: Fabric, running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Routes applied from a file: Status's `last_solve`, the MLU gauges, the predicted
    rates and ListJobs went on describing the engine's routing they replaced (a restart
    figured the held routes); a link repaired on them moved none of it. They are now the
    held routes' (as a restart figures them), and the engine's own again after a
    rollback."""
    engine, server = running.engine, ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    value = engine.metrics.registry.get_sample_value
    jobs, path = tmp_path / "jobs.json", tmp_path / "routes.npz"
    assert main(["solve", "--fabric", "small", "--jobs", "random", "--seed", "2",
                 "--jobs-out", str(jobs)]) == 0  # fmt: skip
    _route_file(path, capsys)  # the mix of seed 1: other jobs, other flows
    _, file_routes = read_routes(path, small)
    assert _tectl(capsys, "job", "put", str(jobs), *server)[0] == 0
    assert engine.wait_predicted(60)
    own = _status(capsys, server)
    assert own["last_solve"]["te_entries"] == own["installed_entries"] != len(file_routes)

    def agrees(status: dict) -> None:
        last = status["last_solve"]
        assert status["installed_entries"] == len(engine.installed)
        assert value("fabric_te_max_link_utilisation_ratio") == pytest.approx(last["mlu"])
        assert engine.wait_predicted(60)
        assert sum(f.flows for f in engine.job_figures().values()) == last["flows"]

    assert _tectl(capsys, "routes", "apply", str(path), *server)[0] == 0
    held = _status(capsys, server)
    assert held["installed_entries"] == len(file_routes)
    assert held["last_solve"]["flows"] == held["held"]["flows"] != own["last_solve"]["flows"]
    agrees(held)
    code, text, _ = _tectl(capsys, "status", *server)
    assert "routes applied from a file are held" in text
    link = _used_uplink(small, engine.installed)
    assert _tectl(capsys, "link", f"{link}=down", *server)[0] == 0
    assert engine.wait_idle()
    agrees(_status(capsys, server))
    assert _tectl(capsys, "link", f"{link}=up", *server)[0] == 0
    assert engine.wait_idle()
    code, out, _ = _tectl(capsys, "routes", "rollback", *server)
    assert code == 0 and "engine routes again" in out
    assert engine.wait_idle()
    back = _status(capsys, server)
    assert "held" not in back and back["certificate"]["passed"]
    agrees(back)
    assert back["installed_entries"] == own["installed_entries"]
    assert back["last_solve"]["mlu"] == pytest.approx(own["last_solve"]["mlu"])


def test_routes_show_warns_of_switches_it_could_not_read(
    small: Fabric, capsys: pytest.CaptureFixture[str]
) -> None:
    """A switch whose agent does not answer is listed as holding nothing: `routes show`
    says so on stderr, naming it and why (it printed its entries count and exited 0)."""
    import time

    driver = EmulatedDriver(small)
    served = start(Engine(small, driver, debounce=0.01, reconcile_interval=0.05), "127.0.0.1:0",
                   insecure=True)  # fmt: skip
    try:
        server = ["--server", f"127.0.0.1:{served.port}", "--insecure"]
        served.engine.put_job(Job("a", tuple(range(0, 8)), dp=8, tp=4), 0)
        assert served.engine.wait_idle(30)
        victim = served.engine.installed.switches()[0]
        driver.emulated.switches[victim].alive = False
        deadline = time.monotonic() + 30
        while served.engine.driver_ok and time.monotonic() < deadline:
            time.sleep(0.05)
        code, out, err = _tectl(capsys, "routes", "show", *server)
        assert code == 0 and out.startswith("# routes version")
        assert f"1 switch could not be read, their entries not listed: {victim}: " \
               "unreadable: " in err
    finally:
        served.stop(grace=0.5)
