"""Fabric files load all or nothing, and errors name the field at fault."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from controller.errors import FabricError
from controller.formats.fabric_file import load_fabric, parse_fabric
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric


def test_presets_match_published_sizes() -> None:
    pod = build(PRESETS["pod"])
    assert (pod.num_nics, pod.num_racks, pod.ctsws_per_pod) == (3072, 192, 16)
    assert pod.summary()["rack_uplink_ratio"] == 1.0
    meta = build(PRESETS["meta-24k"])
    assert meta.num_nics == 24576 and meta.pods == 8
    assert meta.summary()["agg_taper"] == pytest.approx(7.0)
    over = build(PRESETS["meta-24k-1125"])
    assert over.summary()["rack_uplink_ratio"] == pytest.approx(1.125)


def test_yaml_file_with_preset_and_override(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        "preset: tiny\nname: lab\nracks_per_pod: 3\n"
        "links:\n  'rtsw-p0-r2:ctsw-p0-c1': 100\n"
    )
    fabric = load_fabric(str(path))
    assert fabric.name == "lab" and fabric.num_racks == 6
    link = fabric.link_by_name("rtsw-p0-r2:ctsw-p0-c1")
    assert fabric.capacity[2 * link] == 100.0


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"pods": 1, "racks_per_pod": 2, "ctsws_per_pod": 4,
                                "nics_per_host": 2}))
    assert load_fabric(str(path)).num_nics == 8


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"pods": 2, "racks": 3}, "unknown key.*racks"),
        ({"pods": 0}, r"f.yaml: pods: 0 is not within \[1, 1024\]"),
        ({"pods": 2}, "atsws_per_plane: must be >= 1"),
        ({"preset": "tiny", "taper": -1}, r"taper: -1.0 is not within"),
        ({"preset": "pod", "atsws_per_plane": 2},
         r"an aggregation layer \(atsws_per_plane 2\) needs the speed of its links"),
        ({"preset": "tiny", "taper": 2, "agg_link_gbps": 100}, "give exactly one of them"),
        ({"preset": "nope"}, "unknown fabric preset 'nope'"),
        ({"preset": "tiny", "links": {"rtsw-p0-r0:ctsw-p0-c7": 100}}, "unknown link"),
        ({"preset": "tiny", "links": {"rtsw-p0-r0:ctsw-p0-c1": -5}},
         r"links\.rtsw-p0-r0:ctsw-p0-c1: -5.0 is not within"),
        ([1, 2], "top level: must be a mapping"),
        # names the templates or renames make are checked as what the operator wrote
        ({"preset": "tiny", "rename": {"ctsw-p0-c0": "spine:1"}},
         r"rename\.ctsw-p0-c0: 'spine:1' cannot name a device"),
        ({"preset": "tiny", "names": {"host": "gpu/{host_id}"}},
         r"names\.host \('gpu/\{host_id\}'\): 'gpu/0' cannot name a device"),
        ({"preset": "tiny", "ports": {"rtsw_down": "Ethernet{host}"}},
         r"ports\.rtsw_down: 'Ethernet\{host\}' gives two ports of rtsw-p0-r0 the name "
         r"'Ethernet0': use the fields that tell them apart \(host, nic, i\)"),
        ({"preset": "small", "names": {"rtsw": "leaf-{pod_letter}{rack:03}"},
          "links": {"leaf-a000:ctsw-p0-c0": 200, "ctsw-p0-c0:leaf-a000": 300}},
         r"links\.leaf-a000:ctsw-p0-c0: the same link as links\.ctsw-p0-c0:leaf-a000"),
        # a name alone is no fabric (the shape's defaults are for the fields left out)
        ({"name": "dc1"}, "no shape: name a preset"),
        ({}, "no shape: name a preset"),
        ({"name": "dc1", "taper": 2}, "no shape"),
    ],
)
def test_bad_documents(doc: object, message: str) -> None:
    with pytest.raises(FabricError, match=message):
        parse_fabric(doc, "f.yaml")


def test_missing_file_lists_presets() -> None:
    with pytest.raises(FabricError, match="neither a fabric preset .*meta-24k"):
        load_fabric("no-such-file.yaml")


def test_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("pods: [1,\n")
    with pytest.raises(FabricError, match="bad.yaml: not valid YAML: .* line 2, column 1"):
        load_fabric(str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("preset: tiny\nnic_gbps: .nan\n", "nic_gbps: must be a finite number, got nan"),
        ("preset: tiny\ntaper: .nan\n", "taper: must be a finite number, got nan"),
        ("preset: tiny\ntaper: .inf\n", "taper: must be a finite number, got inf"),
        ("preset: tiny\nlinks: {'rtsw-p0-r0:ctsw-p0-c1': 1.0e+308}\n",
         r"links.rtsw-p0-r0:ctsw-p0-c1: 1e\+308 is not within"),
        ("preset: tiny\nrack_link_gbps: 1.0e+308\n", r"rack_link_gbps: 1e\+308 is not within"),
        ("preset: tiny\nnic_gbps: 5.0e-324\n", "nic_gbps: 5e-324 is not within"),
        ("pods: 1000000000\natsws_per_plane: 1\ntaper: 1\n",
         r"pods: 1000000000 is not within \[1, 1024\]"),
        ("preset: meta-24k\nracks_per_pod: 4096\nhosts_per_rack: 256\n", "GPUs exceed the cap"),
        ("preset: tiny\npods: 2\npods: 3\n", "line 3: duplicate key 'pods'"),
        ("preset: tiny\nlinks:\n  rtsw-p0-r0:ctsw-p0-c1: 100\n  ctsw-p0-c1:rtsw-p0-r0: 200\n",
         r"links.rtsw-p0-r0:ctsw-p0-c1: the same link as links.ctsw-p0-c1:rtsw-p0-r0"),
        ("preset: tiny\nname: 123\n", "name: must be a string, got 123"),
        ("preset: tiny\npods: true\n", "pods: must be an integer, got True"),
        ("preset: tiny\nnic_gbps: yes\n", "nic_gbps: must be a number, got True"),
        ("preset: tiny\npods: 2.0\n", "pods: must be an integer, got 2.0"),
        ("preset: [tiny]\n", "preset: must be a string"),
        ("preset: tiny\nlinks: [1, 2]\n", "links: must be a mapping"),
        ("preset: tiny\nlinks: {7: 100}\n", "links.7: key must be a string"),
        ("preset: tiny\n1: 2\n", "1: key must be a string"),
        ("preset: tiny\nracks_per_pod: 2020-01-01\n", "racks_per_pod: must be an integer"),
    ],
)  # fmt: skip
def test_bad_yaml_values_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fabric.yaml"
    path.write_text(text)
    with pytest.raises(FabricError) as info:
        load_fabric(str(path))
    assert str(info.value).startswith(f"{path}: "), info.value
    assert re.search(message, str(info.value)), info.value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"preset": "tiny", "nic_gbps": NaN}', "nic_gbps: must be a finite number, got nan"),
        ('{"preset": "tiny", "taper": Infinity}', "taper: must be a finite number, got inf"),
        ('{"preset": "tiny", "taper": 2, "taper": 3}', "duplicate key 'taper'"),
        ('{"preset": "tiny", "pods": 1' + "0" * 5000 + "}", "not valid JSON"),
    ],
)
def test_bad_json_values_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fabric.json"
    path.write_text(text)
    with pytest.raises(FabricError, match=f"^{re.escape(str(path))}: .*{message}"):
        load_fabric(str(path))


def test_binary_junk_is_not_utf8_text(tmp_path: Path) -> None:
    path = tmp_path / "fabric.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(FabricError, match=f"^{re.escape(str(path))}: not UTF-8 text"):
        load_fabric(str(path))


def test_taper_without_an_aggregation_layer_is_harmless() -> None:
    # found by fuzzing: a taper with atsws_per_plane 0 divided by zero while building
    fabric = parse_fabric({"taper": 2.0, "racks_per_pod": 3}, "f.json")
    assert fabric.num_agg_links == 0 and fabric.num_racks == 3


# ---- the cable-list and template forms (docs/inventory.md) ----------------------------------
EXAMPLE = Path(__file__).parents[3] / "docs" / "examples" / "tiny-cables.yaml"


def test_the_example_cable_list_loads() -> None:
    fabric = load_fabric(str(EXAMPLE))
    assert fabric.name == "dc1-tiny" and fabric.host_name(0) == "gpu-a00"
    missing = [fabric.link_name(int(k)) for k in np.flatnonzero(~fabric.installed)]
    assert missing == ["leaf-a1:spine-a2"]
    assert fabric.summary()["hosts"] == 8


def test_csv_cable_list_with_roles(tmp_path: Path) -> None:
    """The CSV a spreadsheet gives: role columns, or roles from the YAML that names it."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    roles = {d["name"]: d["role"] for d in doc["devices"]}
    rows = ["a,a_port,b,b_port,gbps,a_role,b_role"] + [
        f"{c['a']},{c['a_port']},{c['b']},{c['b_port']},{c['gbps']},{roles[c['a']]},"
        f"{roles[c['b']]}" for c in doc["cables"]]  # fmt: skip
    (tmp_path / "dc1.csv").write_text("\n".join(rows) + "\n")
    from_csv = load_fabric(str(tmp_path / "dc1.csv"))
    reference = load_fabric(str(EXAMPLE))
    assert from_csv.link_names == reference.link_names and from_csv.name == "dc1"
    plain = ["a,a_port,b,b_port,gbps"] + [r.rsplit(",", 2)[0] for r in rows[1:]]
    (tmp_path / "plain.csv").write_text("\n".join(plain) + "\n")
    with pytest.raises(FabricError, match=r"plain.csv: no device has a role \(.*a_role/b_role "
                       r"columns or roles: .*\); 24 devices, the first gpu-a00"):  # fmt: skip
        load_fabric(str(tmp_path / "plain.csv"))
    # a misspelt device has no role: named with its cable's row
    typo = plain[:2] + [plain[2].replace("leaf-a0", "lef-a0")] + plain[3:]
    (tmp_path / "typo.csv").write_text("\n".join(typo) + "\n")

    def roles_file(name: str, cables: str, extra: str = "") -> str:
        """A fabric file naming `cables`, its roles by pattern (`extra` ones first)."""
        (tmp_path / name).write_text(
            f"name: dc1-tiny\ncables: {cables}\nroles: {{'gpu-*': host, 'leaf-*': rtsw, "
            f"{extra}'spine-*': ctsw, 'super-*': atsw}}\n")  # fmt: skip
        return str(tmp_path / name)

    roles_file("typo.yaml", "typo.csv")
    with pytest.raises(FabricError, match=r"unknown device\(s\) in cables.*: lef-a0 \(.*typo.csv: "
                       r"row 3: gpu-a00:eth1 - lef-a0:"):  # fmt: skip
        load_fabric(str(tmp_path / "typo.yaml"))
    via_yaml = load_fabric(roles_file("f.yaml", "plain.csv"))
    assert via_yaml.fingerprint == reference.fingerprint
    # overlapping patterns that disagree: refused, not resolved by their order
    overlap = roles_file("overlap.yaml", "plain.csv", "'leaf-a*': ctsw, ")
    with pytest.raises(FabricError, match=r"roles: patterns give devices different roles: "
                       r"leaf-a0 \(leaf-\*: rtsw, leaf-a\*: ctsw\)"):  # fmt: skip
        load_fabric(overlap)
    (tmp_path / "bad.csv").write_text("a,b,gbps\nx,y,1\n")
    with pytest.raises(FabricError, match="the header must name the columns"):
        load_fabric(str(tmp_path / "bad.csv"))
    (tmp_path / "semi.csv").write_text(rows[0].replace(",", ";") + "\n")  # a locale's CSV
    with pytest.raises(FabricError, match="separated by ';': a cable list's columns are "
                                          "separated by commas"):  # fmt: skip
        load_fabric(str(tmp_path / "semi.csv"))
    (tmp_path / "speed.csv").write_text(rows[0] + "\n" + rows[1].replace(",400,", ",fast,") + "\n")
    with pytest.raises(FabricError, match=r"speed.csv: row 2: gbps 'fast' is not a number"):
        load_fabric(str(tmp_path / "speed.csv"))
    # as a spreadsheet saves "CSV UTF-8": a byte-order mark first, the header in any case
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf" + ("\r\n".join(
        [rows[0].upper()] + rows[1:]) + "\r\n").encode())  # fmt: skip
    assert load_fabric(str(tmp_path / "excel.csv")).link_names == reference.link_names
    # trailing separators on the header and rows (empty columns) are no columns
    (tmp_path / "trail.csv").write_text("\n".join(r + ",," for r in rows) + "\n")
    assert load_fabric(str(tmp_path / "trail.csv")).link_names == reference.link_names
    # errors past the parse name the rows too, as the parse does; a cable listed twice is
    # said once, as such
    again = rows + [rows[3]]
    (tmp_path / "twice.csv").write_text("\n".join(again) + "\n")
    with pytest.raises(FabricError, match=rf"row {len(again)} \(.*\): the same cable as row 4, "
                                          "listed twice") as err:  # fmt: skip
        load_fabric(str(tmp_path / "twice.csv"))
    assert "used twice" not in str(err.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["cables"].append(dict(d["cables"][0])),
         r"the same cable as cables\[0\], listed twice"),
        (lambda d: d["cables"].append({**d["cables"][0], "b_port": "other"}),
         "port gpu-a00:eth0 is used twice"),
        (lambda d: d["devices"].append({"name": "x", "role": "spine"}), "role 'spine'"),
        (lambda d: d["cables"][0].update(b="nowhere"),
         r"unknown device.*: nowhere \(cables\[0\]: gpu-a00:eth0 - nowhere:"),
        (lambda d: d["cables"][0].pop("gbps"), r"cables\[0\]: missing required key 'gbps'"),
        (lambda d: d.update(pods=2), "unknown key.*pods"),
    ],
)
def test_bad_cable_lists(tmp_path: Path, edit: Any, message: str) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    edit(doc)
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(FabricError, match=message):
        load_fabric(str(path))


