"""One replica's share of the common state: inputs on a store, and whether it may push.

The engine calls a `Replica` at a few points: `load` on start; `put_job`, `delete_job` and
`put_health` after validating an input and BEFORE acknowledging it (a failed write changes
nothing and the caller gets UNAVAILABLE); `put_assignment` after each push; `is_leader`
before pushing. The replica calls the engine back with other replicas' input changes
(`follow`) and with changes of role (`on_role`).

Pushes go through `FencedDriver`: right before each batch reaches a switch it asks the store
whether this replica still holds leadership (a linearizable read of the election key), so a
leader that was paused (SIGSTOP) past its lease, or cut off from the store, is refused
(`Fenced`) before it can overwrite a newer leader's routes.

Without a store (`Replica()`), inputs live in memory only and the replica always leads.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from controller.drivers.interface import Driver
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.health import LinkHealth
from controller.model.jobs import Job
from controller.routes.plan import Batch, Op
from controller.routes.tables import Entry, Table
from controller.service.held import Held
from controller.service.persist import Persistence, Stored
from controller.service.store import Change, Leadership, Solo, Store

log = logging.getLogger("fabric_te.replica")


def default_replica_id() -> str:
    """host:pid, unique among the replicas of one store."""
    return f"{socket.gethostname()}:{os.getpid()}"


class FencedDriver(Driver):
    """A driver whose every batch is preceded by a leadership check at the store."""

    name = "fenced"

    def __init__(self, inner: Driver, check: Callable[[], None]) -> None:
        self.inner = inner
        self.check = check

    def switches(self) -> tuple[str, ...]:
        return self.inner.switches()

    def read(self, switch: str) -> tuple[Entry, ...]:
        return self.inner.read(switch)

    def apply(self, switch: str, ops: Sequence[Op], timeout: float | None = None) -> None:
        self.check()  # raises Fenced unless this replica is the leader now
        self.inner.apply(switch, ops, timeout)

    def read_table(self, switch: str) -> Table:
        return self.inner.read_table(switch)

    def apply_batch(self, batch: Batch, timeout: float | None = None) -> None:
        self.check()
        self.inner.apply_batch(batch, timeout)

    def close(self) -> None:
        self.inner.close()


class Replica:
    """Persistence and leadership for one engine; in memory and always leader without a store."""

    def __init__(
        self,
        fabric: Fabric | None = None,
        store: Store | None = None,
        *,
        replica_id: str = "",
        ttl: float = 1.0,
    ) -> None:
        self.store = store
        self.id = replica_id or default_replica_id()
        self.persist = Persistence(store, fabric) if store is not None and fabric else None
        self.leadership: Leadership = (
            store.leadership(self.id, ttl) if store is not None else Solo(self.id)
        )
        self.shared = not isinstance(self.leadership, Solo)
        self._leader_gauge: Gauge | None = None

    def bind_metrics(self, registry: CollectorRegistry) -> None:
        """Export `fabric_te_leader` (1 while this replica leads) on `registry`."""
        self._leader_gauge = Gauge(
            "fabric_te_leader", "1 while this replica is the leader (pushes)", registry=registry
        )

    # ---- start ------------------------------------------------------------------------
    def load(self) -> Stored | None:
        """The stored inputs and assignment (None without a store); StoreCorrupt if they
        cannot be trusted."""
        return self.persist.load() if self.persist is not None else None

    def start(
        self, on_changes: Callable[[list[Change]], None], on_role: Callable[[bool], None]
    ) -> None:
        """Follow other writers from the loaded revision, and campaign. `on_changes` gets
        every change seen, and takes the new ones with `fresh`."""
        if self.store is not None and self.persist is not None:
            self.store.follow(self.persist.revision, on_changes)

        def role(leader: bool) -> None:
            if self._leader_gauge is not None:
                self._leader_gauge.set(int(leader))
            on_role(leader)

        self.leadership.start(role)

    def fenced(self, driver: Driver) -> Driver:
        """`driver` with every push checked against the election (unchanged when alone)."""
        return FencedDriver(driver, self.leadership.check) if self.shared else driver

    # ---- writes (before acknowledging) ------------------------------------------------
    def put_job(self, job: Job, generation: int) -> int:
        """Store a job; returns the store revision of the write (0 without a store)."""
        return self.persist.put_job(job, generation) if self.persist is not None else 0

    def delete_job(self, job_id: str) -> int:
        return self.persist.delete_job(job_id) if self.persist is not None else 0

    def put_health(self, health: LinkHealth) -> int:
        return self.persist.put_health(health) if self.persist is not None else 0

    def is_current(self, key: str, revision: int) -> bool:
        """Whether this replica's write at `revision` is still the newest it has seen of
        `key` (another replica's later write may have arrived first through `follow`)."""
        return self.persist is None or self.persist.newest(key) <= revision

    def put_assignment(self, assignment: Assignment, digest: str) -> None:
        """Record the assignment just pushed; a failure is logged (the next push retries)."""
        if self.persist is None:
            return
        try:
            self.persist.put_assignment(assignment, digest, self.leadership.guard())
        except Exception as err:  # noqa: BLE001 - inputs are safe; only takeover cost grows
            log.warning("assignment not stored: %s", err)

    def put_held(self, held: Held | None) -> None:
        """Store the routes held from a file (None: released), guarded by the election;
        unlike the assignment, a failure is raised: nothing is pushed unless stored."""
        if self.persist is not None:
            self.persist.put_held(held, self.leadership.guard())

    def fresh(self, changes: list[Change]) -> list[Change]:
        """The changes not yet taken here, marked taken: the guarded writes expect them,
        so call it where the state takes them before the next write is checked."""
        return self.persist.fresh(changes) if self.persist is not None else []

    def refresh(self, key: str) -> list[Change]:
        return self.persist.refresh(key) if self.persist is not None else []

    # ---- role and status -------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.leadership.is_leader()

    def status_fields(self) -> dict[str, Any]:
        store = self.store
        return {
            "store": store.url if store is not None else "memory",
            "store_ok": store.healthy if store is not None else True,
            "store_revision": self.persist.revision if self.persist is not None else 0,
            "role": "leader" if self.is_leader() else "follower",
            "leader": self.leadership.leader(),
            "replica": self.id,
        }

    def close(self) -> None:
        self.leadership.close()
        if self.store is not None:
            self.store.close()
