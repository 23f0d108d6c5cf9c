"""The bench's derived figures: the worst-job bound must hold for every routing it is
compared with, or 'TE worst/bound' would flatter or slander the solver."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.model.clos import PRESETS, build
from controller.model.health import LinkHealth, random_failures
from controller.model.jobs import jobs_flows
from controller.solver.bounds import lower_bound
from controller.solver.solve import solve
from sim.bench import worst_job_bound
from sim.compare import baseline, routed
from sim.jobmix import random_jobs, ring_jobs

# tapered and with links down, the bound is below 1 in most draws (and often met)
FABRICS = {name: build(PRESETS[name]) for name in ("tiny", "small")}


def test_worst_job_bound_by_hand() -> None:
    # B <= 1: every flow may get its demand; B = 2: some flow on the hottest link gets half
    assert worst_job_bound(0.0) == 1.0
    assert worst_job_bound(1.0) == 1.0
    assert worst_job_bound(2.0) == 0.5
    assert worst_job_bound(3.227) == 1 / 3.227


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(sorted(FABRICS)),
    seed=st.integers(0, 10_000),
    down=st.integers(0, 2),
    rings=st.booleans(),
)
# a flow with no path left makes the bound infinite: it bounds routings that route every flow
@example(name="tiny", seed=271, down=2, rings=True)
def test_no_routing_beats_the_worst_job_bound(name: str, seed: int, down: int, rings: bool) -> None:
    fabric = FABRICS[name]
    health = random_failures(fabric, down, seed) if down else LinkHealth.all_up(fabric)
    jobs = ring_jobs(fabric, 4, seed=seed) if rings else random_jobs(fabric, seed=seed)
    flows = jobs_flows(fabric, jobs)
    ceiling = worst_job_bound(lower_bound(fabric, health, flows, qps=16).value)
    res = solve(fabric, health, flows)
    te = routed("te", fabric, health, res.assignment, 0.0, seed, parent=res.parent).report
    reports = [te] + [baseline(b, fabric, health, flows, seed).report for b in ("ecmp", "eecmp")]
    for report in reports:
        if report.unrouted:  # the shares count routed flows only: the bound does not apply
            continue
        assert report.busbw_fraction_min <= ceiling + 1e-9
    # the solver's own bound is at least the cheap one, so it bounds the worst job too
    if not te.unrouted:
        assert te.busbw_fraction_min <= worst_job_bound(res.bound.value) + 1e-9


def test_certificate_section_counts_no_job_below_the_enforced_reference() -> None:
    from sim.bench_certificate import run_scenario, scenario_health, summarise

    fabric = build(PRESETS["small"])
    assert np.array_equal(scenario_health(fabric, 4).factor, scenario_health(fabric, 4).factor)
    runs = [run_scenario(fabric, seed, enforce_wcmp=seed == 3) for seed in (3, 4)]
    assert all(run["passed"] and run["wcmp_passed"] for run in runs)
    assert runs[0]["te_wcmp"] is not None and runs[1]["te_wcmp"] is None
    rows = {row[2]: row for row in summarise("small", runs)}
    assert set(rows) == {"eecmp", "wcmp", "ecmp", "pinning", "spray", "wcmp, enforced"}
    # no job below the reference, so the reference is never the better routing either
    assert rows["eecmp"][4] == 0 and rows["eecmp"][5] == 0 and rows["eecmp"][6] >= 1 - 1e-9
    # WCMP as the fabric's hashing: checked on the one scenario solved so
    assert rows["wcmp, enforced"][1] == 1 and rows["wcmp, enforced"][4:6] == [0, 0]
    assert all(run["ceiling"] >= min(run["te"].values()) - 1e-9 for run in runs)


def test_a_rival_is_better_only_by_the_objective_te_seeks() -> None:
    from sim.bench_certificate import rival_better

    te = {"a": 0.8, "b": 0.9}
    # a job below the rival, yet the rival's worst job is lower: a trade, not a loss
    assert not rival_better(te, {"a": 1.0, "b": 0.5})
    assert rival_better(te, {"a": 0.85, "b": 0.9})  # the worst job higher under the rival
    assert rival_better(te, {"a": 1.0, "b": 0.8})  # the worst equal, the next higher
    assert not rival_better(te, {"a": 0.9, "b": 0.8})  # the same values, other jobs
    # over the jobs both value: c, which TE does not value, is left out
    assert rival_better(te, {"a": 1.0, "b": 0.8, "c": 0.1})
    assert not rival_better(te, dict(te))  # equal: not better


def test_the_parallel_cables_row_is_its_own_fabric_a_scenario() -> None:
    """Scenario s of the `parallel cables` row: a fabric of its own with 2-3 cables from
    each RTSW to each CTSW, the same for the same seed; certified like the others."""
    from sim.bench_certificate import parallel_scenario, run_scenario

    fabric, health, jobs = parallel_scenario(7)
    again = parallel_scenario(7)
    assert fabric.fingerprint == again[0].fingerprint and jobs == again[2]
    assert np.array_equal(health.factor, again[1].factor) and (health.factor < 1).any()
    assert 2 <= fabric.rack_links <= 3 and jobs
    seen = {parallel_scenario(s)[0].fingerprint for s in range(1, 9)}
    assert len(seen) > 4  # fabrics of their own
    run = run_scenario(None, 7, enforce_wcmp=True)
    assert run["passed"] and run["wcmp_passed"] and run["te"]
    assert set(run["te"]) <= {j.id for j in jobs}  # (a job of one host has no flow)


def test_a_re_run_section_says_how_it_was_measured(tmp_path) -> None:
    from sim.bench import MARK, main, split_sections

    out = tmp_path / "bench.md"
    out.write_text("# Benchmarks\n\nProduced by `make bench`.\n\n" + MARK.format("foundation")
                   + "\n## Old\n\nold figures\n")  # fmt: skip
    assert main(["--only", "foundation", "--quick", "--update", "--out", str(out)]) == 0
    head, sections = split_sections(out.read_text())
    assert "re-run by" not in head and head.startswith("# Benchmarks")
    body = sections["foundation"]
    assert body.split("\n\n")[1].startswith(
        "_Measured by `python -m sim.bench --only foundation --quick` on ")
    assert "old figures" not in body


def test_scenario_caps_are_checked() -> None:
    import pytest

    from sim.bench import main

    with pytest.raises(SystemExit):
        main(["--only", "certificate", "--scenarios", "pod=many"])
