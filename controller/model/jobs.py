"""Training jobs and the flows they put on the network.

A `Job` owns whole hosts (global host ids, in rank order) and uses GPUs/NICs 0..g-1 of each,
g = `gpus_per_host` (default: every GPU of the host, `Fabric.gpus_per_host`). Its
G = len(hosts) * g GPUs run 3D parallelism with dp * pp * tp = G, ranks laid out
Megatron-style (tp fastest, pp slowest):

    rank r lives on host hosts[r // g], GPU/NIC r % g
    pipeline stage s = ranks [s*S, (s+1)*S), S = dp*tp GPUs per stage

Tensor parallelism must divide g, so it never leaves a host (NVLink): it makes no flows.
A stage must fill whole hosts (S a multiple of g) or share one host with others (S divides g).
All traffic is rail-aligned as in NCCL: NIC i of one host talks to NIC i of another. A NIC of
P ports (`Fabric.ports_per_nic`; the model's NICs P*i .. P*i+P-1 of the host) splits each of
its flows evenly over its ports, port p to port p, so every port carries 1/P of what the NIC
sends (a dual-port NIC's two planes).
Each pattern in `collectives` gets an equal share p = demand_gbps / len(collectives) of every
NIC's send budget, so no NIC of a job ever sends more than `demand_gbps` in total (none
given: the line rate of the job's slowest NIC, so a job on 200G or 800G NICs asks what its
NICs carry):

- "ring": all-reduce over the hosts of each stage (n hosts). Channel c is a ring with offset
  o_c taken from +1, -1, +2, -2, ... (mod n, distinct and non-zero while they last): NIC i of
  the k-th host sends p/C to NIC i of host (k + o_c) mod n. With C=1 (default) every NIC has
  exactly one outgoing and one incoming flow at p; extra channels spread to other neighbours
  the way a bidirectional ring does. Channels that land on the same host are merged.
- "alltoall": within each stage, every NIC sends p/(n-1) to the same-rail NIC of each of the
  other n-1 hosts (n(n-1)g flows: keep such jobs modest).
- "pipeline": rank r of stage s sends activations to rank r+S of stage s+1 and receives
  gradients back, p/2 each way. When the two ranks share a host it is NVLink traffic; when
  they sit on different rails the sender uses the receiver's rail (PXN), so it stays aligned.

Flows are keyed (source NIC, destination host) as the TE keys its entries; identical keys are
summed, so every key is unique in `job_flows` output, which is sorted by that key.

`priority` (an integer, default 0, higher is more important) is the job's class in the
solver's job-level objective (controller.solver.job_objective, docs/objective.md): the worst
job of the highest class is raised first. It travels with the flows (FlowSet.job_priority).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from controller.errors import JobError
from controller.model import validation
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet

PATTERNS = ("ring", "alltoall", "pipeline")
LINE_RATE_GBPS = 400.0


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Job:
    """A training job: its hosts in rank order, 3D parallelism and collective patterns."""

    id: str
    hosts: tuple[int, ...]
    dp: int
    pp: int = 1
    tp: int = 1
    gpus_per_host: int | None = None  # None: every NIC of the host
    collectives: tuple[str, ...] = ("ring",)
    channels: int = 1
    demand_gbps: float | None = None  # per-NIC send budget, shared by the collectives;
    # None: the line rate of the job's slowest NIC (Job.demand)
    priority: int = 0  # class in the job-level objective: higher is raised first

    def __post_init__(self) -> None:
        validation.text(self.id, "id", JobError)
        object.__setattr__(self, "priority", check_priority(self.priority, self.id))
        if isinstance(self.hosts, str | bytes) or not isinstance(self.hosts, Sequence | np.ndarray):
            got = validation.shown(self.hosts)
            raise JobError(f"must be a sequence of host ids, got {got}", "hosts")
        if len(self.hosts) == 0:
            raise JobError("a job needs at least one host", "hosts")
        if len(self.hosts) > validation.MAX_GPUS:
            raise JobError(f"{len(self.hosts)} hosts; at most {validation.MAX_GPUS}", "hosts")
        for i, host in enumerate(self.hosts):
            if not _is_int(host):
                got = validation.shown(host)
                raise JobError(f"host id must be an integer, got {got}", f"hosts[{i}]")
        object.__setattr__(self, "hosts", tuple(int(h) for h in self.hosts))
        for name in ("dp", "pp", "tp"):
            value = validation.integer(getattr(self, name), name, 1, validation.MAX_GPUS, JobError)
            object.__setattr__(self, name, value)
        channels = validation.integer(
            self.channels, "channels", 1, validation.MAX_CHANNELS, JobError
        )
        object.__setattr__(self, "channels", channels)
        if self.gpus_per_host is not None:
            _, most = validation.DIMENSION_CAPS["nics_per_host"]
            gpus = validation.integer(self.gpus_per_host, "gpus_per_host", 1, most, JobError)
            object.__setattr__(self, "gpus_per_host", gpus)
        if isinstance(self.collectives, str) or not isinstance(self.collectives, Sequence):
            raise JobError(
                f"must be a list of pattern names, got {validation.shown(self.collectives)}",
                "collectives",
            )
        if not self.collectives:
            raise JobError(f"name at least one pattern of {', '.join(PATTERNS)}", "collectives")
        for i, name in enumerate(self.collectives):
            if name not in PATTERNS:
                raise JobError(
                    f"unknown pattern {validation.shown(name)}; known: {', '.join(PATTERNS)}",
                    f"collectives[{i}]",
                )
            if name in self.collectives[:i]:
                raise JobError(
                    f"pattern {validation.shown(name)} is listed twice", f"collectives[{i}]"
                )
        object.__setattr__(self, "collectives", tuple(self.collectives))
        if self.demand_gbps is not None:
            demand = validation.gbps(self.demand_gbps, "demand_gbps", JobError)
            object.__setattr__(self, "demand_gbps", demand)
        seen: dict[int, int] = {}
        for i, host in enumerate(self.hosts):
            if host in seen:
                raise JobError(f"duplicate host {host} (also hosts[{seen[host]}])", f"hosts[{i}]")
            seen[host] = i

    def demand(self, fabric: Fabric) -> float:
        """Each NIC's send budget in Gbps: `demand_gbps`, else `line_rate`."""
        return self.line_rate(fabric) if self.demand_gbps is None else self.demand_gbps

    def line_rate(self, fabric: Fabric) -> float:
        """The line rate of the job's slowest NIC in Gbps (its ports' access links as
        built, the GPUs it uses)."""
        P = fabric.ports_per_nic
        ports = (np.asarray(self.hosts, np.int64)[:, None] * fabric.nics_per_host
                 + np.arange(self.gpus(fabric) * P)[None, :]).reshape(-1)  # fmt: skip
        line = fabric.capacity[fabric.up(ports)]
        return float(line.min()) * P

    def gpus(self, fabric: Fabric) -> int:
        """GPUs used on each host of `fabric` (resolves the `gpus_per_host=None` default)."""
        return fabric.gpus_per_host if self.gpus_per_host is None else self.gpus_per_host

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)


