"""The resilience sweep: hand-derived ranking on the tiny fabric, the fast sweep against the
straightforward one, and every runner giving the same arrays."""

from __future__ import annotations

import json
import os
import socket
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from controller.errors import InputError
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.fabric import Fabric
from controller.model.failures import single_failures
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.solver import CertifyOptions, SolveOptions, solve
from controller.solver.resilience import (
    KINDS,
    Resilience,
    Sweep,
    SweepInputs,
    sample_doubles,
    sweep,
    sweep_one,
)
from controller.solver.sweep_runners import batches, run_local
from sim.jobmix import random_jobs

TOL = 1e-6  # the local max-min refills' (controller.model.local_rates.TOL, times ten)


def _tiny_inputs(tiny: Fabric) -> SweepInputs:
    """Job a: the 4 NICs of rack p0-r0 and the 4 of p0-r1 send to each other at line rate
    (a 1:1 rack full both ways); job b: one light flow inside pod 1."""
    src = [0, 1, 2, 3, 4, 5, 6, 7, 8]
    dst = [4, 5, 6, 7, 0, 1, 2, 3, 12]
    flows = FlowSet.build(src, dst, [400.0] * 8 + [100.0], job=[0] * 8 + [1],
                          job_ids=("a", "b"))  # fmt: skip
    health = LinkHealth.all_up(tiny)
    res = solve(tiny, health, flows)
    return SweepInputs(tiny, health, res.assignment)


def test_a_job_without_flows_has_no_value_under_any_routing(tiny: Fabric) -> None:
    # job c has no flow (a job of one host: no collective crosses hosts)
    flows = FlowSet.build([0, 4], [4, 0], [400.0, 400.0], job=[0, 0], job_ids=("a", "c"))
    health = LinkHealth.all_up(tiny)
    r = sweep(SweepInputs(tiny, health, solve(tiny, health, flows).assignment))
    c = r.job_ids.index("c")
    assert r.has_flows.tolist() == [True, False]
    # the same under every routing: none (null in --json), where fabric-te read 1
    assert np.isnan(r.before[:, c]).all() and np.isnan(r.after[:, :, c]).all()
    assert not np.isnan(r.before[:, 0]).any() and not np.isnan(r.after[:, :, 0]).any()
    assert (r.worst_loss >= 0).all() and not r.no_good[:, c].any() and not r.stalled[:, c].any()


def test_the_ranking_on_the_tiny_fabric_is_the_hand_derived_one(tiny: Fabric) -> None:
    """By hand: a pod-0 rack link or CTSW down leaves its racks 3 uplinks for 4 flows of
    line rate, so job a keeps at most 3/4 under any routing (the cut), a loss of at least
    1/4; nothing else hurts a job that still has a path (job b's one flow has 3 other
    uplinks, and no flow crosses pods: the ATSWs and their links carry nothing); an RTSW
    takes its NICs down: its jobs are stalled, which ranks it first (a stalled job stops
    whatever the routing), not counted as a loss."""
    inputs = _tiny_inputs(tiny)
    r = sweep(inputs)
    names = list(r.names)
    assert r.before[0].tolist() == [1.0, 1.0]  # TE: every flow its own path
    pod0 = {n for n in names if n.startswith(("rtsw-p0-r0:", "rtsw-p0-r1:"))}
    pod0 |= {f"ctsw-p0-c{c}" for c in range(4)}
    assert len(pod0) == 12
    stalling = {"rtsw-p0-r0", "rtsw-p0-r1", "rtsw-p1-r0", "rtsw-p1-r1"}  # racks with flows
    order = [names[i] for i in r.ranking.tolist()]
    assert set(order[:4]) == stalling and set(order[4:16]) == pod0
    a = r.job_ids.index("a")
    for i, name in enumerate(names):
        if name in pod0:
            # no routing beats the cut, and the certificate keeps fabric-te at E-ECMP's
            assert r.after[i, :, a].max() <= 0.75 + 1e-9, name
            assert r.worst_loss[i, 0] >= 0.25 - 1e-9, name
            assert r.after[i, 0, a] >= r.after[i, 1, a] * (1 - 1e-9), name
        else:
            assert r.worst_loss[i, 0] == 0.0, name
    for rack, job in (("rtsw-p0-r0", "a"), ("rtsw-p0-r1", "a"), ("rtsw-p1-r0", "b")):
        i, j = names.index(rack), r.job_ids.index(job)
        assert r.stalled[i, j] and (r.after[i, :, j] == 0).all()
    # blast radius: a pod-0 uplink of rack 0 carries job a's flows; only they move
    i = names.index("rtsw-p0-r0:ctsw-p0-c0")
    assert r.crossed_flows[i] >= 1 and r.moved_jobs[i] == 1
    assert r.crossed_flows[names.index("atsw-c0-a0")] == 0
    assert r.moved_flows[names.index("atsw-c0-a0")] == 0


