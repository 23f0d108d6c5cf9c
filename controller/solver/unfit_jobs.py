"""Jobs left to the fabric's hashing: those that cannot have a TE entry per flow.

A source RTSW's TE entry steers one <source NIC (ingress port), destination host> unit. A job
that needs more such units at one RTSW than that RTSW's TE table holds can never be pinned
flow by flow, even alone on the fabric: most of its flows would ride the hashing anyway,
crossed by entries that steer the rest, which is how a pod-wide all-to-all job ended below
E-ECMP (81.6% of line rate against 96.0%) and how its solve and certificate grew to minutes
(per-flow work over millions of subflows). Such a job, in practice an all-to-all over
hundreds of hosts (many small flows per NIC, where hashing 16 QPs each balances well), is
left to the fabric's hashing whole: its flows get no TE path and no entry, the other jobs are
placed as usual, and the certificate then compares every job, that one included, against the
hashing as always. The output names each such job and why.
"""

from __future__ import annotations

import numpy as np

from controller.model.fabric import Fabric
from controller.model.flows import FlowSet


def unfit_jobs(fabric: Fabric, flows: FlowSet, budget: np.ndarray) -> dict[int, str]:
    """Job index -> why, for the jobs that need more <source NIC, destination host> entries
    at one source RTSW than its TE budget (`budget`: per node id, inf where unlimited)."""
    if not len(flows):
        return {}
    src_rack = fabric.rack_of_nic(flows.src_nic)
    cross = src_rack != fabric.rack_of_nic(flows.dst_nic)  # same-rack flows need no entry
    if not cross.any():
        return {}
    hosts = np.int64(fabric.num_hosts)
    unit = (flows.job[cross].astype(np.int64) * fabric.num_nics + flows.src_nic[cross]) * hosts
    unit = np.unique(unit + fabric.host_of_nic(flows.dst_nic[cross]))
    job = unit // hosts // fabric.num_nics
    rack = fabric.rack_of_nic((unit // hosts) % fabric.num_nics)
    key, count = np.unique(job * fabric.num_racks + rack, return_counts=True)
    limit = budget[fabric.node_id("rtsw", 0) + key % fabric.num_racks]
    over = count > limit
    worst: dict[int, tuple[int, int, float]] = {}  # job -> (entries, rack, budget), the most
    for k, n, cap in zip(key[over].tolist(), count[over].tolist(), limit[over].tolist(),
                         strict=True):  # fmt: skip
        j = k // fabric.num_racks
        if j not in worst or n > worst[j][0]:
            worst[j] = (n, k % fabric.num_racks, cap)
    return {j: f"needs {n:,} TE entries at {fabric.rtsw_name(r)} alone, over its budget of "
               f"{cap:,.0f}: left to the fabric's hashing"
            for j, (n, r, cap) in sorted(worst.items())}  # fmt: skip
