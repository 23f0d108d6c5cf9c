"""A fabric built for real in network namespaces, driven by the linux driver, checked with
real packets. Needs root (CI runs as root); every lab has a name unique to this run and is
removed afterwards, even on failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from controller.drivers.linux import LinuxDriver
from controller.drivers.linux_plan import LabPlan, sport_range
from controller.drivers.push import read_back
from controller.errors import DriverError, DriverRejected, LabError
from controller.model.fabric import Fabric
from controller.routes.plan import Add, Delete, Replace
from controller.routes.tables import Entry
from sim.lab import build as lab
from sim.lab import netns, restorer
from sim.lab.cli import install, solved
from sim.lab.links import set_link
from sim.lab.shared import unique_name
from sim.lab.traffic import LabIO, Streams, send_burst, verify

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="lab tests need root to make network namespaces (CI runs as root)"
)
RTSW = "rtsw-p0-r0"
DST = 4  # host-p1-r0-h0: another pod, so the source RTSW has 4 uplinks to choose from


@pytest.fixture(scope="module")
def tiny_lab(tiny: Fabric):
    name = unique_name("lt")
    lab.up(tiny, name, "tiny", underlay="static")
    yield name
    lab.down(name)


@pytest.fixture
def driver(tiny: Fabric, tiny_lab):
    made = LinuxDriver(fabric=tiny, lab=tiny_lab)
    made.clear()
    yield made
    made.clear()
    made.close()


@pytest.fixture
def io(tiny: Fabric, tiny_lab):
    made = LabIO(LabPlan(tiny, tiny_lab))
    yield made
    made.close()


def uplink_counts(fabric: Fabric, io: LabIO) -> np.ndarray:
    counts = io.tx_packets(RTSW)
    return np.array([counts[f"c{c}"] for c in range(fabric.ctsws_per_pod)])


def test_up_status_down_small_and_refusals(pod: Fabric, small: Fabric):
    name = unique_name("ls")
    record = lab.up(small, name, "small", underlay="static")
    try:
        assert set(record.namespaces) <= netns.existing() and len(record.namespaces) == 80
        s = lab.status(name)
        assert s.namespaces_present == 80 and s.ports_up == s.ports == 2 * small.num_links
        with pytest.raises(LabError, match="exists already"):
            lab.up(small, name, "small", underlay="static")
    finally:
        lab.down(name)
    assert not set(record.namespaces) & netns.existing()
    with pytest.raises(LabError, match="no lab"):
        lab.down(name)
    with pytest.raises(LabError, match="at most"):
        lab.up(pod, unique_name("lx"), "pod")


def test_a_failed_up_leaves_nothing(tiny: Fabric, monkeypatch):
    name = unique_name("lf")

    def broken(plan, nodes=None):
        raise LabError("underlay failed on purpose")

    monkeypatch.setattr(lab, "install_static", broken)
    with pytest.raises(LabError, match="on purpose"):
        lab.up(tiny, name, "tiny", underlay="static")
    assert not any(ns.startswith(name + "-") for ns in netns.existing())
    assert not lab.lab_path(name).exists()


def test_a_namespace_in_the_way_is_named_and_left_alone(tiny: Fabric):
    """A namespace of the lab's name that no lab made: `lab up` said the lab existed and
    to run `lab down`, which then found no lab. It says whose the namespace is, and keeps
    its hands off it."""
    name = unique_name("lw")
    stray = f"{name}-host-p0-r0-h0"
    subprocess.run(["ip", "netns", "add", stray], check=True)
    try:
        with pytest.raises(LabError) as err:
            lab.up(tiny, name, "tiny", underlay="static")
        text = str(err.value)
        assert f"namespace {stray} exists already, made by no lab" in text, text
        assert "lab down" not in text, text
        assert stray in netns.existing() and not lab.lab_path(name).exists()
        assert not {ns for ns in netns.existing() if ns.startswith(name + "-")} - {stray}
    finally:
        subprocess.run(["ip", "netns", "del", stray], check=True)


def test_non_root_and_missing_frr_are_clear_errors(tiny: Fabric, monkeypatch):
    from sim.lab import frr

    monkeypatch.setattr(frr, "installed", lambda: False)
    with pytest.raises(LabError, match="FRR is not installed.*--underlay static"):
        lab.up(tiny, unique_name("lr"), "tiny", underlay="frr")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="needs root"):
        lab.up(tiny, unique_name("lr"), "tiny", underlay="static")


def test_the_driver_leaves_foreign_routing_alone(tiny: Fabric, tiny_lab, driver):
    ns = LabPlan(tiny, tiny_lab).netns(RTSW)
    foreign = [
        ["rule", "add", "iif", "h0n0", "lookup", "100", "priority", "100"],
        ["route", "add", "10.1.0.4/32", "via", "10.128.0.33", "table", "100"],
        ["route", "add", "10.1.0.5/32", "via", "10.128.0.33", "table", "1000000"],  # ours? no
    ]
    for cmd in foreign:
        subprocess.run(["ip", "-n", ns, *cmd], check=True)
    try:
        driver.apply(RTSW, [Add(Entry(RTSW, tiny.access_link(0), DST, tiny.rack_link(0, 1)))])
        assert len(driver.read(RTSW)) == 1  # the static-protocol route in our range is not ours
        driver.clear()
        assert driver.read(RTSW) == ()
        show = subprocess.run(["ip", "-n", ns, "route", "show", "table", "all"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        rules = subprocess.run(["ip", "-n", ns, "rule"], capture_output=True, text=True).stdout
        assert "10.1.0.4 via 10.128.0.33 dev c0 table 100" in show
        assert "10.1.0.5 via 10.128.0.33 dev c0 table 1000000" in show
        assert "100:" in rules and "lookup 100" in rules
    finally:
        subprocess.run(["ip", "-n", ns, "rule", "del", "priority", "100"], check=True)
        subprocess.run(["ip", "-n", ns, "route", "flush", "table", "100"], check=True)
        subprocess.run(["ip", "-n", ns, "route", "flush", "table", "1000000"], check=True)


def test_ecmp_spreads_source_ports_over_every_uplink(tiny: Fabric, io, driver):
    before = uplink_counts(tiny, io)
    for sport in range(20000, 20128):
        send_burst(io, 0, sport, DST, sport, 1)
    spread = uplink_counts(tiny, io) - before
    assert spread.sum() >= 128 and (spread > 0).all(), spread


def test_te_entries_steer_every_sampled_flow(tiny: Fabric, tiny_lab, io, driver):
    assignment, routes = solved(tiny, seed=1, fill=1.0)
    install(driver, tiny, routes)
    assert len(routes) > 0
    report = verify(io, assignment, np.flatnonzero(assignment.routed).tolist(), packets=10)
    assert report.checked > 0 and report.matched == report.checked, report.problems
    driver.clear()  # TE withdrawn: ECMP carries everything, nothing is lost
    again = verify(io, assignment, np.flatnonzero(assignment.routed).tolist(), packets=10)
    assert again.dropped == 0 and again.checked == report.checked


def test_bucket_entries_steer_only_their_source_ports(tiny: Fabric, io, driver):
    whole = Entry(RTSW, tiny.access_link(0), DST, tiny.rack_link(0, 1))
    bucket = Entry(RTSW, whole.in_port, DST, tiny.rack_link(0, 2), qp=5)
    driver.apply(RTSW, [Add(whole), Add(bucket)])
    for sport, uplink in ((sport_range(5)[0], 2), (sport_range(5)[1], 2),
                          (sport_range(6)[0], 1), (30000, 1)):  # fmt: skip
        before = uplink_counts(tiny, io)
        send_burst(io, 0, sport, DST, sport, 20)
        delta = uplink_counts(tiny, io) - before
        assert delta[uplink] >= 20 and delta.sum() - delta[uplink] < 20, (sport, delta)


@contextmanager
def restorer_paused(name: str) -> Iterator[None]:
    """Lab `name` without its restorer for the block (to see what the driver alone does)."""
    record = lab.load_record(name)
    restorer.stop(name, record.restorer)
    try:
        yield
    finally:
        record.restorer = restorer.start(name, record.fabric, record.underlay)
        record.save()


def test_admin_down_drops_routes_and_reconcile_restores_them(tiny: Fabric, tiny_lab, driver):
    plan = LabPlan(tiny, tiny_lab)
    keep = Entry(RTSW, tiny.access_link(0), DST, tiny.rack_link(0, 1))
    other = Entry(RTSW, tiny.access_link(1), DST, tiny.rack_link(0, 3))
    bucket = Entry(RTSW, tiny.access_link(2), DST, tiny.rack_link(0, 2), qp=3)
    driver.apply(RTSW, [Add(keep), Add(other), Add(bucket)])
    rules = _rules(plan)
    link = int(tiny.rack_link(0, 1))
    with restorer_paused(tiny_lab):
        set_link(plan, link, "down")
        try:
            assert driver.read(RTSW) == (other, bucket)  # the kernel dropped it; read says so
            bad = Entry(RTSW, tiny.access_link(1), 5, tiny.rack_link(0, 1))
            with pytest.raises(DriverRejected, match="now holds 2 TE entries"):
                driver.apply(RTSW, [Add(Entry(RTSW, tiny.access_link(0), 6,
                                              tiny.rack_link(0, 2))), Add(bad)])  # fmt: skip
            assert driver.read(RTSW) == (other, bucket)  # rolled back
            assert driver.reconcile(RTSW) == 0  # its port is still down
            moved = Entry(RTSW, other.in_port, DST, tiny.rack_link(0, 2))
            driver.apply(RTSW, [Replace(other, moved)])
            other = driver.read(RTSW)[0]  # a batch while the port is down: `keep` stays lost
        finally:
            set_link(plan, link, "up")
        assert driver.read(RTSW) == (other, bucket)
        assert driver.reconcile(RTSW) == 1
        assert driver.read(RTSW) == (keep, other, bucket)
        assert _rules(plan) == rules  # and every table still has its rule
        set_link(plan, link, "down")  # again; this time the next batch restores it
        set_link(plan, link, "up")
        assert driver.read(RTSW) == (other, bucket)
        third = Entry(RTSW, tiny.access_link(1), 6, tiny.rack_link(0, 0))
        driver.apply(RTSW, [Add(third)])
        assert driver.read(RTSW) == (keep, other, third, bucket)


def test_a_stray_route_in_a_te_table_is_named_as_ip_route_writes_it(tiny: Fabric, tiny_lab,
                                                                     driver):  # fmt: skip
    """A route of the driver's protocol in its tables that no TE entry can be (a /24) stops
    the switch's reads; the error says what it is in addresses, and how to remove it."""
    ns = LabPlan(tiny, tiny_lab).netns(RTSW)
    table = driver.plan.table(RTSW, tiny.access_link(0), -1)
    stray = ["route", "add", "10.1.0.0/24", "via", "10.128.0.33", "proto", "84",
             "table", str(table)]  # fmt: skip
    subprocess.run(["ip", "-n", ns, *stray], check=True)
    try:
        with pytest.raises(DriverError) as err:
            driver.read(RTSW)
        text = str(err.value)
        assert "10.1.0.0/24 via 10.128.0.33 dev c0" in text, text
        assert "not a host route" in text and f"table {table} proto 84" in text, text
    finally:
        subprocess.run(["ip", "-n", ns, "route", "flush", "table", str(table)], check=True)


