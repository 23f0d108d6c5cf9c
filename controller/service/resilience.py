"""The resilience sweep as a call of the service: `tectl resilience` on what is installed.

The inputs are the installed target (its assignment and the health it answers to) and the
service's solve options (QPs, table budget, certificate options), so the report equals the
offline `tectl resilience --routes FILE --fail ...` of the same routing, health and options.
The sweep runs on worker processes of low priority (controller.solver.sweep_runners'
local pool, spawned per call, even for one worker): the engine's worker and its pushes
never wait on it, and the calling thread only waits and assembles. One sweep at a time;
the precomputed repairs (controller.service.precomputed) are not reused: they are certified
with the reaction path's deferral, and the sweep's cost is mostly the hashed routings'
walks and fills, which the precomputed set does not hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from controller.errors import InputError, LimitError, OverDeadline, PreconditionError
from controller.model.fabric import Fabric
from controller.model.failures import ELEMENT_KINDS, check_kinds, single_failures
from controller.service.rounds import Target
from controller.solver import SolveOptions
from controller.solver.resilience import Resilience, SweepInputs, sample_doubles
from controller.solver.sweep_runners import RunStats, run_local

NICENESS = 10  # added to the sweep's worker processes: the service's own threads come first
MAX_DOUBLES = 1_000_000  # as `tectl resilience --doubles`


@dataclass(frozen=True)
class SweepRequest:
    """What a caller may choose: element kinds, workers (0: the bound), sampled doubles."""

    kinds: tuple[str, ...] = ()
    workers: int = 0
    doubles: int = 0
    seed: int = 1

    def checked(self) -> SweepRequest:
        """The request, or InputError naming the field at fault."""
        check_kinds(self.kinds, "kinds", InputError)
        if len(set(self.kinds)) != len(self.kinds):
            raise InputError(f"kinds: listed twice in {list(self.kinds)}")
        if not 0 <= self.doubles <= MAX_DOUBLES:
            raise InputError(f"doubles: {self.doubles} not in [0, {MAX_DOUBLES:,}]")
        return self


class Sweeps:
    """At most one sweep at a time, of the target the engine has installed."""

    def __init__(self, max_workers: int, seconds: float) -> None:
        self.max_workers, self.seconds = max_workers, seconds
        self._lock = threading.Lock()
        self._since = 0.0

    @staticmethod
    def inputs(fabric: Fabric, target: Target | None, options: SolveOptions,
               request: SweepRequest,
               hashed_jobs: tuple[str, ...] = ()) -> SweepInputs:  # fmt: skip
        """The sweep's inputs: `target`'s routing and health under the service's options;
        `hashed_jobs`: the jobs the last global solve left to the hashing whole."""
        if target is None:
            raise PreconditionError("Resilience: no routing is installed yet (no jobs, or the "
                                    "first solve has not been pushed)")  # fmt: skip
        kinds = request.kinds or ELEMENT_KINDS
        certify = options.certify
        doubles: tuple[tuple[int, int], ...] = ()
        if request.doubles:
            doubles = sample_doubles(single_failures(fabric, target.health, kinds),
                                     request.doubles, request.seed)  # fmt: skip
        return SweepInputs(fabric, target.health, target.assignment, qps=options.qps,
                           table_budget=options.table_budget, certify=certify,
                           kinds=kinds, doubles=doubles, hashed_jobs=hashed_jobs)  # fmt: skip

    def run(
        self, inputs: SweepInputs, workers: int, alive: Callable[[], bool],
        seconds: float | None = None,
    ) -> tuple[Resilience, RunStats]:  # fmt: skip
        """Sweep `inputs` on `workers` (cut to the bound) low-priority processes; LimitError
        while another sweep runs, OverDeadline past `seconds` (the server's limit, or less),
        and stopped (batches not started cancelled) once `alive()` turns false."""
        if not self._lock.acquire(blocking=False):
            ran = time.monotonic() - self._since
            raise LimitError(f"Resilience: a sweep is already running ({ran:.0f} s so far); "
                             "one runs at a time, retry when it ends",
                             retry_after=max(1.0, min(60.0, ran)))  # fmt: skip
        try:
            self._since = time.monotonic()
            limit = self.seconds if seconds is None else min(self.seconds, seconds)
            deadline = self._since + limit

            def check(done: int, total: int) -> None:  # the caller's going: `alive` below
                if time.monotonic() > deadline:
                    raise OverDeadline(f"Resilience: {done:,} of {total:,} elements swept "
                                       f"within the deadline of {limit:.0f} s")  # fmt: skip

            count = max(1, min(workers or self.max_workers, self.max_workers))
            return run_local(inputs, workers=count, progress=check, in_process=False,
                             niceness=NICENESS, alive=alive)  # fmt: skip
        finally:
            self._lock.release()

    @property
    def running(self) -> bool:
        """Whether a sweep runs now."""
        return self._lock.locked()
