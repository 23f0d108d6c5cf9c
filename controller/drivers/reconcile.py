"""Reading the switches back and repairing them until they hold the routes we want.

After every push, and every `interval` seconds, the engine calls `Reconciler.run` with the
routes it wants and the switches to check. A round reads those switches, diffs our entries
against the wanted ones and, when they differ, pushes the diff (in the usual make-before-break
order); a round that left a difference is retried after a backoff that doubles up to a bound.
The result says what was READ on the last round: the engine reports that, never what it
meant to install. Without `repair`, a round only reads and reports (drift, not repaired).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller.drivers.interface import Driver
from controller.drivers.push import APPLIED, push, read_back
from controller.model.fabric import Fabric
from controller.routes.plan import diff
from controller.routes.tables import OWNER, RouteSet, Table

log = logging.getLogger("fabric_te.reconcile")


@dataclass(frozen=True)
class ReconcileResult:
    """What the switches held after the last round, and how it differs from what we want."""

    installed: RouteSet  # read back from the readable switches checked
    checked: tuple[str, ...]  # switches read (or tried)
    unreadable: tuple[str, ...]
    differing: dict[str, int] = field(default_factory=dict)  # switch -> ops still needed
    missing: dict[str, int] = field(default_factory=dict)  # switch -> wanted entries
    # absent or wrong there
    rounds: int = 1  # rounds run (1 = the first read agreed, or nothing to retry)
    ops: int = 0  # operations the repairs applied
    repaired: dict[str, int] = field(default_factory=dict)  # switch -> operations the
    # rounds applied to it (found differing, pushed towards the wanted routes)
    why: dict[str, str] = field(default_factory=dict)  # unreadable switch -> the driver's why
    refused: dict[str, str] = field(default_factory=dict)  # switch -> the error of its last
    # repair that failed (a switch still differing says why)

    @property
    def in_sync(self) -> bool:
        return not self.unreadable and not self.differing


class Reconciler:
    """Bounded, backed-off read-diff-push rounds against one driver."""

    def __init__(
        self,
        driver: Driver,
        fabric: Fabric,
        *,
        rounds: int = 4,
        backoff: float = 0.05,
        max_backoff: float = 1.0,
        push_timeout: float = 5.0,
        owner: str = OWNER,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.driver = driver
        self.fabric = fabric
        self.rounds = max(1, rounds)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.push_timeout = push_timeout
        self.owner = owner
        self.sleep = sleep

    def run(
        self,
        wanted: RouteSet,
        switches: Iterable[str] | None = None,
        stop: Callable[[], bool] | None = None,
        repair: bool = True,
        prior: Mapping[str, Table | None] | None = None,
    ) -> ReconcileResult:
        """Read, diff and repair `switches` (all of the driver's by default) until they hold
        `wanted`, for at most `rounds` rounds. `stop()` True ends the rounds early (the
        engine closing, or the replica no longer the leader); without `repair`, one round
        that only reads and reports. `prior` holds tables just read (None: unreadable), used
        instead of reading those switches again in the first round."""
        checked = tuple(sorted(set(self.driver.switches() if switches is None else switches)))
        ops = 0
        repaired: dict[str, int] = {}
        refused: dict[str, str] = {}
        for round_no in range(1, self.rounds + 1):
            actual, why = self._read(checked, prior if round_no == 1 else None)
            unreadable = tuple(why)
            readable = [s for s in checked if s not in unreadable]
            plan = diff(actual, wanted.only(readable), self.fabric, self.owner)
            differing: dict[str, int] = {}
            missing: dict[str, int] = {}
            for _, batch in plan.batches():
                sw = batch.switch
                differing[sw] = differing.get(sw, 0) + len(batch)
                missing[sw] = missing.get(sw, 0) + len(batch.put)
            for entry in plan.blocked:
                differing[entry.switch] = differing.get(entry.switch, 0) + 1
                missing[entry.switch] = missing.get(entry.switch, 0) + 1
            result = ReconcileResult(actual, checked, unreadable, differing, missing, round_no, ops,
                                     dict(repaired), why, dict(refused))  # fmt: skip
            last = round_no == self.rounds or not repair or (stop is not None and stop())
            if result.in_sync or last or not (len(plan) or unreadable):
                return result
            if len(plan):
                report = push(self.driver, plan, timeout=self.push_timeout, retries=0)
                ops += report.ops_applied
                for r in report.results:
                    if r.status == APPLIED:
                        repaired[r.switch] = repaired.get(r.switch, 0) + r.ops
                    elif r.error:
                        refused[r.switch] = r.error
                if not report.ok:
                    log.info("reconcile round %d: %s", round_no, report.summary())
            self.sleep(min(self.max_backoff, self.backoff * 2 ** (round_no - 1)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(
        self, checked: tuple[str, ...], prior: Mapping[str, Table | None] | None
    ) -> tuple[RouteSet, dict[str, str]]:
        if not prior:
            return read_back(self.driver, checked)
        actual, unreadable = read_back(self.driver, [s for s in checked if s not in prior])
        tables, missing = dict(actual.tables), dict(unreadable)
        for switch in checked:
            if switch in prior:
                table = prior[switch]
                if table is None:
                    missing[switch] = "could not be read after the push"
                elif table:
                    tables[switch] = table
        return RouteSet(dict(sorted(tables.items()))), dict(sorted(missing.items()))
