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

A path ending in .npz is written as columns instead (`controller.formats.route_columns`: the
same content by id, about 1/150 of the size and read in a fraction of the time); reading
tells the two forms apart by their first bytes. Both are checked by the same column checks
(`controller.formats.route_checks`: `check_flows`, `check_entries`), which name every row at
fault, up to validation.MAX_REPORTED, and refuse the same content given twice: a job id, a flow
(source NIC, destination NIC, qp) or a match within one switch's table (`repeated_job_ids`,
`repeated_flows`, `repeated_entries`, there too). The JSON text is
written as a stream, straight from the columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from controller.errors import FabricError, InputError, RouteError
from controller.formats.route_checks import (
    Problem,
    assignment_of,
    atomic_file,
    check_entries,
    check_fabric,
    check_flows,
    raise_problems,
    repeated_entries,
    repeated_flows,
    repeated_job_ids,
    routes_of,
    split_flows,
)
from controller.model import validation
from controller.model.assignment import Assignment
from controller.model.documents import read_document
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.routes.tables import RouteSet

FORMAT = "fabric-te-routes/1"
COLUMNS_SUFFIX = ".npz"  # a route file of that suffix is written as columns
TOP_KEYS = ("format", "fabric", "fingerprint", "job_ids", "flows", "switches")


def dump_routes(fabric: Fabric, assignment: Assignment, routes: RouteSet) -> dict[str, Any]:
    """The JSON-ready document for an assignment and its routes."""
    f = assignment.flows
    nics, links, hosts = fabric.node_names[fabric.num_hosts :], fabric.link_names, fabric.node_names
    flows = [
        [nics[s], nics[d], dm, j, p] + ([q] if q != ALL_QPS else [])
        for s, d, dm, j, p, q in zip(
            f.src_nic.tolist(), f.dst_nic.tolist(), f.demand.tolist(), f.job.tolist(),
            assignment.path.tolist(), f.qp.tolist(), strict=True,
        )
    ]  # fmt: skip
    switches = {}
    for sw in routes.switches():
        t = routes.table(sw)
        switches[sw] = [
            [links[a], hosts[h], links[b]] + ([q] if q != ALL_QPS else [])
            for a, h, b, q in zip(
                t.in_port.tolist(),
                t.dst_host.tolist(),
                t.next_hop.tolist(),
                t.qp.tolist(),
                strict=True,
            )  # fmt: skip
        ]
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


def _columns(rows: Any, nic: Mapping[str, int]) -> list[np.ndarray] | None:
    """The columns of flow rows that are all plainly typed with known NIC names; None when
    any row needs the row-by-row check (which then names it). Ranges are checked later."""
    if not all(type(r) is list and 5 <= len(r) <= 6 for r in rows):
        return None
    cols = list(zip_longest(*rows, fillvalue=ALL_QPS)) or [()] * 5
    qps = cols[5] if len(cols) > 5 else (ALL_QPS,) * len(rows)
    if not {type(x) for x in cols[0] + cols[1]} <= {str}:
        return None
    if not {type(x) for x in cols[2]} <= {int, float}:
        return None
    if not {type(x) for x in cols[3] + cols[4] + qps} <= {int}:
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
    if (out[0] < 0).any() or (out[1] < 0).any():
        return None
    return out


def _row_by_row(rows: Any, nic: Mapping[str, int]) -> tuple[list[np.ndarray], list[Problem]]:
    """The columns of the flow rows that are well typed with known NICs (the others left
    out), and a problem for every other row."""
    cols: list[list[Any]] = [[] for _ in range(6)]
    problems: list[Problem] = []
    for f, value in enumerate(rows):
        where = f"flows[{f}]"
        try:
            row = _row(value, where, ("name", "name", "gbps", "int", "int", "int"), 1)
        except RouteError as err:
            problems.append((f, str(err)))
            continue
        unknown = [k for k in (0, 1) if row[k] not in nic]
        for k in unknown:
            problems.append((f, f"{where}[{k}]: unknown NIC {row[k]!r}"))
        if unknown:
            continue
        for k, item in enumerate(row[:5]):
            cols[k].append(nic[item] if k < 2 else item)
        cols[5].append(row[5] if len(row) > 5 else ALL_QPS)
    dtypes = (np.int64, np.int64, np.float64, np.int64, np.int64, np.int64)
    return [np.asarray(c, dtype=t) for c, t in zip(cols, dtypes, strict=True)], problems