def test_lab_apply_refuses_to_plan_over_a_switch_it_cannot_read(tiny: Fabric, tiny_lab, driver,
                                                                 tmp_path, capsys):  # fmt: skip
    """A switch whose table cannot be read is not an empty switch: `lab apply` (dry run or
    not) names it and plans nothing, as `solve --apply linux` does."""
    from controller.cli.main import main
    from controller.formats.route_file import write_routes

    assignment, routes = solved(tiny, seed=1, fill=1.0)
    saved = tmp_path / "routes.json"
    write_routes(saved, tiny, assignment, routes)
    install(driver, tiny, routes)
    ns = LabPlan(tiny, tiny_lab).netns(RTSW)
    table = driver.plan.table(RTSW, tiny.access_link(0), -1)
    subprocess.run(["ip", "-n", ns, "route", "add", "10.1.0.0/24", "via", "10.128.0.33",
                    "proto", "84", "table", str(table)], check=True)  # fmt: skip
    try:
        for dry in (["--dry-run"], []):
            capsys.readouterr()
            assert main(["lab", "apply", str(saved), "--name", tiny_lab, *dry]) == 1
            out, err = capsys.readouterr()
            assert "plan:" not in out, out
            assert f"{RTSW}: a route of protocol 84 in TE table {table} is not a host" in err
    finally:
        subprocess.run(["ip", "-n", ns, "route", "del", "10.1.0.0/24", "proto", "84",
                        "table", str(table)], check=True)  # fmt: skip
    assert read_back(driver, driver.switches())[0] == routes


