"""Inputs on the embedded store: a restarted engine knows every job and link report, adopts
the stored assignment and pushes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from controller.drivers.file import FileDriver
from controller.model.fabric import Fabric
from controller.model.jobs import Job
from controller.service.engine import Engine
from controller.service.replica import Replica
from controller.service.store import DirStore


def _engine(fabric: Fabric, tmp_path: Path) -> Engine:
    replica = Replica(fabric, DirStore(tmp_path / "state", fabric.name))
    driver = FileDriver(tmp_path / "tables", fabric=fabric)
    return Engine(fabric, driver, debounce=0.0, reconcile_interval=60.0, replica=replica)


def test_restart_loses_no_input_and_pushes_nothing(small: Fabric, tmp_path: Path) -> None:
    engine = _engine(small, tmp_path)
    for j in range(4):
        engine.put_job(Job(f"j{j}", tuple(range(8 * j, 8 * j + 6)), dp=6, tp=4), 0)
    engine.put_job(Job("j0", tuple(range(0, 8)), dp=8, tp=4), 0)  # generation 2
    link = small.rack_link(0, 1)
    engine.report_links({int(link): 0.0})
    assert engine.wait_idle(30)
    jobs, installed, health = engine.jobs(), engine.installed, engine.health
    assert engine.ops_pushed > 0 and len(installed) > 0
    engine.close()

    again = _engine(small, tmp_path)
    try:
        assert again.jobs() == jobs  # ids, hosts and generations
        assert np.array_equal(again.health.factor, health.factor)
        assert again.wait_idle(30)
        assert again.ops_pushed == 0
        assert set(again.installed) == set(installed)
        assert again.driver_ok and again.status_fields()["entries_missing"] == 0
        # the next change is solved against the stored assignment: churn stays minimal
        again.delete_job("j3")
        assert again.wait_idle(30)
        assert again.last_result is not None and again.last_result.churn == 0
    finally:
        again.close()


def test_inputs_changed_since_the_assignment_are_solved_on_start(
    small: Fabric, tmp_path: Path
) -> None:
    engine = _engine(small, tmp_path)
    engine.put_job(Job("a", tuple(range(0, 8)), dp=8, tp=4), 0)
    assert engine.wait_idle(30)
    before = engine.installed
    replica = engine.replica
    assert replica.persist is not None
    replica.persist.put_job(Job("b", tuple(range(8, 16)), dp=8, tp=4), 1)  # stored, not solved
    engine.close()
    again = _engine(small, tmp_path)
    try:
        assert [j.id for j, _ in again.jobs()] == ["a", "b"]
        assert again.wait_idle(30)
        assert again.ops_pushed > 0 and set(before) < set(again.installed)
    finally:
        again.close()