def _flows(fabric: Fabric, doc: Mapping[str, Any]) -> tuple[Assignment | None, list[Problem]]:
    job_ids = validation.listing(
        doc.get("job_ids", []), "job_ids", validation.MAX_FLOWS, RouteError
    )
    for i, job_id in enumerate(job_ids):
        validation.text(job_id, f"job_ids[{i}]", RouteError)
    repeated_job_ids(job_ids)
    rows = validation.listing(doc.get("flows", []), "flows", validation.MAX_FLOWS, RouteError)
    nic = _nic_index(fabric) if rows else {}
    columns = _columns(rows, nic)
    problems: list[Problem] = []
    index = None
    if columns is None:
        columns, problems = _row_by_row(rows, nic)
        bad = {f for f, _ in problems}
        index = np.array([f for f in range(len(rows)) if f not in bad], np.int64)
    problems += check_flows(fabric, job_ids, columns, index)
    problems += repeated_flows(columns, index)
    problems += split_flows(columns, index)
    if problems:
        return None, problems
    return assignment_of(fabric, job_ids, columns), []


_ENTRY_TYPES = ("name", "name", "name", "int")


def _nic_index(fabric: Fabric) -> dict[str, int]:
    first = fabric.num_hosts
    return {name: i for i, name in enumerate(fabric.node_names[first : first + fabric.num_nics])}


def _entry_ids(fabric: Fabric, row: Any, where: str) -> tuple[int, int, int, int]:
    """One entry row's ids (in_port, dst_host, next_hop, qp), its first problem raised."""
    row = _row(row, where, _ENTRY_TYPES, 1)
    try:
        ids = (fabric.link_by_name(row[0]), fabric.host_by_name(row[1]),
               fabric.link_by_name(row[2]))  # fmt: skip
    except FabricError as err:
        raise RouteError(f"{where}: {err}") from None
    return (*ids, row[3] if len(row) > 3 else ALL_QPS)


def _entries(fabric: Fabric, doc: Mapping[str, Any]) -> tuple[RouteSet | None, list[Problem]]:
    tables = validation.mapping(doc.get("switches", {}), "switches", RouteError)
    links, nodes, hosts = fabric.link_index(), fabric.node_index(), fabric.num_hosts
    names = sorted(tables)
    counts, problems = [], []
    cols: list[list[int]] = [[], [], [], []]
    base = 0
    for sw in names:
        rows = validation.listing(tables[sw], f"switches.{sw}", validation.MAX_FLOWS, RouteError)
        fast = _entry_block(rows, links, nodes, hosts)
        if fast is not None:
            for col, values in zip(cols, fast, strict=True):
                col.extend(values)
            counts.append(len(rows))
            base += len(rows)
            continue
        kept = 0
        for i, row in enumerate(rows):
            # three known names and an optional bucket: the common case, looked up directly
            if (type(row) is list and 3 <= len(row) <= 4
                    and type(row[0]) is str and type(row[1]) is str and type(row[2]) is str
                    and (len(row) == 3 or type(row[3]) is int)):  # fmt: skip
                a, h, b = links.get(row[0]), nodes.get(row[1], hosts), links.get(row[2])
                if a is not None and b is not None and h < hosts:
                    ids = (a, h, b, row[3] if len(row) > 3 else ALL_QPS)
                else:
                    ids = None
            else:
                ids = None
            if ids is None:
                try:
                    ids = _entry_ids(fabric, row, f"switches.{sw}[{i}]")
                except RouteError as err:
                    problems.append((base + i, str(err)))
                    continue
            for col, value in zip(cols, ids, strict=True):
                col.append(value)
            kept += 1
        counts.append(kept)
        base += len(rows)
    columns = [np.asarray(c, np.int64) for c in cols]
    if problems:  # rows left out: their positions in the other checks would be wrong
        return None, problems
    problems = check_entries(fabric, names, np.asarray(counts, np.int64), columns)
    if not problems:  # ids known good: a match given twice is then the problem
        problems = repeated_entries(names, np.asarray(counts, np.int64), columns)
    if problems:
        return None, problems
    return routes_of(names, np.asarray(counts, np.int64), columns), []


