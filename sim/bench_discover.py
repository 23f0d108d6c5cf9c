"""The `discover` benchmark section: LLDP discovery at cluster scale, and on a real lab.

Scale: every node of a preset gets the table lldpd would print for it in the lab's naming
(`lldpcli -f json0 show neighbors details` shape: chassis with capabilities, port id and
description, MAU type), then the stages of `tectl fabric discover DIR` run in process:
reading the JSON into records, pairing them into cables, telling the roles, writing the
YAML document. Lab: `tectl lab up --fabric tiny --lldp` (root, lldpd): the time lldpd takes
until every node hears its planned neighbours, and one `fabric discover --lab` read.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from controller.drivers.linux_plan import LabPlan
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric

MAU = "10GbaseT - Four-pair Category 6A or better, full duplex mode only"


def _entry(port: str, peer: str, peer_port: str, station: bool, mac: str) -> dict[str, Any]:
    caps = [{"type": t, "enabled": on} for t, on in (("Bridge", not station),
                                                     ("Router", not station),
                                                     ("Wlan", False), ("Station", station))]
    return {"name": port, "via": "LLDP", "rid": "1", "age": "0 day, 00:00:10",
            "chassis": [{"id": [{"type": "mac", "value": mac}], "name": [{"value": peer}],
                         "descr": [{"value": "Debian GNU/Linux 12 (bookworm)"}],
                         "capability": caps}],
            "port": [{"id": [{"type": "ifname", "value": peer_port}],
                      "descr": [{"value": peer_port}], "ttl": [{"value": "4"}],
                      "auto-negotiation": [{"supported": False, "enabled": False,
                                            "current": [{"value": MAU}]}]}]}  # fmt: skip


def synthetic_tables(fabric: Fabric) -> dict[str, str]:
    """Node -> the json0 text lldpd would print in a lab of `fabric` (its cabled links)."""
    plan = LabPlan(fabric, "b")
    nodes = plan.hosts + plan.switches
    hosts = set(plan.hosts)
    mac = {n: f"02:00:{i >> 24 & 255:02x}:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
           for i, n in enumerate(nodes)}  # fmt: skip
    entries: dict[str, list[dict[str, Any]]] = {n: [] for n in nodes}
    for link in np.flatnonzero(fabric.installed).tolist():
        lo, hi = plan.ends(link)
        entries[lo.node].append(_entry(lo.ifname, hi.node, hi.ifname, hi.node in hosts,
                                       mac[hi.node]))  # fmt: skip
        entries[hi.node].append(_entry(hi.ifname, lo.node, lo.ifname, lo.node in hosts,
                                       mac[lo.node]))  # fmt: skip
    return {n: json.dumps({"lldp": [{"interface": e}]}, indent=2) for n, e in entries.items()}


def scale_row(preset: str) -> list[object]:
    from controller.formats.cable_list import cable_list_document, dump
    from controller.formats.lldp import read_table
    from controller.model.device_roles import with_roles
    from controller.model.discovery import discover

    fabric = build(PRESETS[preset])
    texts = synthetic_tables(fabric)
    size = sum(len(t) for t in texts.values())
    t0 = time.perf_counter()
    tables = {n: read_table(n, t) for n, t in texts.items()}
    t1 = time.perf_counter()
    found = discover(tables, 400)
    t2 = time.perf_counter()
    devices, cables, problems = with_roles(found)
    t3 = time.perf_counter()
    text = dump(cable_list_document(preset, devices, cables))
    t4 = time.perf_counter()
    assert found.ok and not problems and len(cables) == int(fabric.installed.sum()), preset
    return [preset, len(texts), len(cables), f"{size / 2**20:.0f}", f"{t1 - t0:.2f}",
            f"{t2 - t1:.2f}", f"{t3 - t2:.2f}", f"{t4 - t3:.2f}", f"{t4 - t0:.2f}",
            f"{len(text) / 2**20:.1f}"]  # fmt: skip


def lab_figures() -> str:
    """lldpd's start-to-heard time on a tiny lab and one `discover --lab` read, or why not."""
    from sim.lab import build as lab
    from sim.lab import lldp
    from sim.lab.shared import unique_name

    if os.geteuid() != 0:
        return "Lab: skipped (needs root)."
    reason = lldp.missing()
    if reason:
        return f"Lab: skipped ({reason})."
    from controller.formats.lldp import read_table
    from controller.model.discovery import discover

    fabric = build(PRESETS["tiny"])
    name = unique_name("bd")
    record = lab.up(fabric, name, "tiny", underlay="static", lldp=True)
    try:
        plan = LabPlan(fabric, name)
        start = time.perf_counter()  # what `fabric discover --lab` does, one node at a time
        tables = {n: read_table(n, lldp.table(name, n)) for n in plan.hosts + plan.switches}
        found = discover(tables, 400)
        read_s = time.perf_counter() - start
    finally:
        lab.down(name)
    heard_s = record.phases["lldp"] - record.phases["underlay"]
    return (f"Lab (`tectl lab up --fabric tiny --lldp`, 24 namespaces, 40 links): lldpd "
            f"started and every node hearing its planned neighbours in {heard_s:.2f} s (of "
            f"{record.build_seconds:.2f} s for the whole `lab up`); reading the 24 "
            f"tables over the control sockets (lldpcli, one after the other) and pairing them "
            f"took {read_s:.2f} s "
            f"({len(found.cables)} cables, {len(found.problems)} problems).")


def bench_discover(quick: bool) -> Iterator[tuple[str, str, list[str], list[list[object]]]]:
    presets = ["tiny", "small", "pod"] + ([] if quick else ["meta-24k"])
    rows = [scale_row(p) for p in presets]
    yield ("LLDP discovery (`tectl fabric discover`)",
           "Synthetic json0 tables of every node (lldpd's `show neighbors details` shape, the "
           "lab's names), discovered in one process: parse = JSON into records, pair = cables "
           "and problems, roles = inferred (stations, hops from the hosts), write = the YAML "
           "document. " + lab_figures(),
           ["fabric", "tables", "cables", "JSON MiB", "parse s", "pair s", "roles s",
            "write s", "total s", "YAML MiB"], rows)  # fmt: skip
