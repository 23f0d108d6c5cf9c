"""Fuzzing every input format: fabric files, placement files, route files, the file driver's
tables and the gRPC request conversion.

Each case starts from a valid document, breaks it (values swapped for junk, keys dropped or
added, keys given twice, bytes flipped, text cut short) and loads it. Whatever the input,
the loader either returns something that satisfies the rule set, or raises the documented
error (an InputError subclass; DriverError for a driver's tables) whose message starts with
the file name or the request field. Any other exception fails the test.

`make test` runs a few dozen examples per case, derandomised; `make fuzz` runs many more
(FABRIC_TE_FUZZ_EXAMPLES, 5,000 there by default) with fresh randomness.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.drivers.file import FileDriver
from controller.errors import DriverError, FabricError, InputError, JobError, RouteError
from controller.formats.fabric_file import load_fabric
from controller.formats.placement import load_placement
from controller.formats.route_file import dump_routes, read_routes
from controller.model import validation
from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth
from controller.model.jobs import Job, jobs_flows
from controller.routes.entries import build_routes
from controller.routes.plan import Add
from controller.service import convert
from controller.solver.solve import SolveOptions, solve

pytestmark = pytest.mark.fuzz

_ASKED = int(os.environ.get("FABRIC_TE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_ASKED or 50,
    derandomize=not _ASKED,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TINY = build(PRESETS["tiny"])
MESSAGE = 800  # each line of an error message is readable, whatever the input

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=70),
    st.floats(),
    st.sampled_from([5e-324, 1e308, -0.0, 2**32 - 1, 2**63, 2**64 - 1, 1e-7, 0.5, "", "nan",
                     "host-p0-r0-h0", "rtsw-p0-r0:ctsw-p0-c1", "ring", "\x00", "é" * 200,
                     "x" * 5000]),
    st.builds(lambda: list(range(1000))),  # fresh objects: later edits may change them
    st.builds(lambda: {str(i): i for i in range(300)}),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)  # fmt: skip


@st.composite
def broken(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` with one to three structural edits at random places."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        parent: Any = None
        key: Any = None
        node = doc
        while isinstance(node, dict | list) and node and draw(st.integers(0, 3)) > 0:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            parent, key = node, draw(st.sampled_from(keys))
            node = node[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if parent is None:
            if action == "replace":
                doc = draw(JUNK)
            continue
        if action == "replace":
            parent[key] = draw(JUNK)
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6))] = draw(JUNK)
        else:
            parent.append(draw(JUNK))
    return doc


@st.composite
def document(draw: st.DrawFn, doc: Any, kinds: tuple[str, ...] = ("json", "yaml")) -> bytes:
    """A broken `doc`, serialised, sometimes also broken as text or bytes."""
    kind = draw(st.sampled_from(kinds))
    data = draw(st.one_of(st.just(doc), broken(doc)))
    if kind == "json":
        text = json.dumps(data)
    else:
        text = yaml.safe_dump(data, allow_unicode=True)
    raw = text.encode()
    how = draw(st.sampled_from(["as is", "as is", "cut", "flip", "duplicate", "binary"]))
    if how == "cut" and raw:
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif how == "flip" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    elif how == "duplicate" and isinstance(data, dict) and data:
        key = draw(st.sampled_from(sorted(map(str, data))))
        extra = json.dumps({key: draw(JUNK)})[1:-1]
        if kind == "json" and text.startswith("{") and text != "{}":
            raw = ("{" + extra + ", " + text[1:]).encode()
        elif kind == "yaml":
            raw = (text + yaml.safe_dump({key: 1})).encode()
    elif how == "binary":
        raw = draw(st.binary(max_size=64))
    return raw


def _load(raw: bytes, suffix: str, load: Callable[[Path], Any], errors: type[Exception]) -> Any:
    """`load` the bytes from a file; an error must be `errors` and name the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(raw)
        try:
            return load(path)
        except errors as err:
            assert str(err).startswith(f"{path}: "), err
            lines = str(err).split("\n")  # every problem of the file, one a line, up to a cap
            assert len(f"{path}: ") < len(lines[0]) < len(f"{path}: ") + MESSAGE
            assert all(len(line) < MESSAGE for line in lines[1:])
            assert len(lines) <= validation.MAX_REPORTED + 1
            return None


