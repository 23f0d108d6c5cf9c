"""What every bench section shares: its Markdown block, the run's configuration, progress on
stderr and median timing (sections in modules of their own import these, not sim.bench)."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.formats.output import format_table


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of `repeats` calls, and the last result."""
    times, result = [], None
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


@dataclass
class Section:
    """A titled block of Markdown."""

    title: str
    lines: list[str] = field(default_factory=list)

    def table(self, header: list[str], rows: list[list[object]]) -> None:
        text = format_table(header, rows).rstrip("\n").split("\n")
        self.lines.append("```")
        self.lines.extend(text)
        self.lines.append("```")

    def text(self, line: str) -> None:
        self.lines.append(line)

    def markdown(self) -> str:
        return f"## {self.title}\n\n" + "\n".join(self.lines) + "\n"


@dataclass(frozen=True)
class Config:
    repeats: int
    seeds: tuple[int, ...]
    sweep_seeds: int
    quick: bool
    # at most this many random scenarios on a fabric ("": on any), else the section's own
    scenarios: dict[str, int] = field(default_factory=dict)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