def _entry_block(
    rows: Sequence[Any], links: Mapping[str, int], nodes: Mapping[str, int], hosts: int
) -> list[list[int]] | None:
    """The id columns of a switch's rows when all are plain (three known names, an optional
    int bucket), made column by column; None when any row needs a closer look."""
    if not all(type(r) is list and 3 <= len(r) <= 4 for r in rows):
        return None
    cols = list(zip_longest(*rows, fillvalue=ALL_QPS)) or [(), (), ()]
    if not {type(x) for c in cols[:3] for x in c} <= {str}:
        return None
    if len(cols) > 3 and not (
        {type(x) for x in cols[3]} <= {int} and -_INT_RANGE <= min(cols[3]) <= max(cols[3])
        <= _INT_RANGE
    ):  # fmt: skip
        return None
    a = [links.get(x, -1) for x in cols[0]]
    h = [nodes.get(x, hosts) for x in cols[1]]
    b = [links.get(x, -1) for x in cols[2]]
    if min(a, default=0) < 0 or min(b, default=0) < 0 or max(h, default=0) >= hosts:
        return None
    return [a, h, b, list(cols[3]) if len(cols) > 3 else [ALL_QPS] * len(rows)]


def parse_routes(fabric: Fabric, doc: Any, source: str = "<routes>") -> tuple[Assignment, RouteSet]:
    """Check a route document against `fabric`, all or nothing; errors name `source` and
    every row at fault (up to validation.MAX_REPORTED). Files for another fabric (name or
    fingerprint) are refused; a file without a fingerprint (older writers) is read by its
    names, each checked."""
    try:
        top = validation.mapping(doc, "", RouteError)
        validation.keys(top, "top level", TOP_KEYS, ("format", "fabric"), RouteError)
        if top["format"] != FORMAT:
            validation.fail(
                RouteError, "format", f"{validation.shown(top['format'])} is not {FORMAT!r}"
            )
        check_fabric(fabric, top)
        assignment, problems = _flows(fabric, top)
        routes, entry_problems = _entries(fabric, top)
        after = len(top.get("flows", ()))  # entries are reported after the flows
        raise_problems(problems + [(after + row, text) for row, text in entry_problems])
        assert assignment is not None and routes is not None
        return assignment, routes
    except InputError as err:
        raise RouteError(f"{source}: {err}") from None


