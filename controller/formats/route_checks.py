"""The checks both route file forms share (JSON, controller.formats.route_file; columns,
controller.formats.route_columns): flows and entries as columns against the fabric, every
problem reported up to a cap, content given twice refused (a job id; a flow: the same source
NIC, destination NIC and QP bucket, where a flow's all-QPs row and its bucket rows differ; an
entry's match (in_port, dst_host, qp) within one switch's table, whatever its next hop: one
sort over whole columns each), and the atomic write that never leaves half a file."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from controller.errors import FlowError, RouteError
from controller.model import validation
from controller.model.assignment import UNROUTED, Assignment
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.model.paths import flow_class, num_paths
from controller.routes.tables import MAX_QP_BUCKETS, OWNER, RouteSet, Table

Problem = tuple[int, str]  # (row, "field: what is wrong"): rows order the report


def _bad(mask: np.ndarray, rows: np.ndarray, say: Callable[[int, int], str]) -> list[Problem]:
    """A problem for each row where `mask` holds, up to what the report shows: say(i, row)
    gives the text of the i-th column position at file row `row`."""
    at = np.flatnonzero(mask)
    out = [(int(rows[i]), say(int(i), int(rows[i]))) for i in at[: validation.MAX_REPORTED]]
    out += [(int(rows[i]), "") for i in at[validation.MAX_REPORTED :]]  # counted, not shown
    return out


def check_flows(
    fabric: Fabric, job_ids: Sequence[str], columns: Sequence[np.ndarray],
    rows: np.ndarray | None = None,
) -> list[Problem]:  # fmt: skip
    """Every problem of flow columns (src NIC, dst NIC, demand, job, path, qp; `rows` their
    row numbers in the file), row by row: ids, demand, job index, QP bucket, path index."""
    src, dst, demand, job, path, qp = columns
    rows = np.arange(src.size) if rows is None else rows
    lo, hi = validation.MIN_FLOW_GBPS, validation.MAX_GBPS
    out: list[Problem] = []

    def not_a_nic(k: int, col: np.ndarray) -> Callable[[int, int], str]:
        return lambda i, f: (f"flows[{f}][{k}]: NIC id {col[i]} is not a NIC of fabric "
                             f"{fabric.name!r} (0..{fabric.num_nics - 1})")  # fmt: skip

    for k, col in ((0, src), (1, dst)):
        out += _bad((col < 0) | (col >= fabric.num_nics), rows, not_a_nic(k, col))
    out += _bad(
        ~np.isfinite(demand),
        rows,
        lambda i, f: f"flows[{f}][2]: must be a finite number, got {float(demand[i])!r}",
    )
    out += _bad(
        np.isfinite(demand) & ((demand < lo) | (demand > hi)),
        rows,
        lambda i, f: f"flows[{f}][2]: {float(demand[i])!r} is not within [{lo:g}, {hi:g}]",
    )
    out += _bad(
        (job < 0) | (job >= max(len(job_ids), 1)),
        rows,
        lambda i, f: f"flows[{f}][3]: job index {job[i]} has no entry in job_ids",
    )
    out += _bad((qp < ALL_QPS) | (qp >= MAX_QP_BUCKETS), rows,
                lambda i, f: f"flows[{f}][5]: qp bucket {qp[i]} is not within [0, "
                f"{MAX_QP_BUCKETS})")  # fmt: skip
    nics = (src >= 0) & (src < fabric.num_nics) & (dst >= 0) & (dst < fabric.num_nics)
    same = nics & (src // fabric.nics_per_host == dst // fabric.nics_per_host)
    out += _bad(same, rows, lambda i, f: f"flows[{f}]: source and destination are on the same host")
    most = np.zeros(src.size, np.int64)
    ok = nics & ~same
    paths = np.asarray(num_paths(fabric), dtype=np.int64)
    most[ok] = paths[flow_class(fabric, src[ok], dst[ok])]
    out += _bad(ok & ((path < UNROUTED) | (path >= most)), rows,
                lambda i, f: f"flows[{f}][4]: path {path[i]} is neither {UNROUTED} (ECMP) nor one "
                f"of the {most[i]} paths of this flow")  # fmt: skip
    return out


def raise_problems(problems: list[Problem]) -> None:
    """A RouteError listing `problems` in row order (see `validation.report`), if any."""
    if problems:
        problems.sort(key=lambda p: (p[0], p[1] == ""))
        shown = [text for _, text in problems if text]
        validation.fail_all(RouteError, shown[: validation.MAX_REPORTED], len(problems))


def assignment_of(
    fabric: Fabric, job_ids: Sequence[str], columns: Sequence[np.ndarray]
) -> Assignment:
    """The assignment of checked flow columns (see `check_flows`)."""
    src, dst, demand, job, path, qp = columns
    flows = FlowSet(src, dst, demand, job, tuple(job_ids), qp)
    try:
        flows.validate(fabric)
    except FlowError as err:
        raise RouteError(f"flows: {err}") from None
    return Assignment(flows, path)


def check_entries(
    fabric: Fabric, names: Sequence[str], counts: np.ndarray, columns: Sequence[np.ndarray]
) -> list[Problem]:
    """Every problem of entry columns (in_port, dst_host, next_hop, qp; `counts[s]` rows of
    switch `names[s]`, in order): switch names, ports of the switch, host, bucket, keys
    given twice with different next hops. Rows are numbered across the switches."""
    in_port, dst_host, next_hop, qp = columns
    nodes = fabric.node_index()
    first = fabric.node_id("rtsw", 0)
    node = np.array([nodes.get(sw, -1) for sw in names], np.int64)
    out: list[Problem] = []
    starts = np.concatenate([[0], np.cumsum(counts)])
    for s in np.flatnonzero(node < first).tolist():
        out.append((int(starts[s]), f"switches.{names[s]}: not a switch of fabric "
                    f"{fabric.name!r}"))  # fmt: skip
    sw = np.repeat(np.arange(len(names)), counts)
    at = np.arange(sw.size) - starts[sw]
    here = np.repeat(node, counts)
    lo, hi = fabric.link_ends
    rows = np.arange(sw.size)

    def where(i: int) -> str:
        return f"switches.{names[int(sw[i])]}[{at[i]}]"

    def not_its_link(label: str, col: np.ndarray) -> Callable[[int, int], str]:
        def say(i: int, _row: int) -> str:
            v = int(col[i])
            link = fabric.link_names[v] if 0 <= v < fabric.num_links else f"id {v}"
            return f"{where(i)}: {names[int(sw[i])]}: {label} {link} is not one of its links"

        return say

    for label, col in (("in_port", in_port), ("next_hop", next_hop)):
        valid = (col >= 0) & (col < fabric.num_links)
        safe = np.where(valid, col, 0)
        attached = valid & ((lo[safe] == here) | (hi[safe] == here))
        out += _bad((here >= first) & ~attached, rows, not_its_link(label, col))
    out += _bad((dst_host < 0) | (dst_host >= fabric.num_hosts), rows,
                lambda i, _f: f"{where(i)}: dst_host {dst_host[i]} is not a host of fabric "
                f"{fabric.name!r} (0..{fabric.num_hosts - 1})")  # fmt: skip
    out += _bad((qp < ALL_QPS) | (qp >= MAX_QP_BUCKETS), rows,
                lambda i, _f: f"{where(i)}: qp {qp[i]} is neither {ALL_QPS} (all buckets) nor a "
                f"bucket below {MAX_QP_BUCKETS}")  # fmt: skip
    if not out and sw.size:
        order = np.lexsort((rows, qp, dst_host, in_port, sw))
        key = [c[order] for c in (sw, in_port, dst_host, qp)]
        same = np.ones(sw.size - 1, bool)
        for c in key:
            same &= c[1:] == c[:-1]
        clash = same & (next_hop[order][1:] != next_hop[order][:-1])
        out += _bad(clash, order[1:],
                    lambda i, _f: f"{where(int(order[i + 1]))}: another entry of "
                    f"{names[int(sw[order[i + 1]])]} has the same match (in_port, dst_host, qp) "
                    "and another next hop")  # fmt: skip
    return out


def routes_of(names: Sequence[str], counts: np.ndarray, columns: Sequence[np.ndarray]) -> RouteSet:
    """The route set of checked entry columns (see `check_entries`, `repeated_entries`)."""
    in_port, dst_host, next_hop, qp = columns
    sw = np.repeat(np.arange(len(names)), counts)
    if sw.size and not _ascending(sw, in_port, dst_host, qp):
        order = np.lexsort((qp, dst_host, in_port, sw))
        sw, in_port, dst_host, next_hop, qp = (c[order] for c in (sw, in_port, dst_host,
                                                                   next_hop, qp))  # fmt: skip
        keep = np.r_[True, (np.diff(sw) != 0) | (np.diff(in_port) != 0)
                     | (np.diff(dst_host) != 0) | (np.diff(qp) != 0)]  # fmt: skip
        sw, in_port, dst_host, next_hop, qp = (c[keep] for c in (sw, in_port, dst_host,
                                                                  next_hop, qp))  # fmt: skip
    cuts = np.searchsorted(sw, np.arange(len(names) + 1)).tolist()
    return RouteSet({
        name: Table(name, in_port[a:b], dst_host[a:b], next_hop[a:b], OWNER, qp[a:b])
        for name, a, b in zip(names, cuts[:-1], cuts[1:], strict=True) if b > a
    })  # fmt: skip


def _ascending(*columns: np.ndarray) -> bool:
    """Whether the rows (compared column by column) strictly ascend: no sort needed."""
    n = columns[0].size
    if n < 2:
        return True
    undecided = np.ones(n - 1, bool)
    for c in columns:
        d = np.diff(c)
        if (undecided & (d < 0)).any():
            return False
        undecided &= d == 0
    return not undecided.any()


def check_fabric(fabric: Fabric, top: Mapping[str, Any]) -> None:
    """A route file's fabric name and fingerprint (when given) against `fabric`."""
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


