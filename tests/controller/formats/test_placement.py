"""Placement files: round trips, defaults, and one test per error message."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from controller.errors import JobError
from controller.formats.placement import dump_placement, load_jobs, load_placement, parse_placement
from controller.model.fabric import Fabric
from controller.model.jobs import Job
from sim.jobmix import random_jobs

GOOD = {
    "jobs": [
        {
            "id": "llm-1",
            "hosts": ["host-p0-r0-h0", "host-p0-r0-h1", "host-p0-r1-h0", "host-p0-r1-h1"],
            "dp": 4,
            "pp": 1,
            "tp": 2,
            "collectives": ["ring"],
            "channels": 2,
            "demand_gbps": 400,
        },
        {"id": "rank-1", "hosts": ["host-p1-r0-h0", "host-p1-r1-h1"], "collectives": ["alltoall"]},
        {"id": "small", "hosts": ["host-p1-r0-h1"], "gpus_per_host": 1, "dp": 1},
    ]
}


def test_parse_good_placement(tiny: Fabric) -> None:
    jobs = parse_placement(tiny, GOOD)
    assert jobs[0] == Job("llm-1", (0, 1, 2, 3), dp=4, tp=2, channels=2, demand_gbps=400)
    assert jobs[1] == Job("rank-1", (4, 7), dp=4, collectives=("alltoall",))  # dp inferred
    assert jobs[2] == Job("small", (5,), dp=1, gpus_per_host=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dump_parse_round_trip(small: Fabric, seed: int) -> None:
    jobs = random_jobs(small, seed, fill=0.8)
    doc = dump_placement(small, jobs)
    assert parse_placement(small, json.loads(json.dumps(doc))) == jobs
    assert dump_placement(small, parse_placement(small, doc)) == doc


def test_load_json_and_yaml(tiny: Fabric, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(GOOD))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(GOOD))
    expected = parse_placement(tiny, GOOD)
    assert load_placement(tiny, tmp_path / "p.json") == expected
    assert load_placement(tiny, str(tmp_path / "p.yaml")) == expected


def test_load_errors_name_the_file(tiny: Fabric, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(JobError, match=r"bad.json: not valid JSON"):
        load_placement(tiny, bad)
    with pytest.raises(JobError, match=r"missing.json: cannot read placement file"):
        load_placement(tiny, tmp_path / "missing.json")
    doc = copy.deepcopy(GOOD)
    doc["jobs"][1]["hosts"][1] = "host-p9-r0-h0"
    (tmp_path / "p.json").write_text(json.dumps(doc))
    with pytest.raises(JobError, match=r"p.json: jobs\[1\].hosts\[1\]: unknown host"):
        load_placement(tiny, tmp_path / "p.json")


def edit(path: str, value: object):  # type: ignore[no-untyped-def]
    """GOOD with the value at 'jobs.<k>.<key>[.<i>]' replaced (or deleted when DELETE)."""
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: object = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]  # type: ignore[index]
    key = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]  # type: ignore[union-attr, arg-type]
    else:
        node[key] = value  # type: ignore[index]
    return doc


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("jobs.1.hosts.1", "host-p9-r0-h0", "jobs[1].hosts[1]: unknown host 'host-p9-r0-h0'"),
        ("jobs.1.hosts.0", "rtsw-p0-r0", "jobs[1].hosts[0]: 'rtsw-p0-r0' is a rtsw, not a host"),
        ("jobs.1.hosts.0", 3, "jobs[1].hosts[0]: host name must be a string, got 3"),
        ("jobs.1.hosts", [], "jobs[1].hosts: must be a non-empty list of host names"),
        ("jobs.1.hosts", "host-p1-r0-h0", "jobs[1].hosts: must be a non-empty list"),
        (
            "jobs.0.hosts.2",
            "host-p0-r0-h0",
            "jobs[0].hosts[2]: host 'host-p0-r0-h0' is listed twice (also hosts[0])",
        ),
        (
            "jobs.2.hosts.0",
            "host-p0-r1-h0",
            "jobs[2].hosts[0]: host 'host-p0-r1-h0' is already in job 'llm-1' "
            "(jobs[0].hosts[2])",
        ),
        ("jobs.2.id", "llm-1", "jobs[2].id: duplicate job id 'llm-1' (also jobs[0])"),
        ("jobs.2.id", "", "jobs[2].id: must not be empty"),
        ("jobs.1.id", DELETE, "jobs[1]: missing required key 'id'"),
        ("jobs.1.hosts", DELETE, "jobs[1]: missing required key 'hosts'"),
        ("jobs.0.gpus", 8, "jobs[0]: unknown key(s) gpus; allowed: id, hosts, dp"),
        ("jobs.0.dp", 3, "jobs[0].dp*pp*tp: 3*1*2 = 6 must equal the job's GPU count 4 hosts"),
        ("jobs.0.dp", 2.0, "jobs[0].dp: must be an integer, got 2.0"),
        ("jobs.0.pp", True, "jobs[0].pp: must be an integer, got True"),
        ("jobs.0.pp", 0, "jobs[0].pp: 0 is not within [1, 262144]"),
        ("jobs.0.tp", 4, "jobs[0].tp: tensor parallelism 4 must divide the 2 GPUs per host"),
        ("jobs.0.channels", 0, "jobs[0].channels: 0 is not within [1, 64]"),
        ("jobs.0.demand_gbps", -5, "jobs[0].demand_gbps: -5.0 is not within [0.001, 100000]"),
        ("jobs.0.demand_gbps", "fast", "jobs[0].demand_gbps: must be a number, got 'fast'"),
        (
            "jobs.0.collectives",
            ["ring", "bcast"],
            "jobs[0].collectives[1]: unknown pattern 'bcast'",
        ),
        ("jobs.0.collectives", "ring", "jobs[0].collectives: must be a list, got 'ring'"),
        ("jobs.0.collectives", [], "jobs[0].collectives: name at least one pattern"),
        ("jobs.2.gpus_per_host", 4, "jobs[2].gpus_per_host: 4 exceeds the 2 GPUs/NICs per host"),
        ("jobs.1.tp", 3, "jobs[1].dp: omitted, and the job's 4 GPUs do not divide by pp*tp = 3"),
        ("jobs.1", [1, 2], "jobs[1]: expected a mapping, got list"),
        ("jobs", {"a": 1}, "jobs: must be a list of jobs"),
        ("jobs", DELETE, "jobs: missing: the file needs a 'jobs' list at the top level"),
        ("extra", 1, "<placement>: unknown key(s) extra; allowed: jobs"),
    ],
)
def test_each_error_names_the_field(tiny: Fabric, path: str, value: object, message: str) -> None:
    doc = edit(path, value)
    with pytest.raises(JobError) as info:
        parse_placement(tiny, doc)
    text = str(info.value)
    assert text.startswith("<placement>: ")
    assert message in text, text


def test_error_in_the_last_job_rejects_everything(tiny: Fabric) -> None:
    doc = edit("jobs.2.hosts.0", "host-p9-r9-h9")
    with pytest.raises(JobError) as info:
        parse_placement(tiny, doc, "cluster.json")
    assert str(info.value).startswith("cluster.json: jobs[2].hosts[0]: unknown host")
    assert info.value.field == "jobs[2].hosts[0]"


def test_top_level_must_be_a_mapping(tiny: Fabric) -> None:
    with pytest.raises(JobError, match="expected a mapping with a 'jobs' list"):
        parse_placement(tiny, [1, 2])


def test_empty_jobs_list_is_an_empty_placement(tiny: Fabric) -> None:
    assert parse_placement(tiny, {"jobs": []}) == []
    assert dump_placement(tiny, []) == {"jobs": []}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("jobs.0.channels", 2**32 - 1, r"jobs[0].channels: 4294967295 is not within [1, 64]"),
        ("jobs.0.demand_gbps", 1e308, "jobs[0].demand_gbps: 1e+308 is not within"),
        ("jobs.0.demand_gbps", float("nan"), "jobs[0].demand_gbps: must be a finite number"),
        ("jobs.0.demand_gbps", 5e-324, "jobs[0].demand_gbps: 5e-324 is not within"),
        ("jobs.0.id", 123, "jobs[0].id: must be a string, got 123"),
        ("jobs.0.dp", True, "jobs[0].dp: must be an integer, got True"),
        ("jobs.0.dp", 10**30, "jobs[0].dp: 1000000000000000000000000000000 is not within"),
        ("jobs.0.collectives", ["ring", 7], "jobs[0].collectives[1]: must be a string, got 7"),
        ("jobs.0.hosts", {"host-p0-r0-h0": 1}, "jobs[0].hosts: must be a non-empty list"),
    ],
)
def test_bounds_and_strict_types(tiny: Fabric, path: str, value: object, message: str) -> None:
    with pytest.raises(JobError) as info:
        parse_placement(tiny, edit(path, value), "p.json")
    assert str(info.value).startswith(f"p.json: {message}"), info.value


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("p.json", '{"jobs": [{"id": "a", "id": "b", "hosts": ["host-p0-r0-h0"]}]}',
         "duplicate key 'id'"),
        ("p.yaml", "jobs:\n- id: a\n  hosts: [host-p0-r0-h0]\n  hosts: [host-p0-r0-h1]\n",
         "line 4: duplicate key 'hosts'"),
        ("p.yaml", "jobs:\n- id: a\n  hosts: host-p0-r0-h0\n", "jobs[0].hosts: must be a"),
        ("p.json", '{"jobs": [{"id": "a", "hosts": ["host-p0-r0-h0"], "demand_gbps": NaN}]}',
         "jobs[0].demand_gbps: must be a finite number"),
    ],
)  # fmt: skip
def test_files_name_the_file(
    tiny: Fabric, tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(JobError) as info:
        load_placement(tiny, path)
    assert str(info.value).startswith(f"{path}: "), info.value
    assert message in str(info.value)


def test_binary_placement_file_is_not_utf8(tiny: Fabric, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b'{"jobs": [\x00\xc3\x28]}')
    with pytest.raises(JobError, match=r"p.json: not UTF-8 text \(byte 11 is 0xc3\)"):
        load_placement(tiny, path)


def test_fill_is_refused_where_it_would_be_ignored(tiny: Fabric, tmp_path: Path) -> None:
    """`--fill` sizes a job mix; with a placement file (or 'none') it was silently ignored."""
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(dump_placement(tiny, random_jobs(tiny, seed=1))))
    assert load_jobs(tiny, str(path), seed=1) == load_placement(tiny, str(path))
    for spec in (str(path), "none"):
        with pytest.raises(JobError, match="--fill 0.5: the share of hosts a job mix takes"):
            load_jobs(tiny, spec, seed=1, fill=0.5)
    # a mix: the caller's default where --fill is not given
    mixed = load_jobs(tiny, "random", seed=1, default_fill=0.5)
    assert mixed == random_jobs(tiny, seed=1, fill=0.5)


def test_a_host_listed_twice_is_refused_before_a_fabric_is_at_hand() -> None:
    """`tectl job put` checks its file with no fabric (check_job_entry) before sending it;
    a host given twice in a job passed that check and only the server refused it."""
    from controller.errors import JobError
    from controller.formats.placement import check_job_entry

    with pytest.raises(JobError, match=r"jobs\[0\]\.hosts\[2\].*'h1' is listed twice "
                                       r"\(also hosts\[0\]\)"):  # fmt: skip
        check_job_entry({"id": "a", "hosts": ["h1", "h2", "h1"]}, "jobs[0]")
    assert check_job_entry({"id": "a", "hosts": ["h1", "h2"]})["hosts"] == ["h1", "h2"]
