"""The neutral cable list: devices with roles and the cables between their ports.

What an inventory (a DCIM cable export, a hand-written file) or LLDP discovery says a fabric
is, before it becomes a `Fabric`. A host's NICs are its ports cabled to an RTSW, in
natural-sort order of the port name (eth0, eth1, ..., eth10).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

ROLES = ("host", "rtsw", "ctsw", "atsw")  # bottom to top


@dataclass(frozen=True)
class Device:
    name: str
    role: str  # "host" | "rtsw" | "ctsw" | "atsw"
    te_entries: int | None = None  # per-switch budget override; None: the tier's


@dataclass(frozen=True)
class Cable:
    a: str
    a_port: str
    b: str
    b_port: str
    gbps: float


_DIGITS = re.compile(r"(\d+)")


@lru_cache(maxsize=1 << 18)  # names repeat: every device and port is sorted many times
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs by value: eth2 before eth10, Ethernet4 before
    Ethernet48."""
    return tuple((1, int(part)) if part.isdigit() else (0, part)
                 for part in _DIGITS.split(name) if part)  # fmt: skip
