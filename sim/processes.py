"""Real programs started for tests and benchmarks: a free loopback port to give them, a
running process that is always stopped afterwards (terminate, then kill), even on failure,
and daemons known only by pid stopped the same way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """End `proc`: SIGTERM, then SIGKILL after `timeout` s; close the pipes it was given."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextmanager
def running(args: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """`args` running while the block runs (Popen keywords pass through), then stopped."""
    proc = subprocess.Popen(list(args), **popen)
    try:
        yield proc
    finally:
        stop(proc)


def running_pid(pid: int) -> bool:
    """Alive and not a zombie (a daemon's zombie waits for init, not for us)."""
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
