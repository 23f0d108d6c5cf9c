"""SONiC's YANG models, as the sonic driver checks its writes with them (libyang)."""

from __future__ import annotations

import pytest

from controller.drivers import sonic_schema
from controller.drivers.conformance import CONFORMANCE_FABRIC, SWITCH, entry
from controller.drivers.sonic_plan import TABLE_KEY, SonicPlan
from controller.drivers.sonic_schema import MODELS, SchemaError, validate, yang_tree
from controller.routes.tables import Entry

pytestmark = pytest.mark.skipif(
    sonic_schema.available() is not None, reason=f"{sonic_schema.available()}"
)
PLAN = SonicPlan(CONFORMANCE_FABRIC)
PORTS = PLAN.ingress_ports(SWITCH)
TABLE = (TABLE_KEY, PLAN.table_fields(SWITCH))


def rule(**fields: str) -> tuple[str, dict[str, str]]:
    made = PLAN.rule(Entry(SWITCH, entry(0).in_port, 2, entry(0, 1).next_hop, qp=4))
    return made.key, dict(made.fields) | fields


def test_the_models_are_kept_with_their_licence():
    names = sorted(p.stem for p in MODELS.glob("*.yang"))
    assert "sonic-acl" in names and "sonic-types" in names and "sonic-port" in names
    assert "Apache License" in (MODELS / "LICENSE").read_text()
    for path in MODELS.glob("sonic-*.yang"):
        assert "{%" not in path.read_text(), f"{path.name} is an unrendered template"


def test_what_the_driver_writes_is_valid():
    validate(TABLE, [rule()], PORTS)
    whole = PLAN.rule(entry(1, 2))
    validate(TABLE, [(whole.key, dict(whole.fields)), rule()], PORTS)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("PRIORITY", "1000000", "range"),
        ("PRIORITY", "-1", "PRIORITY"),
        ("DST_IP", "10.1.0.300/32", "pattern"),
        ("DST_IP", "10.1.0.3", "pattern"),
        ("L4_SRC_PORT_RANGE", "0-63", "pattern"),
        ("IP_PROTOCOL", "200", "range"),
        ("IP_TYPE", "IPV5", "enumeration"),
        ("REDIRECT_ACTION", "10.128.0.1@eth0", "pattern"),
        ("REDIRECT_ACTION", "10.128.0.999@Ethernet4", "pattern"),
        ("PACKET_ACTION", "REDIRECT:10.128.0.1", "enumeration"),
        ("COLOUR", "blue", "COLOUR"),
    ],
)
def test_the_schema_refuses_bad_values(field, value, reason):
    with pytest.raises(SchemaError, match=reason):
        validate(TABLE, [rule(**{field: value})], PORTS, where=SWITCH)


def test_a_rule_needs_its_table_and_the_table_real_ports():
    with pytest.raises(SchemaError, match="leafref"):
        validate(None, [rule()], PORTS)
    with pytest.raises(SchemaError, match="leafref|Ethernet999"):
        validate((TABLE_KEY, TABLE[1] | {"ports@": "Ethernet999"}), [], PORTS)
    with pytest.raises(SchemaError, match="stage|pattern"):
        validate((TABLE_KEY, TABLE[1] | {"stage": "sideways"}), [], PORTS)


def test_config_db_lists_and_numbers_become_yang_values():
    tree = yang_tree(TABLE, [rule()], PORTS)
    table = tree["sonic-acl:sonic-acl"]["ACL_TABLE"]["ACL_TABLE_LIST"][0]
    assert table["ports"] == list(PORTS) and table["ACL_TABLE_NAME"] == "FABRIC_TE"
    row = tree["sonic-acl:sonic-acl"]["ACL_RULE"]["ACL_RULE_LIST"][0]
    assert row["PRIORITY"] == 10001 and row["L4_DST_PORT"] == 4791
    assert row["RULE_NAME"] == "fabric-te:Ethernet0:H2:Q4"
    assert row["fabric-te-sonic-acl-redirect:REDIRECT_ACTION"].endswith("@Ethernet20")