def test_preset_with_name_templates() -> None:
    fabric = parse_fabric({"preset": "tiny", "names": {"host": "gpu-{pod_letter}{rack}{host}",
                           "rtsw": "leaf-{pod_letter}{rack}"}, "ports": {"host": "eth{nic}"},
                           "rename": {"ctsw-p0-c0": "spine-zero"},
                           "links": {"leaf-a0:spine-zero": 100}})  # fmt: skip
    assert fabric.host_name(2) == "gpu-a10" and fabric.ctsw_name(0) == "spine-zero"
    assert fabric.ports(0) == ("eth0", "h0n0")
    assert fabric.capacity[2 * fabric.link_by_name("leaf-a0:spine-zero")] == 100
    plain = parse_fabric({"preset": "tiny"})
    assert plain.wiring is None and plain.fingerprint == build(PRESETS["tiny"]).fingerprint
    with pytest.raises(FabricError, match="names: unknown kind 'leaf'"):
        parse_fabric({"preset": "tiny", "names": {"leaf": "x{rack}"}})


def test_a_csv_and_devices_give_racks_and_pods(tmp_path: Path, named_tiny: Fabric) -> None:
    """The CSV's a_rack/b_rack/a_pod/b_pod columns name racks and pods as `devices:` does;
    a device in two racks, or in one rack by devices and another by the CSV, is refused."""
    f = named_tiny
    doc = yaml.safe_load(EXAMPLE.read_text())
    roles = {d["name"]: d["role"] for d in doc["devices"]}
    place = {f.rtsw_name(r): {"rack": f.rack_name(r)} for r in range(f.num_racks)}
    place |= {f.ctsw_name(p * f.ctsws_per_pod): {"pod": f.pod_name(p)} for p in range(f.pods)}

    def cell(dev: str, kind: str) -> str:
        return place.get(dev, {}).get(kind) or ""

    rows = ["a,a_port,b,b_port,gbps,a_role,b_role,a_rack,b_rack,a_pod,b_pod"] + [
        f"{c['a']},{c['a_port']},{c['b']},{c['b_port']},{c['gbps']},{roles[c['a']]},"
        f"{roles[c['b']]},{cell(c['a'], 'rack')},{cell(c['b'], 'rack')},{cell(c['a'], 'pod')},"
        f"{cell(c['b'], 'pod')}" for c in doc["cables"]]  # fmt: skip
    (tmp_path / "dc1.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "f.yaml").write_text("name: dc1-tiny\ncables: dc1.csv\n")
    from_csv = load_fabric(str(tmp_path / "f.yaml"))
    assert from_csv.fingerprint == named_tiny.fingerprint
    assert from_csv.pod_name(1) == "Hall-B" and from_csv.rack_name(2) == "B01"
    (tmp_path / "f.yaml").write_text("name: dc1-tiny\ncables: dc1.csv\ndevices: [{name: leaf-a0, "
                                     "role: rtsw, rack: 7}]\n")  # fmt: skip
    with pytest.raises(FabricError, match=r"leaf-a0: rack '7' in devices but 'A01' in the CSV"):
        load_fabric(str(tmp_path / "f.yaml"))
    twice = [r.replace(",A01,", ",A09,") if r.startswith("gpu-a01,eth1") else r for r in rows]
    (tmp_path / "twice.csv").write_text("\n".join(twice) + "\n")
    with pytest.raises(FabricError, match=r"row \d+: leaf-a0 is in rack 'A01' in row \d+, "
                       "in rack 'A09' here"):  # fmt: skip
        load_fabric(str(tmp_path / "twice.csv"))
    # the roles from the YAML's patterns, the CSV without role columns: the same racks and
    # pods (they were read only beside a role column), and role values in any case
    bare = [",".join(cells[:5] + cells[7:]) for cells in (r.split(",") for r in rows)]
    (tmp_path / "bare.csv").write_text("\n".join(bare) + "\n")
    patterns = {f"{d}*": r for d, r in (("gpu", "host"), ("leaf", "rtsw"), ("spine", "ctsw"),
                                        ("super", "atsw"))}  # fmt: skip
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"name": "dc1-tiny", "cables": "bare.csv",
                                                     "roles": patterns}))  # fmt: skip
    assert load_fabric(str(tmp_path / "g.yaml")).fingerprint == named_tiny.fingerprint
    upper = [rows[0]] + [r.replace(",host,", ",Host,").replace(",rtsw,", ",RTSW,")
                         for r in rows[1:]]  # fmt: skip
    (tmp_path / "upper.csv").write_text("\n".join(upper) + "\n")
    assert load_fabric(str(tmp_path / "upper.csv")).fingerprint == from_csv.fingerprint


