"""Inputs on the embedded store: a restarted engine knows every job and link report, adopts
the stored assignment and pushes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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


def _global_solves(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every global solve started from now on, listed as it starts (counted from an engine's
    start: a hook set on the engine once built could miss the solve its worker starts at
    once)."""
    from controller.service import engine as engine_module

    solved: list[object] = []

    class Counted(engine_module.GlobalSolve):
        def start(self) -> None:
            solved.append(self)
            super().start()

    monkeypatch.setattr(engine_module, "GlobalSolve", Counted)
    return solved


def _stored_then_adopted(fabric: Fabric, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         job: Job) -> list[object]:  # fmt: skip
    """`job` solved and stored by one engine, then a restart on the same fabric adopts it
    (no global solve); returns the global solves started from the restart on."""
    engine = _engine(fabric, tmp_path)
    engine.put_job(job, 0)
    assert engine.wait_idle(30)
    engine.close()
    solved = _global_solves(monkeypatch)
    same = _engine(fabric, tmp_path)
    try:
        assert same.wait_idle(30) and not solved
    finally:
        same.close()
    return solved


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



def test_a_fabric_of_other_link_speeds_under_the_same_name_is_solved_on_start(
    small: Fabric, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fabric file edited to other speeds (a taper) keeps its name, hence its store:
    the stored assignment answered to the old speeds, so it is solved again, not adopted
    (the same speeds: adopted, as before)."""
    from dataclasses import replace

    solved = _stored_then_adopted(small, tmp_path, monkeypatch, Job("a", tuple(range(0, 16)),
                                                                     dp=16, tp=4))
    slower = replace(small, capacity=small.capacity * np.where(
        np.arange(small.num_arcs) >= 2 * small.rack_base, 0.5, 1.0))  # fmt: skip
    assert slower.name == small.name and slower.fingerprint == small.fingerprint
    other = _engine(slower, tmp_path)
    try:
        assert other.wait_idle(30) and solved  # adopted before: no solve
    finally:
        other.close()


def _ring(fabric: Fabric, job_id: str, hosts: tuple[int, ...]) -> Job:
    return Job(job_id, hosts, dp=len(hosts) * fabric.gpus_per_host)


def test_restart_keeps_the_figures_of_the_routing_it_restores(
    small: Fabric, tmp_path: Path
) -> None:
    """A restart that adopts the stored routing reports what it did before: per job the
    flows, TE and hashed flows and the predicted busbw, the MLU and its bound, the links
    over capacity (not blank until the next change, nor 0 next to a NaN MLU)."""
    engine = _engine(small, tmp_path)
    # across racks and pods, so they need TE paths; one host alone has no flows
    engine.put_job(_ring(small, "a", (0, 2, 4, 16)), 0)
    engine.put_job(_ring(small, "b", (6, 8, 18, 20)), 0)
    engine.put_job(_ring(small, "solo", (10,)), 0)
    engine.report_links({int(small.rack_link(0, 1)): 0.0})
    assert engine.wait_predicted(30)
    figures, result = engine.job_figures(), engine.last_result
    gauge = engine.metrics.registry.get_sample_value
    over = gauge("fabric_te_links_over_capacity")
    busbw = {j: gauge("fabric_te_job_predicted_busbw_ratio", {"job_id": j}) for j in "ab"}
    engine.close()
    assert result is not None and figures["a"].predicted_busbw is not None

    again = _engine(small, tmp_path)
    try:
        assert again.wait_predicted(30) and again.ops_pushed == 0
        assert again.job_figures() == figures
        last = again.last_result
        assert last is not None and last.assignment is again.installer.target.assignment
        assert last.mlu == pytest.approx(result.mlu)
        assert 0 < last.bound.value <= last.mlu + 1e-9 and last.certificate is None
        get = again.metrics.registry.get_sample_value
        assert get("fabric_te_max_link_utilisation_ratio") == pytest.approx(result.mlu)
        assert get("fabric_te_links_over_capacity") == over
        assert {j: get("fabric_te_job_predicted_busbw_ratio", {"job_id": j})
                for j in "ab"} == busbw  # fmt: skip
    finally:
        again.close()


def test_a_restored_routing_with_rows_on_the_hashing_gets_its_mlu_counted(
    small: Fabric, tmp_path: Path
) -> None:
    """Rows without a TE entry (over a small table budget) ride the fabric's hashing: the
    MLU of the restored routing is counted with the rate prediction, from the routes as
    the data plane carries them, and is a number once the busbw gauges are."""
    from controller.solver import SolveOptions

    def engine_of() -> Engine:
        replica = Replica(small, DirStore(tmp_path / "state", small.name))
        return Engine(small, FileDriver(tmp_path / "tables", fabric=small), debounce=0.0,
                      reconcile_interval=60.0, replica=replica,
                      options=SolveOptions(table_budget=2))  # fmt: skip

    engine = engine_of()
    engine.put_job(_ring(small, "a", (0, 2, 4, 6, 16, 18, 20, 22)), 0)
    assert engine.wait_predicted(30)
    result = engine.last_result
    assert result is not None and not result.assignment.routed.all()
    over = engine.metrics.registry.get_sample_value("fabric_te_links_over_capacity")
    engine.close()
    again = engine_of()
    try:
        assert again.wait_predicted(30)
        last = again.last_result
        assert last is not None and np.isfinite(last.mlu) and last.mlu > 0
        get = again.metrics.registry.get_sample_value
        assert get("fabric_te_max_link_utilisation_ratio") == last.mlu
        assert get("fabric_te_links_over_capacity") == over
        figures = again.job_figures()["a"]
        assert figures.hashed_flows > 0 and figures.predicted_busbw is not None
    finally:
        again.close()


def test_state_version_never_goes_back_across_a_restart(small: Fabric, tmp_path: Path) -> None:
    """Versions count on from where the last process left them: a client that waits for a
    version above the last it saw is never left waiting behind a restart."""
    engine = _engine(small, tmp_path)
    for j in range(4):
        engine.put_job(_ring(small, f"j{j}", (2 * j, 2 * j + 8)), 0)
    for j in range(3):
        engine.delete_job(f"j{j}")
    engine.report_links({int(small.rack_link(0, 1)): 0.0})
    assert engine.wait_idle(30)
    seen = engine.state_version
    assert seen == 8
    engine.close()

    again = _engine(small, tmp_path)
    try:
        assert again.wait_idle(30) and again.ops_pushed == 0  # the same inputs: adopted
        assert again.state_version >= seen
        assert again.status_fields()["pending_changes"] == 0
        _, version = again.put_job(_ring(small, "j0", (0, 8)), 0)
        assert version == again.state_version > seen
        assert again.wait_idle(30)
    finally:
        again.close()
    third = _engine(small, tmp_path)
    try:
        assert third.wait_idle(30) and third.state_version >= version
    finally:
        third.close()


def test_a_drain_is_remembered_across_a_restart_with_what_its_links_are_beneath(
    small: Fabric, tmp_path: Path
) -> None:
    """A switch drained over a link down on its own: after a restart, the end of the drain
    still gives that link back down (the store keeps the drains and what is beneath)."""
    engine = _engine(small, tmp_path)
    dead = int(small.rack_link(0, 1))
    ctsw = small.node_by_name(small.link_name(dead).split(":")[1])
    engine.report_links({dead: 0.0})
    engine.report_links({}, switches={ctsw: True})
    health = engine.health
    assert health.drained == {ctsw} and health.beneath[dead] == 0.0
    engine.close()

    again = _engine(small, tmp_path)
    try:
        assert again.health.same(health)
        again.report_links({}, switches={ctsw: False})
        factor = again.health.factor
        links = small.switch_links(small.node_name(ctsw))
        assert factor[dead] == 0.0 and (factor[links[links != dead]] == 1.0).all()
        assert not again.health.drained and not again.health.beneath
    finally:
        again.close()


def test_a_fabric_rewired_under_the_same_name_and_speeds_is_solved_on_start(
    small: Fabric, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cable list edited to other wiring (two hosts' cables swapped: a mislabelled pair
    put right) keeps its name and its link speeds, but its ids name other devices: the
    stored assignment, by id, answered to the old wiring, so it is solved again, not
    adopted (the same file again: adopted)."""
    from controller.model.inventory import Cable, fabric_from_cables
    from controller.model.name_templates import named_cable_list

    devices, cables = named_cable_list(small)
    before = fabric_from_cables("dc1", devices, cables)
    swap = {"host-p0-r0-h0": "host-p0-r1-h0", "host-p0-r1-h0": "host-p0-r0-h0"}
    after = fabric_from_cables("dc1", devices, [
        Cable(swap.get(c.a, c.a), c.a_port, c.b, c.b_port, c.gbps) for c in cables])
    assert np.array_equal(after.capacity, before.capacity)
    assert after.fingerprint != before.fingerprint
    assert after.host_name(1) == "host-p0-r1-h0" != before.host_name(1)  # ids name others

    # rack 0's hosts, then rack 2's
    solved = _stored_then_adopted(before, tmp_path, monkeypatch, Job("a", (0, 1, 4, 5), dp=4,
                                                                      tp=4))
    rewired = _engine(after, tmp_path)
    try:
        assert rewired.wait_idle(30) and solved  # adopted before: routes of the old wiring
    finally:
        rewired.close()


def test_routes_held_on_other_wiring_are_released_and_solved_on_start(
    small: Fabric, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Routes applied from a file and held are re-installed on a restart whatever the
    inputs, but not on a fabric rewired under the same name and speeds: their ids name
    other devices there. The hold is released (its record removed) and the jobs solved."""
    from controller.model.health import LinkHealth
    from controller.model.inventory import Cable, fabric_from_cables
    from controller.model.jobs import jobs_flows
    from controller.model.name_templates import named_cable_list
    from controller.routes.entries import build_routes
    from controller.service.persist import HELD
    from controller.solver import solve

    devices, cables = named_cable_list(small)
    before = fabric_from_cables("dc1", devices, cables)
    swap = {"host-p0-r0-h0": "host-p0-r1-h0", "host-p0-r1-h0": "host-p0-r0-h0"}
    after = fabric_from_cables("dc1", devices, [
        Cable(swap.get(c.a, c.a), c.a_port, c.b, c.b_port, c.gbps) for c in cables])
    job = Job("a", (0, 1, 4, 5), dp=4, tp=4)

    engine = _engine(before, tmp_path)
    try:
        engine.put_job(job, 0)
        assert engine.wait_idle(30)
        routed = solve(before, LinkHealth.all_up(before), jobs_flows(before, [job])).assignment
        engine.apply_routes(routed, build_routes(before, routed), "routes.npz")
        assert engine.intake.held is not None
    finally:
        engine.close()
    same = _engine(before, tmp_path)  # the same wiring: still held
    try:
        assert same.wait_idle(30) and same.intake.held is not None
    finally:
        same.close()

    solved = _global_solves(monkeypatch)
    rewired = _engine(after, tmp_path)
    try:
        assert rewired.wait_idle(30)
        assert rewired.intake.held is None and solved  # released, and the jobs solved
        assert rewired.replica.persist is not None
        assert HELD not in rewired.replica.persist.store.load().records
    finally:
        rewired.close()
