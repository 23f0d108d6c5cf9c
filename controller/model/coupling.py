"""Which jobs can share a link: the independent parts of a fabric's traffic.

Every arc belongs to one token: an access arc or an RTSW-CTSW arc to the RTSW it touches, a
CTSW-ATSW arc to the pod of its CTSW (`arc_tokens`). Any path of a flow (controller.model.
paths: NIC, RTSW, then CTSW, ATSW, CTSW and RTSW as its class needs) crosses arcs of its
source and destination RTSWs only, and between pods of those two pods' CTSW-ATSW arcs
(`flow_tokens`). So two flows that share an arc, on any routing, share a token. Jobs are
joined when their flows name a token in common, and a part is a connected component of that
graph (`job_parts`): no arc is crossed by flows of two parts, whatever the routing.

Why: under max-min fairness the rates of a part depend only on its own flows and their arcs,
so a part routed alike in two routings (the same paths, or the same hashes through the same
entries) gets the same rates in both, and a comparison of the two (the certificate,
controller.solver.certificate) needs to simulate only the parts that differ.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from controller.model.fabric import Fabric
from controller.model.flows import FlowSet

# (jobs x tokens) above which the job-token pairs are sorted out rather than marked in a table
_TABLE = 1 << 26


def num_tokens(fabric: Fabric) -> int:
    """Tokens of a fabric: one per RTSW, then one per pod."""
    return fabric.num_rtsws + fabric.pods


def arc_tokens(fabric: Fabric) -> np.ndarray:
    """int64 [num_arcs]: the token of every arc (module docstring)."""
    link = np.arange(fabric.num_links, dtype=np.int64)
    token = np.empty(fabric.num_links, np.int64)
    access = link < fabric.rack_base
    token[access] = fabric.rtsw_of_nic(link[access])
    rack = (link >= fabric.rack_base) & (link < fabric.agg_base)
    token[rack] = (link[rack] - fabric.rack_base) // (fabric.ctsws_per_pod * fabric.rack_links)
    agg = link >= fabric.agg_base
    per_ctsw = max(fabric.atsws_per_plane, 1) * max(fabric.agg_links, 1)
    ctsw = (link[agg] - fabric.agg_base) // per_ctsw
    token[agg] = fabric.num_rtsws + ctsw // fabric.ctsws_per_pod
    return np.repeat(token, 2)  # arc 2*l up, 2*l+1 down: both the link's


def flow_tokens(fabric: Fabric, flows: FlowSet) -> np.ndarray:
    """int64 [F, 4]: the tokens any path of each flow can cross (-1: none; module docstring):
    its source RTSW, its destination RTSW and, between pods, both pods."""
    sr = np.asarray(fabric.rtsw_of_nic(flows.src_nic), np.int64)
    dr = np.asarray(fabric.rtsw_of_nic(flows.dst_nic), np.int64)
    sp = np.asarray(fabric.pod_of_rtsw(sr), np.int64)
    dp = np.asarray(fabric.pod_of_rtsw(dr), np.int64)
    cross = sp != dp
    base = fabric.num_rtsws
    return np.stack([sr, dr, np.where(cross, base + sp, -1), np.where(cross, base + dp, -1)],
                    axis=1)  # fmt: skip


def job_parts(fabric: Fabric, flows: FlowSet, num_jobs: int) -> np.ndarray:
    """int64 [num_jobs]: a label per job, equal for jobs of one part (module docstring);
    a job without flows is a part of its own."""
    T = num_tokens(fabric)
    tokens = flow_tokens(fabric, flows)
    job = np.repeat(np.asarray(flows.job, np.int64), tokens.shape[1])
    tok = tokens.reshape(-1)
    keep = tok >= 0
    key = job[keep] * T + tok[keep]
    if num_jobs * T <= _TABLE:
        seen = np.zeros(num_jobs * T, bool)
        seen[key] = True
        key = np.flatnonzero(seen)
    else:
        key = np.unique(key)
    n = num_jobs + T
    graph = coo_matrix((np.ones(key.size, np.int8), (key // T, num_jobs + key % T)), (n, n))
    _, label = connected_components(graph, directed=False)
    return np.asarray(label[:num_jobs], np.int64)


def coupled_jobs(fabric: Fabric, flows: FlowSet, num_jobs: int,
                 touched: np.ndarray) -> np.ndarray:  # fmt: skip
    """bool [num_jobs]: the jobs of every part that holds a `touched` flow (bool [F]); the
    other jobs share no arc with them on any routing."""
    label = job_parts(fabric, flows, num_jobs)
    hit = np.zeros(int(label.max(initial=-1)) + 1, bool)
    hit[label[np.asarray(flows.job, np.int64)[touched]]] = True
    return hit[label]
