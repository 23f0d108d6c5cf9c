"""The etcd store against a real etcd on 127.0.0.1: guarded transactions, the format marker,
following other writers, and the election with its fence."""

from __future__ import annotations

import time

import pytest

from controller.errors import Fenced, StoreConflict, StoreCorrupt, StoreUnavailable
from controller.model.fabric import Fabric
from controller.service.etcd import EtcdStore
from controller.service.persist import LINKS


def _until(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_guarded_writes_no_lost_update_between_two_writers(etcd) -> None:  # type: ignore[no-untyped-def]
    one = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    two = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    try:
        rev = one.commit("jobs/a", b"1", 0)
        with pytest.raises(StoreConflict, match=f"changed at revision {rev}"):
            two.commit("jobs/a", b"2", 0)  # two had not read one's write
        assert two.get("jobs/a") == (b"1", rev, rev)
        rev2 = two.commit("jobs/a", b"2", rev)
        assert one.load().records == {"jobs/a": (b"2", rev2)}
        assert one.commit("jobs/a", None, rev2) > rev2
        assert one.load().records == {}
    finally:
        one.close()
        two.close()


def test_another_fabric_or_format_is_refused(etcd) -> None:  # type: ignore[no-untyped-def]
    EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny").close()
    with pytest.raises(StoreCorrupt, match="fabric 'tiny', not 'small'"):
        EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "small")
    EtcdStore.from_url(f"etcd://{etcd.endpoint}/other", "small").close()  # own prefix


def test_follow_sees_the_other_writers_changes_in_order(etcd) -> None:  # type: ignore[no-untyped-def]
    one = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    two = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    seen: list = []
    try:
        start = two.load().revision
        two.follow(start, seen.extend)
        r1 = one.commit("jobs/a", b"1", 0)
        r2 = one.commit("links", b"{}", 0)
        r3 = one.commit("jobs/a", None, r1)
        assert _until(lambda: len(seen) == 3)
        assert seen == [("jobs/a", b"1", r1), ("links", b"{}", r2), ("jobs/a", None, r3)]
    finally:
        one.close()
        two.close()


def test_one_leader_and_a_deposed_one_is_fenced(etcd) -> None:  # type: ignore[no-untyped-def]
    one = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    two = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    a, b = one.leadership("a", 1.0), two.leadership("b", 1.0)
    try:
        a.start(lambda leader: None)
        assert _until(a.is_leader)
        b.start(lambda leader: None)
        time.sleep(0.3)
        assert not b.is_leader() and b.leader() == "a"
        a.check()
        with pytest.raises(Fenced):
            b.check()
        guard = a.guard()
        one.commit("assignment", b"x", 0, guard)
        # a is cut off from renewing (as if paused): its lease runs out, b takes over
        a._stop.set()
        assert a._thread is not None
        a._thread.join()
        assert _until(b.is_leader, 5)
        with pytest.raises(Fenced):
            a._valid_until = time.monotonic() + 10  # even believing it still leads
            a.check()
        with pytest.raises(Fenced, match="no longer the leader"):
            one.commit("assignment", b"y", None, guard)
    finally:
        one.close()
        two.close()


def test_a_late_renewal_within_the_lease_is_not_a_stepdown(etcd) -> None:  # type: ignore[no-untyped-def]
    """The defect: a leader whose renewal thread ran 0.8 s late (a loaded machine) stepped
    down although its lease was still alive, and leadership moved. Now it stops pushing
    while unsure, then renews and leads on: no role change, no other leader."""
    one = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    two = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    a, b = one.leadership("a", 1.0), two.leadership("b", 1.0)
    roles_a: list[bool] = []
    roles_b: list[bool] = []
    try:
        a.start(roles_a.append)
        assert _until(a.is_leader)
        b.start(roles_b.append)
        assert isinstance(a, type(b)) and a.ttl == 1
        created = a.guard()
        real_wait = a._stop.wait
        stalled: list[float] = []

        def starved(timeout: float | None = None) -> bool:  # renews 0.8 s after, not 0.25
            if not stalled:
                stalled.append(time.monotonic())
                time.sleep(0.8)
                return False
            return real_wait(timeout)

        a._stop.wait = starved  # type: ignore[method-assign]
        assert _until(lambda: bool(stalled), 5)
        time.sleep(0.5)
        assert _until(a.is_leader, 2)  # it renewed; the key is still its own
        time.sleep(1.5)  # long enough for b to win had a's lease lapsed
        assert a.is_leader() and not b.is_leader() and a.guard() == created
        assert roles_a == [True] and True not in roles_b and a.stepdowns == 0
    finally:
        one.close()
        two.close()