def test_ports_per_nic_in_a_shape_a_named_preset_and_a_cable_list() -> None:
    """A dual-port NIC is said once, in every form: the shape key, a preset with names (its
    cable list rebuilt keeps it) and a cable list's top-level key (as its export writes)."""
    from controller.formats.cable_list import cable_list_document, dump
    from controller.model.name_templates import named_cable_list

    shape = {"preset": "tiny", "nics_per_host": 4, "rtsws_per_rack": 2, "planes": 2,
             "ports_per_nic": 2}  # fmt: skip
    plain = parse_fabric(shape)
    assert (plain.gpus_per_host, plain.summary()["gpus"]) == (2, 16)
    named = parse_fabric({**shape, "names": {"host": "gpu-{pod_letter}{rack}{host}"}})
    assert named.ports_per_nic == 2 and named.summary()["gpus"] == 16
    devices, cables = named_cable_list(plain, {}, {}, {})
    doc = cable_list_document("dual", devices, cables, ports_per_nic=2)
    assert doc["ports_per_nic"] == 2
    again = parse_fabric(json.loads(json.dumps(doc)))
    assert again.ports_per_nic == 2 and again.summary()["gpus"] == 16
    assert parse_fabric(yaml.safe_load(dump(doc))).fingerprint == again.fingerprint
    assert "ports_per_nic" not in cable_list_document("one", devices, cables)
    with pytest.raises(FabricError, match=r"<fabric>: ports_per_nic: 0 is not within \[1, 8\]"):
        parse_fabric({**doc, "ports_per_nic": 0})
    with pytest.raises(FabricError, match="ports_per_nic: 3 must be an integer"):
        parse_fabric({**shape, "ports_per_nic": 3})


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".csv"])
def test_an_empty_fabric_file_is_called_empty(tmp_path: Path, suffix: str) -> None:
    """An empty YAML file read as null: 'top level: must be a mapping, got None'; an empty
    CSV: '... once each; got ' (nothing)."""
    path = tmp_path / f"fabric{suffix}"
    path.write_text("\n")
    with pytest.raises(FabricError, match="the file is empty"):
        load_fabric(str(path))