@st.composite
def cases(draw: st.DrawFn) -> tuple[Fabric, int, int, str, float]:
    pods = draw(st.integers(1, 2))
    nics = draw(st.integers(1, 4))
    layout = draw(st.sampled_from(["one", "rail", "rail-only", "dual-plane"]))
    if nics % 2:
        layout = "one"
    slots = {"one": 1, "rail": nics, "rail-only": nics}.get(layout) or draw(
        st.sampled_from([2, nics]))
    planes = {"one": 1, "rail": 1, "rail-only": slots, "dual-plane": 2}[layout]
    spec = ClosSpec(
        name="fuzz", pods=pods, racks_per_pod=draw(st.integers(2, 4)),
        hosts_per_rack=draw(st.integers(1, 2)), nics_per_host=nics,
        ctsws_per_pod=planes * draw(st.integers(max(1, 2 // planes), max(1, 4 // planes))),
        rack_links=draw(st.integers(1, 2)) if pods == 1 or planes == slots else 1,
        atsws_per_plane=draw(st.integers(1, 2)) if pods > 1 else 0,
        agg_links=draw(st.integers(1, 2)),
        taper=draw(st.sampled_from([1.0, 2.0, 4.0])) if pods > 1 else None,
        rtsws_per_rack=slots, planes=planes,
        ports_per_nic=draw(st.sampled_from([1, 2])) if layout == "dual-plane" else 1,
    )  # fmt: skip
    return (build(spec), draw(st.integers(0, 2**16)), draw(st.sampled_from([1, 4, 16])),
            draw(st.sampled_from(["eecmp", "wcmp"])), draw(st.floats(0.4, 1.0)))  # fmt: skip


@pytest.mark.fuzz
@settings(max_examples=int(os.environ.get("FABRIC_TE_FUZZ_EXAMPLES", "0")) or 12,
          deadline=None, derandomize=not os.environ.get("FABRIC_TE_FUZZ_EXAMPLES"), database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(cases())
def test_fuzz_the_fast_sweep_equals_the_straightforward_one(case) -> None:  # type: ignore[no-untyped-def]
    """Every element: the same blast radius and hand-backs exactly, the same job values to
    the local refills' tolerance (bit for bit where no rate was filled again)."""
    fabric, seed, qps, reference, fill = case
    jobs = random_jobs(fabric, seed=seed, fill=fill, sizes={2: 2, 3: 1, 4: 2},
                       patterns={"ring": 2, "pipeline": 1, "alltoall": 1})  # fmt: skip
    flows = jobs_flows(fabric, jobs)
    assume(len(flows) > 0)
    health = LinkHealth.all_up(fabric)
    cert = CertifyOptions(reference=reference)
    res = solve(fabric, health, flows, options=SolveOptions(qps=qps, certify=cert))
    singles = single_failures(fabric, health)
    inputs = SweepInputs(fabric, health, res.assignment, qps=qps, certify=cert,
                         doubles=sample_doubles(singles, 3, seed))  # fmt: skip
    fast = Sweep(inputs)
    names = fast.header().names
    for i in range(len(names)):
        got = fast.outcome(i)
        want = sweep_one(inputs, fast.index, fast.health_after(i))
        name = names[i]
        assert (got.moved_flows, got.moved_jobs, got.crossed_flows, got.crossed_jobs,
                got.handed_back) == (want.moved_flows, want.moved_jobs, want.crossed_flows,
                                     want.crossed_jobs, want.handed_back), name  # fmt: skip
        assert np.array_equal(np.isnan(got.values), np.isnan(want.values)), name
        np.testing.assert_allclose(got.values, want.values, rtol=TOL, atol=1e-12, err_msg=name)


def test_pool_and_serial_give_the_same_bytes(small: Fabric) -> None:
    flows = jobs_flows(small, random_jobs(small, seed=2))
    health = LinkHealth.all_up(small)
    inputs = SweepInputs(small, health, solve(small, health, flows).assignment,
                         kinds=("link", "ctsw"))  # fmt: skip
    one, stats1 = run_local(inputs, workers=1)
    seen: list[tuple[int, int]] = []
    two, stats2 = run_local(inputs, workers=2, progress=lambda d, n: seen.append((d, n)))
    assert stats1.workers == 1 and stats2.workers == min(2, os.cpu_count() or 1)
    assert stats2.batches > 2
    assert one.names == two.names and one.job_ids == two.job_ids
    for x, y in zip(one.digest_arrays(), two.digest_arrays(), strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
    assert seen[-1] == (len(one.names), len(one.names))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_no_more_workers_than_cores_or_elements(small: Fabric) -> None:
    """Each worker builds the whole sweep (GBs at scale): `--workers 100` on 2 elements
    started 100 processes' worth of it ("2 elements on 100 workers")."""
    flows = jobs_flows(small, random_jobs(small, seed=2))
    health = LinkHealth.all_up(small)
    inputs = SweepInputs(small, health, solve(small, health, flows).assignment,
                         kinds=("ctsw",))  # fmt: skip
    _, stats = run_local(inputs, workers=100, elements=np.arange(2))
    assert stats.workers == min(2, os.cpu_count() or 1) and stats.elements == 2
    _, stats = run_local(inputs, workers=100)
    assert stats.workers == min(os.cpu_count() or 1, stats.elements)


def test_a_pool_sweep_whose_caller_goes_away_ends_its_workers(
    small: Fabric, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`alive` turning false stops a sweep on worker processes at once, its running
    batches ended with their processes (a server shutting down has a grace to keep: it
    waited for the batch under way, 12 s past a 5 s grace); nothing is left running."""
    import multiprocessing
    import signal
    from concurrent.futures import ProcessPoolExecutor

    import controller.solver.sweep_runners as runners

    seen: list[multiprocessing.Process] = []

    class Watched(ProcessPoolExecutor):  # notes its worker processes as it shuts down
        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            seen.extend((getattr(self, "_processes", None) or {}).values())
            super().shutdown(wait, cancel_futures=cancel_futures)

    monkeypatch.setattr(runners, "ProcessPoolExecutor", Watched)
    flows = jobs_flows(small, random_jobs(small, seed=2))
    health = LinkHealth.all_up(small)
    inputs = SweepInputs(small, health, solve(small, health, flows).assignment)
    asked: list[int] = []

    def alive() -> bool:
        asked.append(1)
        return len(asked) < 3  # gone at the third look, well before the sweep ends

    with pytest.raises(InputError, match="its caller went away"):
        run_local(inputs, workers=2, in_process=False, alive=alive)
    assert len(asked) == 3
    # ended by a signal, not let run their batches out (they were not: shutdown forgot them
    # before they were looked up to be ended)
    # (one may be reaped by the pool's own thread first: its code then reads None here)
    for proc in seen:
        proc.join(timeout=10)
    codes = [p.exitcode for p in seen]
    assert seen and 0 not in codes and set(codes) <= {-signal.SIGTERM, None}, codes
    # ended, not waited for: a child's exit shows in its sentinel a moment before it can be
    # reaped (join may return first), so the children are looked at until they are gone
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        for child in multiprocessing.active_children():
            child.join(timeout=0.5)
    assert not multiprocessing.active_children()


def test_batches_interleave_and_cover() -> None:
    ids = np.arange(10)
    parts = batches(ids, 3)
    assert [p.tolist() for p in parts] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert batches(ids, 50)[0].tolist() == [0] and len(batches(ids, 50)) == 10


def test_doubles_are_pairs_drawn_by_the_seed(tiny: Fabric) -> None:
    f = single_failures(tiny, LinkHealth.all_up(tiny))
    a, b = sample_doubles(f, 7, 3), sample_doubles(f, 7, 3)
    assert a == b and len(set(a)) == 7 and all(x < y for x, y in a)

    def nested(x: int, y: int) -> bool:  # one fails what the other fails alone
        lx, ly = set(f.links_of(x).tolist()), set(f.links_of(y).tolist())
        return lx <= ly or ly <= lx

    pairs = [(x, y) for x in range(len(f)) for y in range(x + 1, len(f))]
    some = sum(nested(x, y) for x, y in pairs)
    assert some  # a switch and its own links: drawn, they were doubles that add nothing
    everything = sample_doubles(f, 10**6, 1)
    assert len(everything) == len(pairs) - some and not any(nested(*p) for p in everything)
    for seed in range(5):  # drawn below the total too
        drawn = sample_doubles(f, len(pairs) - some - 1, seed)
        assert len(set(drawn)) == len(drawn) and not any(nested(*p) for p in drawn)
    inputs = _tiny_inputs(tiny)
    inputs = SweepInputs(inputs.fabric, inputs.health, inputs.assignment, doubles=a[:3])
    r = sweep(inputs)
    assert len(r.names) == len(f) + 3 and (r.kind[-3:] == KINDS.index("double")).all()
    assert r.names[-1] == f"{f.names[a[2][0]]}+{f.names[a[2][1]]}"


def test_tectl_resilience_text_json_and_plot(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from controller.cli.main import main

    args = ["resilience", "--fabric", "small", "--seed", "2", "--workers", "1",
            "--kinds", "link,rtsw", "--top", "5"]  # fmt: skip
    assert main(args) == 0
    said = capsys.readouterr()
    out = said.out
    assert "sweeping on local worker processes: each worker builds the sweep first" in said.err
    assert "elements ranked by the jobs they stall" in out and "per kind" in out
    assert "jobs with no good repair" in out and "blast radius" in out
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fabric = build(PRESETS["small"])
    n = len(single_failures(fabric, LinkHealth.all_up(fabric), ("link", "rtsw")))
    # a sum over the repairs, each of one element: said so, not as if it were distinct flows
    assert f"flows summed over the {n:,} elements (per element: median" in out
    assert len(data["elements"]) == n and len(data["ranking"]) == n
    assert set(data["routings"]) == {"fabric-te", "eecmp", "wcmp"}
    first = next(e for e in data["elements"] if e["name"] == data["ranking"][0])
    stalling = [e for e in data["elements"] if e["stalled"]]
    assert len(first["stalled"]) == max((len(e["stalled"]) for e in stalling), default=0)
    calm = [e for e in data["elements"] if not e["stalled"]]
    top_calm = next(e for e in data["elements"] if e["name"] == data["ranking"][len(stalling)])
    assert top_calm["worst_loss"]["fabric-te"] == max(e["worst_loss"]["fabric-te"]
                                                      for e in calm)  # fmt: skip
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    assert main([*args, "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["resilience", "--fabric", "small", "--kinds", "nope"]) == 2


def test_an_element_that_stalls_every_job_shows_no_loss_of_other_jobs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The defect: one job, stalled by its RTSW's failure, read 'te loss 0.0%' as if the
    failure cost nothing; with no other job left the loss cells read '-'."""
    from controller.cli.main import main

    assert main(["resilience", "--fabric", "small", "--seed", "1", "--workers", "1",
                 "--kinds", "rtsw", "--top", "3"]) == 0  # fmt: skip
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] == ["1"]]  # fmt: skip
    rank1 = rows[0]
    assert rank1[2] == "rtsw" and rank1[3:7] == ["-", "-", "-", "-"] and rank1[8] == "1"


def test_tectl_resilience_refuses_routes_over_links_down(
    tmp_path, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    """A route file solved on a healthy fabric, swept with a link of its paths down: the
    sweep would start from flows stopped on a dead link (and rank nothing against them),
    so it is refused, naming the link; with that health solved in, it runs."""
    from controller.cli.main import main

    routes = tmp_path / "r.json"
    assert main(["solve", "--fabric", "small", "--seed", "3", "--out", str(routes)]) == 0
    capsys.readouterr()
    down = "rtsw-p0-r0:ctsw-p0-c0"
    sweep_args = ["resilience", "--fabric", "small", "--routes", str(routes), "--workers", "1",
                  "--kinds", "rtsw", "--fail", down]  # fmt: skip
    assert main(sweep_args) == 2
    err = capsys.readouterr().err
    assert "routed over links down in --fail" in err and down in err
    assert main(["solve", "--fabric", "small", "--seed", "3", "--fail", down, "--out",
                 str(routes)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(sweep_args) == 0
    text = capsys.readouterr().out
    # without --fabric, the preset the file names (small, not the default preset)
    assert main([a for a in sweep_args if a not in ("--fabric", "small")]) == 0
    assert capsys.readouterr().out == text
    # a route file holds its flows: --jobs with it would be ignored, so it is refused
    assert main([*sweep_args, "--jobs", "random"]) == 2
    assert "give one" in capsys.readouterr().err
    # so is --fill (the share of hosts of a job mix), which was taken and ignored, 7 or not
    assert main([*sweep_args, "--fill", "7"]) == 2
    assert "--fill 7: " in capsys.readouterr().err
    assert main(["resilience", "--fabric", "small", "--kinds", ""]) == 2  # not "all kinds"


def test_the_ranking_ties_losses_that_differ_by_rounding() -> None:
    """Elements whose losses differ in the 15th digit (a symmetric fabric's CTSWs) are
    ranked by id, not by the rounding; a real difference still ranks first."""
    after = np.array([0.5 + 1e-15, 0.5, 0.4])[:, None, None] * np.ones((3, 3, 1))
    z = np.zeros(3, np.int64)
    r = Resilience(("c0", "c1", "c2"), z.astype(np.int8), ("a",), np.array([True]),
                   np.ones((3, 1)), after, z, z, z, z, z)  # fmt: skip
    assert r.ranking.tolist() == [2, 0, 1]


def test_a_job_stalled_before_the_sweep_is_stalled_by_no_element(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The defect: a job whose host had every NIC link down in --fail read as stalled by
    every element (each ranked for it, 'stalled: 40 elements'), hiding the one element that
    stalls a job that ran. Job a is stalled before (0 under every routing), job b runs:
    only c1 stalls a job, c0 costs b a quarter."""
    z = np.zeros(2, np.int64)
    before = np.array([[0.0, 1.0]] * 3)
    after = np.stack([np.array([[0.0, 0.75]] * 3), np.zeros((3, 2))])
    r = Resilience(("c0", "c1"), z.astype(np.int8), ("a", "b"), np.array([True, True]),
                   before, after, z, z, z, z, z)  # fmt: skip
    assert r.stalled_before.tolist() == [True, False]
    assert r.stalled.tolist() == [[False, False], [False, True]]
    assert r.ranking.tolist() == [1, 0]
    assert r.worst_loss[0].tolist() == [0.25] * 3 and r.worst_loss[1].tolist() == [0.0] * 3

    from controller.cli.main import main

    down = ["--fail", "host-p0-r0-h0/nic0:rtsw-p0-r0", "--fail", "host-p0-r0-h0/nic1:rtsw-p0-r0"]
    argv = ["resilience", "--fabric", "tiny", "--workers", "1", "--kinds", "ctsw", *down]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert ("stalled (a flow with no path left under any routing: its NIC's switch, or every "
            "path out of its rack or pod, failed): 0 ") in text
    assert "stalled before any failure" in text
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stalled_before"] and not any(e["stalled"] for e in doc["elements"])


def test_the_ranking_shows_what_each_routing_leaves_the_worst_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Losses are from each routing's own value before, so fabric-te's (higher before) read
    as the larger even where its worst job ends better off: the ranking also gives each
    routing's worst job after the failure, equal to the sweep's own figures."""
    import json

    from controller.cli.main import main

    argv = ["resilience", "--fabric", "small", "--seed", "1", "--workers", "1", "--kinds",
            "ctsw", "--top", "3"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "worst job after (te / eecmp / wcmp)" in text
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {e["name"]: e for e in doc["elements"]}
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["1"], ["2"])]
    for row in rows:
        after = by_name[row[1]]["after"]  # per routing, per job with flows
        shown = row[6:11]  # "te% / eecmp% / wcmp%"
        assert shown[1] == shown[3] == "/", row
        want = [f"{100 * min(after[k]):.1f}%" for k in ("fabric-te", "eecmp", "wcmp")]
        assert shown[0::2] == want, (row, after)


_KILLED_SWEEP = """
import multiprocessing, time
from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.solver import solve
from controller.solver.resilience import SweepInputs
from controller.solver.sweep_runners import run_local
from sim.jobmix import random_jobs

def progress(done, total):  # the workers are up: name them, then wait to be killed
    print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
    time.sleep(600)

if __name__ == "__main__":  # spawned workers import this file too
    small = build(PRESETS["small"])
    health = LinkHealth.all_up(small)
    flows = jobs_flows(small, random_jobs(small, seed=2))
    inputs = SweepInputs(small, health, solve(small, health, flows).assignment)
    run_local(inputs, workers=2, in_process=False, progress=progress)
"""


def test_a_pool_sweep_killed_by_sigterm_leaves_no_worker_behind(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`tectl resilience` ended by SIGTERM (or SIGKILL) runs no cleanup: its workers ran
    their batches out and then waited for tasks forever, orphaned, each holding its Sweep.
    They now die with the process that started them."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "sweep.py"
    script.write_text(_KILLED_SWEEP)
    err = tmp_path / "stderr"
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=err.open("w"), text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids, f"the sweep started no worker process: {err.read_text()}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:  # a zombie is ended, if not yet reaped
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if running(p)]
    for pid in left:  # not to leave them running after a failure
        os.kill(pid, signal.SIGKILL)
    assert not left, f"worker processes {left} outlived their parent"


def test_tectl_resilience_ray_without_a_cluster_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--ray with no cluster at the address, or with what is no address: an error naming
    --ray, exit 2; not "cannot write the output" (Ray's ConnectionError is an OSError) nor
    a traceback (its ValueError)."""
    ray = pytest.importorskip("ray")
    from controller.cli.main import main

    args = ["resilience", "--fabric", "tiny", "--kinds", "atsw", "--workers", "1"]
    assert main([*args, "--ray", "no:such:address"]) == 2
    err = capsys.readouterr().err
    assert "tectl: error: --ray no:such:address: " in err and "Traceback" not in err

    def no_cluster(**_: object) -> None:
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main([*args, "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    # in tectl's words: Ray's name a flag (--address) tectl does not have
    assert "tectl: error: --ray auto: no Ray cluster runs on this node" in err
    assert "--ray HOST:PORT" in err and "cannot write the output" not in err
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # Ray's words then name that address
    assert main([*args, "--ray", "auto"]) == 2
    assert "--ray auto: Could not find any running Ray instance" in capsys.readouterr().err
    # host:port where nothing listens: said at once, not after Ray's minutes of retries
    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init reached"))
    with socket.socket() as closed:  # a port taken and closed: nothing listens there
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert main([*args, "--ray", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"tectl: error: --ray 127.0.0.1:{port}: no Ray head answers there" in err


def test_the_time_left_is_not_counted_from_the_workers_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workers take 60 s to start, then sweep an element a second: the first line says
    what is done, the next ones the time left at that rate (it read ~6,039 s left of 99)."""
    import controller.cli.resilience as cli

    clock = [0.0]
    monkeypatch.setattr(cli.time, "perf_counter", lambda: clock[0])
    tick = cli._Ticker(quiet=False)
    for t, done in ((61, 1), (66, 6), (71, 11)):
        clock[0] = t
        tick(done, 100)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "  swept 1/100 elements in 61 s (workers' start included)"
    assert lines[1:] == ["  swept 6/100 elements, 1.0/s, ~94 s left",
                         "  swept 11/100 elements, 1.0/s, ~89 s left"]  # fmt: skip
    clock[0] = 200.0
    tick(100, 100)  # the end is always said
    assert "swept 100/100 elements" in capsys.readouterr().err
