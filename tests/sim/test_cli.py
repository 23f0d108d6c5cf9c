"""`tectl` end to end on small fabrics: reports, route files, errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli.main import main


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_fabric_show(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["fabric", "show", "meta-24k", "--json"])
    assert data["gpus"] == 24576 and data["pods"] == 8


def test_simulate_reports_every_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["simulate", "--fabric", "small", "--seed", "2", "--json"])
    assert [r["method"] for r in data["rows"]] == ["ecmp", "eecmp-16qp", "pinning"]


def test_solve_apply_and_route_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    base = ["solve", "--fabric", "small", "--seed", "3", "--json"]
    data = _json(capsys, [*base, "--out", str(old), "--apply", "emulated"])
    te = data["rows"][0]
    assert te["method"] == "fabric-te" and te["mlu"] >= data["bound"]["value"] * (1 - 1e-9)
    assert data["apply"]["push_ok"] and data["apply"]["verify_ok"]
    # the same jobs with a link down: a different route file, a non-empty diff
    _json(capsys, [*base, "--out", str(new), "--fail", "rtsw-p0-r0:ctsw-p0-c0"])
    diff = _json(capsys, ["routes", "diff", str(old), str(new), "--fabric", "small", "--json"])
    assert sum(diff["counts"].values()) > 0
    verify = _json(capsys, ["routes", "verify", "--fabric", "small", "--routes", str(new),
                            "--fail", "rtsw-p0-r0:ctsw-p0-c0", "--json"])  # fmt: skip
    assert verify["ok"]


def test_solve_file_driver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = tmp_path / "tables"
    data = _json(capsys, ["solve", "--fabric", "tiny", "--json", "--apply", "file",
                          "--driver-dir", str(tables)])  # fmt: skip
    assert data["apply"]["push_ok"]
    assert any(tables.glob("rtsw-*.json"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--fabric", "nope"], "neither a fabric preset"),
        (["solve", "--fabric", "tiny", "--fail", "rtsw-p0-r0:ctsw-p0-c9"], "unknown link"),
        (["solve", "--fabric", "tiny", "--fill", "0"], "--fill must be in"),
        (["solve", "--fabric", "tiny", "--apply", "nosuch"], "nosuch"),
    ],
)
def test_bad_input_exits_2_with_a_named_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_advise_and_topology_export(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["advise", "--fabric", "small", "--jobs", "none", "--gpus", "16",
                          "--tp", "4", "--json"])  # fmt: skip
    assert data[0]["pods"] == 1 and len(data[0]["hosts"]) == 4
    assert main(["topology", "export", "--fabric", "tiny", "--format", "slurm-conf"]) == 0
    assert "SwitchName=rtsw-p0-r0 Nodes=host-p0-r0-h[0-1]" in capsys.readouterr().out
    assert main(["advise", "--fabric", "tiny", "--jobs", "none", "--gpus", "64"]) == 2
    assert "free hosts" in capsys.readouterr().err
