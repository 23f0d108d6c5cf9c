"""Fabric files: YAML, JSON or CSV descriptions of a Clos fabric, loaded all or nothing.

Three forms (docs/inventory.md). The cable list, the operator's devices and cables:

    name: dc1-cluster3
    te_entries: {rtsw: 2048, ctsw: 2048, atsw: 2048}
    devices:
      - {name: gpu-a01, role: host}
      - {name: leaf-a, role: rtsw, te_entries: 1024, rack: R01, pod: hall-a}
    cables:                   # or the path of a CSV cable list, relative to this file
      - {a: gpu-a01, a_port: eth0, b: leaf-a, b_port: Ethernet0, gbps: 400}
    roles: {"gpu-*": host}    # optional: roles of devices `devices` does not list
    ports_per_nic: 2          # optional: each GPU's NIC has 2 ports (a host's ports in
                              # natural order, 2 at a time: eth0 and eth1 are NIC 0's)

or that CSV alone (header `a,a_port,b,b_port,gbps` and optional `a_role,b_role`,
`a_rack,b_rack`, `a_pod,b_pod`). A preset
shape with the operator's names (controller.model.name_templates):

    preset: tiny
    names: {host: "gpu-{pod_letter}{rack}-{host}", rtsw: "leaf-{pod_letter}{rack}"}
    ports: {host: "eth{nic}"}
    rename: {"ctsw-p0-c0": "spine-00"}

And the shape alone, with the index model's names:

    preset: meta-24k          # optional: start from a preset, then override fields
    name: dc1-cluster3
    pods: 4                   # any ClosSpec field (see sim.clos.ClosSpec)
    links:                    # optional per-link speed overrides, Gbps, by link name
      "rtsw-p0-r3:ctsw-p0-c2": 200
    te_entries: {rtsw: 2048, ctsw: 4096, atsw: null}   # TE entries per switch; null = no limit

Unknown keys, duplicate keys and the same link given twice (in either orientation) are
rejected; numbers and dimensions follow the one rule set of controller.model.validation; every
error names the file and the field at fault.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from controller.errors import FabricError
from controller.model import validation
from controller.model.clos import PRESETS, SPEC_FIELDS, ClosSpec, build, preset, te_entries
from controller.model.documents import read_document, read_text
from controller.model.fabric import MAX_PORTS_PER_NIC, Fabric
from controller.model.inventory import (
    NOT_A_DEVICE_NAME,
    ROLES,
    Cable,
    Device,
    fabric_from_cables,
    roles_by_pattern,
    usable_device_name,
)
from controller.model.name_templates import named_cable_list

TOP_KEYS = SPEC_FIELDS | {"preset", "links", "names", "ports", "rename"}
CABLE_LIST_KEYS = ("name", "te_entries", "ports_per_nic", "devices", "cables", "roles")
DEVICE_KEYS = ("name", "role", "te_entries", "rack", "pod")
CABLE_KEYS = ("a", "a_port", "b", "b_port", "gbps")
CSV_COLUMNS = (*CABLE_KEYS, "a_role", "b_role", "a_rack", "b_rack", "a_pod", "b_pod")
Places = dict[str, dict[str, str]]  # device -> {"rack": ..., "pod": ...} a CSV gives it
MAX_ITEMS = validation.MAX_LINKS + validation.MAX_SWITCHES + validation.MAX_GPUS


def _devices(items: Any) -> list[Device]:
    out = []
    for i, item in enumerate(validation.listing(items, "devices", MAX_ITEMS, FabricError)):
        d = validation.mapping(item, f"devices[{i}]", FabricError)
        validation.keys(d, f"devices[{i}]", DEVICE_KEYS, ("name", "role"), FabricError)
        budget = d.get("te_entries")
        if budget is not None:
            budget = validation.integer(budget, f"devices[{i}].te_entries", 0, 1 << 31,
                                        FabricError)  # fmt: skip
        rack, pod = (None if d.get(k) is None else
                     validation.text(str(d[k]) if isinstance(d[k], int) and not isinstance(
                         d[k], bool) else d[k], f"devices[{i}].{k}", FabricError)
                     for k in ("rack", "pod"))  # fmt: skip
        out.append(Device(validation.text(d["name"], f"devices[{i}].name", FabricError),
                          # any case, as a CSV's role columns take it
                          validation.text(d["role"], f"devices[{i}].role", FabricError).lower(),
                          budget, rack, pod))  # fmt: skip
    return out


def _cables(items: Any) -> list[Cable]:
    out = []
    for i, item in enumerate(validation.listing(items, "cables", MAX_ITEMS, FabricError)):
        c = validation.mapping(item, f"cables[{i}]", FabricError)
        validation.keys(c, f"cables[{i}]", CABLE_KEYS, CABLE_KEYS, FabricError)
        a, a_port, b, b_port = (validation.text(c[k], f"cables[{i}].{k}", FabricError)
                                for k in CABLE_KEYS[:4])  # fmt: skip
        out.append(Cable(a, a_port, b, b_port,
                         validation.gbps(c["gbps"], f"cables[{i}].gbps", FabricError)))
    return out


def _a(role: str) -> str:
    """`role` with its article: "an atsw", "a host"."""
    return f"{'an' if role[0] in 'aeiou' else 'a'} {role}"


def read_cable_csv(text: str, source: str
                   ) -> tuple[list[Cable], dict[str, str], Places, list[str]]:  # fmt: skip
    """The cables of a CSV cable list (header a,a_port,b,b_port,gbps and optionally
    a_role,b_role, a_rack,b_rack, a_pod,b_pod, in any case; a leading byte-order mark, as
    spreadsheets save UTF-8, is skipped), the roles and the racks and pods its optional
    columns give, and each cable's name in errors (`row N`, the file's line); FabricError
    names the row and column."""
    rows = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    header = [h.strip().lower() for h in next(rows, [])]
    while header and not header[-1]:  # trailing separators, as spreadsheets save them
        header.pop()
    if not header:
        raise FabricError(f"{source}: the file is empty: a cable list starts with a header "
                          f"naming the columns {', '.join(CABLE_KEYS)}")
    missing = [c for c in CABLE_KEYS if c not in header]
    unknown = [c for c in header if c not in CSV_COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        other = next((sep for sep in (";", "\t", "|") if len(header) == 1 and sep in header[0]),
                     None)  # fmt: skip
        hint = f" (separated by {other!r}: a cable list's columns are separated by commas)" \
            if other else ""  # fmt: skip
        raise FabricError(f"{source}: the header must name the columns {', '.join(CABLE_KEYS)} "
                          "(and optionally a_role, b_role, a_rack, b_rack, a_pod, b_pod) once "
                          f"each; got {','.join(header)}{hint}")
    cables: list[Cable] = []
    names: list[str] = []
    roles: dict[str, str] = {}
    places: Places = {}
    said: dict[tuple[str, str], str] = {}  # (device, role/rack/pod): the row that said it
    for line, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(header) and not any(c.strip() for c in row[len(header):]):
            row = row[:len(header)]  # empty trailing cells
        if len(row) != len(header):
            raise FabricError(f"{source}: row {line} has {len(row)} cells, the header "
                              f"{len(header)}")  # fmt: skip
        cell = {h: v.strip() for h, v in zip(header, row, strict=True)}
        where = f"{source}: row {line}"
        if len(cables) >= MAX_ITEMS:
            raise FabricError(f"{where}: more than {MAX_ITEMS:,} cables")
        try:
            gbps = float(cell["gbps"])
        except ValueError:
            raise FabricError(f"{where}: gbps {cell['gbps']!r} is not a number") from None
        a, a_port, b, b_port = (validation.text(cell[k], f"{where}: {k}", FabricError)
                                for k in CABLE_KEYS[:4])  # fmt: skip
        cables.append(Cable(a, a_port, b, b_port,
                            validation.gbps(gbps, f"{where}: gbps", FabricError)))
        names.append(f"row {line}")
        for end in ("a", "b"):
            device = cell[end]
            role = cell.get(f"{end}_role", "").lower()  # as the header: any case
            if role:
                if role not in ROLES:
                    raise FabricError(f"{where}: {end}_role {role!r}; roles: "
                                      f"{', '.join(ROLES)}")  # fmt: skip
                if roles.setdefault(device, role) != role:
                    raise FabricError(f"{where}: {device} is {_a(roles[device])} in "
                                      f"{said[device, 'role']}, {_a(role)} here")  # fmt: skip
                said.setdefault((device, "role"), f"row {line}")
            for kind in ("rack", "pod"):  # with or without a role column
                value = cell.get(f"{end}_{kind}", "")
                if not value:
                    continue
                have = places.setdefault(device, {}).setdefault(kind, value)
                if have != value:
                    raise FabricError(f"{where}: {device} is in {kind} {have!r} in "
                                      f"{said[device, kind]}, in {kind} {value!r} here")
                said.setdefault((device, kind), f"row {line}")
    return cables, roles, places, names


def _with_roles(devices: list[Device], cables: Sequence[Cable], given: Mapping[str, str],
                patterns: Mapping[str, Any], places: Places | None = None,
                cable_names: Sequence[str] | None = None) -> list[Device]:  # fmt: skip
    """`devices` and every other cabled device, its role from `given` (CSV role columns) or
    the patterns it matches (which must agree), its rack and pod from `places` (CSV
    columns, where the device does not give them); FabricError lists the devices with no
    role, each with the first cable it is on (`cable_names`: a CSV's rows; `cables[i]`
    without), or the devices patterns give different roles."""
    listed = {d.name for d in devices}
    for pattern, role in patterns.items():
        if role not in ROLES:
            raise FabricError(f"roles.{pattern}: {role!r} is not a role; roles: "
                              f"{', '.join(ROLES)}")  # fmt: skip
    def on(i: int) -> str:
        c = cables[i]
        where = f"cables[{i}]" if cable_names is None else cable_names[i]
        return f"{where}: {c.a}:{c.a_port} - {c.b}:{c.b_port}"

    out = list(devices)
    unknown: dict[str, int] = {}  # device -> the first cable it is on
    unusable: dict[str, int] = {}
    cabled = dict.fromkeys(n for c in cables for n in (c.a, c.b) if n not in listed)
    by_pattern = roles_by_pattern([n for n in cabled if n not in given],
                                  list(patterns.items()), "roles", ": ")  # fmt: skip
    for i, cab in enumerate(cables):
        for name in (cab.a, cab.b):
            if name in listed or name in unknown or name in unusable:
                continue
            if not usable_device_name(name):  # named by its cable: `devices` does not list it
                unusable[name] = i
                continue
            role = given.get(name) or by_pattern.get(name)
            if role is None:
                unknown[name] = i
                continue
            out.append(Device(name, role))
            listed.add(name)
    if unusable:
        raise FabricError("bad device names in cables:\n  " + validation.report(
            [f"{d!r} {NOT_A_DEVICE_NAME} ({on(i)})" for d, i in unusable.items()]))
    for d in devices:  # a role column that says otherwise than `devices`
        if d.name in given and given[d.name] != d.role:
            first = next(i for i, c in enumerate(cables) if d.name in (c.a, c.b))
            raise FabricError(f"{d.name}: role {d.role!r} in devices but {given[d.name]!r} in "
                              f"the CSV cable list ({on(first)})")  # fmt: skip
    if places:
        out = [_placed(d, places[d.name]) if d.name in places else d for d in out]
    if unknown:
        how = ("list them under devices, give a_role/b_role columns or roles: {PATTERN: ROLE}"
               if cable_names is not None else "list them under devices or give roles: "
               "{PATTERN: ROLE}; a misspelt name is a device of its own")  # fmt: skip
        if len(out) == len(devices) and not devices:  # no device has a role: no typo
            raise FabricError(f"no device has a role ({how}); {len(unknown):,} devices, the "
                              f"first {', '.join(list(unknown)[:3])}")  # fmt: skip
        shown = "; ".join(f"{d} ({on(i)})" for d, i in list(unknown.items())[:8])
        more = f"; and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        raise FabricError(f"unknown device(s) in cables, so with no role ({how}): "
                          f"{shown}{more}")  # fmt: skip
    return out


def _placed(device: Device, place: Mapping[str, str]) -> Device:
    """`device` with the CSV's rack and pod; FabricError when `devices:` says otherwise."""
    for kind in ("rack", "pod"):
        mine, csv_value = getattr(device, kind), place.get(kind)
        if mine is not None and csv_value is not None and mine != csv_value:
            raise FabricError(f"{device.name}: {kind} {mine!r} in devices but {csv_value!r} in "
                              "the CSV cable list")  # fmt: skip
    return replace(device, rack=device.rack or place.get("rack"),
                   pod=device.pod or place.get("pod"))  # fmt: skip


