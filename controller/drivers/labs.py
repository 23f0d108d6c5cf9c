"""Where a lab fabric comes from when a driver needs one to be tested against.

The `linux` driver programs namespaces that something else builds; the builder plugs in
under the entry-point group ``fabric_te.labs`` as a callable ``(fabric) -> lab name`` that
builds (or reuses) a lab for the process and removes it at exit. A missing root, netns
support or builder is a LabError naming the reason, which the conformance hook turns into a
skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from controller.errors import LabError
from controller.model.fabric import Fabric

GROUP = "fabric_te.labs"


def conformance_lab(fabric: Fabric) -> str:
    """Name of a lab of `fabric` for tests; LabError with the reason if there cannot be one."""
    if os.geteuid() != 0:
        raise LabError("not root: the linux driver needs network namespaces (run as root)")
    if not Path("/proc/self/ns/net").exists():
        raise LabError("this kernel has no network namespaces")
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        raise LabError("pyroute2 is not installed") from None
    found = [ep for ep in entry_points(group=GROUP) if ep.name == "netns"]
    if not found:
        raise LabError(f"no lab builder registered under {GROUP}")
    builder: Callable[[Fabric], str] = found[0].load()
    return builder(fabric)
