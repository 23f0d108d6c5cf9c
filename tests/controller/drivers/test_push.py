"""Pushing plans through the emulated driver, with faults, and reconciling drift."""

from __future__ import annotations

import numpy as np
import pytest

from controller.drivers.push import APPLIED, FAILED, PLANNED, SKIPPED, TIMEOUT, push
from controller.drivers.reconcile import Reconciler
from controller.model.assignment import UNROUTED, Assignment
from controller.model.clos import ClosSpec, build
from controller.model.flows import FlowSet
from controller.routes.entries import build_routes, route_conflicts
from controller.routes.plan import diff
from controller.routes.tables import Entry, RouteSet
from sim.driver import EmulatedDriver
from sim.switches import DELIVERED, EmulatedFabric, Fault, verify

WIDE = ClosSpec(
    name="wide", pods=2, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
    ctsws_per_pod=2, rack_links=2, atsws_per_plane=2, agg_links=2, taper=1.0,
)  # fmt: skip
FABRIC = build(WIDE)


def workload(shift: int) -> Assignment:
    """Every NIC to the same NIC two racks on (cross pod), paths rotated by `shift`."""
    src = np.arange(FABRIC.num_nics)
    dst = (src + 2 * FABRIC.hosts_per_rack * FABRIC.nics_per_host) % FABRIC.num_nics
    a = Assignment(FlowSet.build(src, dst, 100.0), (src * 17 + shift * 5) % 64)
    return Assignment(a.flows, np.where(route_conflicts(FABRIC, a), UNROUTED, a.path))


@pytest.fixture
def em():
    return EmulatedFabric(FABRIC, seed=3)


@pytest.fixture
def driver(em):
    return EmulatedDriver(emulated=em)


def delivered(em, assignment):
    walks = em.forward(assignment.flows.src_nic, assignment.flows.dst_nic)
    return bool((walks.status == DELIVERED).all())


def installed_now(em):
    return em.routes()


def test_push_installs_the_plan_and_reads_it_back(em, driver):
    a = workload(0)
    wanted = build_routes(FABRIC, a)
    report = push(driver, diff(RouteSet(), wanted, FABRIC), timeout=1.0, retries=1)
    assert report.ok, report.summary()
    assert report.installed == wanted == em.routes()
    assert verify(FABRIC, em, a).ok
    assert {r.status for r in report.results} == {APPLIED}


def test_dry_run_changes_nothing(em, driver):
    plan = diff(RouteSet(), build_routes(FABRIC, workload(0)), FABRIC)
    report = push(driver, plan, dry_run=True)
    assert report.dry_run and {r.status for r in report.results} == {PLANNED}
    assert len(em.routes()) == 0
    assert "dry run" in report.summary()


def test_a_switch_that_times_out_once_is_retried(em, driver):
    em.inject("atsw-c0-a0", Fault("timeout", delay=0.01))
    report = push(driver, diff(RouteSet(), build_routes(FABRIC, workload(0)), FABRIC),
                  timeout=0.5, retries=2)  # fmt: skip
    assert report.ok
    (result,) = [r for r in report.results if r.switch == "atsw-c0-a0"]
    assert result.attempts == 2


def update(em, driver, fault_switch, fault):
    """Install workload 0, then push the move to workload 1 with a fault injected."""
    old, new = workload(0), workload(1)
    assert push(driver, diff(RouteSet(), build_routes(FABRIC, old), FABRIC)).ok
    plan = diff(em.routes(), build_routes(FABRIC, new), FABRIC)
    assert fault_switch in plan.switches()
    em.inject(fault_switch, fault)
    return old, new, plan, push(driver, plan, timeout=0.2, retries=1)


def stopped_at(report):
    (stage,) = {r.stage for r in report.failed}
    assert all(r.status == SKIPPED for r in report.results if r.stage > stage)
    assert all(r.status == APPLIED for r in report.results if r.stage < stage)
    return stage


def test_a_switch_that_keeps_timing_out_stops_the_push_consistently(em, driver):
    old, new, plan, report = update(em, driver, "atsw-c1-a0", Fault("timeout", 5, 0.01))
    assert not report.ok
    assert stopped_at(report) == 1
    (bad,) = report.failed
    assert bad.status == TIMEOUT and bad.attempts == 2 and "DriverTimeout" in bad.error
    assert report.uncertain == ("atsw-c1-a0",)
    assert report.installed == em.routes().only(plan.switches())
    assert delivered(em, old) and delivered(em, new)
    rtsws = [n for n in em.names() if n.startswith("rtsw")]
    assert em.routes().only(rtsws) == build_routes(FABRIC, old).only(rtsws)  # not switched yet