@contextmanager
def atomic_file(path: Path, mode: str) -> Iterator[IO[Any]]:
    """A file opened next to `path` that replaces it once written in full (never half).
    A symbolic link is followed (its target is replaced, the link stays); a path that is
    not a regular file (/dev/null, a FIFO, a device) is written to as it is: replacing it
    would put a plain file where the device was."""
    target = Path(os.path.realpath(path))
    try:
        if target.exists() and not target.is_file():
            with open(target, mode) as fh:
                yield fh
            return
    except OSError as bad:
        raise RouteError(f"{path}: cannot write: {bad.strerror or bad}") from None
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode) as fh:
            yield fh
        os.replace(tmp, target)
    except OSError as bad:
        raise RouteError(f"{path}: cannot write: {bad.strerror or bad}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _packed(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """The columns `keys` as one int64 key, equal exactly where all of them are and ordered
    as they are (first column first); None when their value spans do not fit in one."""
    packed = np.zeros(keys[0].size, np.int64)
    room = 1
    for col in keys:
        lo = int(col.min())
        span = int(col.max()) - lo + 1
        room *= span
        if room >= 1 << 62:
            return None
        packed = packed * span + (col - lo)
    return packed


def _repeats(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the rows whose key (the columns `keys` together) an earlier row has,
    ascending, and for each the position of the first row of that key. One stable sort: of a
    single int64 key packing the columns when their value spans fit, else of the columns."""
    n = keys[0].size
    empty = np.zeros(0, np.int64)
    if n < 2:
        return empty, empty
    packed = _packed(keys)
    if packed is not None:
        order = np.argsort(packed, kind="stable")
        ranked = packed[order]
        same = ranked[1:] == ranked[:-1]
    else:
        order = np.lexsort(tuple(reversed(keys)))  # stable; the first column sorts first
        same = np.ones(n - 1, bool)
        for col in keys:
            ranked = col[order]
            same &= ranked[1:] == ranked[:-1]
    if not same.any():
        return empty, empty
    new = np.r_[True, ~same]  # a key's first row in sorted order (the first in the file)
    first = order[np.flatnonzero(new)[np.cumsum(new) - 1]]
    again = np.flatnonzero(~new)
    later, earlier = order[again], first[again]
    by_row = np.argsort(later, kind="stable")
    return later[by_row].astype(np.int64), earlier[by_row].astype(np.int64)


def _named(
    later: np.ndarray, earlier: np.ndarray, row: np.ndarray, say: Callable[[int, int], str]
) -> list[tuple[int, str]]:
    """A problem (file row, text) for each repeat, the text of the first MAX_REPORTED made
    by say(position, first position), the others counted."""
    shown = validation.MAX_REPORTED
    out = [
        (int(row[i]), say(i, j))
        for i, j in zip(later[:shown].tolist(), earlier[:shown].tolist(), strict=True)
    ]
    return out + [(int(r), "") for r in row[later[shown:]].tolist()]


def repeated_job_ids(job_ids: Sequence[str]) -> None:
    """Refuse a job id given twice (job ids already checked as text), naming the first
    repeat and the row it repeats."""
    if len(set(job_ids)) == len(job_ids):
        return
    n = len(job_ids)
    first = dict(zip(reversed(job_ids), range(n - 1, -1, -1), strict=True))  # its first row
    at = np.fromiter(map(first.__getitem__, job_ids), np.int64, n)
    i = int(np.flatnonzero(at != np.arange(n))[0])
    validation.fail(RouteError, f"job_ids[{i}]", f"duplicate job id "
                    f"{validation.shown(job_ids[i])} (also job_ids[{at[i]}])")  # fmt: skip


def repeated_flows(
    columns: Sequence[np.ndarray], rows: np.ndarray | None = None
) -> list[tuple[int, str]]:
    """A problem for every flow row (columns as `check_flows` takes them, `rows` their row
    numbers in the file) with the source NIC, destination NIC and QP bucket of an earlier
    row. A pair's all-QPs row (-1) and its bucket rows are different flows."""
    src, dst, _, _, _, qp = columns
    rows = np.arange(src.size) if rows is None else rows
    later, earlier = _repeats((src, dst, qp))
    return _named(later, earlier, rows, lambda i, j: (
        f"flows[{rows[i]}]: the same flow (source NIC, destination NIC, qp) as "
        f"flows[{rows[j]}]; give each flow once"))  # fmt: skip


def split_flows(
    columns: Sequence[np.ndarray], rows: np.ndarray | None = None
) -> list[tuple[int, str]]:
    """A problem for every NIC pair whose rows are not one flow, whole or split: its
    all-QPs row beside bucket rows, buckets not numbered 0..n-1 (a bucket missing, or one
    past the split), or buckets of unequal demand (the QPs hashed into n buckets carry
    equal shares). Named at the pair's first row in the file."""
    src, dst, demand, _, _, qp = columns
    rows = np.arange(src.size) if rows is None else rows
    if not src.size or (qp == ALL_QPS).all():
        return []
    once = np.ones(src.size, bool)  # a row given again is `repeated_flows`' to name
    once[_repeats((src, dst, qp))[0]] = False
    order = np.flatnonzero(once)
    order = order[np.lexsort((rows[order], dst[order], src[order]))]
    s, d = src[order], dst[order]
    start = np.flatnonzero(np.r_[True, (s[1:] != s[:-1]) | (d[1:] != d[:-1])])
    count = np.diff(np.r_[start, order.size])
    q, dem = qp[order], demand[order]
    whole = np.add.reduceat((q == ALL_QPS).astype(np.int64), start)
    top = np.maximum.reduceat(q, start)
    lo, hi = np.minimum.reduceat(dem, start), np.maximum.reduceat(dem, start)
    split = top > ALL_QPS
    mixed = split & (whole > 0)
    gaps = split & ~mixed & (top != count - 1)
    uneven = split & ~mixed & ~gaps & (hi - lo > 1e-9 * np.maximum(np.abs(hi), 1.0))
    out: list[tuple[int, str]] = []
    for bad, say in (
        (mixed, lambda g, n: f"both a row for all its QPs (qp {ALL_QPS}) and QP bucket rows"),
        (gaps, lambda g, n: f"{n} QP bucket rows numbered up to {int(top[g])}: a split "
                            f"flow's buckets are 0..{n - 1}, each once"),
        (uneven, lambda g, n: f"QP buckets of unequal demand ({float(lo[g]):g} to "
                              f"{float(hi[g]):g} Gbps): a split flow's buckets carry equal "
                              "shares"),
    ):  # fmt: skip
        for g in np.flatnonzero(bad).tolist():
            first = int(rows[order[start[g]]])
            out.append((first, f"flows[{first}]: NIC pair ({int(src[order[start[g]]])}, "
                               f"{int(dst[order[start[g]]])}) has "
                               f"{say(g, int(count[g]))}"))  # fmt: skip
    return sorted(out)


def repeated_entries(
    names: Sequence[str], counts: np.ndarray, columns: Sequence[np.ndarray]
) -> list[tuple[int, str]]:
    """A problem for every entry (columns as `check_entries` takes them) with the match
    (in_port, dst_host, qp) of an earlier entry of the same switch, whatever either's next
    hop. Rows are numbered across the switches."""
    in_port, dst_host, _, qp = columns
    sw = np.repeat(np.arange(len(names), dtype=np.int64), counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    later, earlier = _repeats((sw, in_port, dst_host, qp))

    def where(i: int) -> str:
        return f"switches.{names[int(sw[i])]}[{i - int(starts[sw[i]])}]"

    return _named(later, earlier, np.arange(sw.size), lambda i, j: (
        f"{where(i)}: the same match (in_port, dst_host, qp) as {where(j)}; give each match "
        "once"))  # fmt: skip
