"""The `state` benchmark section: inputs through a store, and leader takeover on etcd.

Placement updates/s: one job replaced back and forth between two host sets, sent back to back
(round-robin over the replicas when there are three), with the inputs in memory, in the
embedded directory store, and in etcd with one and with three replicas (in one process, one
shared emulated fabric). 'accepted' counts the API calls returning (each written to the store
first); 'applied' waits until the leader's routes answer to the last one and every replica has
followed it.

Takeover: three `tectl serve` processes on one etcd (lease TTL 1 s) and one fabric's file
tables; the leader is killed with SIGKILL 20 times (5 with --quick) and restarted as a
follower. The takeover time runs from the kill until a survivor reports itself leader; 'ops'
is what the new leader pushed in the second after (inputs unchanged: the target is 0).

Churn: the same three idle replicas (lease TTL 1 s) for 5 minutes (1 with --quick) while
3 processes spin on the CPU (nice 0, on top of whatever else the machine runs), and again
with the leader also stalled: every 5 s it is stopped (SIGSTOP) for a random 0.3-0.7 s, as
a process starved by a loaded machine is. The election key's create revision is read from
etcd every 0.1 s: each new one is a new term (a stepdown and an election, even when the same
replica wins again). The load is the 1-minute load average sampled over the run.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.service.engine import Engine
from controller.service.replica import Replica
from controller.service.store import DirStore, Store
from sim.driver import EmulatedDriver
from sim.etcd_server import EtcdServer, etcd_binary
from sim.jobmix import ring_jobs
from sim.processes import free_port
from sim.switches import EmulatedFabric

FABRIC = "pod"


def _engines(fabric: Fabric, stores: list[Store | None]) -> list[Engine]:
    emulated = EmulatedFabric(fabric)
    engines = []
    for i, store in enumerate(stores):
        replica = Replica(fabric, store, replica_id=f"r{i}")
        driver = EmulatedDriver(emulated=emulated)
        engines.append(Engine(fabric, driver, debounce=0.0, replica=replica))
        if i == 0 and store is not None:  # let the first one win the election
            deadline = time.monotonic() + 10
            while not replica.is_leader() and time.monotonic() < deadline:
                time.sleep(0.01)
    return engines


def _updates(fabric: Fabric, engines: list[Engine], n: int) -> tuple[float, float, int]:
    """(accepted/s, applied/s, ops pushed) for `n` replacements of one job."""
    leader = next(e for e in engines if e.replica.is_leader())
    jobs = ring_jobs(fabric, 16)
    for job in jobs:
        leader.put_job(job, 0)
    leader.wait_idle(600)
    a, b = jobs[0], jobs[1]
    leader.delete_job(b.id)
    leader.wait_idle(600)
    ops = leader.ops_pushed
    start = time.perf_counter()
    for i in range(n):
        hosts = b.hosts if i % 2 == 0 else a.hosts
        engines[i % len(engines)].put_job(replace(a, hosts=hosts), 0)
    accepted = time.perf_counter() - start
    want = engines[(n - 1) % len(engines)].jobs()
    for e in engines:
        deadline = time.monotonic() + 120
        while e.jobs() != want and time.monotonic() < deadline:
            time.sleep(0.001)
    time.sleep(0.01)
    leader.wait_idle(600)
    total = time.perf_counter() - start
    return n / accepted, n / total, leader.ops_pushed - ops


def throughput(n: int) -> list[list[object]]:
    """One row per way of keeping the inputs: accepted/s, applied/s, ops pushed."""
    fabric = build(PRESETS[FABRIC])
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        setups: list[tuple[str, Any]] = [
            ("in memory, 1 replica", lambda: [None]),
            ("dir store, 1 replica", lambda: [DirStore(Path(tmp) / "dir", fabric.name)]),
        ]
        server = None
        if etcd_binary() is not None:
            server = EtcdServer(Path(tmp) / "etcd")
            server.start()
            from controller.service.etcd import EtcdStore

            def etcd(prefix: str, count: int) -> list[Store | None]:
                url = f"etcd://{server.endpoint}/{prefix}"  # type: ignore[union-attr]
                return [EtcdStore.from_url(url, fabric.name) for _ in range(count)]

            setups += [
                ("etcd, 1 replica", lambda: etcd("one", 1)),
                ("etcd, 3 replicas (round-robin)", lambda: etcd("three", 3)),
            ]
        try:
            for name, make in setups:
                engines = _engines(fabric, make())
                try:
                    acc, app, ops = _updates(fabric, engines, n)
                finally:
                    for e in engines:
                        e.close()
                rows.append([name, f"{acc:,.0f}", f"{app:,.1f}", ops])
        finally:
            if server is not None:
                server.stop()
    return rows


class _Served:
    """A `tectl serve` process, watched through its /metrics (sim does not speak the API)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        tree = (env or {}).get("PYTHONPATH")  # `-m` puts the working directory first
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli.main", "serve", "--insecure", "--listen",
             f"127.0.0.1:{self.port}", "--metrics-port", str(self.metrics_port), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tree,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while self.sample("fabric_te_leader") is None and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("tectl serve exited")
            time.sleep(0.05)

    def sample(self, name: str) -> float | None:
        """A metric's value, None if the process does not answer."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=1) as reply:
                text = reply.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


def takeover(kills: int) -> tuple[list[float], list[int]]:
    """Takeover seconds and ops pushed by the new leader, per kill of the leader."""
    fabric = build(PRESETS["small"])
    times: list[float] = []
    ops: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = EtcdServer(Path(tmp) / "etcd")
        server.start()
        args = ["--fabric", "small", "--store", f"etcd://{server.endpoint}/bench", "--driver",
                "file", "--driver-dir", f"{tmp}/tables", "--lease-ttl", "1", "--debounce",
                "0.01", "--reconcile-interval", "0.5"]  # fmt: skip
        replicas = [_Served([*args, "--replica-id", f"r{i}"]) for i in range(3)]
        try:
            jobs = [{"id": f"j{i}", "hosts": [fabric.host_name(h) for h in (i, 16 + i)], "tp": 4}
                    for i in range(8)]  # fmt: skip
            placement = Path(tmp) / "jobs.json"
            placement.write_text(json.dumps({"jobs": jobs}))
            subprocess.run(
                [sys.executable, "-m", "controller.cli.main", "job", "put", str(placement),
                 "--server", f"127.0.0.1:{replicas[0].port}", "--insecure"],
                check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(2)
            for k in range(kills):
                lead = next(i for i, r in enumerate(replicas) if r.sample("fabric_te_leader"))
                replicas[lead].proc.kill()
                start = time.perf_counter()
                rest = [r for i, r in enumerate(replicas) if i != lead]
                new = None
                while new is None:
                    new = next((r for r in rest if r.sample("fabric_te_leader")), None)
                times.append(time.perf_counter() - start)
                time.sleep(1.0)
                ops.append(int(new.sample("fabric_te_entry_operations_total") or 0))
                replicas[lead].proc.wait()
                replicas[lead] = _Served([*args, "--replica-id", f"r{lead}-{k}"])
        finally:
            for r in replicas:
                r.proc.send_signal(signal.SIGKILL)
                r.proc.wait()
            server.stop()
    return times, ops


def churn(seconds: float, spinners: int = 3, env: dict[str, str] | None = None,
          stall: tuple[float, float] | None = None) -> tuple[int, float, float, int]:  # fmt: skip
    """(new terms, hours watched, mean 1-minute load, stalls) of three idle replicas on one
    etcd while `spinners` processes keep the CPUs busy, the leader stopped every 5 s for a
    random `stall` (low, high) seconds if given; `env` for the replicas (another tree)."""
    import base64
    import random
    import threading

    from controller.service.etcd import Gateway

    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        server = EtcdServer(Path(tmp) / "etcd")
        server.start()
        args = ["--fabric", "small", "--store", f"etcd://{server.endpoint}/churn", "--driver",
                "file", "--driver-dir", f"{tmp}/tables", "--lease-ttl", "1"]  # fmt: skip
        replicas = [_Served([*args, "--replica-id", f"r{i}"], env) for i in range(3)]
        spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(spinners)]  # fmt: skip
        stepdowns, stalls, loads = 0, 0, list[float]()
        done = threading.Event()

        def staller() -> None:
            nonlocal stalls
            while stall is not None and not done.wait(5.0):
                lead = next((r for r in replicas if r.sample("fabric_te_leader")), None)
                if lead is None:
                    continue
                lead.proc.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(*stall))
                lead.proc.send_signal(signal.SIGCONT)
                stalls += 1

        pauser = threading.Thread(target=staller, daemon=True)
        gateway = Gateway([("127.0.0.1", server.port)], timeout=1.0)
        key = base64.b64encode(b"/churn/election/leader").decode()

        def term() -> int:
            try:
                kvs = gateway.post("/v3/kv/range", {"key": key}).get("kvs", [])
            except Exception:  # noqa: BLE001 - a slow answer: read again next time
                return 0
            return int(kvs[0]["create_revision"]) if kvs else 0

        try:
            time.sleep(2)
            while not term():
                time.sleep(0.1)
            terms = {term()}
            pauser.start()
            start = time.monotonic()
            while time.monotonic() - start < seconds:
                time.sleep(0.1)
                terms.add(term())
                if len(loads) < (time.monotonic() - start) / 5:
                    loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
            stepdowns = len(terms - {0}) - 1
            hours = (time.monotonic() - start) / 3600
        finally:
            done.set()
            if pauser.is_alive():
                pauser.join()
            for p in spin + [r.proc for r in replicas]:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
            server.stop()
    return stepdowns, hours, statistics.fmean(loads), stalls


def bench_state(quick: bool) -> Iterator[tuple[str, str, list[str], list[list[object]]]]:
    """(title, text, header, rows) of the state benchmarks."""
    first, second, third = (p.replace("\n", " ") for p in (__doc__ or "").split("\n\n")[1:4])
    n = 51 if quick else 201
    rows = throughput(n)
    yield (
        f"Placement updates through the store ({FABRIC}, 16-host ring jobs, {n} updates)",
        first,
        ["inputs", "accepted /s", "applied /s", "ops pushed"],
        rows,
    )
    if etcd_binary() is None:
        return
    kills = 5 if quick else 20
    times, ops = takeover(kills)
    p99 = float(np.percentile(times, 99))
    yield (
        f"Leader takeover on etcd, lease TTL 1 s, {kills} kill -9 of the leader (small)",
        second,
        ["median s", "p99 s", "max s", "ops pushed by the new leader (max)"],
        [[f"{statistics.median(times):.2f}", f"{p99:.2f}", f"{max(times):.2f}", max(ops)]],
    )
    seconds = 60 if quick else 300
    rows = []
    for name, stall in (("3 CPU spinners", None), ("3 CPU spinners + leader stalls", (0.3, 0.7))):
        terms, hours, load, stalls = churn(seconds, stall=stall)
        rows.append([name, stalls, terms, f"{hours * 60:.1f}", f"{terms / hours:.1f}",
                     f"{load:.1f}"])  # fmt: skip
    yield (
        f"Leader churn on etcd, lease TTL 1 s, 3 idle replicas under load ({seconds // 60} min)",
        third,
        ["load", "leader stalls", "new terms", "minutes", "new terms per hour", "mean load"],
        rows,
    )
