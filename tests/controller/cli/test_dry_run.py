"""`tectl job put --dry-run` and `tectl link ... --dry-run` against a running controller:
what would move, the entries per switch, the jobs affected and the would-be routing's
certificate, with nothing stored or pushed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.server import start
from sim.driver import EmulatedDriver


def _tectl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _jobs(fabric: Fabric, path: Path, job_id: str, hosts: list[int]) -> Path:
    path.write_text(json.dumps({"jobs": [{"id": job_id, "tp": 4, "hosts": [
        fabric.host_name(h) for h in hosts]}]}))  # fmt: skip
    return path


def test_dry_runs_show_what_would_move_and_change_nothing(
    small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = Engine(small, EmulatedDriver(small), debounce=0.01)
    running = start(engine, "127.0.0.1:0", insecure=True)
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    try:
        assert _tectl(capsys, "job", "put", str(_jobs(small, tmp_path / "a.json", "a",
                                                      [0, 2, 4, 6])), *server)[0] == 0  # fmt: skip
        assert engine.wait_idle()
        installed, state, routes = engine.installed, engine.state_version, engine.routes_version
        hops = {small.link_name(h) for sw in installed.switches()
                for h in installed.table(sw).next_hop.tolist()}  # fmt: skip
        link = sorted(h for h in hops if h.startswith("rtsw") and ":ctsw" in h)[0]

        def unchanged() -> None:
            assert engine.wait_idle()
            assert engine.installed == installed and engine.state_version == state
            assert engine.routes_version == routes and [j.id for j, _ in engine.jobs()] == ["a"]

        # Status, job describe and a dry run count flows alike (subflows: rows on paths)
        code, out, _ = _tectl(capsys, "status", "-o", "json", *server)
        last = json.loads(out)["last_solve"]
        code, out, _ = _tectl(capsys, "job", "describe", "a", "-o", "json", *server)
        assert last["flows"] == json.loads(out)["figures"]["flows"] <= last["subflows"]

        # a new job: its entries are added, nothing of job a moves
        new = _jobs(small, tmp_path / "b.json", "b", [1, 3, 5, 7, 9])
        code, out, _ = _tectl(capsys, "job", "put", str(new), "--dry-run", "-o", "json", *server)
        seen = json.loads(out)
        assert code == 0 and seen["jobs_affected"] == ["b"] and seen["flows_moved"] == 0
        assert seen["plan"]["add"] > 0 and seen["plan"]["remove"] == 0
        assert seen["certificate"]["passed"] and seen["certificate"]["jobs"] == 2
        assert seen["flows"] == seen["metrics"]["flows"] == seen["plan"]["flows"] > last["flows"]
        assert seen["metrics"]["subflows"] == seen["plan"]["subflows"] >= seen["flows"]
        unchanged()
        code, text, _ = _tectl(capsys, "job", "put", str(new), "--dry-run", *server)
        assert code == 0 and text.startswith("dry run: nothing stored or pushed\n")
        assert "1 job affected: b" in text and "certificate passed against eecmp" in text
        assert f"entries     {len(seen['plan']['switches'])} switches: " in text
        unchanged()

        # a link down under job a's routes: job a's flows on it move
        code, out, _ = _tectl(capsys, "link", f"{link}=down", "--dry-run", "-o", "json", *server)
        seen = json.loads(out)
        assert code == 0 and seen["flows_moved"] > 0 and seen["jobs_affected"] == ["a"]
        assert seen["plan"]["replace"] + seen["plan"]["add"] + seen["plan"]["remove"] > 0
        assert seen["certificate"]["reference"] == "eecmp"
        unchanged()
        code, text, _ = _tectl(capsys, "link", "down", link, "--dry-run", *server)
        assert code == 0 and "1 job affected: a" in text and "would move" in text
        unchanged()

        # a bad change is refused as the real command refuses it, and changes nothing
        code, _, err = _tectl(capsys, "link", "rtsw-p9-r9:ctsw-p9-c9=down", "--dry-run", *server)
        assert code == 2 and "rtsw-p9-r9" in err
        unchanged()
    finally:
        running.stop(grace=0.5)


def test_a_file_or_a_link_list_with_one_bad_item_changes_nothing(
    small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`link A B ...` takes all its changes or none (one request); `job put FILE` sends
    none of its jobs when two clash (a host in two jobs, of the file or of the file and one
    held) or an id is there twice. A job the controller refuses on its own (an unknown
    host) still stops the puts there: the puts are one request each."""
    engine = Engine(small, EmulatedDriver(small), debounce=0.01)
    running = start(engine, "127.0.0.1:0", insecure=True)
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    name = small.host_name
    try:
        assert _tectl(capsys, "job", "put", str(_jobs(small, tmp_path / "a.json", "a",
                                                      [0, 2])), *server)[0] == 0  # fmt: skip
        assert engine.wait_idle()
        state = engine.state_version
        cases = {
            "two jobs of the file": [{"id": "n1", "hosts": [name(4), name(5)]},
                                     {"id": "n2", "hosts": [name(5), name(6)]}],
            "an id twice": [{"id": "d", "hosts": [name(8)]}, {"id": "d", "hosts": [name(9)]}],
            "a held job": [{"id": "n3", "hosts": [name(10)]}, {"id": "n4", "hosts": [name(2)]}],
        }  # fmt: skip
        for why, jobs in cases.items():
            path = tmp_path / "bad.json"
            path.write_text(json.dumps({"jobs": jobs}))
            code, out, err = _tectl(capsys, "job", "put", str(path), *server)
            assert code == 2 and out == "", why
            assert engine.state_version == state, why
        assert [j.id for j, _ in engine.jobs()] == ["a"]
        # a job of the file replacing a held one may take its hosts
        path = tmp_path / "move.json"
        path.write_text(json.dumps({"jobs": [{"id": "a", "hosts": [name(2), name(4)]}]}))
        assert _tectl(capsys, "job", "put", str(path), *server)[0] == 0
        assert engine.wait_idle()
        state = engine.state_version
        code, _, err = _tectl(capsys, "link", "rtsw-p1-r3:ctsw-p1-c3=down",
                              "rtsw-p1-r3:ctsw-p1-c99=down", *server)  # fmt: skip
        assert code == 2 and "ctsw-p1-c99" in err
        assert engine.state_version == state and not engine.links_not_up()
        assert _tectl(capsys, "link", "rtsw-p1-r3:ctsw-p1-c3=down",
                      "rtsw-p1-r3:ctsw-p1-c2=0.5", *server)[0] == 0  # fmt: skip
        assert engine.state_version == state + 1
    finally:
        running.stop(0)
        engine.close()


