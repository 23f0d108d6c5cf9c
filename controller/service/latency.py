"""Report-to-installed latency: from an accepted input change to its routes read back.

A round's clock starts at the oldest change it takes (changes that arrive while a round runs
wait for the next one) and stops at the round's first push read back; a round that a global
solve answers (job changes) hands its clock to the solve, stopped at the solve's push, so a
link change repaired while the solve runs neither stops it (the job change is not installed
yet) nor is counted from it (the repair answers the link change alone). A follower installs
nothing: the changes it sees are the leader's to install, so they never start its clock
(else its first round after a takeover would count the whole time it followed).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from prometheus_client import Histogram

SAMPLES = 1024  # latencies kept for Status's quantiles


class ReportLatency:
    """The clock of the changes not yet installed, and the latencies of those that were."""

    def __init__(self, histogram: Histogram) -> None:
        self.histogram = histogram
        self.samples: deque[float] = deque(maxlen=SAMPLES)
        self._pending: float | None = None  # when the oldest change not yet taken came
        self._round: float | None = None  # that time, for the round being installed
        self._solve: float | None = None  # the oldest change a global solve is to install

    def changed(self, now: float) -> None:
        """An input change was accepted at `now`."""
        if self._pending is None:
            self._pending = now

    def taken(self) -> None:
        """The worker took the pending changes into a round."""
        if self._round is None:
            self._round = self._pending
        self._pending = None

    def solving(self) -> None:
        """The round taken is answered by a global solve: its clock runs until the solve's
        push (`installed(solved=True)`), whatever is pushed meanwhile."""
        if self._round is not None:
            self._solve = self._round if self._solve is None else min(self._solve, self._round)
            self._round = None

    def dropped(self) -> None:
        """The changes taken install nothing (job changes while routes applied from a file
        are held, and a global solve of them dropped for that): their clocks stop with no
        sample, or the next round installed would be counted from them."""
        self._round = self._solve = None

    def followed(self) -> None:
        """A follower: the changes seen are the leader's to install."""
        self._pending = self._round = self._solve = None

    def installed(self, now: float, solved: bool = False) -> None:
        """The round's first push was read back at `now`; `solved`: a global solve's push,
        which also installs the changes handed to it (one sample, from the oldest)."""
        start = self._round
        if solved and self._solve is not None:
            start = self._solve if start is None else min(start, self._solve)
            self._solve = None
        if start is not None:
            seconds = now - start
            self.histogram.observe(seconds)
            self.samples.append(seconds)
            self._round = None

    def fields(self) -> dict[str, Any]:
        """Quantiles over the last SAMPLES rounds installed, for Status (the full histogram is
        fabric_te_report_to_installed_seconds in /metrics)."""
        samples = sorted(self.samples)

        def q(p: float) -> float:
            return samples[min(len(samples) - 1, int(p * len(samples)))] if samples else 0.0

        return {
            "report_to_installed_count": len(samples),
            "report_to_installed_p50_seconds": q(0.5),
            "report_to_installed_p99_seconds": q(0.99),
            "report_to_installed_max_seconds": samples[-1] if samples else 0.0,
        }