# ---- fabric files --------------------------------------------------------------------------
FABRIC_DOC = {"preset": "tiny", "name": "lab", "racks_per_pod": 3, "nic_gbps": 400,
              "taper": 2.0, "links": {"rtsw-p0-r2:ctsw-p0-c1": 100}}  # fmt: skip


@FUZZ
@given(raw=document(FABRIC_DOC), suffix=st.sampled_from([".json", ".yaml"]))
def test_fabric_files(raw: bytes, suffix: str) -> None:
    fabric = _load(raw, suffix, lambda p: load_fabric(str(p)), FabricError)
    if fabric is not None:  # whatever loaded obeys the rule set
        assert fabric.num_nics <= validation.MAX_GPUS and fabric.num_links <= validation.MAX_LINKS
        cap = fabric.capacity
        assert np.isfinite(cap).all()
        assert (cap >= validation.MIN_GBPS).all() and (cap <= validation.MAX_GBPS).all()
        assert isinstance(fabric.name, str) and fabric.name


# ---- placement files ------------------------------------------------------------------------
PLACEMENT_DOC = {"jobs": [
    {"id": "llm-1", "hosts": ["host-p0-r0-h0", "host-p0-r0-h1", "host-p0-r1-h0", "host-p0-r1-h1"],
     "dp": 4, "pp": 1, "tp": 2, "collectives": ["ring"], "channels": 2, "demand_gbps": 400},
    {"id": "rank-1", "hosts": ["host-p1-r0-h0", "host-p1-r1-h1"], "collectives": ["alltoall"]},
]}  # fmt: skip


@FUZZ
@given(raw=document(PLACEMENT_DOC), suffix=st.sampled_from([".json", ".yaml"]))
def test_placement_files(raw: bytes, suffix: str) -> None:
    jobs = _load(raw, suffix, lambda p: load_placement(TINY, p), JobError)
    if jobs is not None:
        flows = jobs_flows(TINY, jobs)
        flows.validate(TINY)
        assert all(j.channels <= validation.MAX_CHANNELS for j in jobs)


# ---- route files ---------------------------------------------------------------------------
def _routes_doc() -> dict[str, Any]:
    jobs = [Job("a", (0, 2, 4, 6), dp=8), Job("b", (1, 3, 5, 7), dp=8, collectives=("alltoall",))]
    result = solve(TINY, LinkHealth.all_up(TINY), jobs_flows(TINY, jobs),
                   options=SolveOptions(lp="never"))  # fmt: skip
    routes = build_routes(TINY, result.assignment)
    return dump_routes(TINY, result.assignment, routes)


ROUTES_DOC = _routes_doc()


@FUZZ
@given(raw=document(ROUTES_DOC, ("json",)))
def test_route_files(raw: bytes) -> None:
    loaded = _load(raw, ".json", lambda p: read_routes(p, TINY), RouteError)
    if loaded is not None:
        assignment, routes = loaded
        assignment.flows.validate(TINY)
        assert np.isfinite(assignment.link_load(TINY)).all()
        assert all(0 <= e.in_port < TINY.num_links for e in routes)


# ---- the file driver's tables ----------------------------------------------------------------
SWITCH = "rtsw-p0-r0"


def _table_doc() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        driver = FileDriver(tmp, fabric=TINY)
        for host in (2, 3, 5):
            from controller.routes.tables import Entry

            entry = Entry(SWITCH, TINY.access_link(0), host, TINY.rack_link(0, host % 4))
            driver.apply(SWITCH, [Add(entry)])
        doc: dict[str, Any] = json.loads((Path(tmp) / f"{SWITCH}.json").read_text())
    return doc


TABLE_DOC = _table_doc()