def test_a_name_no_device_can_have_is_named_by_its_cable(tmp_path: Path) -> None:
    """A CSV (or a YAML cable list) with a device name the loader refuses names its row or
    cable, not an index into a `devices` list the file does not have."""
    (tmp_path / "f.csv").write_text("a,a_port,b,b_port,gbps,a_role,b_role\n"
                                    "gpu1,eth0,leaf 1,Ethernet1/1,400,host,rtsw\n")  # fmt: skip
    with pytest.raises(FabricError, match=r"'leaf 1' cannot name a device .*\(row 2: "
                       r"gpu1:eth0 - leaf 1:Ethernet1/1\)") as err:  # fmt: skip
        load_fabric(str(tmp_path / "f.csv"))
    assert "devices[" not in str(err.value)
    doc = {"cables": [{"a": "gpu:1", "a_port": "e0", "b": "l1", "b_port": "e1", "gbps": 1}],
           "roles": {"*": "host"}}  # fmt: skip
    with pytest.raises(FabricError, match=r"'gpu:1' cannot name a device .*\(cables\[0\]: "):
        parse_fabric(doc)


def test_a_role_in_devices_and_another_in_the_csv_is_refused(tmp_path: Path) -> None:
    """`devices:` and the CSV's role column that disagree about a device are refused, naming
    both, as a rack or pod they disagree about is; not one taken silently over the other."""
    (tmp_path / "c.csv").write_text("a,a_port,b,b_port,gbps,a_role,b_role\n"
                                    "gpu1,eth0,leaf1,e1,400,host,rtsw\n"
                                    "leaf1,e9,spine1,e1,400,rtsw,ctsw\n")  # fmt: skip
    (tmp_path / "f.yaml").write_text("cables: c.csv\ndevices: [{name: leaf1, role: ctsw}]\n")
    with pytest.raises(FabricError, match=r"leaf1: role 'ctsw' in devices but 'rtsw' in the "
                       r"CSV cable list \(.*c.csv: row 2: gpu1:eth0 - leaf1:e1\)"):  # fmt: skip
        load_fabric(str(tmp_path / "f.yaml"))
    (tmp_path / "f.yaml").write_text("cables: c.csv\ndevices: [{name: leaf1, role: rtsw}]\n")
    assert load_fabric(str(tmp_path / "f.yaml")).rtsw_name(0) == "leaf1"


