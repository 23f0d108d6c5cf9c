"""`tectl` reports bad input files in one line naming the file and field, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli.main import main


def test_binary_fabric_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fabric.yaml"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe")
    assert main(["fabric", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tectl: error: {path}: not UTF-8 text (byte 9 is 0xff)")
    assert "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"id": "a", "hosts": "host-p0-r0-h0"}, "jobs[0].hosts: must be a non-empty list"),
        ({"id": 123, "hosts": ["host-p0-r0-h0"]}, "jobs[0].id: must be a string, got 123"),
        ({"id": "a", "hosts": ["host-p0-r0-h0"], "channels": 2**32 - 1},
         "jobs[0].channels: 4294967295 is not within [1, 64]"),
        ({"id": "a", "hosts": ["host-p0-r0-h0"], "tp": True}, "jobs[0].tp: must be an integer"),
    ],
)  # fmt: skip
def test_job_put_checks_the_file_before_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job: dict, message: str
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": [job]}))
    # nothing listens on this address: the file is refused before any call
    assert main(["job", "put", str(path), "--server", "127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.startswith(f"tectl: error: {path}: {message}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--fabric", "tiny", "--seed", "-1"], "--seed: -1 is not within"),
        (["simulate", "--fabric", "tiny", "--fail-random", "-1"], "--fail-random: -1 is not"),
        (["simulate", "--fabric", "tiny", "--qps", "10000000000"], "--qps: 10000000000 is not"),
        (["solve", "--fabric", "tiny", "--time-limit", "nan"], "--time-limit: must be a finite"),
        (["advise", "--fabric", "tiny", "--gpus", "4", "--top", "1e9"], "--top: '1e9' is not an"),
        (["advise", "--fabric", "tiny", "--jobs", "none", "--gpus", "4000"],
         "--gpus: 4000 GPUs need 2000 free hosts, only 8 are free"),
        (["advise", "--fabric", "tiny", "--jobs", "none", "--gpus", "12", "--tp", "8"],
         "--dp x --pp x --tp: pp 1 x tp 8 = 8 does not divide gpus 12"),
        (["simulate", "--fabric", "tiny", "--fail", "rtsw-p0-r0:ctsw-p0-c1=5e-324"],
         "rtsw-p0-r0:ctsw-p0-c1: 5e-324 is below the smallest degraded fraction"),
    ],
)  # fmt: skip
def test_flags_follow_the_rule_set(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        status = main(argv)
    except SystemExit as done:  # argparse's own exit for a bad flag
        status = int(done.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("bad", ["nic_gbps: .nan", "taper: .nan", "rack_link_gbps: 1.0e+308"])
def test_solve_refuses_non_finite_fabrics_and_pushes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    fabric = tmp_path / "fabric.yaml"
    fabric.write_text(f"preset: tiny\n{bad}\n")
    tables = tmp_path / "tables"
    argv = ["solve", "--fabric", str(fabric), "--apply", "file", "--driver-dir", str(tables)]
    assert main(argv) == 2
    assert f"tectl: error: {fabric}: {bad.split(':')[0]}: " in capsys.readouterr().err
    assert not tables.exists() or not any(tables.iterdir())


def test_every_bad_job_of_a_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.model.validation import MAX_REPORTED

    good = {"id": "ok", "hosts": ["host-p0-r0-h0"]}
    jobs = [
        {"id": "a", "hosts": ["host-p0-r0-h1"], "tp": True},
        good,
        {"id": 5, "hosts": ["host-p0-r1-h0"]},
        {"id": "c", "hosts": "host-p0-r1-h1"},
    ]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    expected = [
        f"tectl: error: {path}: jobs[0].tp: must be an integer, got True",
        "  jobs[2].id: must be a string, got 5",
        "  jobs[3].hosts: must be a non-empty list of host names",
    ]
    assert main(["job", "put", str(path), "--server", "127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.splitlines() == expected
    # the offline commands read placement files with the same rules, against the fabric too
    jobs.append({**good, "id": "ok"})  # a duplicate id
    path.write_text(json.dumps({"jobs": jobs}))
    assert main(["simulate", "--fabric", "tiny", "--jobs", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == expected and err[3] == "  jobs[4].id: duplicate job id 'ok' (also jobs[1])"
    # up to a cap, then how many more
    many = [{"id": f"j{i}", "hosts": ["host-p0-r0-h0"], "pp": 0} for i in range(MAX_REPORTED + 7)]
    path.write_text(json.dumps({"jobs": many}))
    assert main(["simulate", "--fabric", "tiny", "--jobs", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == MAX_REPORTED + 1 and err[-1] == "  ... and 7 more"
