"""An assignment: one candidate path (by structured index) per flow, or none.

`path[f] == UNROUTED` means flow f has no TE path: either nothing healthy is left for it or
a switch table was full; such traffic stays on the BGP/ECMP defaults underneath.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Fabric
from controller.flows import FlowSet
from controller.paths import path_arcs

UNROUTED = -1


@dataclass(frozen=True)
class Assignment:
    """Flows and the path index chosen for each (see controller.paths for the numbering)."""

    flows: FlowSet
    path: np.ndarray = field(repr=False)  # int64 [F]

    def __post_init__(self) -> None:
        if self.path.shape != (len(self.flows),):
            raise ValueError(f"path has shape {self.path.shape}, expected ({len(self.flows)},)")
        self.path.setflags(write=False)

    @property
    def routed(self) -> np.ndarray:
        return self.path != UNROUTED

    def arcs(self, fabric: Fabric) -> np.ndarray:
        """Arc ids [F, MAX_HOPS] of every routed flow; unrouted rows are all -1."""
        out = path_arcs(
            fabric, self.flows.src_nic, self.flows.dst_nic, np.maximum(self.path, 0)
        )
        out[~self.routed] = -1
        return out

    def link_load(self, fabric: Fabric) -> np.ndarray:
        """Gbps carried by each arc (routed flows only)."""
        arcs = self.arcs(fabric)
        weights = np.repeat(self.flows.demand, arcs.shape[1])
        flat = arcs.reshape(-1)
        keep = flat >= 0
        return np.bincount(flat[keep], weights=weights[keep], minlength=fabric.num_arcs)
