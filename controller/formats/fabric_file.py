"""Fabric files: YAML or JSON descriptions of a Clos fabric, loaded all or nothing.

    preset: meta-24k          # optional: start from a preset, then override fields
    name: dc1-cluster3
    pods: 4                   # any ClosSpec field (see sim.clos.ClosSpec)
    links:                    # optional per-link speed overrides, Gbps, by link name
      "rtsw-p0-r3:ctsw-p0-c2": 200
    te_entries: {rtsw: 2048, ctsw: 4096, atsw: null}   # TE entries per switch; null = no limit

Unknown keys, duplicate keys and the same link given twice (in either orientation) are
rejected; numbers and dimensions follow the one rule set of controller.model.validation; every
error names the file and the field at fault.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from controller.errors import FabricError
from controller.model import validation
from controller.model.clos import PRESETS, SPEC_FIELDS, ClosSpec, build, preset
from controller.model.documents import read_document
from controller.model.fabric import Fabric

TOP_KEYS = SPEC_FIELDS | {"preset", "links"}


def parse_fabric(data: Any, source: str = "<fabric>") -> Fabric:
    """Validate a decoded fabric document and build it; errors name `source` and the field."""
    try:
        doc = validation.mapping(data, "", FabricError)
        validation.keys(doc, "top level", sorted(TOP_KEYS), err=FabricError)
        spec = ClosSpec()
        if "preset" in doc:
            try:
                spec = preset(validation.text(doc["preset"], "preset", FabricError))
            except FabricError as err:
                raise FabricError(str(err) if str(err).startswith("preset:") else
                                  f"preset: {err}") from None  # fmt: skip
        overrides = {k: v for k, v in doc.items() if k in SPEC_FIELDS}
        if "taper" in overrides and "agg_link_gbps" not in overrides:
            overrides["agg_link_gbps"] = None
        if "agg_link_gbps" in overrides and "taper" not in overrides:
            overrides["taper"] = None
        links = doc.get("links")
        links = {} if links is None else validation.mapping(links, "links", FabricError)
        return build(replace(spec, **overrides), links)
    except FabricError as err:
        raise FabricError(f"{source}: {err}") from None


def load_fabric(ref: str) -> Fabric:
    """A preset name, or a path to a .yaml/.yml/.json fabric file."""
    if ref in PRESETS:
        return build(PRESETS[ref])
    path = Path(ref)
    if not path.is_file():
        raise FabricError(
            f"{ref!r} is neither a fabric preset ({', '.join(sorted(PRESETS))}) nor a file"
        )
    return parse_fabric(read_document(path, FabricError, "fabric file"), str(path))