def test_a_file_whose_job_takes_the_hosts_another_gives_up_is_put_in_that_order(
    small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The controller takes one job at a time: a new job on hosts a job of the file gives
    up goes after it, whatever the file's order (the dry run said it would all pass); jobs
    that take each other's hosts are refused before anything is put."""
    engine = Engine(small, EmulatedDriver(small), debounce=0.01)
    running = start(engine, "127.0.0.1:0", insecure=True)
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    name = small.host_name
    try:
        held = {"jobs": [{"id": "a", "hosts": [name(0), name(2)]},
                         {"id": "b", "hosts": [name(4), name(6)]}]}  # fmt: skip
        path = tmp_path / "held.json"
        path.write_text(json.dumps(held))
        assert _tectl(capsys, "job", "put", str(path), *server)[0] == 0
        assert engine.wait_idle()
        swap = {"jobs": [{"id": "b", "hosts": [name(0), name(8)]},
                         {"id": "a", "hosts": [name(4), name(10)]}]}  # fmt: skip
        path.write_text(json.dumps(swap))
        state = engine.state_version
        code, out, err = _tectl(capsys, "job", "put", str(path), *server)
        assert code == 2 and out == "" and "take each other's hosts" in err
        assert engine.state_version == state
        moves = {"jobs": [{"id": "new", "hosts": [name(12), name(2)]},
                          {"id": "c", "hosts": [name(4), name(14)]},
                          {"id": "b", "hosts": [name(8), name(9)]},
                          {"id": "a", "hosts": [name(0), name(1)]}]}  # fmt: skip
        path.write_text(json.dumps(moves))
        assert _tectl(capsys, "job", "put", str(path), "--dry-run", *server)[0] == 0
        code, out, err = _tectl(capsys, "job", "put", str(path), *server)
        assert code == 0, err
        assert [line.split(":")[0] for line in out.splitlines()] == ["b", "c", "a", "new"]
        assert engine.wait_idle()
        assert {j.id: j.hosts for j, _ in engine.jobs()} == {
            "a": (0, 1), "b": (8, 9), "c": (4, 14), "new": (12, 2)}
    finally:
        running.stop(0)
        engine.close()
