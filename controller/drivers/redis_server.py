"""A throwaway Redis server standing in for SONiC switches' CONFIG_DB: one `redis-server`
(Debian package redis-server) on a unix socket in a directory of its own, nothing saved to
disk, with a database per switch. The `sonic` driver's conformance hook, its tests and the
benchmark start one; `stop` ends it by its process id."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from controller.errors import DriverUnavailable


def redis_binary() -> str | None:
    """The redis-server executable, or None when it is not installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )


class RedisServer:
    """A redis-server listening only on `directory`/redis.sock, with `databases` databases."""

    def __init__(self, directory: Path, databases: int = 16) -> None:
        binary = redis_binary()
        if binary is None:
            raise DriverUnavailable("redis-server is not installed (Debian package redis-server)")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket = self.directory / "redis.sock"
        if len(str(self.socket)) > 100:  # sun_path holds 108 bytes
            raise DriverUnavailable(f"socket path too long for a unix socket: {self.socket}")
        self.databases = max(1, databases)
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--databases", str(self.databases), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._wait()

    def url(self, db: int = 0) -> str:
        """The URL of database `db` (redis-py's `from_url` form)."""
        return f"unix://{self.socket}?db={int(db)}"

    def _wait(self, timeout: float = 10.0) -> None:
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise DriverUnavailable(
                    f"redis-server exited with status {self.proc.returncode} "
                    f"(log: {self.directory / 'redis.log'})"
                )
            if self.socket.exists():
                client = redis.Redis(unix_socket_path=str(self.socket))
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    pass
                finally:
                    client.close()
            time.sleep(0.02)
        self.stop()
        raise DriverUnavailable(f"redis-server did not answer on {self.socket} in {timeout} s")

    def stop(self) -> None:
        """End the server (SIGTERM, then SIGKILL); idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
