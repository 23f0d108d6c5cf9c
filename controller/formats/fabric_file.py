"""Fabric files: YAML or JSON descriptions of a Clos fabric, loaded all or nothing.

    preset: meta-24k          # optional: start from a preset, then override fields
    name: dc1-cluster3
    pods: 4                   # any ClosSpec field (see sim.clos.ClosSpec)
    links:                    # optional per-link speed overrides, Gbps, by link name
      "rtsw-p0-r3:ctsw-p0-c2": 200

Unknown keys are rejected; every error names the field at fault.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from controller.errors import FabricError
from controller.model.clos import PRESETS, SPEC_FIELDS, ClosSpec, build, preset
from controller.model.fabric import Fabric

TOP_KEYS = SPEC_FIELDS | {"preset", "links"}


def parse_fabric(data: Any, source: str = "<fabric>") -> Fabric:
    """Validate a decoded fabric document and build it."""
    if not isinstance(data, Mapping):
        raise FabricError(f"{source}: expected a mapping at the top level")
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise FabricError(
            f"{source}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(TOP_KEYS))}"
        )
    spec = preset(str(data["preset"])) if "preset" in data else ClosSpec()
    overrides = {k: v for k, v in data.items() if k in SPEC_FIELDS}
    if "taper" in overrides and "agg_link_gbps" not in overrides:
        overrides["agg_link_gbps"] = None
    if "agg_link_gbps" in overrides and "taper" not in overrides:
        overrides["taper"] = None
    spec = replace(spec, **overrides)
    links = data.get("links") or {}
    if not isinstance(links, Mapping):
        raise FabricError(f"{source}: links must be a mapping of link name to Gbps")
    try:
        return build(spec, {str(k): v for k, v in links.items()})
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
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise FabricError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {err}") from None
    return parse_fabric(data, str(path))
