"""The sonic driver against a real Redis server: the conformance suite, CONFIG_DB's format,
the ACL budget, schema checks, dry run, checkpoint and rollback."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from controller.drivers import sonic_schema
from controller.drivers.conformance import CONFORMANCE_FABRIC, SWITCH, DriverConformance, entry
from controller.drivers.sonic import SonicDriver
from controller.drivers.sonic_plan import TABLE_KEY, SonicPlan
from controller.errors import DriverError, DriverRejected
from controller.routes.plan import Add, Delete, Replace
from controller.routes.tables import Entry

FABRIC = CONFORMANCE_FABRIC
ROOT = Path(__file__).resolve().parents[3]


def _missing() -> str | None:
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed (the 'sonic' extra)"
    return sonic_schema.available()


pytestmark = pytest.mark.skipif(_missing() is not None, reason=f"sonic driver: {_missing()}")


@pytest.fixture
def driver(tmp_path):
    made = SonicDriver.for_conformance(FABRIC, tmp_path)
    yield made
    made.close()


class TestSonicDriver(DriverConformance):
    """The importable suite, on a Redis server of the test's own."""


def bucket(n: int, qp: int, c: int = 2) -> Entry:
    whole = entry(n)
    return Entry(SWITCH, whole.in_port, whole.dst_host, FABRIC.rack_link(0, c), whole.owner, qp)


def test_registered_under_the_driver_entry_points():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["fabric_te.drivers"]["sonic"] == (
        "controller.drivers.sonic:SonicDriver"
    )


def test_rules_are_config_db_acl_hashes(driver):
    driver.apply(SWITCH, [Add(entry(0, 1)), Add(bucket(0, 5))])
    raw = driver.raw(SWITCH)
    assert raw[TABLE_KEY] == {
        "policy_desc": "fabric-te traffic-engineering redirects", "type": "L3",
        "stage": "ingress", "ports@": "Ethernet0,Ethernet4,Ethernet8,Ethernet12",
    }  # fmt: skip
    whole = raw["ACL_RULE|FABRIC_TE|fabric-te:Ethernet0:H2:ALL"]
    # rtsw-p0-r0's uplink to ctsw-p0-c1 is its 6th port; the CTSW's end is the /31's upper
    assert whole == {"PRIORITY": "10000", "IP_TYPE": "IPV4", "IN_PORTS": "Ethernet0",
                     "DST_IP": "10.1.0.2/32",
                     "REDIRECT_ACTION": f"{_upper(FABRIC.rack_link(0, 1))}@Ethernet20"}
    part = raw["ACL_RULE|FABRIC_TE|fabric-te:Ethernet0:H2:Q5"]
    assert part["PRIORITY"] == "10001" and part["L4_SRC_PORT_RANGE"] == "49472-49535"
    assert part["IP_PROTOCOL"] == "17" and part["L4_DST_PORT"] == "4791"
    assert len(raw) == 3


def _upper(link: int) -> str:
    base = (10 << 24) | (128 << 16)
    address = base + 2 * link + 1
    return ".".join(str((address >> s) & 255) for s in (24, 16, 8, 0))


def test_updates_touch_only_the_rules_named(driver):
    driver.apply(SWITCH, [Add(entry(n)) for n in range(4)])
    client = driver._switch(SWITCH).client
    client.hset("ACL_RULE|FABRIC_TE|fabric-te:Ethernet4:H3:ALL", "PRIORITY", "10000")  # marker
    keys_before = set(client.keys("*"))
    driver.apply(SWITCH, [Replace(entry(0), entry(0, 3)), Delete(entry(2))])
    keys_after = set(client.keys("*"))
    assert keys_before - keys_after == {"ACL_RULE|FABRIC_TE|fabric-te:Ethernet8:H2:ALL"}
    assert keys_after <= keys_before
    assert driver.read(SWITCH) == (entry(0, 3), entry(1), entry(3))


def test_owner_change_renames_the_rule_in_one_batch(driver):
    driver.apply(SWITCH, [Add(entry(0))])
    driver.apply(SWITCH, [Add(entry(0, 2, owner="ops"))])
    assert driver.read(SWITCH) == (entry(0, 2, owner="ops"),)
    assert set(driver.raw(SWITCH)) == {TABLE_KEY, "ACL_RULE|FABRIC_TE|ops:Ethernet0:H2:ALL"}
    with pytest.raises(DriverRejected, match="owner 'a b'"):
        driver.apply(SWITCH, [Add(entry(1, owner="a b"))])


