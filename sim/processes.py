"""Real programs started for tests and benchmarks: a free loopback port to give them, a
running process that is always stopped afterwards (terminate, then kill), even on failure
(daemons known only by pid: controller.drivers.pids)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
