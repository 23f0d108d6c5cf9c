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
from controller.formats import route_checks, route_columns
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


# Content given twice: a flow (source NIC, destination NIC, qp), a job id, a switch's match.


def _twice(doc: dict[str, Any], field: str) -> dict[str, Any]:
    """`doc` with the first row of `field` ("flows", "job_ids" or a switch) given again at
    the end of it."""
    doc = copy.deepcopy(doc)
    rows = doc["switches"][field] if field in doc["switches"] else doc[field]
    rows.append(copy.deepcopy(rows[0]))
    return doc


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("flows", f"flows[{len(DOC['flows'])}]: the same flow (source NIC, destination NIC, qp) "
         "as flows[0]; give each flow once"),
        ("job_ids", "job_ids[2]: duplicate job id 'a' (also job_ids[0])"),
        (SWITCH, f"switches.{SWITCH}[{len(DOC['switches'][SWITCH])}]: the same match (in_port, "
         f"dst_host, qp) as switches.{SWITCH}[0]; give each match once"),
    ],
)  # fmt: skip
def test_content_given_twice_is_refused_naming_the_first_repeat(field: str, message: str) -> None:
    with pytest.raises(RouteError) as info:
        parse_routes(TINY, _twice(DOC, field), "r.json")
    assert str(info.value) == f"r.json: {message}", info.value


def test_a_flow_is_its_pair_and_bucket_whatever_else_differs() -> None:
    # the same (source NIC, destination NIC, qp) with another demand, job and path: twice
    doc = copy.deepcopy(DOC)
    again = [*doc["flows"][0][:2], 1.5, 1, -1]
    doc["flows"].insert(3, again)
    with pytest.raises(RouteError, match=r"^r.json: flows\[3\]: the same flow .* as flows\[0\]"):
        parse_routes(TINY, doc, "r.json")
    # the pair's all-QPs row and bucket rows are different flows (not repeats), but not
    # one flow: refused as such (below)
    doc = copy.deepcopy(DOC)
    whole = [row for row in doc["flows"] if len(row) == 5][0]
    doc["flows"] += [[*whole[:5], 0], [*whole[:5], 1]]
    with pytest.raises(RouteError, match="both a row for all its QPs") as info:
        parse_routes(TINY, doc, "r.json")
    assert "the same flow" not in str(info.value)


def _split_rows(doc: dict[str, Any]) -> list[int]:
    """The rows of the file's first split flow (16 buckets), in file order."""
    first = next(row for row in doc["flows"] if len(row) == 6)
    return [i for i, row in enumerate(doc["flows"]) if row[:2] == first[:2]]


def test_a_split_flow_is_all_its_buckets_of_equal_shares() -> None:
    """The defect: a bucket numbered 99 of 16, a bucket missing, or one at 5,000 Gbps beside
    its 8.3 Gbps mates were all read (and counted: '31 flows'), though a flow is split
    into all its buckets, of equal shares, or not at all (docs/operators.md)."""
    cases = {
        "numbered up to 99: a split flow's buckets are 0..15":
            lambda doc, rows: doc["flows"][rows[3]].__setitem__(5, 99),
        "15 QP bucket rows numbered up to 15: a split flow's buckets are 0..14":
            lambda doc, rows: doc["flows"].pop(rows[3]),
        "QP buckets of unequal demand (8.33333 to 5000 Gbps)":
            lambda doc, rows: doc["flows"][rows[3]].__setitem__(2, 5000.0),
    }  # fmt: skip
    for message, edit in cases.items():
        doc = copy.deepcopy(DOC)
        rows = _split_rows(doc)
        edit(doc, rows)
        with pytest.raises(RouteError) as info:
            parse_routes(TINY, doc, "r.json")
        assert f"r.json: flows[{rows[0]}]: NIC pair (" in str(info.value), info.value
        assert message in str(info.value), info.value
    parse_routes(TINY, copy.deepcopy(DOC), "r.json")  # as written: one flow each


def test_a_split_flow_in_columns_is_all_its_buckets(tmp_path: Path) -> None:
    arrays = _arrays()
    qp = arrays["flow_qp"].copy()
    qp[np.flatnonzero(qp >= 0)[3]] = 99
    path = tmp_path / "r.npz"
    np.savez_compressed(path, **{**arrays, "flow_qp": qp})  # type: ignore[arg-type]
    with pytest.raises(RouteError, match="numbered up to 99: a split flow's buckets are 0..15"):
        read_routes(path, TINY)


def test_a_match_given_twice_is_refused_whatever_its_next_hop() -> None:
    rows = DOC["switches"][SWITCH]
    hops = {row[2] for row in rows}
    assert len(hops) > 1
    other = next(hop for hop in sorted(hops) if hop != rows[0][2])
    doc = copy.deepcopy(DOC)
    doc["switches"][SWITCH].append([*rows[0][:2], other, *rows[0][3:]])
    with pytest.raises(RouteError, match=rf"^r.json: switches\.{SWITCH}\[{len(rows)}\]: "
                       ".*same match.*another next hop"):  # fmt: skip
        parse_routes(TINY, doc, "r.json")
    # the same match in another switch's table is that switch's own entry, not a repeat
    same = [np.array([5, 5, 5]), np.array([1, 1, 1]), np.array([7, 8, 9]), np.array([-1, -1, 0])]
    assert route_checks.repeated_entries(["s0", "s1"], np.array([1, 2]), same) == []
    assert route_checks.repeated_entries(["s0", "s1"], np.array([2, 1]), same) == [
        (1, "switches.s0[1]: the same match (in_port, dst_host, qp) as switches.s0[0]; give "
         "each match once")
    ]  # fmt: skip