def test_verify_and_apply_on_a_lab_missing_a_namespace_name_it(tiny: Fabric, tmp_path, capsys):
    """A namespace deleted by hand (`ip netns del`): verify and apply say which, before any
    solve or push, instead of a FileNotFoundError traceback."""
    from controller.cli.main import main

    name = unique_name("lm")
    lab.up(tiny, name, "tiny", underlay="static")
    try:
        subprocess.run(["ip", "netns", "del", f"{name}-{RTSW}"], check=True)
        capsys.readouterr()
        assert main(["lab", "verify", "--name", name, "--sample", "4"]) == 2
        assert (f"lab {name!r} lacks 1 of its namespaces ({name}-{RTSW}): `tectl lab down "
                f"--name {name}`") in capsys.readouterr().err  # fmt: skip
        assert main(["lab", "apply", str(tmp_path / "any.json"), "--name", name]) == 2
        assert f"lacks 1 of its namespaces ({name}-{RTSW})" in capsys.readouterr().err
    finally:
        lab.down(name)


def test_lab_link_with_one_bad_name_changes_no_link(tiny: Fabric, tiny_lab, capsys):
    """`lab link GOOD=down BAD=down` set GOOD down, then failed on BAD (exit 2, nothing said
    of GOOD): every name is now checked before any link is changed."""
    from controller.cli.main import main

    good = "rtsw-p0-r0:ctsw-p0-c1"
    ns = LabPlan(tiny, tiny_lab).netns(RTSW)
    try:
        assert main(["lab", "link", f"{good}=down", "rtsw-p0-r0:ctsw-p0-c9=down",
                     "--name", tiny_lab]) == 2  # fmt: skip
        assert "unknown link 'rtsw-p0-r0:ctsw-p0-c9'" in capsys.readouterr().err
        shown = subprocess.run(["ip", "-n", ns, "-br", "link", "show", "c1"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert " UP " in shown, shown
    finally:
        assert main(["lab", "link", f"{good}=up", "--name", tiny_lab]) == 0


def test_lab_link_says_the_link_changed_when_the_controller_is_not_told(tiny: Fabric,
                                                                          tiny_lab, capsys,
                                                                          monkeypatch):
    """`lab link LINK=down --controller ADDR` with no controller there: the link is down in
    the lab all the same, and the error says so (it named only the unreachable controller)."""
    from controller.cli.main import main
    from sim.processes import free_port

    good = "rtsw-p0-r0:ctsw-p0-c1"
    monkeypatch.setenv("FABRIC_TE_INSECURE", "1")  # plaintext: the port has no listener
    try:
        assert main(["lab", "link", f"{good}=down", "--name", tiny_lab, "--controller",
                     f"127.0.0.1:{free_port()}"]) != 0  # fmt: skip
        err = capsys.readouterr().err
        assert f"{good}=down is set in the lab, but the controller" in err, err
        assert f"tectl link {good}=down" in err
    finally:
        assert main(["lab", "link", f"{good}=up", "--name", tiny_lab]) == 0


def _rules(plan: LabPlan) -> list[str]:
    shown = subprocess.run(["ip", "-n", plan.netns(RTSW), "rule"], capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    return sorted(line for line in shown.splitlines() if line.startswith(("20000:", "20001:")))


def _kernel_te_routes(plan: LabPlan) -> int:
    """TE routes (protocol 84) in every switch namespace, counted by `ip route`."""
    total = 0
    for switch in plan.switches:
        shown = subprocess.run(["ip", "-n", plan.netns(switch), "route", "show", "table", "all",
                                "proto", "84"], capture_output=True, text=True, check=True)
        total += len(shown.stdout.splitlines())
    return total


def _wait_for(predicate, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_te_routes_survive_flaps_with_no_controller(tiny: Fabric, tiny_lab, io, driver, capsys):
    """The defect: `lab link down` + `up` with no controller running deleted the TE routes
    through that port for good. Now the lab's restorer puts them back: the kernel holds as
    many TE routes after the flap as before, and every flow is on its TE path again; the
    same for a flap made by hand with `ip link` (the static underlay comes back too)."""
    from controller.cli.main import main

    plan = LabPlan(tiny, tiny_lab)
    assignment, routes = solved(tiny, seed=1, fill=1.0)
    install(driver, tiny, routes)  # then no controller runs: nothing but the lab
    rows = np.flatnonzero(assignment.routed).tolist()
    before = _kernel_te_routes(plan)
    assert before == len(routes) > 0
    via = [e.next_hop for e in routes.table(RTSW)] if RTSW in routes.switches() else []
    link = tiny.link_name(via[0] if via else int(tiny.rack_link(0, 1)))
    assert main(["lab", "link", f"{link}=down", "--name", tiny_lab]) == 0
    dropped = _kernel_te_routes(plan)
    assert main(["lab", "link", f"{link}=up", "--name", tiny_lab]) == 0
    capsys.readouterr()
    assert dropped < before  # the kernel did drop them with the port ...
    assert _wait_for(lambda: _kernel_te_routes(plan) == before), _kernel_te_routes(plan)
    with LinuxDriver(fabric=tiny, lab=tiny_lab) as fresh:  # ... and exactly they came back
        assert read_back(fresh, fresh.switches())[0] == routes
    report = verify(io, assignment, rows, packets=5)
    assert report.matched == report.checked > 0, report.problems
    # by hand, both ends admin-down then up: no `lab link`, so no underlay put back by it
    ends = plan.ends(tiny.link_by_name(link))
    for state in ("down", "up"):
        for port in ends:
            subprocess.run(["ip", "-n", plan.netns(port.node), "link", "set", "dev",
                            port.ifname, state], check=True)  # fmt: skip
        if state == "down":
            assert _kernel_te_routes(plan) < before
    assert _wait_for(lambda: _kernel_te_routes(plan) == before), _kernel_te_routes(plan)
    report = verify(io, assignment, rows, packets=5)
    assert report.matched == report.checked > 0, report.problems


def test_the_restorer_never_puts_back_what_a_batch_removed_while_the_port_was_down(
    tiny: Fabric, tiny_lab, driver
):
    """While a port is down, the controller removes one entry through it and moves another
    elsewhere; when the port comes up, the restorer puts back only the third, untouched one."""
    plan = LabPlan(tiny, tiny_lab)
    via = int(tiny.rack_link(0, 1))
    gone = Entry(RTSW, tiny.access_link(0), DST, via)
    moved = Entry(RTSW, tiny.access_link(1), DST, via)
    kept = Entry(RTSW, tiny.access_link(2), DST, via)
    driver.apply(RTSW, [Add(gone), Add(moved), Add(kept)])
    set_link(plan, via, "down")
    try:
        assert driver.read(RTSW) == ()
        elsewhere = Entry(RTSW, moved.in_port, DST, tiny.rack_link(0, 2))
        driver.apply(RTSW, [Delete(gone), Replace(moved, elsewhere)])
    finally:
        set_link(plan, via, "up")
    assert _wait_for(lambda: driver.read(RTSW) == (elsewhere, kept)), driver.read(RTSW)
    time.sleep(0.3)  # and nothing else comes back later
    assert driver.read(RTSW) == (elsewhere, kept)


class _Killed(BaseException):
    """Stands for SIGKILL part-way through a batch: no handler of the driver's runs."""


def test_a_batch_cut_off_part_way_is_completed_never_undone_by_the_next(
    tiny: Fabric, tiny_lab, driver, monkeypatch
):
    """A process killed after a batch's route deletes went in: the next batch to that switch
    (from a fresh driver, as after a restart) must not put back the entries it removed."""
    old = [Entry(RTSW, tiny.access_link(0), dst, tiny.rack_link(0, 1)) for dst in (4, 5, 6)]
    driver.apply(RTSW, [Add(e) for e in old])
    new = Entry(RTSW, tiny.access_link(1), DST, tiny.rack_link(0, 2))
    send = driver._send

    def killed_after_deletes(sw, what, *args, **kwargs):  # type: ignore[no-untyped-def]
        send(sw, what, *args, **kwargs)
        if what == "route deletes":
            raise _Killed

    monkeypatch.setattr(driver, "_send", killed_after_deletes)
    with pytest.raises(_Killed):
        driver.apply(RTSW, [Add(new), *(Delete(e) for e in old)])
    fresh = LinuxDriver(fabric=tiny, lab=tiny_lab)
    try:
        assert fresh.read(RTSW) == (new,)
        fresh.apply(RTSW, [])
        assert fresh.read(RTSW) == (new,)
        assert fresh.reconcile(RTSW) == 0
    finally:
        fresh.close()


def _flows_and_routes(fabric: Fabric):
    assignment, routes = solved(fabric, seed=1, fill=1.0)
    rows = np.flatnonzero(assignment.routed)
    return assignment, routes, rows


def test_fail_static_kill_controller_then_remove_all_te_state(
    tiny: Fabric, tiny_lab, io, driver, tmp_path
):
    """`tectl serve --driver linux` installs a job mix; kill -9 it while every flow streams;
    then remove all TE state while every flow streams."""
    import json
    import socket

    from controller.cli.main import main
    from controller.drivers.push import read_back
    from controller.formats.placement import dump_placement, load_jobs

    assignment, routes, rows = _flows_and_routes(tiny)
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(dump_placement(tiny, load_jobs(tiny, "random", seed=1, fill=1.0))))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "tiny", "--driver",
         "linux", "--lab", tiny_lab, "--listen", address, "--metrics-port", "0", "--insecure"],
        stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stderr is not None
        while "serving" not in proc.stderr.readline():
            assert proc.poll() is None, "tectl serve did not start"
        assert main(["job", "put", "--server", address, "--insecure", str(jobs)]) == 0
        deadline = time.monotonic() + 30
        while read_back(driver, driver.switches())[0] != routes:
            assert time.monotonic() < deadline, "the controller did not install the mix"
            time.sleep(0.1)
        streams = Streams(io, assignment, rows.tolist()).start()
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(0.3)
        killed = streams.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed.sent > 300 and killed.lost == 0, killed.per_flow_lost
    assert read_back(driver, driver.switches())[0] == routes  # the routes outlive it ...
    still = verify(io, assignment, rows.tolist(), packets=5)
    assert still.matched == still.checked > 0, still.problems  # ... and still steer
    streams = Streams(io, assignment, rows.tolist()).start()
    time.sleep(0.2)
    driver.clear()  # every TE route and rule gone: ECMP carries all
    time.sleep(0.3)
    cleared = streams.stop()
    assert cleared.sent > 300 and cleared.lost == 0, cleared.per_flow_lost
    assert driver.read(RTSW) == ()


def test_a_moving_update_under_streams_loses_nothing(tiny: Fabric, io, driver):
    assignment, routes, rows = _flows_and_routes(tiny)
    install(driver, tiny, routes)
    streams = Streams(io, assignment, rows.tolist()).start()
    time.sleep(0.2)
    for switch in driver.switches():
        moved = []
        for entry in driver.read(switch):
            if switch.startswith("rtsw"):
                rtsw = tiny.node_by_name(switch) - tiny.node_id("rtsw", 0)
                c = (entry.next_hop - tiny.rack_link(rtsw, 0)) % tiny.ctsws_per_pod
                target = tiny.rack_link(rtsw, (c + 1) % tiny.ctsws_per_pod)
                moved.append(Replace(entry, Entry(switch, entry.in_port, entry.dst_host,
                                                  int(target), entry.owner, entry.qp)))  # fmt: skip
        if moved:
            driver.apply(switch, moved)
    time.sleep(0.2)
    report = streams.stop()
    assert report.sent > 300 and report.lost == 0, report.per_flow_lost


@pytest.mark.skipif(not os.access("/usr/lib/frr/bgpd", os.X_OK), reason="FRR not installed")
def test_frr_underlay_converges_and_carries_te(tiny: Fabric):
    from sim.lab.frr import wait_converged

    name = unique_name("lb")
    lab.up(tiny, name, "tiny", underlay="frr")
    try:
        seconds = wait_converged(LabPlan(tiny, name), timeout=60)
        assert seconds < 60
        assignment, routes = solved(tiny, seed=1, fill=1.0)
        with LinuxDriver(fabric=tiny, lab=name) as d:
            install(d, tiny, routes)
        frr_io = LabIO(LabPlan(tiny, name))
        try:
            report = verify(frr_io, assignment, np.flatnonzero(assignment.routed).tolist(), 10)
        finally:
            frr_io.close()
        assert report.matched == report.checked > 0, report.problems
        frr_io = LabIO(LabPlan(tiny, name))
        streams = Streams(frr_io, assignment, np.flatnonzero(assignment.routed).tolist())
        try:
            streams.start()
            time.sleep(0.2)
            with LinuxDriver(fabric=tiny, lab=name) as d:
                d.clear()  # TE withdrawn: BGP's ECMP carries every flow, nothing lost
            time.sleep(0.2)
            stream = streams.stop()
        finally:
            frr_io.close()
        assert stream.sent > 300 and stream.lost == 0, stream.per_flow_lost
    finally:
        lab.down(name)
    assert not subprocess.run(["pgrep", "-f", f"{name}-"], capture_output=True).stdout


def _frr_processes(name: str) -> list[int]:
    mark = str(lab.lab_path(name) / "frr") + "/"
    out = []
    for proc in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if mark in proc.read_bytes().decode(errors="replace"):
                out.append(int(proc.parent.name))
        except OSError:
            continue
    return out


@pytest.mark.skipif(not os.access("/usr/lib/frr/bgpd", os.X_OK), reason="FRR not installed")
def test_an_up_interrupted_while_frr_starts_leaves_no_daemon(tiny: Fabric, monkeypatch):
    """Ctrl-C while the daemons are being started: those already launched have not written
    their pid files yet, and must be stopped all the same."""
    from sim.lab import frr

    name = unique_name("li")
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def popen(cmd, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(frr.FRR_BIN) not in " ".join(map(str, cmd)):
            return real(cmd, *args, **kwargs)
        if len(started) == 6:  # Ctrl-C as the 7th daemon is launched
            raise KeyboardInterrupt
        started.append(real(cmd, *args, **kwargs))
        return started[-1]

    monkeypatch.setattr(frr.subprocess, "Popen", popen)
    try:
        with pytest.raises(KeyboardInterrupt):
            lab.up(tiny, name, "tiny", underlay="frr")
        for proc in started:
            proc.wait(timeout=10)
        time.sleep(1.0)  # a daemon that was still starting would be up by now
        left = _frr_processes(name)
        assert not left, f"FRR processes of lab {name} left running: {left}"
        assert not any(ns.startswith(name + "-") for ns in netns.existing())
        assert not lab.lab_path(name).exists()
    finally:
        for pid in _frr_processes(name):
            os.kill(pid, signal.SIGKILL)


def test_tectl_lab_commands(tiny: Fabric, capsys):
    from controller.cli.main import main

    name = unique_name("lc")
    assert main(["lab", "up", "--fabric", "tiny", "--name", name, "--underlay", "static",
                 "--fail", "rtsw-p1-r1:ctsw-p1-c3=0.5"]) == 0  # fmt: skip
    try:
        plan = LabPlan(tiny, name)
        qdisc = subprocess.run(["ip", "netns", "exec", plan.netns("rtsw-p1-r1"), "tc", "qdisc",
                                "show", "dev", "c3"], capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "5Gbit" in qdisc
        assert main(["lab", "status", "--name", name]) == 0
        assert "24/24 namespaces, 80/80 ports up; restorer running" in capsys.readouterr().out
        assert main(["lab", "link", "down", "rtsw-p0-r0:ctsw-p0-c1", "--name", name]) == 0
        assert main(["lab", "status", "--name", name]) == 0  # every namespace is there
        assert "78/80 ports up" in capsys.readouterr().out
        # a down link degraded comes back up at the rate, as the controller reads LINK=0.5
        assert main(["lab", "link", "rtsw-p0-r0:ctsw-p0-c1=0.5", "--name", name]) == 0
        assert main(["lab", "status", "--name", name]) == 0
        assert "80/80 ports up" in capsys.readouterr().out
        qdisc = subprocess.run(["ip", "netns", "exec", plan.netns("rtsw-p0-r0"), "tc", "qdisc",
                                "show", "dev", "c1"], capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "1Gbit" in qdisc
        assert main(["lab", "link", "rtsw-p0-r0:ctsw-p0-c1=up", "--name", name]) == 0
        assert capsys.readouterr().out == f"lab {name}: rtsw-p0-r0:ctsw-p0-c1=up\n"
        # degraded, in the one spelling and the older one: a tc rate limit either way
        for argv in (["rtsw-p0-r1:ctsw-p0-c2=0.5"], ["degrade", "rtsw-p0-r1:ctsw-p0-c2"]):
            assert main(["lab", "link", *argv, "--rate", "2gbit", "--name", name]) == 0
            assert capsys.readouterr().out == f"lab {name}: rtsw-p0-r1:ctsw-p0-c2=0.5\n"
            qdisc = subprocess.run(["ip", "netns", "exec", plan.netns("rtsw-p0-r1"), "tc",
                                    "qdisc", "show", "dev", "c2"], capture_output=True,
                                   text=True).stdout  # fmt: skip
            assert "tbf" in qdisc and "2Gbit" in qdisc
        assert main(["lab", "link", "rtsw-p0-r1:ctsw-p0-c2=up", "--name", name]) == 0
        assert main(["lab", "verify", "--name", name, "--sample", "8", "--packets", "5"]) == 0
        assert "8 matched, 0 misrouted, 0 dropped" in capsys.readouterr().out
    finally:
        assert main(["lab", "down", "--name", name]) == 0
    assert main(["lab", "status", "--name", name]) == 2
    assert "no lab" in capsys.readouterr().err


def test_parallel_links_of_wide_are_named_aliased_and_steered(wide: Fabric):
    name = unique_name("lw")
    lab.up(wide, name, "wide", underlay="static")
    try:
        plan = LabPlan(wide, name)
        shown = subprocess.run(["ip", "-n", plan.netns("ctsw-p0-c0"), "link", "show", "r0k1"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert "alias rtsw-p0-r0:ctsw-p0-c0#1" in shown
        assignment, routes = solved(wide, seed=1, fill=1.0)
        with LinuxDriver(fabric=wide, lab=name) as d:
            install(d, wide, routes)
        wide_io = LabIO(plan)
        try:
            report = verify(wide_io, assignment, np.flatnonzero(assignment.routed).tolist(), 5)
        finally:
            wide_io.close()
        assert report.matched == report.checked > 0, report.problems
    finally:
        lab.down(name)


def test_rules_count_ports_and_buckets_never_entries(tiny: Fabric, tiny_lab, driver):
    entries = [Entry(RTSW, tiny.access_link(nic), dst, tiny.rack_link(0, dst % 4), qp=qp)
               for nic in (0, 1) for dst in range(2, 8) for qp in (-1, 3)]  # fmt: skip
    driver.apply(RTSW, [Add(e) for e in entries])
    assert len(driver.read(RTSW)) == 24
    rules = subprocess.run(["ip", "-n", LabPlan(tiny, tiny_lab).netns(RTSW), "rule"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    ours = [line for line in rules.splitlines() if line.startswith(("20000:", "20001:"))]
    assert len(ours) == 4  # 2 ports x (whole flow, bucket 3), for 24 entries
    assert sum("sport 49344-49407 dport 4791" in line for line in ours) == 2


def test_an_entry_whose_rule_was_deleted_reads_missing_and_is_put_back(
    tiny: Fabric, tiny_lab, driver
):  # type: ignore[no-untyped-def]
    """A route whose table no rule selects forwards nothing: it reads as missing (so the
    controller's reconcile sees the switch differ), and applying it again restores the
    rule."""
    entries = [Entry(RTSW, tiny.access_link(0), dst, tiny.rack_link(0, dst % 4))
               for dst in range(2, 5)]  # fmt: skip
    driver.apply(RTSW, [Add(e) for e in entries])
    netns = LabPlan(tiny, tiny_lab).netns(RTSW)
    rules = subprocess.run(["ip", "-n", netns, "rule"], capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    ours = [line for line in rules.splitlines() if line.startswith("20001:")]
    assert len(ours) == 1
    table = ours[0].split("lookup ")[1].split()[0]
    subprocess.run(["ip", "-n", netns, "rule", "del", "priority", "20001", "lookup", table],
                   check=True)  # fmt: skip
    assert driver.read(RTSW) == ()
    driver.apply(RTSW, [Add(e) for e in entries])
    assert len(driver.read(RTSW)) == 3


def test_a_lab_taken_down_under_a_driver_is_unavailable_not_written(tiny: Fabric):
    """The lab taken down under a running driver: its cached netlink socket would keep the
    deleted namespace alive and its store make the lab's directory again (a lab no command
    can remove); both are refused instead, naming what is gone."""
    from controller.drivers.linux_plan import lab_dir
    from controller.errors import DriverUnavailable

    name = unique_name("lg")
    lab.up(tiny, name, "tiny", underlay="static")
    try:
        with LinuxDriver(fabric=tiny, lab=name) as d:
            d.apply(RTSW, [Add(Entry(RTSW, tiny.access_link(0), 2, tiny.rack_link(0, 1)))])
            assert len(d.read(RTSW)) == 1
            lab.down(name)
            with pytest.raises(DriverUnavailable, match="is gone"):
                d.read(RTSW)
            with pytest.raises(DriverUnavailable, match="cannot open namespace"):
                d.apply(RTSW, [Add(Entry(RTSW, tiny.access_link(0), 3, tiny.rack_link(0, 1)))])
            assert not lab_dir(name).exists()
    finally:
        if lab_dir(name).exists():
            lab.down(name)


def _held_lab(name: str, tmp_path, **popen) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    """A separate process that builds lab `name` (owned by itself) and holds it."""
    script = ("import time\n"
              "from controller.model.clos import PRESETS, build\n"
              "from sim.lab import build as lab\n"
              f"lab.up(build(PRESETS['tiny']), {name!r}, 'tiny')\n"
              "print('held', flush=True)\n"
              "time.sleep(120)\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            **popen)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lab_whose_owner_was_killed_is_reaped(tiny: Fabric, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The defect: a test process killed before its exit hooks left its whole lab behind and
    nothing noticed. Now the record names the owner; `lab ls` shows the orphan and `lab gc`
    removes it, and only it (a lab whose owner runs, and a kept one, stay)."""
    import json

    from controller.cli.main import main

    orphan, mine = unique_name("lo"), unique_name("lm")
    proc = _held_lab(orphan, tmp_path)
    lab.up(tiny, mine, "tiny")  # owned by this (live) process
    try:
        names = lab.load_record(orphan).namespaces
        proc.kill()  # SIGKILL: no exit hook runs
        proc.wait()
        assert set(names) <= netns.existing()  # left behind
        assert main(["lab", "ls", "--json"]) == 0
        listed = {row["lab"]: row for row in json.loads(capsys.readouterr().out)}
        assert listed[orphan]["orphan"] and listed[orphan]["owner"]["pid"] == proc.pid
        assert not listed[mine]["orphan"]
        assert main(["lab", "gc"]) == 0
        assert f"removed orphaned lab {orphan}" in capsys.readouterr().out
        assert not set(names) & netns.existing() and not lab.lab_path(orphan).exists()
        assert lab.status(mine).namespaces_present == lab.status(mine).namespaces
    finally:
        if proc.poll() is None:
            proc.kill()
        lab.reap()
        lab.down(mine)


def test_a_test_run_stopped_by_sigterm_removes_its_labs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pytest run holding a lab fixture, stopped with SIGTERM (as CI does on a timeout),
    runs its finalizers: the lab is gone when it exits."""
    name = unique_name("lg")
    (tmp_path / "conftest.py").write_text(
        "from sim.lab.shared import exit_on_signals\n\n\n"
        "def pytest_sessionstart(session):\n    exit_on_signals()\n")  # fmt: skip
    (tmp_path / "test_hold.py").write_text(
        "import time\n\nimport pytest\n\n"
        "from controller.model.clos import PRESETS, build\nfrom sim.lab import build as lab\n\n\n"
        "@pytest.fixture\ndef held():\n"
        f"    lab.up(build(PRESETS['tiny']), {name!r}, 'tiny')\n"
        f"    yield\n    lab.down({name!r})\n\n\n"
        "def test_hold(held):\n    print('held', flush=True)\n    time.sleep(120)\n")  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while "held" not in proc.stdout.readline():
            assert time.monotonic() < deadline and proc.poll() is None
        names = lab.load_record(name).namespaces
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert not lab.lab_path(name).exists() and not set(names) & netns.existing()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if lab.lab_path(name).exists():
            lab.down(name)


def _up_stopped_while_building(name: str, sig: int) -> subprocess.CompletedProcess[str]:
    """`tectl lab up --fabric small --name NAME` (kept: no owner) in a new process, sent
    `sig` once its record says it is building."""
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli.main", "lab", "up",
                             "--fabric", "small", "--name", name, "--underlay", "static"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(root)))  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if lab.load_record(name).state == "building":
                    break
            except LabError:
                pass
            time.sleep(0.005)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_lab_up_stopped_by_sigterm_or_sighup_removes_what_it_made(sig) -> None:  # type: ignore[no-untyped-def]
    """As on Ctrl-C: `timeout`, a closed terminal or a cancelled job leave nothing behind
    (they left a half-built lab, kept until `lab down`)."""
    name = unique_name("lt")
    try:
        done = _up_stopped_while_building(name, sig)
        assert done.returncode == 130, (done.returncode, done.stderr)
        assert not lab.lab_path(name).exists()
        assert not any(ns.startswith(name + "-") for ns in netns.existing())
    finally:
        if lab.lab_path(name).exists():
            lab.down(name)


def test_a_lab_up_killed_while_building_is_an_orphan(capsys) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL runs no handler: the half-built lab's record names its builder until it is
    up, so `lab gc` (and the next `lab up`) remove it; it was kept until `lab down`."""
    from controller.cli.main import main

    name = unique_name("lk")
    try:
        done = _up_stopped_while_building(name, signal.SIGKILL)
        assert done.returncode == -signal.SIGKILL
        assert lab.load_record(name).state == "building"
        time.sleep(2)  # an `ip -batch` the build had started outlives it for a moment
        assert main(["lab", "gc"]) == 0
        assert f"removed orphaned lab {name}" in capsys.readouterr().out
        assert not lab.lab_path(name).exists()
        assert not any(ns.startswith(name + "-") for ns in netns.existing())
    finally:
        if lab.lab_path(name).exists():
            lab.down(name)


def _tectl(*argv: str) -> subprocess.CompletedProcess[str]:
    """`tectl ARGV` in a new process, as a user runs it."""
    root = Path(__file__).resolve().parents[3]
    return subprocess.run([sys.executable, "-m", "controller.cli.main", *argv],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(root)))  # fmt: skip


def test_solve_apply_linux_and_lab_apply_install_routes_on_a_lab(
    tiny: Fabric, tiny_lab, driver, tmp_path
):
    """The defect: `tectl solve --apply linux` failed (the driver needs a lab) and nothing
    installed a saved route file on a lab. Now `solve --apply linux --lab NAME` pushes and
    checks with packets, and `lab apply FILE` installs a file; errors exit 2 naming why."""
    import json

    from controller.formats.route_file import read_routes

    saved = tmp_path / "routes.json"
    done = _tectl("solve", "--fabric", "tiny", "--seed", "1", "--apply", "linux", "--lab",
                  tiny_lab, "--out", str(saved), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["apply"]
    assert data["push_ok"] and data["verify_ok"] and data["lab"] == tiny_lab
    _, routes = read_routes(saved, tiny)
    assert read_back(driver, driver.switches())[0] == routes and len(routes) > 0
    driver.clear()
    done = _tectl("lab", "apply", str(saved), "--name", tiny_lab)
    assert done.returncode == 0, done.stderr
    assert f"lab {tiny_lab} (fabric tiny): {saved}: {len(routes):,} TE entries" in done.stdout
    assert " matched, 0 misrouted, 0 dropped" in done.stdout
    assert read_back(driver, driver.switches())[0] == routes
    assert _kernel_te_routes(LabPlan(tiny, tiny_lab)) == len(routes)
    again = _tectl("lab", "apply", str(saved), "--lab", tiny_lab, "--sample", "0")
    assert again.returncode == 0 and "plan: no operations" in again.stdout, again.stdout
    other = tmp_path / "small.json"
    doc = json.loads(saved.read_text())
    other.write_text(json.dumps({**doc, "fabric": "small"}))
    refused = _tectl("lab", "apply", str(other), "--name", tiny_lab)
    assert refused.returncode == 2 and "routes are for fabric 'small'" in refused.stderr
    missing = _tectl("solve", "--fabric", "tiny", "--apply", "linux", "--lab", "nosuch")
    assert missing.returncode == 2
    assert "no lab 'nosuch' is running; running labs:" in missing.stderr
    assert f"{tiny_lab} (fabric tiny)" in missing.stderr
    wrong = _tectl("solve", "--fabric", "tiny", "--apply", "file", "--lab", tiny_lab)
    assert wrong.returncode == 2 and "--lab is for --apply linux" in wrong.stderr
    assert read_back(driver, driver.switches())[0] == routes  # none of those changed a thing
