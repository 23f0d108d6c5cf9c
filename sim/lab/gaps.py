"""A preset with cables missing, as a cable-list fabric file: the irregular wiring a lab,
a test or a benchmark builds (missing RTSW-CTSW cables, absent hosts), loadable again by
any process that gets the file (the lab's restorer reloads its fabric from it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from controller.errors import FabricError
from controller.model.fabric import Fabric
from controller.model.name_templates import named_cable_list


def gapped_cable_list(fabric: Fabric, name: str, missing: Iterable[str] = (),
                      absent: Iterable[str] = ()) -> dict[str, Any]:  # fmt: skip
    """The cable-list document (docs/inventory.md) of the preset-built `fabric` under the
    preset's names, without the cables of the links named in `missing` and without the
    hosts named in `absent` (device and cables). FabricError names an unknown link or
    host. Hosts keep their names; one left out of the middle of a rack moves the hosts
    after it down a slot, as an inventory's would."""
    if fabric.wiring is not None:
        raise FabricError(f"fabric {fabric.name!r} is already a cable list: edit its file")
    gone_links = {fabric.link_by_name(link) for link in missing}
    gone_hosts = {fabric.host_name(fabric.host_by_name(host)) for host in absent}
    devices, cables = named_cable_list(fabric)  # one a cabled link, in link id order
    kept = []
    for link, cable in zip(np.flatnonzero(fabric.installed).tolist(), cables, strict=True):
        if link in gone_links or cable.a in gone_hosts or cable.b in gone_hosts:
            continue
        kept.append({"a": cable.a, "a_port": cable.a_port, "b": cable.b,
                     "b_port": cable.b_port, "gbps": cable.gbps})  # fmt: skip
    return {
        "name": name,
        "te_entries": dict(zip(("rtsw", "ctsw", "atsw"), fabric.te_entries, strict=True)),
        "devices": [{"name": d.name, "role": d.role} for d in devices
                    if d.name not in gone_hosts],  # fmt: skip
        "cables": kept,
    }