def test_budget_refuses_a_batch_whole(tmp_path):
    driver = SonicDriver.for_conformance(FABRIC, tmp_path)
    try:
        driver.capacity = 3
        driver.apply(SWITCH, [Add(entry(0)), Add(entry(1)), Add(entry(2))])
        with pytest.raises(DriverRejected, match="4 ACL rules .* budget of 3; nothing applied"):
            driver.apply(SWITCH, [Replace(entry(0), entry(0, 2)), Add(entry(3))])
        assert driver.read(SWITCH) == (entry(0), entry(1), entry(2))
        driver.apply(SWITCH, [Delete(entry(2)), Add(entry(3))])  # one out, one in: fits
        assert driver.read(SWITCH) == (entry(0), entry(1), entry(3))
        assert driver.budget("ctsw-p0-c0") == 3
        driver.capacity = None
        assert driver.budget("ctsw-p0-c0") == FABRIC.te_entries[1]
    finally:
        driver.close()


def test_schema_refuses_a_bad_priority_and_nothing_is_written(tmp_path):
    driver = SonicDriver.for_conformance(FABRIC, tmp_path)
    try:
        driver.plan.priority = 999_999  # whole-flow rules fit; a bucket's (one above) does not
        driver.apply(SWITCH, [Add(entry(0))])
        with pytest.raises(DriverRejected, match="YANG .*1000000.* range") as info:
            driver.apply(SWITCH, [Add(entry(1)), Add(bucket(0, 3))])
        assert "Q3" in str(info.value)
        assert driver.read(SWITCH) == (entry(0),)
    finally:
        driver.close()


def test_the_switch_must_hold_only_rules_this_driver_writes(driver):
    driver.apply(SWITCH, [Add(entry(0))])
    client = driver._switch(SWITCH).client
    client.hset("ACL_RULE|FABRIC_TE|fabric-te:Ethernet0:H2:ALL", "DSCP", "3")
    with pytest.raises(DriverError, match="fields this driver does not write"):
        driver.read(SWITCH)
    client.delete("ACL_RULE|FABRIC_TE|fabric-te:Ethernet0:H2:ALL")
    client.hset("ACL_RULE|FABRIC_TE|by-hand", "PRIORITY", "5")
    with pytest.raises(DriverError, match="not a rule name"):
        driver.read(SWITCH)
    client.hset("ACL_RULE|OTHER_TABLE|x", "PRIORITY", "5")  # other tables: never read
    client.delete("ACL_RULE|FABRIC_TE|by-hand")
    assert driver.read(SWITCH) == ()


@pytest.mark.parametrize("tamper", ["deleted", "ports"])
def test_rules_without_their_table_read_missing_and_a_reapply_writes_it(driver, tamper):
    """SONiC programs no rule of a missing ACL table, and a rule only on its table's ports:
    such rules read as missing (the reconcile sees the switch differ) and applying them
    again writes the table back."""
    driver.apply(SWITCH, [Add(entry(0)), Add(entry(1))])
    client = driver._switch(SWITCH).client
    if tamper == "deleted":
        client.delete(TABLE_KEY)
    else:
        client.hset(TABLE_KEY, "ports@", "Ethernet0")
    assert driver.read(SWITCH) == ()
    driver.apply(SWITCH, [Add(entry(0)), Add(entry(1))])
    assert driver.read(SWITCH) == (entry(0), entry(1))
    assert client.hgetall(TABLE_KEY) == driver.plan.table_fields(SWITCH)


def test_in_port_must_be_a_te_ingress_port(driver):
    up = Entry(SWITCH, FABRIC.rack_link(0, 0), 2, FABRIC.rack_link(0, 1))  # enters from a CTSW
    with pytest.raises(DriverRejected, match="not a TE ingress port"):
        driver.apply(SWITCH, [Add(up)])
    ctsw = Entry("ctsw-p0-c0", FABRIC.rack_link(0, 0), 2, FABRIC.rack_link(1, 0))
    driver.apply("ctsw-p0-c0", [Add(ctsw)])
    assert driver.read("ctsw-p0-c0") == (ctsw,)


