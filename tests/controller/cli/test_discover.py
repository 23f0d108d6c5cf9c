"""`tectl fabric discover` on recorded tables: a directory, a command per device, exit codes."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from controller.cli.main import main

FIXTURES = Path(__file__).parents[1] / "formats" / "lldp_fixtures"


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    """The tiny lab's recorded tables as DEVICE.json files."""
    root = tmp_path / "tables"
    root.mkdir()
    recorded = json.loads(gzip.decompress((FIXTURES / "tiny-json0.json.gz").read_bytes()))
    for node, text in recorded.items():
        (root / f"{node}.json").write_text(text)
    return root


def test_a_directory_gives_the_document_and_the_report(tables: Path, capsys):
    assert main(["fabric", "discover", str(tables), "--name", "lab", "--gbps", "400"]) == 0
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)
    assert doc["name"] == "lab" and len(doc["devices"]) == 24 and len(doc["cables"]) == 40
    assert {c["gbps"] for c in doc["cables"]} == {10}  # what the veth ports advertise
    assert "40 cables agreed from 24 devices' tables" in err and "40 from LLDP" in err
    assert main(["fabric", "discover", str(tables), "--force-gbps", "--json"]) == 0
    out, err = capsys.readouterr()
    assert {c["gbps"] for c in json.loads(out)["cables"]} == {400}
    assert "every cable at --gbps 400" in err


def test_inconsistent_tables_exit_1_without_a_document_unless_partial(tables: Path, capsys,
                                                                      tmp_path: Path):  # fmt: skip
    (tables / "rtsw-p1-r1.json").write_text("not json")
    assert main(["fabric", "discover", str(tables)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "missing: rtsw-p1-r1: no neighbour table (" in err and "not JSON" in err
    assert "one-sided: ctsw-p1-c0:r1 hears rtsw-p1-r1:c0, but rtsw-p1-r1's table could" in err
    assert "no document written" in err
    target = tmp_path / "partial.yaml"
    assert main(["fabric", "discover", str(tables), "--allow-partial", "--out", str(target)]) == 0
    doc = yaml.safe_load(target.read_text())
    # rtsw-p1-r1's 8 cables are left out, and with them its two hosts
    assert len(doc["cables"]) == 32 and len(doc["devices"]) == 21


def test_a_command_per_device_with_errors_named_per_device(tables: Path, tmp_path: Path, capsys):
    devices = tmp_path / "devices.txt"
    names = sorted(p.stem for p in tables.glob("*.json"))
    devices.write_text("# the tiny lab\n" + "\n".join(names) + "\n\nnosuch\n")
    assert main(["fabric", "discover", "--command", f"cat {tables}/{{device}}.json",
                 "--devices", str(devices)]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert f"missing: nosuch: no neighbour table (`cat {tables}/nosuch.json` exited 1:" in err
    # a name with a blank (an LLDP system name may hold one) is one device, one argument
    devices.write_text("\n".join(names) + "\nno such  # a comment\n")
    assert main(["fabric", "discover", "--command", f"cat {tables}/{{device}}.json",
                 "--devices", str(devices)]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert f"missing: no such: no neighbour table (`cat '{tables}/no such.json'` exited 1:" in err
    devices.write_text("\n".join(names) + "\n")
    slow = tmp_path / "slow.py"
    slow.write_text("import sys, time\nif sys.argv[1] == 'atsw-c0-a0':\n    time.sleep(30)\n"
                    f"print(open('{tables}/' + sys.argv[1] + '.json').read())\n")  # fmt: skip
    assert main(["fabric", "discover", "--command", f"{sys.executable} {slow} {{device}}",
                 "--devices", str(devices), "--timeout", "2"]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "missing: atsw-c0-a0: no neighbour table (" in err and "no answer in 2 s" in err
    assert main(["fabric", "discover", "--command", f"cat {tables}/{{device}}.json",
                 "--devices", str(devices)]) == 0  # fmt: skip


@pytest.mark.parametrize("argv,message", [
    (["--command", "lldpcli show neighbors", "--devices", "x"], "put {device} where"),
    (["--command", "ssh {device} lldpcli"], "--command needs --devices FILE"),
    ([], "give a directory of DEVICE.json tables"),
    (["/nonexistent"], "not a directory"),
    (["--roles", "leaf*"], "PATTERN=ROLE"),
    (["--lab", "nolab"], "no lldpd configured in"),
])  # fmt: skip
def test_bad_input_exits_2_naming_it(argv, message, capsys, tmp_path: Path):
    (tmp_path / "x").write_text("leaf-a\n")
    argv = [str(tmp_path / a) if a == "x" else a for a in argv]
    assert main(["fabric", "discover", *argv]) == 2
    assert message in capsys.readouterr().err


def test_roles_the_tables_cannot_tell_exit_2_and_patterns_tell_them(tables: Path, capsys):
    # hosts advertising Bridge and Router cannot be told from switches
    for path in tables.glob("rtsw-*.json"):
        path.write_text(path.read_text().replace('"Station",\n                  "enabled": true',
                                                 '"Bridge",\n                  "enabled": true'))
    assert main(["fabric", "discover", str(tables)]) == 2
    assert "no device looks like a host" in capsys.readouterr().err
    assert main(["fabric", "discover", str(tables), "--roles", "host-*=host"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert sum(d["role"] == "host" for d in doc["devices"]) == 8


def test_a_directory_that_is_empty(tmp_path: Path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["fabric", "discover", str(empty)]) == 2
    assert "no DEVICE.json neighbour tables" in capsys.readouterr().err
    shutil.rmtree(empty)


def test_device_names_no_fabric_file_takes_exit_2_without_a_document(tables: Path, capsys):
    """A system name with a blank or a colon agrees on both ends, but the loader refuses it:
    no document is written that `--fabric` would then refuse."""
    old = "host-p0-r0-h0"
    for path in tables.glob("*.json"):
        path.write_text(path.read_text().replace(old, "host p0:0"))
    (tables / f"{old}.json").rename(tables / "host p0:0.json")
    assert main(["fabric", "discover", str(tables)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "no fabric file would load the document: 'host p0:0' cannot name a device" in err


def test_a_device_list_or_table_that_is_no_text_file_is_named(tables: Path, tmp_path: Path,
                                                              capsys):  # fmt: skip
    """A --devices file that is not UTF-8 exits 2 naming it (it was a UnicodeDecodeError
    traceback); a table that is a FIFO is reported missing rather than read forever."""
    devices = tmp_path / "devices.txt"
    devices.write_bytes(b"leaf\xe9\n")
    assert main(["fabric", "discover", "--command", "cat {device}", "--devices",
                 str(devices)]) == 2  # fmt: skip
    assert f"--devices {devices}: not UTF-8 text (byte 4 is 0xe9)" in capsys.readouterr().err
    (tables / "atsw-c0-a0.json").unlink()
    os.mkfifo(tables / "atsw-c0-a0.json")
    assert main(["fabric", "discover", str(tables)]) == 1
    assert "missing: atsw-c0-a0: no neighbour table (" in capsys.readouterr().err
