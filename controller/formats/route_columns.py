"""Route files as columns: the same assignment and entries as the JSON form, by id, in a
compressed numpy archive (`.npz`), for fabrics where the JSON form runs to 100 MB.

Arrays of the archive (one-dimensional; ids as `controller.model.fabric` numbers them):

    format       "fabric-te-routes-columns/1"      fabric, fingerprint   strings
    job_ids      strings, by job index
    flow_src, flow_dst (NIC ids), flow_demand (Gbps), flow_job (index into job_ids),
    flow_path (path index, -1: ECMP), flow_qp (QP bucket, -1: every bucket)
    switches     names of the switches with entries, in table order
    switch_entries   rows of each switch, in that order
    entry_in_port, entry_next_hop (link ids), entry_dst_host (host id), entry_qp

Ids, not names, so a file loads as arrays; the fingerprint (required here) says the fabric
numbers them the same way. Every value is checked as the JSON form's are, naming each row
at fault (`flows[i][k]`, `switches.SW[i]`); the archive is read without pickles, each array's
size checked before it is read.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from controller.errors import InputError, RouteError
from controller.model import validation
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.routes.tables import RouteSet

FORMAT = "fabric-te-routes-columns/1"
_FLOWS = ("flow_src", "flow_dst", "flow_demand", "flow_job", "flow_path", "flow_qp")
_ENTRIES = ("entry_in_port", "entry_dst_host", "entry_next_hop", "entry_qp")
_TEXT = ("format", "fabric", "fingerprint", "job_ids", "switches")
ARRAYS = (*_TEXT, *_FLOWS, "switch_entries", *_ENTRIES)
_MAX_ARRAY_BYTES = 8 * validation.MAX_DOCUMENT_BYTES  # one array, unpacked


def columns(fabric: Fabric, assignment: Assignment, routes: RouteSet) -> dict[str, np.ndarray]:
    """The archive's arrays for an assignment and its routes."""
    f = assignment.flows
    names = routes.switches()
    tables = [routes.table(sw) for sw in names]

    def joined(attr: str) -> np.ndarray:
        parts = [getattr(t, attr) for t in tables]
        return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)

    return {
        "format": np.array(FORMAT),
        "fabric": np.array(fabric.name),
        "fingerprint": np.array(fabric.fingerprint),
        "job_ids": np.array(f.job_ids, dtype=np.str_),
        "flow_src": f.src_nic.astype(np.int32),
        "flow_dst": f.dst_nic.astype(np.int32),
        "flow_demand": f.demand.astype(np.float64),
        "flow_job": f.job.astype(np.int32),
        "flow_path": assignment.path.astype(np.int64),
        "flow_qp": f.qp.astype(np.int32),
        "switches": np.array(names, dtype=np.str_),
        "switch_entries": np.array([len(t) for t in tables], dtype=np.int64),
        "entry_in_port": joined("in_port"),
        "entry_dst_host": joined("dst_host"),
        "entry_next_hop": joined("next_hop"),
        "entry_qp": joined("qp"),
    }


