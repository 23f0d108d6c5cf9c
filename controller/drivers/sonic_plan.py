"""How a TE entry is written into a SONiC switch's CONFIG_DB: one ACL table of type L3 per
switch, one ACL rule with a REDIRECT action per entry. Pure: names, keys and field values
from a fabric's addressing plan, and back.

    table       ACL_TABLE|FABRIC_TE  {policy_desc, type: L3, stage: ingress,
                                      ports@: the switch's TE ingress ports}
    rule        ACL_RULE|FABRIC_TE|<owner>:<in port>:H<dst host>:<ALL | Q<bucket>>
                {PRIORITY, IP_TYPE: IPV4, IN_PORTS, DST_IP: <host loopback>/32,
                 [IP_PROTOCOL: 17, L4_DST_PORT: 4791, L4_SRC_PORT_RANGE: <first>-<last>],
                 REDIRECT_ACTION: <next hop address>@<next hop port>}
    port        the inventory's name of the switch's port (a fabric from a cable list), else
                Ethernet<4 x slot>, slot = the link's rank among the switch's links
    addresses   the lab's plan (controller.drivers.linux_plan): host loopbacks 10.1.0.0/16,
                each link a /31 of 10.128.0.0/9; the next hop is the far end of the link

TE ingress ports (the table's binding): an RTSW's host-facing ports (where NIC traffic
enters); every port of a CTSW (from RTSWs going up, from ATSWs coming down) and of an ATSW.
A bucket's rule matches RoCE (UDP 4791) from the bucket's source ports and sits one
priority above the whole-flow rule of its (port, destination), so it wins where both match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from controller.drivers.linux_plan import ROCE_PORT, SPORT_BASE, SPORT_WIDTH, LabPlan, sport_range
from controller.errors import DriverError, DriverRejected
from controller.model.fabric import ACCESS, Fabric
from controller.model.flows import ALL_QPS
from controller.routes.tables import Entry

ACL_TABLE = "FABRIC_TE"
TABLE_KEY = f"ACL_TABLE|{ACL_TABLE}"
RULE_PREFIX = f"ACL_RULE|{ACL_TABLE}|"
DEFAULT_PRIORITY = 10_000  # whole-flow rules; a bucket's rule is one above
PORT_STRIDE = 4  # Ethernet0, Ethernet4, ...: the usual one name per 4 lanes
UDP = 17
_OWNER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_RULE = re.compile(r"([A-Za-z0-9_.-]{1,64}):([A-Za-z0-9_./-]+):H([0-9]+):(ALL|Q[0-9]+)")
_PORT = re.compile(r"[A-Za-z0-9_./-]{1,64}")

Fields = dict[str, str]


@dataclass(frozen=True)
class Rule:
    """One ACL rule as CONFIG_DB holds it: its key and its hash."""

    key: str
    fields: Mapping[str, str]


class SonicPlan:
    """Names, keys and fields of `fabric`'s switches as SONiC CONFIG_DB entries."""

    def __init__(self, fabric: Fabric, priority: int = DEFAULT_PRIORITY) -> None:
        self.fabric = fabric
        self.priority = priority
        self.lab = LabPlan(fabric, "sonic")  # addresses only: the lab name is not used
        self._dst_cache: dict[int, str] = {}
        self._redirect_cache: dict[tuple[str, int], str] = {}

    # ---- ports ---------------------------------------------------------------------
    @cached_property
    def _ports(self) -> dict[str, dict[int, str]]:
        """Every switch's link id -> port name (the inventory's, else by slot)."""
        links, f = self.lab.node_links, self.fabric
        out = {}
        for sw in self.lab.switches:
            ports = {}
            for slot, link in enumerate(links[sw]):
                name = f.port_at(sw, link) or f"Ethernet{PORT_STRIDE * slot}"
                if not _PORT.fullmatch(name):
                    raise DriverRejected(f"{sw}: port {name!r} (link {f.link_name(link)}) cannot "
                                         "name a SONiC port in an ACL rule")  # fmt: skip
                ports[link] = name
            out[sw] = ports
        return out

    @cached_property
    def _links(self) -> dict[str, dict[str, int]]:
        """Every switch's port name -> link id."""
        return {sw: {name: link for link, name in ports.items()} for sw, ports in
                self._ports.items()}  # fmt: skip

    def switches(self) -> tuple[str, ...]:
        return tuple(sorted(self._ports))

    def port_name(self, switch: str, link: int) -> str:
        """The SONiC name of `switch`'s port on `link`."""
        name = self._ports.get(switch, {}).get(int(link))
        if name is None:
            raise DriverRejected(f"{switch}: link {link} is not one of its ports")
        return name

    def link_of(self, switch: str, port: str) -> int:
        link = self._links.get(switch, {}).get(port)
        if link is None:
            raise DriverError(f"{switch}: no port {port!r} in this fabric's plan")
        return link

    def ingress_ports(self, switch: str) -> tuple[str, ...]:
        """The ports the switch's TE table is bound to (see the module docstring)."""
        ports = self._ports[switch]
        if self.fabric.switch_kind(switch) == "rtsw":
            kinds = self.fabric.link_kind
            return tuple(name for link, name in ports.items() if kinds[link] == ACCESS)
        return tuple(ports.values())

    @cached_property
    def _ingress(self) -> dict[str, frozenset[str]]:
        return {sw: frozenset(self.ingress_ports(sw)) for sw in self._ports}

    # ---- the table -----------------------------------------------------------------
    def table_fields(self, switch: str) -> Fields:
        """ACL_TABLE|FABRIC_TE's hash on `switch`."""
        return {
            "policy_desc": "fabric-te traffic-engineering redirects",
            "type": "L3",
            "stage": "ingress",
            "ports@": ",".join(self.ingress_ports(switch)),
        }

    # ---- rules ---------------------------------------------------------------------
    def rule_name(self, switch: str, entry: Entry) -> str:
        if not _OWNER.fullmatch(entry.owner):
            raise DriverRejected(
                f"{switch}: owner {entry.owner!r} cannot name a SONiC ACL rule (use 1-64 "
                "letters, digits, '_', '.' or '-')"
            )
        bucket = "ALL" if entry.qp == ALL_QPS else f"Q{entry.qp}"
        return f"{entry.owner}:{self.port_name(switch, entry.in_port)}:H{entry.dst_host}:{bucket}"

    def rule_key(self, entry: Entry) -> str:
        return RULE_PREFIX + self.rule_name(entry.switch, entry)

    def rule(self, entry: Entry) -> Rule:
        """The ACL rule of `entry` (DriverRejected if it cannot be one on its switch)."""
        switch = entry.switch
        name = self.rule_name(switch, entry)
        in_port = self.port_name(switch, entry.in_port)
        if in_port not in self._ingress[switch]:
            raise DriverRejected(
                f"{switch}: in_port {self.fabric.link_name(entry.in_port)} ({in_port}) is not "
                "a TE ingress port of this switch"
            )
        fields: Fields = {
            "PRIORITY": str(self.priority if entry.qp == ALL_QPS else self.priority + 1),
            "IP_TYPE": "IPV4",
            "IN_PORTS": in_port,
            "DST_IP": self._dst_ip(entry.dst_host),
        }
        if entry.qp != ALL_QPS:
            first, last = sport_range(entry.qp)
            fields |= {
                "IP_PROTOCOL": str(UDP),
                "L4_DST_PORT": str(ROCE_PORT),
                "L4_SRC_PORT_RANGE": f"{first}-{last}",
            }
        fields["REDIRECT_ACTION"] = self._redirect(switch, entry.next_hop)
        return Rule(RULE_PREFIX + name, fields)

    def rule_match(self, switch: str, key: str) -> tuple[int, int, int] | None:
        """The match (in_port, dst_host, qp) a rule key of ours names; None for a key not
        shaped like ours."""
        found = _RULE.fullmatch(key[len(RULE_PREFIX):]) if key.startswith(RULE_PREFIX) else None
        if found is None:
            return None
        _, port, host, bucket = found.groups()
        link = self._links.get(switch, {}).get(port)
        if link is None:
            return None
        return (link, int(host), ALL_QPS if bucket == "ALL" else int(bucket[1:]))

    def _dst_ip(self, host: int) -> str:
        found = self._dst_cache.get(host)
        if found is None:
            found = self._dst_cache[host] = f"{self.lab.host_address(host)}/32"
        return found

    def _redirect(self, switch: str, link: int) -> str:
        """'<next hop address>@<port>': the far end of `link` from `switch`."""
        key = (switch, link)
        found = self._redirect_cache.get(key)
        if found is None:
            out_port = self.port_name(switch, link)
            lower, upper = self.lab.link_addresses(link)
            gateway = upper if self.lab.ends(link)[0].node == switch else lower
            found = self._redirect_cache[key] = f"{gateway}@{out_port}"
        return found

    def entry(self, switch: str, key: str, fields: Mapping[str, str]) -> Entry:
        """The entry an ACL rule of ours holds; DriverError naming the rule if its name and
        fields do not make one of this fabric's entries."""
        found = _RULE.fullmatch(key[len(RULE_PREFIX):]) if key.startswith(RULE_PREFIX) else None
        if found is None:
            raise DriverError(f"{switch}: {key!r} is not a rule name this driver writes")
        owner, in_name, host, bucket = found.groups()
        try:
            entry = Entry(switch, self.link_of(switch, fields["IN_PORTS"]),
                          self._host(fields["DST_IP"]), self._next_hop(switch, fields),
                          owner, self._bucket(fields))  # fmt: skip
        except KeyError as err:
            raise DriverError(f"{switch}: rule {key!r} has no field {err}") from None
        except (ValueError, DriverError) as err:
            raise DriverError(f"{switch}: rule {key!r}: {err}") from None
        if (in_name, int(host), bucket) != (fields["IN_PORTS"], entry.dst_host,
                                            "ALL" if entry.qp == ALL_QPS else f"Q{entry.qp}"):
            raise DriverError(f"{switch}: rule {key!r}: its fields match {entry.match}, not "
                              "what its name says")  # fmt: skip
        if self.rule(entry) != Rule(key, dict(fields)):
            raise DriverError(f"{switch}: rule {key!r} holds fields this driver does not write: "
                              f"{dict(sorted(fields.items()))}")  # fmt: skip
        return entry

    @cached_property
    def _hosts(self) -> dict[str, int]:
        """DST_IP value -> host."""
        return {f"{address}/32": host for address, host in self.lab.host_by_address.items()}

    def _host(self, dst: str) -> int:
        host = self._hosts.get(dst)
        if host is None:
            raise ValueError(f"DST_IP {dst} is no host of this fabric")
        return host

    def _next_hop(self, switch: str, fields: Mapping[str, str]) -> int:
        _, _, port = fields["REDIRECT_ACTION"].partition("@")
        return self.link_of(switch, port)

    @staticmethod
    def _bucket(fields: Mapping[str, str]) -> int:
        span = fields.get("L4_SRC_PORT_RANGE")
        if span is None:
            return ALL_QPS
        first = int(span.split("-")[0])
        qp, rest = divmod(first - SPORT_BASE, SPORT_WIDTH)
        if rest or qp < 0 or sport_range(qp) != tuple(int(p) for p in span.split("-")):
            raise ValueError(f"L4_SRC_PORT_RANGE {span} is no QP bucket")
        return qp