def test_a_lone_leader_leads_again_after_etcd_stalled_past_its_lease(etcd) -> None:  # type: ignore[no-untyped-def]
    """The defect: etcd stopped (SIGSTOP) for longer than the lease; the leader stepped down,
    and on etcd's return kept campaigning on its expired lease ("requested lease not
    found"), forever: a lone replica never led again, and link reports were taken but
    never installed. It now grants a new lease and is elected again."""
    import os
    import signal

    store = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    a = store.leadership("a", 1.0)
    roles: list[bool] = []
    try:
        a.start(roles.append)
        assert _until(a.is_leader)
        assert etcd.proc is not None
        os.kill(etcd.proc.pid, signal.SIGSTOP)
        try:
            assert _until(lambda: roles[-1:] == [False], 10)  # stepped down: no renewal
            time.sleep(3.5)  # well past the lease
        finally:
            os.kill(etcd.proc.pid, signal.SIGCONT)
        # (etcd may extend the leases it holds as it resumes: the same key again, or a new
        # one on a new lease; either way this replica leads)
        assert _until(a.is_leader, 15)
        assert roles[-1:] == [True] and a.stepdowns == 1
    finally:
        store.close()


def test_unreachable_etcd_is_store_unavailable(etcd) -> None:  # type: ignore[no-untyped-def]
    store = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    etcd.stop()
    try:
        with pytest.raises(StoreUnavailable, match="etcd unreachable"):
            store.commit("jobs/a", b"1", 0)
        assert not store.healthy
        etcd.start()
        assert store.commit("jobs/a", b"1", 0) > 0 and store.healthy
    finally:
        store.close()