def check_priority(value: object, job_id: str, field: str = "priority") -> int:
    """A job priority: an integer (not a bool) within [-MAX_PRIORITY, MAX_PRIORITY]; the
    error names the job and `field`."""
    top = validation.MAX_PRIORITY
    if not _is_int(value):
        got = validation.shown(value)
        raise JobError(f"job {job_id!r}: must be an integer, got {got}", field)
    number = int(value)  # type: ignore[call-overload]
    if not -top <= number <= top:
        raise JobError(f"job {job_id!r}: {number} is not within [{-top}, {top}]", field)
    return number


def check_job(fabric: Fabric, job: Job) -> None:
    """Raise JobError (with `field`) if `job` does not fit `fabric` or its sizes clash."""
    hosts = np.asarray(job.hosts, dtype=np.int64)
    bad = np.flatnonzero((hosts < 0) | (hosts >= fabric.num_hosts))
    if bad.size:
        i = int(bad[0])
        raise JobError(
            f"host {job.hosts[i]} out of range [0, {fabric.num_hosts}) of fabric {fabric.name!r}",
            f"hosts[{i}]",
        )
    g = job.gpus(fabric)
    if g > fabric.gpus_per_host:
        raise JobError(
            f"{g} exceeds the {fabric.gpus_per_host} GPUs/NICs per host of fabric {fabric.name!r}",
            "gpus_per_host",
        )
    if g % job.tp:
        raise JobError(
            f"tensor parallelism {job.tp} must divide the {g} GPUs per host "
            "(tensor parallel stays inside a host)",
            "tp",
        )
    total = job.num_hosts * g
    if job.dp * job.pp * job.tp != total:
        raise JobError(
            f"{job.dp}*{job.pp}*{job.tp} = {job.dp * job.pp * job.tp} must equal the job's "
            f"GPU count {job.num_hosts} hosts x {g} = {total}",
            "dp*pp*tp",
        )
    stage = job.dp * job.tp
    if stage % g and g % stage:
        raise JobError(
            f"a pipeline stage of dp*tp = {stage} GPUs must be a multiple or a divisor of "
            f"the {g} GPUs per host",
            "pp",
        )