def _pointer(key: str) -> str:
    """The JSON Pointer of a CONFIG_DB key "TABLE|REST" in config_db.json's layout."""
    table, _, rest = key.partition("|")
    return f"/{table}/" + rest.replace("~", "~0").replace("/", "~1")


def _config_json(fields: Mapping[str, str]) -> dict[str, object]:
    """A hash as config_db.json writes it: "field@" lists as JSON lists under "field"."""
    return {(f[:-1] if f.endswith("@") else f): (v.split(",") if f.endswith("@") else v)
            for f, v in fields.items()}  # fmt: skip


def json_patch(
    table: tuple[str, Mapping[str, str]] | None,
    sets: Iterable[Rule],
    deletes: Iterable[str],
    existing: Iterable[str] = (),
) -> list[dict[str, object]]:
    """The same change as a JSON Patch (RFC 6902) of config_db.json, the input of SONiC's
    `config apply-patch`: the table if given, rules added (or replaced where `existing`
    names them), then removed."""
    held = set(existing)
    ops: list[dict[str, object]] = []
    if table is not None:
        ops.append({"op": "add", "path": _pointer(table[0]), "value": _config_json(table[1])})
    for rule in sets:
        ops.append({"op": "replace" if rule.key in held else "add", "path": _pointer(rule.key),
                    "value": _config_json(rule.fields)})  # fmt: skip
    ops.extend({"op": "remove", "path": _pointer(key)} for key in deletes)
    return ops
