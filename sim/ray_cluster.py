"""A local Ray cluster for tests and benchmarks: a head and more nodes in a network
namespace of its own with only loopback (Ray opens ports on every interface it sees, so it
sees only `lo`), stopped by the PIDs in that namespace, never by `ray stop` (which stops
every Ray process of the host)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PORT = 6390


def ray_binary() -> Path:
    """The `ray` command beside this interpreter."""
    return Path(sys.executable).with_name("ray")


def usable() -> str | None:
    """Why a local cluster cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root to make a network namespace"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "needs Ray (pip install 'fabric-te[ray]')"
    if not ray_binary().exists():
        return f"no ray command beside {sys.executable}"
    return None


def in_ns(ns: str, cmd: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """`cmd` run inside namespace `ns` (text output captured)."""
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], text=True, capture_output=True,
                          **kw)  # type: ignore[call-overload]  # fmt: skip


def _stop(ns: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = subprocess.run(["ip", "netns", "pids", ns], text=True,
                              capture_output=True).stdout.split()  # fmt: skip
        for pid in pids:
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(1.0)
    subprocess.run(["ip", "netns", "del", ns], check=False)


@contextmanager
def local_cluster(nodes: int = 2, cpus: int = 1, stem: str = "tray",
                  object_store: int = 500_000_000) -> Iterator[tuple[str, str]]:  # fmt: skip
    """(namespace, address) of a Ray cluster of `nodes` nodes of `cpus` CPUs each, started
    in a fresh namespace and stopped with it."""
    ns = f"{stem}{secrets.token_hex(3)}"
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        ray = str(ray_binary())
        common = [f"--num-cpus={cpus}", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                  f"--object-store-memory={object_store}"]  # fmt: skip
        head = in_ns(ns, [ray, "start", "--head", f"--port={PORT}", "--include-dashboard=false",
                          f"--temp-dir={temp}", *common], timeout=180)  # fmt: skip
        if head.returncode:
            raise RuntimeError(f"ray start --head failed: {head.stderr[-2000:]}")
        for _ in range(nodes - 1):
            node = in_ns(ns, [ray, "start", f"--address=127.0.0.1:{PORT}", *common],
                         timeout=180)  # fmt: skip
            if node.returncode:
                raise RuntimeError(f"ray start (a node) failed: {node.stderr[-2000:]}")
        yield ns, f"127.0.0.1:{PORT}"
    finally:
        _stop(ns)
        shutil.rmtree(temp, ignore_errors=True)