def test_dry_run_says_what_would_change_and_writes_nothing(driver, tmp_path):
    driver.apply(SWITCH, [Add(entry(0)), Add(entry(1))])
    change = driver.dry_run(SWITCH, [Replace(entry(0), entry(0, 2)), Delete(entry(1)),
                                     Add(entry(2))])  # fmt: skip
    assert (change.added, len(change.sets), len(change.deletes)) == (1, 2, 1)
    assert (change.rules_before, change.rules_after) == (2, 2)
    assert "1 new, 1 set in place, 1 deleted; 2 -> 2 ACL rules" in change.summary()
    assert driver.read(SWITCH) == (entry(0), entry(1))
    patch = change.patch()  # the same change for `config apply-patch`
    assert [(op["op"], op["path"]) for op in patch] == [
        ("replace", "/ACL_RULE/FABRIC_TE|fabric-te:Ethernet0:H2:ALL"),
        ("add", "/ACL_RULE/FABRIC_TE|fabric-te:Ethernet8:H2:ALL"),
        ("remove", "/ACL_RULE/FABRIC_TE|fabric-te:Ethernet4:H3:ALL"),
    ]
    assert patch[0]["value"]["REDIRECT_ACTION"].endswith("@Ethernet24")
    first = SonicDriver.for_conformance(FABRIC, tmp_path / "other")
    try:
        table_op = first.dry_run(SWITCH, [Add(entry(0))]).patch()[0]
        assert table_op["path"] == "/ACL_TABLE/FABRIC_TE"
        assert table_op["value"]["ports"] == ["Ethernet0", "Ethernet4", "Ethernet8", "Ethernet12"]
    finally:
        first.close()


def test_checkpoint_and_rollback_rule_by_rule(driver):
    driver.apply(SWITCH, [Add(entry(0)), Add(entry(1)), Add(bucket(1, 7))])
    other = Entry("rtsw-p0-r1", FABRIC.access_link(4), 0, FABRIC.rack_link(1, 2))
    driver.apply("rtsw-p0-r1", [Add(other)])
    path = driver.checkpoint("before")
    assert path.name == "before.cp.json" and driver.list_checkpoints() == ("before",)
    driver.apply(SWITCH, [Replace(entry(0), entry(0, 3)), Delete(entry(1)), Add(entry(2))])
    driver.apply("rtsw-p0-r1", [Delete(other)])
    changed = driver.rollback("before")
    assert changed == {SWITCH: 3, "rtsw-p0-r1": 1}  # one rule each, its table stayed
    assert driver.read(SWITCH) == (entry(0), entry(1), bucket(1, 7))
    assert driver.read("rtsw-p0-r1") == (other,)
    assert driver.rollback("before") == {}
    with pytest.raises(DriverError, match="bad checkpoint name"):
        driver.checkpoint("../x")


def test_rollback_refuses_a_checkpoint_of_another_fabric(driver, tmp_path):
    path = driver.checkpoint("c")
    path.write_text(path.read_text().replace(FABRIC.fingerprint, "sha256:other"))
    with pytest.raises(DriverError, match="another fabric"):
        driver.rollback("c")


def test_needs_a_database_for_each_switch():
    with pytest.raises(DriverError, match="databases"):
        SonicDriver(FABRIC)
    with pytest.raises(DriverError, match="not a switch"):
        SonicDriver(FABRIC, databases={"nope": "redis://127.0.0.1:1/0"})
    # a switch without a database could never be pushed to: refused at start, named
    with pytest.raises(DriverError, match=r"no CONFIG_DB for 15 of the 16 switches of 'tiny' "
                       r"that hold TE entries: atsw-c0-a0, .* and 10 more"):  # fmt: skip
        SonicDriver(FABRIC, databases={SWITCH: "redis://127.0.0.1:1/0"}, timeout=0.5)
    urls = {sw: f"redis://127.0.0.1:1/{i}" for i, sw in enumerate(SonicPlan(FABRIC).switches())}
    driver = SonicDriver(FABRIC, databases=urls, timeout=0.5)
    assert driver.switches() == tuple(urls)
    with pytest.raises(DriverRejected, match="no CONFIG_DB"):
        driver.read("rtsw-p9-r9")
    with pytest.raises(DriverError, match="unreachable"):
        driver.read(SWITCH)
    driver.close()