def test_a_rejected_batch_is_not_retried(em, driver):
    _, new, _, report = update(em, driver, "ctsw-p1-c1", Fault("reject", 5))
    (bad,) = report.failed
    assert bad.status == FAILED and bad.attempts == 1 and "DriverRejected" in bad.error
    stopped_at(report)
    assert delivered(em, new)


def test_a_switch_dying_halfway_is_reported_unreadable(em, driver):
    old, new, plan, report = update(em, driver, "rtsw-p0-r0", Fault("die_halfway"))
    assert not report.ok
    assert "rtsw-p0-r0" in report.unreadable
    assert "rtsw-p0-r0" not in report.installed.tables
    assert delivered(em, old) and delivered(em, new)
    em.restart("rtsw-p0-r0")
    repair = Reconciler(driver, FABRIC, rounds=1).run(build_routes(FABRIC, new))
    assert repair.ops == 0 and not repair.in_sync  # one round: read and report
    repair = Reconciler(driver, FABRIC, backoff=0.0).run(build_routes(FABRIC, new))
    assert repair.ops > 0 and repair.in_sync and repair.rounds == 2
    assert verify(FABRIC, em, new).ok


def test_a_switch_restarting_empty_mid_push_loses_old_entries_but_stays_safe(em, driver):
    old, new, plan, report = update(em, driver, "ctsw-p0-c0", Fault("restart"))
    assert report.ok  # the retry landed on the rebooted switch
    assert delivered(em, new)
    drift = Reconciler(driver, FABRIC).run(build_routes(FABRIC, new), repair=False)
    assert drift.ops == 0 and drift.rounds == 1
    assert set(drift.differing) <= {"ctsw-p0-c0"}


def test_links_going_down_mid_push_never_black_hole(em, driver):
    dead = (FABRIC.agg_link(1, 1, 1, 0), FABRIC.rack_link(3, 0, 1))
    old, new, plan, report = update(em, driver, "atsw-c1-a1", Fault("link_down", links=dead))
    assert report.ok
    assert delivered(em, old) and delivered(em, new)
    off = verify(FABRIC, em, new).off_path
    alive = np.repeat(em.alive, 2)
    arcs = new.arcs(FABRIC)
    assert all((~alive[arcs[f][arcs[f] >= 0]]).any() for f in off)


def test_reconcile_repairs_drift_and_leaves_foreign_entries(em, driver):
    a = workload(0)
    wanted = build_routes(FABRIC, a)
    assert push(driver, diff(RouteSet(), wanted, FABRIC)).ok
    victim = wanted.table("ctsw-p1-c0")[0]
    em.program(victim.switch, remove=[victim.match])
    rtsw = wanted.table("rtsw-p0-r1")[0]
    wrong = Entry(rtsw.switch, rtsw.in_port, rtsw.dst_host,
                  FABRIC.rack_link(1, 1, 1) if rtsw.next_hop != FABRIC.rack_link(1, 1, 1)
                  else FABRIC.rack_link(1, 0, 0))  # fmt: skip
    extra = Entry("atsw-c0-a1", FABRIC.agg_link(0, 0, 1, 0), 0, FABRIC.agg_link(0, 0, 1, 1))
    foreign = Entry("ctsw-p0-c1", FABRIC.rack_link(0, 1, 0), 3, FABRIC.rack_link(1, 1, 0), "ops")
    em.program(wrong.switch, [wrong])
    em.program(extra.switch, [extra])
    em.program(foreign.switch, [foreign])
    seen = Reconciler(driver, FABRIC).run(wanted, repair=False)  # what drifted, per switch
    assert not seen.in_sync
    assert seen.differing == {"ctsw-p1-c0": 1, "rtsw-p0-r1": 1, "atsw-c0-a1": 1}
    assert seen.missing == {"ctsw-p1-c0": 1, "rtsw-p0-r1": 1, "atsw-c0-a1": 0}  # extra: unwanted
    report = Reconciler(driver, FABRIC, backoff=0.0).run(wanted)
    assert report.ops == 3 and report.in_sync and report.rounds == 2
    assert foreign in em.read("ctsw-p0-c1")  # another owner's entry is left alone
    assert em.routes() == RouteSet.from_entries([*wanted, foreign])
    again = Reconciler(driver, FABRIC).run(wanted)
    assert again.in_sync and again.ops == 0 and again.rounds == 1
    assert verify(FABRIC, em, a).ok


def test_reconcile_only_touches_owned_switches(em, driver):
    wanted = build_routes(FABRIC, workload(0))
    report = Reconciler(driver, FABRIC, backoff=0.0).run(wanted, ["rtsw-p0-r0"])
    assert report.ops > 0 and report.checked == ("rtsw-p0-r0",)
    assert em.routes().switches() == ("rtsw-p0-r0",)
