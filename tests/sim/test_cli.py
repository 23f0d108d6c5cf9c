"""`tectl` end to end on small fabrics: reports, route files, errors and exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from controller.cli.main import main


def _reject(token: str) -> None:
    raise ValueError(f"not strict JSON: {token}")


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    """Run a --json command and parse its stdout strictly (NaN/Infinity are errors)."""
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_reject)


def test_fabric_show(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["fabric", "show", "meta-24k", "--json"])
    assert data["gpus"] == 24576 and data["pods"] == 8


def test_simulate_reports_every_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["simulate", "--fabric", "small", "--seed", "2", "--json"])
    assert [r["method"] for r in data["rows"]] == ["ecmp", "eecmp-16qp", "wcmp-16qp", "pinning"]
    # a routing named twice is simulated once, in the order first given
    data = _json(capsys, ["simulate", "--fabric", "small", "--json", "--routing", "wcmp",
                          "--routing", "ecmp", "--routing", "wcmp"])  # fmt: skip
    assert [r["method"] for r in data["rows"]] == ["wcmp-16qp", "ecmp"]


def test_solve_apply_and_route_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    base = ["solve", "--fabric", "small", "--seed", "3", "--json"]
    data = _json(capsys, [*base, "--out", str(old), "--apply", "emulated"])
    te = data["rows"][0]
    assert te["method"] == "fabric-te" and te["mlu"] >= data["bound"]["value"] * (1 - 1e-9)
    assert data["apply"]["push_ok"] and data["apply"]["verify_ok"]
    # the same jobs with a link down: a different route file, a non-empty diff
    _json(capsys, [*base, "--out", str(new), "--fail", "rtsw-p0-r0:ctsw-p0-c0"])
    assert main(["routes", "diff", str(old), str(new), "--fabric", "small", "--json"]) == 1
    diff = json.loads(capsys.readouterr().out)
    assert sum(diff["counts"].values()) == diff["operations"] > 0 and not diff["same"]
    # the operations the text lists, as records
    assert len(diff["ops"]) == diff["operations"]
    assert {op["op"] for op in diff["ops"]} <= set(diff["counts"])
    assert all(op["switch"] and op["in"] and op["via"] for op in diff["ops"])
    verify = _json(capsys, ["routes", "verify", "--fabric", "small", "--routes", str(new),
                            "--fail", "rtsw-p0-r0:ctsw-p0-c0", "--json"])  # fmt: skip
    assert verify["ok"]


def test_solve_file_driver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = tmp_path / "tables"
    data = _json(capsys, ["solve", "--fabric", "tiny", "--json", "--apply", "file",
                          "--driver-dir", str(tables)])  # fmt: skip
    assert data["apply"]["push_ok"]
    assert any(tables.glob("rtsw-*.json"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--fabric", "nope"], "neither a fabric preset"),
        (["solve", "--fabric", "tiny", "--fail", "rtsw-p0-r0:ctsw-p0-c9"], "unknown link"),
        (["solve", "--fabric", "tiny", "--fill", "0"], "--fill must be in"),
        (["solve", "--fabric", "tiny", "--apply", "nosuch"], "nosuch"),
    ],
)
def test_bad_input_exits_2_with_a_named_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_advise_and_topology_export(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["advise", "--fabric", "small", "--jobs", "none", "--gpus", "16",
                          "--tp", "4", "--json"])  # fmt: skip
    assert data[0]["pods"] == 1 and len(data[0]["hosts"]) == 4
    assert main(["topology", "export", "--fabric", "tiny", "--format", "slurm-conf"]) == 0
    assert "SwitchName=rtsw-p0-r0 Nodes=host-p0-r0-h[0-1]" in capsys.readouterr().out
    assert main(["advise", "--fabric", "tiny", "--jobs", "none", "--gpus", "64"]) == 2
    assert "free hosts" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["fabric", "show", "pod", "--json"],
        ["fabric", "show", "tiny", "--json"],
        ["simulate", "--fabric", "tiny", "--fail", "rtsw-p0-r0:ctsw-p0-c0", "--json"],
        ["solve", "--fabric", "tiny", "--lp", "never", "--json"],  # no LP: lp_mlu is null
        ["solve", "--fabric", "tiny", "--fail", "ctsw-p0-c0=drain", "--json"],
        ["topology", "export", "--fabric", "tiny", "--format", "json"],
        ["topology", "export", "--fabric", "tiny", "--format", "k8s-labels"],
    ],
)
def test_every_json_output_is_strict(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, argv)
    assert data
    if argv[0] == "solve" and "never" in argv:
        assert data["te"]["lp_mlu"] is None
    if argv[0] == "solve":  # counts are ints, and say what `counts` says
        te, counts = data["te"], data["counts"]
        assert type(te["flows"]) is int and te["flows"] == counts["flows"]
        assert type(te["te_entries"]) is int and type(te["mlu"]) is float
        # one key, one meaning: a row's `collided_links` counts every arc carrying more
        # than one flow; the solve's own count (over capacity only) is named apart
        assert type(te["shared_links_over_capacity"]) is int and "collided_links" not in te


def test_demo_table_leads_with_job_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    """The table a new user reads first: job bus bandwidth first, then MLU and its bound
    ratio, links over capacity and entries, by one rule for every routing."""
    assert main(["solve", "--fabric", "small", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("routing"))
    assert lines[head].split("  ")[0:1] == ["routing"]
    assert lines[head].index("worst job busbw") < lines[head].index("MLU")
    assert "collided" not in out
    rows = {ln.split()[0]: ln.split() for ln in lines[head + 2 : head + 7]}
    assert list(rows) == ["fabric-te", "ecmp", "eecmp-16qp", "wcmp-16qp", "pinning"]
    data = _json(capsys, ["solve", "--fabric", "small", "--seed", "1", "--json"])
    by = {r["method"]: r for r in data["rows"]}
    for name, cells in rows.items():  # the table shows what --json reports
        r = by[name]
        assert cells[1] == f"{r['busbw_fraction_min']:.1%}"
        assert cells[2] == f"{r['busbw_fraction_mean']:.1%}"
        assert int(cells[5].replace(",", "")) == r["links_over_capacity"]
        assert int(cells[6].replace(",", "")) == r["te_entries"]
    assert by["fabric-te"]["links_over_capacity"] <= by["ecmp"]["links_over_capacity"]
    assert by["ecmp"]["te_entries"] == 0 and by["fabric-te"]["te_entries"] > 0


def test_solve_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "jobs.png"
    assert main(["solve", "--fabric", "small", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in capsys.readouterr().out


def test_readme_first_screen_shows_the_demo_table() -> None:
    from sim.compare import HEADER

    readme = (Path(__file__).parents[2] / "README.md").read_text().splitlines()
    first_screen = readme[:40]
    head = next(ln for ln in first_screen if ln.startswith("routing "))
    assert [c.strip() for c in head.split("  ") if c.strip()] == list(HEADER)
    assert any(ln.startswith("fabric-te ") for ln in first_screen)


def test_solve_reports_the_table_budget_and_what_it_leaves_on_ecmp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps({"preset": "small", "te_entries": {"rtsw": 3}}))
    # the solver's routing (certified, the jobs left below E-ECMP go back to hashing)
    raw = ["solve", "--fabric", str(fabric), "--seed", "2", "--no-certify"]
    assert main([*raw, "--fail-random", "1"]) == 0
    out = capsys.readouterr().out
    # the fullest switch of each tier is named (the most of its own budget used)
    assert re.search(r"rtsw rtsw-p\d-r\d+ 3/3, ctsw (ctsw-p\d-c\d+ )?[\d,]+/2,048, atsw", out)
    assert "certificate:" not in out
    te = _json(capsys, [*raw, "--json"])["te"]
    assert te["te_entries_max_rtsw"] <= 3 and te["te_entries_budget_rtsw"] == 3
    assert te["fallback_ecmp"] > 0
    # the summed rate model is still there, and never rates E-ECMP below the striped one
    rows = {m: _json(capsys, ["simulate", "--fabric", "small", "--seed", "2", "--json",
                              "--routing", "eecmp", "--rate-model", m])["rows"][0]
            for m in ("striped", "summed")}  # fmt: skip
    assert rows["striped"]["busbw_fraction_min"] <= rows["summed"]["busbw_fraction_min"]


def test_solve_search_tries_bounds_the_search_not_the_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two uplinks of one rack down: the buckets of the flows left overloaded need the search
    base = ["solve", "--fabric", "small", "--seed", "3", "--json",
            "--fail", "rtsw-p0-r0:ctsw-p0-c0", "--fail", "rtsw-p0-r0:ctsw-p0-c5"]  # fmt: skip
    files = [tmp_path / f"{i}.json" for i in range(3)]
    for out, tries in zip(files, ("40", "40", "0"), strict=True):
        _json(capsys, [*base, "--search-tries", tries, "--out", str(out)])
    assert files[0].read_bytes() == files[1].read_bytes()  # same work, same routes
    assert files[0].read_bytes() != files[2].read_bytes()  # the flag reaches the search
    with pytest.raises(SystemExit):
        main([*base, "--search-tries", "-1"])
    assert "--search-tries" in capsys.readouterr().err


def test_solve_relief_tries_reaches_the_relief_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the same overloaded rack: links beyond capacity below the maximum are drained by default
    base = ["solve", "--fabric", "small", "--seed", "3", "--json", "--no-certify",
            "--fail", "rtsw-p0-r0:ctsw-p0-c0", "--fail", "rtsw-p0-r0:ctsw-p0-c5"]  # fmt: skip
    on, off = tmp_path / "on.json", tmp_path / "off.json"
    with_relief = _json(capsys, [*base, "--out", str(on)])
    without = _json(capsys, [*base, "--relief-tries", "0", "--out", str(off)])
    assert on.read_bytes() != off.read_bytes()
    assert with_relief["te"]["mlu"] <= without["te"]["mlu"]
    with pytest.raises(SystemExit):
        main([*base, "--relief-tries", "-1"])
    assert "--relief-tries" in capsys.readouterr().err


def test_routes_verify_takes_the_file_as_routes_diff_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routes = tmp_path / "r.npz"
    _json(capsys, ["solve", "--fabric", "tiny", "--json", "--out", str(routes)])
    new = _json(capsys, ["routes", "verify", str(routes), "--fabric", "tiny", "--json"])
    old = _json(capsys, ["routes", "verify", "--fabric", "tiny", "--routes", str(routes), "--json"])
    assert new == old and new["ok"]
    # without --fabric, the preset the file names (tiny, not the default preset)
    assert _json(capsys, ["routes", "verify", str(routes), "--json"]) == new
    assert main(["routes", "verify", "--fabric", "tiny"]) == 2
    assert "the route file to verify is missing" in capsys.readouterr().err
    # a link down under the routes: the subflows walked off their path are named
    for link in ("rtsw-p0-r0:ctsw-p0-c2", "rtsw-p0-r1:ctsw-p0-c3", "rtsw-p0-r0:ctsw-p0-c0"):
        assert main(["routes", "verify", str(routes), "--fabric", "tiny", "--fail", link,
                     "--json"]) in (0, 1)  # fmt: skip
        data = json.loads(capsys.readouterr().out)
        if data["off_path"]:
            break
    assert not data["ok"] and data["off_path"] and all(">" in n for n in data["off_path"])
    assert data["looped"] == data["dropped"] == []
    assert main(["routes", "verify", str(routes), "--fabric", "tiny", "--fail", link]) == 1
    assert "\noff path: " + data["off_path"][0] in capsys.readouterr().out


def test_fail_random_names_the_links_it_took_down(capsys: pytest.CaptureFixture[str]) -> None:
    from controller.model.clos import PRESETS, build
    from controller.model.health import random_failures

    small = build(PRESETS["small"])
    argv = ["simulate", "--fabric", "small", "--seed", "3", "--fail-random", "2",
            "--fail", "rtsw-p0-r1:ctsw-p0-c1=0.5"]  # fmt: skip
    data = _json(capsys, [*argv, "--json"])
    expected = [small.link_name(link) for link in random_failures(small, 2, 3).down_links()]
    assert data["links_down"] == expected and len(expected) == 2 * small.pods
    assert data["links_degraded"] == {"rtsw-p0-r1:ctsw-p0-c1": 0.5}
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "links down: " + " ".join(expected)
    assert lines[2] == "links degraded: rtsw-p0-r1:ctsw-p0-c1=0.5"
    # more than a pod has: refused (every rack link went down, silently)
    per_pod = small.rtsws_per_pod * small.ctsws_per_pod * small.rack_links
    assert main(["simulate", "--fabric", "small", "--fail-random", str(per_pod + 1)]) == 2
    assert f"a pod of fabric 'small' has {per_pod} RTSW-CTSW links" in capsys.readouterr().err
    # a drained switch is named, not its every link (the JSON keeps every link)
    drain = ["simulate", "--fabric", "small", "--fail", "ctsw-p0-c3=drain", "--fail",
             "rtsw-p1-r0:ctsw-p1-c1"]  # fmt: skip
    assert main(drain) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == ["switches drained (every link down): ctsw-p0-c3",
                          "links down: rtsw-p1-r0:ctsw-p1-c1"]  # fmt: skip
    assert len(_json(capsys, [*drain, "--json"])["links_down"]) == 11


def test_jobs_out_writes_what_jobs_and_job_put_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.json"
    base = ["simulate", "--fabric", "small", "--seed", "4", "--json"]
    mixed = _json(capsys, [*base, "--jobs", "random", "--jobs-out", str(jobs)])
    again = _json(capsys, [*base, "--jobs", str(jobs)])
    for data in (mixed, again):
        for row in data["rows"]:
            del row["seconds"]
    assert again == mixed  # the same jobs, so the same flows and the same figures
    ids = [job["id"] for job in json.loads(jobs.read_text())["jobs"]]
    assert len(ids) > 1
    # `tectl job put` takes the file as it is
    from controller.model.clos import PRESETS, build
    from controller.service.engine import Engine
    from controller.service.server import start
    from sim.driver import EmulatedDriver

    small = build(PRESETS["small"])
    running = start(Engine(small, EmulatedDriver(small), debounce=0.01), "127.0.0.1:0")
    try:
        server = ["--server", f"127.0.0.1:{running.port}", "--insecure"]
        assert main(["job", "put", str(jobs), *server]) == 0
        assert main(["job", "ls", *server]) == 0
        listed = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
        assert sorted(ids) == sorted(set(listed) & set(ids)) and len(listed) >= len(ids)
    finally:
        running.stop(grace=0.5)
    assert main([*base, "--jobs-out", str(tmp_path / "no" / "such" / "dir.json")]) == 2
    assert "--jobs-out: cannot write" in capsys.readouterr().err


def test_the_readme_sample_job_needs_te_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    sample = re.search(r"Jobs files are JSON:\n\n```json\n(.*?)```", readme, re.S)
    assert sample, "the README's sample jobs file"
    jobs = tmp_path / "jobs.json"
    jobs.write_text(sample.group(1))
    data = _json(capsys, ["solve", "--fabric", "pod", "--jobs", str(jobs), "--json",
                          "--out", str(tmp_path / "r.npz")])  # fmt: skip
    assert data["routes"]["entries"] > 0
    assert data["rows"][0]["method"] == "fabric-te"


def test_advise_says_what_it_measures(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", "--fabric", "small", "--gpus", "16", "--tp", "4", "--seed", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert "(dp 4 x pp 1 x tp 4, dp from the GPUs asked, ring)" in head and "dp -" not in head
    note = " ".join(out.split("\n\n")[-1].split())
    data = _json(capsys, [*argv, "--json"])
    before = data[0]["mlu_before"]
    assert note.startswith("TE MLU: the most loaded link of the fabric with the job added")
    assert f"The running jobs alone: MLU {before:.4g}" in note
    if all(s["te_mlu"] <= before * (1 + 1e-9) for s in data):
        assert "no candidate raises it" in note
    assert all(s["te_mlu"] >= before * (1 - 1e-9) for s in data)  # adding a job never lowers it


def test_advise_options_all_have_help() -> None:
    import argparse

    from controller.advisor.advise import SAME_POD
    from controller.cli import advise
    from controller.cli.main import build_parser

    assert advise.SAME_POD == SAME_POD  # spelled in the CLI so tectl starts without the solver
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices["advise"]
    bare = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert bare == []
    fill = next(a for a in parser._actions if "--fill" in a.option_strings)
    assert fill.help and "room for the new job" in fill.help and "1.0" in fill.help


def test_reapplying_unchanged_routes_says_there_was_nothing_to_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    argv = ["solve", "--fabric", "small", "--seed", "2", "--apply", "file",
            "--driver-dir", str(tmp_path / "tables")]  # fmt: skip

    def plan_and_push(extra: list[str]) -> tuple[str, str]:
        assert main([*argv, *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        plan = next(line for line in lines if line.startswith("plan: "))
        push = next(line for line in lines if line.startswith("push: "))
        assert "{" not in plan + push  # counts as text, never a Python dict
        return plan, push

    plan, push = plan_and_push([])
    first = re.fullmatch(r"plan: ([\d,]+) operations in (\d) stages? \(add \1, replace 0, "
                         r"delete 0\)", plan)  # fmt: skip
    assert first, plan
    stages = first.group(2)
    assert re.fullmatch(rf"push: {first.group(1)} operations on [\d,]+ switch(es)?, {stages}/"
                        rf"{stages} stages? applied; {first.group(1)} entries read back from "
                        "those switches", push), push  # fmt: skip
    plan, push = plan_and_push([])
    assert plan == f"plan: no operations; the {first.group(1)} entries wanted are installed"
    assert push == "push: nothing to change: the switches already hold these routes"
    plan, push = plan_and_push(["--fail", "rtsw-p0-r0:ctsw-p0-c0"])
    assert re.fullmatch(r"plan: [\d,]+ operations in \d stages? \(add \d+, replace \d+, delete "
                        r"\d+\)", plan), plan  # fmt: skip


def test_solve_out_shows_the_write_on_stderr_and_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.formats.route_file import read_routes
    from controller.model.clos import PRESETS, build

    files = [tmp_path / "r.json", tmp_path / "r.npz"]
    for path in files:
        assert main(["solve", "--fabric", "small", "--seed", "2", "--out", str(path)]) == 0
        out = capsys.readouterr()
        assert f"  writing {path} ... " in out.err and f"wrote {path}" in out.out
    small = build(PRESETS["small"])
    (a_json, r_json), (a_npz, r_npz) = (read_routes(path, small) for path in files)
    assert r_json == r_npz and (a_json.path == a_npz.path).all()
    assert files[1].stat().st_size < files[0].stat().st_size


def test_routings_over_the_size_limit_are_named_not_simulated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sim.cli

    monkeypatch.setattr(sim.cli, "SIM_SUBFLOWS", 100)
    argv = ["solve", "--fabric", "small", "--jobs", "random", "--seed", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "fabric-te not simulated (see below)" in out
    assert "not simulated (over 100 subflows" in out and "eecmp (" in out
    data = _json(capsys, [*argv, "--json"])
    assert {"fabric-te", "eecmp", "wcmp"} <= set(data["not_simulated"])
    assert "fabric-te" not in [r["method"] for r in data["rows"]]
    monkeypatch.setattr(sim.cli, "SIM_SUBFLOWS", 10**9)
    assert main(argv) == 0
    assert "fabric-te not simulated" not in capsys.readouterr().out


def test_the_optimum_needs_no_lp_when_the_even_split_meets_the_bound(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import controller.solver.lp

    def no_lp(*args: object, **kwargs: object) -> None:
        raise AssertionError("the LP was solved")

    monkeypatch.setattr(controller.solver.lp, "solve_lp", no_lp)
    # small at full health: the even split's MLU is the cuts' bound, 0.5 on this mix
    data = _json(capsys, ["solve", "--fabric", "small", "--jobs", "random", "--seed", "1",
                          "--json"])  # fmt: skip
    spray = next(r for r in data["rows"] if r["method"] == "adaptive-spray")
    assert spray["mlu"] == data["bound"]["value"]


def test_adaptive_spray_has_no_mean_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Known only as its worst job's ceiling, adaptive spray's mean would read below a real
    routing's on a fabric where that ceiling binds: the cell reads '-'."""
    assert main(["solve", "--fabric", "small", "--jobs", "random", "--seed", "3", "--fail",
                 "rtsw-p0-r0:ctsw-p0-c1", "--fail", "rtsw-p0-r1:ctsw-p0-c2=0.5"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    assert rows["adaptive-spray"][2] == "-" and rows["fabric-te"][2].endswith("%")
    # nor in the gap line below it (it gave 'mean job x adaptive spray's')
    gap = next(line for line in out.splitlines() if line.startswith("gap to adaptive spray"))
    assert "worst job" in gap and "mean" not in gap
    # nor in --json, where it read 0.857 beside the table's '-' (and 0 flows a link)
    data = _json(capsys, ["solve", "--fabric", "small", "--jobs", "random", "--seed", "3",
                          "--fail", "rtsw-p0-r0:ctsw-p0-c1", "--fail",
                          "rtsw-p0-r1:ctsw-p0-c2=0.5", "--json"])  # fmt: skip
    spray = next(r for r in data["rows"] if r["method"] == "adaptive-spray")
    assert spray["busbw_fraction_mean"] is None and spray["links_over_capacity"] is None
    assert spray["collided_links"] is None and spray["max_flows_per_link"] is None
    assert abs(100 * spray["busbw_fraction_min"] - float(rows["adaptive-spray"][1][:-1])) < 0.05


@pytest.mark.parametrize("fail", ["host-p0-r0-h0/nic0:rtsw-p0-r0", "rtsw-p0-r0=drain"])
def test_a_job_no_routing_can_carry_reads_stalled_not_full_rate(
    fail: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NIC link down (or its RTSW drained) leaves a flow of the job with no path: the job
    is at 0 under every routing, the ceiling included, the bound leaves the flow out, and
    the report says why instead of failing."""
    data = _json(capsys, ["solve", "--fabric", "tiny", "--fail", fail, "--json"])
    assert all(row["busbw_fraction_min"] == 0.0 for row in data["rows"])
    assert 0 < data["bound"]["value"] < float("inf")
    assert data["te"]["unroutable"] > 0
    assert main(["solve", "--fabric", "tiny", "--fail", fail]) == 0
    assert "stalled under any routing" in capsys.readouterr().out
    sim = _json(capsys, ["simulate", "--fabric", "tiny", "--fail", fail, "--json"])
    assert all(row["busbw_fraction_min"] == 0.0 for row in sim["rows"])


def test_a_bad_plot_path_is_refused_before_the_solve_and_the_push(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = tmp_path / "tables"
    for plot, why in ((tmp_path / "x.txt", "the extension names no picture format"),
                      (tmp_path / "nope" / "x.png", "no folder")):  # fmt: skip
        argv = ["solve", "--fabric", "tiny", "--apply", "file", "--driver-dir", str(tables),
                "--plot", str(plot)]  # fmt: skip
        assert main(argv) == 2
        assert why in capsys.readouterr().err
        assert not tables.exists()  # nothing pushed


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1", ":50051", "h:x"])
def test_serve_refuses_a_listen_address_it_cannot_use(
    listen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as out:
        main(["serve", "--fabric", "tiny", "--insecure", "--listen", listen])
    assert out.value.code == 2 and "--listen" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--dry-run"], "--dry-run: only with --apply"),
    (["--driver-dir", "t"], "--driver-dir: only with --apply"),
    (["--sample", "0"], "--sample: only with --apply"),
    (["--apply", "emulated", "--driver-dir", "t"], "--driver-dir is for --apply file"),
    (["--apply", "file", "--packets", "3"], "--packets is for --apply linux or ovs"),
])  # fmt: skip
def test_push_flags_without_their_push_are_refused(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["solve", "--fabric", "tiny", *argv]) == 2
    assert message in capsys.readouterr().err


def test_apply_file_says_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = tmp_path / "t"
    assert main(["solve", "--fabric", "tiny", "--apply", "file", "--driver-dir", str(tables)]) == 0
    assert f"tables: {tables}/ (one file per switch)" in capsys.readouterr().out
    assert any(tables.iterdir())


def test_a_npz_that_is_no_archive_is_named_so(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "r.npz"
    bad.write_text("garbage")
    assert main(["routes", "verify", "--fabric", "small", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a route file" in err and "JSON" not in err


def test_solve_says_which_seed_its_hashed_rows_are_and_lists_what_the_certificate_compared(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rows ride the hashing (a table budget of 2): the table's hashed rows are one seed,
    the certificate a mean over its seeds, and the JSON lists per job the values it
    compared, so the promise can be checked from it (no job's te below its eecmp)."""
    argv = ["solve", "--fabric", "small", "--jobs", "random", "--seed", "3", "--fail",
            "rtsw-p0-r0:ctsw-p0-c1", "--table-budget", "2"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "hash seed 3; the certificate compares each job's mean over seeds 3-6" in text
    assert "(mean over the certificate's 4 hash seeds: rows ride the hashing)" in text
    assert "without a TE path)" in text
    data = _json(capsys, [*argv, "--json"])
    per_job = data["certificate"]["per_job"]
    assert per_job and data["te"]["flows_without_te_path"] > 0
    for job, values in per_job.items():
        assert values["te"] >= values["eecmp"] * (1 - 1e-9), job
        assert "wcmp" in values


def test_solve_names_a_job_asked_more_than_its_nics_line_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A demand_gbps of 800 on 400 Gb/s NICs is accepted (it may be meant), but said: its
    flows are planned at half its demand, what its NICs carry, so the MLU is not its NICs'
    (2 before) and the job reads full rate; the job within line rate is not named."""
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"jobs": [
        {"id": "fast", "hosts": ["host-p0-r0-h0", "host-p0-r1-h0"], "dp": 8, "demand_gbps": 800},
        {"id": "ok", "hosts": ["host-p0-r2-h0", "host-p0-r3-h0"], "dp": 8},
    ]}))  # fmt: skip
    assert main(["solve", "--fabric", "small", "--jobs", str(jobs)]) == 0
    out = capsys.readouterr().out
    assert ("job fast: a NIC of it is asked 2 x its line rate, so its flows are planned at "
            "50.0% of its demand") in out  # fmt: skip
    assert "job ok:" not in out
    data = _json(capsys, ["solve", "--fabric", "small", "--jobs", str(jobs), "--json"])
    assert data["over_line_rate"] == {"fast": 2.0}
    assert data["te"]["mlu"] <= 1.0 and data["bound"]["parts"]["access"] <= 1.0


def test_solve_apply_sonic_takes_the_config_db_as_serve_does(
    redis_server, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    """`--apply sonic` could not work (no way to name the CONFIG_DB): it solved, then
    failed. It now takes --config-db, and without it is refused before the solve."""
    assert main(["solve", "--fabric", "tiny", "--apply", "sonic"]) == 2
    assert "--apply sonic needs --config-db" in capsys.readouterr().err
    url = redis_server(16).url(0).split("?")[0]
    args = ["solve", "--fabric", "tiny", "--apply", "sonic", "--config-db", url, "--json"]
    data = _json(capsys, args)
    assert data["apply"]["push_ok"] and data["apply"]["plan"]["add"] > 0
    again = _json(capsys, args)
    assert again["apply"]["push_ok"] and sum(again["apply"]["plan"].values()) == 0


def test_the_tables_line_names_only_the_tiers_the_fabric_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pod has no aggregation layer: its line read 'atsw 0/unlimited' (an empty tier's
    budget), which an operator reads as ATSWs with no limit."""
    for preset, has_atsws in (("pod", False), ("tiny", True)):
        assert main(["solve", "--fabric", preset]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines()
                    if x.startswith("TE entries:"))  # fmt: skip
        assert "rtsw " in line and "ctsw " in line and ("atsw " in line) == has_atsws


def test_solve_shows_its_steps_while_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # a solve of a large fabric under failures runs a minute: its stages show as they come
    argv = ["solve", "--fabric", "small", "--jobs", "random", "--seed", "3"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert re.search(r"  TE solve \.\.\.\n    placed 640 flow\(s\) by \S+: MLU [\d.]+, "
                     r"bound [\d.]+ \([\d.]+ s\)\n(    .*\n)*  TE solve: [\d.]+ s\n", err), err
    assert main([*argv, "--json"]) == 0
    assert "placed" not in capsys.readouterr().err