def write_route_columns(
    path: str | Path, fabric: Fabric, assignment: Assignment, routes: RouteSet
) -> None:
    """Write the route file of `columns` as a compressed archive (replaced whole)."""
    from controller.formats.route_checks import atomic_file

    arrays = columns(fabric, assignment, routes)
    with atomic_file(Path(path), "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]


def _load(path: Path) -> dict[str, np.ndarray]:
    """The archive's arrays, without pickles; sizes and names checked before reading."""
    try:
        if path.stat().st_size > validation.MAX_DOCUMENT_BYTES:
            raise RouteError(f"larger than {validation.MAX_DOCUMENT_BYTES >> 20} MiB")
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            names = {name.removesuffix(".npy") for name in members}
            unknown = sorted(names - set(ARRAYS))
            if unknown:
                validation.fail(RouteError, "", f"unknown array(s) {', '.join(unknown[:5])}; "
                                f"allowed: {', '.join(ARRAYS)}")  # fmt: skip
            missing = [name for name in ARRAYS if name not in names]
            if missing:
                validation.fail(RouteError, "", f"missing array(s) {', '.join(missing)}")
            out = {}
            for name in ARRAYS:
                info = members[f"{name}.npy"]
                if info.file_size > _MAX_ARRAY_BYTES:
                    validation.fail(RouteError, name, f"{info.file_size:,} bytes unpacked; at "
                                    f"most {_MAX_ARRAY_BYTES:,}")  # fmt: skip
                with archive.open(info) as fh:
                    array = np.lib.format.read_array(fh, allow_pickle=False)
                if array.ndim != (0 if name in _TEXT[:3] else 1):
                    validation.fail(RouteError, name, f"has shape {array.shape}")
                out[name] = array
            return out
    except RouteError:
        raise
    except (zipfile.BadZipFile, ValueError, EOFError) as bad:
        raise RouteError(f"not a route file of columns: {bad}") from None
    except OSError as bad:
        raise RouteError(f"cannot read route file: {bad.strerror or bad}") from None


def _text(arrays: dict[str, np.ndarray], name: str) -> Any:
    array = arrays[name]
    if array.dtype.kind != "U":
        validation.fail(RouteError, name, f"must be text, got {array.dtype}")
    return array.tolist()


def _ints(arrays: dict[str, np.ndarray], name: str, size: int | None = None) -> np.ndarray:
    array = arrays[name]
    if array.dtype.kind not in "iu" or array.dtype.itemsize > 8:
        validation.fail(RouteError, name, f"must be integers, got {array.dtype}")
    if array.dtype.kind == "u" and array.size and int(array.max()) >= 1 << 62:
        validation.fail(RouteError, name, f"{int(array.max())} is out of range")
    if size is not None and array.size != size:
        validation.fail(RouteError, name, f"has {array.size} rows, not {size}")
    return array.astype(np.int64)


def parse_route_columns(
    fabric: Fabric, arrays: dict[str, np.ndarray]
) -> tuple[Assignment, RouteSet]:
    """Check the arrays of a route file of columns against `fabric`, all or nothing."""
    from controller.formats.route_checks import (
        assignment_of,
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

    top = {name: _text(arrays, name) for name in ("format", "fabric", "fingerprint")}
    if top["format"] != FORMAT:
        validation.fail(RouteError, "format", f"{validation.shown(top['format'])} is not "
                        f"{FORMAT!r}")  # fmt: skip
    check_fabric(fabric, top)
    job_ids = _text(arrays, "job_ids")
    for i, job_id in enumerate(job_ids):
        validation.text(job_id, f"job_ids[{i}]", RouteError)
    repeated_job_ids(job_ids)
    n = arrays["flow_src"].size
    if n > validation.MAX_FLOWS:
        validation.fail(RouteError, "flow_src", f"has {n} rows; at most {validation.MAX_FLOWS}")
    demand = arrays["flow_demand"]
    if demand.dtype.kind != "f" or demand.size != n:
        validation.fail(RouteError, "flow_demand", f"must be {n} floats, got {demand.size} "
                        f"of {demand.dtype}")  # fmt: skip
    flows = [_ints(arrays, name, n) if name != "flow_demand" else demand.astype(np.float64)
             for name in _FLOWS]  # fmt: skip
    switches = _text(arrays, "switches")
    for s, name in enumerate(switches):
        validation.text(name, f"switches[{s}]", RouteError)
    if len(set(switches)) != len(switches):
        validation.fail(RouteError, "switches", "a switch is named twice")
    counts = _ints(arrays, "switch_entries", len(switches))
    if counts.size and (int(counts.min()) < 0 or int(counts.max()) > validation.MAX_FLOWS):
        validation.fail(
            RouteError,
            "switch_entries",
            f"rows of a switch must be within [0, {validation.MAX_FLOWS}]",
        )
    total = int(counts.sum())
    entries = [_ints(arrays, name, total) for name in _ENTRIES]
    problems = check_flows(fabric, job_ids, flows) + repeated_flows(flows) + split_flows(flows)
    entry_problems = check_entries(fabric, switches, counts, entries)
    if not entry_problems:  # ids known good: a match given twice is then the problem
        entry_problems = repeated_entries(switches, counts, entries)
    problems += [(n + row, text) for row, text in entry_problems]
    raise_problems(problems)
    return assignment_of(fabric, job_ids, flows), routes_of(switches, counts, entries)


def read_route_columns(path: str | Path,
                       fabric: Fabric | Callable[[str], Fabric]) -> tuple[Assignment, RouteSet]:
    """Read and check a route file of columns against `fabric` (or the fabric a callable
    gives for the name the file holds); errors name the file."""
    try:
        arrays = _load(Path(path))
        if callable(fabric):
            fabric = fabric(str(_text(arrays, "fabric")))
        return parse_route_columns(fabric, arrays)
    except InputError as err:
        raise RouteError(f"{path}: {err}") from None
