"""An emulated fabric: switches with exact-match TE tables over BGP/ECMP defaults.

Data plane. A packet of flow (src NIC, dst NIC) in QP bucket q arriving at a switch on arc
`a` looks up (link of a, dst host, q) in the switch's TE table, then (link of a, dst host)
with all buckets. The entry is used when its next-hop link is
up and the switch behind it still has a route to the destination (BGP next-hop tracking, as
with fast reroute: an entry into a dead end is withdrawn, never followed). Otherwise the
packet takes the ECMP default: the live links towards the destination that BGP offers
(up towards any CTSW/ATSW that still reaches the destination rack before the turn, down
after it), one chosen by a deterministic hash of (src NIC, dst NIC, switch, seed). The
destination RTSW hands the packet to the destination NIC.

`forward` walks every flow at once, hop by hop, with arrays; a walk ends `delivered` at the
destination NIC, `dropped` when no usable next hop exists, or `looped` when it revisits a
switch or exceeds MAX_WALK arcs. `verify` checks a whole assignment against the tables.

Control plane. Each switch accepts `program(install, remove)` all or nothing: entries must
use the switch's own links and fit its table capacity. Faults can be injected per switch,
each consumed by the next `program` call:

    timeout      no answer: waits `delay` (or the caller's timeout) and applies nothing
    reject       refuses the batch, applies nothing
    die_halfway  applies the first half of the batch, then its agent dies: read and program
                 fail until `restart`; the data plane keeps forwarding from the half table
    restart      the switch reboots during the call: its table comes back empty
    link_down    `links` go down, then the batch is applied normally
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.errors import InputError
from controller.model.assignment import Assignment
from controller.model.counts import Counts
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS
from controller.model.paths import MAX_HOPS
from controller.routes.checks import entry_problem, switch_ports
from controller.routes.tables import MAX_QP_BUCKETS, Entry, RouteSet, Table

MAX_WALK = 12  # arcs; a valid path has at most MAX_HOPS
DELIVERED, LOOPED, DROPPED = 0, 1, 2
STATUS_NAMES = ("delivered", "looped", "dropped")
FAULT_KINDS = ("timeout", "reject", "die_halfway", "restart", "link_down")

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_P1, _P2, _P3 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xC2B2AE3D27D4EB4F),
    np.uint64(0x165667B19E3779F9),
)


class SwitchError(Exception):
    """An emulated switch failed a request."""


class SwitchTimeout(SwitchError):
    """The switch did not answer in time; nothing was applied."""


class SwitchRejected(SwitchError):
    """The switch refused a batch; nothing was applied."""


class SwitchDown(SwitchError):
    """The switch's agent is unreachable."""


@dataclass(frozen=True)
class Fault:
    """A misbehaviour for the next `times` program calls of one switch."""

    kind: str
    times: int = 1
    delay: float = 0.05  # seconds, for "timeout"
    links: tuple[int, ...] = ()  # for "link_down"

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise InputError(f"unknown fault {self.kind!r}; known: {', '.join(FAULT_KINDS)}")


@dataclass
class EmulatedSwitch:
    """One switch: its links, TE table and agent state."""

    name: str
    node: int
    ports: frozenset[int]
    capacity: float
    table: Table
    alive: bool = True
    faults: list[Fault] = field(default_factory=list)

    def next_fault(self) -> Fault | None:
        if not self.faults:
            return None
        fault = self.faults[0]
        if fault.times <= 1:
            self.faults.pop(0)
        else:
            self.faults[0] = Fault(fault.kind, fault.times - 1, fault.delay, fault.links)
        return fault


@dataclass(frozen=True)
class Walks:
    """Forwarding outcome of many flows: status [F] and the arcs taken [F, MAX_WALK]."""

    status: np.ndarray
    arcs: np.ndarray

    def walk(self, i: int) -> Walk:
        row = self.arcs[i]
        return Walk(STATUS_NAMES[int(self.status[i])], tuple(row[row >= 0].tolist()))


