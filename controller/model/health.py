"""Link health: which links are up, down or degraded, and the capacity that leaves.

Health is one float per physical link: 1.0 up, 0.0 down, anything between is the fraction
of capacity a degraded link still carries. Both directions of a cable share its state.
A drained switch is all of its links set to 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from controller.errors import FabricError
from controller.model import validation
from controller.model.fabric import Fabric


@dataclass(frozen=True)
class LinkHealth:
    """Per-link capacity factor in [0, 1]; immutable, cheap to derive new states from."""

    factor: np.ndarray = field(repr=False)  # float64 [num_links]

    def __post_init__(self) -> None:
        self.factor.setflags(write=False)

    @classmethod
    def all_up(cls, fabric: Fabric) -> LinkHealth:
        return cls(np.ones(fabric.num_links))

    def with_factors(self, updates: Mapping[int, float]) -> LinkHealth:
        """A new state with some links set to a factor (0 down, 1 up, between degraded)."""
        factor = self.factor.copy()
        for link, value in updates.items():
            if not 0 <= link < factor.size:
                raise FabricError(f"link id {link} out of range [0, {factor.size})")
            factor[link] = validation.fraction(value, f"link {link}", FabricError)
        return LinkHealth(factor)

    def down(self, links: Iterable[int]) -> LinkHealth:
        return self.with_factors({int(link): 0.0 for link in links})

    def arc_capacity(self, fabric: Fabric) -> np.ndarray:
        """Usable capacity of every arc in Gbps under this health."""
        if self.factor.size != fabric.num_links:
            raise FabricError(
                f"health covers {self.factor.size} links, fabric {fabric.name!r} has "
                f"{fabric.num_links}"
            )
        return fabric.capacity * np.repeat(self.factor, 2)

    def down_links(self) -> np.ndarray:
        return np.flatnonzero(self.factor == 0.0)

    def degraded_links(self) -> np.ndarray:
        return np.flatnonzero((self.factor > 0.0) & (self.factor < 1.0))


def parse_health(
    fabric: Fabric, specs: Iterable[str], base: LinkHealth | None = None
) -> LinkHealth:
    """Apply textual health specs: 'LINK' or 'LINK=down' (down), 'LINK=up', 'LINK=0.5'
    (degraded to half), 'SWITCH=drain' (every link of a switch down)."""
    health = base or LinkHealth.all_up(fabric)
    updates: dict[int, float] = {}
    for spec in specs:
        name, _, state = spec.strip().partition("=")
        state = state.strip().lower() or "down"
        if state == "drain":
            updates.update({int(link): 0.0 for link in fabric.switch_links(name)})
            continue
        link = fabric.link_by_name(name)
        if state == "down":
            updates[link] = 0.0
        elif state == "up":
            updates[link] = 1.0
        else:
            try:
                value = float(state)
            except ValueError:
                raise FabricError(
                    f"bad health state {state!r} for {name!r}: use down, up, drain or a "
                    "fraction in [0, 1]"
                ) from None
            updates[link] = validation.fraction(value, name, FabricError)
    return health.with_factors(updates)


def random_failures(fabric: Fabric, per_pod: int, seed: int) -> LinkHealth:
    """`per_pod` distinct random RTSW-CTSW links down in every pod (seeded)."""
    rng = np.random.default_rng(seed)
    per_pod_links = fabric.racks_per_pod * fabric.ctsws_per_pod * fabric.rack_links
    down: list[int] = []
    for pod in range(fabric.pods):
        first = fabric.rack_base + pod * per_pod_links
        picks = rng.choice(per_pod_links, size=min(per_pod, per_pod_links), replace=False)
        down.extend((first + np.sort(picks)).tolist())
    return LinkHealth.all_up(fabric).down(down)
