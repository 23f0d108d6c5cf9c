"""Daemons known only by their pid (started detached, so not our children): whether one
still runs, and ending them (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path


def running_pid(pid: int) -> bool:
    """Alive and not a zombie: a detached daemon's zombie waits for init to reap it (seconds
    where init is slow), not for us, and has ended all the same."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def stop_pids(pids: Iterable[int], grace: float) -> None:
    """End daemons that are not our children: SIGTERM, then SIGKILL to those still running
    after `grace` s, each waited for as long again."""
    alive = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        sent = []
        for pid in alive:
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while sent and time.monotonic() < deadline:
            sent = [p for p in sent if running_pid(p)]
            time.sleep(0.05)
        if not sent:
            return
        alive = sent
