"""DesiredState and RouteLog on their own: no server, no driver, no threads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import PreconditionError
from controller.formats.placement import parse_placement
from controller.model.fabric import Fabric
from controller.model.jobs import Job
from controller.routes.tables import Entry, RouteSet
from controller.service.state import DesiredState, RouteLog


def _job(fabric: Fabric, job_id: str, hosts: range) -> Job:
    doc = {"id": job_id, "hosts": [fabric.host_name(h) for h in hosts]}
    return parse_placement(fabric, {"jobs": [doc]}, "job")[0]


def test_generations_count_up_and_stale_ones_change_nothing(tiny: Fabric) -> None:
    state = DesiredState(tiny)
    assert state.put_job(_job(tiny, "a", range(0, 2))) == 1
    assert state.put_job(_job(tiny, "a", range(0, 3))) == 2
    assert state.put_job(_job(tiny, "a", range(0, 2)), generation=7) == 7
    # the same job again, unchecked: no change (level-triggered), its generation returned
    version = state.version
    assert state.put_job(_job(tiny, "a", range(0, 2))) == 7 and state.version == version
    with pytest.raises(PreconditionError, match="generation 7 is not newer than 7"):
        state.put_job(_job(tiny, "a", range(2, 4)), generation=7)
    assert state.version == version and state.jobs["a"][0].hosts == (0, 1)


def test_shared_host_is_rejected_and_delete_is_idempotent(tiny: Fabric) -> None:
    state = DesiredState(tiny)
    state.put_job(_job(tiny, "a", range(0, 2)))
    with pytest.raises(ValueError, match="already in job 'a'"):
        state.put_job(_job(tiny, "b", range(1, 3)))
    assert [j.id for j, _ in state.job_list()] == ["a"]
    assert state.delete_job("a") and not state.delete_job("a")
    assert state.version == 2


def test_take_reports_whether_only_health_changed(tiny: Fabric) -> None:
    state = DesiredState(tiny)
    state.put_job(_job(tiny, "a", range(0, 2)))
    assert not state.take().health_only
    state.report_links({0: 0.0})
    state.report_links({1: 0.5})
    inputs = state.take()
    assert inputs.health_only and inputs.version == 3
    assert inputs.health.factor[0] == 0.0 and inputs.health.factor[1] == 0.5
    state.report_links({2: 0.0}, replace_all=True)
    assert state.health is not None and state.health.down_links().tolist() == [2]


def test_versions_count_on_from_a_store_revision_and_never_go_back(tiny: Fabric) -> None:
    """Records read at start (two here) are numbered up to the store's revision, which no
    version a process reported before is above; a revision below the version moves
    nothing."""
    state = DesiredState(tiny)
    state.put_job(_job(tiny, "a", range(0, 2)))
    state.report_links({0: 0.0})
    state.count_from(9)
    assert (state.version, state.jobs_version, state.origin) == (9, 8, 7)
    state.count_from(3)
    assert (state.version, state.jobs_version, state.origin) == (9, 8, 7)
    state.put_job(_job(tiny, "b", range(2, 4)))
    assert state.version == state.jobs_version == 10


def _entry(switch: str, dst: int) -> Entry:
    return Entry(switch=switch, in_port=0, dst_host=dst, next_hop=1)


def test_route_log_resumes_from_logged_versions_only() -> None:
    log = RouteLog(RouteSet.from_entries([]), keep=2)
    tables = []
    for dst in range(3):
        tables.append(_entry("rtsw-p0-r0", dst))
        log.record(RouteSet.from_entries(tables), ["rtsw-p0-r0"])
    assert log.version == 4
    assert log.record(RouteSet.from_entries(tables), ["rtsw-p0-r0"]) is None
    e = log.epoch
    assert [d.version for d in log.after(2, e) or []] == [3, 4]
    assert log.after(4, e) == []
    assert log.after(1, e) is None  # version 2's delta fell out of the log
    assert log.after(0, e) is None and log.after(5, e) is None
    assert tuple(log.after(3, e)[0].added) == (_entry("rtsw-p0-r0", 2),)  # type: ignore[index]
    # a version of another log (a restarted controller counts from 1 again) resumes nothing
    assert log.after(4, "") is None and log.after(4, RouteLog(RouteSet()).epoch) is None
    assert len({RouteLog(RouteSet()).epoch for _ in range(50)}) == 50


_SWITCHES = ("rtsw-p0-r0", "rtsw-p0-r1")
_ENTRIES = st.builds(
    Entry, st.sampled_from(_SWITCHES), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2),
    st.sampled_from(("fabric-te", "ops")), st.sampled_from((-1, 2)),
)  # fmt: skip


def _routes(entries: list[Entry]) -> RouteSet:
    return RouteSet.from_entries({e.key: e for e in entries}.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(_ENTRIES, max_size=20), st.lists(_ENTRIES, max_size=20))
def test_route_log_deltas_are_the_entries_added_and_removed(
    before: list[Entry], after: list[Entry]
) -> None:
    """Worked out on the tables' columns, the delta is the set difference either way, per
    switch in match order."""
    old, new = _routes(before), _routes(after)
    log = RouteLog(old)
    delta = log.record(new, list(_SWITCHES))
    gained, lost = set(new) - set(old), set(old) - set(new)
    if not gained and not lost:
        assert delta is None and log.version == 1
        return
    assert delta is not None and log.installed is new
    assert list(delta.added) == sorted(gained, key=lambda e: (e.switch, e.match))
    assert list(delta.removed) == sorted(lost, key=lambda e: (e.switch, e.match))