@dataclass(frozen=True)
class Walk:
    """Forwarding outcome of one flow."""

    status: str
    arcs: tuple[int, ...]


@dataclass(frozen=True)
class VerifyReport:
    """Subflows looped, dropped, or (routed but) off their assigned path, as row indices of
    the assignment; `counts` in the one vocabulary (controller.model.counts)."""

    counts: Counts
    looped: np.ndarray = field(repr=False)
    dropped: np.ndarray = field(repr=False)
    off_path: np.ndarray = field(repr=False)

    @property
    def ok(self) -> bool:
        return not (self.looped.size or self.dropped.size or self.off_path.size)

    @property
    def flows(self) -> int:
        return self.counts.flows

    def summary(self) -> str:
        return (
            f"{self.counts.flows_text()} walked: {self.looped.size:,} subflows looped, "
            f"{self.dropped.size:,} dropped, {self.off_path.size:,} off their assigned path"
        )


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _pick(ok: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Column of the (h mod count)-th True in each row of `ok`, or -1 if none."""
    count = ok.sum(axis=1)
    pick = h % np.maximum(count, 1).astype(np.uint64)
    col = np.argmax(ok.cumsum(axis=1) > pick[:, None].astype(np.int64), axis=1)
    return np.where(count > 0, col, -1)


class EmulatedFabric:
    """Switches, link state and forwarding of one fabric; thread-safe for `program`."""

    def __init__(
        self,
        fabric: Fabric,
        capacity: int | Mapping[str, int] | None = None,
        seed: int = 0,
        down_links: Iterable[int] = (),
    ) -> None:
        self.fabric = fabric
        self.seed = int(seed)
        self._lock = threading.Lock()
        self._version = 0
        self._cache: tuple[int, tuple[np.ndarray, ...]] | None = None
        self.alive = fabric.installed.copy()  # a cable never installed is never up
        self.alive[list(down_links)] = False
        ports = switch_ports(fabric)
        self.switches: dict[str, EmulatedSwitch] = {}
        for name, links in ports.items():
            if isinstance(capacity, Mapping):
                cap = float(capacity.get(name, np.inf))
            else:
                cap = float(np.inf if capacity is None else capacity)
            self.switches[name] = EmulatedSwitch(
                name, fabric.node_by_name(name), links, cap, Table(name)
            )
        self._ports = ports
        self._port_arrays = {n: np.array(sorted(p), np.int64) for n, p in ports.items()}
        self._reach_cache: tuple[int, tuple[np.ndarray, ...]] | None = None

    # ---- control plane --------------------------------------------------------------
    def names(self) -> tuple[str, ...]:
        """Switch names in node order (RTSWs, CTSWs, ATSWs)."""
        return tuple(sorted(self.switches, key=lambda n: self.switches[n].node))

    def _switch(self, name: str) -> EmulatedSwitch:
        try:
            return self.switches[name]
        except KeyError:
            raise SwitchRejected(f"no switch {name!r} in fabric {self.fabric.name!r}") from None

    def read(self, name: str) -> tuple[Entry, ...]:
        """The switch's table, sorted by (in_port, dst_host, qp)."""
        return self.read_table(name).entries()

    def read_table(self, name: str) -> Table:
        """The switch's table as columns (shared: tables are read-only)."""
        with self._lock:
            switch = self._switch(name)
            if not switch.alive:
                raise SwitchDown(f"{name}: agent not answering")
            return switch.table

    def program(
        self,
        name: str,
        install: Sequence[Entry] = (),
        remove: Sequence[tuple[int, int, int]] = (),
        timeout: float | None = None,
    ) -> None:
        """Set entries and remove keys (in_port, dst_host, qp), all or nothing."""

        def tables() -> tuple[Table, Table]:
            for entry in install:
                problem = entry_problem(self.fabric, self._ports, entry)
                if problem is None and entry.switch != name:
                    problem = f"entry for {entry.switch} sent to {name}"
                if problem:
                    raise SwitchRejected(problem)
            drop = Table.of(name, [Entry(name, ip, d, 0, "", q) for ip, d, q in remove])
            return Table.of(name, install), drop

        self._program(name, tables, timeout)

    def program_tables(
        self, name: str, put: Table, drop: Table, timeout: float | None = None
    ) -> None:
        """Set `put`'s entries, then remove `drop`'s matches, all or nothing (the columnar
        form of `program`)."""

        def tables() -> tuple[Table, Table]:
            problem = self._problem(name, put)
            if problem:
                raise SwitchRejected(problem)
            return put, drop

        self._program(name, tables, timeout)

    def program_many(
        self, batches: Sequence[tuple[str, Table, Table]], timeout: float | None = None
    ) -> list[SwitchError | None]:
        """`program_tables` for each (switch, put, drop), one after the other, the entries
        of all checked at once (thousands of small batches make a full install); how each
        went (None: applied)."""
        problems = self._problems([(name, put) for name, put, _ in batches])
        out: list[SwitchError | None] = []
        for (name, put, drop), problem in zip(batches, problems, strict=True):

            def tables(put: Table = put, drop: Table = drop, problem: str | None = problem):
                if problem:
                    raise SwitchRejected(problem)
                return put, drop

            try:
                self._program(name, tables, timeout)
            except SwitchError as err:
                out.append(err)
            else:
                out.append(None)
        return out

    def _problems(self, puts: Sequence[tuple[str, Table]]) -> list[str | None]:
        """`_problem` of each (switch, put): the rows of all checked in one pass against
        the ends of their links, the message made only where one fails."""
        out: list[str | None] = [None] * len(puts)
        known = [i for i, (name, put) in enumerate(puts) if len(put) and name in self.switches]
        for i in known:
            if puts[i][1].switch != puts[i][0]:
                out[i] = self._problem(*puts[i])
        known = [i for i in known if out[i] is None]
        if not known:
            return out
        tables = [puts[i][1] for i in known]
        sizes = [len(t) for t in tables]
        node = np.repeat([self.switches[puts[i][0]].node for i in known], sizes)
        lo, hi = self.fabric.link_ends
        ok = np.ones(node.size, bool)
        for column in ("in_port", "next_hop"):
            link = np.concatenate([getattr(t, column) for t in tables])
            inside = (link >= 0) & (link < self.fabric.num_links)
            at = np.where(inside, link, 0)
            ok &= inside & ((lo[at] == node) | (hi[at] == node))
        d = np.concatenate([t.dst_host for t in tables])
        q = np.concatenate([t.qp for t in tables])
        ok &= (d >= 0) & (d < self.fabric.num_hosts) & (q >= ALL_QPS) & (q < MAX_QP_BUCKETS)
        if not ok.all():
            starts = np.cumsum([0] + sizes[:-1])
            for j in np.unique(np.searchsorted(starts, np.flatnonzero(~ok), "right") - 1):
                i = known[int(j)]
                out[i] = self._problem(*puts[i])
        return out

    def _problem(self, name: str, put: Table) -> str | None:
        """Why some entry of `put` cannot be installed on switch `name`, or None."""
        if put.switch != name:
            return f"entry for {put.switch} sent to {name}"
        if not len(put):
            return None
        ports = self._port_arrays[name]  # sorted
        links = np.concatenate([put.in_port, put.next_hop])
        ours = ports.take(np.searchsorted(ports, links), mode="clip") == links
        d, q = put.dst_host, put.qp
        if (  # the usual answer in few steps (thousands of batches make a full install)
            ours.all()
            and d.min() >= 0
            and d.max() < self.fabric.num_hosts
            and q.min() >= ALL_QPS
            and q.max() < MAX_QP_BUCKETS
        ):
            return None
        ok = ours.reshape(2, -1).all(axis=0)
        ok &= (d >= 0) & (d < self.fabric.num_hosts) & (q >= ALL_QPS) & (q < MAX_QP_BUCKETS)
        return entry_problem(self.fabric, self._ports, put[int(np.argmin(ok))])

    def _program(
        self, name: str, tables: Callable[[], tuple[Table, Table]], timeout: float | None
    ) -> None:
        """The control plane of one call: faults, then the batch `tables()` gives (put,
        drop; raises SwitchRejected if invalid) applied all or nothing."""
        with self._lock:
            switch = self._switch(name)
            if not switch.alive:
                raise SwitchDown(f"{name}: agent not answering")
            fault = switch.next_fault()
        if fault is not None and fault.kind == "timeout":
            time.sleep(fault.delay if timeout is None else min(fault.delay, timeout))
            raise SwitchTimeout(f"{name}: no answer")
        with self._lock:
            if fault is not None and fault.kind == "reject":
                raise SwitchRejected(f"{name}: batch refused (injected)")
            if fault is not None and fault.kind == "restart":
                switch.table = Table(name)
                self._version += 1
                raise SwitchDown(f"{name}: rebooted during the call")
            if fault is not None and fault.kind == "link_down":
                self.alive[list(fault.links)] = False
                self._version += 1
            put, drop = tables()
            steps = len(put) + len(drop)
            if fault is not None and fault.kind == "die_halfway":  # sets first, then removals
                steps //= 2
                put, drop = put.take(slice(0, steps)), drop.take(slice(0, steps - len(put)))
            table = switch.table.updated(put, drop)
            if len(table) > switch.capacity:
                raise SwitchRejected(
                    f"{name}: table would hold {len(table)} entries, capacity "
                    f"{int(switch.capacity)}"
                )
            switch.table = table
            self._version += 1
            if fault is not None and fault.kind == "die_halfway":
                switch.alive = False
                raise SwitchDown(f"{name}: agent died after {steps} of the batch's changes")

    def inject(self, name: str, fault: Fault) -> None:
        """Queue a fault for the switch's next program call(s)."""
        with self._lock:
            self._switch(name).faults.append(fault)

    def restart(self, name: str) -> None:
        """Bring a switch's agent back, with an empty table and no pending faults."""
        with self._lock:
            switch = self._switch(name)
            switch.table = Table(name)
            switch.faults.clear()
            switch.alive = True
            self._version += 1

    def set_links(self, links: Iterable[int], up: bool) -> None:
        """Take links down or bring them up (a link without a cable stays down)."""
        with self._lock:
            self.alive[list(links)] = up
            self.alive &= self.fabric.installed
            self._version += 1

    def routes(self) -> RouteSet:
        """Every installed entry (whatever the agents' state)."""
        with self._lock:
            return RouteSet({n: s.table for n, s in self.switches.items() if s.table})

    # ---- data plane -----------------------------------------------------------------
    def _lookup(self) -> tuple[np.ndarray, ...]:
        """Sorted keys and next-hop links of the all-buckets entries (key: arriving arc *
        hosts + dst host) and of the bucket entries (key * MAX_QP_BUCKETS + bucket)."""
        with self._lock:
            if self._cache is not None and self._cache[0] == self._version:
                return self._cache[1]
            held = [(s.node, s.table) for s in self.switches.values() if s.table]
            version = self._version
        data = np.zeros((0, 5), np.int64)
        if held:
            data = np.stack([
                np.concatenate([np.full(len(t), node) for node, t in held]),
                *(np.concatenate([getattr(t, c) for _, t in held])
                  for c in ("in_port", "dst_host", "next_hop", "qp")),
            ], axis=1)  # fmt: skip
        hi = self.fabric.link_ends[1]
        arc = np.where(hi[data[:, 1]] == data[:, 0], 2 * data[:, 1], 2 * data[:, 1] + 1)
        base = arc * self.fabric.num_hosts + data[:, 2]
        whole = data[:, 4] == ALL_QPS
        keys = np.where(whole, base, base * MAX_QP_BUCKETS + data[:, 4])
        tables: list[np.ndarray] = []
        for rows_of in (whole, ~whole):
            order = np.argsort(keys[rows_of], kind="stable")
            tables += [keys[rows_of][order], data[rows_of, 3][order]]
        self._cache = (version, tuple(tables))
        return tuple(tables)

    def _reach(self) -> tuple[np.ndarray, ...]:
        """(rack uplink ok [RTSW, C], CTSW reach [P, C, P, R], ATSW reach [C, A, P, R])."""
        cached = self._reach_cache
        if cached is not None and cached[0] == self._version:
            return cached[1]
        f = self.fabric
        p_, r_, c_, a_ = f.pods, f.rtsws_per_pod, f.ctsws_per_pod, f.atsws_per_plane
        alive = self.alive.copy()
        rack = alive[f.rack_base : f.agg_base].reshape(f.num_rtsws, c_, f.rack_links)
        up_ok: np.ndarray = np.asarray(rack.any(axis=-1))
        local = up_ok.reshape(p_, r_, c_).transpose(0, 2, 1)  # [P, C, R]
        agg_ok = np.asarray(alive[f.agg_base :].reshape(p_, c_, a_, f.agg_links).any(axis=-1))
        atsw = agg_ok.transpose(1, 2, 0)[..., None] & local.transpose(1, 0, 2)[:, None]
        remote = np.asarray((agg_ok[:, :, :, None, None] & atsw[None]).any(axis=2))
        pods = np.arange(p_)
        remote[pods, :, pods, :] = local
        result: tuple[np.ndarray, ...] = (up_ok, remote, atsw)  # agg_ok is [P, C, A]
        self._reach_cache = (self._version, result)
        return result

    def _reaches(self, node: np.ndarray, dst_rack: np.ndarray) -> np.ndarray:
        """Whether BGP at switch `node` has a route to `dst_rack` (elementwise)."""
        f = self.fabric
        up_ok, ctsw_reach, atsw_reach = self._reach()
        base_r, base_c, base_a = (f.node_id(k, 0) for k in ("rtsw", "ctsw", "atsw"))
        q, r = np.divmod(dst_rack, f.rtsws_per_pod)
        out = np.zeros(node.shape, dtype=bool)
        m = (node >= base_r) & (node < base_c)
        if m.any():
            rt = node[m] - base_r
            via = up_ok[rt] & ctsw_reach[f.pod_of_rtsw(rt)[:, None], np.arange(f.ctsws_per_pod),
                                          q[m][:, None], r[m][:, None]]  # fmt: skip
            out[m] = (rt == dst_rack[m]) | via.any(axis=1)
        m = (node >= base_c) & (node < base_a)
        if m.any():
            p, c = np.divmod(node[m] - base_c, f.ctsws_per_pod)
            out[m] = ctsw_reach[p, c, q[m], r[m]]
        m = node >= base_a
        if m.any() and f.atsws_per_plane:
            c, j = np.divmod(node[m] - base_a, f.atsws_per_plane)
            out[m] = atsw_reach[c, j, q[m], r[m]]
        return out

    def _default(
        self, node: np.ndarray, src: np.ndarray, dst: np.ndarray, dst_rack: np.ndarray
    ) -> np.ndarray:
        """ECMP default next-hop link per packet at `node`, or -1."""
        f = self.fabric
        c_, k_, a_, l_ = f.ctsws_per_pod, f.rack_links, f.atsws_per_plane, f.agg_links
        base_r, base_c, base_a = (f.node_id(k, 0) for k in ("rtsw", "ctsw", "atsw"))
        h = _mix(
            src.astype(np.uint64) * _P1 + dst.astype(np.uint64) * _P2
            + node.astype(np.uint64) * _P3 + np.uint64(self.seed)
        )  # fmt: skip
        out = np.full(node.shape, -1, dtype=np.int64)
        up_ok, ctsw_reach, atsw_reach = self._reach()
        q, r = np.divmod(dst_rack, f.rtsws_per_pod)
        # RTSW: deliver locally, else up to any CTSW (c, k) that reaches the rack.
        m = (node >= base_r) & (node < base_c)
        if m.any():
            idx = np.flatnonzero(m)
            rt = node[idx] - base_r
            local = rt == dst_rack[idx]
            out[idx[local]] = np.where(self.alive[dst[idx[local]]], dst[idx[local]], -1)
            idx, rt = idx[~local], rt[~local]
            ck = np.arange(c_ * k_)
            links = f.rack_link(rt[:, None], ck // k_, ck % k_)
            ok = (
                self.alive[links]
                & ctsw_reach[f.pod_of_rtsw(rt)[:, None], ck // k_, q[idx][:, None], r[idx][:, None]]
            )
            col = _pick(ok, h[idx])
            out[idx] = np.where(col >= 0, links[np.arange(idx.size), col], -1)
        # CTSW: down to the rack in its pod, else up to any ATSW that reaches it.
        m = (node >= base_c) & (node < base_a)
        if m.any():
            idx = np.flatnonzero(m)
            p, c = np.divmod(node[idx] - base_c, c_)
            same = p == q[idx]
            i = idx[same]
            links = f.rack_link(dst_rack[i][:, None], c[same][:, None], np.arange(k_))
            col = _pick(self.alive[links], h[i])
            out[i] = np.where(col >= 0, links[np.arange(i.size), col], -1)
            i = idx[~same]
            if i.size and a_:
                jm = np.arange(a_ * l_)
                pc, cc = p[~same][:, None], c[~same][:, None]
                links = f.agg_link(pc, cc, jm // l_, jm % l_)
                ok = self.alive[links] & atsw_reach[cc, jm // l_, q[i][:, None], r[i][:, None]]
                col = _pick(ok, h[i])
                out[i] = np.where(col >= 0, links[np.arange(i.size), col], -1)
        # ATSW: down to the destination pod's CTSW of its plane.
        m = node >= base_a
        if m.any():
            idx = np.flatnonzero(m)
            c, j = np.divmod(node[idx] - base_a, a_)
            links = f.agg_link(q[idx][:, None], c[:, None], j[:, None], np.arange(l_))
            ok = self.alive[links] & ctsw_reach[q[idx], c, q[idx], r[idx]][:, None]
            col = _pick(ok, h[idx])
            out[idx] = np.where(col >= 0, links[np.arange(idx.size), col], -1)
        return out

    def forward(
        self,
        src_nic: Sequence[int] | np.ndarray,
        dst_nic: Sequence[int] | np.ndarray,
        qp: Sequence[int] | np.ndarray | None = None,
    ) -> Walks:
        """Walk every (src NIC, dst NIC[, QP bucket]) packet through the tables and ECMP
        defaults. A packet with qp ALL_QPS (the default) matches all-buckets entries only."""
        f = self.fabric
        src = np.asarray(src_nic, dtype=np.int64).reshape(-1)
        dst = np.asarray(dst_nic, dtype=np.int64).reshape(-1)
        n = src.size
        bucket = (
            np.full(n, ALL_QPS, np.int64) if qp is None
            else np.asarray(qp, dtype=np.int64).reshape(-1)
        )  # fmt: skip
        keys, next_hop, qp_keys, qp_next_hop = self._lookup()
        lo, hi = f.link_ends
        arc_dst = f.arc_ends[1]
        dst_host = f.host_of_nic(dst)
        dst_rack = f.rtsw_of_nic(dst)  # the RTSW the NIC hangs off
        dst_node = f.node_id("nic", 0) + dst
        first_switch = f.node_id("rtsw", 0)
        status = np.full(n, -1, dtype=np.int8)
        arcs = np.full((n, MAX_WALK), -1, dtype=np.int64)
        visited = np.full((n, MAX_WALK), -1, dtype=np.int64)
        arcs[:, 0] = f.up(f.access_link(src))
        status[~self.alive[f.access_link(src)]] = DROPPED
        node = arc_dst[arcs[:, 0]]
        visited[:, 0] = node
        for step in range(1, MAX_WALK):
            act = np.flatnonzero(status < 0)
            if not act.size:
                break
            at, last = node[act], arcs[act, step - 1]
            # TE entry, if present and usable.
            out = np.full(act.size, -1, dtype=np.int64)
            if keys.size or qp_keys.size:
                k = last * f.num_hosts + dst_host[act]
                nh_all = np.full(act.size, -1, dtype=np.int64)
                if keys.size:
                    pos = np.minimum(np.searchsorted(keys, k), keys.size - 1)
                    found = keys[pos] == k
                    nh_all[found] = next_hop[pos[found]]
                b = bucket[act]
                if qp_keys.size and (b != ALL_QPS).any():
                    kq = k * MAX_QP_BUCKETS + b
                    pos = np.minimum(np.searchsorted(qp_keys, kq), qp_keys.size - 1)
                    found = (qp_keys[pos] == kq) & (b != ALL_QPS)
                    nh_all[found] = qp_next_hop[pos[found]]
                hit = np.flatnonzero(nh_all >= 0)
                nh = nh_all[hit]
                other = lo[nh] + hi[nh] - at[hit]
                to_nic = other < first_switch
                usable = self.alive[nh] & np.where(
                    to_nic, other == dst_node[act[hit]],
                    self._reaches(np.maximum(other, first_switch), dst_rack[act[hit]]),
                )  # fmt: skip
                out[hit[usable]] = nh[usable]
            need = np.flatnonzero(out < 0)
            if need.size:
                a = act[need]
                out[need] = self._default(at[need], src[a], dst[a], dst_rack[a])
            dead = out < 0
            status[act[dead]] = DROPPED
            act, at, out = act[~dead], at[~dead], out[~dead]
            arc = np.where(lo[out] == at, 2 * out, 2 * out + 1)
            arcs[act, step] = arc
            nxt = arc_dst[arc]
            to_nic = nxt < first_switch
            status[act[to_nic]] = np.where(nxt[to_nic] == dst_node[act[to_nic]], DELIVERED, DROPPED)
            act, nxt = act[~to_nic], nxt[~to_nic]
            seen = (visited[act, :step] == nxt[:, None]).any(axis=1)
            status[act[seen]] = LOOPED
            node[act] = nxt
            visited[act, step] = nxt
        status[status < 0] = LOOPED
        return Walks(status, arcs)

    def walk(self, src_nic: int, dst_nic: int, qp: int = ALL_QPS) -> Walk:
        """Forwarding outcome of one packet."""
        return self.forward([src_nic], [dst_nic], [qp]).walk(0)


def forward(
    emulated: EmulatedFabric,
    src_nic: np.ndarray,
    dst_nic: np.ndarray,
    qp: np.ndarray | None = None,
) -> Walks:
    """Walk every (src NIC, dst NIC[, QP bucket]) packet through an emulated fabric."""
    return emulated.forward(src_nic, dst_nic, qp)


def verify(fabric: Fabric, emulated: EmulatedFabric, assignment: Assignment) -> VerifyReport:
    """Every flow delivered, loop-free, and every routed flow on exactly its assigned path."""
    flows = assignment.flows
    walks = emulated.forward(flows.src_nic, flows.dst_nic, flows.qp)
    want = assignment.arcs(fabric)
    got = walks.arcs
    off = (got[:, :MAX_HOPS] != want).any(axis=1) | (got[:, MAX_HOPS:] >= 0).any(axis=1)
    delivered = walks.status == DELIVERED
    return VerifyReport(
        counts=Counts.of(flows),
        looped=np.flatnonzero(walks.status == LOOPED),
        dropped=np.flatnonzero(walks.status == DROPPED),
        off_path=np.flatnonzero(off & delivered & assignment.routed),
    )
