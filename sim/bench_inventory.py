"""Bench section inventory: meta-24k as a cable list with the operator's names, loaded from
its file and solved next to the preset, and with cables and hosts missing (docs/inventory.md)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from controller.formats.cable_list import cable_list_document, dump
from controller.formats.fabric_file import load_fabric
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.inventory import Cable, Device
from controller.model.jobs import jobs_flows
from controller.model.name_templates import named_cable_list
from controller.solver.solve import solve
from sim.bench_base import Config, Section, log, timed
from sim.compare import baseline, routed
from sim.jobmix import random_jobs

NAMES = {"host": "gpu-{pod_letter}{rack:03}-{host}", "rtsw": "leaf-{pod_letter}{rack:03}",
         "ctsw": "spine-{pod_letter}{ctsw:02}", "atsw": "super-{plane:02}-{atsw}"}  # fmt: skip
PORTS = {"host": "eth{nic}", **{k: "Ethernet{i}" for k in
                                ("rtsw_down", "rtsw_up", "ctsw_down", "ctsw_up", "atsw_down")}}


def irregular(devices: list[Device], cables: list[Cable]) -> tuple[list[Device], list[Cable]]:
    """Two RTSW-CTSW cables missing in every pod (racks 3 and 7 to CTSW 5), and the last
    host of each pod's first rack never racked."""
    gone = {d.name for d in devices if d.role == "host" and d.name.endswith("000-1")}

    def missing(c: Cable) -> bool:
        return (c.a.startswith("leaf-") and c.a.endswith(("003", "007"))
                and c.b == f"spine-{c.a[5:-3]}05")  # fmt: skip

    kept = [c for c in cables if c.a not in gone and not missing(c)]
    return [d for d in devices if d.name not in gone], kept


def bench_inventory(cfg: Config) -> Iterator[Section]:
    """The same cluster as a preset and as a named cable list: load, solve, quality."""
    preset = build(PRESETS["meta-24k"])
    devices, cables = named_cable_list(preset, NAMES, PORTS)
    fabrics: list[tuple[str, Fabric, float]] = [("preset meta-24k", preset, 0.0)]
    loads: list[list[object]] = []
    json_load, from_json = 0.0, preset
    roles = {d.name: d.role for d in devices}
    with tempfile.TemporaryDirectory(prefix="fabric-te-inventory-") as tmp:
        doc = cable_list_document("dc1-meta", devices, cables)
        csv = ["a,a_port,b,b_port,gbps,a_role,b_role"] + [
            f"{c.a},{c.a_port},{c.b},{c.b_port},{c.gbps:g},{roles[c.a]},{roles[c.b]}"
            for c in cables]  # fmt: skip
        for form, name, text in (("YAML", "fabric.yaml", dump(doc)),
                                 ("JSON", "fabric.json", dump(doc, as_json=True)),
                                 ("CSV", "dc1-meta.csv", "\n".join(csv) + "\n")):  # fmt: skip
            path = Path(tmp) / name
            path.write_text(text)
            seconds, fabric = timed(partial(load_fabric, str(path)), 1)
            loads.append([form, len(text.encode()) / 1e6, seconds])
            if form == "JSON":
                json_load, from_json = seconds, fabric
            log(f"  inventory: {form} loaded in {seconds:.2f} s")
        fabrics.append(("cable list, operator names", from_json, json_load))
        path = Path(tmp) / "irregular.json"
        path.write_text(dump(cable_list_document("dc1-meta", *irregular(devices, cables)),
                             as_json=True))  # fmt: skip
        seconds, fabric = timed(partial(load_fabric, str(path)), 1)
        fabrics.append(("cable list, 16 cables + 8 hosts missing", fabric, seconds))
    rows = []
    seed = cfg.seeds[0]
    for label, fabric, load_s in fabrics:
        health = LinkHealth.all_up(fabric)
        flows = jobs_flows(fabric, random_jobs(fabric, seed=seed))
        t, res = timed(partial(solve, fabric, health, flows), 1)
        te = routed("te", fabric, health, res.assignment, t, seed, parent=res.parent).report
        ee = baseline("eecmp", fabric, health, flows, seed, 16).report
        wc = baseline("wcmp", fabric, health, flows, seed, 16).report
        cert = res.certificate
        rows.append([label, load_s or "-", int(fabric.installed[: fabric.num_access_links].sum()),
                     int((~fabric.installed).sum()), len(flows), t, res.ratio,
                     te.busbw_fraction_min, ee.busbw_fraction_min, wc.busbw_fraction_min,
                     "passed" if cert is not None and cert.passed else "no"])  # fmt: skip
        log(f"  inventory: {label} solved in {t:.2f} s")
    sec = Section("Inventory: meta-24k as a cable list with the operator's names")
    sec.text(f"The meta-24k wiring as a cable-list file ({len(cables):,} cables, names like "
             "gpu-a000-0, leaf-a000, spine-a00, ports eth0/Ethernet12), loaded by `--fabric "
             "FILE` (reading, validating, inferring the Clos) in each form. YAML is read by the "
             "strict loader every input goes through (duplicate keys and aliases refused), "
             "which builds each node in Python: give a cluster this size as JSON or CSV.")
    sec.text("")
    sec.table(["form", "MB", "load s"], loads)
    sec.text("")
    sec.text("Then the preset, the JSON cable list, and that list with two RTSW-CTSW cables "
             "missing in every pod and one host of each pod's first rack never racked, each "
             f"with its seeded job mix (seed {seed}; hosts that are not there are not drawn). "
             "Worst job = the slowest job's bus bandwidth as a share of line rate.")  # fmt: skip
    sec.text("")
    sec.table(["fabric", "load s", "GPUs", "links not installed", "flows", "solve s",
               "MLU/bound", "TE worst job", "E-ECMP worst job", "WCMP worst job",
               "certificate"], rows)  # fmt: skip
    yield sec
