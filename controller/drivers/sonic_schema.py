"""CONFIG_DB writes checked against SONiC's published YANG models with libyang.

The models (`controller/drivers/sonic_yang/`: sonic-acl and what it imports, with their
licence, plus fabric-te's module adding REDIRECT_ACTION) are loaded once per process. A
batch's hashes are turned into the YANG tree SONiC's own tools build from CONFIG_DB (one
list entry per key, "field@" lists as leaf-lists, integer leaves as numbers), with the
switch's PORT entries its ACL table binds to, and parsed strictly: a value the schema
refuses (a priority out of range, a malformed prefix, an unknown field, a rule of a table
that does not exist) is a SchemaError naming the key and libyang's reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from controller.errors import DriverRejected

MODELS = Path(__file__).with_name("sonic_yang")
REDIRECT_MODULE = "fabric-te-sonic-acl-redirect"
_INTEGER_LEAVES = frozenset({
    "PRIORITY", "IP_PROTOCOL", "L4_SRC_PORT", "L4_DST_PORT", "DSCP", "TC", "ICMP_TYPE",
    "ICMP_CODE", "VLAN_ID",
})  # fmt: skip
_OURS = frozenset({"REDIRECT_ACTION"})
_PORT_SPEED = 400_000  # the PORT entries given as context need lanes and a speed

_lock = threading.Lock()
_context: Any = None


class SchemaError(DriverRejected):
    """A write the YANG models refuse."""


def available() -> str | None:
    """None when libyang's Python bindings load here, else why not."""
    try:
        import libyang  # noqa: F401
    except ImportError as err:
        return (f"libyang's Python bindings are not installed ({err}); install the 'sonic' "
                "extra (needs Debian libyang2-dev)")  # fmt: skip
    except OSError as err:  # the bindings load, the C library does not
        return f"libyang cannot be loaded: {err}"
    return None


def _ctx() -> Any:
    global _context
    with _lock:
        if _context is None:
            import libyang

            ctx = libyang.Context(str(MODELS))
            for path in sorted(MODELS.glob("*.yang")):
                ctx.load_module(path.stem)  # implemented: their must/when paths resolve
            _context = ctx
        return _context


def _leaf(field: str, value: str) -> tuple[str, Any]:
    """(YANG member name, JSON value) of one CONFIG_DB field."""
    if field.endswith("@"):
        return field[:-1], value.split(",") if value else []
    if field in _OURS:
        return f"{REDIRECT_MODULE}:{field}", value
    if field in _INTEGER_LEAVES and value.isdigit():
        return field, int(value)
    return field, value


def yang_tree(
    table: tuple[str, Mapping[str, str]] | None,
    rules: Iterable[tuple[str, Mapping[str, str]]],
    ports: Iterable[str],
) -> dict[str, Any]:
    """The YANG JSON of an ACL table (key "ACL_TABLE|NAME", hash), rules
    ("ACL_RULE|TABLE|RULE", hash) and the named ports (context for the table's binding)."""
    tree: dict[str, Any] = {}
    acl: dict[str, Any] = {}
    if table is not None:
        name = table[0].split("|", 1)[1]
        row = {"ACL_TABLE_NAME": name} | dict(_leaf(f, v) for f, v in table[1].items())
        acl["ACL_TABLE"] = {"ACL_TABLE_LIST": [row]}
    rows = []
    for key, fields in rules:
        parts = key.split("|")
        if len(parts) != 3 or parts[0] != "ACL_RULE":
            raise SchemaError(f"{key!r} is not an ACL_RULE|TABLE|RULE key")
        rows.append({"ACL_TABLE_NAME": parts[1], "RULE_NAME": parts[2]}
                    | dict(_leaf(f, v) for f, v in fields.items()))  # fmt: skip
    if rows:
        acl["ACL_RULE"] = {"ACL_RULE_LIST": rows}
    if acl:
        tree["sonic-acl:sonic-acl"] = acl
    names = sorted(set(ports))
    if names:
        tree["sonic-port:sonic-port"] = {"PORT": {"PORT_LIST": [
            {"name": n, "lanes": str(i), "speed": _PORT_SPEED} for i, n in enumerate(names)
        ]}}  # fmt: skip
    return tree


def validate(
    table: tuple[str, Mapping[str, str]] | None,
    rules: Iterable[tuple[str, Mapping[str, str]]],
    ports: Iterable[str],
    where: str = "",
) -> None:
    """Check a table and rules (see `yang_tree`) against the models; SchemaError if refused."""
    rules = list(rules)
    tree = yang_tree(table, rules, ports)
    if not tree:
        return
    import libyang

    ctx = _ctx()
    with _lock:  # one libyang context: its error state is per context
        try:
            data = ctx.parse_data_mem(json.dumps(tree), "json", strict=True,
                                      validate_present=True)  # fmt: skip
        except libyang.LibyangError as err:
            prefix = f"{where}: " if where else ""
            raise SchemaError(f"{prefix}SONiC's YANG models refuse the write: {err}"
                              f"{_culprit(str(err), rules)}") from err  # fmt: skip
        if data is not None:
            data.free()


def _culprit(message: str, rules: list[tuple[str, Mapping[str, str]]]) -> str:
    """' (KEY, field F)' for the first rule field holding a value the message quotes."""
    for key, fields in rules:
        for field, value in fields.items():
            if f'"{value}"' in message or f'"{field}"' in message:
                return f" ({key}, field {field})"
    return ""
