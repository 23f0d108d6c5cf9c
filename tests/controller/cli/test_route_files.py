"""`tectl routes diff` on route files as a user runs it: JSON and columns, exit 0 when the
files hold the same routes, 1 when they differ, 2 on an error (as diff does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.formats.route_file import write_routes
from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth, parse_health
from controller.model.jobs import Job, jobs_flows
from controller.routes.entries import build_routes
from controller.solver.solve import SolveOptions, solve

SMALL = build(PRESETS["small"])
JOBS = [Job("a", tuple(range(0, 16, 2)), dp=32), Job("b", tuple(range(1, 16, 2)), dp=32)]


def _write(path: Path, health: LinkHealth) -> None:
    result = solve(SMALL, health, jobs_flows(SMALL, JOBS), options=SolveOptions(lp="never"))
    write_routes(path, SMALL, result.assignment, build_routes(SMALL, result.assignment))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("routes")
    out = {name: root / name for name in ("a.json", "a.npz", "b.npz")}
    _write(out["a.json"], LinkHealth.all_up(SMALL))
    _write(out["a.npz"], LinkHealth.all_up(SMALL))
    _write(out["b.npz"], parse_health(SMALL, ["rtsw-p0-r0:ctsw-p0-c0"]))
    return out


def _diff(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["routes", "diff", *argv, "--fabric", "small"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_same_routes_exit_0_in_either_form(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _diff(capsys, str(files["a.json"]), str(files["a.npz"]))
    assert (code, out) == (0, "same routes: no operations\n")
    code, out, _ = _diff(capsys, str(files["a.npz"]), str(files["a.json"]), "--json")
    assert code == 0
    assert json.loads(out) == {"same": True, "operations": 0, "stages": 0, "ops": [],
                               "counts": {"add": 0, "replace": 0, "delete": 0}}  # fmt: skip


def test_different_routes_exit_1_and_list_the_operations(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _diff(capsys, str(files["a.npz"]), str(files["b.npz"]))
    assert code == 1
    head, *ops = out.splitlines()
    data = json.loads(_diff(capsys, str(files["a.npz"]), str(files["b.npz"]), "--json")[1])
    assert not data["same"] and data["operations"] == len(ops) > 0
    counts = ", ".join(f"{k} {data['counts'][k]:,}" for k in ("add", "replace", "delete"))
    stages = f"{data['stages']} stage" + ("s" if data["stages"] != 1 else "")
    assert head == f"{len(ops):,} operations in {stages} ({counts})"
    assert "{" not in head  # counts as text, not a Python dict
    assert all(op.startswith("  [") and " via " in op for op in ops)
    assert "reading" in err  # progress goes to stderr


def test_errors_exit_2_naming_the_file(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.npz"
    code, out, err = _diff(capsys, str(files["a.npz"]), str(missing))
    assert code == 2 and out == "" and f"tectl: error: {missing}: cannot read" in err
    code = main(["routes", "diff", str(files["a.npz"]), str(files["b.npz"]), "--fabric", "tiny"])
    assert code == 2
    assert "fabric: routes are for fabric 'small', not 'tiny'" in capsys.readouterr().err


def test_without_fabric_the_preset_the_file_names_is_read(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for a, b in (("a.json", "a.npz"), ("a.npz", "b.npz")):
        assert main(["routes", "diff", str(files[a]), str(files[b])]) == int(a[0] != b[0])
        assert "error" not in capsys.readouterr().err
    # a file for a fabric of the operator's own: its fabric file is asked for, by flag
    doc = json.loads(files["a.json"].read_text()) | {"fabric": "dc1"}
    own = tmp_path / "own.json"
    own.write_text(json.dumps(doc))
    assert main(["routes", "diff", str(own), str(files["a.json"])]) == 2
    err = capsys.readouterr().err
    assert f"{own}: routes are for fabric 'dc1', which is no preset" in err
    assert "--fabric FILE" in err
    del doc["fabric"]
    own.write_text(json.dumps(doc))
    assert main(["routes", "diff", str(own), str(files["a.json"])]) == 2
    assert "names no fabric" in capsys.readouterr().err
