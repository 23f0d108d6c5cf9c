"""The fabric: a 3-tier Clos of hosts, NICs, RTSWs, CTSWs and ATSWs, as plain arrays.

Shape (all indices are dense integers; names are derived from them):

    pod p in [0, P), rack r in [0, R) per pod, host h in [0, H) per rack, NIC n in [0, N)
    RTSW  id = (p*R + r)*S + s          S per rack (slot s); NIC n sits under slot n % S
    CTSW  id = p*C + c                  C per pod; every RTSW has K parallel links to each
    ATSW  id = c*A + j                  plane c joins CTSW c of every pod; A ATSWs a plane,
                                         L parallel links from each CTSW to each ATSW
    host  id = (p*R + r)*H + h          NIC id = host*N + n

A "rack" is the unit of hosts that share their RTSWs. S = 1 is the classic Clos (one RTSW
per rack, every NIC under it). S = N is rail-optimized (a scalable unit of H servers has N
rail leaves; NIC n of every server goes to leaf n). A dual-ToR NIC is modelled as one "NIC"
per port, its ports on different slots: `ports_per_nic` (P) says so, the host's NICs n in
[P*g, P*g + P) being the ports of GPU g's NIC (nics_per_host / P GPUs a host). With Q
planes (Q divides S and C), CTSW c belongs to plane c % Q and is cabled only to the RTSWs
of slots s with s % Q == c % Q; the cross-plane RTSW-CTSW links keep their ids but are not
installed (capacity factor 0 in every health), so every index formula, kernel and path
numbering stays the same. Q = S with S = N is the rail-only design (no spine path between
rails); Q = 2 is a dual-plane pod. The ATSW plane of CTSW c only joins CTSWs c of every pod,
so planes stay separate all the way up.

Links are physical cables, numbered in three blocks (access, rack-cluster, cluster-agg).
Each link has two directed arcs: arc 2*l goes up (towards the ATSWs), arc 2*l+1 goes down.
Arc capacities are in Gbps. Every index formula lives here so that path enumeration,
hashing and simulation can work on whole arrays at once.

A fabric loaded from an inventory (controller.model.inventory) keeps the same index model,
sized to hold every device, and carries a `Wiring`: the operator's names by node id, the
switch ports at both ends of every link, which links have a cable (the rest are "not
installed": `LinkHealth.all_up` gives them factor 0) and per-switch TE budgets. Presets have
no wiring and keep the names below.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from controller.errors import FabricError

if TYPE_CHECKING:
    import networkx as nx

# Link kinds, in block order.
ACCESS, RACK, AGG = 0, 1, 2
LINK_KIND_NAMES = ("access", "rtsw-ctsw", "ctsw-atsw")
# Arc tiers, for per-tier reports: direction matters.
TIER_NAMES = ("nic>rtsw", "rtsw>nic", "rtsw>ctsw", "ctsw>rtsw", "ctsw>atsw", "atsw>ctsw")
# Switch tiers that hold TE entries, and the default budget of entries per switch of each:
# portable ACL/PBR budgets are 256-2K entries (PINS guarantees 256 ingress ACL entries, a
# Nokia 7220 2K IPv4 ACL entries), so 2,048 is the most a TE design can count on.
SWITCH_TIERS = ("rtsw", "ctsw", "atsw")
DEFAULT_TE_ENTRIES = 2048
MAX_PORTS_PER_NIC = 8
TeEntries = tuple[int | None, int | None, int | None]  # per SWITCH_TIERS; None = unlimited


ABSENT = "?"  # prefix of the index model's name of a slot no device fills


@dataclass(frozen=True, eq=False)
class Wiring:
    """What an inventory adds to the index model: names, ports, cables, per-switch budgets."""

    node_names: tuple[str, ...]  # by node id; a slot no device fills is ABSENT + its index name
    lower_ports: tuple[str, ...]  # per link: the port at its lower end ("" when none)
    upper_ports: tuple[str, ...]  # per link: the port at its upper end
    installed: np.ndarray = field(repr=False)  # bool [num_links]: a cable exists
    present: np.ndarray = field(repr=False)  # bool [num_nodes]: a device (a cabled NIC) exists
    budgets: tuple[tuple[int, int], ...] = ()  # (node id, TE entries): a device's own budget
    # the operator's pod and rack names, by pod index and rack index ("": none, the exports'
    # own default); () when the inventory names none
    pod_names: tuple[str, ...] = ()
    rack_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.installed.setflags(write=False)
        self.present.setflags(write=False)


@dataclass(frozen=True)
class Fabric:
    """An immutable 3-tier Clos fabric with per-arc capacities (Gbps)."""

    name: str
    pods: int
    racks_per_pod: int
    hosts_per_rack: int
    nics_per_host: int
    ctsws_per_pod: int
    rack_links: int  # K: parallel links from each RTSW to each CTSW
    atsws_per_plane: int  # A: 0 means a single pod with no aggregation layer
    agg_links: int  # L: parallel links from each CTSW to each ATSW
    capacity: np.ndarray = field(repr=False)  # float64 [num_arcs], Gbps, as built
    # TE entries each switch of a tier can hold (RTSW, CTSW, ATSW); None = unlimited
    te_entries: TeEntries = (DEFAULT_TE_ENTRIES,) * 3
    wiring: Wiring | None = field(default=None, repr=False)  # None: a preset's regular Clos
    rtsws_per_rack: int = 1  # S: RTSW slots of a rack; NIC n of a host sits under slot n % S
    planes: int = 1  # Q: CTSW c reaches only the RTSW slots s with s % Q == c % Q
    ports_per_nic: int = 1  # P: model NICs P*g .. P*g+P-1 of a host are GPU g's NIC's ports

    def __post_init__(self) -> None:
        S, Q, P = self.rtsws_per_rack, self.planes, self.ports_per_nic
        if not (isinstance(P, int) and 1 <= P <= MAX_PORTS_PER_NIC and self.nics_per_host % P == 0):
            raise FabricError(
                f"ports_per_nic: {P!r} must be an integer in [1, {MAX_PORTS_PER_NIC}] that "
                f"divides nics_per_host ({self.nics_per_host}, which counts ports), so every "
                "GPU's NIC has as many ports"
            )
        if not (isinstance(S, int) and S >= 1 and self.nics_per_host % S == 0):
            raise FabricError(
                f"rtsws_per_rack: {S!r} must be an integer >= 1 that divides nics_per_host "
                f"({self.nics_per_host}), so every RTSW of a rack has as many NICs of each host"
            )
        if not (isinstance(Q, int) and Q >= 1 and S % Q == 0 and self.ctsws_per_pod % Q == 0):
            raise FabricError(
                f"planes: {Q!r} must be an integer >= 1 that divides rtsws_per_rack ({S}) and "
                f"ctsws_per_pod ({self.ctsws_per_pod}), so every plane has RTSWs and CTSWs"
            )
        if self.pods > 1 and self.rack_links > 1 and Q < S:
            # a CTSW's TE entry down is keyed <ingress link, destination host>: from an ATSW
            # it cannot tell which of the host's RTSWs (of its plane) a packet is for
            raise FabricError(
                f"rtsws_per_rack={S} with planes={Q} and rack_links={self.rack_links} across "
                f"{self.pods} pods: a CTSW could not tell a host's RTSWs apart; use "
                "rack_links: 1, one pod, or planes equal to rtsws_per_rack"
            )
        if self.capacity.shape != (self.num_arcs,):
            raise FabricError(
                f"capacity has shape {self.capacity.shape}, expected ({self.num_arcs},)"
            )
        if not (np.isfinite(self.capacity).all() and (self.capacity > 0).all()):
            raise FabricError("capacity: every arc needs a finite, positive capacity")
        self.capacity.setflags(write=False)
        if len(self.te_entries) != len(SWITCH_TIERS):
            raise FabricError(f"te_entries needs one value per tier {SWITCH_TIERS}")
        for tier, value in zip(SWITCH_TIERS, self.te_entries, strict=True):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise FabricError(
                    f"te_entries.{tier} must be an integer >= 0 or null, got {value!r}"
                )
        w = self.wiring
        if w is not None and not (
            len(w.node_names) == self.num_nodes and w.present.shape == (self.num_nodes,)
            and len(w.lower_ports) == len(w.upper_ports) == self.num_links
            and w.installed.shape == (self.num_links,)
            and len(w.pod_names) in (0, self.pods)
            and len(w.rack_names) in (0, self.pods * self.racks_per_pod)
        ):  # fmt: skip
            raise FabricError("wiring: its names, ports and masks do not fit the fabric's shape")

    def table_budget(self, override: int | None = None) -> np.ndarray:
        """TE entries each node can hold, by node id (float64; inf = unlimited or not a
        switch). `override` (an operator's one number, `--table-budget`) replaces every
        tier's budget and caps a switch's own (an inventory's `te_entries`, a fact of that
        switch's hardware): no switch is given more than it says it holds."""
        tiers = self.te_entries if override is None else (override,) * len(SWITCH_TIERS)
        out = np.full(self.num_nodes, np.inf)
        for tier, value in zip(SWITCH_TIERS, tiers, strict=True):
            if value is not None:
                lo = self._node_base[tier]
                out[lo : lo + self.tier_size(tier)] = value
        if self.wiring is not None:
            for node, value in self.wiring.budgets:
                out[node] = value if override is None else min(value, override)
        return out

    def tier_size(self, tier: str) -> int:
        """Switches of a tier (rtsw, ctsw, atsw)."""
        return {"rtsw": self.num_rtsws, "ctsw": self.num_ctsws, "atsw": self.num_atsws}[tier]

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the fabric's shape: two fabrics with the same fingerprint give every
        id the same name. Route files and driver tables carry it and are checked on read."""
        shape = ",".join(
            f"{k}={getattr(self, k)}"
            for k in ("pods", "racks_per_pod", "hosts_per_rack", "nics_per_host",
                      "ctsws_per_pod", "rack_links", "atsws_per_plane", "agg_links")
        )  # fmt: skip
        for k in ("rtsws_per_rack", "planes", "ports_per_nic"):  # only when not 1: old ones stay
            if getattr(self, k) != 1:
                shape += f",{k}={getattr(self, k)}"
        digest = hashlib.sha256(shape.encode())
        w = self.wiring
        if w is not None:  # the names and the cables too: presets keep their fingerprints
            for part in (w.node_names, w.lower_ports, w.upper_ports):
                digest.update(b"\0" + "\n".join(part).encode())
            digest.update(b"\0" + np.packbits(w.installed).tobytes())
            if w.pod_names or w.rack_names:  # only when named: older fingerprints stay
                for part in (w.pod_names, w.rack_names):
                    digest.update(b"\0" + "\n".join(part).encode())
        return "sha256:" + digest.hexdigest()[:16]

    # ---- what is installed ----------------------------------------------------------
    @cached_property
    def installed(self) -> np.ndarray:
        """bool [num_links]: the links whose cable exists (a preset's: all but the
        cross-plane RTSW-CTSW links when it has planes)."""
        if self.wiring is not None:
            return self.wiring.installed
        out = np.ones(self.num_links, dtype=bool)
        out[self.rack_base : self.agg_base] = self.in_plane().ravel()
        out.setflags(write=False)
        return out

    def in_plane(self) -> np.ndarray:
        """bool [num_rtsws, C, K]: RTSW-CTSW links within one plane (all when planes == 1)."""
        Q = self.planes
        slot_plane = (np.arange(self.num_rtsws) % self.rtsws_per_rack) % Q
        c_plane = np.arange(self.ctsws_per_pod) % Q
        ok = slot_plane[:, None] == c_plane[None, :]
        return np.broadcast_to(ok[:, :, None], (self.num_rtsws, self.ctsws_per_pod,
                                                self.rack_links))  # fmt: skip

    @cached_property
    def present(self) -> np.ndarray:
        """bool [num_nodes]: the nodes a device (or a cabled NIC) fills (all of a preset's)."""
        if self.wiring is not None:
            return self.wiring.present
        out = np.ones(self.num_nodes, dtype=bool)
        out.setflags(write=False)
        return out

    @cached_property
    def usable_hosts(self) -> np.ndarray:
        """Host ids that exist with every NIC cabled: the hosts a job can be placed on."""
        present = self.present[self._node_base["host"] : self._node_base["nic"]]
        nics = self.installed[: self.num_access_links].reshape(self.num_hosts, -1).all(axis=1)
        out = np.flatnonzero(present & nics)
        out.setflags(write=False)
        return out

    def switch_names(self) -> tuple[str, ...]:
        """The names of the switches that exist (RTSWs, CTSWs, ATSWs, by node id)."""
        lo = self._node_base["rtsw"]
        names, present = self.node_names, self.present
        return tuple(names[n] for n in range(lo, self.num_nodes) if present[n])

    def ports(self, link: int) -> tuple[str, str] | None:
        """(lower end, upper end) port names of a link as the inventory gives them, or None
        (a preset, or a link the inventory names no port for)."""
        if self.wiring is None:
            return None
        lower, upper = self.wiring.lower_ports[int(link)], self.wiring.upper_ports[int(link)]
        return (lower, upper) if lower or upper else None

    def port_at(self, switch: str, link: int) -> str | None:
        """The name of `switch`'s port on `link` as the inventory gives it; None when the
        fabric names no ports (a preset) or the link does not end at `switch`."""
        ports = self.ports(link)
        if ports is None:
            return None
        lo, hi = self.link_ends
        node = self._node_index.get(switch)
        if node == int(lo[int(link)]):
            return ports[0] or None
        if node == int(hi[int(link)]):
            return ports[1] or None
        return None

    def check_installed(self, links: Iterable[int]) -> None:
        """FabricError naming the first link that has no cable (it cannot be brought up)."""
        installed = self.installed
        for link in links:
            if not installed[int(link)]:
                raise FabricError(
                    f"link {self.link_name(int(link))} is not installed in fabric "
                    f"{self.name!r} (no such cable in its inventory): it cannot come up"
                )

    # ---- counts -------------------------------------------------------------------
    @property
    def num_racks(self) -> int:
        return self.pods * self.racks_per_pod

    @property
    def num_hosts(self) -> int:
        return self.num_racks * self.hosts_per_rack

    @property
    def num_nics(self) -> int:
        return self.num_hosts * self.nics_per_host

    @property
    def gpus_per_host(self) -> int:
        """GPUs of a host: one NIC each, of `ports_per_nic` model NICs (ports)."""
        return self.nics_per_host // self.ports_per_nic

    @property
    def num_rtsws(self) -> int:
        return self.num_racks * self.rtsws_per_rack

    @property
    def rtsws_per_pod(self) -> int:
        return self.racks_per_pod * self.rtsws_per_rack

    @property
    def num_ctsws(self) -> int:
        return self.pods * self.ctsws_per_pod

    @property
    def num_atsws(self) -> int:
        return self.ctsws_per_pod * self.atsws_per_plane

    @property
    def num_access_links(self) -> int:
        return self.num_nics

    @property
    def num_rack_links(self) -> int:
        return self.num_rtsws * self.ctsws_per_pod * self.rack_links

    @property
    def num_agg_links(self) -> int:
        return self.num_ctsws * self.atsws_per_plane * self.agg_links

    @property
    def num_links(self) -> int:
        return self.num_access_links + self.num_rack_links + self.num_agg_links

    @property
    def num_arcs(self) -> int:
        return 2 * self.num_links

    @property
    def rack_base(self) -> int:
        """First link id of the RTSW-CTSW block."""
        return self.num_access_links

    @property
    def agg_base(self) -> int:
        """First link id of the CTSW-ATSW block."""
        return self.num_access_links + self.num_rack_links

    # ---- index formulas (vectorised: accept ints or integer arrays) --------------
    def host_of_nic(self, nic):  # type: ignore[no-untyped-def]
        return nic // self.nics_per_host

    def rack_of_host(self, host):  # type: ignore[no-untyped-def]
        """Global rack id (the RTSW id too when rtsws_per_rack == 1)."""
        return host // self.hosts_per_rack

    def rack_of_nic(self, nic):  # type: ignore[no-untyped-def]
        """Global rack id of a NIC (or an array of them): its host's rack, not its RTSW."""
        return nic // (self.nics_per_host * self.hosts_per_rack)

    def rtsw_of_nic(self, nic):  # type: ignore[no-untyped-def]
        """RTSW id a NIC (or an array of them) is cabled to: slot n % S of its rack."""
        if self.rtsws_per_rack == 1:
            return nic // (self.nics_per_host * self.hosts_per_rack)
        S = self.rtsws_per_rack
        return nic // (self.nics_per_host * self.hosts_per_rack) * S + nic % self.nics_per_host % S

    def rtsws_of_rack(self, rack):  # type: ignore[no-untyped-def]
        """RTSW ids [..., S] of a rack (or an array of them)."""
        return np.asarray(rack)[..., None] * self.rtsws_per_rack + np.arange(self.rtsws_per_rack)

    def pod_of_rack(self, rack):  # type: ignore[no-untyped-def]
        return rack // self.racks_per_pod

    def pod_of_rtsw(self, rtsw):  # type: ignore[no-untyped-def]
        return rtsw // self.rtsws_per_pod

    def nic_id(self, host, n):  # type: ignore[no-untyped-def]
        return host * self.nics_per_host + n

    def access_link(self, nic):  # type: ignore[no-untyped-def]
        return nic

    def rack_link(self, rtsw, c, k=0):  # type: ignore[no-untyped-def]
        """Link between RTSW `rtsw` and CTSW index `c` of its pod, parallel member `k`."""
        return self.rack_base + (rtsw * self.ctsws_per_pod + c) * self.rack_links + k

    def agg_link(self, pod, c, j, m=0):  # type: ignore[no-untyped-def]
        """Link between CTSW `c` of pod `pod` and ATSW `j` of plane `c`, member `m`."""
        ctsw = pod * self.ctsws_per_pod + c
        return self.agg_base + (ctsw * self.atsws_per_plane + j) * self.agg_links + m

    def rack_uplinks(self) -> np.ndarray:
        """Link ids [RTSWs, C, K] of every RTSW's links to its CTSWs."""
        return self.rack_link(
            np.arange(self.num_rtsws)[:, None, None],
            np.arange(self.ctsws_per_pod)[None, :, None],
            np.arange(self.rack_links)[None, None, :],
        )

    @staticmethod
    def up(link):  # type: ignore[no-untyped-def]
        return 2 * link

    @staticmethod
    def down(link):  # type: ignore[no-untyped-def]
        return 2 * link + 1

    # ---- derived arrays ---------------------------------------------------------
    @cached_property
    def link_kind(self) -> np.ndarray:
        kind = np.empty(self.num_links, dtype=np.int8)
        kind[: self.rack_base] = ACCESS
        kind[self.rack_base : self.agg_base] = RACK
        kind[self.agg_base :] = AGG
        kind.setflags(write=False)
        return kind

    @cached_property
    def arc_tier(self) -> np.ndarray:
        """Tier of each arc: index into TIER_NAMES."""
        tier = (2 * np.repeat(self.link_kind.astype(np.int8), 2)).astype(np.int8)
        tier[1::2] += 1
        tier.setflags(write=False)
        return tier

    @cached_property
    def link_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) endpoint node ids of every link; see `node_name`."""
        lo = np.empty(self.num_links, dtype=np.int64)
        hi = np.empty(self.num_links, dtype=np.int64)
        nics = np.arange(self.num_nics)
        lo[: self.rack_base] = self._node_base["nic"] + nics
        hi[: self.rack_base] = self._node_base["rtsw"] + self.rtsw_of_nic(nics)
        rl = np.arange(self.num_rack_links)
        rtsw = rl // (self.ctsws_per_pod * self.rack_links)
        c = (rl // self.rack_links) % self.ctsws_per_pod
        lo[self.rack_base : self.agg_base] = self._node_base["rtsw"] + rtsw
        hi[self.rack_base : self.agg_base] = (
            self._node_base["ctsw"] + self.pod_of_rtsw(rtsw) * self.ctsws_per_pod + c
        )
        al = np.arange(self.num_agg_links)
        ctsw = al // (self.atsws_per_plane * self.agg_links)
        j = (al // self.agg_links) % max(self.atsws_per_plane, 1)
        lo[self.agg_base :] = self._node_base["ctsw"] + ctsw
        hi[self.agg_base :] = (
            self._node_base["atsw"] + (ctsw % self.ctsws_per_pod) * self.atsws_per_plane + j
        )
        lo.setflags(write=False)
        hi.setflags(write=False)
        return lo, hi

    @cached_property
    def arc_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """(source node, target node) of every arc."""
        lo, hi = self.link_ends
        src = np.empty(self.num_arcs, dtype=np.int64)
        dst = np.empty(self.num_arcs, dtype=np.int64)
        src[0::2], dst[0::2] = lo, hi
        src[1::2], dst[1::2] = hi, lo
        return src, dst

    # ---- names ------------------------------------------------------------------
    @cached_property
    def _node_base(self) -> dict[str, int]:
        base, out = 0, {}
        for kind, count in (
            ("host", self.num_hosts),
            ("nic", self.num_nics),
            ("rtsw", self.num_rtsws),
            ("ctsw", self.num_ctsws),
            ("atsw", self.num_atsws),
        ):
            out[kind] = base
            base += count
        out["end"] = base
        return out

    @property
    def num_nodes(self) -> int:
        return self._node_base["end"]

    def node_kind(self, node: int) -> str:
        for kind in ("atsw", "ctsw", "rtsw", "nic", "host"):
            if node >= self._node_base[kind]:
                if node >= self._node_base["end"]:
                    break
                return kind
        raise FabricError(f"node id {node} out of range")

    def node_id(self, kind: str, index: int) -> int:
        return self._node_base[kind] + int(index)

    def pod_name(self, pod: int) -> str | None:
        """The operator's name of pod `pod`, None when it has none (each export then uses
        its own default: pod0, p0)."""
        names = self.wiring.pod_names if self.wiring is not None else ()
        return names[int(pod)] or None if names else None

    def rack_name(self, rack: int) -> str | None:
        """The operator's name of rack `rack` (global rack index), None when it has none."""
        names = self.wiring.rack_names if self.wiring is not None else ()
        return names[int(rack)] or None if names else None

    def host_name(self, host: int) -> str:
        if self.wiring is not None:
            return self.wiring.node_names[self._node_base["host"] + int(host)]
        rack, h = divmod(int(host), self.hosts_per_rack)
        p, r = divmod(rack, self.racks_per_pod)
        return f"host-p{p}-r{r}-h{h}"

    def rtsw_name(self, rtsw: int) -> str:
        if self.wiring is not None:
            return self.wiring.node_names[self._node_base["rtsw"] + int(rtsw)]
        rack, slot = divmod(int(rtsw), self.rtsws_per_rack)
        p, r = divmod(rack, self.racks_per_pod)
        return f"rtsw-p{p}-r{r}" + (f"-s{slot}" if self.rtsws_per_rack > 1 else "")

    def ctsw_name(self, ctsw: int) -> str:
        if self.wiring is not None:
            return self.wiring.node_names[self._node_base["ctsw"] + int(ctsw)]
        p, c = divmod(int(ctsw), self.ctsws_per_pod)
        return f"ctsw-p{p}-c{c}"

    def atsw_name(self, atsw: int) -> str:
        if self.wiring is not None:
            return self.wiring.node_names[self._node_base["atsw"] + int(atsw)]
        c, j = divmod(int(atsw), self.atsws_per_plane)
        return f"atsw-c{c}-a{j}"

    def nic_name(self, nic: int) -> str:
        if self.wiring is not None:
            return self.wiring.node_names[self._node_base["nic"] + int(nic)]
        host, n = divmod(int(nic), self.nics_per_host)
        return f"{self.host_name(host)}/nic{n}"

    def node_name(self, node: int) -> str:
        if self.wiring is not None:
            self.node_kind(node)  # the range check
            return self.wiring.node_names[int(node)]
        kind = self.node_kind(node)
        index = int(node) - self._node_base[kind]
        return getattr(self, f"{kind}_name")(index)

    def link_name(self, link: int) -> str:
        """Stable name of a physical link: 'lower:upper', with '#m' for a parallel member."""
        link = int(link)
        if not 0 <= link < self.num_links:
            raise FabricError(f"link id {link} out of range [0, {self.num_links})")
        lo, hi = self.link_ends
        name = f"{self.node_name(int(lo[link]))}:{self.node_name(int(hi[link]))}"
        members = self.agg_links if link >= self.agg_base else self.rack_links
        if link >= self.rack_base and members > 1:
            base = self.agg_base if link >= self.agg_base else self.rack_base
            name += f"#{(link - base) % members}"
        return name

    def arc_name(self, arc: int) -> str:
        link = int(arc) // 2
        lo, hi = self.link_ends
        a, b = self.node_name(int(lo[link])), self.node_name(int(hi[link]))
        return f"{a}>{b}" if arc % 2 == 0 else f"{b}>{a}"

    @cached_property
    def node_names(self) -> tuple[str, ...]:
        """The name of every node, by node id (hosts, NICs, RTSWs, CTSWs, ATSWs)."""
        if self.wiring is not None:
            return self.wiring.node_names
        hosts = [self.host_name(h) for h in range(self.num_hosts)]
        nics = [f"{host}/nic{n}" for host in hosts for n in range(self.nics_per_host)]
        return (
            *hosts, *nics,
            *(self.rtsw_name(i) for i in range(self.num_rtsws)),
            *(self.ctsw_name(i) for i in range(self.num_ctsws)),
            *(self.atsw_name(i) for i in range(self.num_atsws)),
        )  # fmt: skip

    @cached_property
    def link_names(self) -> tuple[str, ...]:
        """The name of every link, by link id (`link_name` of each, made at once)."""
        names = self.node_names
        lo, hi = self.link_ends
        out = [f"{names[a]}:{names[b]}" for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
        for base, end, members in ((self.rack_base, self.agg_base, self.rack_links),
                                   (self.agg_base, self.num_links, self.agg_links)):  # fmt: skip
            if members > 1:
                for link in range(base, end):
                    out[link] += f"#{(link - base) % members}"
        return tuple(out)

    @cached_property
    def _link_index(self) -> dict[str, int]:
        return {name: link for link, name in enumerate(self.link_names)}

    @cached_property
    def _node_index(self) -> dict[str, int]:
        if self.wiring is not None:  # a slot no device fills has no name to look up
            present = self.present
            return {name: node for node, name in enumerate(self.node_names) if present[node]}
        return {name: node for node, name in enumerate(self.node_names)}

    def link_index(self) -> Mapping[str, int]:
        """Link ids by canonical name ('lower:upper[#m]'; `link_by_name` takes 'b:a' too)."""
        return self._link_index

    def node_index(self) -> Mapping[str, int]:
        """Node ids by name."""
        return self._node_index

    def link_by_name(self, name: str) -> int:
        """Link id for a link name; 'a:b' and 'b:a' are both accepted."""
        index = self._link_index
        if name in index:
            return index[name]
        base, sep, member = name.partition("#")
        a, colon, b = base.partition(":")
        if colon:
            swapped = f"{b}:{a}" + (sep + member if sep else "")
            if swapped in index:
                return index[swapped]
            if not sep:
                members = [n for n in (f"{base}#0", f"{b}:{a}#0") if n in index]
                if members:
                    raise FabricError(
                        f"unknown link {name!r} in fabric {self.name!r}: its switches are "
                        f"joined by parallel links, named {members[0][:-2]}#0, #1, ...")
        if name in self._node_index:
            raise FabricError(
                f"{name!r} is a node of fabric {self.name!r}, not a link (a link is named "
                "'A:B'; a switch goes down whole as 'SWITCH=drain')")
        raise FabricError(f"unknown link {name!r} in fabric {self.name!r}")

    def node_by_name(self, name: str) -> int:
        try:
            return self._node_index[name]
        except KeyError:
            raise FabricError(f"unknown node {name!r} in fabric {self.name!r}") from None

    def switch_kind(self, name: str) -> str:
        """"rtsw", "ctsw" or "atsw" for a switch's name; FabricError for any other name."""
        node = self._node_index.get(name)
        kind = None if node is None else self.node_kind(node)
        if kind not in SWITCH_TIERS:
            raise FabricError(f"{name!r} is not a switch of fabric {self.name!r}")
        return kind

    def host_by_name(self, name: str) -> int:
        node = self.node_by_name(name)
        if self.node_kind(node) != "host":
            raise FabricError(f"{name!r} is a {self.node_kind(node)}, not a host")
        return node - self._node_base["host"]

    def switch_links(self, switch_name: str) -> np.ndarray:
        """All link ids touching a switch (for draining a whole switch)."""
        node = self.node_by_name(switch_name)
        if self.node_kind(node) in ("host", "nic"):
            raise FabricError(f"{switch_name!r} is not a switch")
        lo, hi = self.link_ends
        return np.flatnonzero((lo == node) | (hi == node))

    # ---- general graph view -----------------------------------------------------
    def graph(self) -> nx.MultiDiGraph:
        """A networkx view (node names, arc ids as keys) for cross-checks on small fabrics."""
        import networkx as nx

        g = nx.MultiDiGraph(name=self.name)
        src, dst = self.arc_ends
        for arc in range(self.num_arcs):
            g.add_edge(
                self.node_name(int(src[arc])),
                self.node_name(int(dst[arc])),
                key=arc,
                capacity=float(self.capacity[arc]),
            )
        return g

    def summary(self) -> dict[str, object]:
        """Counts and capacities an operator wants at a glance."""
        cap = self.capacity * np.repeat(self.installed, 2)  # a missing cable carries nothing
        kind = np.repeat(self.link_kind, 2)
        rack_up = cap[0::2][self.link_kind == RACK].sum() / max(self.num_racks, 1)
        nic_up = cap[0::2][self.link_kind == ACCESS].sum() / max(self.num_racks, 1)
        base, present = self._node_base, self.present

        def count(kind: str, end: str) -> int:
            return int(present[base[kind] : base[end]].sum())

        out: dict[str, object] = {
            "name": self.name,
            "pods": self.pods,
            "racks": -(-count("rtsw", "ctsw") // self.rtsws_per_rack),
            "hosts": count("host", "nic"),
            "gpus": count("nic", "rtsw") // self.ports_per_nic,
            "rtsws": count("rtsw", "ctsw"),
            "ctsws": count("ctsw", "atsw"),
            "atsws": count("atsw", "end"),
            "links": int(self.installed.sum()),
            "access_gbps_total": float(cap[0::2][kind[0::2] == ACCESS].sum()),
            "rack_uplink_ratio": float(rack_up / nic_up) if nic_up else 0.0,
        }
        if self.rtsws_per_rack > 1 or self.planes > 1:
            out["rtsws_per_rack"], out["planes"] = self.rtsws_per_rack, self.planes
        if self.ports_per_nic > 1:
            out["ports_per_nic"] = self.ports_per_nic
        for tier, value in zip(SWITCH_TIERS, self.te_entries, strict=True):
            if tier == "atsw" and not self.num_atsws:
                continue  # one pod, no aggregation layer: no ATSW to hold entries
            out[f"{tier}_te_entries"] = "unlimited" if value is None else value
        if self.wiring is not None:
            out["links_not_installed"] = int(self.num_links - out["links"])  # type: ignore[operator]
            out["switches_with_own_te_entries"] = len(self.wiring.budgets)
            if self.wiring.pod_names:  # the operator's pod names, in pod order
                out["pod_names"] = ", ".join(n or f"pod{p}"
                                             for p, n in enumerate(self.wiring.pod_names))
            if self.wiring.rack_names:
                out["racks_named"] = sum(1 for n in self.wiring.rack_names if n)
        if self.num_agg_links and cap[0::2][self.link_kind == AGG].any():
            per_ctsw_down = cap[0::2][self.link_kind == RACK].sum() / self.num_ctsws
            per_ctsw_up = cap[0::2][self.link_kind == AGG].sum() / self.num_ctsws
            out["agg_taper"] = float(per_ctsw_down / per_ctsw_up)
        return out
