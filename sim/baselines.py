"""Baselines the controller must beat: ECMP, E-ECMP with QP scaling, capacity-aware WCMP,
static path pinning, and the spray rivals.

The hashed routings are the fabric's own (controller.model.hashing, which the certificate
uses as its reference); this module adds pinning and re-exports them for the comparisons.

Pinning is static and load-blind. Let i be the destination NIC's index within its rack
(host-in-rack * NICs-per-host + NIC) and u = i mod (C*K): the pinned uplink is
c = u mod C, ku = (u div C) mod K. Cross-pod, with v = (destination rack within its pod)
mod (A*L): j = v mod A, mu = v div A, md = mu. The down link is kd = ku. When the pinned
option is unusable the switch takes the next usable one in cyclic order. For full racks of
rail-aligned rack-to-rack traffic in a 1:1 pod this is a perfect matching (no collisions);
two flows from one rack to the same NIC index of different racks share an uplink, and every
flow pinned to a failed link lands on its neighbour, which is how pinning breaks.
"""

from __future__ import annotations

import numpy as np

from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.hashing import (
    HOP_AGG_DOWN,
    HOP_AGG_UP,
    HOP_DOWNLINK,
    HOP_UPLINK,
    Chooser,
    ecmp,
    eecmp,
    flow_hash,
    route,
    split_qps,
    wcmp,
)
from controller.model.health import LinkHealth

__all__ = ["Chooser", "ecmp", "eecmp", "flow_hash", "pinning", "split_qps", "wcmp"]


def _next_usable(usable: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Index of the first True at or cyclically after `start` in each row."""
    n = usable.shape[1]
    cols = (start[:, None] + np.arange(n)) % n
    rolled = np.take_along_axis(usable, cols, axis=1)
    return (start + np.argmax(rolled, axis=1)) % n


def _pin_chooser(fabric: Fabric, flows: FlowSet) -> Chooser:
    """Static pinning by destination downlink index (see the module docstring)."""
    C, K = fabric.ctsws_per_pod, fabric.rack_links
    A, L = fabric.atsws_per_plane, fabric.agg_links
    nics_per_rack = fabric.hosts_per_rack * fabric.nics_per_host
    dst = flows.dst_nic
    u = (dst % nics_per_rack) % (C * K)
    pin_c, pin_ku = u % C, (u // C) % K
    v = (fabric.rack_of_nic(dst) % fabric.racks_per_pod) % max(A * L, 1)
    pin_j, pin_mu = v % max(A, 1), v // max(A, 1)
    preferred = {
        HOP_UPLINK: pin_c * K + pin_ku,
        HOP_DOWNLINK: pin_ku,
        HOP_AGG_UP: pin_j * L + pin_mu,
        HOP_AGG_DOWN: pin_mu,
    }

    def choose(
        hop: int, usable: np.ndarray, rows: np.ndarray, seen: dict[str, np.ndarray]
    ) -> np.ndarray:
        return _next_usable(usable, preferred[hop][rows])

    return choose


def pinning(fabric: Fabric, flows: FlowSet, health: LinkHealth) -> Assignment:
    """Static path pinning: uplink by destination NIC index, next usable one on failure."""
    return Assignment(flows, route(fabric, flows, health, _pin_chooser(fabric, flows)))
