"""Operator-facing output: plain-text tables, strict JSON and stage progress on stderr.

Every `--json` output goes through `to_json`: strict JSON (RFC 8259), so a value that is not
a finite number (no LP ran, load on a dead link) is `null`, never NaN or Infinity.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any


class Percent(float):
    """A fraction shown as a percentage in tables (0.5 -> 50%); a plain float in JSON."""


def strict(value: Any) -> Any:
    """`value` with non-finite floats as None, numpy scalars and arrays as Python ones."""
    if isinstance(value, Mapping):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [strict(v) for v in items]
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return strict(value.tolist())  # numpy scalars and arrays
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    raise TypeError(f"not JSON-ready: {type(value).__name__}")


def to_json(data: Any, indent: int | None = 2) -> str:
    """Strict JSON text of `data` (see `strict`), keys sorted for stable diffs."""
    return json.dumps(strict(data), indent=indent, sort_keys=True, allow_nan=False)


def _cell(value: object) -> str:
    if isinstance(value, Percent):
        return "-" if value != value else f"{value:.1%}"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}" if abs(value) < 1 else f"{value:.3f}".rstrip("0").rstrip(".")
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"  # thousands separated from 1,000 on, as `number` writes counts
    return str(value)


def number(value: int | float) -> str:
    """A count as operators read it: thousands separated (61,824), whatever its size."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.4g}"
    return f"{int(value):,}"


def plural(n: int, word: str) -> str:
    """'1 stage', '7 stages', '61,824 operations', '2 switches'."""
    return f"{n:,} {word}{'' if n == 1 else 'es' if word.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def counts_text(counts: Mapping[str, int | float]) -> str:
    """Named counts as text ("add 61,824, replace 0, delete 0"), never a Python repr."""
    return ", ".join(f"{name} {number(n)}" for name, n in counts.items())


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) and bool(rows)
        for i in range(len(header))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(header)), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out) + "\n"


class Progress:
    """Stage timings on stderr, so long runs show where they are."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.times: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, steps: str | None = None) -> Iterator[None]:
        """Time the stage `name`. `steps`: a logger whose INFO records during the stage are
        shown under it as they come (a solve's certificate rounds, which on a large fabric
        under failures take a minute between them), the time then on a line of its own."""
        if not self.quiet:
            print(f"  {name} ...", end="", file=sys.stderr, flush=True)
        shown = _Steps()
        logger = logging.getLogger(steps) if steps is not None and not self.quiet else None
        level = logger.level if logger is not None else logging.NOTSET
        if logger is not None:
            logger.addHandler(shown)
            if not logger.isEnabledFor(logging.INFO):
                logger.setLevel(logging.INFO)
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            if not self.quiet:  # the error that follows starts a line of its own
                print(f"  {name}: failed" if shown.count else " failed", file=sys.stderr,
                      flush=True)  # fmt: skip
            raise
        finally:
            if logger is not None:
                logger.removeHandler(shown)
                logger.setLevel(level)
        elapsed = time.perf_counter() - start
        self.times[name] = elapsed
        if not self.quiet:
            print(f"  {name}: {elapsed:.2f} s" if shown.count else f" {elapsed:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip


class _Steps(logging.Handler):
    """A stage's INFO records on stderr, indented under its line (Progress.stage)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record must not end the stage
            self.handleError(record)
            return
        # the first ends the stage's "name ..." line
        print(("" if self.count else "\n") + f"    {text}", file=sys.stderr, flush=True)
        self.count += 1


def emit(as_json: bool, data: object, text: str) -> None:
    """Write a report to stdout: `data` as JSON for machines, or `text` for people."""
    if as_json:
        sys.stdout.write(to_json(data) + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
