"""`tectl serve` as a process, and the client commands against a running controller."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.cli.main import main
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.server import start
from sim.driver import EmulatedDriver
from sim.processes import free_port


def _not_strict(token: str) -> None:
    raise ValueError(f"not strict JSON: {token}")


def test_client_commands(small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fabric = small
    running = start(Engine(fabric, EmulatedDriver(fabric), debounce=0.01), "127.0.0.1:0")
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    try:
        jobs = tmp_path / "jobs.json"
        hosts = [fabric.host_name(h) for h in range(8)]
        # asked twice its NICs' line rate: accepted, and said (job describe, figures)
        jobs.write_text(json.dumps({"jobs": [{"id": "llm", "hosts": hosts, "tp": 4,
                                              "demand_gbps": 800}]}))  # fmt: skip
        assert main(["job", "put", str(jobs), *server]) == 0
        assert running.engine.wait_idle()
        assert main(["job", "ls", *server]) == 0
        assert "llm\tgeneration 1\t8 hosts" in capsys.readouterr().out
        link = fabric.link_name(fabric.rack_link(0, 1))
        assert main(["link", "down", link, *server]) == 0
        assert running.engine.wait_idle()
        assert main(["routes", "show", *server]) == 0
        assert "entries" in capsys.readouterr().out
        assert main(["status", "-o", "json", *server]) == 0
        status = json.loads(capsys.readouterr().out, parse_constant=_not_strict)
        assert status["installed_entries"] > 0 and status["driver_ok"]
        lp = status["last_solve"]["lp_mlu"]  # no LP ran on this easy mix: null, not NaN
        assert lp is None or isinstance(lp, float)
        # every field, numbers as numbers (the fabric summary's too)
        assert status["fabric"]["gpus"] == fabric.num_nics and status["state_version"] >= 2
        assert status["report_to_installed_count"] >= 1 and "p99" in str(status)
        assert status["certificate"]["passed"] is True
        assert main(["status", "-o", "yaml", *server]) == 0
        import yaml

        loaded = yaml.safe_load(capsys.readouterr().out)
        assert loaded.keys() == status.keys() and loaded["fabric"] == status["fabric"]
        assert main(["status", *server]) == 0
        text = capsys.readouterr().out
        assert f"{fabric.num_nics:,} GPUs" in text and "EmulatedDriver: ok" in text
        assert "last solve  MLU" in text and "latency" in text
        assert "certificate passed against eecmp" in text
        assert f"links       1 not fully up (1 down, 0 degraded): {link} down" in text
        assert status["links"] == [{"link": link, "fraction": 0.0, "drained_by": "",
                                    "beneath": 0.0}]  # what is not up  # fmt: skip
        assert main(["link", "ls", *server]) == 0
        assert capsys.readouterr().out == f"{link}\tdown\n"
        assert main(["link", "ls", "-o", "json", *server]) == 0
        assert json.loads(capsys.readouterr().out) == status["links"]
        # a drain: its links listed with the switch and the state they get back
        ctsw = link.split(":")[1]
        assert main(["link", f"{ctsw}=drain", *server]) == 0
        capsys.readouterr()
        assert main(["link", "ls", *server]) == 0
        listed = capsys.readouterr().out.splitlines()
        assert f"{link}\tdown: {ctsw} drained (down when the drain ends)" in listed
        assert any(line.endswith(f"down: {ctsw} drained (up when the drain ends)")
                   for line in listed)  # fmt: skip
        assert main(["status", *server]) == 0  # how to end it, by the switch's own name
        assert f"{ctsw} drained ({len(listed)} links held down until `tectl link {ctsw}=up`)" \
            in capsys.readouterr().out
        assert main(["link", f"{ctsw}=up", *server]) == 0
        capsys.readouterr()
        assert main(["link", "ls", *server]) == 0
        assert capsys.readouterr().out == f"{link}\tdown\n"  # down on its own: still down
        assert running.engine.wait_predicted()
        assert main(["job", "ls", "-o", "json", *server]) == 0
        (listed,) = json.loads(capsys.readouterr().out, parse_constant=_not_strict)
        figures = listed["figures"]
        assert listed["id"] == "llm" and listed["job"]["hosts"] == hosts
        assert figures["flows"] == figures["te_flows"] + figures["hashed_flows"] > 0
        assert figures["stalled_flows"] == 0  # a switch link down: every flow has a path
        assert figures["predicted"] and 0 < figures["predicted_busbw"] <= 1
        assert main(["job", "describe", "llm", *server]) == 0
        text = capsys.readouterr().out
        assert f"flows       {figures['flows']:,}: {figures['te_flows']:,} on TE paths" in text
        assert "busbw       " in text and "of line rate" in text
        # a share of line rate, not of the demand its NICs cannot carry: they run at line
        # rate, and nothing in the fabric slows it
        assert figures["over_line_rate"] == 2.0
        assert figures["predicted_busbw"] == pytest.approx(1.0)
        assert "busbw       100.0% of line rate" in text
        assert ("line rate   a NIC of it is asked 2 x its line rate: planned at 50.0% of its "
                "demand") in text  # fmt: skip
        entries = int(text.split("entries     ")[1].split()[0].replace(",", ""))
        assert 0 < entries <= status["installed_entries"]
        assert main(["job", "describe", "nope", *server]) == 2
        assert "not found" in capsys.readouterr().err
        assert main(["link", "down", "rtsw-p0-r0:ctsw-p0-c77", *server]) == 2
        assert "unknown link" in capsys.readouterr().err
        # one spelling for a link's state, as --fail takes it; the older forms still work
        other = fabric.link_name(fabric.rack_link(1, 0))
        for argv in ([f"{other}=0.5"], ["degrade", other, "0.5"], ["degrade", other, "--factor",
                     "0.5"], [f"{other}=up", f"{link}=up"]):  # fmt: skip
            assert main(["link", *argv, *server]) == 0, argv
            out = capsys.readouterr().out.splitlines()
            assert all(": accepted; state version " in line for line in out)
            assert out[0].startswith(f"{other}=0.5:" if "up" not in argv[0] else f"{other}=up:")
        assert main(["link", other, *server]) == 2  # no state: not taken as down
        assert "give the link's state as LINK=down" in capsys.readouterr().err
        assert main(["link", "ls", "extra", *server]) == 2
        assert "link ls takes no arguments" in capsys.readouterr().err
        # what only the server can check (its fabric's hosts) is said of the file's job
        wrong = tmp_path / "wrong.json"
        wrong.write_text(json.dumps({"jobs": [{"id": "w", "hosts": ["host-p9-r0-h0"]}]}))
        assert main(["job", "put", str(wrong), *server]) == 2
        err = capsys.readouterr().err
        assert f"{wrong}: jobs[0] (w): INVALID_ARGUMENT" in err and "host-p9-r0-h0" in err
        empty = tmp_path / "empty.json"
        empty.write_text('{"jobs": []}')
        assert main(["job", "put", str(empty), *server]) == 0
        assert "no jobs in the file: nothing put" in capsys.readouterr().out
        assert main(["job", "rm", "llm", *server]) == 0
        assert main(["job", "rm", "llm", *server]) == 0  # idempotent
        assert "not found" in capsys.readouterr().out
        # several ids at once, each once, in order ("unrecognized arguments" before)
        assert main(["job", "rm", "nope", "llm", "nope", *server]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "nope: not found (nothing to do)", "llm: not found (nothing to do)"]
    finally:
        running.stop(grace=0.5)


def test_job_describe_tells_nothing_to_route_from_not_installed(
    small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job whose GPUs exchange nothing across the fabric (one host) is in the routing with
    no flows: `job describe` says there is nothing to route, not "not installed yet"."""
    running = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    try:
        jobs = tmp_path / "jobs.json"
        jobs.write_text(json.dumps({"jobs": [
            {"id": "solo", "hosts": [small.host_name(4)]},
            {"id": "ring", "hosts": [small.host_name(h) for h in (0, 2, 16)], "priority": 2,
             "demand_gbps": 200},
        ]}))  # fmt: skip
        assert main(["job", "put", str(jobs), *server]) == 0
        assert running.engine.wait_predicted()
        capsys.readouterr()
        assert main(["job", "describe", "solo", *server]) == 0
        text = capsys.readouterr().out
        assert "routing     no flows across the fabric" in text and "nothing to route" in text
        assert "not installed yet" not in text and "busbw" not in text
        assert "demand: line rate" in text  # none given: its slowest NIC's
        assert main(["job", "describe", "ring", *server]) == 0
        text = capsys.readouterr().out
        # it asks half what its NICs carry: a share of its demand, not of line rate
        assert "busbw       100.0% of its demand (200 Gbps a NIC; its NICs carry 400)" in text
        # what the operator gave is shown: the class it is raised in, the demand it asks
        assert "; ring; priority 2; demand 200 Gbps a NIC" in text
        assert main(["job", "ls", "-o", "json", *server]) == 0
        listed = {j["id"]: j["figures"] for j in json.loads(capsys.readouterr().out)}
        assert listed["solo"]["flows"] == 0 and not listed["solo"]["predicted"]
        assert (listed["ring"]["demand_gbps"], listed["ring"]["line_rate_gbps"]) == (200, 400)
        assert listed["solo"]["demand_gbps"] == listed["solo"]["line_rate_gbps"] == 400
        # a NIC link of the ring down: `job ls` says it is stalled, not only 0.0%
        running.engine.report_links({small.access_link(0): 0.0})
        assert running.engine.wait_idle() and running.engine.wait_predicted()
        assert main(["job", "ls", *server]) == 0
        rows = dict(line.split("\t", 1) for line in capsys.readouterr().out.splitlines())
        assert "0.0% of its demand" in rows["ring"] and "stalled: a flow of it has no path" \
            in rows["ring"] and "stalled" not in rows["solo"]
        # and names the NICs of its first such flow, one of them the NIC cut off
        assert f"{small.nic_name(0)} -> " in rows["ring"] or f"-> {small.nic_name(0)})" \
            in rows["ring"], rows["ring"]
        assert main(["job", "describe", "ring", *server]) == 0
        text = capsys.readouterr().out
        assert "stalled     first flow with no path: " in text and small.nic_name(0) in text
    finally:
        running.stop(grace=0.5)


