"""Route files: an assignment and its per-switch TE entries as JSON, by name.

    {"format": "fabric-te-routes/1", "fabric": "meta-24k", "job_ids": [...],
     "flows": [[src NIC, dst NIC, demand Gbps, job index, path index (-1: ECMP)(, qp)], ...],
     "switches": {"rtsw-p0-r0": [[in_port link, dst host, next_hop link(, qp)], ...], ...}}

The trailing qp (a QP bucket, see controller.model.flows) is written only for flows split into QP
buckets and for entries that match one bucket; without it a row covers every bucket.

Names, not ids, so a file can be read by people and checked against the fabric on load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from controller.errors import FabricError
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS, FlowSet
from controller.routes.entries import Entry, RouteSet

FORMAT = "fabric-te-routes/1"


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
        "job_ids": list(f.job_ids),
        "flows": flows,
        "switches": switches,
    }


def parse_routes(fabric: Fabric, doc: Any, source: str = "<routes>") -> tuple[Assignment, RouteSet]:
    """Check a route document against `fabric`; errors name the entry at fault."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FabricError(f"{source}: not a {FORMAT} document")
    if doc.get("fabric") != fabric.name:
        raise FabricError(
            f"{source}: routes are for fabric {doc.get('fabric')!r}, not {fabric.name!r}"
        )
    nic = {fabric.nic_name(n): n for n in range(fabric.num_nics)}
    rows = doc.get("flows", [])
    try:
        src = [nic[r[0]] for r in rows]
        dst = [nic[r[1]] for r in rows]
    except (KeyError, IndexError, TypeError) as err:
        raise FabricError(f"{source}: flows: bad or unknown NIC {err}") from None
    flows = FlowSet.build(
        src, dst, [r[2] for r in rows], [r[3] for r in rows], tuple(doc.get("job_ids", ()))
    )
    flows = FlowSet(
        flows.src_nic, flows.dst_nic, flows.demand, flows.job, flows.job_ids,
        np.asarray([r[5] if len(r) > 5 else ALL_QPS for r in rows], dtype=np.int64),
    )  # fmt: skip
    flows.validate(fabric)
    assignment = Assignment(flows, np.asarray([r[4] for r in rows], dtype=np.int64))
    entries = []
    for sw, table in sorted(doc.get("switches", {}).items()):
        for i, row in enumerate(table):
            where = f"{source}: switches.{sw}[{i}]"
            try:
                entries.append(
                    Entry(
                        sw,
                        fabric.link_by_name(row[0]),
                        fabric.host_by_name(row[1]),
                        fabric.link_by_name(row[2]),
                        qp=int(row[3]) if len(row) > 3 else ALL_QPS,
                    )
                )
            except (FabricError, TypeError, ValueError) as err:
                raise FabricError(f"{where}: {err}") from None
    return assignment, RouteSet.from_entries(entries)


def write_routes(
    path: str | Path, fabric: Fabric, assignment: Assignment, routes: RouteSet
) -> None:
    Path(path).write_text(json.dumps(dump_routes(fabric, assignment, routes)) + "\n")


def read_routes(path: str | Path, fabric: Fabric) -> tuple[Assignment, RouteSet]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise FabricError(f"{path}: cannot read routes: {err}") from None
    return parse_routes(fabric, doc, str(path))