def json_chunks(fabric: Fabric, assignment: Assignment, routes: RouteSet) -> Iterator[str]:
    """The text of `dump_routes` as `json.dumps` writes it, in pieces (a switch's table, a
    block of flows), made straight from the columns: names need no escaping."""
    f = assignment.flows
    nics, links, hosts = fabric.node_names[fabric.num_hosts :], fabric.link_names, fabric.node_names
    head = {"format": FORMAT, "fabric": fabric.name, "fingerprint": fabric.fingerprint,
            "job_ids": list(f.job_ids)}  # fmt: skip
    yield json.dumps(head)[:-1] + ', "flows": ['
    block = 1 << 16
    for lo in range(0, len(f), block):
        hi = min(lo + block, len(f))
        q = f.qp[lo:hi].tolist()
        rows = [
            f'["{nics[s]}", "{nics[d]}", {dm!r}, {j}, {p}' + (f", {b}]" if b != ALL_QPS else "]")
            for s, d, dm, j, p, b in zip(
                f.src_nic[lo:hi].tolist(), f.dst_nic[lo:hi].tolist(), f.demand[lo:hi].tolist(),
                f.job[lo:hi].tolist(), assignment.path[lo:hi].tolist(), q, strict=True,
            )
        ]  # fmt: skip
        yield (", " if lo else "") + ", ".join(rows)
    yield '], "switches": {'
    for i, sw in enumerate(routes.switches()):
        t = routes.table(sw)
        rows = [
            f'["{links[a]}", "{hosts[h]}", "{links[b]}"' + (f", {q}]" if q != ALL_QPS else "]")
            for a, h, b, q in zip(
                t.in_port.tolist(),
                t.dst_host.tolist(),
                t.next_hop.tolist(),
                t.qp.tolist(),
                strict=True,
            )  # fmt: skip
        ]
        yield f"{', ' if i else ''}{json.dumps(sw)}: [{', '.join(rows)}]"
    yield "}}\n"


def write_routes(
    path: str | Path, fabric: Fabric, assignment: Assignment, routes: RouteSet
) -> None:
    """Write a route file: columns (`controller.formats.route_columns`) when `path` ends in
    .npz, else JSON, streamed. Written to a temporary file, then renamed into place."""
    path = Path(path)
    if path.suffix.lower() == COLUMNS_SUFFIX:
        from controller.formats.route_columns import write_route_columns

        write_route_columns(path, fabric, assignment, routes)
        return
    with atomic_file(path, "w") as fh:
        for chunk in json_chunks(fabric, assignment, routes):
            fh.write(chunk)


def read_routes(path: str | Path, fabric: Fabric) -> tuple[Assignment, RouteSet]:
    """Read and check a route file against `fabric`: columns (a zip archive, whatever its
    name) or JSON."""
    return _read(path, fabric)


def read_routes_for(path: str | Path,
                    fabric_ref: str | None) -> tuple[Fabric, Assignment, RouteSet]:
    """Read a route file and the fabric it is for: `fabric_ref` (a preset or fabric file)
    when given, else the preset the file names. A file made for a fabric of the operator's
    own names no preset, and its fabric file must be given."""
    from controller.formats.fabric_file import load_fabric
    from controller.model.clos import PRESETS

    chosen: list[Fabric] = []

    def resolve(name: str) -> Fabric:
        if fabric_ref is None and not name:
            raise RouteError("the file names no fabric: give it (--fabric NAME or FILE)")
        if fabric_ref is None and name not in PRESETS:
            raise RouteError(f"routes are for fabric {name!r}, which is no preset: give its "
                             "fabric file (--fabric FILE)")  # fmt: skip
        chosen.append(load_fabric(fabric_ref if fabric_ref is not None else name))
        return chosen[-1]

    assignment, routes = _read(path, resolve)
    return chosen[-1], assignment, routes


def _read(path: str | Path,
          fabric: Fabric | Callable[[str], Fabric]) -> tuple[Assignment, RouteSet]:  # fmt: skip
    try:
        with open(path, "rb") as fh:
            zipped = fh.read(4) == b"PK\x03\x04"
    except OSError:
        zipped = False  # read_document names the file and why
    if zipped:
        from controller.formats.route_columns import read_route_columns

        return read_route_columns(path, fabric)
    if str(path).lower().endswith(".npz") and Path(path).is_file():
        raise RouteError(f"{path}: not a route file: a .npz route file is a zip archive of "
                         "columns (tectl solve --out FILE.npz), and this is none")  # fmt: skip
    doc = read_document(path, RouteError, "route file", "json")
    if callable(fabric):
        name = doc.get("fabric") if isinstance(doc, Mapping) else None
        try:
            fabric = fabric(name if isinstance(name, str) else "")
        except InputError as err:
            raise RouteError(f"{path}: {err}") from None
    return parse_routes(fabric, doc, str(path))
