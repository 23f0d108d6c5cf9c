"""Every error fabric-te raises, in one tree; the service maps each branch to one status.

    FabricTeError
    +-- InputError (ValueError)       bad input: a file, a flag or a request  INVALID_ARGUMENT
    |   +-- FabricError               a fabric, or a name or id into one
    |   +-- FlowError                 flows that do not fit their fabric
    |   +-- JobError                  a job, job mix or placement (`field` names the part)
    |   +-- RouteError                routes that cannot be built or do not fit the fabric
    |   |   +-- RouteConflict         two flows want different next hops at one entry key
    |   +-- AdvisorError              a placement request that cannot be advised on
    |   +-- LabError                  a lab fabric that cannot be built, found or changed
    +-- PreconditionError             valid, but not against the current state
    |                                 (a stale generation)                 FAILED_PRECONDITION
    +-- SolverError                   the solver failed on valid input             INTERNAL
    |   +-- LpError                   the LP ended without an optimum
    |   |   +-- LpTimeout             ... because its time limit ran out  DEADLINE_EXCEEDED
    |   +-- Superseded                a solve abandoned at a safe point: its caller's
    |                                 inputs changed meanwhile (never leaves the service)
    +-- DriverError                   a switch or driver failed                 UNAVAILABLE
    |   +-- DriverTimeout             no answer in time; the batch may or may not have landed
    |   +-- DriverRejected            the switch refused the batch; nothing was applied
    |   |   +-- Fenced                refused before sending: this replica is not the leader
    |   +-- DriverUnavailable         the switch (or its store) cannot be reached
    +-- StoreError                    the state store failed                    UNAVAILABLE
    |   +-- StoreUnavailable          the store cannot be reached: writes refused UNAVAILABLE
    |   |   +-- StoreAmbiguous        a write sent but not answered: it may still be
    |   |                             applied; a retry of the same write is safe    UNKNOWN
    |   +-- StoreConflict             another writer changed the key first          ABORTED
    |   +-- StoreCorrupt              a record truncated, corrupt, of another format or
    |                                 another fabric: never half-read, the start is refused
    +-- LimitError                    over a server limit (size, rate, cost, streams)
        |                             `retry_after` s when waiting helps    RESOURCE_EXHAUSTED
        +-- OverDeadline              the work would not, or did not, end in time
                                                                           DEADLINE_EXCEEDED

Lower-layer errors are raised as the most specific of these, with the cause kept. Anything
outside the tree is a bug and leaves the service as INTERNAL with its traceback logged.
"""

from __future__ import annotations


class FabricTeError(Exception):
    """The root of every error fabric-te raises on purpose."""


class InputError(FabricTeError, ValueError):
    """Bad input: the caller's to fix; the message names the field at fault."""


class FabricError(InputError):
    """A fabric description or a reference into a fabric is invalid."""


class FlowError(InputError):
    """A flow set does not fit its fabric (unknown NIC, negative demand, ...)."""


class JobError(InputError):
    """A job, job mix or placement is invalid; `field` names the part at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.detail = message


class RouteError(InputError):
    """Routes cannot be built or do not fit the fabric."""


class RouteConflict(RouteError):
    """Two flows meet at one entry key but want different next hops."""


class AdvisorError(InputError):
    """A request that cannot be advised on (bad sizes, not enough free hosts, ...)."""


class LabError(InputError):
    """A lab fabric in namespaces cannot be built, found or changed (exists already, too
    large, not root, FRR missing, unknown lab)."""


class PreconditionError(FabricTeError):
    """The request is valid but cannot apply to the current state (e.g. a stale generation)."""


class SolverError(FabricTeError):
    """The solver failed on valid input."""


class LpError(SolverError):
    """The LP could not be solved (infeasible, no solution, backend not in this build)."""


class LpTimeout(LpError):
    """The LP's time limit ran out before an optimum."""


class Superseded(SolverError):
    """A solve stopped between two of its stages because its caller's `stop` said so (its
    inputs were superseded by newer ones); nothing it computed is returned."""


class DriverError(FabricTeError):
    """A driver failed: bad options, unknown driver, corrupt state, or one of the below."""


class DriverTimeout(DriverError):
    """The switch did not answer in time; the batch may or may not have landed."""


class DriverRejected(DriverError):
    """The switch refused the batch; nothing was applied."""


class DriverUnavailable(DriverError):
    """The switch or its store cannot be reached."""


class Fenced(DriverRejected):
    """A push refused before it reached a switch: this replica does not hold leadership."""


class StoreError(FabricTeError):
    """The state store failed."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (or did not answer in time); nothing was written."""


class StoreAmbiguous(StoreUnavailable):
    """A write reached the store but its answer did not: it may have been applied, or may
    be applied later. Retrying the same write is safe (writes are guarded and idempotent)."""


class StoreConflict(StoreError):
    """A guarded write lost: another writer changed the key since it was read."""


class StoreCorrupt(StoreError):
    """Stored state that cannot be trusted: truncated, corrupt, of another format version,
    or of another fabric. Reported, never half-read."""


class LimitError(FabricTeError):
    """A request over one of the server's limits; `retry_after` (seconds) when waiting helps."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OverDeadline(LimitError):
    """The work would not (or did not) finish within its deadline."""
