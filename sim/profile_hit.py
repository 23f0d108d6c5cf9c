"""Profile precomputed hits on the meta-24k mix (docs/profiling.md, "A precomputed hit"):
cProfile around `Engine.repair_for` for sampled RTSW-CTSW link reports served from their
precomputed repair, with the wall time from the report to the routes version bumped and the
worker thread's own CPU time.

    python -m sim.profile_hit [SAMPLES] [busy|done] [SWITCH_INTERVAL]

`busy`: the refresh goes on beside the reports (as in the bench section `precomputed`);
`done`: it stops after 300 elements and each report waits for it to be done.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time
from typing import Any

import numpy as np

from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth
from controller.service.engine import Engine
from controller.solver import AssignResult
from sim.driver import EmulatedDriver
from sim.jobmix import random_jobs

READY = 300  # elements ready before the samples are drawn among them


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    mode = sys.argv[2] if len(sys.argv) > 2 else "busy"
    if len(sys.argv) > 3:
        sys.setswitchinterval(float(sys.argv[3]))
    fabric = build(PRESETS["meta-24k"])
    extra: dict[str, Any] = {"precompute_elements": READY} if mode == "done" else {}
    engine = Engine(fabric, EmulatedDriver(fabric), debounce=0.0, precompute=True, **extra)
    for job in random_jobs(fabric, seed=1):
        engine.put_job(job, 0)
    assert engine.wait_idle(600) and engine.wait_predicted(600)
    pc = engine.precomputer

    def now() -> bool:
        return pc.answers_to(engine.installer.target, engine._jobs_version, engine.react)

    assert pc.wait(lambda f: now() and (bool(f["done"]) or int(f["ready"]) >= READY), 3600)
    f = pc.fields()
    print(f"ready {f['ready']}, {int(f['bytes']) / int(f['ready']):.0f} bytes per element")
    moving = [r.name for r in pc.ready() if r.kind == "link" and r.rows_moved > 0]
    rng = np.random.default_rng(11)
    names = [moving[i] for i in rng.choice(len(moving), size=min(n, len(moving)),
                                           replace=False).tolist()]  # fmt: skip
    prof = cProfile.Profile()
    on = [False]
    wall: list[float] = []
    cpu: list[float] = []
    orig = engine.repair_for

    def wrapped(health: LinkHealth) -> AssignResult:
        if not on[0]:
            return orig(health)
        t, c = time.perf_counter(), time.thread_time()
        prof.enable()
        try:
            return orig(health)
        finally:
            prof.disable()
            wall.append(time.perf_counter() - t)
            cpu.append(time.thread_time() - c)

    engine.repair_for = wrapped  # type: ignore[method-assign]
    outer: list[float] = []
    for name in names:
        link = fabric.link_names.index(name)
        assert engine.wait_idle(600) and engine.wait_predicted(600)
        assert pc.wait(lambda f, name=name: now() and pc.has(name)  # type: ignore[misc]
                       and (mode != "done" or bool(f["done"])), 3600)  # fmt: skip
        hits, version = engine.precomputed_hits, engine.snapshot()[0]
        on[0] = True
        t0 = time.perf_counter()
        engine.report_links({link: 0.0})
        while engine.snapshot()[0] == version:
            time.sleep(0.0002)
        outer.append(time.perf_counter() - t0)
        assert engine.wait_idle(600)
        on[0] = False
        assert engine.precomputed_hits == hits + 1, "the sample must be a hit"
        engine.report_links({link: 1.0})
        print(f"{name}: report -> routes bumped {outer[-1] * 1e3:.2f} ms, repair_for "
              f"{wall[-1] * 1e3:.2f} ms (its thread's CPU {cpu[-1] * 1e3:.2f} ms)", flush=True)
    engine.close()
    print(f"median: report -> routes bumped {statistics.median(outer) * 1e3:.2f} ms (max "
          f"{max(outer) * 1e3:.2f}), repair_for {statistics.median(wall) * 1e3:.2f} ms, CPU "
          f"{statistics.median(cpu) * 1e3:.2f} ms")  # fmt: skip
    pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
