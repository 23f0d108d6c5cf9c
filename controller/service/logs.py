"""The service's log: one JSON object per line on stderr, whatever writes it.

Python's `logging` (every `fabric_te.*` logger) goes through structlog's formatter and comes
out as {"time", "level", "logger", "message", ...}; values a peer controls (identities,
method names) are passed as fields of their own (`extra=`), and JSON escaping keeps any
quote or newline in them inside their string. What is written to file descriptor 2 by
anything else (gRPC's C core, a print, a traceback) is read back line by line and wrapped the
same way (logger "grpc" or "stderr"), never passed through: a line there cannot pose as a
record. Each gRPC line may also be looked at by `on_native` (the handshake counter of
`controller.service.tls`), and the fork-handler notice gRPC repeats on every fork is dropped.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import structlog

# "E1126 12:00:00.000000000  1234 ssl_transport_security.cc:1653] Handshake failed ..."
NATIVE_LINE = re.compile(r"^([DIWEF])\d{4} [\d:.]+\s+\d+ ([\w./-]+:\d+)\] ?(.*)$")
NATIVE_LEVELS = {"D": "debug", "I": "info", "W": "warning", "E": "error", "F": "critical"}
FATAL_LINE = re.compile(r"^tectl: (?:(?:driver|store|solver) )?error: ")
DROPPED = ("skipping fork() handlers",)  # repeated on every fork, says nothing actionable
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _extra(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
    """Copy a stdlib record's `extra=` fields into the event."""
    record = event.get("_record")
    if record is not None:
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                event.setdefault(key, value)
    return event


def formatter() -> logging.Formatter:
    """A stdlib formatter that renders each record as one JSON object."""
    pre: list[Any] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
        _extra,
    ]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=pre,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            structlog.processors.JSONRenderer(default=str),
        ],
    )


def native_record(line: str) -> dict[str, Any]:
    """A JSON-ready record of one line written to fd 2 by something other than `logging`."""
    m = NATIVE_LINE.match(line)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
    if m:
        return {"time": stamp, "level": NATIVE_LEVELS[m.group(1)], "logger": "grpc",
                "source": m.group(2), "message": m.group(3)}  # fmt: skip
    # the command's own fatal errors (`tectl: error: ...`, `tectl: store error: ...`: see
    # controller.cli.main) and a traceback are errors
    level = "error" if FATAL_LINE.match(line) or line.startswith("Traceback ") else "info"
    return {"time": stamp, "level": level, "logger": "stderr", "message": line}


class NativeStderr:
    """File descriptor 2 turned into a pipe whose lines are re-emitted as JSON records."""

    def __init__(self, out: IO[str], on_native: Callable[[str], None] | None = None) -> None:
        self.out = out
        self.on_native = on_native
        self._lock = threading.Lock()
        self._saved = -1
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        sys.stderr.flush()
        self._saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._pump, args=(read,), name="stderr-json",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.out.write(json.dumps(record, default=str) + "\n")
            self.out.flush()

    def _pump(self, fd: int) -> None:
        with os.fdopen(fd, "r", errors="replace") as pipe:
            for raw in pipe:
                line = raw.rstrip("\n")
                if not line.strip() or any(d in line for d in DROPPED):
                    continue
                record = native_record(line)
                if record["logger"] == "grpc" and self.on_native is not None:
                    try:
                        self.on_native(record["message"])
                    except Exception:  # noqa: BLE001 - a counter must not stop the log
                        pass
                self.write(record)

    def close(self, timeout: float = 2.0) -> None:
        """Put fd 2 back and let the pump write what is left."""
        if self._saved < 0:
            return
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self._saved, 2)  # the pipe's last writer goes: the pump reads to its end
        os.close(self._saved)
        self._saved = -1
        if self._thread is not None:
            self._thread.join(timeout)


def configure(level: int = logging.INFO,
              on_native: Callable[[str], None] | None = None) -> NativeStderr:  # fmt: skip
    """Send every log record, and every line written to fd 2, to stderr as JSON lines."""
    out = os.fdopen(os.dup(2), "w", buffering=1)
    native = NativeStderr(out, on_native)
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    native.start()
    atexit.register(native.close)
    return native
