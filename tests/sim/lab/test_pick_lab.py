"""Which running lab `tectl solve --apply linux` and `tectl lab apply` program: the named
one, or the only one (of the fabric); otherwise an error naming the labs that run. Lab
records are faked here: no root needed."""

from __future__ import annotations

import pytest

from controller.errors import LabError
from controller.model.fabric import Fabric
from sim.lab import build
from sim.lab.cli import pick_lab


def _record(name: str, fabric: str, state: str = "up") -> build.LabRecord:
    return build.LabRecord(name, fabric, "static", [], 0, state=state)


@pytest.fixture
def running(monkeypatch: pytest.MonkeyPatch):
    def set_labs(*records: build.LabRecord) -> None:
        monkeypatch.setattr(build, "labs", lambda: list(records))

    return set_labs


def test_the_named_lab_or_the_only_one_of_the_fabric(running, tiny: Fabric, small: Fabric):
    running(_record("a", "tiny"), _record("b", "small"), _record("c", "tiny", "building"))
    assert pick_lab("a", tiny) == "a"
    assert pick_lab(None, tiny) == "a"  # "c" is not up yet
    assert pick_lab(None, small) == "b"
    with pytest.raises(LabError, match=r"lab 'b' was built from fabric small, not tiny"):
        pick_lab("b", tiny)
    with pytest.raises(LabError, match=r"no lab 'x' is running; running labs: a \(fabric tiny\), "
                       r"b \(fabric small\)"):  # fmt: skip
        pick_lab("x", tiny)
    with pytest.raises(LabError, match="2 labs are running .*--lab NAME"):
        pick_lab(None)


def test_none_or_several_running_is_an_error_that_says_what_to_do(running, tiny: Fabric):
    running()
    with pytest.raises(LabError, match=r"no lab of fabric tiny is running \(running labs: "
                       r"none\); start one with `tectl lab up --fabric tiny --name NAME`"):
        pick_lab(None, tiny)
    running(_record("a", "tiny"), _record("d", "tiny"))
    with pytest.raises(LabError, match=r"2 labs of fabric tiny are running \(a \(fabric tiny\), "
                       r"d \(fabric tiny\)\): name one with --lab NAME"):  # fmt: skip
        pick_lab(None, tiny)


@pytest.mark.parametrize(
    "command", [["status"], ["verify"], ["link", "rtsw-p0-r0:ctsw-p0-c1=down"]]
)
def test_a_bad_lab_name_is_an_input_error_not_a_traceback(command, monkeypatch, capsys):
    from controller.cli.main import main

    monkeypatch.setattr(build.os, "geteuid", lambda: 0)  # the name is refused before root use
    assert main(["lab", *command, "--name", "Bad_name"]) == 2
    assert "tectl: error: bad lab name 'Bad_name'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["lab", "status", "--name", "a"], ["lab", "verify", "--name", "a"],
    ["lab", "link", "rtsw-p0-r0:ctsw-p0-c1=down", "--name", "a"],
    ["lab", "apply", "routes.json", "--name", "a"],
    ["solve", "--fabric", "tiny", "--apply", "linux", "--lab", "a"],
])  # fmt: skip
def test_lab_commands_without_root_say_so_first(command, running, monkeypatch, capsys):
    """Not a count of 0/0 ports, nor a solve ended by `setns: Operation not permitted`
    (which tectl called an output error)."""
    from controller.cli.main import main

    running(_record("a", "tiny"))
    monkeypatch.setattr(build.os, "geteuid", lambda: 1000)
    assert main(command) == 2
    assert "tectl: error: lab needs root" in capsys.readouterr().err


@pytest.mark.parametrize("gbit", ["nan", "inf", "-5", "0"])
def test_lab_up_refuses_a_link_rate_that_is_no_rate(gbit, monkeypatch, capsys):
    """--link-gbit nan/inf built the lab, then ended in a traceback; 0 or less gave 1 Mbit."""
    from controller.cli.main import main

    def up(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a lab was built")

    monkeypatch.setattr(build, "up", up)
    with pytest.raises(SystemExit) as done:
        main(["lab", "up", "--fabric", "tiny", "--name", "a", f"--link-gbit={gbit}"])
    assert done.value.code == 2
    assert "argument --link-gbit" in capsys.readouterr().err
