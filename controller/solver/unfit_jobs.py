"""Jobs left to the fabric's hashing: those that cannot have a TE entry per flow.

A source RTSW's TE entry steers one <source NIC (ingress port), destination host> unit. A job
that needs more such units at one RTSW than that RTSW's TE table holds can never be pinned
flow by flow, even alone on the fabric: most of its flows would ride the hashing anyway,
crossed by entries that steer the rest, which is how a pod-wide all-to-all job ended below
E-ECMP (81.6% of line rate against 96.0%) and how its solve and certificate grew to minutes
(per-flow work over millions of subflows). Such a job, in practice an all-to-all over
hundreds of hosts (more flows per NIC than the RTSW has uplinks, each small, where hashing
16 QPs each balances well), is left to the fabric's hashing whole: its flows get no TE path
and no entry, the other jobs are placed as usual, and the certificate then compares every
job, that one included, against the hashing as always. The output names each such job and
why. A job with a flow or two per NIC over the budget is placed as far as the tables go.
"""

from __future__ import annotations

import numpy as np

from controller.model.fabric import Fabric
from controller.model.flows import FlowSet, distinct, distinct_counts


def unfit_jobs(fabric: Fabric, flows: FlowSet, budget: np.ndarray) -> dict[int, str]:
    """Job index -> why, for the jobs that need more <source NIC, destination host> entries
    at one source RTSW than its TE budget (`budget`: per node id, inf where unlimited) and
    send from some NIC to more hosts than an RTSW has uplinks (many small flows a NIC: a job
    with a flow or two a NIC over the budget keeps what fits, the rest on the hashing)."""
    if not len(flows):
        return {}
    src_rack = fabric.rtsw_of_nic(flows.src_nic)
    cross = src_rack != fabric.rtsw_of_nic(flows.dst_nic)  # same-rack flows need no entry
    if not cross.any():
        return {}
    hosts = np.int64(fabric.num_hosts)
    unit = (flows.job[cross].astype(np.int64) * fabric.num_nics + flows.src_nic[cross]) * hosts
    unit = distinct(unit + fabric.host_of_nic(flows.dst_nic[cross]))
    job = unit // hosts // fabric.num_nics
    nic_key, fanout = distinct_counts(unit // hosts)  # per (job, source NIC)
    widest = np.zeros(len(flows.job_ids) or int(job.max()) + 1, np.int64)
    np.maximum.at(widest, nic_key // fabric.num_nics, fanout)
    rack = fabric.rtsw_of_nic((unit // hosts) % fabric.num_nics)
    key, count = distinct_counts(job * fabric.num_rtsws + rack)
    limit = budget[fabric.node_id("rtsw", 0) + key % fabric.num_rtsws]
    uplinks = fabric.ctsws_per_pod // fabric.planes * fabric.rack_links  # in its plane
    over = (count > limit) & (widest[key // fabric.num_rtsws] > uplinks)
    worst: dict[int, tuple[int, int, float]] = {}  # job -> (entries, rack, budget), the most
    for k, n, cap in zip(key[over].tolist(), count[over].tolist(), limit[over].tolist(),
                         strict=True):  # fmt: skip
        j = k // fabric.num_rtsws
        if j not in worst or n > worst[j][0]:
            worst[j] = (n, k % fabric.num_rtsws, cap)
    return {j: f"needs {n:,} TE entries at {fabric.rtsw_name(r)} alone, over its budget of "
               f"{cap:,.0f}, for {widest[j]:,} flows a NIC (more than the {uplinks} uplinks): "
               "left to the fabric's hashing"
            for j, (n, r, cap) in sorted(worst.items())}  # fmt: skip