def _cable_list(doc: Mapping[str, Any], base: Path | None, source: str) -> Fabric:
    validation.keys(doc, "top level", CABLE_LIST_KEYS, ("cables",), FabricError)
    name = validation.text(doc.get("name", Path(source).stem or "fabric"), "name", FabricError)
    budgets = te_entries(doc.get("te_entries", {}))
    ports = validation.integer(doc.get("ports_per_nic", 1), "ports_per_nic", 1,
                               MAX_PORTS_PER_NIC, FabricError)  # fmt: skip
    devices = _devices(doc.get("devices", []))
    roles = {pattern: role.lower() if isinstance(role, str) else role  # any case, as above
             for pattern, role in validation.mapping(doc.get("roles", {}), "roles",
                                                     FabricError).items()}  # fmt: skip
    given: dict[str, str] = {}
    places: Places = {}
    names: list[str] | None = None
    if isinstance(doc["cables"], str):
        if base is None:
            raise FabricError("cables: a CSV path needs a fabric file to be relative to")
        path = base / doc["cables"]
        try:
            text = read_text(path, FabricError, "cable list")
        except FabricError as err:
            raise FabricError(f"cables: {err}") from None
        cables, given, places, rows = read_cable_csv(text, str(path))
        names = [f"{path}: {row}" for row in rows]
    else:
        cables = _cables(doc["cables"])
    return fabric_from_cables(name, _with_roles(devices, cables, given, roles, places, names),
                              cables, budgets, ports, cable_names=names)  # fmt: skip


