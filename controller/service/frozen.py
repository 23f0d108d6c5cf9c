"""The cyclic garbage collector kept off the reaction path.

A full collection over what a settled round leaves alive (the installed and wanted routes,
the kept index and result) is slow at meta-24k scale, and it fell inside the next
repair's push. So each settle moves what is alive out of the collector's sight
(`gc.freeze`): it is still freed by reference counting when dropped, and a reference cycle
that was garbage at a freeze is collected every GC_INTERVAL s, at the end of an idle
periodic reconcile, off the reaction path (figures: docs/profiling.md).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

GC_INTERVAL = 600.0  # seconds between full collections of what settles froze


class Frozen:
    """When the frozen objects were last collected, and the two moves."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._collected = clock()

    @staticmethod
    def freeze() -> None:
        """Move what is alive now out of the collector's sight."""
        gc.freeze()

    def collect_if_due(self) -> None:
        """Collect the frozen objects' cycles when GC_INTERVAL s have passed."""
        now = self._clock()
        if now - self._collected < GC_INTERVAL:
            return
        self._collected = now
        gc.unfreeze()
        gc.collect()
        gc.freeze()
