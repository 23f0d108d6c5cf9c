"""Writing the neutral cable-list fabric document (YAML or JSON), as docs/discovery.md shows.

    name: dc1-cluster3
    devices:
      - {name: gpu-a01, role: host}             # rack, pod: when the devices give them
    cables:
      - {a: gpu-a01, a_port: eth0, b: leaf-a, b_port: Ethernet0, gbps: 400}

Devices are listed host, rtsw, ctsw, atsw, each in natural name order; cables likewise by
their lower end (a), which is the lower tier's end. The same inputs give the same
bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from controller.formats.output import to_json
from controller.model.inventory import ROLES, Cable, Device, natural_key


def _number(gbps: float) -> int | float:
    return int(gbps) if float(gbps).is_integer() else float(gbps)


def oriented(cables: Sequence[Cable], roles: Mapping[str, str]) -> list[Cable]:
    """The cables with the lower tier's end as `a`, ordered by a's tier, then in natural
    order of (a, a_port, b, b_port)."""
    rank = {r: i for i, r in enumerate(ROLES)}
    out = []
    for c in cables:
        if (rank[roles[c.b]], natural_key(c.b), natural_key(c.b_port)) < (
                rank[roles[c.a]], natural_key(c.a), natural_key(c.a_port)):  # fmt: skip
            c = Cable(c.b, c.b_port, c.a, c.a_port, c.gbps)
        out.append(c)
    return sorted(out, key=lambda c: (rank[roles[c.a]], natural_key(c.a), natural_key(c.a_port),
                                      natural_key(c.b), natural_key(c.b_port)))  # fmt: skip


def cable_list_document(name: str, devices: Sequence[Device], cables: Sequence[Cable],
                        ports_per_nic: int = 1) -> dict[str, Any]:  # fmt: skip
    """The document as plain data: devices by tier then name, cables oriented and sorted
    (`ports_per_nic` written when not 1)."""
    rank = {r: i for i, r in enumerate(ROLES)}
    roles = {d.name: d.role for d in devices}
    listed = sorted(devices, key=lambda d: (rank[d.role], natural_key(d.name)))
    return {
        "name": name,
        **({"ports_per_nic": ports_per_nic} if ports_per_nic != 1 else {}),
        "devices": [{"name": d.name, "role": d.role}
                    | ({"te_entries": d.te_entries} if d.te_entries is not None else {})
                    | ({"rack": d.rack} if d.rack is not None else {})
                    | ({"pod": d.pod} if d.pod is not None else {})
                    for d in listed],  # fmt: skip
        "cables": [{"a": c.a, "a_port": c.a_port, "b": c.b, "b_port": c.b_port,
                    "gbps": _number(c.gbps)} for c in oriented(cables, roles)],  # fmt: skip
    }


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
# raw, these are not printable in YAML or read as line breaks: escaped in quoted scalars
_UNPRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _scalar(value: object) -> str:
    """A YAML scalar: plain when it cannot read as anything but this string, else quoted
    (a JSON string is a YAML double-quoted one)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _flow(item: Mapping[str, Any]) -> str:
    return "- {" + ", ".join(f"{k}: {_scalar(v)}" for k, v in item.items()) + "}"


def dump(doc: Mapping[str, Any], as_json: bool = False) -> str:
    """YAML (one flow mapping a line per device and cable; written directly, as PyYAML's
    representer takes seconds on 50K cables) or strict JSON text of the document."""
    if as_json:
        return to_json(doc) + "\n"
    lines = [f"name: {_scalar(doc['name'])}"]
    if "ports_per_nic" in doc:
        lines.append(f"ports_per_nic: {_scalar(doc['ports_per_nic'])}")
    for key in ("devices", "cables"):
        lines.append(f"{key}:" + ("" if doc[key] else " []"))
        lines += [_flow(item) for item in doc[key]]
    return "\n".join(lines) + "\n"
