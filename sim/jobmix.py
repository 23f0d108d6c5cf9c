"""Seeded random job mixes that fill a fabric the way a training scheduler would.

`random_jobs` draws job sizes (hosts per job) from a weighted table until `fill` of the
fabric's hosts are taken, then lays the fabric out left to right as a shuffled sequence of
segments: each contiguous job, chunks of idle hosts, and chunks of a pool reserved for the
fragmented jobs. Idle and pool chunks are 1..hosts_per_rack hosts long, so jobs start and end
mid-rack (partial racks). Fragmented jobs (a `fragmentation` share of the multi-host jobs)
take random hosts of the pool, scattered over racks and pods: the case that breaks static
path pinning. Job kinds:

    ring      LLM data parallel: tp = GPUs per host, pp = 1, collectives ("ring",)
    pipeline  LLM 3D: tp = GPUs per host, pp in {2, 4, 8} dividing the hosts, ring + pipeline
    alltoall  ranking / MoE: tp = 1, collectives ("alltoall",), at most ALLTOALL_MAX_HOSTS

Everything comes from numpy's default_rng(seed): the same seed gives the same jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from controller.errors import JobError
from controller.model.fabric import Fabric
from controller.model.jobs import LINE_RATE_GBPS, Job

# Hosts per job -> weight. With 8 GPUs a host: 8..2048 GPUs, weighted to mid sizes; the
# non-powers of two leave partial racks behind.
DEFAULT_SIZES: dict[int, float] = {
    1: 2, 2: 3, 3: 1, 4: 4, 6: 1, 8: 5, 12: 2, 16: 5, 24: 2, 32: 4,
    48: 1, 64: 3, 96: 1, 128: 2, 256: 1,
}  # fmt: skip
DEFAULT_PATTERNS: dict[str, float] = {"ring": 0.7, "pipeline": 0.15, "alltoall": 0.15}
KINDS = ("ring", "pipeline", "alltoall")
ALLTOALL_MAX_HOSTS = 32
PIPELINE_DEPTHS = (2, 4, 8)


def _weights(
    table: Mapping[Any, float], name: str, valid: Callable[[Any], bool]
) -> tuple[list[Any], np.ndarray]:
    """Keys in sorted order and their weights normalised to probabilities."""
    if not isinstance(table, Mapping):
        raise JobError(f"must be a mapping of choice to weight, got {table!r}", name)
    for key in table:
        if not valid(key):
            raise JobError(f"invalid key {key!r}", f"{name}[{key!r}]")
        weight = table[key]
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not (math.isfinite(weight) and weight >= 0)
        ):
            raise JobError(f"weight must be a number >= 0, got {weight!r}", f"{name}[{key!r}]")
    keys = sorted(table)
    w = np.array([float(table[k]) for k in keys])
    if not keys or w.sum() <= 0:
        raise JobError("needs at least one entry with a positive weight", name)
    return keys, w / w.sum()


def _make_job(
    fabric: Fabric, label: str, kind: str, hosts: np.ndarray, rng: np.random.Generator
) -> Job:
    """One job of `kind` on `hosts`, id '<kind>-<label>'; too small a pipeline becomes a ring.
    No demand is given: each NIC's send budget is the line rate of the job's slowest NIC
    (Job.demand; 400G on every Meta-style preset, a dual-ToR NIC of two 200G ports sending
    400G, 200G on each), so on a fabric of mixed NICs each job asks what its own carry."""
    g = fabric.gpus_per_host
    n = int(hosts.size)
    members = tuple(hosts.tolist())
    if kind == "alltoall":
        return Job(f"alltoall-{label}", members, dp=n * g, collectives=("alltoall",))
    depths = [d for d in PIPELINE_DEPTHS if n % d == 0]
    if kind == "pipeline" and depths:
        pp = int(rng.choice(depths))
        return Job(
            f"pipeline-{label}", members, dp=n // pp, pp=pp, tp=g,
            collectives=("ring", "pipeline"),
        )  # fmt: skip
    return Job(f"ring-{label}", members, dp=n, tp=g, collectives=("ring",))


def random_jobs(
    fabric: Fabric,
    seed: int,
    fill: float = 1.0,
    sizes: Mapping[int, float] | None = None,
    patterns: Mapping[str, float] | None = None,
    fragmentation: float = 0.2,
) -> list[Job]:
    """A seeded, realistic job mix over `fill` of the hosts, with partial racks and scattered
    (fragmented) jobs; `sizes` maps hosts per job to weight, `patterns` maps kind to weight."""
    if isinstance(fill, bool) or not isinstance(fill, (int, float)) or not 0 <= fill <= 1:
        raise JobError(f"must be a number in [0, 1], got {fill!r}", "fill")
    if (
        isinstance(fragmentation, bool)
        or not isinstance(fragmentation, (int, float))
        or not 0 <= fragmentation <= 1
    ):
        raise JobError(f"must be a number in [0, 1], got {fragmentation!r}", "fragmentation")
    size_keys, size_p = _weights(
        DEFAULT_SIZES if sizes is None else sizes, "sizes",
        lambda k: isinstance(k, int) and not isinstance(k, bool) and k >= 1,
    )  # fmt: skip
    kind_keys, kind_p = _weights(
        DEFAULT_PATTERNS if patterns is None else patterns, "patterns", lambda k: k in KINDS
    )
    rng = np.random.default_rng(seed)
    usable = fabric.usable_hosts  # every host of a preset; an inventory's cabled ones
    total = int(usable.size)
    target = int(round(fill * total))

    # 1. Job kinds and sizes until the target is met (the last job is cut to fit).
    kinds: list[str] = []
    counts: list[int] = []
    left = target
    while left > 0:
        kind = str(kind_keys[rng.choice(len(kind_keys), p=kind_p)])
        n = min(int(size_keys[rng.choice(len(size_keys), p=size_p)]), left)
        if kind == "alltoall":
            n = min(n, ALLTOALL_MAX_HOSTS)
        kinds.append(kind)
        counts.append(n)
        left -= n
    fragmented = [n > 1 and bool(rng.random() < fragmentation) for n in counts]

    # 2. Segments: contiguous jobs, idle chunks and fragment-pool chunks, shuffled.
    def chunks(count: int, tag: int) -> list[tuple[int, int]]:
        out = []
        while count > 0:
            size = min(int(rng.integers(1, fabric.hosts_per_rack + 1)), count)
            out.append((tag, size))
            count -= size
        return out

    pool_size = sum(n for n, f in zip(counts, fragmented, strict=True) if f)
    segments = [(k, n) for k, (n, f) in enumerate(zip(counts, fragmented, strict=True)) if not f]
    segments += chunks(total - target, -1) + chunks(pool_size, -2)
    order = rng.permutation(len(segments))
    assigned: dict[int, np.ndarray] = {}
    pool: list[np.ndarray] = []
    start = 0
    for index in order:
        tag, size = segments[index]
        block = usable[start : start + size].astype(np.int64)
        if tag >= 0:
            assigned[tag] = block
        elif tag == -2:
            pool.append(block)
        start += size

    # 3. Fragmented jobs take random hosts of the pool, in host order.
    if pool:
        scattered = rng.permutation(np.concatenate(pool))
        at = 0
        for k, (n, f) in enumerate(zip(counts, fragmented, strict=True)):
            if f:
                assigned[k] = np.sort(scattered[at : at + n])
                at += n

    width = len(str(max(len(counts) - 1, 0)))
    return [
        _make_job(fabric, f"{k:0{width}d}", kinds[k], assigned[k], rng) for k in range(len(counts))
    ]


def ring_jobs(
    fabric: Fabric,
    hosts_per_job: int,
    seed: int | None = None,
    channels: int = 1,
    demand_gbps: float = LINE_RATE_GBPS,
) -> list[Job]:
    """The fabric packed full of ring all-reduce jobs of `hosts_per_job` hosts (the last may be
    smaller): contiguous in host order, or with `seed` hosts dealt out at random (scattered)."""
    if isinstance(hosts_per_job, bool) or not isinstance(hosts_per_job, int) or hosts_per_job < 1:
        raise JobError(f"must be a positive integer, got {hosts_per_job!r}", "hosts_per_job")
    hosts = fabric.usable_hosts.astype(np.int64)
    if seed is not None:
        hosts = np.random.default_rng(seed).permutation(hosts)
    g = fabric.gpus_per_host
    count = -(-hosts.size // hosts_per_job)
    width = len(str(max(count - 1, 0)))
    jobs = []
    for k in range(count):
        block = hosts[k * hosts_per_job : (k + 1) * hosts_per_job]
        if seed is not None:
            block = np.sort(block)
        jobs.append(
            Job(
                f"ring-{k:0{width}d}", tuple(block.tolist()), dp=int(block.size), tp=g,
                collectives=("ring",), channels=channels, demand_gbps=demand_gbps,
            )
        )  # fmt: skip
    return jobs
