"""The lab's namespaces: entering one from this thread (`controller.drivers.netns`, for
sockets and sysctls), listing them, and `ip -batch` in one."""

from __future__ import annotations

import subprocess
from pathlib import Path

from controller.drivers.netns import NETNS_DIR, entered
from controller.errors import LabError

__all__ = ["NETNS_DIR", "entered", "existing", "ip_batch", "write_sysctls"]


def write_sysctls(name: str, values: dict[str, str]) -> None:
    """Set net.* sysctls (dotted keys) inside namespace `name`."""
    with entered(name):
        for key, value in values.items():
            Path("/proc/sys", *key.split(".")).write_text(value)


def existing() -> set[str]:
    """Names of the named network namespaces on this machine."""
    try:
        return {p.name for p in NETNS_DIR.iterdir()}
    except FileNotFoundError:
        return set()


def ip_batch(lines: list[str], ns: str | None = None) -> None:
    """Run `ip -batch` lines (in namespace `ns`, or this one); LabError on the first failure."""
    if not lines:
        return
    cmd = ["ip"] + (["-n", ns] if ns else []) + ["-batch", "-"]
    done = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        where = f" in {ns}" if ns else ""
        raise LabError(f"ip -batch failed{where}: {done.stderr.strip()[:400]}")
