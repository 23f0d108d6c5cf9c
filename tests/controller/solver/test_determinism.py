"""Same inputs, same routes, byte for byte, however fast or slow the clock runs.

The searches are bounded by work (moves tried), never by time: a clock that jumps forward by
an hour on every reading (a machine so loaded that every step looks like it took forever)
must not change a single entry.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import pytest

from controller.model.clos import PRESETS, build
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import jobs_flows
from controller.routes.entries import build_routes
from controller.solver.solve import SolveOptions, SolveResult, solve
from sim.jobmix import random_jobs


def _routes(fabric: Fabric, res: SolveResult) -> list[str]:
    """Every TE entry, as text: what a switch would be given."""
    return [repr(entry) for entry in build_routes(fabric, res.assignment)]


def _jumping_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every reading of the clocks an hour later than the one before."""
    for name in ("perf_counter", "monotonic"):
        ticks = itertools.count(start=time.perf_counter(), step=3600.0)
        monkeypatch.setattr(time, name, lambda ticks=ticks: next(ticks))


def _mix() -> tuple[Fabric, LinkHealth, FlowSet]:
    """The small preset, a seeded job mix, two rack uplinks down: local search, QP splits
    and spraying all have work to do."""
    fabric = build(PRESETS["small"])
    flows = jobs_flows(fabric, random_jobs(fabric, seed=3))
    down = [fabric.rack_base, fabric.rack_base + 5]
    return fabric, LinkHealth.all_up(fabric).down(down), flows


@pytest.mark.parametrize(
    "options",
    [
        SolveOptions(),  # one path per flow (greedy + local search), then QP splits
        SolveOptions(whole_first_flows=0),  # spray first, as on a large mix
        SolveOptions(lp="always"),  # the LP-guided second assignment too
    ],
    ids=["whole-then-split", "spray-first", "lp-guided"],
)
def test_routes_do_not_depend_on_the_clock(
    monkeypatch: pytest.MonkeyPatch, options: SolveOptions
) -> None:
    fabric, health, flows = _mix()
    tight = replace(fabric, te_entries=(24, None, None))  # spray only what the tables afford
    for fab in (fabric, tight):
        calm = solve(fab, health, flows, options=options)
        with monkeypatch.context() as patch:
            _jumping_clock(patch)
            assert time.perf_counter() + 1000 < time.perf_counter()  # the clock does jump
            loaded = solve(fab, health, flows, options=options)
        assert calm.method == loaded.method
        assert np.array_equal(calm.assignment.path, loaded.assignment.path)
        assert _routes(fab, calm) == _routes(fab, loaded)