def parse_fabric(data: Any, source: str = "<fabric>", base: Path | None = None) -> Fabric:
    """Validate a decoded fabric document and build it; errors name `source` and the field.
    `base`: the directory a cable list's CSV path is relative to."""
    try:
        doc = validation.mapping(data, "", FabricError)
        if "cables" in doc or "devices" in doc:
            return _cable_list(doc, base, source)
        validation.keys(doc, "top level", sorted(TOP_KEYS), err=FabricError)
        spec = ClosSpec()
        if "preset" not in doc and not any(k in doc for k in validation.DIMENSION_CAPS):
            # ClosSpec's defaults are a fallback for the fields left out, not a fabric
            raise FabricError(
                "no shape: name a preset (preset: " + ", ".join(sorted(PRESETS)) + "), give "
                "the dimensions (pods, racks_per_pod, hosts_per_rack, ...; docs/inventory.md), "
                "or list the devices and cables"
            )
        if "preset" in doc:
            try:
                spec = preset(validation.text(doc["preset"], "preset", FabricError))
            except FabricError as err:
                raise FabricError(str(err) if str(err).startswith("preset:") else
                                  f"preset: {err}") from None  # fmt: skip
        overrides = {k: v for k, v in doc.items() if k in SPEC_FIELDS}
        if "taper" in overrides and "agg_link_gbps" not in overrides:
            overrides["agg_link_gbps"] = None
        if "agg_link_gbps" in overrides and "taper" not in overrides:
            overrides["taper"] = None
        links = doc.get("links")
        links = {} if links is None else validation.mapping(links, "links", FabricError)
        if not any(k in doc for k in ("names", "ports", "rename")):
            return build(replace(spec, **overrides), links)
        shaped = build(replace(spec, **overrides))
        devices, cables = named_cable_list(
            shaped, *(validation.mapping(doc.get(k, {}), k, FabricError)
                      for k in ("names", "ports", "rename")))  # fmt: skip
        fabric = fabric_from_cables(shaped.name, devices, cables, shaped.te_entries,
                                    shaped.ports_per_nic)  # fmt: skip
        return _with_speeds(fabric, links)
    except FabricError as err:
        raise FabricError(f"{source}: {err}") from None