@FUZZ
@given(raw=document(TABLE_DOC, ("json",)))
def test_driver_tables(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{SWITCH}.json"
        path.write_bytes(raw)
        driver = FileDriver(tmp, fabric=TINY)
        try:
            entries = driver.read(SWITCH)
        except DriverError as err:
            assert str(err).startswith(f"{path}: "), err
            assert len(str(err)) < len(f"{path}: ") + MESSAGE
            with pytest.raises(DriverError):  # nothing is written over a refused table
                driver.apply(SWITCH, [])
            assert path.read_bytes() == raw
            return
        ports = {TINY.access_link(n) for n in range(4)} | {TINY.rack_link(0, c) for c in range(4)}
        for e in entries:
            assert e.in_port in ports and e.next_hop in ports and 0 <= e.dst_host < 8


# ---- gRPC request conversion -----------------------------------------------------------------
def _proto_junk(kind: str) -> st.SearchStrategy[Any]:
    return {
        "u32": st.one_of(st.integers(0, 70), st.sampled_from([2**32 - 1, 2**31, 65])),
        "f64": st.one_of(st.floats(), st.sampled_from([5e-324, 1e308, 0.5, 400.0])),
        "str": st.one_of(st.text(max_size=8), st.sampled_from(["host-p0-r0-h0", "ring"])),
    }[kind]


JOBS = st.builds(
    pb.Job,
    id=_proto_junk("str"),
    hosts=st.lists(st.one_of(st.sampled_from([TINY.host_name(h) for h in range(8)]),
                             _proto_junk("str")), max_size=5),
    dp=_proto_junk("u32"), pp=_proto_junk("u32"), tp=_proto_junk("u32"),
    collectives=st.lists(st.sampled_from(["ring", "alltoall", "pipeline", "x"]), max_size=3),
    channels=_proto_junk("u32"), demand_gbps=_proto_junk("f64"),
    gpus_per_host=_proto_junk("u32"),
)  # fmt: skip
REPORTS = st.lists(
    st.builds(pb.LinkReport,
              link=st.one_of(st.sampled_from([TINY.link_name(n) for n in range(16, 24)]),
                             _proto_junk("str")),
              state=st.integers(0, 4), fraction=_proto_junk("f64")),
    max_size=4,
)  # fmt: skip


@FUZZ
@given(job=JOBS, reports=REPORTS)
def test_request_conversion(job: pb.Job, reports: list[pb.LinkReport]) -> None:
    try:
        parsed = convert.job_from_pb(TINY, job, "job")
    except InputError as err:
        assert str(err).startswith("job") and len(str(err)) < MESSAGE, err
    else:
        jobs_flows(TINY, [parsed]).validate(TINY)
        convert.job_to_pb(TINY, parsed).SerializeToString()  # what ListJobs will send
    try:
        updates, switches = convert.link_reports(TINY, reports)
    except InputError as err:
        assert str(err).startswith("reports[") and len(str(err)) < MESSAGE, err
    else:
        health = LinkHealth.all_up(TINY).reported(TINY, updates, switches)
        f = health.factor
        assert ((f == 0) | (f == 1) | ((f >= validation.MIN_FRACTION) & (f < 1))).all()


# ---- link health specs (--fail) ---------------------------------------------------------------
SPEC = st.one_of(
    st.builds("{}={}".format,
              st.sampled_from([TINY.link_name(n) for n in (0, 16, 17, 39)]
                              + ["ctsw-p0-c1", "host-p0-r0-h0", "rtsw-p0-r0:x", ""]),
              st.one_of(st.sampled_from(["down", "up", "drain", "nan", "inf", "-0", "5e-324",
                                         "1e-400", "0.5", "1", "2", ""]),
                        st.text(max_size=6))),
    st.text(max_size=30),
)  # fmt: skip


@FUZZ
@given(specs=st.lists(SPEC, max_size=4))
def test_link_health_specs(specs: list[str]) -> None:
    from controller.model.health import parse_health

    try:
        health = parse_health(TINY, specs)
    except FabricError as err:
        assert str(err) and "\n" not in str(err)
    else:
        f = health.factor
        assert ((f == 0) | (f == 1) | ((f >= validation.MIN_FRACTION) & (f < 1))).all()
