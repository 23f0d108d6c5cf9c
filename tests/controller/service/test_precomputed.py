"""Precomputed repairs in the running engine: each equals the on-demand repair's certified
outcome, a report that matches one uses it, and a set computed for older jobs, health or
routes is never used (the on-demand path runs until the refresh is done)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from controller.cli.service import _precomputed_lines
from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.failures import single_failures
from controller.model.health import LinkHealth
from controller.model.jobs import Job
from controller.routes.entries import build_routes
from controller.service.engine import Engine
from controller.service.precomputed import priority
from controller.solver import RouteIndex, repair_indexed
from sim.driver import EmulatedDriver

FABRIC: Fabric = build(PRESETS["small"])
WAIT = 60.0


def _jobs() -> list[Job]:
    # small: 32 hosts; three jobs of 8 hosts over several racks
    return [Job(f"j{i}", tuple(range(i, 32, 4))[:8], dp=8, tp=4) for i in range(3)]


def _engine(precompute: bool = True, process: bool | None = None, **options: int) -> Engine:
    """An engine with `_jobs()` installed (`options`: more precompute_* keywords)."""
    engine = Engine(FABRIC, EmulatedDriver(FABRIC), debounce=0.0, reconcile_interval=60.0,
                    precompute=precompute, precompute_settle=0.0,
                    precompute_process=process, **options)  # type: ignore[arg-type]  # fmt: skip
    for job in _jobs():
        engine.put_job(job, 0)
    assert engine.wait_idle(WAIT)
    return engine


@pytest.fixture(params=["process", "thread"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """An engine with three jobs installed, its set computed in a child process (the
    default) or in the thread."""
    e = _engine(process=request.param == "process")
    yield e
    e.close()


def _done(engine: Engine) -> None:
    """Wait until the set answers to what is installed and is complete."""
    target = engine.installer.target
    assert engine.precomputer.wait(
        lambda f: bool(f["done"]) and engine.precomputer.answers_to(
            target, engine._jobs_version, engine.react), WAIT)  # fmt: skip


def _published(engine: Engine) -> None:
    """Wait until the set of what is installed is published (its elements may still be
    under way): a report is then judged against it, not found stale."""
    target = engine.installer.target
    assert target is not None
    assert engine.precomputer.wait(
        lambda f: engine.precomputer.lookup(target, engine._jobs_version, engine.react,
                                            target.health, False).reason != "stale", WAIT)


def _reports(engine: Engine, path: str, reason: str = "") -> float:
    value = engine.metrics.registry.get_sample_value(
        "fabric_te_precomputed_reports_total", {"path": path, "reason": reason})
    return value or 0.0


def _used_link(engine: Engine, skip: int = 0) -> int:
    """A RTSW-CTSW link the installed routing uses (the skip-th)."""
    target = engine.installer.target
    assert target is not None
    arcs = target.assignment.arcs(FABRIC)
    used = np.unique(arcs[:, 1][arcs[:, 1] >= 0] // 2)
    return int(used[skip])


def _cert(c: object) -> tuple:
    assert c is not None
    return (c.passed, c.pending, c.worst_ratio, c.below, c.fallback_jobs,  # type: ignore[attr-defined]
            c.fallback_flows, c.jobs, c.jobs_checked, round(c.mlu, 12))  # type: ignore[attr-defined]


def test_every_precomputed_repair_equals_the_on_demand_repair(engine: Engine) -> None:
    _done(engine)
    target = engine.installer.target
    assert target is not None
    failures = single_failures(FABRIC, target.health)
    ready = engine.precomputer.ready()
    assert len(ready) == len(failures) > 0
    index = RouteIndex.build(FABRIC, target.assignment)
    base = engine.precomputer.lookup(target, engine._jobs_version, engine.react,
                                     failures.health_after(target.health, 0), False).index
    assert base is not None
    for hit in ready:
        health = failures.health_after(target.health, hit.element)
        want, want_index = repair_indexed(health, index, old_health=target.health,
                                          certify_options=engine.react, qps=engine.options.qps)
        got, got_index = hit.applied(base)
        assert got.certificate is not None and not got.certificate.pending
        assert _cert(got.certificate) == _cert(want.certificate)  # verdict, per-job values
        np.testing.assert_array_equal(got.assignment.path, want.assignment.path)
        np.testing.assert_array_equal(got.churn, want.churn)
        np.testing.assert_array_equal(got.unroutable, want.unroutable)
        np.testing.assert_array_equal(got_index.load, want_index.load)
        np.testing.assert_array_equal(got_index.count, want_index.count)
        assert got.mlu == want.mlu
        # blast radius: a moved row crossed the element, or had no path (retried), or was
        # handed back to the hashing (the certificate, or a table over its budget)
        moved = want.churn
        assert hit.rows_moved == moved.size
        links = failures.links_of(hit.element)
        arcs = index.arcs_of(moved)
        crossed = np.isin(arcs // 2, links) & (arcs >= 0)
        off = moved[~crossed.any(axis=1)]
        assert hit.rows_off_element == off.size
        assert ((target.assignment.path[off] < 0) | (want.assignment.path[off] < 0)).all()
        assert hit.jobs_moved == np.unique(target.assignment.flows.job[moved]).size


def test_repairs_given_up_for_the_engine_are_made_again_the_same() -> None:
    """A repair under way gives way when the engine gets busy (repair_indexed's `stop`)
    and is made again from the start: every element ends ready, equal to on demand."""
    import itertools

    engine = Engine(FABRIC, EmulatedDriver(FABRIC), debounce=0.0, reconcile_interval=60.0,
                    precompute_settle=0.0, precompute_process=False)  # fmt: skip
    pc = engine.precomputer
    real, calls = pc._busy, itertools.count()
    pc._busy = lambda: real() or next(calls) % 3 == 2  # busy at every third look
    try:
        for job in _jobs():
            engine.put_job(job, 0)
        assert engine.wait_idle(WAIT)
        _done(engine)
        assert pc.gave_way > 0
        target = engine.installer.target
        assert target is not None
        failures = single_failures(FABRIC, target.health)
        assert len(pc.ready()) == len(failures)
        index = RouteIndex.build(FABRIC, target.assignment)
        base = pc.lookup(target, engine._jobs_version, engine.react,
                         failures.health_after(target.health, 0), False).index
        assert base is not None
        for hit in pc.ready():
            health = failures.health_after(target.health, hit.element)
            want, _ = repair_indexed(health, index, old_health=target.health,
                                     certify_options=engine.react, qps=engine.options.qps)
            got, _ = hit.applied(base)
            assert _cert(got.certificate) == _cert(want.certificate)
            np.testing.assert_array_equal(got.assignment.path, want.assignment.path)
    finally:
        engine.close()


def test_a_repair_asked_to_stop_raises_and_one_never_asked_is_unchanged(
        engine: Engine) -> None:  # fmt: skip
    from controller.errors import Superseded

    target = engine.installer.target
    assert target is not None
    index = RouteIndex.build(FABRIC, target.assignment)
    health = target.health.down([_used_link(engine)])
    with pytest.raises(Superseded):
        repair_indexed(health, index, old_health=target.health, stop=lambda: True)
    plain, _ = repair_indexed(health, index, old_health=target.health)
    asked, _ = repair_indexed(health, index, old_health=target.health, stop=lambda: False)
    np.testing.assert_array_equal(plain.assignment.path, asked.assignment.path)
    assert _cert(plain.certificate) == _cert(asked.certificate)


def test_a_single_link_down_uses_the_precomputed_repair_with_the_same_outcome(
    engine: Engine,
) -> None:
    other = _engine(precompute=False)
    try:
        _done(engine)
        link = _used_link(engine)
        # pushes planned as row positions, the route log's deltas too (the switches held
        # exactly the wanted tables)
        planned = [r.planned for r in engine.precomputer.ready()
                   if r.planned is not None and r.planned.plan is not None]  # fmt: skip
        assert planned and all(p.splices is not None and p.splices.logged is not None
                               for p in planned)  # fmt: skip
        version, routes = engine.snapshot()
        entries = {e.key: e for e in routes}
        for e in (engine, other):
            e.report_links({link: 0.0})
            assert e.wait_idle(WAIT)
        assert engine.precomputed_hits == 1 and other.precomputed_hits == 0
        target = engine.installer.target
        assert target is not None  # the wanted routes spliced are the repair's routes
        assert engine.installer.wanted() == build_routes(FABRIC, target.assignment)
        # the route log's deltas since take the routes before to the routes after
        deltas = engine.installer.routes.after(version, engine.routes_epoch)
        assert deltas
        for d in deltas:
            for e in d.removed:
                assert entries.pop(e.key) == e
            entries.update({e.key: e for e in d.added})
        assert sorted(entries.values()) == sorted(engine.installed)
        assert _reports(engine, "precomputed") == 1
        assert _reports(other, "on_demand", "off") == 1
        assert engine.installed == other.installed  # the same routes installed
        assert _cert(engine.certificate) == _cert(other.certificate)
        assert engine.marks.ok
        hops = {h for sw in engine.installed.switches()
                for h in engine.installed.table(sw).next_hop.tolist()}  # fmt: skip
        assert link not in hops
        # the restore is not a single failure: on demand; and both engines agree again
        # (judged against the set of what is installed now: until that set is published a
        # report is found stale, which a loaded machine made the outcome)
        _published(engine)
        for e in (engine, other):
            e.report_links({link: 1.0})
            assert e.wait_idle(WAIT)
        assert _reports(engine, "on_demand", "not single") == 1
        assert engine.installed == other.installed
    finally:
        other.close()


def test_a_switch_down_uses_the_precomputed_repair(engine: Engine) -> None:
    _done(engine)
    target = engine.installer.target
    assert target is not None
    failures = single_failures(FABRIC, target.health, ("ctsw",))
    ctsw = failures.links_of(0)
    engine.report_links(dict.fromkeys(ctsw.tolist(), 0.0))
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 1


def test_degradations_and_double_failures_go_on_demand(engine: Engine) -> None:
    _published(engine)  # judged against the set of what is installed, ready or not
    a, b = _used_link(engine, 0), _used_link(engine, 1)
    engine.report_links({a: 0.5})
    assert engine.wait_idle(WAIT)
    _published(engine)
    engine.report_links({a: 1.0})
    assert engine.wait_idle(WAIT)
    _published(engine)
    engine.report_links({a: 0.0, b: 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 0
    assert _reports(engine, "on_demand", "not single") == 3


class _Flag:
    """An event seen across the fork, that a child killed while waiting on it cannot
    wedge (a multiprocessing.Event's set waits for its sleepers to wake): a file, in the
    test's own folder (a child leaves without running finalizers)."""

    folder = ""

    def __init__(self) -> None:
        assert self.folder, "flags live in the test's tmp_path (the _flag_folder fixture)"
        fd, self.path = tempfile.mkstemp(prefix="flag-", dir=self.folder)
        os.close(fd)
        os.unlink(self.path)

    def set(self) -> None:
        open(self.path, "w").close()

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_set():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True


@pytest.fixture(autouse=True)
def _flag_folder(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(_Flag, "folder", str(tmp_path))


class _Gate:
    """Holds the precomputing thread or process before each repair until opened."""

    def __init__(self, engine: Engine) -> None:
        self.open = _Flag()
        inner = engine.precomputer._repair

        def gated(*args):  # type: ignore[no-untyped-def]
            assert self.open.wait(WAIT)
            return inner(*args)

        engine.precomputer._repair = gated


def test_a_refresh_under_way_never_delays_a_push(engine: Engine) -> None:
    """The refresh held inside an element's repair, mid-way through its set: a job put and
    a link report are both solved, pushed and read back meanwhile; the refresh resumes
    after, and what it held is never used (a newer base replaced it)."""
    _done(engine)
    inside, release, left = _Flag(), _Flag(), _Flag()
    inner, calls = engine.precomputer._repair, [0]

    def held(*args):  # type: ignore[no-untyped-def]
        calls[0] += 1  # counted in each child from 0, in the thread once
        if calls[0] == 3:  # the third element of the next refresh
            inside.set()
            assert release.wait(WAIT)
            left.set()
        return inner(*args)

    engine.precomputer._repair = held
    a, b = _used_link(engine, 0), _used_link(engine, 1)
    engine.report_links({a: 0.5})  # a degradation (on demand): a new base, a new refresh
    assert engine.wait_idle(WAIT)
    assert inside.wait(WAIT)
    assert 0 < int(engine.precomputer.fields()["ready"]) < int(
        engine.precomputer.fields()["total"])  # fmt: skip
    version = engine.snapshot()[0]
    engine.put_job(Job("j3", tuple(range(3, 32, 4))[:8], dp=8, tp=4), 0)
    assert engine.wait_idle(WAIT)
    assert engine.snapshot()[0] > version  # the job's routes read back
    assert any(job.id == "j3" for job, _ in engine.jobs())
    version = engine.snapshot()[0]
    engine.report_links({b: 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.snapshot()[0] > version  # the link's repair read back
    assert not left.is_set()  # all the while the refresh was held where it was
    assert engine.precomputed_hits == 0
    release.set()
    _done(engine)  # the refresh of what is installed now, complete
    assert left.is_set()
    hops = {h for sw in engine.installed.switches()
            for h in engine.installed.table(sw).next_hop.tolist()}  # fmt: skip
    assert b not in hops


def test_after_a_job_change_reports_go_on_demand_until_the_refresh_is_done(
    engine: Engine,
) -> None:
    _done(engine)
    gate = _Gate(engine)
    engine.delete_job("j2")  # the set answers to the jobs before: stale from now
    assert engine.wait_idle(WAIT)
    engine.report_links({_used_link(engine): 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 0
    assert _reports(engine, "on_demand", "stale") + _reports(engine, "on_demand", "not ready") == 1
    gate.open.set()
    _done(engine)
    engine.report_links({_used_link(engine, 1): 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 1


def test_a_report_while_jobs_change_goes_on_demand(engine: Engine) -> None:
    """A job put and a link report taken in one round: the set (for the jobs before) is
    not used, even though the installed routing is still the one it was computed for."""
    _published(engine)
    with engine._cond:  # both land before the worker takes them
        engine.intake.put_job(Job("late", (3, 7, 11, 15), dp=4, tp=4), 0)
        engine.intake.report_links({_used_link(engine): 0.0}, False)
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 0 and _reports(engine, "on_demand", "stale") == 1


def test_after_a_health_change_a_second_failure_goes_on_demand_until_refreshed(
    engine: Engine,
) -> None:
    _done(engine)
    gate = _Gate(engine)
    engine.report_links({_used_link(engine, 0): 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 1  # the set of the routes before
    second = _used_link(engine, 1)
    engine.report_links({second: 0.0})  # the set now is for the repaired routes: not ready
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 1
    gate.open.set()
    _done(engine)
    third = _used_link(engine, 2)
    engine.report_links({third: 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 2


def test_routes_applied_from_a_file_and_rolled_back_are_never_served_by_an_old_set(
    engine: Engine,
) -> None:
    target = engine.installer.target  # routes held from a file: on demand, ready or not
    assert target is not None
    own = target.assignment
    engine.apply_routes(own, build_routes(FABRIC, own), "same.npz")
    assert engine.wait_idle(WAIT)
    engine.report_links({_used_link(engine, 0): 0.0})  # held: repaired on demand
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 0 and _reports(engine, "on_demand", "held") == 1
    gate = _Gate(engine)
    engine.rollback_routes()
    assert engine.wait_idle(WAIT)
    engine.report_links({_used_link(engine, 1): 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 0
    gate.open.set()
    _done(engine)
    engine.report_links({_used_link(engine, 2): 0.0})
    assert engine.wait_idle(WAIT)
    assert engine.precomputed_hits == 1


def test_the_compute_order_puts_links_first_fewest_rows_first(engine: Engine) -> None:
    target = engine.installer.target
    assert target is not None
    index = RouteIndex.build(FABRIC, target.assignment)
    failures = single_failures(FABRIC, LinkHealth.all_up(FABRIC))
    order = priority(failures, index)
    assert sorted(order.tolist()) == list(range(len(failures)))
    kinds = failures.kind[order]
    assert (np.diff((kinds != 0).astype(int)) >= 0).all()  # links, then switches
    per_link = index.count[0::2] + index.count[1::2]
    rows = np.array([per_link[failures.links_of(i)].sum() for i in order.tolist()])
    links = kinds == 0
    assert (np.diff(rows[links]) >= 0).all() and (np.diff(rows[~links]) >= 0).all()


def test_metrics_say_what_is_ready(engine: Engine) -> None:
    _done(engine)
    get = engine.metrics.registry.get_sample_value
    fields = engine.precomputer.fields()
    assert get("fabric_te_precomputed_elements", {"state": "ready"}) == fields["ready"]
    assert get("fabric_te_precomputed_elements", {"state": "total"}) == fields["total"] > 0
    assert get("fabric_te_precomputed_generation") == fields["generation"] >= 1
    assert get("fabric_te_precomputed_bytes") == fields["bytes"] > 0


def test_the_blast_radius_of_the_set_in_metrics_and_status(engine: Engine) -> None:
    """Rows and jobs moved per repair ready, summed as they are made, equal a pass over the
    set; Status lists the widest repairs, most rows first, and /metrics the aggregates."""
    from controller.service import convert

    _done(engine)
    ready = engine.precomputer.ready()
    rows = np.array([r.rows_moved for r in ready])
    jobs = np.array([r.jobs_moved for r in ready])
    fields = engine.precomputer.fields()
    assert fields["rows_moved_max"] == rows.max() > 0
    assert fields["rows_moved_mean"] == pytest.approx(rows.mean())
    assert fields["jobs_moved_max"] == jobs.max()
    assert fields["elements_moving_others"] == sum(r.rows_off_element > 0 for r in ready)
    widest = engine.precomputer.widest()
    # those that move rows only (Status listed repairs moving 0 rows as the widest)
    moving = [r for r in ready if r.rows_moved]
    assert len(moving) < len(ready)
    expected = sorted(moving, key=lambda r: (-r.rows_moved, r.element))[:10]
    assert [r.element for r in widest] == [r.element for r in expected]
    get = engine.metrics.registry.get_sample_value
    assert get("fabric_te_precomputed_rows_moved", {"stat": "max"}) == rows.max()
    assert get("fabric_te_precomputed_jobs_moved", {"stat": "mean"}) == pytest.approx(jobs.mean())
    msg = convert.precomputed_to_pb(fields, True, engine.precomputed_hits, widest)
    assert msg.widest[0].element == expected[0].name and msg.ready == len(ready)


def test_the_element_cap_computes_the_first_of_the_order() -> None:
    engine = _engine(precompute_elements=5)
    try:
        _done(engine)
        target = engine.installer.target
        assert target is not None
        order = priority(single_failures(FABRIC, target.health),
                         RouteIndex.build(FABRIC, target.assignment))  # fmt: skip
        assert [r.element for r in engine.precomputer.ready()] == sorted(order[:5].tolist())
    finally:
        engine.close()


def test_serve_flags_turn_it_off_and_status_says_so(serve) -> None:  # type: ignore[no-untyped-def]
    from controller.cli.service import status_text
    from controller.service.client import Client, Target

    off = serve(["--fabric", "small", "--store", "memory", "--precompute", "off"]).ready()
    assert not off.status().precomputed.enabled
    with Client.connect(Target(f"127.0.0.1:{off.port}", insecure=True), timeout=10) as c:
        assert "precomputed off" in status_text(c.status())
    on = serve(["--fabric", "small", "--store", "memory", "--precompute-elements", "3",
                "--precompute-budget", "100"]).ready()  # fmt: skip
    status = on.status()
    assert status.precomputed.enabled and status.precomputed.ready == 0  # nothing installed


def test_a_refresh_waits_for_the_index_being_built_beside_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Right after a global solve its route index is built on the solve's thread: a
    refresh that starts meanwhile waits for that index instead of building a second one
    on the other core (under the repairs the engine may be making then)."""
    from controller.service import precomputed
    from controller.service.installer import IndexBuild
    from controller.service.metrics import Metrics
    from controller.service.precomputed import Base, Precomputer

    engine = _engine(precompute=False)
    try:
        target = engine.installer.target
        assert target is not None
        built = RouteIndex.build(FABRIC, target.assignment)
        calls = []
        real = RouteIndex.build

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            # the refresh's own builds: the engine's threads may build theirs meanwhile
            if threading.current_thread().name.startswith("fabric-te-precompute"):
                calls.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(precomputed.RouteIndex, "build", staticmethod(counted))
        pc = Precomputer(FABRIC, repair=engine._repair_of, busy=lambda: False,
                         metrics=Metrics().precomputed, max_elements=3)  # fmt: skip
        building = IndexBuild(target.assignment)
        pc.refresh(Base(target, None, engine._jobs_version, engine.installer.pushed,
                        engine.installer.routes.installed, engine.installer.wanted_built(),
                        engine.installer.routes.version, engine.react, building))  # fmt: skip
        assert not pc.wait(lambda f: f["ready"] > 0, 0.3)  # nothing made without the index
        building.index = built
        building.ready.set()
        assert pc.wait(lambda f: bool(f["done"]), WAIT)
        assert not calls and len(pc.ready()) == 3
        health = single_failures(FABRIC, target.health).health_after(target.health,
                                                                     pc.ready()[0].element)
        assert pc.lookup(target, engine._jobs_version, engine.react, health, False).index \
            is built
        pc.close()
    finally:
        engine.close()


def test_a_refresh_starts_once_the_routes_have_stood_the_settle_time() -> None:
    """A burst of reports is repaired without the refresh's set-up between them: the
    refresh of what is installed starts only once it has stood `precompute_settle` (on the
    engine's clock, held still here); a report before that goes on demand (the set is
    stale), and the set is made once the time has passed."""
    now = [0.0]
    engine = Engine(FABRIC, EmulatedDriver(FABRIC), debounce=0.0, reconcile_interval=60.0,
                    clock=lambda: now[0], precompute_settle=1.0)  # fmt: skip
    try:
        for job in _jobs():
            engine.put_job(job, 0)
        assert engine.wait_idle(WAIT)
        engine.report_links({_used_link(engine): 0.0})
        assert engine.wait_idle(WAIT)
        assert _reports(engine, "on_demand", "stale") == 1 and engine.precomputed_hits == 0
        assert not engine.precomputer.wait(lambda f: f["generation"] > 0, 0.5)
        now[0] += 1.0  # the repaired routes have stood the settle time
        assert engine.precomputer.wait(lambda f: f["generation"] > 0, WAIT)
        _done(engine)
    finally:
        engine.close()


# ---- the set computed in a child process ------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _child_of(engine: Engine, other_than: int = 0) -> int:
    """The pid of the child computing the set, once there is one other than `other_than`
    (the refresh forks in the background, after the engine is idle)."""
    pc = engine.precomputer
    deadline = time.monotonic() + WAIT
    while not pc._child or pc._child == other_than:
        assert time.monotonic() < deadline, "no (new) child computes the set"
        time.sleep(0.002)
    return pc._child


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the child is forked")
def test_the_child_of_a_superseded_set_is_killed_and_close_kills_the_last() -> None:
    engine = _engine(process=True)
    try:
        _done(engine)
        gate = _Gate(engine)  # the next child holds before its first repair
        engine.report_links({_used_link(engine): 0.5})
        assert engine.wait_idle(WAIT)
        first = _child_of(engine)
        assert _alive(first)
        if sys.platform == "linux":  # named by the child itself, just after the fork
            deadline = time.monotonic() + WAIT
            while Path(f"/proc/{first}/comm").read_text().strip() != "fabric-te-prec":
                assert time.monotonic() < deadline, "the child is not named"
                time.sleep(0.002)
        engine.report_links({_used_link(engine): 1.0})  # a new base: a new set
        assert engine.wait_idle(WAIT)
        second = _child_of(engine, other_than=first)  # a new child, or the deadline fails
        deadline = time.monotonic() + WAIT
        while _alive(first):
            assert time.monotonic() < deadline, "the superseded child still runs"
            time.sleep(0.01)
        assert int(engine.precomputer.fields()["ready"]) == 0  # held at its first repair
        engine.close()
        assert not _alive(second) and not engine.precomputer._child
        gate.open.set()
    finally:
        engine.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the child is forked")
def test_a_child_that_fails_leaves_the_on_demand_path_and_the_next_set_is_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _engine(process=True)
    try:
        _done(engine)
        inner = engine.precomputer._repair
        engine.precomputer._repair = lambda *a: (_ for _ in ()).throw(RuntimeError("boom"))
        a, b = _used_link(engine, 0), _used_link(engine, 1)
        engine.report_links({a: 0.5})
        assert engine.wait_idle(WAIT)
        deadline = time.monotonic() + WAIT
        while "boom" not in caplog.text:
            assert time.monotonic() < deadline, "the child's failure was not logged"
            time.sleep(0.01)
        assert not engine.precomputer.fields()["done"]
        # Status and /metrics say it failed, and why, not "refreshing" for ever
        while not engine.precomputer.fields()["failed"]:
            assert time.monotonic() < deadline, "the failure is not in the set's fields"
            time.sleep(0.01)
        fields = engine.precomputer.fields()
        assert "boom" in fields["failed"], fields["failed"]
        assert engine.metrics.registry.get_sample_value("fabric_te_precomputed_failed") == 1.0
        line = _precomputed_lines({**fields, "enabled": True, "hits": 0, "widest": []})[0]
        assert "failed: " in line and "boom" in line and "on demand" in line, line
        engine.report_links({b: 0.0})  # a single failure, its repair never made
        assert engine.wait_idle(WAIT)
        assert engine.precomputed_hits == 0 and _reports(engine, "on_demand", "not ready") == 1
        engine.precomputer._repair = inner
        engine.report_links({b: 1.0})
        assert engine.wait_idle(WAIT)
        _done(engine)  # the next set, complete
        assert engine.precomputer.fields()["failed"] == ""
        assert engine.metrics.registry.get_sample_value("fabric_te_precomputed_failed") == 0.0
        engine.report_links({b: 0.0})
        assert engine.wait_idle(WAIT)
        assert engine.precomputed_hits == 1
    finally:
        engine.close()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_with_its_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """kill -9 of the engine's process: its child computing the set goes too (no orphan
    burning a core on a set nobody takes)."""
    script = tmp_path / "engine.py"
    script.write_text(
        "import sys, time\n"
        "sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from test_precomputed import _engine, _child_of\n"
        "e = _engine(process=True)\n"
        "e.precomputer._repair = lambda *a: time.sleep(3600)\n"
        "e.report_links({0: 0.5})\n"
        "print(_child_of(e), flush=True)\n"
        "time.sleep(3600)\n")  # fmt: skip
    here = os.path.dirname(__file__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    proc = subprocess.Popen([sys.executable, str(script), here, root],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert _alive(child)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + WAIT
    while _alive(child):
        assert time.monotonic() < deadline, "the child outlived its process"
        time.sleep(0.01)


def test_a_repair_crosses_from_the_child_without_what_it_shares_with_the_base(
    engine: Engine,
) -> None:
    """What the child sends holds none of the base's large objects (each element would
    carry a copy of them: on the meta-24k mix ~70 MB an element), and taken back in it is
    the repair itself, sharing the base's objects again by identity."""
    import pickle
    from dataclasses import fields

    from controller.service.precomputed import _attached, _detached

    _done(engine)
    s = engine.precomputer._set
    assert s is not None
    planned = 0
    for one in engine.precomputer.ready():
        wire = _detached(one)
        assert wire.result.assignment is None
        if wire.planned is not None:
            assert wire.planned.previous is None
            if wire.planned.splices is not None:
                assert wire.planned.splices.wanted is None
                planned += 1
        sent = pickle.dumps(wire, protocol=5)
        assert len(sent) < 8_000 + 4 * one.nbytes, (one.name, len(sent), one.nbytes)
        back = _attached(pickle.loads(sent), s.base)
        assert back.result.assignment is s.base.target.assignment
        if back.planned is not None:
            assert back.planned.previous is s.base.previous
            if back.planned.splices is not None:
                assert back.planned.splices.wanted is s.base.wanted
        for f in fields(one):
            a, b = getattr(one, f.name), getattr(back, f.name)
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
        assert back.nbytes == one.nbytes
    assert planned > 0


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_child_pauses_while_the_engine_is_busy() -> None:
    """A report held by the engine holds the child too (its CPU stops within a repair's
    check), and it goes on, to a complete set, once the engine is quiet."""
    engine = _engine(process=True)
    pc = engine.precomputer
    inner, busy = pc._repair, [False]

    def slow(*args):  # type: ignore[no-untyped-def]
        end = time.process_time() + 0.02  # a repair that keeps a core busy
        while time.process_time() < end:
            pass
        return inner(*args)

    try:
        _done(engine)
        pc._repair = slow
        pc._busy = lambda: busy[0]
        engine.report_links({_used_link(engine): 0.5})
        assert engine.wait_idle(WAIT)
        child = _child_of(engine)
        time.sleep(0.3)
        before, start = _cpu_ticks(child), time.monotonic()
        # running: 20 ticks of 10 ms (0.2 s on a core of its own), waited for up to 10 s on
        # a loaded machine (the suite runs a worker per core beside it)
        while _cpu_ticks(child) - before < 20 and time.monotonic() - start < 10.0:
            time.sleep(0.05)
        running = _cpu_ticks(child) - before
        busy[0] = True
        pc.hold()
        time.sleep(0.1)  # within one element of the hold
        before = _cpu_ticks(child)
        time.sleep(1.0)
        held = _cpu_ticks(child) - before
        assert running >= 20 and held <= 10, (running, held)
        busy[0] = False
        _done(engine)
    finally:
        engine.close()


def test_serve_flags_choose_where_the_set_is_computed() -> None:
    from controller.cli.main import build_parser
    from controller.cli.service import precompute_options

    def engine_of(*flags: str) -> dict[str, object]:
        return precompute_options(build_parser().parse_args(["serve", *flags]))

    assert "precompute_process" not in engine_of()  # the engine's default: a process
    assert engine_of("--precompute-in", "thread")["precompute_process"] is False
    assert engine_of("--precompute-in", "process")["precompute_process"] is True
    assert engine_of("--precompute-settle", "2")["precompute_settle"] == 2.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--precompute-in", "fork"])
    engine = Engine(FABRIC, EmulatedDriver(FABRIC), **engine_of("--precompute-in", "thread"))  # type: ignore[arg-type]
    try:
        assert engine.precomputer.process is False
    finally:
        engine.close()


def test_the_row_budget_computes_the_first_of_the_order_within_it() -> None:
    """`precompute_budget`: elements in compute order while the TE rows they carry, summed,
    stay within the budget (the next would pass it)."""
    budget = 40
    engine = _engine(precompute_budget=budget)
    try:
        _done(engine)
        target = engine.installer.target
        assert target is not None
        failures = single_failures(FABRIC, target.health)
        index = RouteIndex.build(FABRIC, target.assignment)
        per_link = index.count[0::2] + index.count[1::2]
        want, total = [], 0
        for i in priority(failures, index).tolist():
            total += int(per_link[failures.links_of(i)].sum())
            if total > budget:
                break
            want.append(i)
        assert 0 < len(want) < len(failures)
        assert [r.element for r in engine.precomputer.ready()] == sorted(want)
    finally:
        engine.close()


def test_repairs_that_move_nothing_are_no_ones_widest() -> None:
    """Status listed repairs moving 0 rows as the widest where fewer than its ten moved
    any (every one, on a fabric whose failures move nothing)."""
    from types import SimpleNamespace

    from controller.service.precomputed import Blast

    blast = Blast()
    for element, rows in enumerate([0, 3, 0, 1]):
        blast.add(SimpleNamespace(element=element, rows_moved=rows, jobs_moved=0,  # type: ignore[arg-type]
                                  rows_off_element=0))  # fmt: skip
    assert sorted(blast.widest) == [(-3, 1), (-1, 3)] and blast.elements == 4