def test_serve_process_starts_and_stops_gracefully(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "tiny", "--insecure",
         "--listen", f"127.0.0.1:{port}", "--metrics-port", str(metrics_port),
         "--store", f"dir:{tmp_path / 'state'}"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        channel.close()
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            assert "fabric_te_pending_changes" in reply.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert "shutting down" in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            time.sleep(0.1)


def test_routes_watch_of_one_switch_prints_only_that_switch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tectl routes show --watch --switch S`: deltas of other switches are not printed, and
    a delta that holds none of S's entries prints nothing, not even its header."""
    from controller.cli.service import _watch
    from controller.service.client import Delta, InSync, RouteLine

    mine = RouteLine("rtsw-p0-r5", "a", "h1", "b")
    other = RouteLine("rtsw-p0-r6", "c", "h2", "d")

    class Stub:
        def watch_routes(self, since: int, epoch: str = ""):  # type: ignore[no-untyped-def]
            yield InSync(1)
            yield Delta(2, (other,), ())
            yield Delta(3, (mine, other), (other,))

    _watch(Stub(), 0, {"rtsw-p0-r5"})  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "rtsw-p0-r6" not in out and "# delta version 2" not in out
    assert "# delta version 3\n+ rtsw-p0-r5" in out
    _watch(Stub(), 0, set())  # type: ignore[arg-type]
    assert "rtsw-p0-r6" in capsys.readouterr().out  # no switch named: every switch



def test_a_watch_prints_its_snapshot_filtered_as_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The snapshot a watch starts from is printed entry by entry, page after page (a
    consumer rebuilds the table from it), filtered by switch and by the job's hosts like
    the deltas after it; before, only its header was."""
    from controller.cli.service import _watch
    from controller.service.client import Delta, InSync, RouteLine, Snapshot

    mine = RouteLine("rtsw-p0-r5", "a", "h1", "b")
    theirs = RouteLine("rtsw-p0-r5", "a", "h2", "c")
    other = RouteLine("rtsw-p0-r6", "c", "h1", "d")

    class Stub:
        def watch_routes(self, since: int, epoch: str = ""):  # type: ignore[no-untyped-def]
            yield Snapshot(4, 3, (mine, theirs), True, "e1")
            yield Snapshot(4, 3, (other,), False, "e1")
            yield InSync(4, "e1")
            yield Delta(5, (), (theirs, mine))

    _watch(Stub(), 0)  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# snapshot version 4: 3 entries" and len(lines) == 1 + 3 + 1 + 3
    assert sum(line.startswith("rtsw-p0-r") for line in lines) == 3  # the snapshot's
    _watch(Stub(), 0, {"rtsw-p0-r5"}, "", {"h1"})  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "those asked for below" in out and out.count("h2") == 0 and "rtsw-p0-r6" not in out
    assert out.count("h1") == 2  # mine, in the snapshot and removed in the delta

def test_a_watch_resumes_from_epoch_and_version_as_its_sync_lines_print_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each sync line says how to resume; `--since` takes that EPOCH:VERSION and refuses a
    version alone (versions count from 1 in each controller process)."""
    from controller.cli.main import main
    from controller.cli.service import _watch
    from controller.service.client import InSync

    asked = []

    class Stub:
        def watch_routes(self, since: int, epoch: str = ""):  # type: ignore[no-untyped-def]
            asked.append((since, epoch))
            yield InSync(7, "0a1b2c3d4e5f6071")

    _watch(Stub(), 5, (), "ffee")  # type: ignore[arg-type]
    assert asked == [(5, "ffee")]
    assert "# in sync at version 7 (resume with --since 0a1b2c3d4e5f6071:7)" in (
        capsys.readouterr().out)  # fmt: skip
    for bad in ("5", ":5", "e:0", "e:x"):
        with pytest.raises(SystemExit) as exit_:
            main(["routes", "show", "--watch", "--since", bad, "--server", "127.0.0.1:1"])
        assert exit_.value.code == 2
    assert "a version alone names no table" in capsys.readouterr().err


def test_advise_asks_the_controller(small: Fabric, capsys: pytest.CaptureFixture[str]) -> None:
    """`tectl advise --server`: the controller's own jobs are avoided, --hosts and --gpus
    ask the same, and the offline inputs are refused rather than ignored."""
    from controller.model.jobs import Job

    fabric = small
    running = start(Engine(fabric, EmulatedDriver(fabric), debounce=0.01), "127.0.0.1:0")
    server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
    try:
        running.engine.put_job(Job("busy", tuple(range(8)), dp=8, tp=4), 0)
        assert running.engine.wait_idle()
        per_host = fabric.gpus_per_host
        assert main(["advise", "--gpus", str(4 * per_host), "--tp", "4", "--json", *server]) == 0
        by_gpus = json.loads(capsys.readouterr().out)
        assert [c["rank"] for c in by_gpus] == list(range(1, len(by_gpus) + 1)) and by_gpus
        taken = {fabric.host_name(h) for h in range(8)}
        for c in by_gpus:
            assert len(c["hosts"]) == 4 and not taken & set(c["hosts"])
            assert 0 < c["new_job_busbw"] <= 1 and c["mlu_before"] > 0
        assert main(["advise", "--hosts", "4", "--tp", "4", "--json", *server]) == 0
        assert json.loads(capsys.readouterr().out) == by_gpus
        assert main(["advise", "--hosts", "4", "--tp", "4", "--top", "1", *server]) == 0
        text = capsys.readouterr().out
        assert "request 4 hosts" in text and by_gpus[0]["hosts"][0] in text
        assert "The running jobs alone: MLU" in text  # as the offline advice says it
        for offline in (["--jobs", "none"], ["--fabric", "small"], ["--fail", "x"],
                        ["--seed", "2"]):  # fmt: skip
            assert main(["advise", "--gpus", "16", *offline, *server]) == 2
            assert f"{offline[0]}: not with --server" in capsys.readouterr().err
        assert main(["advise", "--gpus", "6", *server]) == 2
        assert "--gpus: 6 is not a positive multiple" in capsys.readouterr().err
    finally:
        running.stop(grace=0.5)


def test_the_certificate_line_says_when_no_job_was_compared() -> None:
    """The wire carries 1 where no job was at risk; the status line words it as `tectl
    solve` does, not as a measured ratio of 1."""
    from controller.cli.service import _certificate_line

    cert = {"passed": True, "reference": "eecmp", "jobs_checked": 0, "jobs": 3,
            "worst_ratio": {"eecmp": 1.0, "wcmp": 1.0}, "fallback_jobs": {}}  # fmt: skip
    line = _certificate_line(cert)
    assert "worst TE/hashing eecmp >= 1 (no job at risk), wcmp >= 1 (no job at risk)" in line
    assert line.endswith("0 jobs handed back")
    cert |= {"jobs_checked": 2, "worst_ratio": {"eecmp": 0.97}, "fallback_jobs": {"r": "x"}}
    line = _certificate_line(cert)
    assert "worst TE/hashing eecmp 0.97; 1 job handed back: r (x)" in line


def test_precomputed_repairs_before_any_routing_say_so() -> None:
    """A controller with nothing installed has no element to precompute: it said 'precomputed
    0 of 0 single failures ready (generation 0, refreshing)' for ever."""
    from controller.cli.service import _precomputed_lines

    empty = {"enabled": True, "total": 0, "generation": 0, "done": False, "ready": 0}
    assert _precomputed_lines(empty) == [
        "precomputed none yet: made once a routing is installed"]


def test_precomputed_repairs_while_routes_are_held_say_they_are_not_used() -> None:
    """Routes applied from a file and held: the set is dropped and no refresh runs (a report
    on held routes is repaired on demand); Status said "0 of 0 single failures ready
    (generation 8, refreshing, ...)" for as long as they were held."""
    from controller.cli.service import status_text

    pre = {"enabled": True, "total": 0, "generation": 8, "done": False, "ready": 0,
           "bytes": 0, "seconds": 0.0, "hits": 1, "rows_moved_max": 0, "rows_moved_mean": 0.0,
           "jobs_moved_max": 0, "jobs_moved_mean": 0.0, "elements_moving_others": 0,
           "widest": []}  # fmt: skip
    doc = {"fabric": {}, "last_solve": {}, "replica": "r", "role": "leader", "leader": "r",
           "store_ok": True, "store": "memory", "store_revision": 0, "driver": "d",
           "driver_ok": True, "installed_entries": 0, "routes_version": 0,
           "switches_differing": 0, "entries_missing": 0, "state_version": 1,
           "pending_changes": 0, "report_to_installed_count": 0, "last_error": "",
           "differing": [], "precomputed": pre,
           "held": {"source": "r.npz", "flows": 1, "entries": 1, "checkpoint": True}}  # fmt: skip
    text = status_text(doc)
    assert "refreshing" not in text
    assert ("precomputed none while routes applied from a file are held: link reports are "
            "repaired on demand") in text


def test_status_names_the_widest_repairs_in_words() -> None:
    """'1 jobs' was printed for one job moved; counts read as words."""
    from controller.cli.service import _precomputed_lines

    widest = [{"element": "rtsw-p0-r0", "kind": "rtsw", "rows_moved": 1, "rows_off_element": 0,
               "jobs_moved": 1},
              {"element": "ctsw-p0-c0", "kind": "ctsw", "rows_moved": 1200,
               "rows_off_element": 3, "jobs_moved": 2}]  # fmt: skip
    p = {"enabled": True, "total": 2, "generation": 1, "ready": 2, "done": True, "bytes": 10,
         "seconds": 0.1, "hits": 0, "rows_moved_max": 1200, "rows_moved_mean": 600.5,
         "jobs_moved_max": 2, "jobs_moved_mean": 1.5, "elements_moving_others": 1,
         "widest": widest}  # fmt: skip
    lines = _precomputed_lines(p)
    assert lines[-2].endswith("rtsw-p0-r0 (rtsw): 1 row moved (0 off it), 1 job")
    assert lines[-1].endswith("ctsw-p0-c0 (ctsw): 1,200 rows moved (3 off it), 2 jobs")


def test_job_export_is_a_placement_file_job_put_takes_back(
    small: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tectl job export` prints the controller's jobs as a placement file; put on another
    controller it gives the same jobs (the `job ls -o json` listing, with generations and
    figures, is not one: `job put` refuses it). `job rm` checks every id before it deletes
    the first: an empty id among them deleted those before it."""
    one = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    two = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    first = ["--server", f"127.0.0.1:{one.port}", "--insecure"]
    second = ["--server", f"127.0.0.1:{two.port}", "--insecure"]
    try:
        jobs = tmp_path / "jobs.json"
        jobs.write_text(json.dumps({"jobs": [
            {"id": "a", "hosts": [small.host_name(h) for h in range(4)], "tp": 4,
             "collectives": ["ring", "alltoall"], "demand_gbps": 200, "priority": 2},
            {"id": "b", "hosts": [small.host_name(h) for h in (8, 9)]},
        ]}))  # fmt: skip
        assert main(["job", "put", str(jobs), *first]) == 0
        capsys.readouterr()
        for fmt in ("json", "yaml"):
            assert main(["job", "export", "-o", fmt, *first]) == 0
            out = tmp_path / f"export.{fmt}"
            out.write_text(capsys.readouterr().out)
            assert main(["job", "put", str(out), *second]) == 0
            capsys.readouterr()
            assert one.engine.jobs() == two.engine.jobs()
        assert {job.id for job, _ in one.engine.jobs()} == {"a", "b"}
        capsys.readouterr()
        assert main(["job", "rm", "a", "", "b", *first]) == 2
        assert "job id 2 ('')" in capsys.readouterr().err
        assert {job.id for job, _ in one.engine.jobs()} == {"a", "b"}  # none deleted
    finally:
        one.stop()
        two.stop()


def test_a_watch_ended_by_the_server_stopping_says_so(
    small: Fabric, capsys: pytest.CaptureFixture[str]
) -> None:
    """A route watch whose server stopped after it had answered was told "no call reached
    the server: check --server ..." (the connection cut), or ended silently with exit code
    0 (the server closed the stream): it is told the stream was cut, or that the server
    ended the watch, with where to resume, exit code 1."""
    from controller.cli.service import _watch
    from controller.errors import InputError
    from controller.service.client import Client, InSync, Target

    running = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    stopped = False
    try:
        with Client.connect(Target(f"127.0.0.1:{running.port}", insecure=True)) as client:
            try:
                for event in client.watch_routes():
                    if isinstance(event, InSync) and not stopped:
                        running.stop(grace=0)
                        stopped = True
            except InputError as err:
                said = str(err)
                assert said.startswith("UNAVAILABLE") and "the stream was cut" in said, said
                assert "check --server" not in said
            assert stopped
    finally:
        if not stopped:
            running.stop()

    class Ended:  # a server that syncs, sends a delta and ends the watch
        def watch_routes(self, since: int, epoch: str):  # type: ignore[no-untyped-def]
            from controller.service.client import Delta

            yield InSync(3, "e1")
            yield Delta(4, (), ())

    capsys.readouterr()
    assert _watch(Ended(), 0) == 1  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert "# in sync at version 3" in out
    assert err == ("tectl: the server ended the watch (it is stopping); resume with --since "
                   "e1:4\n")  # fmt: skip


def test_insecure_speaks_plaintext_where_tls_files_are_in_the_environment(
    small: Fabric, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README exports FABRIC_TE_TLS_CA/_CERT/_KEY for mTLS, then FABRIC_TE_INSECURE=1 for
    the local demo: the client spoke TLS to the plaintext server (handshake failed, with a
    hint saying --insecure speaks plaintext). Asked for, plaintext is spoken."""
    from controller.cli.main import main as tectl

    pki = tmp_path / "pki"
    assert tectl(["certs", str(pki)]) == 0
    monkeypatch.setenv("FABRIC_TE_TLS_CA", str(pki / "ca.pem"))
    monkeypatch.setenv("FABRIC_TE_TLS_CERT", str(pki / "admin.pem"))
    monkeypatch.setenv("FABRIC_TE_TLS_KEY", str(pki / "admin.key"))
    running = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    try:
        capsys.readouterr()
        assert main(["status", "--server", f"127.0.0.1:{running.port}", "--insecure"]) == 0
        monkeypatch.setenv("FABRIC_TE_INSECURE", "1")
        assert main(["status", "--server", f"127.0.0.1:{running.port}"]) == 0
        assert "Tls handshake" not in capsys.readouterr().err
    finally:
        running.stop()
