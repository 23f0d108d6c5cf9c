"""Parametric 3-tier Clos fabrics and the presets built from published figures.

A `ClosSpec` is the whole description; `build` turns it into a `controller.fabric.Fabric`.
The CTSW->ATSW capacity is given either as a link speed or as a taper (CTSW downlink
capacity : uplink capacity, e.g. 7 for the 1:7 of Meta's 24K-GPU clusters).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import numpy as np

from controller.errors import FabricError
from controller.model import validation
from controller.model.fabric import (
    DEFAULT_TE_ENTRIES,
    MAX_PORTS_PER_NIC,
    SWITCH_TIERS,
    Fabric,
    TeEntries,
)


@dataclass(frozen=True)
class ClosSpec:
    """Dimensions and link speeds of a 3-tier Clos. Speeds in Gbps."""

    name: str = "custom"
    pods: int = 1
    racks_per_pod: int = 4
    hosts_per_rack: int = 2
    nics_per_host: int = 8
    ctsws_per_pod: int = 16
    rack_links: int = 1
    atsws_per_plane: int = 0
    agg_links: int = 1
    nic_gbps: float = 400.0
    rack_link_gbps: float = 400.0
    agg_link_gbps: float | None = None  # explicit CTSW-ATSW link speed, or
    taper: float | None = None  # CTSW down:up capacity ratio (e.g. 7.0 for 1:7)
    # TE entries per switch: one number (or null = unlimited) for every tier, or per tier
    # {rtsw: .., ctsw: .., atsw: ..} (tiers not named keep the default)
    te_entries: object = DEFAULT_TE_ENTRIES
    # RTSWs per rack (S; NIC n of a host goes to RTSW slot n % S: S = nics_per_host is
    # rail-optimized) and planes (Q; CTSW c reaches only slots s with s % Q == c % Q)
    rtsws_per_rack: int = 1
    planes: int = 1
    # ports of a GPU's NIC (P): each port is one NIC of the model (nics_per_host counts
    # ports), a host has nics_per_host / P GPUs; P = 2 is a dual-port NIC on two ToRs
    ports_per_nic: int = 1

    def validate(self) -> None:
        """Raise FabricError naming the first bad field (see controller.model.validation)."""
        validation.text(self.name, "name", FabricError)
        validation.dimensions({name: getattr(self, name) for name in validation.DIMENSION_CAPS},
                          FabricError)  # fmt: skip
        if self.nics_per_host % self.rtsws_per_rack:
            raise FabricError(
                f"rtsws_per_rack: {self.rtsws_per_rack} does not divide nics_per_host "
                f"({self.nics_per_host}); every RTSW of a rack needs as many NICs of each host"
            )
        if not (isinstance(self.ports_per_nic, int) and not isinstance(self.ports_per_nic, bool)
                and 1 <= self.ports_per_nic <= MAX_PORTS_PER_NIC
                and self.nics_per_host % self.ports_per_nic == 0):  # fmt: skip
            raise FabricError(
                f"ports_per_nic: {self.ports_per_nic!r} must be an integer in "
                f"[1, {MAX_PORTS_PER_NIC}] that divides nics_per_host ({self.nics_per_host}, "
                "which counts ports)"
            )
        if self.rtsws_per_rack % self.planes or self.ctsws_per_pod % self.planes:
            raise FabricError(
                f"planes: {self.planes} must divide rtsws_per_rack ({self.rtsws_per_rack}) "
                f"and ctsws_per_pod ({self.ctsws_per_pod})"
            )
        if self.pods > 1 and self.atsws_per_plane == 0:
            raise FabricError("atsws_per_plane: must be >= 1 when pods > 1")
        validation.gbps(self.nic_gbps, "nic_gbps", FabricError)
        validation.gbps(self.rack_link_gbps, "rack_link_gbps", FabricError)
        if self.atsws_per_plane:
            if self.agg_link_gbps is None and self.taper is None:
                raise FabricError("agg_link_gbps, taper: an aggregation layer (atsws_per_plane "
                                  f"{self.atsws_per_plane}) needs the speed of its links: give "
                                  "one of them")  # fmt: skip
            if self.agg_link_gbps is not None and self.taper is not None:
                raise FabricError("agg_link_gbps, taper: give exactly one of them")
            if self.taper is None:
                validation.gbps(self.agg_link_gbps, "agg_link_gbps", FabricError)
            else:
                validation.number(self.taper, "taper", validation.MIN_TAPER, validation.MAX_TAPER,
                              FabricError)  # fmt: skip
                derived = self.effective_agg_link_gbps
                if not validation.MIN_GBPS <= derived <= validation.MAX_GBPS:
                    raise FabricError(
                        f"taper: {self.taper!r} makes CTSW-ATSW links of {derived:g} Gbps, "
                        f"outside [{validation.MIN_GBPS:g}, {validation.MAX_GBPS:g}]"
                    )

    @property
    def effective_agg_link_gbps(self) -> float:
        """CTSW-ATSW link speed, derived from the taper when that is what was given."""
        if not self.atsws_per_plane:
            return 0.0  # no aggregation layer: no such links
        if self.taper is None:
            return float(self.agg_link_gbps or 0.0)
        # a CTSW's downlinks: K to every RTSW of its plane in the pod
        rtsws = self.racks_per_pod * self.rtsws_per_rack // self.planes
        ctsw_down = rtsws * self.rack_links * self.rack_link_gbps
        return ctsw_down / (self.taper * self.atsws_per_plane * self.agg_links)


def te_entries(value: object) -> TeEntries:
    """Per-tier TE entry budgets from a number, null, a {tier: number} mapping or a
    [rtsw, ctsw, atsw] list; FabricError names the bad part."""

    def one(v: object, where: str) -> int | None:
        if v is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise FabricError(f"{where} must be an integer >= 0 or null (unlimited), got {v!r}")
        return v

    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(SWITCH_TIERS))
        if unknown:
            raise FabricError(
                f"te_entries: unknown tier(s) {', '.join(map(str, unknown))}; "
                f"known: {', '.join(SWITCH_TIERS)}"
            )
        return tuple(  # type: ignore[return-value]
            one(value.get(t, DEFAULT_TE_ENTRIES), f"te_entries.{t}") for t in SWITCH_TIERS
        )
    if isinstance(value, (list, tuple)):
        if len(value) != len(SWITCH_TIERS):
            raise FabricError(f"te_entries: give {len(SWITCH_TIERS)} values {SWITCH_TIERS}")
        return tuple(  # type: ignore[return-value]
            one(v, f"te_entries.{t}") for t, v in zip(SWITCH_TIERS, value, strict=True)
        )
    return (one(value, "te_entries"),) * len(SWITCH_TIERS)  # type: ignore[return-value]


def build(spec: ClosSpec, link_gbps: Mapping[str, float] | None = None) -> Fabric:
    """Build the fabric; `link_gbps` overrides single links' speeds by link name."""
    spec.validate()
    budgets = te_entries(spec.te_entries)
    n_access = spec.pods * spec.racks_per_pod * spec.hosts_per_rack * spec.nics_per_host
    n_rack = (spec.pods * spec.racks_per_pod * spec.rtsws_per_rack * spec.ctsws_per_pod
              * spec.rack_links)  # fmt: skip
    num_links = n_access + n_rack + spec.pods * spec.ctsws_per_pod * spec.atsws_per_plane * (
        spec.agg_links
    )
    link_cap = np.empty(num_links)
    link_cap[:n_access] = spec.nic_gbps
    link_cap[n_access : n_access + n_rack] = spec.rack_link_gbps
    link_cap[n_access + n_rack :] = spec.effective_agg_link_gbps
    fabric = Fabric(
        name=spec.name,
        pods=spec.pods,
        racks_per_pod=spec.racks_per_pod,
        hosts_per_rack=spec.hosts_per_rack,
        nics_per_host=spec.nics_per_host,
        ctsws_per_pod=spec.ctsws_per_pod,
        rack_links=spec.rack_links,
        atsws_per_plane=spec.atsws_per_plane,
        agg_links=spec.agg_links,
        capacity=np.repeat(link_cap, 2),
        te_entries=budgets,
        rtsws_per_rack=spec.rtsws_per_rack,
        planes=spec.planes,
        ports_per_nic=spec.ports_per_nic,
    )
    if link_gbps:
        capacity = fabric.capacity.copy()
        given: dict[int, str] = {}
        for name, gbps in sorted(link_gbps.items()):
            validation.text(name, "links", FabricError, limit=4 * validation.MAX_NAME)
            speed = validation.gbps(gbps, f"links.{name}", FabricError)
            try:
                link = fabric.link_by_name(name)
            except FabricError as err:
                raise FabricError(f"links.{name}: {err}") from None
            if link in given:
                raise FabricError(
                    f"links.{name}: the same link as links.{given[link]} (one entry per link)"
                )
            given[link] = name
            capacity[2 * link : 2 * link + 2] = speed
        fabric = replace(fabric, capacity=capacity)
    return fabric


