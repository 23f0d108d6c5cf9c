"""The file driver's tables carry the fabric's name and fingerprint and are checked on read:
a table written for another fabric is refused naming the file, never misread."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from controller.drivers.file import FileDriver
from controller.errors import DriverError
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.routes.plan import Add
from controller.routes.tables import Entry

SWITCH = "rtsw-p0-r0"


def _entry(fabric: Fabric, host: int = 2, c: int = 1) -> Entry:
    return Entry(SWITCH, fabric.access_link(0), host, fabric.rack_link(0, c))


def _written(fabric: Fabric, tmp_path: Path) -> Path:
    FileDriver(tmp_path, fabric=fabric).apply(SWITCH, [Add(_entry(fabric))])
    return tmp_path / f"{SWITCH}.json"


def test_tables_carry_name_and_fingerprint(tiny: Fabric, tmp_path: Path) -> None:
    doc = json.loads(_written(tiny, tmp_path).read_text())
    assert (doc["fabric"], doc["fingerprint"]) == ("tiny", tiny.fingerprint)
    assert FileDriver(tmp_path, fabric=tiny).read(SWITCH) == (_entry(tiny),)


def test_a_directory_removed_under_the_driver_is_made_again_on_write(
    tiny: Fabric, tmp_path: Path
) -> None:
    """The tables' directory removed (by hand, a clean-up job): the switches read empty, and
    the next write makes it again (every push failed until it was made by hand)."""
    import shutil

    driver = FileDriver(tmp_path / "tables", fabric=tiny)
    driver.apply(SWITCH, [Add(_entry(tiny))])
    shutil.rmtree(tmp_path / "tables")
    assert driver.read(SWITCH) == ()
    driver.apply(SWITCH, [Add(_entry(tiny))])
    assert driver.read(SWITCH) == (_entry(tiny),)


def test_a_refused_write_says_the_same_each_time(
    tiny: Fabric, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that refuses writes (read-only, full): the error named the random
    temporary file of each attempt, so a switch marked differing "because" of it changed
    reason at every reconcile and was logged again at warning level every interval, for as
    long as the directory refused. It names the table and the cause, the same each time."""
    import os

    driver = FileDriver(tmp_path, fabric=tiny)

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted", str(src))

    monkeypatch.setattr(os, "replace", refuse)
    said = set()
    for _ in range(2):
        with pytest.raises(DriverError, match="cannot write") as err:
            driver.apply(SWITCH, [Add(_entry(tiny))])
        said.add(str(err.value))
    assert len(said) == 1 and ".tmp" not in said.pop()
    assert not list(tmp_path.glob(".*.tmp"))


def test_table_for_another_fabric_is_refused_naming_the_file(tiny: Fabric, tmp_path: Path) -> None:
    path = _written(tiny, tmp_path)
    # same switch names, another shape: ids would mean other links
    other = build(replace(PRESETS["tiny"], hosts_per_rack=3))
    driver = FileDriver(tmp_path, fabric=other)
    with pytest.raises(DriverError, match=f"^{path}: written for fabric 'tiny' .*refusing"):
        driver.read(SWITCH)
    with pytest.raises(DriverError, match=f"^{path}: written for fabric 'tiny'"):
        driver.apply(SWITCH, [])  # nothing is written over it either
    assert json.loads(path.read_text())["fabric"] == "tiny"


def test_old_table_without_fingerprint_is_read_only_if_its_names_match(
    tiny: Fabric, tmp_path: Path
) -> None:
    path = _written(tiny, tmp_path)
    doc = json.loads(path.read_text())
    del doc["fabric"], doc["fingerprint"]
    path.write_text(json.dumps(doc))
    assert FileDriver(tmp_path, fabric=tiny).read(SWITCH) == (_entry(tiny),)
    other = build(replace(PRESETS["tiny"], hosts_per_rack=3))
    with pytest.raises(DriverError, match=rf"^{path}: entries\[0\]"):
        FileDriver(tmp_path, fabric=other).read(SWITCH)
    doc["entries"][0]["dst_host_name"] = "host-p1-r1-h1"  # the id says host-p0-r1-h0
    path.write_text(json.dumps(doc))
    with pytest.raises(DriverError, match=r"dst_host_name: 'host-p1-r1-h1', but dst_host 2 is "
                                          r"'host-p0-r1-h0' .*written for another fabric\?"):
        FileDriver(tmp_path, fabric=tiny).read(SWITCH)
    for row in doc["entries"]:
        del row["in_port_name"], row["dst_host_name"], row["next_hop_name"]
    path.write_text(json.dumps(doc))
    with pytest.raises(DriverError, match=f"^{path}: .*no in_port_name and no fabric fingerprint"):
        FileDriver(tmp_path, fabric=tiny).read(SWITCH)
    assert FileDriver(tmp_path).read(SWITCH) == (_entry(tiny),)  # without a fabric: by id


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("next_hop", 399, "next_hop 399 is not one of its links"),
        ("in_port", -1, r"entries\[0\].in_port: -1 is not within"),
        ("dst_host", "2", r"entries\[0\].dst_host: must be an integer, got '2'"),
        ("dst_host", 99, "dst_host 99 out of range"),
        ("qp", True, r"entries\[0\].qp: must be an integer, got True"),
        ("owner", 7, r"entries\[0\].owner: must be a string, got 7"),
    ],
)
def test_bad_rows_name_the_file(
    tiny: Fabric, tmp_path: Path, field: str, value: object, message: str
) -> None:
    path = _written(tiny, tmp_path)
    doc = json.loads(path.read_text())
    doc["entries"][0][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(DriverError, match=f"^{path}: .*{message}"):
        FileDriver(tmp_path, fabric=tiny).read(SWITCH)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe{}", "not UTF-8 text"),
        (b'{"switch": "rtsw-p0-r0", "switch": "x", "entries": []}', "duplicate key 'switch'"),
        (b'{"switch": "rtsw-p0-r1", "entries": []}', "switch: 'rtsw-p0-r1' is not 'rtsw-p0-r0'"),
        (b"[]", "top level: must be a mapping"),
    ],
)
def test_junk_tables_name_the_file(tiny: Fabric, tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / f"{SWITCH}.json"
    path.write_bytes(data)
    with pytest.raises(DriverError, match=f"^{path}: .*{message}"):
        FileDriver(tmp_path, fabric=tiny).read(SWITCH)
