"""One lab per process and fabric for tests (the `fabric_te.labs` plug-in): built on first
use under a name unique to this run, owned by this process, removed when it exits; and
`exit_on_signals`, so that SIGTERM and SIGHUP exit through the same hooks. (SIGKILL runs
none: the lab's owner record lets the next `reap` remove it.)"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
from typing import Any

from controller.model.fabric import Fabric
from sim.lab import build

_labs: dict[str, str] = {}


def unique_name(stem: str = "t") -> str:
    """A lab name no other run uses: stem + pid + random, at most 12 characters."""
    return f"{stem}{os.getpid() % 100000:x}{secrets.token_hex(2)}"[:12]


def shared_lab(fabric: Fabric) -> str:
    """The name of this process's lab of `fabric` (static underlay)."""
    if fabric.name not in _labs:
        name = unique_name()
        build.up(fabric, name, fabric.name, underlay="static")
        _labs[fabric.name] = name
        atexit.register(_down, name, os.getpid())
    return _labs[fabric.name]


def _down(name: str, owner: int) -> None:
    if os.getpid() != owner:  # a forked child (pyroute2's netns helpers) leaves it alone
        return
    try:
        build.down(name)
    except Exception:  # noqa: BLE001 - at exit, nothing left to report to
        pass


def exit_on_signals() -> None:
    """Make SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, as Ctrl-C does, so
    that fixture finalizers and exit hooks remove the labs this process built; in a child
    forked from it the signals keep their default action (the child's copy of the test
    session must not tear down the parent's labs)."""

    me = os.getpid()

    def interrupt(signum: int, frame: Any) -> None:
        if os.getpid() != me:  # a forked child (pyroute2's netns helpers): die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