def test_repeats_are_named_by_file_row_among_other_bad_rows() -> None:
    # a row the fast path cannot take sends the flows row by row: rows keep their numbers
    doc = _twice(DOC, "flows")
    doc["flows"][1][3] = True
    with pytest.raises(RouteError) as info:
        parse_routes(TINY, doc, "r.json")
    lines = [line.strip() for line in str(info.value).split("\n")]
    assert lines == [
        "r.json: flows[1][3]: must be an integer, got True",
        f"flows[{len(DOC['flows'])}]: the same flow (source NIC, destination NIC, qp) as "
        "flows[0]; give each flow once",
    ]
    # every flow given twice: the first MAX_REPORTED named, then how many more
    doc = copy.deepcopy(DOC)
    doc["flows"] += copy.deepcopy(DOC["flows"])
    with pytest.raises(RouteError) as info:
        parse_routes(TINY, doc, "r.json")
    lines = str(info.value).split("\n")
    n = len(DOC["flows"])
    assert lines[0] == (
        f"r.json: flows[{n}]: the same flow (source NIC, destination NIC, qp) as flows[0]; "
        "give each flow once"
    )
    assert lines[1].strip().startswith(f"flows[{n + 1}]: the same flow")
    assert lines[-1].strip() == f"... and {n - MAX_REPORTED} more"


def _columns_twice(field: str) -> dict[str, np.ndarray]:
    """The arrays with the first flow, job id or entry (of the first switch) given again,
    after it."""
    arrays = _arrays()
    if field == "flows":
        for name in route_columns._FLOWS:
            arrays[name] = np.r_[arrays[name][:1], arrays[name]]
    elif field == "job_ids":
        arrays["job_ids"] = np.r_[arrays["job_ids"], arrays["job_ids"][:1]]
    else:
        for name in route_columns._ENTRIES:
            arrays[name] = np.r_[arrays[name][:1], arrays[name]]
        counts = arrays["switch_entries"].copy()
        counts[0] += 1
        arrays["switch_entries"] = counts
    return arrays


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("flows", "flows[1]: the same flow (source NIC, destination NIC, qp) as flows[0]"),
        ("job_ids", "job_ids[2]: duplicate job id 'a' (also job_ids[0])"),
        ("entries", f"switches.{ROUTES.switches()[0]}[1]: the same match (in_port, dst_host, "
         f"qp) as switches.{ROUTES.switches()[0]}[0]"),
    ],
)  # fmt: skip
def test_columns_given_twice_are_refused(tmp_path: Path, field: str, message: str) -> None:
    path = tmp_path / "r.npz"
    np.savez_compressed(path, **_columns_twice(field))  # type: ignore[arg-type]
    with pytest.raises(RouteError) as info:
        read_routes(path, TINY)
    assert str(info.value).startswith(f"{path}: {message}"), info.value


def _repeats_by_hand(keys: list[list[int]]) -> tuple[list[int], list[int]]:
    first: dict[tuple[int, ...], int] = {}
    later, earlier = [], []
    for i, key in enumerate(zip(*keys, strict=True)):
        if key in first:
            later.append(i)
            earlier.append(first[key])
        else:
            first[key] = i
    return later, earlier


@pytest.mark.parametrize("scale", [1, 1 << 40])  # packed into one key; too wide, sorted by column
def test_repeats_agree_with_a_plain_loop(scale: int) -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 50, 500):
        keys = [rng.integers(-1, 4, n) * scale for _ in range(3)]
        if n >= 50:  # values of every span: the branch is the scale's
            assert (route_checks._packed(keys) is None) == (scale > 1)
        later, earlier = route_checks._repeats(keys)
        assert (later.tolist(), earlier.tolist()) == _repeats_by_hand([k.tolist() for k in keys])


def test_a_link_is_followed_and_what_is_no_file_is_written_through(tmp_path: Path) -> None:
    """--out through a symbolic link writes its target (the link stays a link); a FIFO (as
    /dev/null or a device) is written to, never replaced by a plain file. A suffix in upper
    case (.NPZ) still means columns, as the reader takes it."""
    import os
    import stat
    import threading

    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    write_routes(link, TINY, ASSIGNMENT, ROUTES)
    assert link.is_symlink() and read_routes(target, TINY)[1] == ROUTES

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_routes(fifo, TINY, ASSIGNMENT, ROUTES)
    reader.join(10)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert parse_routes(TINY, json.loads(got[0]), "pipe")[1] == ROUTES

    upper = tmp_path / "r.NPZ"
    write_routes(upper, TINY, ASSIGNMENT, ROUTES)
    assert upper.read_bytes()[:4] == b"PK\x03\x04" and read_routes(upper, TINY)[1] == ROUTES