PRESETS: dict[str, ClosSpec] = {
    # 2 pods x 2 racks x 2 hosts x 2 NICs = 16 GPUs; 4 CTSWs per pod (1:1), one ATSW per
    # plane at 1:2 taper. Small enough to reason about by hand.
    "tiny": ClosSpec(
        name="tiny", pods=2, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
        ctsws_per_pod=4, atsws_per_plane=1, taper=2.0,
    ),
    # 2 pods x 8 racks x 2 hosts x 4 NICs = 128 GPUs, 8 CTSWs, 2 ATSWs per plane, 1:2.
    "small": ClosSpec(
        name="small", pods=2, racks_per_pod=8, hosts_per_rack=2, nics_per_host=4,
        ctsws_per_pod=8, atsws_per_plane=2, taper=2.0,
    ),
    # 2 pods x 2 racks x 2 hosts x 2 NICs with 2 parallel links at both switch tiers: the
    # smallest fabric that exercises parallel-member choices.
    "wide": ClosSpec(
        name="wide", pods=2, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
        ctsws_per_pod=2, rack_links=2, atsws_per_plane=2, agg_links=2, taper=1.0,
    ),
    # One AI zone: 192 racks x 2 hosts x 8 GPUs = 3,072 GPUs, 16 CTSWs, 1:1.
    "pod": ClosSpec(
        name="pod", pods=1, racks_per_pod=192, hosts_per_rack=2, nics_per_host=8,
        ctsws_per_pod=16,
    ),
    # Meta's 24K-GPU cluster: 8 pods joined by ATSWs tapered 1:7.
    "meta-24k": ClosSpec(
        name="meta-24k", pods=8, racks_per_pod=192, hosts_per_rack=2, nics_per_host=8,
        ctsws_per_pod=16, atsws_per_plane=4, taper=7.0,
    ),
    # The same with over-provisioned rack uplinks (18 for 16 NICs, 1:1.125).
    "meta-24k-1125": ClosSpec(
        name="meta-24k-1125", pods=8, racks_per_pod=192, hosts_per_rack=2, nics_per_host=8,
        ctsws_per_pod=18, atsws_per_plane=4, taper=7.0,
    ),
    # A 100K-GPU cluster: 32 zones of 3,072 GPUs (four 24K-class clusters' worth) joined by
    # one aggregation layer tapered 1:2.8, as published for the later, larger clusters.
    "cluster-100k": ClosSpec(
        name="cluster-100k", pods=32, racks_per_pod=192, hosts_per_rack=2, nics_per_host=8,
        ctsws_per_pod=16, atsws_per_plane=8, taper=2.8,
    ),
    # Rail-optimized, as NVIDIA's DGX H100 SuperPOD reference: 4 scalable units (racks here)
    # of 32 servers x 8 NICs at 400G = 1,024 GPUs; each SU has 8 rail leaves (NIC n of every
    # server on leaf n), each leaf 32 ports down and 32 up: 2 to each of 16 spines, 1:1.
    # `planes: 8` makes it rail-only (each rail's leaves reach only its 2 spines).
    "superpod-4su": ClosSpec(
        name="superpod-4su", pods=1, racks_per_pod=4, hosts_per_rack=32, nics_per_host=8,
        rtsws_per_rack=8, ctsws_per_pod=16, rack_links=2,
    ),
    # Dual-ToR, dual-plane, rail-optimized, as Alibaba's HPN pod: 15 segments of 128 hosts
    # x 8 NICs (15,360 GPUs); every NIC has two 200G ports, modelled as NICs 2n and 2n+1
    # (`ports_per_nic: 2`), on ToRs of planes 0 and 1 (16 ToRs a segment: 8 rails x 2
    # planes); each ToR has 60 x 400G uplinks, one to each aggregation switch of its plane
    # (60 a plane, 1.067:1). The core above the pod (15:1) is left out: one pod, 2 tiers.
    "hpn-pod": ClosSpec(
        name="hpn-pod", pods=1, racks_per_pod=15, hosts_per_rack=128, nics_per_host=16,
        rtsws_per_rack=16, planes=2, ctsws_per_pod=120, nic_gbps=200.0, ports_per_nic=2,
    ),
}  # fmt: skip

DEFAULT_PRESET = "pod"


def preset(name: str) -> ClosSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise FabricError(
            f"unknown fabric preset {name!r}; known: {', '.join(sorted(PRESETS))}"
        ) from None


SPEC_FIELDS = frozenset(f.name for f in fields(ClosSpec))
