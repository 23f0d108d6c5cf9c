"""Route files: round trip by name, and refused (naming the file) when written for another
fabric or when any row does not fit."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.errors import RouteError
from controller.formats import route_columns
from controller.formats.route_file import dump_routes, parse_routes, read_routes, write_routes
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
from controller.model.validation import MAX_REPORTED
from controller.routes.entries import build_routes
from controller.solver.certificate import CertifyOptions
from controller.solver.solve import SolveOptions, solve

TINY = build(PRESETS["tiny"])


def _solved() -> tuple[Any, Any]:
    jobs = [Job("a", (0, 2, 4, 6), dp=8), Job("b", (1, 3, 5, 7), dp=8, collectives=("alltoall",))]
    # the solver's routing as it is (certified, hashing serves these jobs better on 1:2)
    opts = SolveOptions(lp="never", certify=CertifyOptions(enabled=False))
    result = solve(TINY, LinkHealth.all_up(TINY), jobs_flows(TINY, jobs), options=opts)
    return result.assignment, build_routes(TINY, result.assignment)


ASSIGNMENT, ROUTES = _solved()
DOC = dump_routes(TINY, ASSIGNMENT, ROUTES)


def test_round_trip_by_name(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_routes(path, TINY, ASSIGNMENT, ROUTES)
    assignment, routes = read_routes(path, TINY)
    assert routes == ROUTES
    assert (assignment.path == ASSIGNMENT.path).all()
    assert json.loads(path.read_text())["fingerprint"] == TINY.fingerprint


def test_older_file_without_fingerprint_is_read_by_name() -> None:
    doc = copy.deepcopy(DOC)
    del doc["fingerprint"]
    assert parse_routes(TINY, doc)[1] == ROUTES


def test_another_fabric_is_refused_naming_the_file(small: Fabric, tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_routes(path, TINY, ASSIGNMENT, ROUTES)
    with pytest.raises(RouteError, match=f"{path}: fabric: routes are for fabric 'tiny', not"):
        read_routes(path, small)
    # same name, another shape: the fingerprint tells
    bigger = build(replace(PRESETS["tiny"], racks_per_pod=3))
    with pytest.raises(RouteError, match=f"{path}: fingerprint: .*another shape"):
        read_routes(path, bigger)


def _edit(path: str, value: object) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    *parents, last = path.split("/")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


SWITCH = sorted(DOC["switches"])[0]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("flows/0/2", float("nan"), "flows[0][2]: must be a finite number"),
        ("flows/0/2", 1e308, "flows[0][2]: 1e+308 is not within"),
        ("flows/0/2", 5e-324, "flows[0][2]: 5e-324 is not within"),
        ("flows/0/0", "host-p9-r0-h0/nic0", "flows[0][0]: unknown NIC 'host-p9-r0-h0/nic0'"),
        ("flows/0/0", 3, "flows[0][0]: must be a string, got 3"),
        ("flows/0/3", 99, "flows[0][3]: job index 99 has no entry in job_ids"),
        ("flows/0/3", True, "flows[0][3]: must be an integer, got True"),
        ("flows/0/4", 10**6, "flows[0][4]: path 1000000 is neither -1 (ECMP) nor one of"),
        ("flows/0", "abc", "flows[0]: must be a list, got 'abc'"),
        ("flows/0", [], "flows[0]: needs 5 items, got 0"),
        ("job_ids", "ab", "job_ids: must be a list, got 'ab'"),
        (f"switches/{SWITCH}/0/0", "rtsw-p0-r0:ctsw-p0-c9", f"switches.{SWITCH}[0]: unknown link"),
        (f"switches/{SWITCH}/0/1", "host-p0-r0-h9", f"switches.{SWITCH}[0]: unknown node"),
        (f"switches/{SWITCH}/0", [1, 2, 3], f"switches.{SWITCH}[0][0]: must be a string"),
        ("switches/rtsw-p7-r0", [], "switches.rtsw-p7-r0: not a switch of fabric 'tiny'"),
        ("fabric", 5, "fabric: must be a string, got 5"),
        ("format", "fabric-te-routes/9", "format: 'fabric-te-routes/9' is not"),
        ("extra", 1, "top level: unknown key(s) extra"),
    ],
)
def test_bad_rows_are_named(path: str, value: object, message: str) -> None:
    with pytest.raises(RouteError) as info:
        parse_routes(TINY, _edit(path, value), "r.json")
    assert str(info.value).startswith(f"r.json: {message}"), info.value


def test_entry_on_the_wrong_switch_is_refused() -> None:
    other = sorted(DOC["switches"])[1]
    doc = _edit(f"switches/{other}", DOC["switches"][SWITCH])
    with pytest.raises(RouteError, match=f"r.json: switches.{other}\\[0\\]: .* not one of its"):
        parse_routes(TINY, doc, "r.json")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
        (b'{"format": "fabric-te-routes/1", "format": "x"}', "duplicate key 'format'"),
        (b"[1, 2", "not valid JSON"),
    ],
)
def test_unreadable_files_are_named(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with pytest.raises(RouteError, match=f"^{path}: {message}"):
        read_routes(path, TINY)


def test_every_bad_row_is_named_up_to_the_cap() -> None:
    doc = copy.deepcopy(DOC)
    for f in (1, 3):
        doc["flows"][f][3] = 99
    doc["flows"][2][0] = "host-p9-r0-h0/nic0"
    sw = sorted(doc["switches"])[0]
    doc["switches"][sw][0][0] = "rtsw-p0-r0:ctsw-p0-c9"
    with pytest.raises(RouteError) as info:
        parse_routes(TINY, doc, "r.json")
    lines = str(info.value).split("\n")
    assert lines[0] == "r.json: flows[1][3]: job index 99 has no entry in job_ids"
    assert lines[1].strip() == "flows[2][0]: unknown NIC 'host-p9-r0-h0/nic0'"
    assert lines[2].strip() == "flows[3][3]: job index 99 has no entry in job_ids"
    assert lines[3].strip().startswith(f"switches.{sw}[0]: unknown link")
    assert len(lines) == 4
    # beyond the cap: the first MAX_REPORTED, then how many more
    doc = copy.deepcopy(DOC)
    for row in doc["flows"]:
        row[2] = -1.0
    with pytest.raises(RouteError) as info:
        parse_routes(TINY, doc, "r.json")
    lines = str(info.value).split("\n")
    assert len(lines) == MAX_REPORTED + 1
    assert lines[-1].strip() == f"... and {len(doc['flows']) - MAX_REPORTED} more"


def test_columns_round_trip_and_json_agree(tmp_path: Path) -> None:
    path = tmp_path / "r.npz"
    write_routes(path, TINY, ASSIGNMENT, ROUTES)
    assert path.read_bytes()[:4] == b"PK\x03\x04"
    assignment, routes = read_routes(path, TINY)
    assert routes == ROUTES
    for name in ("src_nic", "dst_nic", "demand", "job", "qp"):
        assert (getattr(assignment.flows, name) == getattr(ASSIGNMENT.flows, name)).all()
    assert (assignment.path == ASSIGNMENT.path).all()
    assert assignment.flows.job_ids == ASSIGNMENT.flows.job_ids
    # the suffix picks the writer, the content the reader: a .json of columns still reads
    moved = tmp_path / "r.routes"
    moved.write_bytes(path.read_bytes())
    assert read_routes(moved, TINY)[1] == ROUTES


def _arrays(**changes: Any) -> dict[str, np.ndarray]:
    arrays = route_columns.columns(TINY, ASSIGNMENT, ROUTES)
    arrays.update({k: np.asarray(v) for k, v in changes.items()})
    return arrays


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": "fabric-te-routes-columns/9"}, "format: 'fabric-te-routes-columns/9' is not"),
        ({"fingerprint": "sha256:0"}, "fingerprint: routes are for a fabric 'tiny' of another"),
        (
            {
                "flow_src": np.r_[
                    999, route_columns.columns(TINY, ASSIGNMENT, ROUTES)["flow_src"][1:]
                ]
            },
            "flows[0][0]: NIC id 999 is not a NIC of fabric 'tiny'",
        ),
        ({"flow_demand": np.zeros(len(ASSIGNMENT.flows), np.int64)}, "flow_demand: must be"),
        ({"flow_job": np.zeros(3, np.int64)}, "flow_job: has 3 rows, not"),
        ({"entry_qp": np.full(len(ROUTES), 1 << 20)}, "qp 1048576 is neither -1"),
        (
            {"switches": np.array(["rtsw-p7-r0"] * len(ROUTES.switches()))},
            "switches: a switch is named twice",
        ),
    ],
)
def test_bad_columns_are_named(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    path = tmp_path / "r.npz"
    np.savez_compressed(path, **_arrays(**changes))  # type: ignore[arg-type]
    with pytest.raises(RouteError) as info:
        read_routes(path, TINY)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value), info.value


def test_columns_of_the_wrong_port_name_switch_and_row(tmp_path: Path) -> None:
    arrays = _arrays()
    sw = ROUTES.switches()[0]
    node = TINY.node_index()[sw]
    lo, hi = TINY.link_ends
    elsewhere = int(np.flatnonzero((lo != node) & (hi != node))[0])
    in_port = arrays["entry_in_port"].copy()
    in_port[1] = elsewhere
    arrays["entry_in_port"] = in_port
    path = tmp_path / "r.npz"
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
    with pytest.raises(RouteError, match=rf"switches\.{sw}\[1\]: {sw}: in_port .* not one of its"):
        read_routes(path, TINY)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"PK\x03\x04garbage", "not a route file of columns"),
    ],
)
def test_unreadable_columns_are_named(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "r.npz"
    path.write_bytes(data)
    with pytest.raises(RouteError, match=f"^{path}: {message}"):
        read_routes(path, TINY)


def test_columns_with_pickles_or_strays_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.npz"
    arrays: dict[str, Any] = dict(_arrays())
    arrays["job_ids"] = np.array([{"a": 1}], dtype=object)
    np.savez(path, **arrays)
    with pytest.raises(RouteError, match=f"^{path}: not a route file of columns"):
        read_routes(path, TINY)
    np.savez(path, extra=np.zeros(1), **_arrays())  # type: ignore[arg-type]
    with pytest.raises(RouteError, match=f"^{path}: unknown array\\(s\\) extra"):
        read_routes(path, TINY)
