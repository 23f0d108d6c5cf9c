"""Placement files: which hosts each job owns and how it runs, loaded all or nothing.

    {"jobs": [
      {"id": "llm-1",                                  # unique, non-empty
       "hosts": ["host-p0-r0-h0", "host-p0-r0-h1"],    # host names, in rank order
       "dp": 2, "pp": 1, "tp": 8,                       # dp*pp*tp = hosts x GPUs per host
       "collectives": ["ring"],                         # ring | alltoall | pipeline
       "channels": 1, "demand_gbps": 400,               # optional
       "gpus_per_host": 8,                              # optional, default: every NIC
       "priority": 0},                                  # optional; higher is raised first
      ...]}

Required keys: id and hosts. dp defaults to the GPU count over pp*tp; pp, tp, collectives,
channels, demand_gbps and priority (an integer, default 0; see docs/objective.md) default as
in `controller.model.jobs.Job`. Unknown keys are rejected. A host
may belong to one job only (a job uses GPUs 0..g-1 of each host). Every error names the field
path at fault, e.g. "jobs[2].hosts[5]: unknown host 'host-p9-r0-h0'". JSON, or YAML by suffix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from controller.errors import FabricError, JobError
from controller.model import validation
from controller.model.documents import read_document
from controller.model.fabric import Fabric
from controller.model.jobs import PATTERNS, Job, check_job, check_priority

TOP_KEYS = frozenset({"jobs"})
JOB_KEYS = (
    "id", "hosts", "dp", "pp", "tp", "collectives", "channels", "demand_gbps", "gpus_per_host",
    "priority",
)  # fmt: skip
REQUIRED = ("id", "hosts")
INT_KEYS = ("dp", "pp", "tp", "channels", "gpus_per_host")


def _fail(source: str, path: str, message: str) -> JobError:
    err = JobError(f"{source}: {path}: {message}" if source else f"{path}: {message}")
    err.field, err.detail = path, message
    return err


def check_job_entry(entry: Any, path: str = "job") -> dict[str, Any]:
    """The structure of one job entry, checked without a fabric: keys, types and bounds
    (controller.model.validation). Returns the entry as a dict; errors name `path`."""
    try:
        doc = validation.mapping(entry, path, JobError)
    except JobError as err:
        raise _fail("", path, f"expected a mapping, got {type(entry).__name__}") from err
    validation.keys(doc, path, JOB_KEYS, REQUIRED, JobError)
    validation.text(doc["id"], f"{path}.id", JobError)
    names = doc["hosts"]
    if isinstance(names, str | bytes | Mapping) or not isinstance(names, Sequence) or not names:
        raise _fail("", f"{path}.hosts", "must be a non-empty list of host names")
    validation.listing(names, f"{path}.hosts", validation.MAX_GPUS, JobError)
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str):
            got = validation.shown(name)
            raise _fail("", f"{path}.hosts[{i}]", f"host name must be a string, got {got}")
        validation.text(name, f"{path}.hosts[{i}]", JobError)
        if name in first:  # as parse_job says it, before a fabric is at hand
            raise _fail("", f"{path}.hosts[{i}]",
                        f"host {name!r} is listed twice (also hosts[{first[name]}])")  # fmt: skip
        first[name] = i
    for key in INT_KEYS:
        if doc.get(key) is not None:
            hi = validation.MAX_CHANNELS if key == "channels" else validation.MAX_GPUS
            validation.integer(doc[key], f"{path}.{key}", 1, hi, JobError)
    if "demand_gbps" in doc:
        validation.gbps(doc["demand_gbps"], f"{path}.demand_gbps", JobError)
    if "priority" in doc:
        check_priority(doc["priority"], doc["id"], f"{path}.priority")
    collectives = doc.get("collectives", ["ring"])
    if isinstance(collectives, str | bytes | Mapping) or not isinstance(collectives, Sequence):
        raise _fail(
            "", f"{path}.collectives", f"must be a list, got {validation.shown(collectives)}"
        )
    validation.listing(collectives, f"{path}.collectives", len(PATTERNS), JobError)
    for i, name in enumerate(collectives):
        validation.text(name, f"{path}.collectives[{i}]", JobError)
    return dict(doc)


def parse_job(fabric: Fabric, entry: Any, path: str = "job") -> Job:
    """One job entry, validated against the fabric; every error names `path` and the field
    below it exactly (e.g. 'job.hosts[0]: unknown host ...')."""
    doc = check_job_entry(entry, path)
    names = doc["hosts"]
    hosts: list[int] = []
    first: dict[int, int] = {}
    for i, name in enumerate(names):
        try:
            node = fabric.node_by_name(name)
        except FabricError:
            raise _fail(
                "", f"{path}.hosts[{i}]", f"unknown host {name!r} in fabric {fabric.name!r}"
            ) from None
        if fabric.node_kind(node) != "host":
            kind = fabric.node_kind(node)
            raise _fail("", f"{path}.hosts[{i}]", f"{name!r} is a {kind}, not a host")
        hosts.append(fabric.host_by_name(name))
        if hosts[-1] in first:
            also = first[hosts[-1]]
            raise _fail(
                "", f"{path}.hosts[{i}]", f"host {name!r} is listed twice (also hosts[{also}])"
            )
        first[hosts[-1]] = i
    kwargs: dict[str, Any] = {
        k: doc[k]
        for k in ("pp", "tp", "channels", "demand_gbps", "priority")
        if doc.get(k) is not None
    }
    kwargs["collectives"] = tuple(doc.get("collectives", ["ring"]))
    kwargs["gpus_per_host"] = doc.get("gpus_per_host")
    dp = doc.get("dp")
    if dp is None:
        g = kwargs["gpus_per_host"] or fabric.gpus_per_host
        pp, tp = kwargs.get("pp", 1), kwargs.get("tp", 1)
        if (len(hosts) * g) % (pp * tp):
            raise _fail(
                "",
                f"{path}.dp",
                f"omitted, and the job's {len(hosts) * g} GPUs do not divide by pp*tp = {pp * tp}",
            )
        dp = max(len(hosts) * g // (pp * tp), 1)
    try:
        job = Job(doc["id"], tuple(hosts), dp, **kwargs)
        check_job(fabric, job)
    except JobError as err:
        where = f"{path}.{err.field}" if err.field else path
        raise _fail("", where, err.detail) from None
    return job


def parse_placement(fabric: Fabric, data: Any, source: str = "<placement>") -> list[Job]:
    """Validate a decoded placement document against `fabric`; all jobs or an error."""
    if not isinstance(data, Mapping):
        raise JobError(f"{source}: expected a mapping with a 'jobs' list at the top level")
    try:
        validation.keys(data, "", sorted(TOP_KEYS), err=JobError)
    except JobError as err:
        raise JobError(f"{source}: {err.detail}") from None
    entries = data.get("jobs")
    if entries is None and "jobs" not in data:
        raise _fail(source, "jobs", "missing: the file needs a 'jobs' list at the top level")
    if isinstance(entries, str | bytes | Mapping) or not isinstance(entries, Sequence):
        raise _fail(source, "jobs", f"must be a list of jobs, got {validation.shown(entries)}")
    jobs: list[Job] = []
    seen_ids: dict[str, int] = {}
    owner: dict[int, tuple[str, int, int]] = {}  # host -> (job id, job index, position)
    problems: list[tuple[str, str]] = []  # (field, what is wrong): every job is checked
    for k, entry in enumerate(entries):
        try:
            job = parse_job(fabric, entry, f"jobs[{k}]")
        except JobError as err:
            problems.append((err.field or "jobs", err.detail))
            continue
        if job.id in seen_ids:
            problems.append(
                (f"jobs[{k}].id", f"duplicate job id {job.id!r} (also jobs[{seen_ids[job.id]}])")
            )
            continue
        seen_ids[job.id] = k
        for i, host in enumerate(job.hosts):
            if host in owner:
                other_id, other, at = owner[host]
                problems.append((
                    f"jobs[{k}].hosts[{i}]",
                    f"host {fabric.host_name(host)!r} is already in job {other_id!r} "
                    f"(jobs[{other}].hosts[{at}]): a job takes whole hosts, one job a host",
                ))  # fmt: skip
                break
            owner[host] = (job.id, k, i)
        jobs.append(job)
    if problems:
        raise all_problems(source, problems)
    return jobs


def all_problems(source: str, problems: Sequence[tuple[str, str]]) -> JobError:
    """One JobError for every (field, problem) of a file, up to validation.MAX_REPORTED, one
    a line; its `field` is the first one's, its message starts as a single problem's would."""
    lines = validation.report([f"{field}: {detail}" for field, detail in problems])
    field, _ = problems[0]
    return _fail(source, field, lines.removeprefix(f"{field}: "))


def load_placement(fabric: Fabric, path: str | Path) -> list[Job]:
    """Read and validate a placement file (.json, or .yaml/.yml) against `fabric`."""
    path = Path(path)
    kind = "yaml" if path.suffix in (".yaml", ".yml") else "json"
    data = read_document(path, JobError, "placement file", kind)
    return parse_placement(fabric, data, str(path))


JOB_MIXES_GROUP = "fabric_te.job_mixes"


def job_mixes() -> tuple[str, ...]:
    """Names of the job-mix generators registered under the entry-point group."""
    return tuple(sorted({ep.name for ep in entry_points(group=JOB_MIXES_GROUP)}))


def load_jobs(fabric: Fabric, spec: str, *, seed: int, fill: float | None = None,
              default_fill: float = 1.0) -> list[Job]:  # fmt: skip
    """Jobs from a command line: 'none', a registered job mix by name (called as
    ``mix(fabric, seed=seed, fill=fill)``, `default_fill` where `fill` is None), or a
    placement file. `fill` is a mix's: given with a file or 'none' it is refused (it would
    be ignored)."""
    mix = [ep for ep in entry_points(group=JOB_MIXES_GROUP) if ep.name == spec]
    if mix:
        return list(mix[0].load()(fabric, seed=seed,
                                  fill=default_fill if fill is None else fill))  # fmt: skip
    if fill is not None:
        raise JobError(f"--fill {fill:g}: the share of hosts a job mix takes "
                         f"({', '.join(job_mixes())}), not used with --jobs {spec}")  # fmt: skip
    if spec == "none":
        return []
    return load_placement(fabric, spec)


def dump_placement(fabric: Fabric, jobs: Sequence[Job]) -> dict[str, Any]:
    """The placement document for `jobs` (host names, every size explicit); parses back equal."""
    out = []
    for job in jobs:
        entry: dict[str, Any] = {
            "id": job.id,
            "hosts": [fabric.host_name(h) for h in job.hosts],
            "dp": job.dp,
            "pp": job.pp,
            "tp": job.tp,
            "collectives": list(job.collectives),
            "channels": job.channels,
        }
        if job.demand_gbps is not None:
            entry["demand_gbps"] = job.demand_gbps
        if job.gpus_per_host is not None:
            entry["gpus_per_host"] = job.gpus_per_host
        if job.priority:
            entry["priority"] = job.priority
        out.append(entry)
    return {"jobs": out}
