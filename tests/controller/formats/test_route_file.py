"""Route files: round trip by name, and refused (naming the file) when written for another
fabric or when any row does not fit."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller.errors import RouteError
from controller.formats.route_file import dump_routes, parse_routes, read_routes, write_routes
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
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