@pytest.mark.parametrize("second", ["redis://localhost:1/3", "redis://localhost:1?db=3",
                                    "redis://LOCALHOST:1/3/"])  # fmt: skip
def test_two_switches_given_one_database_are_refused(second):
    """Rule keys name a port and a host, not the switch: two switches in one database
    would read, overwrite and delete each other's rules."""
    urls = {sw: f"redis://localhost:1/{i + 10}"
            for i, sw in enumerate(SonicPlan(FABRIC).switches())}  # fmt: skip
    urls["rtsw-p0-r0"], urls["rtsw-p0-r1"] = "redis://localhost:1/3", second
    with pytest.raises(DriverError, match="rtsw-p0-r0 and rtsw-p0-r1 are given one CONFIG_DB"):
        SonicDriver(FABRIC, databases=urls, timeout=0.5)
    urls["rtsw-p0-r1"] = "redis://localhost:1/4"
    SonicDriver(FABRIC, databases=urls, timeout=0.5).close()


@pytest.mark.parametrize(("server", "url"), [
    ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379/3"),
    ("redis://:pw@host:6379/?client_name=te", "redis://:pw@host:6379/3?client_name=te"),
    ("rediss://host", "rediss://host/3"),
    ("unix:///run/redis.sock", "unix:///run/redis.sock?db=3"),
    ("unix:///run/redis.sock?password=pw", "unix:///run/redis.sock?password=pw&db=3"),
])  # fmt: skip
def test_one_server_gives_switch_i_database_i_keeping_the_url(server, url):
    from controller.drivers.sonic import _with_db

    assert _with_db(server, 3) == url


@pytest.mark.parametrize("server", ["redis://host:6379/4", "unix:///s.sock?db=2",
                                    "http://host"])  # fmt: skip
def test_a_server_naming_a_database_is_refused(server):
    from controller.drivers.sonic import _with_db

    with pytest.raises(DriverError, match="names database|want a redis"):
        _with_db(server, 0)


def test_every_write_goes_through_the_schema(driver, monkeypatch):
    driver.apply(SWITCH, [Add(entry(0))])
    monkeypatch.setattr(driver.plan.lab, "host_address", lambda host: f"10.1.0.{300 + host}")
    with pytest.raises(DriverRejected, match=r'YANG .*"10\.1\.0\.303/32".*DST_IP'):
        driver.apply(SWITCH, [Add(entry(1))])
    monkeypatch.undo()
    assert driver.read(SWITCH) == (entry(0),)


def test_serve_takes_the_config_db_as_a_url_or_a_file(tmp_path):
    from controller.cli.service import _config_db
    from controller.errors import InputError

    assert _config_db("redis://10.0.0.1:6379") == {"server": "redis://10.0.0.1:6379"}
    mapping = tmp_path / "dbs.json"
    urls = {sw: f"redis://10.3.0.{i}:6379/4" for i, sw in enumerate(SonicPlan(FABRIC).switches())}
    mapping.write_text(json.dumps(urls))
    options = _config_db(str(mapping))
    assert options == {"databases": urls}
    with SonicDriver(FABRIC, **options) as made:
        assert made.switches() == tuple(urls)
    mapping.write_text('["redis://10.3.0.1:6379/4"]')
    with pytest.raises(InputError, match="switch -> Redis URL"):
        _config_db(str(mapping))


def test_a_match_set_and_removed_in_one_batch_ends_removed(driver):
    driver.apply(SWITCH, [Add(entry(1))])
    driver.apply(SWITCH, [Add(entry(0)), Delete(entry(0)), Replace(entry(1), entry(1, 2)),
                          Delete(entry(1))])  # fmt: skip
    assert driver.read(SWITCH) == ()


def test_a_server_with_too_few_databases_is_refused_at_start(redis_server):
    """One database a switch: a server with fewer (Redis's default is 16) is named at start
    rather than leaving the switches past them unreadable at every read."""
    server = redis_server(3)
    with pytest.raises(DriverError, match=r"has 3 databases and the fabric 16 switches"):
        SonicDriver(FABRIC, server=server.url(0).split("?")[0], validate=False)
