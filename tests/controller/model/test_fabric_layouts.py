"""Rail-optimized and dual-ToR dual-plane layouts: S RTSWs per rack, Q planes.

The formulas are checked against a per-object reading of the layout (NIC n of a host on
slot n % S of its rack; CTSW c cabled only to slots of plane c % Q), and the job flows are
checked to keep rail n on rail n and plane p on plane p.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.errors import FabricError
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import ACCESS, RACK
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from sim.jobmix import random_jobs

RAIL = ClosSpec(name="rail", pods=1, racks_per_pod=2, hosts_per_rack=3, nics_per_host=4,
                rtsws_per_rack=4, ctsws_per_pod=4, rack_links=2)  # fmt: skip
DUAL = ClosSpec(name="dual", pods=2, racks_per_pod=2, hosts_per_rack=2, nics_per_host=4,
                rtsws_per_rack=2, planes=2, ctsws_per_pod=4, atsws_per_plane=1,
                taper=1.0)  # fmt: skip


def test_a_nic_sits_under_slot_n_mod_s_of_its_rack() -> None:
    f = build(RAIL)
    assert f.num_rtsws == 2 * 4 and f.rtsws_per_pod == 8
    for host in range(f.num_hosts):
        rack = host // f.hosts_per_rack
        for n in range(f.nics_per_host):
            nic = f.nic_id(host, n)
            assert int(f.rtsw_of_nic(nic)) == rack * 4 + n % 4
            assert int(f.rack_of_nic(nic)) == rack
    nics = np.arange(f.num_nics)
    assert np.array_equal(f.rtsw_of_nic(nics), [f.rtsw_of_nic(int(n)) for n in nics])
    assert f.rtsws_of_rack(1).tolist() == [4, 5, 6, 7]


def test_link_ends_follow_the_slots() -> None:
    f = build(DUAL)
    lo, hi = f.link_ends
    access = np.flatnonzero(f.link_kind == ACCESS)
    assert np.array_equal(hi[access] - f.node_id("rtsw", 0), f.rtsw_of_nic(access))
    rack = np.flatnonzero(f.link_kind == RACK)
    rtsw = lo[rack] - f.node_id("rtsw", 0)
    ctsw = hi[rack] - f.node_id("ctsw", 0)
    assert np.array_equal(f.pod_of_rtsw(rtsw), ctsw // f.ctsws_per_pod)
    ups = f.rack_uplinks()
    assert ups.shape == (f.num_rtsws, f.ctsws_per_pod, f.rack_links)
    assert np.array_equal(lo[ups.reshape(f.num_rtsws, -1)] - f.node_id("rtsw", 0),
                          np.repeat(np.arange(f.num_rtsws), f.ctsws_per_pod * f.rack_links)
                          .reshape(f.num_rtsws, -1))  # fmt: skip
    # names carry the slot; the index names of S = 1 fabrics do not change
    assert f.rtsw_name(5) == "rtsw-p1-r0-s1" and build(PRESETS["tiny"]).rtsw_name(3) == "rtsw-p1-r1"
    assert f.link_name(f.access_link(f.nic_id(0, 3))) == "host-p0-r0-h0/nic3:rtsw-p0-r0-s1"


def test_planes_install_only_the_links_within_a_plane() -> None:
    f = build(DUAL)
    lo, hi = f.link_ends
    rack = np.flatnonzero(f.link_kind == RACK)
    slot = (lo[rack] - f.node_id("rtsw", 0)) % f.rtsws_per_rack
    c = (hi[rack] - f.node_id("ctsw", 0)) % f.ctsws_per_pod
    assert np.array_equal(f.installed[rack], slot % 2 == c % 2)
    assert f.installed[f.link_kind != RACK].all()
    health = LinkHealth.all_up(f)
    assert (health.factor[rack][slot % 2 != c % 2] == 0).all()
    assert not health.changed(f).size  # the missing cables are the fabric, not a failure
    with pytest.raises(FabricError, match="not installed"):
        f.check_installed(rack[slot % 2 != c % 2][:1])


def test_job_flows_keep_their_rail_and_their_plane() -> None:
    for spec in (RAIL, DUAL, PRESETS["superpod-4su"]):
        f = build(spec)
        flows = jobs_flows(f, random_jobs(f, seed=3))
        assert len(flows)
        n_src = flows.src_nic % f.nics_per_host
        n_dst = flows.dst_nic % f.nics_per_host
        assert np.array_equal(n_src, n_dst)
        s_src = f.rtsw_of_nic(flows.src_nic) % f.rtsws_per_rack
        s_dst = f.rtsw_of_nic(flows.dst_nic) % f.rtsws_per_rack
        assert np.array_equal(s_src, s_dst)
        assert np.array_equal(s_src % f.planes, s_dst % f.planes)


def test_shapes_that_do_not_fit_are_refused() -> None:
    with pytest.raises(FabricError, match="rtsws_per_rack: 3 does not divide nics_per_host"):
        build(ClosSpec(nics_per_host=4, rtsws_per_rack=3))
    with pytest.raises(FabricError, match="planes: 2 must divide"):
        build(ClosSpec(nics_per_host=4, rtsws_per_rack=4, planes=2, ctsws_per_pod=3))
    with pytest.raises(FabricError, match="could not tell a host's RTSWs apart"):
        build(ClosSpec(pods=2, nics_per_host=4, rtsws_per_rack=4, ctsws_per_pod=4,
                       rack_links=2, atsws_per_plane=1, taper=1.0))  # fmt: skip
    with pytest.raises(FabricError, match="rtsws_per_rack"):
        build(ClosSpec(rtsws_per_rack=0))


# the fingerprints the presets had before racks could hold several RTSWs: route files and
# driver tables written then carry them, and must still load
OLD_FINGERPRINTS = {
    "tiny": "sha256:aac9b9ec6d0e31a1", "small": "sha256:04b5e21182b20c80",
    "wide": "sha256:03a5f8fbebfd39ad", "pod": "sha256:ce24e8c487555235",
    "meta-24k": "sha256:a4976a2dee5714f1", "meta-24k-1125": "sha256:bf45077bd54e5abb",
    "cluster-100k": "sha256:cfc9a400a53db090",
}  # fmt: skip


def test_old_shapes_keep_their_fingerprints_and_new_ones_differ() -> None:
    for name, fingerprint in OLD_FINGERPRINTS.items():
        assert build(PRESETS[name]).fingerprint == fingerprint, name
    a = build(RAIL)
    b = build(ClosSpec(**{**RAIL.__dict__, "rtsws_per_rack": 2}))
    c = build(ClosSpec(**{**RAIL.__dict__, "planes": 2}))
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3


def test_the_published_scale_presets() -> None:
    sp = build(PRESETS["superpod-4su"])
    s = sp.summary()
    assert (s["gpus"], s["hosts"], s["racks"], s["rtsws"], s["ctsws"]) == (1024, 128, 4, 32, 16)
    assert s["rack_uplink_ratio"] == 1.0  # 1:1 leaves
    hpn = build(PRESETS["hpn-pod"])
    s = hpn.summary()
    # 15 segments x 128 hosts x 8 GPUs, each NIC of 2 ports (30,720 model NICs); 16 ToRs a
    # segment, 60 aggregation switches a plane; a ToR's 60 x 400G up against 128 x 200G down
    assert (s["hosts"], s["gpus"], s["rtsws"], s["ctsws"]) == (1920, 15360, 240, 120)
    assert hpn.num_nics == 30720 and hpn.gpus_per_host == 8 and s["ports_per_nic"] == 2
    assert s["rack_uplink_ratio"] == pytest.approx(24_000 / 25_600)
    assert int(hpn.installed[hpn.rack_base : hpn.agg_base].sum()) == 240 * 60
