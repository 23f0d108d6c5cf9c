"""The solver on rail-optimized, rail-only and dual-plane fabrics (several RTSWs a rack).

A property test over random small shapes: every flow routed or reported, every TE path
loop-free and on installed, alive arcs only (a cross-plane link is never taken), rail and
plane kept, the MLU never below the bound, and no job below E-ECMP (the certificate, and
checked again from sim's side). The presets at published scale solve with the certificate.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.hashing import hashed
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.model.paths import path_arcs
from controller.model.rates import simulate
from controller.solver.solve import SolveOptions, solve
from sim.compare import routed as routed_as
from sim.jobmix import random_jobs

_ASKED = int(os.environ.get("FABRIC_TE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_ASKED or 40,
    derandomize=not _ASKED,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@st.composite
def layouts(draw: st.DrawFn) -> Fabric:
    """Rail-optimized (S = N), rail-only (Q = S) and dual-plane (Q = 2, NICs of 1 or 2
    ports) small shapes."""
    kind = draw(st.sampled_from(["rail", "rail-only", "dual-plane"]))
    nics = draw(st.sampled_from([2, 4])) if kind != "dual-plane" else 2 * draw(st.integers(1, 2))
    slots = nics if kind != "dual-plane" else draw(st.sampled_from([2, nics]))
    planes = {"rail": 1, "rail-only": slots, "dual-plane": 2}[kind]
    pods = draw(st.integers(1, 2))
    ctsws = planes * draw(st.integers(1, 2))
    links = draw(st.integers(1, 2)) if pods == 1 or planes == slots else 1
    spec = ClosSpec(
        name=f"fuzz-{kind}", pods=pods, racks_per_pod=draw(st.integers(1, 3)),
        hosts_per_rack=draw(st.integers(1, 3)), nics_per_host=nics, rtsws_per_rack=slots,
        planes=planes, ctsws_per_pod=ctsws, rack_links=links,
        atsws_per_plane=draw(st.integers(1, 2)) if pods > 1 else 0,
        taper=draw(st.sampled_from([1.0, 2.0])) if pods > 1 else None,
        # a dual-plane NIC of 2 ports (HPN), or its ports as NICs of their own
        ports_per_nic=draw(st.sampled_from([1, 2])) if kind == "dual-plane" else 1,
    )  # fmt: skip
    return build(spec)


def assert_no_job_below(fabric: Fabric, health: LinkHealth, flows: FlowSet, res,  # type: ignore[no-untyped-def]
                        qps: int = 16) -> None:  # fmt: skip
    """Every job's mean busbw over 4 seeds under TE at least its mean under E-ECMP, from
    sim's side (as tests/controller/solver/test_certificate.py checks it)."""
    ref_runs, te_runs = [], []
    for seed in range(1, 5):
        sub, a, parent = hashed("eecmp", fabric, flows, health, seed, qps)
        ref_runs.append(simulate(fabric, health, a, sub, parent).job_busbw_fraction)
        te_runs.append(routed_as("te", fabric, health, res.assignment, 0.0, seed, qps,
                                 res.parent, hashing="eecmp").report.job_busbw_fraction)
    ref = {j: float(np.mean([r[j] for r in ref_runs])) for j in ref_runs[0]}
    te = {j: float(np.mean([r[j] for r in te_runs])) for j in te_runs[0]}
    below = {j: (te.get(j), ref[j]) for j in ref if te.get(j, 0.0) < ref[j] * (1 - 1e-9)}
    assert not below, below


def _check(fabric: Fabric, health: LinkHealth, res, flows) -> None:  # type: ignore[no-untyped-def]
    a = res.assignment
    routed = np.flatnonzero(a.routed)
    arcs = path_arcs(fabric, a.flows.src_nic[routed], a.flows.dst_nic[routed], a.path[routed])
    cap = health.arc_capacity(fabric)
    used = arcs[arcs >= 0]
    assert (cap[used] > 0).all()  # installed and alive: never a cross-plane link
    assert fabric.installed[used // 2].all()
    src = fabric.arc_ends[0]
    for row in arcs:  # loop-free: no node twice
        nodes = src[row[row >= 0]]
        assert np.unique(nodes).size == nodes.size
    # rails and planes kept: both ends on the same slot
    s = fabric.rtsw_of_nic(a.flows.src_nic) % fabric.rtsws_per_rack
    d = fabric.rtsw_of_nic(a.flows.dst_nic) % fabric.rtsws_per_rack
    assert np.array_equal(s, d)
    # every flow routed or reported
    parent = np.asarray(res.parent)
    assert np.array_equal(np.unique(parent), np.arange(len(flows)))
    off = set(parent[~a.routed].tolist())
    reported = set(res.unroutable.tolist()) | set(res.fallback_ecmp.tolist())
    assert off <= reported | set(res.handed_back.tolist()) | set(res.hashed_flows.tolist())
    cert = res.certificate
    assert cert is not None and cert.passed and cert.below["eecmp"] == 0
    if not res.unroutable.size:
        assert cert.mlu >= res.bound.value * (1 - 1e-9) - 1e-12


@pytest.mark.fuzz
@FUZZ
@given(layouts(), st.integers(0, 2**16), st.floats(0.3, 1.0), st.integers(0, 3))
def test_fuzz_layouts_route_within_their_planes_and_no_job_below_eecmp(
    fabric: Fabric, seed: int, fill: float, failures: int
) -> None:
    rng = np.random.default_rng(seed)
    rack_links = np.arange(fabric.rack_base, fabric.agg_base)[
        fabric.installed[fabric.rack_base : fabric.agg_base]
    ]
    down = rng.choice(rack_links, size=min(failures, rack_links.size), replace=False)
    health = LinkHealth.all_up(fabric).down(down.tolist())
    jobs = random_jobs(fabric, seed=seed, fill=fill, sizes={2: 2, 3: 1, 4: 1},
                       patterns={"ring": 2, "pipeline": 1, "alltoall": 1})  # fmt: skip
    flows = jobs_flows(fabric, jobs)
    assume(len(flows) > 0)
    res = solve(fabric, health, flows, options=SolveOptions(qps=16))
    _check(fabric, health, res, flows)
    assert_no_job_below(fabric, health, flows, res)


@pytest.mark.parametrize("name", ["superpod-4su", "hpn-pod"])
def test_the_presets_solve_with_the_certificate(name: str) -> None:
    fabric = build(PRESETS[name])
    health = LinkHealth.all_up(fabric)
    flows = jobs_flows(fabric, random_jobs(fabric, seed=1))
    res = solve(fabric, health, flows)
    _check(fabric, health, res, flows)
    assert res.ratio == pytest.approx(1.0)  # full fabrics, job mix: TE meets the bound
    if name == "superpod-4su":  # the independent check costs minutes on the HPN pod
        assert_no_job_below(fabric, health, flows, res)
