"""The fabric's independent parts: a flow's tokens cover every arc of every path it can take."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from controller.errors import FabricError
from controller.model.clos import ClosSpec, build
from controller.model.coupling import arc_tokens, coupled_jobs, flow_tokens, job_parts
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.paths import flow_class, num_paths, path_arcs


@st.composite
def fabrics(draw: st.DrawFn) -> Fabric:
    """Classic, rail-optimized and multi-plane shapes, one to three pods."""
    pods = draw(st.integers(1, 3))
    nics = draw(st.sampled_from([1, 2, 4]))
    slots = draw(st.sampled_from([s for s in (1, 2, 4) if nics % s == 0]))
    ctsws = draw(st.sampled_from([1, 2, 4]))
    planes = draw(st.sampled_from([q for q in (1, 2) if slots % q == 0 and ctsws % q == 0]))
    spec = ClosSpec(
        name="parts", pods=pods, racks_per_pod=draw(st.integers(1, 3)),
        hosts_per_rack=draw(st.integers(1, 2)), nics_per_host=nics, ctsws_per_pod=ctsws,
        rack_links=draw(st.integers(1, 2)),
        atsws_per_plane=draw(st.integers(1, 2)) if pods > 1 else 0,
        agg_links=draw(st.integers(1, 2)), taper=1.0 if pods > 1 else None,
        rtsws_per_rack=slots, planes=planes,
    )  # fmt: skip
    try:
        return build(spec)
    except FabricError:  # a shape the model refuses (it says why)
        assume(False)
        raise


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(fabrics())
def test_every_arc_of_every_candidate_path_is_among_the_flows_tokens(fabric: Fabric) -> None:
    """Soundness of the parts: whatever path a flow is given (TE or any hash), the arcs it
    crosses belong to its tokens, so flows of different parts never share an arc."""
    nics = np.arange(fabric.num_nics)
    src, dst = (a.ravel() for a in np.meshgrid(nics, nics, indexing="ij"))
    keep = fabric.host_of_nic(src) != fabric.host_of_nic(dst)
    assume(keep.any())
    flows = FlowSet.build(src[keep], dst[keep], 100.0)
    tokens = flow_tokens(fabric, flows)
    of_arc = arc_tokens(fabric)
    counts = np.asarray(num_paths(fabric))[flow_class(fabric, flows.src_nic, flows.dst_nic)]
    for p in range(int(counts.max())):
        has = np.flatnonzero(counts > p)
        arcs = path_arcs(fabric, flows.src_nic[has], flows.dst_nic[has], np.full(has.size, p))
        hit = np.where(arcs >= 0, of_arc[np.maximum(arcs, 0)], -2)
        inside = (hit[:, :, None] == tokens[has][:, None, :]).any(axis=2) | (arcs < 0)
        assert inside.all(), (p, np.argwhere(~inside)[:3])


def _two_racks_apart(fabric: Fabric) -> FlowSet:
    """Job 0 within rack 0 and to rack 1, job 1 within rack 2 only, job 2 from rack 3 to
    rack 1 (it shares rack 1's downlinks with job 0)."""
    nic = fabric.nics_per_host * fabric.hosts_per_rack  # first NIC of rack 1
    src = np.array([0, 0, 2 * nic, 3 * nic])
    dst = np.array([1 + fabric.nics_per_host, nic, 2 * nic + fabric.nics_per_host, nic + 1])
    return FlowSet.build(src, dst, 100.0, job=np.array([0, 0, 1, 2]), job_ids=("a", "b", "c"))


def test_jobs_are_joined_by_a_rack_they_both_cross_and_only_by_one() -> None:
    fabric = build(ClosSpec(name="four", pods=1, racks_per_pod=4, hosts_per_rack=2,
                            nics_per_host=2, ctsws_per_pod=2, atsws_per_plane=0))  # fmt: skip
    flows = _two_racks_apart(fabric)
    label = job_parts(fabric, flows, 3)
    assert label[0] == label[2] != label[1]
    assert coupled_jobs(fabric, flows, 3, np.array([False, False, False, True])).tolist() == [
        True, False, True]  # fmt: skip
    assert coupled_jobs(fabric, flows, 3, np.array([False, False, True, False])).tolist() == [
        False, True, False]  # fmt: skip
