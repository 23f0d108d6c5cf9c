"""Commodities: flows aggregated by (source RTSW, destination RTSW).

Candidate paths depend only on the RTSW pair (controller.model.paths), so for min-MLU nothing is
lost by routing the pair's total demand instead of each flow. Same-rack flows never reach a
switch-to-switch link and belong to no commodity (`flow_comm == -1`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.paths import SAME_RACK, flow_class


@dataclass(frozen=True)
class Commodities:
    """M commodities sorted by (src_rtsw, dst_rtsw)."""

    src_rtsw: np.ndarray = field(repr=False)  # int64 [M]
    dst_rtsw: np.ndarray = field(repr=False)  # int64 [M]
    cls: np.ndarray = field(repr=False)  # int8 [M]: SAME_POD or CROSS_POD
    demand: np.ndarray = field(repr=False)  # float64 [M], Gbps
    flow_comm: np.ndarray = field(repr=False)  # int64 [F], -1 for same-rack flows

    def __len__(self) -> int:
        return int(self.src_rtsw.size)

    def src_pod(self, fabric: Fabric) -> np.ndarray:
        return fabric.pod_of_rtsw(self.src_rtsw)

    def dst_pod(self, fabric: Fabric) -> np.ndarray:
        return fabric.pod_of_rtsw(self.dst_rtsw)


def commodities(fabric: Fabric, flows: FlowSet) -> Commodities:
    """Aggregate the flows that leave their rack by RTSW pair (deterministic order)."""
    return aggregate(
        fabric,
        flows,
        flow_class(fabric, flows.src_nic, flows.dst_nic),
        fabric.rtsw_of_nic(flows.src_nic),
        fabric.rtsw_of_nic(flows.dst_nic),
    )


def aggregate(
    fabric: Fabric, flows: FlowSet, cls: np.ndarray, sr: np.ndarray, dr: np.ndarray
) -> Commodities:
    """`commodities` from the flows' classes and source and destination racks
    (controller.model.paths), as a Problem holds them."""
    leaves = cls != SAME_RACK
    key = sr * fabric.num_rtsws + dr
    uniq, inverse = np.unique(key[leaves], return_inverse=True)
    flow_comm = np.full(len(flows), -1, dtype=np.int64)
    flow_comm[leaves] = inverse
    src, dst = uniq // fabric.num_rtsws, uniq % fabric.num_rtsws
    comm_cls = np.zeros(uniq.size, dtype=np.int8)
    comm_cls[inverse] = cls[leaves]
    demand = np.bincount(inverse, weights=flows.demand[leaves], minlength=uniq.size)
    return Commodities(src, dst, comm_cls, demand, flow_comm)