def test_link_reports_on_two_replicas_at_once_lose_no_update(tiny: Fabric, etcd) -> None:  # type: ignore[no-untyped-def]
    import threading

    from controller.service.engine import Engine
    from controller.service.replica import Replica
    from sim.driver import EmulatedDriver
    from sim.switches import EmulatedFabric

    fabric = tiny
    emulated = EmulatedFabric(fabric)
    url = f"etcd://{etcd.endpoint}/fte"
    engines = [
        Engine(fabric, EmulatedDriver(emulated=emulated), debounce=0.0, reconcile_interval=60,
               replica=Replica(fabric, EtcdStore.from_url(url, "tiny"), replica_id=f"r{i}"))
        for i in range(2)
    ]  # fmt: skip
    links = list(range(fabric.rack_base, fabric.num_links))[:16]
    try:

        def report(engine: Engine, mine: list[int]) -> None:
            for link in mine:  # all of them read-modify-write the same record
                engine.report_links({link: 0.0})

        threads = [threading.Thread(target=report, args=(e, links[i::2]))
                   for i, e in enumerate(engines)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in engines:
            if not _until(lambda e=e: set(e.health.down_links().tolist()) == set(links)):
                persist = e.replica.persist
                assert persist is not None
                _, rev, revision = EtcdStore.from_url(url, "tiny").get(LINKS)
                missing = sorted(set(links) - set(e.health.down_links().tolist()))
                pytest.fail(f"replica {e.replica.id} misses links {missing}: store {LINKS} at "
                            f"{rev} (revision {revision}), the replica has {persist.newest(LINKS)} "
                            f"(revision {persist.revision})")  # fmt: skip
    finally:
        for e in engines:
            e.close()


def test_a_write_checked_while_the_watch_decodes_a_newer_record_keeps_both(  # type: ignore[no-untyped-def]
    tiny: Fabric, etcd
) -> None:
    """The watch marks another replica's record taken before it is in the state; a link
    report checked in that window must not be stored against that revision without it."""
    import threading

    from controller.service.engine import Engine
    from controller.service.replica import Replica
    from sim.driver import EmulatedDriver
    from sim.switches import EmulatedFabric

    emulated = EmulatedFabric(tiny)
    url = f"etcd://{etcd.endpoint}/fte"
    first, second = (
        Engine(tiny, EmulatedDriver(emulated=emulated), debounce=0.0, reconcile_interval=60,
               replica=Replica(tiny, EtcdStore.from_url(url, "tiny"), replica_id=f"r{i}"))
        for i in range(2)
    )  # fmt: skip
    one, two = (int(tiny.rack_link(0, c)) for c in (0, 1))
    persist = first.replica.persist
    assert persist is not None
    decode, entered, release = persist.decode, threading.Event(), threading.Event()

    def slow_decode(key, value, into) -> None:  # type: ignore[no-untyped-def]
        if key == LINKS and threading.current_thread().name == "etcd-follow":
            entered.set()
            release.wait(10)
        decode(key, value, into)

    persist.decode = slow_decode  # type: ignore[method-assign]
    try:
        second.report_links({two: 0.0})
        assert entered.wait(10), "the first replica's watch never saw the second's report"
        writer = threading.Thread(target=first.report_links, args=({one: 0.0},))
        writer.start()
        time.sleep(0.5)  # the report is checked and written now, or waits for the watch
        release.set()
        writer.join(10)
        for e in (first, second):
            assert _until(lambda e=e: set(e.health.down_links().tolist()) == {one, two}), (
                f"replica {e.replica.id} has {sorted(e.health.down_links().tolist())}"
            )
    finally:
        release.set()
        first.close()
        second.close()


def test_a_deposed_leader_that_still_believes_it_leads_is_fenced_at_the_switch(
    tiny: Fabric,
    etcd,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
) -> None:
    from controller.model.jobs import Job
    from controller.service.engine import Engine
    from controller.service.etcd import EtcdLeadership
    from controller.service.replica import Replica
    from sim.driver import EmulatedDriver
    from sim.switches import EmulatedFabric

    fabric = tiny
    emulated = EmulatedFabric(fabric)
    url = f"etcd://{etcd.endpoint}/fte"

    def engine(name: str) -> Engine:
        replica = Replica(fabric, EtcdStore.from_url(url, "tiny"), replica_id=name)
        return Engine(fabric, EmulatedDriver(emulated=emulated), debounce=0.0,
                      reconcile_interval=60, replica=replica)  # fmt: skip

    old = engine("old")
    assert _until(old.replica.is_leader)
    new = engine("new")
    try:
        old.put_job(Job("a", (0, 4), dp=2, tp=2), 0)
        assert old.wait_idle(10) and old.ops_pushed > 0
        tables = emulated.routes()
        # the old leader freezes (its lease is no longer renewed) and the other takes over
        lead = old.replica.leadership
        assert isinstance(lead, EtcdLeadership)
        lead._stop.set()
        assert lead._thread is not None
        lead._thread.join()
        assert _until(new.replica.is_leader, 5)
        # resumed, it still believes it leads (as if its clock had not moved) and pushes
        lead._valid_until = time.monotonic() + 60
        pushed = old.ops_pushed
        failures = old.metrics.registry.get_sample_value("fabric_te_push_failures_total")
        caplog.clear()
        old.put_job(Job("b", (2, 6), dp=2, tp=2), 0)  # accepted: the store takes it
        assert old.wait_idle(10)
        assert "Fenced" in old.last_error
        # an expected refusal, not a failure: no traceback, not counted, the driver is fine
        refused = [r for r in caplog.records if "no longer leads" in r.getMessage()]
        assert refused and not any(r.exc_info for r in caplog.records)
        assert old.metrics.registry.get_sample_value("fabric_te_push_failures_total") == failures
        assert old.installer.push_ok
        assert old.ops_pushed == pushed  # the fence refused every batch before any switch
        # the real leader pushed job b itself; the switches hold its routes only
        assert _until(lambda: new.wanted is not None and emulated.routes() != tables, 5)
        assert new.wait_idle(10) and set(emulated.routes()) == set(new.wanted or ())
    finally:
        old.close()
        new.close()


def test_a_write_after_etcd_restarted_goes_out_on_a_fresh_connection(etcd) -> None:  # type: ignore[no-untyped-def]
    """The defect: each thread's kept-alive connection outlived an etcd restart, so its first
    write went out on a dead connection and was StoreAmbiguous (etcd had it not)."""
    store = EtcdStore.from_url(f"etcd://{etcd.endpoint}/fte", "tiny")
    try:
        revision = store.commit("jobs/a", b"1", 0)
        etcd.stop()
        etcd.start()
        assert store.commit("jobs/a", b"2", revision) > revision
        assert store.healthy
    finally:
        store.close()
