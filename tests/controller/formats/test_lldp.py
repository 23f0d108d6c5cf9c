"""lldpcli's JSON neighbour tables read, on output recorded from lldpd 1.0.16 itself.

The fixtures in lldp_fixtures/ were recorded from a `tiny` lab run with `tectl lab up --fabric
tiny --lldp` (lab name lx1): tiny-json0.json.gz and tiny-json.json.gz hold, per node, the
exact output of `lldpcli -u SOCK -f json0|json show neighbors details`; the three plain files
are single tables to read by eye (ctsw-p0-c0 in both forms, a host without `details`).
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.drivers.linux_plan import LabPlan
from controller.errors import FabricError
from controller.formats.cable_list import cable_list_document, dump
from controller.formats.lldp import mau_gbps, parse_neighbours, read_table, report_text
from controller.model.device_roles import with_roles
from controller.model.discovery import discover
from controller.model.fabric import Fabric

FIXTURES = Path(__file__).parent / "lldp_fixtures"
FORMS = ("json0", "json")


def recorded(form: str) -> dict[str, str]:
    """Node -> lldpcli's output, as recorded from the tiny lab."""
    return json.loads(gzip.decompress((FIXTURES / f"tiny-{form}.json.gz").read_bytes()))


def plan_cables(fabric: Fabric) -> set[frozenset[tuple[str, str]]]:
    plan = LabPlan(fabric, "lx1")
    return {frozenset((p.node, p.ifname) for p in plan.ends(link))
            for link in range(fabric.num_links)}  # fmt: skip


def plan_roles(fabric: Fabric) -> dict[str, str]:
    plan = LabPlan(fabric, "lx1")
    return {n: "host" if n in plan.hosts else n.split("-")[0] for n in plan.hosts + plan.switches}


@pytest.mark.parametrize("text,gbps", [
    ("10GbaseT - Four-pair Category 6A or better, full duplex mode only", 10.0),
    ("400GbaseDR4 - 400GBASE-R PCS/PMA over 4-lane single-mode fiber PMD", 400.0),
    ("1000BaseTFD - Four-pair Category 5 UTP, full duplex mode", 1.0),
    ("100BaseTXFD - 2 pair category 5 UTP, full duplex mode", 0.1),
    ("unknown", None), ("", None)])  # fmt: skip
def test_mau_speed(text, gbps):
    assert mau_gbps(text) == gbps


def test_both_forms_of_one_table_read_the_same():
    json0 = read_table("ctsw-p0-c0", (FIXTURES / "ctsw-p0-c0.json0.json").read_text())
    folded = read_table("ctsw-p0-c0", (FIXTURES / "ctsw-p0-c0.json.json").read_text())
    assert json0 == folded
    assert [(n.port, n.peer, n.peer_port) for n in json0] == [
        ("r0", "rtsw-p0-r0", "c0"), ("r1", "rtsw-p0-r1", "c0"), ("a0", "atsw-c0-a0", "p0")]
    assert {n.gbps for n in json0} == {10.0}  # veth ports: 10GbaseT
    assert all(n.capabilities == {"bridge", "router"} and n.peer_port_kind == "ifname"
               for n in json0)  # fmt: skip


def test_a_table_without_details_has_no_speed():
    host = read_table("host-p0-r0-h0", (FIXTURES / "host-p0-r0-h0.json.json").read_text())
    assert [(n.port, n.peer, n.peer_port, n.gbps) for n in host] == [
        ("nic0", "rtsw-p0-r0", "h0n0", None), ("nic1", "rtsw-p0-r0", "h0n1", None)]


@pytest.mark.parametrize("form", FORMS)
def test_the_recorded_lab_is_discovered_as_its_plan(tiny: Fabric, form: str):
    tables = {node: read_table(node, text) for node, text in recorded(form).items()}
    found = discover(tables, 400)
    devices, cables, problems = with_roles(found)
    assert found.ok and not problems
    assert {frozenset([(c.a, c.a_port), (c.b, c.b_port)]) for c in cables} == plan_cables(tiny)
    assert len(cables) == tiny.num_links
    assert {d.name: d.role for d in devices} == plan_roles(tiny)
    assert found.speed_from_lldp == tiny.num_links and {c.gbps for c in cables} == {10.0}
    text = report_text(found, devices, cables, problems, 400)
    assert text == ("40 cables agreed from 24 devices' tables; 24 devices (8 hosts, 4 rtsw, "
                    "8 ctsw, 4 atsw); speeds: 40 from LLDP (MAU type), 0 at --gbps 400 (none "
                    "advertised)\n")  # fmt: skip


def doctored(form: str = "json0") -> dict[str, dict]:
    return {node: json.loads(text) for node, text in recorded(form).items()}


def interfaces(doc: dict) -> list[dict]:
    return doc["lldp"][0]["interface"]


def run(docs: dict[str, dict]):
    return discover({n: parse_neighbours(n, d) for n, d in docs.items()}, 400)


