"""Bench section `precomputed`: link down -> repair applied on the meta-24k mix from a
precomputed repair and on demand (same links, same run), a report on demand while a refresh
runs, and what a refresh costs (controller.service.precomputed)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence

import numpy as np

from controller.errors import DriverError
from controller.model.clos import PRESETS, build
from controller.model.failures import ELEMENT_KINDS, single_failures
from controller.routes.plan import Batch
from controller.service.engine import Engine
from controller.solver import RouteIndex
from sim.bench_base import Config, Section, log
from sim.driver import EmulatedDriver
from sim.jobmix import random_jobs

READY_FIRST = 1_000  # elements the refresh readies before the samples are picked


def _p99(xs: list[float]) -> float:
    return float(np.percentile(xs, 99)) if xs else float("nan")


class _Timed(EmulatedDriver):
    """The emulated driver, noting when its last write to the switches returned: the moment
    the repaired routes are in the tables."""

    applied = 0.0

    def apply_batches(
        self, batches: Sequence[Batch], timeout: float | None = None
    ) -> list[DriverError | None]:
        out = super().apply_batches(batches, timeout)
        self.applied = time.perf_counter()
        return out


def _down_applied(engine: Engine, link: int) -> tuple[float, float]:
    """Report `link` down; seconds until the repair's routes are in the switches' tables
    (the driver's last write returned), and until a thread polling the engine saw them read
    back (that thread waits for the interpreter's lock behind the engine's and the
    refresh's threads: up to its switch interval, 5 ms by default, more than the push)."""
    driver = engine.driver
    assert isinstance(driver, _Timed)
    version = engine.snapshot()[0]
    t0 = time.perf_counter()
    engine.report_links({link: 0.0})
    while engine.snapshot()[0] == version:
        time.sleep(0.0002)
    seen = time.perf_counter() - t0
    # a push writes through apply_batches; a retry (apply_batch) would leave this stale
    assert driver.applied > t0, "the repair's write was not timed"
    return driver.applied - t0, seen


def _engine(fabric, jobs, precompute: bool, process: bool | None = None) -> Engine:  # type: ignore[no-untyped-def]
    engine = Engine(fabric, _Timed(fabric), debounce=0.0, precompute=precompute,
                    precompute_process=process)  # fmt: skip
    for job in jobs:
        engine.put_job(job, 0)
    assert engine.wait_idle(600) and engine.wait_predicted(600)
    return engine


def _settled(engine: Engine) -> None:
    assert engine.wait_idle(600) and engine.wait_predicted(600)


def _ready_for_now(engine: Engine, count: int) -> None:
    """Wait until the set of what is installed has `count` elements ready (or is done)."""
    pc, target = engine.precomputer, engine.installer.target
    assert pc.wait(lambda f: pc.answers_to(engine.installer.target, engine._jobs_version,
                                           engine.react)
                   and (bool(f["done"]) or int(f["ready"]) >= count), 3600)  # fmt: skip
    assert engine.installer.target is target


def _hits(engine: Engine, names: list[str], links: list[int]) -> tuple[list[float], list[float]]:
    """Each link reported down once its repair is ready and the engine is quiet, then
    restored: (in the switches, seen by a poller) per link, seconds."""
    pc = engine.precomputer
    hits: list[float] = []
    hits_seen: list[float] = []
    for name, link in zip(names, links, strict=True):
        _settled(engine)
        assert pc.wait(lambda f, name=name: pc.answers_to(  # type: ignore[misc]
            engine.installer.target, engine._jobs_version, engine.react) and pc.has(name), 3600)
        before = engine.precomputed_hits
        applied, seen = _down_applied(engine, link)
        hits.append(applied)
        hits_seen.append(seen)
        _settled(engine)
        assert engine.precomputed_hits == before + 1, "the sample must be a hit"
        engine.report_links({link: 1.0})
        _settled(engine)
        log(f"  precomputed hit {hits[-1] * 1e3:.2f} ms (seen {seen * 1e3:.2f} ms)")
    return hits, hits_seen


def bench_precomputed(cfg: Config) -> Iterator[Section]:
    """The issue's target: link down -> repair applied p99 < 5 ms from a precomputed repair."""
    sec = Section("Precomputed repairs on the meta-24k job mix")
    fabric = build(PRESETS["meta-24k"])
    jobs = random_jobs(fabric, seed=1)
    n = 5 if cfg.quick else 20
    engine = _engine(fabric, jobs, precompute=True)
    pc = engine.precomputer

    t0 = time.perf_counter()
    _ready_for_now(engine, READY_FIRST)
    first = time.perf_counter() - t0
    fields = pc.fields()
    kept = pc.ready()
    by_kind: dict[str, list[float]] = {}
    for r in kept:
        by_kind.setdefault(r.kind, []).append(r.seconds)
    per_element_bytes = int(fields["bytes"]) / max(int(fields["ready"]), 1)
    # the samples: links whose repair moves rows, among the first ready
    rng = np.random.default_rng(11)
    moving = [r.name for r in kept if r.kind == "link" and r.rows_moved > 0]
    names = [moving[i] for i in rng.choice(len(moving), size=min(n, len(moving)),
                                           replace=False).tolist()]  # fmt: skip
    links = [fabric.link_names.index(name) for name in names]
    hits, hits_seen = _hits(engine, names, links)
    during: list[float] = []  # a report on demand while a refresh runs
    during_seen: list[float] = []
    # on demand while the refresh of the restored routes runs: used RTSW-CTSW links of the
    # last racks (late in the order: not ready yet when reported)
    target = engine.installer.target
    assert target is not None
    arcs = target.assignment.arcs(fabric)
    used = np.unique(arcs[:, 1][arcs[:, 1] >= 0] // 2)
    for link in used[::-1][: max(3, n // 4)].tolist():
        _settled(engine)
        assert pc.wait(lambda f: 0 < int(f["ready"]) < READY_FIRST and not f["done"], 600)
        assert not pc.has(fabric.link_names[link])
        misses = engine.repairs - engine.precomputed_hits
        applied, seen = _down_applied(engine, link)
        during.append(applied)
        during_seen.append(seen)
        _settled(engine)
        assert engine.repairs - engine.precomputed_hits == misses + 1
        engine.report_links({link: 1.0})
        _settled(engine)
    engine.close()
    # the same links, the set computed in the engine's own process (a thread that gives way)
    threaded = _engine(fabric, jobs, precompute=True, process=False)
    t0 = time.perf_counter()
    _ready_for_now(threaded, READY_FIRST)
    first_thread = time.perf_counter() - t0
    thread_hits, thread_seen = _hits(threaded, names, links)
    threaded.close()
    # on demand, the same links, the precomputing off
    plain = _engine(fabric, jobs, precompute=False)
    demand: list[float] = []
    demand_seen: list[float] = []
    for link in links:
        applied, seen = _down_applied(plain, link)
        demand.append(applied)
        demand_seen.append(seen)
        _settled(plain)
        plain.report_links({link: 1.0})
        _settled(plain)
    health = plain.health
    target = plain.installer.target
    assert target is not None
    index = RouteIndex.build(fabric, target.assignment)
    plain.close()
    # what a full refresh would take: each kind's count x its mean repair time (links from
    # the refresh above, switches timed here, two of each)
    failures = single_failures(fabric, health)
    counts = np.bincount(failures.kind, minlength=len(ELEMENT_KINDS))
    means: dict[str, float] = {k: statistics.mean(v) for k, v in by_kind.items()}
    from controller.solver import repair_indexed

    for k, kind in enumerate(ELEMENT_KINDS[1:], start=1):
        ids = np.flatnonzero(failures.kind == k)[:2].tolist()
        times = []
        for i in ids:
            t = time.perf_counter()
            repair_indexed(failures.health_after(health, i), index, old_health=health,
                           certify_options=engine.react, qps=engine.options.qps)  # fmt: skip
            times.append(time.perf_counter() - t)
        means[kind] = statistics.mean(times)
        log(f"  {kind} repair {means[kind]:.2f} s")
    link_ids = np.flatnonzero(failures.kind == 0)
    per_link = index.count[0::2] + index.count[1::2]
    link_rows = per_link[failures.links[failures.start[link_ids]]]
    each = [means.get(kind, float("nan")) for kind in ELEMENT_KINDS]
    total = float(sum(int(c) * t for c, t in zip(counts, each, strict=True)))
    projection: list[list[object]] = [[kind, int(counts[k]), each[k], int(counts[k]) * each[k]]
                                      for k, kind in enumerate(ELEMENT_KINDS)]  # fmt: skip
    sec.text(
        f"Section `precomputed`. {len(jobs)} jobs of the seeded mix (seed 1), emulated driver, "
        f"debounce 0, one engine with the precomputing on. After each change the set is "
        f"refreshed in the background; once its first {READY_FIRST:,} elements (links, "
        f"fewest TE rows first) were ready ({first:.1f} s after the jobs settled; "
        f"{first_thread:.1f} s in a thread), {len(links)} "
        "RTSW-CTSW links whose repair moves rows were picked among them; each is reported down "
        "when its repair is ready for the routes installed then and the engine is quiet "
        "(prediction done), then restored. The set is computed in a child process forked "
        "from the engine's (the default); 'in a thread' is the same links on a second engine "
        "whose set is computed in the engine's own process by a thread that gives way to it "
        "(`precompute_process=False`, the pre-fork design). "
        "'On demand' is the same links on a third engine with the precomputing off; 'during "
        "a refresh' is a report that is not ready yet (on demand) while the refresh of the "
        "restored routes runs. 'In the switches': until the driver's last "
        "write of the repair returned (the routes are in the tables); 'seen by a poller': "
        "until a thread polling the engine every 0.2 ms saw them read back, which adds the "
        "read-back and the poller's own wait for the interpreter's lock behind the engine "
        "(up to the switch interval, `sys.getswitchinterval()`). "
        "Shared 2-core machine: other work ran beside."
    )
    sec.text("")
    table = []
    for what, done, seen_by, goal in [
        ("precomputed", hits, hits_seen, "p99 < 0.005 s"),
        ("precomputed in a thread", thread_hits, thread_seen, ""),
        ("on demand", demand, demand_seen, ""),
        ("on demand during a refresh", during, during_seen, ""),
    ]:
        table.append([f"link down -> repair in the switches, {what}", len(done),
                      statistics.median(done), _p99(done), max(done), goal])
        table.append([f"link down -> read back, seen by a poller, {what}", len(seen_by),
                      statistics.median(seen_by), _p99(seen_by), max(seen_by), ""])
    sec.table(["step", "samples", "median s", "p99 s", "max s", "target"], table)
    sec.text("")
    sec.text(
        f"Refresh: {len(failures):,} elements; memory kept {per_element_bytes / 1e3:.1f} kB "
        f"per element on average over the first {int(fields['ready']):,} "
        f"(links: TE rows per link {int(link_rows.min())}-{int(link_rows.max())}), i.e. "
        f"~{per_element_bytes * len(failures) / 1e6:,.0f} MB for every element at that rate "
        "(switch repairs move more rows and keep more). A full refresh, projected as each "
        "kind's count times its mean time per repair (links: the refresh's own, in its "
        "child process beside the engine; switches: two of each timed alone):"
    )
    sec.text("")
    sec.table(["element kind", "elements", "s per repair", "s in all"], projection)
    sec.text("")
    sec.text(f"Full refresh, projected: {total / 60:,.1f} min on one core.")
    yield sec