def test_roles_in_a_fabric_file_take_any_case_as_the_csv_columns_do(tmp_path: Path) -> None:
    """`RTSW` in a CSV role column was taken, `role: RTSW` under devices or roles refused."""
    from controller.model.device_roles import parse_role_patterns

    (tmp_path / "c.csv").write_text("a,a_port,b,b_port,gbps\n"
                                    "gpu1,eth0,leaf1,e1,400\nleaf1,e9,spine1,e1,400\n")  # fmt: skip
    (tmp_path / "f.yaml").write_text("cables: c.csv\ndevices: [{name: leaf1, role: RTSW}]\n"
                                     "roles: {'gpu*': Host, 'spine*': CTSW}\n")  # fmt: skip
    fabric = load_fabric(str(tmp_path / "f.yaml"))
    assert fabric.rtsw_name(0) == "leaf1" and fabric.host_name(0) == "gpu1"
    assert parse_role_patterns(["leaf*=RTSW"]) == [("leaf*", "rtsw")]


def test_a_csv_a_fabric_file_names_is_read_as_every_document_is(tmp_path: Path,
                                                                monkeypatch) -> None:  # fmt: skip
    """`cables: FILE` is size-capped and refused unless a regular file (`/dev/zero` ran out
    of memory, a FIFO blocked), as the fabric file itself is."""
    from controller.model import documents

    rows = "a,a_port,b,b_port,gbps,a_role,b_role\n" + "".join(
        f"gpu{i},eth0,leaf1,e{i},400,host,rtsw\n" for i in range(20))  # fmt: skip
    (tmp_path / "c.csv").write_text(rows)
    (tmp_path / "f.yaml").write_text("cables: c.csv\n")
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", len(rows) - 1)
    with pytest.raises(FabricError, match=r"f.yaml: cables: .*c.csv: larger than"):
        load_fabric(str(tmp_path / "f.yaml"))
    (tmp_path / "f.yaml").write_text(f"cables: {tmp_path}\n")
    with pytest.raises(FabricError, match=r"f.yaml: cables: .*: not a regular file"):
        load_fabric(str(tmp_path / "f.yaml"))


def test_a_template_or_rename_giving_too_long_a_name_is_named() -> None:
    """A name past the 128-character limit names the template or rename that made it (it
    was devices[i] of a list no file has); a padding past it is refused before any name is
    made (`{host_id:>100000000}` built a 100 MB name per host and printed it whole)."""
    with pytest.raises(FabricError, match=r"names.host: \{host_id:0>200\} in .* pads to more "
                       "than 128 characters"):  # fmt: skip
        parse_fabric({"preset": "tiny", "names": {"host": "g{host_id:0>200}"}})
    with pytest.raises(FabricError, match=r"names.host \(.*\): gives a name of 201 characters "
                       r"\('xxxxxxxxxxxxxxxxxxxx'...\); at most 128") as err:  # fmt: skip
        parse_fabric({"preset": "tiny", "names": {"host": "x" * 200 + "{host_id}"}})
    assert "devices[" not in str(err.value)
    with pytest.raises(FabricError, match=r"rename.ctsw-p0-c0: gives a name of 129 characters"):
        parse_fabric({"preset": "tiny", "rename": {"ctsw-p0-c0": "s" * 129}})
    assert parse_fabric({"preset": "tiny", "names": {"host": "g{host_id:03}"}}).host_name(1) \
        == "g001"
