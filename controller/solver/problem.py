"""One solve's inputs and what every stage derives from them, each derived once.

A `Problem` is made from (fabric, health, flows). The stages of a solve (the greedy, the
local search, the relief pass, colouring, QP buckets, the bounds) all need the same things
from those three: each flow's class and racks, the arc capacities and their inverse, the
candidate paths, the commodities, the lower bound. They read them from the Problem, which
computes each on first use and keeps it, instead of passing optional caches to one another
or computing them again.

Rows derived from the flows (a subset, or the QP buckets of a split, `rows`) get a Problem
of their own whose per-flow data is taken from the first by each row's parent flow: a
bucket has its flow's class, racks and candidates.

Plain data, no I/O. The arrays are shared by every stage: read them, never write them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from controller.model.fabric import ACCESS, Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.paths import flow_class
from controller.solver.bounds import Bound, cheap_bound
from controller.solver.candidates import Candidates, candidate_tables
from controller.solver.commodities import Commodities, aggregate


def inverse(capacity: np.ndarray) -> np.ndarray:
    """1 / capacity per arc, inf where the arc is dead (no capacity)."""
    with np.errstate(divide="ignore"):
        return np.where(capacity > 0, 1.0 / np.where(capacity > 0, capacity, 1.0), np.inf)


@dataclass(frozen=True, eq=False)
class Problem:
    """Fabric, link health and flows, with what the solve stages derive from them (each
    computed on first use and kept on the instance)."""

    fabric: Fabric
    health: LinkHealth
    flows: FlowSet
    # (problem, parent rows): this one's rows are parts of that one's flows (see `rows`)
    parent: tuple[Problem, np.ndarray] | None = field(default=None, repr=False)
    # the lower bound per QP split, once computed (see `bound`)
    _bounds: dict[int, Bound] = field(default_factory=dict, init=False, repr=False)

    def rows(self, flows: FlowSet, parent: np.ndarray) -> Problem:
        """The Problem of `flows` whose row i is flow `parent[i]` of this one, whole or a
        QP bucket of it (same NICs): its classes, racks and candidates are taken from
        this one's, not computed again."""
        return Problem(self.fabric, self.health, flows, (self, np.asarray(parent, np.int64)))

    def take(self, rows: np.ndarray) -> Problem:
        """The Problem of flows `rows` of this one (FlowSet.take)."""
        return self.rows(self.flows.take(rows), rows)

    # ---- per flow: where it goes --------------------------------------------------------
    @cached_property
    def cls(self) -> np.ndarray:
        """SAME_RACK, SAME_POD or CROSS_POD per flow (controller.model.paths.flow_class)."""
        if self.parent is not None:
            return self.parent[0].cls[self.parent[1]]
        return flow_class(self.fabric, self.flows.src_nic, self.flows.dst_nic)

    @cached_property
    def src_rack(self) -> np.ndarray:
        """Source rack (RTSW) per flow."""
        if self.parent is not None:
            return self.parent[0].src_rack[self.parent[1]]
        return self.fabric.rtsw_of_nic(self.flows.src_nic)

    @cached_property
    def dst_rack(self) -> np.ndarray:
        """Destination rack (RTSW) per flow."""
        if self.parent is not None:
            return self.parent[0].dst_rack[self.parent[1]]
        return self.fabric.rtsw_of_nic(self.flows.dst_nic)

    @cached_property
    def src_pod(self) -> np.ndarray:
        """Source pod per flow."""
        return self.fabric.pod_of_rtsw(self.src_rack)

    @cached_property
    def dst_pod(self) -> np.ndarray:
        """Destination pod per flow."""
        return self.fabric.pod_of_rtsw(self.dst_rack)

    @cached_property
    def candidates(self) -> Candidates:
        """Every flow's candidate paths as arc tables (controller.solver.candidates)."""
        if self.parent is not None:
            return self.parent[0].candidates.take(self.parent[1])
        return candidate_tables(self.fabric, self.cls, self.src_rack, self.dst_rack)

    @cached_property
    def commodities(self) -> Commodities:
        """The flows that leave their rack aggregated by RTSW pair (for the LP)."""
        return aggregate(self.fabric, self.flows, self.cls, self.src_rack, self.dst_rack)

    # ---- per arc: what the health leaves ----------------------------------------------------
    @cached_property
    def arc_capacity(self) -> np.ndarray:
        """Usable Gbps per arc under the health (LinkHealth.arc_capacity)."""
        if self.parent is not None:
            return self.parent[0].arc_capacity
        return self.health.arc_capacity(self.fabric)

    @cached_property
    def inverse(self) -> np.ndarray:
        """1 / arc capacity, inf for dead arcs: what path scores multiply load by."""
        if self.parent is not None:
            return self.parent[0].inverse
        return inverse(self.arc_capacity)

    @cached_property
    def core(self) -> np.ndarray:
        """Which arcs are switch-to-switch (the ones a path choice changes)."""
        return np.repeat(self.fabric.link_kind != ACCESS, 2)

    @cached_property
    def access_alive(self) -> np.ndarray:
        """Flows whose NIC access arcs (fixed for every path) both have capacity."""
        cap, fabric = self.arc_capacity, self.fabric
        return (cap[fabric.up(self.flows.src_nic)] > 0) & (cap[fabric.down(self.flows.dst_nic)] > 0)

    @cached_property
    def any_dead(self) -> bool:
        """Whether some arc has no capacity left."""
        return bool((self.arc_capacity <= 0).any())

    # ---- the lower bound ---------------------------------------------------------------------
    def bound(self, qps: int = 1) -> Bound:
        """The cheap lower bound on MLU for routings that may split flows into up to `qps`
        QP buckets (controller.solver.bounds.lower_bound without the LP); computed once
        per `qps`."""
        if qps not in self._bounds:
            self._bounds[qps] = cheap_bound(self.fabric, self.arc_capacity, self.flows, self.cls,
                                            self.src_rack, self.dst_rack, qps)  # fmt: skip
        return self._bounds[qps]
