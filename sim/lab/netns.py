"""Entering a named network namespace from this thread, for sockets and sysctls; and
`ip -batch` in one.

`setns(2)` moves only the calling thread; a socket opened inside keeps its namespace after
the thread returns, so one process can send from and count in many namespaces without
forking a command per namespace.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller.errors import LabError

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the block in namespace `name`, then return to the thread's own namespace."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_DIR / name, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


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