def _ring(stage_hosts: np.ndarray, channels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src host, dst host, share) for a host ring per channel over each row of stage_hosts."""
    n = stage_hosts.shape[1]
    if n < 2:
        return _empty3()
    offsets: list[int] = []
    step = 1
    while len(offsets) < n - 1:
        for o in (step % n, -step % n):
            if o and o not in offsets:
                offsets.append(o)
        step += 1
    chosen = np.array([offsets[c % len(offsets)] for c in range(channels)], dtype=np.int64)
    # Channels that repeat an offset are merged here, so their share is exact (k/C).
    offset, count = np.unique(chosen, return_counts=True)
    dst_pos = (np.arange(n)[None, :] + offset[:, None]) % n  # [O, n]
    src = np.broadcast_to(stage_hosts[:, None, :], (stage_hosts.shape[0], offset.size, n))
    dst = stage_hosts[:, dst_pos]  # [stages, O, n]
    share = np.broadcast_to((count / channels)[None, :, None], src.shape).reshape(-1)
    return src.reshape(-1), dst.reshape(-1), share


def _alltoall(stage_hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = stage_hosts.shape[1]
    if n < 2:
        return _empty3()
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    src, dst = stage_hosts[:, i], stage_hosts[:, j]
    return src.reshape(-1), dst.reshape(-1), np.full(src.size, 1.0 / (n - 1))


def _empty3() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    e = np.empty(0, dtype=np.int64)
    return e, e, np.empty(0)


def job_flows(fabric: Fabric, job: Job) -> FlowSet:
    """The flows `job` puts on the network, one per unique (source NIC, destination host):
    as it asks them (`asked_flows`), scaled down where that asks a NIC for more than its
    line rate (`within_line_rate`). A NIC sends and receives no faster, so that is the load
    any routing carries, and what the solve, the certificate and the predictions plan."""
    return within_line_rate(fabric, asked_flows(fabric, job))


def asked_flows(fabric: Fabric, job: Job) -> FlowSet:
    """The flows of `job` at the demands it asks (`demand_gbps`), line rate or not."""
    try:
        check_job(fabric, job)
    except JobError as err:
        wrapped = JobError(f"job {job.id!r}: {err}")
        wrapped.field, wrapped.detail = err.field, err.detail
        raise wrapped from None
    nics, P = fabric.nics_per_host, fabric.ports_per_nic
    g = job.gpus(fabric)
    hosts = np.asarray(job.hosts, dtype=np.int64)
    stage = job.dp * job.tp
    budget = job.demand(fabric) / len(job.collectives) / P  # a port's share of its NIC's
    src_nic: list[np.ndarray] = []
    dst_nic: list[np.ndarray] = []
    demand: list[np.ndarray] = []
    ports = np.arange(P, dtype=np.int64)
    rails = np.arange(g * P, dtype=np.int64)  # the job's ports of a host, GPU by GPU

    def add_rails(src_h: np.ndarray, dst_h: np.ndarray, gbps: np.ndarray) -> None:
        # Every (src host, dst host) pair carries one flow on each of the job's rail ports.
        src_nic.append((src_h[:, None] * nics + rails[None, :]).reshape(-1))
        dst_nic.append((dst_h[:, None] * nics + rails[None, :]).reshape(-1))
        demand.append(np.repeat(gbps, g * P))

    def on_ports(host: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        # the model NICs of GPU `gpu`'s NIC on `host`, P per pair, pair by pair
        return ((host * nics + gpu * P)[:, None] + ports[None, :]).reshape(-1)

    if stage % g == 0:  # stages own whole hosts: ring and all-to-all cross the network
        stage_hosts = hosts.reshape(job.pp, stage // g)
        if "ring" in job.collectives:
            s, d, share = _ring(stage_hosts, job.channels)
            add_rails(s, d, share * budget)
        if "alltoall" in job.collectives:
            s, d, share = _alltoall(stage_hosts)
            add_rails(s, d, share * budget)
    if "pipeline" in job.collectives and job.pp > 1:
        r = np.arange((job.pp - 1) * stage, dtype=np.int64)
        nxt = r + stage
        h_r, h_n = hosts[r // g], hosts[nxt // g]
        cross = h_r != h_n
        r, nxt, h_r, h_n = r[cross], nxt[cross], h_r[cross], h_n[cross]
        half = np.full(r.size * P, budget / 2)
        # Forward on the receiver's rail, backward (gradients) likewise.
        src_nic += [on_ports(h_r, nxt % g), on_ports(h_n, r % g)]
        dst_nic += [on_ports(h_n, nxt % g), on_ports(h_r, r % g)]
        demand += [half, half]
    if not src_nic:
        return _with_priority(FlowSet.build([], [], [], None, (job.id,)), job)
    src = np.concatenate(src_nic)
    dst = np.concatenate(dst_nic)
    gbps = np.concatenate(demand)
    # Merge identical (src NIC, dst host) keys; the dst NIC follows from the rail.
    key = src * fabric.num_hosts + dst // nics
    uniq, inverse = np.unique(key, return_inverse=True)
    total = np.bincount(inverse, weights=gbps, minlength=uniq.size)
    src_u = uniq // fabric.num_hosts
    dst_u = (uniq % fabric.num_hosts) * nics + src_u % nics
    return _with_priority(FlowSet.build(src_u, dst_u, total, None, (job.id,)), job)


def _nic_ratios(fabric: Fabric, flows: FlowSet) -> tuple[np.ndarray, np.ndarray]:
    """Per NIC, what `flows` ask it to send and to receive over its line rate (its access
    link as built)."""
    nics = fabric.num_nics
    line = fabric.capacity[fabric.up(np.arange(nics))]
    send = np.bincount(flows.src_nic, weights=flows.demand, minlength=nics)
    recv = np.bincount(flows.dst_nic, weights=flows.demand, minlength=nics)
    return send / line, recv / line


def within_line_rate(fabric: Fabric, flows: FlowSet) -> FlowSet:
    """`flows` with each flow's demand divided by how many times its line rate its source
    NIC is asked to send or its destination NIC to receive, the larger, where that is
    above 1: no NIC is then asked for more than its line rate. `flows` itself where none
    is (every job within line rate)."""
    if not len(flows):
        return flows
    send, recv = _nic_ratios(fabric, flows)
    scale = np.maximum(send[flows.src_nic], recv[flows.dst_nic])
    over = scale > 1 + 1e-9
    if not over.any():
        return flows
    return replace(flows, demand=np.where(over, flows.demand / np.where(over, scale, 1.0),
                                          flows.demand))  # fmt: skip


def over_line_rate(fabric: Fabric, flows: FlowSet) -> dict[str, float]:
    """Per job whose flows as asked (`asked_flows`) ask one of its NICs to send or receive
    more than the NIC's line rate (a `demand_gbps` above it, say), the largest such demand
    over the line rate, r: its flows are planned at 1 / r of that (`job_flows`), so no
    routing gives it more (one job a host, so a NIC's flows are its job's). Jobs within
    line rate are left out."""
    if not len(flows):
        return {}
    nics = fabric.num_nics
    send, recv = _nic_ratios(fabric, flows)
    ratio = np.maximum(send, recv)
    per_nic_job = np.full(nics, -1, np.int64)
    per_nic_job[flows.src_nic] = flows.job
    per_nic_job[flows.dst_nic] = flows.job
    over = np.flatnonzero(ratio > 1 + 1e-9)
    most = np.zeros(len(flows.job_ids))
    np.maximum.at(most, per_nic_job[over], ratio[over])
    return dict(sorted((flows.job_ids[j], float(most[j])) for j in np.flatnonzero(most)))


def jobs_over_line_rate(fabric: Fabric, jobs: Sequence[Job]) -> dict[str, float]:
    """`over_line_rate` of the flows `jobs` ask. Only a job asking more than the smallest
    line rate of a NIC (`demand_gbps`, a NIC's budget for all its collectives) can ask a NIC
    for more than its own, so only those jobs' flows are built."""
    nics = np.arange(fabric.num_nics)
    least = float(fabric.capacity[fabric.up(nics)].min(initial=np.inf))
    asking = [job for job in jobs
              if job.demand_gbps is not None and job.demand_gbps > least * (1 + 1e-9)]
    if not asking:
        return {}
    return over_line_rate(fabric, FlowSet.concat([asked_flows(fabric, job) for job in asking]))


def _with_priority(flows: FlowSet, job: Job) -> FlowSet:
    """`flows` (all of `job`) carrying the job's priority (none given: the default, 0)."""
    return replace(flows, job_priority=(job.priority,)) if job.priority else flows


def jobs_flows(
    fabric: Fabric, jobs: Sequence[Job], known: Mapping[str, tuple[Job, FlowSet]] | None = None
) -> FlowSet:
    """All jobs' flows in one FlowSet, job_ids in job order; jobs must not share a host.
    `known`: flows already built, by job id with the job they were built for (taken only
    for an equal job), so that a job's flows are built once (the service builds them to
    check a job as it comes, and solves with them)."""
    owner: dict[str, int] = {}
    for k, job in enumerate(jobs):
        if job.id in owner:
            raise JobError(
                f"duplicate job id {job.id!r} (also jobs[{owner[job.id]}])", f"jobs[{k}].id"
            )
        owner[job.id] = k
    if jobs:
        all_hosts = np.concatenate([np.asarray(j.hosts, dtype=np.int64) for j in jobs])
        which = np.repeat(np.arange(len(jobs)), [j.num_hosts for j in jobs])
        order = np.argsort(all_hosts, kind="stable")
        clash = np.flatnonzero(np.diff(all_hosts[order]) == 0)
        if clash.size:
            a, b = order[clash[0]], order[clash[0] + 1]
            host = int(all_hosts[a])
            raise JobError(
                f"{fabric.host_name(host)} is in job {jobs[which[a]].id!r} and job "
                f"{jobs[which[b]].id!r}",
                f"jobs[{which[b]}].hosts",
            )
    known = known or {}

    def flows_of(job: Job) -> FlowSet:
        hit = known.get(job.id)
        return hit[1] if hit is not None and hit[0] == job else job_flows(fabric, job)

    return FlowSet.concat([flows_of(job) for job in jobs])