def _with_speeds(fabric: Fabric, links: Mapping[str, Any]) -> Fabric:
    """`links` (link name -> Gbps) set on the fabric's own link names."""
    capacity = fabric.capacity.copy()
    given: dict[int, str] = {}
    for name, gbps in sorted(links.items()):
        try:
            link = fabric.link_by_name(name)
        except FabricError as err:
            raise FabricError(f"links.{name}: {err}") from None
        if link in given:  # both ends' orders name one link
            raise FabricError(f"links.{name}: the same link as links.{given[link]} (one entry "
                              "per link)")  # fmt: skip
        given[link] = name
        capacity[2 * link : 2 * link + 2] = validation.gbps(gbps, f"links.{name}", FabricError)
    return replace(fabric, capacity=capacity)


def load_fabric(ref: str) -> Fabric:
    """A preset name, or a path to a .yaml/.yml/.json fabric file or a .csv cable list."""
    if ref in PRESETS:
        return build(PRESETS[ref])
    path = Path(ref)
    if not path.is_file():
        raise FabricError(
            f"{ref!r} is neither a fabric preset ({', '.join(sorted(PRESETS))}) nor a file"
        )
    if path.suffix.lower() == ".csv":
        text = read_text(path, FabricError, "cable list")
        cables, roles, places, rows = read_cable_csv(text, str(path))
        try:
            return fabric_from_cables(path.stem, _with_roles([], cables, roles, {}, places, rows),
                                      cables, cable_names=rows)  # fmt: skip
        except FabricError as err:
            raise FabricError(f"{path}: {err}") from None
    return parse_fabric(read_document(path, FabricError, "fabric file"), str(path), path.parent)
