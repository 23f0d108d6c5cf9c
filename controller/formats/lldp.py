"""LLDP neighbour tables as lldpd's `lldpcli` prints them, read into `Neighbour` records.

Both JSON forms are read: `lldpcli -f json0 show neighbors [details]`, where every element is
a list of objects, and `-f json`, which folds one-element lists into objects and keys
interfaces and chassis by name. From each neighbour entry we keep the local port (the
table's interface name), the neighbour's system name, its port (the port id when its subtype
is `ifname` or `local`, else the port description, which lldpd fills with the interface
name), the operational MAU type's speed (`details` only), and the capabilities it enables.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from controller.errors import FabricError
from controller.model.discovery import Discovery, Neighbour, Problem
from controller.model.inventory import ROLES, Cable, Device

# "10GbaseT - Four-pair ...", "400GbaseDR4 - ...", "1000BaseTFD - ...", "100BaseTXFD - ..."
_MAU_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(G?)base", re.IGNORECASE)
NAMED_PORT_SUBTYPES = ("ifname", "local")


def mau_gbps(text: str) -> float | None:
    """Link speed in Gbps of an operational MAU type as lldpcli names it, None if it names
    no speed (10GbaseT -> 10, 1000BaseTFD -> 1, 100BaseTXFD -> 0.1)."""
    match = _MAU_SPEED.match(text)
    if match is None:
        return None
    value = float(match.group(1))
    return value if match.group(2) else value / 1000.0


def _items(value: Any) -> list[Any]:
    """json0 gives lists, json folds one-element lists into the element."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _scalar(value: Any) -> str | None:
    """A leaf value: "x", {"value": "x"}, [{"value": "x"}] or [] (absent)."""
    items = _items(value)
    if not items:
        return None
    first = items[0]
    if isinstance(first, dict):
        first = first.get("value")
    if first is None or isinstance(first, (dict, list)):
        return None
    return str(first).lower() if isinstance(first, bool) else str(first)


def _named(value: Any, name_key: str) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """(name, body) of each element of a json0 list (name inside, under `name_key`) or of a
    json object keyed by name ({"eth0": {...}}, or a list of such one-key objects)."""
    for item in _items(value):
        if not isinstance(item, dict):
            continue
        inner = item.get(name_key)
        if name_key in item and not isinstance(inner, dict):  # json0: the name is a field
            yield _scalar(inner), item
            continue
        bodies = [(k, v) for k, v in item.items() if isinstance(v, dict)]
        if len(bodies) == len(item) and bodies and not ({"id", "port", "chassis"} & set(item)):
            yield from bodies  # json: keyed by name
        else:
            yield None, item  # json, no name to key by (a chassis without a system name)


def _chassis(entry: dict[str, Any]) -> tuple[str | None, str | None, frozenset[str] | None]:
    """(system name, chassis id, enabled capabilities or None if none advertised)."""
    for name, body in _named(entry.get("chassis"), "name"):
        ident = None
        for item in _items(body.get("id")):
            if isinstance(item, dict):
                ident = _scalar(item.get("value"))
        caps = None
        listed = _items(body.get("capability"))
        if listed:
            on = [c for c in listed if isinstance(c, dict) and c.get("enabled") in (True, "on")]
            caps = frozenset(str(c.get("type", "")).lower() for c in on)
        return name, ident, caps
    return None, None, None


def _port(entry: dict[str, Any]) -> tuple[str | None, str, float | None]:
    """(the neighbour's port name, its port id subtype, its MAU speed in Gbps)."""
    for port in _items(entry.get("port")):
        if not isinstance(port, dict):
            continue
        kind, ident = "", None
        for item in _items(port.get("id")):
            if isinstance(item, dict):
                kind, ident = str(item.get("type", "")), _scalar(item.get("value"))
        descr = _scalar(port.get("descr"))
        name = ident if kind in NAMED_PORT_SUBTYPES else (descr or ident)
        gbps = None
        for auto in _items(port.get("auto-negotiation")):
            current = _scalar(auto.get("current")) if isinstance(auto, dict) else None
            if current:
                gbps = mau_gbps(current)
        return name, kind, gbps
    return None, "", None


def parse_neighbours(device: str, doc: Any) -> list[Neighbour]:
    """The neighbour records of one device's table (`doc`: lldpcli's JSON, either form);
    FabricError naming the device when it is not an lldpcli neighbour table."""
    if not isinstance(doc, dict) or "lldp" not in doc:
        raise FabricError(f"{device}: not an lldpcli neighbour table (no top-level 'lldp')")
    out = []
    for block in _items(doc["lldp"]):
        if not isinstance(block, dict):
            raise FabricError(f"{device}: not an lldpcli neighbour table ('lldp' holds "
                              f"{type(block).__name__})")  # fmt: skip
        for port, entry in _named(block.get("interface"), "name"):
            if port is None:
                raise FabricError(f"{device}: a neighbour entry without an interface name")
            peer, chassis_id, caps = _chassis(entry)
            peer_port, kind, gbps = _port(entry)
            out.append(Neighbour(
                device=device, port=port, peer=peer or "", peer_port=peer_port or "",
                peer_port_kind=kind, gbps=gbps, capabilities=caps,
                chassis_id=chassis_id or "", via=_scalar(entry.get("via")) or "",
            ))  # fmt: skip
    return out


def read_table(device: str, text: str) -> list[Neighbour]:
    """Parse lldpcli's JSON output for `device`; FabricError naming it on bad JSON."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise FabricError(f"{device}: not JSON ({err})") from None
    return parse_neighbours(device, doc)


def report_text(found: Discovery, devices: Sequence[Device] | None, cables: Sequence[Cable],
                problems: Sequence[Problem], default_gbps: float,
                forced: bool = False) -> str:  # fmt: skip
    """What discovery found (`devices`: with their roles, None when not told) and what is
    wrong, one problem a line (for stderr)."""
    if forced:
        speeds = f"every cable at --gbps {default_gbps:g} (advertised speeds ignored)"
    else:
        speeds = (f"{found.speed_from_lldp} from LLDP (MAU type), {found.speed_default} at "
                  f"--gbps {default_gbps:g} (none advertised)")  # fmt: skip
    head = f"{len(cables)} cables agreed from {len(found.devices)} devices' tables"
    if devices is not None:
        counts = Counter(d.role for d in devices)
        tiers = ", ".join(f"{counts[r]} {r}{'s' if r == 'host' and counts[r] != 1 else ''}"
                          for r in ROLES if counts[r])  # fmt: skip
        head += f"; {len(devices)} devices ({tiers or 'none'})"
    lines = [f"{head}; speeds: {speeds}"]
    if problems:
        lines.append(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} (their "
                     "cables are left out):")  # fmt: skip
        lines += [f"  {p.kind}: {p.message}" for p in problems]
    return "\n".join(lines) + "\n"
