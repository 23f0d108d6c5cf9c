"""One count vocabulary (controller.model.counts, docs/operators.md "Counts"): `tectl solve`
text and JSON and `tectl routes verify` of the file it wrote say the same jobs, flows, QP
buckets, subflows and entries; a job with no flows (its GPUs in one host) is counted among
the jobs and named, everywhere the same way."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.formats.route_file import read_routes
from controller.model.clos import PRESETS, build


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("fabric", ["small", "pod"])
def test_solve_text_json_and_verify_agree_on_every_count(
    fabric: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routes = tmp_path / "routes.npz"
    solve = ["solve", "--fabric", fabric, "--jobs", "random", "--seed", "1"]
    code, out = _run(capsys, *solve, "--json", "--out", str(routes))
    assert code == 0
    doc = json.loads(out)
    counts = doc["counts"]
    code, text = _run(capsys, *solve)
    assert code == 0
    code, verified = _run(capsys, "routes", "verify", str(routes), "--fabric", fabric, "--json")
    assert code == 0
    verified = json.loads(verified)

    # the route file itself, counted by hand
    assignment, entries = read_routes(routes, build(PRESETS[fabric]))
    qp = assignment.flows.qp
    assert counts["subflows"] == len(assignment.flows)
    assert counts["flows"] == int((qp < 0).sum() + (qp == 0).sum())
    assert counts["qp_buckets"] == int((qp >= 0).sum())
    assert counts["te_entries"] == len(entries) == doc["routes"]["entries"]

    # JSON: the inputs line, the counts, the TE metrics, the comparison rows, the
    # certificate, and routes verify of the file all agree
    assert verified["counts"] == counts
    assert doc["te"]["flows"] == counts["flows"] and doc["te"]["subflows"] == counts["subflows"]
    te_row = next(r for r in doc["rows"] if r["method"] == "fabric-te")
    assert te_row["flows"] == counts["flows"] and te_row["subflows"] == counts["subflows"]
    assert len(te_row["job_busbw_fraction"]) == counts["jobs_with_flows"]
    assert doc["certificate"]["jobs"] == counts["jobs_with_flows"]
    assert counts["jobs"] == counts["jobs_with_flows"] + len(counts["jobs_without_flows"])
    assert not set(counts["jobs_without_flows"]) & set(te_row["job_busbw_fraction"])

    # text: the same numbers in the same words
    head = text.splitlines()[0]
    jobs = f"{counts['jobs']:,} job" + ("" if counts["jobs"] == 1 else "s")
    assert jobs in head and f"{counts['flows']:,} flows" in head
    if counts["jobs_without_flows"]:  # said, and named, where the jobs are counted
        assert f"({counts['jobs_with_flows']:,} with flows; " in head
        assert all(job in head for job in counts["jobs_without_flows"])
    line = next(x for x in text.splitlines() if x.startswith("counts: "))
    assert f"{counts['flows']:,} flows" in line and f"{counts['te_entries']:,} TE entries" in line
    if counts["split_flows"]:
        assert f"{counts['qp_buckets']:,} QP buckets: {counts['subflows']:,} subflows" in line
    cert = next(x for x in text.splitlines() if x.startswith("certificate: "))
    assert re.search(rf" of {counts['jobs_with_flows']:,} jobs with flows compared", cert)
    summary = verified["summary"]
    assert summary.startswith(f"{counts['flows']:,} flows") and "subflows looped" in summary
    if fabric == "pod":  # the case: a 1-host job, and flows split into QP buckets
        assert counts["jobs_without_flows"] and counts["split_flows"]
        assert f"{counts['subflows']:,} subflows)" in summary