def test_a_doctored_port_heard_twice_is_named():
    docs = doctored()
    extra = copy.deepcopy(next(i for i in interfaces(docs["rtsw-p0-r0"]) if i["name"] == "h1n0"))
    extra["name"] = "h0n0"  # h0n0 now hears host-p0-r0-h1:nic0 as well as host-p0-r0-h0:nic0
    interfaces(docs["rtsw-p0-r0"]).append(extra)
    found = run(docs)
    assert [p.message for p in found.problems] == [
        "rtsw-p0-r0:h0n0 hears 2 neighbours: host-p0-r0-h0:nic0, host-p0-r0-h1:nic0"]
    assert found.problems[0].ends == (("rtsw-p0-r0", "h0n0"),)
    assert len(found.cables) == 39  # that cable is left out, every other one kept


def test_doctored_speeds_that_disagree_are_named():
    docs = doctored()
    entry = next(i for i in interfaces(docs["ctsw-p0-c0"]) if i["name"] == "a0")
    entry["port"][0]["auto-negotiation"][0]["current"][0]["value"] = "400GbaseDR4 - 400GBASE-R"
    found = run(docs)
    assert [p.kind for p in found.problems] == ["speed"]
    assert found.problems[0].message == (
        "atsw-c0-a0:p0 and ctsw-p0-c0:a0 disagree about the speed: atsw-c0-a0 hears ctsw-p0-c0 "
        "at 10 Gbps, ctsw-p0-c0 hears atsw-c0-a0 at 400 Gbps")
    assert len(found.cables) == 39


def test_a_neighbour_outside_the_device_set_and_a_missing_table():
    docs = doctored("json")
    del docs["host-p1-r1-h1"]  # not in the device set: what hears it hears a stranger
    found = run(docs)
    assert [p.kind for p in found.problems] == ["unknown", "unknown"]
    assert found.problems[0].message == ("rtsw-p1-r1:h1n0 hears 'host-p1-r1-h1' port nic0, "
                                         "which is not in the device set")  # fmt: skip


@pytest.mark.parametrize("doc,match", [
    ("[]", "no top-level 'lldp'"), ('{"lldp": [3]}', "'lldp' holds int"),
    ('{"lldp": [{"interface": [{"via": "LLDP"}]}]}', "without an interface name"),
    ("{", "not JSON")])  # fmt: skip
def test_what_is_not_a_table_is_refused_naming_the_device(doc, match):
    with pytest.raises(FabricError, match=f"^leaf-a: .*{match}"):
        read_table("leaf-a", doc)


def test_empty_tables_in_both_forms():
    assert read_table("x", '{"lldp": [{}]}') == [] and read_table("x", '{"lldp": {}}') == []


def test_the_document_is_the_neutral_cable_list_byte_for_byte_stable(tiny: Fabric):
    tables = {node: read_table(node, text) for node, text in recorded("json0").items()}
    devices, cables, _ = with_roles(discover(tables, 400, force_default=True))
    doc = cable_list_document("tiny", list(reversed(devices)), list(reversed(cables)))
    text = dump(doc)
    assert text == dump(cable_list_document("tiny", devices, cables))
    assert yaml.safe_load(text) == json.loads(dump(doc, as_json=True)) == doc
    assert text.splitlines()[:3] == ["name: tiny", "devices:",
                                     "- {name: host-p0-r0-h0, role: host}"]  # fmt: skip
    assert "- {a: host-p0-r0-h0, a_port: nic0, b: rtsw-p0-r0, b_port: h0n0, gbps: 400}" in text
    assert [d["role"] for d in doc["devices"]] == ["host"] * 8 + ["rtsw"] * 4 + ["ctsw"] * 8 + [
        "atsw"] * 4
    assert all(c["a"].split("-")[0] in ("host", "rtsw", "ctsw") for c in doc["cables"])


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=12), st.text(max_size=12),
       st.floats(min_value=0.001, max_value=1e5) | st.integers(1, 10**5))  # fmt: skip
def test_any_names_round_trip_through_the_yaml_document(name: str, port: str, gbps: float):
    doc = {"name": name, "devices": [{"name": name, "role": "host"}],
           "cables": [{"a": name, "a_port": port, "b": port + "x", "b_port": name,
                       "gbps": gbps}]}  # fmt: skip
    assert yaml.safe_load(dump(doc)) == doc


def test_racks_and_pods_round_trip_through_the_document(tiny: Fabric, tmp_path):
    """Devices' racks and pods are written (quoted when they read as numbers) and read back
    to the same fabric."""
    from controller.formats.fabric_file import load_fabric, parse_fabric
    from controller.model.name_templates import named_cable_list

    devices, cables = named_cable_list(tiny, {"pod": "{pod}", "rack": "0{rack_id}"})
    text = dump(cable_list_document("tiny", devices, cables))
    assert "- {name: host-p0-r1-h0, role: host, rack: \"01\", pod: \"0\"}" in text
    (tmp_path / "t.yaml").write_text(text)
    back = load_fabric(str(tmp_path / "t.yaml"))
    direct = parse_fabric({"preset": "tiny", "names": {"pod": "{pod}", "rack": "0{rack_id}"}})
    assert back.fingerprint == direct.fingerprint
    assert [back.rack_name(r) for r in range(4)] == ["00", "01", "02", "03"]
    assert back.pod_name(1) == "1"
