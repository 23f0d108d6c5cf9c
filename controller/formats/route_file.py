"""Route files: an assignment and its per-switch TE entries as JSON, by name.

    {"format": "fabric-te-routes/1", "fabric": "meta-24k", "fingerprint": "sha256:...",
     "job_ids": [...],
     "flows": [[src NIC, dst NIC, demand Gbps, job index, path index (-1: ECMP)(, qp)], ...],
     "switches": {"rtsw-p0-r0": [[in_port link, dst host, next_hop link(, qp)], ...], ...}}

The trailing qp (a QP bucket, see controller.model.flows) is written only for flows split into QP
buckets and for entries that match one bucket; without it a row covers every bucket.

Names, not ids, so a file can be read by people and checked against the fabric on load: a
file for another fabric (its name, or the fingerprint of its shape) is refused, naming the file.
Files written before the fingerprint existed are read by their names, every one checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from controller.errors import FabricError, FlowError, InputError, RouteError
from controller.model import validation
from controller.model.assignment import UNROUTED, Assignment
from controller.model.documents import read_document
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.paths import flow_class, num_paths
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.tables import MAX_QP_BUCKETS, Entry, RouteSet

FORMAT = "fabric-te-routes/1"
TOP_KEYS = ("format", "fabric", "fingerprint", "job_ids", "flows", "switches")


def dump_routes(fabric: Fabric, assignment: Assignment, routes: RouteSet) -> dict[str, Any]:
    """The JSON-ready document for an assignment and its routes."""
    f = assignment.flows
    flows = [
        [fabric.nic_name(s), fabric.nic_name(d), float(dm), int(j), int(p)]
        + ([q] if q != ALL_QPS else [])
        for s, d, dm, j, p, q in zip(
            f.src_nic.tolist(), f.dst_nic.tolist(), f.demand.tolist(), f.job.tolist(),
            assignment.path.tolist(), f.qp.tolist(), strict=True,
        )
    ]  # fmt: skip
    switches = {
        sw: [
            [
                fabric.link_name(e.in_port),
                fabric.host_name(e.dst_host),
                fabric.link_name(e.next_hop),
            ]
            + ([e.qp] if e.qp != ALL_QPS else [])
            for e in routes.table(sw)
        ]
        for sw in routes.switches()
    }
    return {
        "format": FORMAT,
        "fabric": fabric.name,
        "fingerprint": fabric.fingerprint,
        "job_ids": list(f.job_ids),
        "flows": flows,
        "switches": switches,
    }


_NAME_CHARS = 4 * validation.MAX_NAME
_INT_RANGE = 1 << 62


def _plain(value: Any, types: tuple[str, ...], optional: int) -> bool:
    """Whether a row obviously passes `_row` (the common case, checked cheaply)."""
    if type(value) is not list or not len(types) - optional <= len(value) <= len(types):
        return False
    for kind, item in zip(types, value, strict=False):
        t = type(item)
        if kind == "name":
            ok = t is str and 0 < len(item) <= _NAME_CHARS and item.isprintable()
        elif kind == "int":
            ok = t is int and -_INT_RANGE <= item <= _INT_RANGE
        else:  # NaN fails both comparisons
            ok = (
                t is float or t is int
            ) and validation.MIN_FLOW_GBPS <= item <= validation.MAX_GBPS
        if not ok:
            return False
    return True


def _row(value: Any, field: str, types: tuple[str, ...], optional: int) -> list[Any]:
    """A row of `types` ("name", "int", "gbps"), the last `optional` of them may be left out."""
    if _plain(value, types, optional):
        return [float(x) if k == "gbps" else x for k, x in zip(types, value, strict=False)]
    row = validation.listing(value, field, len(types), RouteError)
    if len(row) < len(types) - optional:
        validation.fail(RouteError, field, f"needs {len(types) - optional} items, got {len(row)}")
    out: list[Any] = []
    for i, (kind, item) in enumerate(zip(types, row, strict=False)):
        where = f"{field}[{i}]"
        if kind == "name":
            out.append(validation.text(item, where, RouteError, limit=_NAME_CHARS))
        elif kind == "gbps":
            out.append(validation.number(item, where, validation.MIN_FLOW_GBPS, validation.MAX_GBPS,
                                     RouteError))  # fmt: skip
        else:
            out.append(validation.integer(item, where, -_INT_RANGE, _INT_RANGE, RouteError))
    return out


def _columns(rows: Any, nic: Mapping[str, int], jobs: int) -> list[np.ndarray] | None:
    """The columns of flow rows that are all plainly well formed, checked as arrays; None
    when any row needs the row-by-row check (which then names it)."""
    if not all(type(r) is list and 5 <= len(r) <= 6 for r in rows):
        return None
    cols = list(zip(*[r[:5] for r in rows], strict=True)) or [()] * 5
    if not {type(x) for x in cols[0] + cols[1]} <= {str}:
        return None
    if not {type(x) for x in cols[2]} <= {int, float}:
        return None
    qps = [r[5] if len(r) > 5 else ALL_QPS for r in rows]
    if not {type(x) for x in cols[3] + cols[4] + tuple(qps)} <= {int}:
        return None
    try:
        out = [
            np.array([nic.get(x, -1) for x in cols[0]], dtype=np.int64),
            np.array([nic.get(x, -1) for x in cols[1]], dtype=np.int64),
            np.array(cols[2], dtype=np.float64),
            np.array(cols[3], dtype=np.int64),
            np.array(cols[4], dtype=np.int64),
            np.array(qps, dtype=np.int64),
        ]
    except OverflowError:
        return None
    src, dst, demand, job, _, qp = out
    ok = (
        (src >= 0).all() and (dst >= 0).all()
        and ((demand >= validation.MIN_FLOW_GBPS) & (demand <= validation.MAX_GBPS)).all()
        and ((job >= 0) & (job < max(jobs, 1))).all()
        and ((qp >= ALL_QPS) & (qp < MAX_QP_BUCKETS)).all()
    )  # fmt: skip
    return out if ok else None


def _flows(fabric: Fabric, doc: Mapping[str, Any]) -> Assignment:
    job_ids = validation.listing(
        doc.get("job_ids", []), "job_ids", validation.MAX_FLOWS, RouteError
    )
    for i, job_id in enumerate(job_ids):
        validation.text(job_id, f"job_ids[{i}]", RouteError)
    rows = validation.listing(doc.get("flows", []), "flows", validation.MAX_FLOWS, RouteError)
    nic = {fabric.nic_name(n): n for n in range(fabric.num_nics)} if rows else {}
    paths = np.asarray(num_paths(fabric), dtype=np.int64)
    columns = _columns(rows, nic, len(job_ids))
    if columns is None:
        columns = _row_by_row(rows, nic, len(job_ids))
    src, dst, demand, job, path, qp = columns
    same = np.flatnonzero(src // fabric.nics_per_host == dst // fabric.nics_per_host)
    if same.size:
        validation.fail(
            RouteError, f"flows[{same[0]}]", "source and destination are on the same host"
        )
    most = paths[flow_class(fabric, src, dst)]
    bad = np.flatnonzero((path < UNROUTED) | (path >= most))
    if bad.size:
        f = int(bad[0])
        validation.fail(RouteError, f"flows[{f}][4]",
                    f"path {path[f]} is neither {UNROUTED} (ECMP) nor one of the "
                    f"{most[f]} paths of this flow")  # fmt: skip
    flows = FlowSet(src, dst, demand, job, tuple(job_ids), qp)
    try:
        flows.validate(fabric)
    except FlowError as err:
        raise RouteError(f"flows: {err}") from None
    return Assignment(flows, path)


def _row_by_row(rows: Any, nic: Mapping[str, int], jobs: int) -> list[np.ndarray]:
    """The flow columns, checked row by row: the first bad row is named."""
    cols: list[list[Any]] = [[] for _ in range(6)]
    for f, value in enumerate(rows):
        where = f"flows[{f}]"
        row = _row(value, where, ("name", "name", "gbps", "int", "int", "int"), 1)
        for k in (0, 1):
            if row[k] not in nic:
                validation.fail(RouteError, f"{where}[{k}]", f"unknown NIC {row[k]!r}")
            cols[k].append(nic[row[k]])
        cols[2].append(row[2])
        if not 0 <= row[3] < max(jobs, 1):
            validation.fail(
                RouteError, f"{where}[3]", f"job index {row[3]} has no entry in job_ids"
            )
        cols[3].append(row[3])
        cols[4].append(row[4])
        bucket = row[5] if len(row) > 5 else ALL_QPS
        if not ALL_QPS <= bucket < MAX_QP_BUCKETS:
            validation.fail(RouteError, f"{where}[5]",
                        f"qp bucket {bucket} is not within [0, {MAX_QP_BUCKETS})")  # fmt: skip
        cols[5].append(bucket)
    dtypes = (np.int64, np.int64, np.float64, np.int64, np.int64, np.int64)
    return [np.asarray(c, dtype=t) for c, t in zip(cols, dtypes, strict=True)]


def _entries(fabric: Fabric, doc: Mapping[str, Any]) -> RouteSet:
    tables = validation.mapping(doc.get("switches", {}), "switches", RouteError)
    ports = switch_ports(fabric) if tables else {}
    entries = []
    for sw, table in sorted(tables.items()):
        if sw not in ports:
            validation.fail(RouteError, f"switches.{sw}", f"not a switch of fabric {fabric.name!r}")
        rows = validation.listing(table, f"switches.{sw}", validation.MAX_FLOWS, RouteError)
        for i, row in enumerate(rows):
            # three names and an optional bucket; a bad name fails its lookup below
            if not (type(row) is list and 3 <= len(row) <= 4
                    and type(row[0]) is str and type(row[1]) is str and type(row[2]) is str
                    and (len(row) == 3 or type(row[3]) is int)):  # fmt: skip
                row = _row(row, f"switches.{sw}[{i}]", ("name", "name", "name", "int"), 1)
            try:
                entry = Entry(
                    sw,
                    fabric.link_by_name(row[0]),
                    fabric.host_by_name(row[1]),
                    fabric.link_by_name(row[2]),
                    qp=row[3] if len(row) > 3 else ALL_QPS,
                )
            except FabricError as err:
                _row(row, f"switches.{sw}[{i}]", ("name", "name", "name", "int"), 1)  # too long?
                raise RouteError(f"switches.{sw}[{i}]: {err}") from None
            problem = entry_problem(fabric, ports, entry)
            if problem:
                raise RouteError(f"switches.{sw}[{i}]: {problem}")
            entries.append(entry)
    return RouteSet.from_entries(entries)


def parse_routes(fabric: Fabric, doc: Any, source: str = "<routes>") -> tuple[Assignment, RouteSet]:
    """Check a route document against `fabric`, all or nothing; errors name `source` and the
    entry at fault. Files for another fabric (name or fingerprint) are refused; a file
    without a fingerprint (older writers) is read by its names, each checked."""
    try:
        top = validation.mapping(doc, "", RouteError)
        validation.keys(top, "top level", TOP_KEYS, ("format", "fabric"), RouteError)
        if top["format"] != FORMAT:
            validation.fail(
                RouteError, "format", f"{validation.shown(top['format'])} is not {FORMAT!r}"
            )
        name = validation.text(top["fabric"], "fabric", RouteError)
        if name != fabric.name:
            validation.fail(RouteError, "fabric",
                        f"routes are for fabric {name!r}, not {fabric.name!r}")  # fmt: skip
        if "fingerprint" in top:
            mark = validation.text(top["fingerprint"], "fingerprint", RouteError)
            if mark != fabric.fingerprint:
                validation.fail(RouteError, "fingerprint",
                            f"routes are for a fabric {name!r} of another shape ({mark}, not "
                            f"{fabric.fingerprint})")  # fmt: skip
        return _flows(fabric, top), _entries(fabric, top)
    except InputError as err:
        raise RouteError(f"{source}: {err}") from None


def write_routes(
    path: str | Path, fabric: Fabric, assignment: Assignment, routes: RouteSet
) -> None:
    Path(path).write_text(json.dumps(dump_routes(fabric, assignment, routes)) + "\n")


def read_routes(path: str | Path, fabric: Fabric) -> tuple[Assignment, RouteSet]:
    """Read and check a route file (JSON) against `fabric`."""
    doc = read_document(path, RouteError, "route file", "json")
    return parse_routes(fabric, doc, str(path))
