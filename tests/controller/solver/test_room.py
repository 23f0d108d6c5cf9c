"""The jobs with room handed back first (controller.solver.room): which jobs, by hand."""

from __future__ import annotations

import numpy as np

from controller.model.clos import ClosSpec, build
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.solver.job_objective import predict
from controller.solver.room import Below, jobs_with_room

# one pod of two racks of three one-NIC hosts, one CTSW: every flow between the racks
# crosses the same two rack links
FABRIC = build(ClosSpec(name="room", pods=1, racks_per_pod=2, hosts_per_rack=3,
                        nics_per_host=1, ctsws_per_pod=1, rack_links=1,
                        atsws_per_plane=0))  # fmt: skip


def test_only_a_job_with_room_on_a_failing_jobs_full_link_is_chosen() -> None:
    # A, B, D cross rack 0's uplink, degraded so that it is over capacity; C stays in rack 1
    flows = FlowSet.build([0, 1, 2, 3], [3, 4, 5, 4], 400.0, job=[0, 1, 2, 3],
                          job_ids=("A", "B", "D", "C"))  # fmt: skip
    uplink = int(FABRIC.rack_link(0, 0))
    factor = np.ones(FABRIC.num_links)
    factor[uplink] = 0.25
    health = LinkHealth(factor)
    path = np.zeros(len(flows), np.int64)  # the one path of each flow
    parent = np.arange(len(flows))
    kw = dict(qps=16, kind="eecmp", seeds=(1,), model="striped")
    value = predict(FABRIC, health, flows, path, parent, flows, **kw).values
    assert value[0] == value[1] == value[2] < value[3]  # three share the degraded link
    # A below its reference (failing); B with room; D exactly at its reference (no room);
    # C with room but on no link A crosses
    reference = np.array([2 * value[0], value[1] / 2, value[2], 0.5])
    chosen, below = jobs_with_room(FABRIC, health, flows, path, parent, flows, reference, **kw)
    assert chosen.tolist() == [1] and below == Below(1, 0.5)
    # nobody failing: nobody handed back first
    assert jobs_with_room(FABRIC, health, flows, path, parent, flows, value, **kw)[0].size == 0
    # B already on hashing (no TE row): nothing of it to hand back
    riding = path.copy()
    riding[1] = -1
    got, _ = jobs_with_room(FABRIC, health, flows, riding, parent, flows, reference, **kw)
    assert 1 not in got.tolist()
    # one path between the racks: B hashed takes it too, and nothing is better
    after = jobs_with_room(FABRIC, health, flows, riding, parent, flows, reference, **kw)[1]
    assert after == below and not below.bettered_by(after)
    assert below.bettered_by(Below(0, 0.6)) and not below.bettered_by(Below(0, 0.4))


def test_the_routing_with_them_handed_back_is_certified_and_says_who() -> None:
    """Scenario 111 of the certificate bench on `small`: the first certificate hands jobs
    back, two jobs with room crowd them; the routing made with those two on hashing is
    certified, and its certificate and result list them as handed back, with why."""
    import importlib
    import time

    from controller.model.assignment import UNROUTED
    from controller.model.clos import PRESETS
    from controller.model.jobs import jobs_flows
    from controller.solver.certificate import CertifyOptions
    from sim.bench_certificate import scenario_health
    from sim.jobmix import random_jobs

    solve = importlib.import_module("controller.solver.solve")
    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=111))
    health = scenario_health(fabric, 111)
    opts = solve.SolveOptions(certify=CertifyOptions(compare=("wcmp",)))
    placed = solve._placed(fabric, health, flows, None, opts, time.perf_counter())
    placed = solve.job_objective(fabric, health, flows, placed, None, opts)
    first = solve.certified(fabric, health, placed, opts, inputs=flows)
    assert first.certificate is not None and first.certificate.fallback_jobs
    rows, parent = placed.assignment.flows, np.asarray(placed.parent)
    room, _ = jobs_with_room(fabric, health, rows, placed.assignment.path, parent, flows,
                             first.certificate.reference_values, qps=opts.qps, kind="eecmp",
                             seeds=first.certificate.seeds, model="striped")  # fmt: skip
    assert room.size
    path = placed.assignment.path.copy()
    path[np.isin(rows.job, room)] = UNROUTED
    out = solve._handed_first(fabric, health, flows, placed, room, path, opts, None, None)
    cert = out.certificate
    assert cert is not None and cert.passed and cert.below["eecmp"] == 0
    mine = np.isin(rows.job, room)
    assert (out.assignment.path[mine] == UNROUTED).all()
    for j in room.tolist():
        assert cert.fallback_jobs[flows.job_ids[j]].startswith("room above eecmp")
    theirs = np.unique(parent[mine & placed.assignment.routed])
    assert set(theirs.tolist()) <= set(out.handed_back.tolist())
    assert cert.fallback_flows == out.handed_back.size
