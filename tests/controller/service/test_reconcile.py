"""Installed state is read, never assumed: faults injected into the emulated switches
(timeouts, rejects, agents dying halfway, reboots mid-call and outside any call, unreported
links going down), then what the engine reports is compared with what the switches hold."""

from __future__ import annotations

import logging
import random
import time

import pytest

from controller.drivers.reconcile import Reconciler
from controller.model.fabric import Fabric
from controller.model.jobs import Job
from controller.routes.tables import RouteSet
from controller.service.engine import Engine
from sim.driver import EmulatedDriver
from sim.switches import Fault, verify

CALL_FAULTS = ("timeout", "reject", "die_halfway", "restart", "link_down")


def _actual(driver: EmulatedDriver) -> RouteSet:
    """What the switches whose agent answers hold."""
    sw = driver.emulated.switches
    alive = {n: s for n, s in sw.items() if s.table and s.alive}
    return RouteSet({n: s.table for n, s in alive.items()})


def _missing(wanted: RouteSet, actual: RouteSet) -> int:
    have = set(actual)
    return sum(1 for e in wanted if e not in have)


def _switch_links(fabric: Fabric, rng: random.Random) -> tuple[int, ...]:
    return (rng.randrange(fabric.rack_base, fabric.num_links),)


def _until(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_faults_during_pushes_are_reported_as_read_and_repaired(small: Fabric) -> None:
    rng = random.Random(14)
    driver = EmulatedDriver(small)
    emu = driver.emulated
    reconciler = Reconciler(driver, small, backoff=0.001, push_timeout=0.05)
    engine = Engine(small, driver, debounce=0.0, reconcile_interval=60.0,
                    reconciler=reconciler, retry_first=0.05)  # fmt: skip
    names = emu.names()
    injected = 0
    saw_dishonest_ok = 0
    try:
        for rnd in range(40):
            for _ in range(6):
                kind = CALL_FAULTS[injected % len(CALL_FAULTS)]
                links = _switch_links(small, rng) if kind == "link_down" else ()
                emu.inject(rng.choice(names), Fault(kind, delay=0.01, links=links))
                injected += 1
            first = rng.randrange(0, 24, 2)
            for j in range(3):  # three jobs that move around every round
                engine.delete_job(f"j{j}")
            for j in range(3):
                lo = (first + 8 * j) % 24
                engine.put_job(Job(f"j{j}", tuple(range(lo, lo + 4)), dp=4, tp=4), 0)
            assert engine.wait_idle(30)
            claimed, actual = engine.installed, _actual(driver)
            # never claims what the switches do not hold; claims nothing of a dead switch
            assert set(claimed) == set(actual), f"round {rnd}"
            wanted = engine.wanted
            assert wanted is not None
            alive = [n for n, sw in emu.switches.items() if sw.alive]
            assert engine.status_fields()["entries_missing"] == _missing(
                wanted.only(alive), actual
            ), f"round {rnd}"
            dead = [n for n, s in emu.switches.items() if not s.alive]
            honest = bool(dead) or _missing(wanted, actual) > 0
            if honest and engine.driver_ok:
                saw_dishonest_ok += 1
            for name in dead:  # the agent comes back (rebooted, table empty)
                emu.restart(name)
            emu.set_links(range(small.num_links), True)
        assert saw_dishonest_ok == 0
        # drain leftover faults, then let one reconcile interval pass
        for s in emu.switches.values():
            s.faults.clear()
        for name in [n for n, s in emu.switches.items() if not s.alive]:
            emu.restart(name)
        engine.reconcile_interval = 0.05
        assert _until(
            lambda: (
                engine.driver_ok
                and engine.marks.reconciles > 0
                and _missing(engine.wanted, _actual(driver)) == 0
            )
        )  # type: ignore[arg-type]
        wanted = engine.wanted
        assert wanted is not None and _missing(wanted, _actual(driver)) == 0
        assert set(engine.installed) == set(_actual(driver))
        status = engine.status_fields()
        assert status["entries_missing"] == 0 and status["switches_differing"] == 0
        assert status["retry_rounds"] > 0  # the faults made some reconciles retry
        assert injected == 240
        assert engine.last_result is not None
        assert verify(small, emu, engine.last_result.assignment).ok
    finally:
        engine.close()


def test_unreported_reboots_and_link_downs_repaired_within_the_interval(small: Fabric) -> None:
    rng = random.Random(7)
    driver = EmulatedDriver(small)
    emu = driver.emulated
    engine = Engine(small, driver, debounce=0.0, reconcile_interval=0.05)
    try:
        for j in range(4):
            engine.put_job(Job(f"j{j}", tuple(range(8 * j, 8 * j + 8)), dp=8, tp=4), 0)
        assert engine.wait_idle(30)
        wanted = engine.wanted
        assert wanted is not None and len(wanted) > 0
        owners = wanted.switches()
        for i in range(30):  # a switch reboots outside any call; a link goes down unreported
            emu.restart(rng.choice(owners))
            if i % 3 == 0:
                emu.set_links(_switch_links(small, rng), False)
            before = engine.marks.reconciles
            assert _until(lambda b=before: engine.marks.reconciles >= b + 2)
            assert _missing(wanted, _actual(driver)) == 0
            assert set(engine.installed) == set(_actual(driver))
        assert engine.driver_ok and engine.status_fields()["entries_missing"] == 0
    finally:
        engine.close()


def test_a_dead_agent_is_marked_unreadable_and_driver_ok_is_false(small: Fabric) -> None:
    driver = EmulatedDriver(small)
    emu = driver.emulated
    engine = Engine(small, driver, debounce=0.0, reconcile_interval=0.05)
    try:
        engine.put_job(Job("a", tuple(range(0, 8)), dp=8, tp=4), 0)
        assert engine.wait_idle(30)
        wanted = engine.wanted
        assert wanted is not None
        victim = wanted.switches()[0]
        emu.switches[victim].alive = False
        assert _until(lambda: not engine.driver_ok)
        status = engine.status_fields()
        assert f"{victim}: unreadable: {victim}: agent not answering" in status["differing"]
        assert not engine.installed.table(victim)  # claims nothing it cannot read
        emu.restart(victim)
        assert _until(lambda: engine.driver_ok)
        assert engine.installed.table(victim) == wanted.table(victim)
    finally:
        engine.close()


def test_a_watcher_behind_the_retained_deltas_gets_a_fresh_snapshot(small: Fabric) -> None:
    from collections import deque

    driver = EmulatedDriver(small)
    engine = Engine(small, driver, debounce=0.0, reconcile_interval=60.0)
    try:
        engine.installer.routes._deltas = deque(maxlen=1)  # retain one delta only
        watch = engine.watch()
        assert next(watch).kind == "snapshot" and next(watch).kind == "sync"
        for j in range(3):  # three route changes while the watcher reads nothing
            engine.put_job(Job(f"j{j}", tuple(range(8 * j, 8 * j + 8)), dp=8, tp=4), 0)
            assert engine.wait_idle(30)
        event = next(watch)
        assert event.kind == "snapshot"
        assert set(event.entries) == set(engine.installed) == set(_actual(driver))
        assert next(watch).kind == "sync"
    finally:
        engine.close()


def test_a_switch_repaired_by_a_reconcile_is_logged_with_its_operations(
    small: Fabric, caplog: pytest.LogCaptureFixture
) -> None:
    driver = EmulatedDriver(small)
    engine = Engine(small, driver, debounce=0.0, reconcile_interval=0.05)
    try:
        engine.put_job(Job("j0", tuple(range(8)), dp=8, tp=4), 0)
        assert engine.wait_idle(30)
        wanted = engine.wanted
        assert wanted is not None
        switch = wanted.switches()[0]
        held = len(wanted.table(switch))
        assert held > 0
        with caplog.at_level(logging.INFO, logger="fabric_te.engine"):
            driver.emulated.restart(switch)  # its table gone, nobody told
            before = engine.marks.reconciles
            assert _until(lambda: engine.marks.reconciles >= before + 2)
        assert _missing(wanted, _actual(driver)) == 0
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert f"switch {switch} did not hold the wanted routes: {held} entry operations " \
               "repaired it" in said
    finally:
        engine.close()
