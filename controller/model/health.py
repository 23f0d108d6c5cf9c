"""Link health: which links are up, down or degraded, and the capacity that leaves.

Health is one float per physical link: 1.0 up, 0.0 down, anything between is the fraction
of capacity a degraded link still carries. Both directions of a cable share its state.
A drained switch is all of its links set to 0. A link whose cable the fabric's inventory
does not have (not installed) is 0 in every health, `all_up` included, and cannot be set up.

The controller's health also remembers its drains (`LinkHealth.reported`): each link of a
drained switch keeps, beneath the drain, the factor it had or is reported meanwhile, and
gets it back when the last drain on it ends, so a link down before a maintenance drain is
not brought up by the end of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.errors import FabricError
from controller.model import validation
from controller.model.fabric import Fabric


@dataclass(frozen=True)
class LinkHealth:
    """Per-link capacity factor in [0, 1]; immutable, cheap to derive new states from."""

    factor: np.ndarray = field(repr=False)  # float64 [num_links]
    drained: frozenset[int] = frozenset()  # switches (node ids) drained by a report
    # for each link of a drained switch: its factor beneath the drain (never changed here)
    beneath: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.factor.setflags(write=False)

    def same(self, other: LinkHealth) -> bool:
        """The same factors, drains and factors beneath them."""
        return (np.array_equal(self.factor, other.factor) and self.drained == other.drained
                and dict(self.beneath) == dict(other.beneath))  # fmt: skip

    def holding(self, fabric: Fabric, link: int, drained: Iterable[int] | None = None) -> list[int]:
        """The drained switches (node ids; of `drained` if given) at either end of `link`."""
        ends = fabric.link_ends
        among = self.drained if drained is None else drained
        return [int(end[link]) for end in ends if int(end[link]) in among]

    def reported(
        self, fabric: Fabric, links: Mapping[int, float],
        switches: Mapping[int, bool] | None = None,
    ) -> LinkHealth:
        """The health after a report: `switches` (node id: True drained, False brought
        back), then `links` set. A drained switch's links are 0; beneath, each keeps the
        factor it had (or is reported meanwhile) and gets it back when the last drain on
        it ends. Bringing back a switch that is not drained brings every installed link
        of it up, as a report of each would (a link the other end's drain holds stays 0)."""
        factor, drained, beneath = self.factor.copy(), set(self.drained), dict(self.beneath)
        for node, down in (switches or {}).items():
            ids = fabric.switch_links(fabric.node_name(node))
            ids = ids[fabric.installed[ids]]
            if down:
                for k in ids.tolist():
                    beneath.setdefault(k, float(factor[k]))
                factor[ids] = 0.0
                drained.add(node)
                continue
            was = node in drained
            drained.discard(node)
            for k in ids.tolist():
                under = beneath.pop(k, 1.0) if was else 1.0
                if self.holding(fabric, k, drained):  # the other end's drain holds it
                    beneath[k] = under
                else:
                    factor[k] = under
        for k, value in links.items():
            if k in beneath:  # held down by a drain: takes effect when it ends
                beneath[k] = validation.fraction(value, f"link {k}", FabricError)
        rest = {k: v for k, v in links.items() if k not in beneath}
        out = LinkHealth(factor, frozenset(drained), beneath)
        return out.with_factors(rest) if rest else out

    @classmethod
    def all_up(cls, fabric: Fabric) -> LinkHealth:
        """Every installed link up; a link without a cable is 0 (see `Fabric.installed`)."""
        return cls(fabric.installed.astype(np.float64))

    def changed(self, fabric: Fabric) -> np.ndarray:
        """Link ids whose factor differs from `all_up`: the ones down, degraded or (wrongly)
        up against the fabric's cables."""
        return np.flatnonzero(self.factor != fabric.installed)

    def with_factors(self, updates: Mapping[int, float]) -> LinkHealth:
        """A new state with some links set to a factor (0 down, 1 up, between degraded)."""
        factor = self.factor.copy()
        for link, value in updates.items():
            if not 0 <= link < factor.size:
                raise FabricError(f"link id {link} out of range [0, {factor.size})")
            factor[link] = validation.fraction(value, f"link {link}", FabricError)
        return LinkHealth(factor, self.drained, self.beneath)

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


LINK_VERBS = ("down", "up", "degrade")  # `tectl link VERB LINK [FRACTION]`, the older form


def link_factor(name: str, state: str) -> float:
    """A link's capacity factor from the one spelling every command takes after `LINK=`:
    'down' (0), 'up' (1) or the fraction of capacity left ('0.5': degraded to half)."""
    state = state.strip().lower()
    if state == "down":
        return 0.0
    if state == "up":
        return 1.0
    if state == "drain":
        raise FabricError(f"{name}=drain: drain takes a switch (SWITCH=drain); a link is "
                          f"taken down ({name}=down), brought up or degraded ({name}=0.5)")
    try:
        value = float(state)
    except ValueError:
        raise FabricError(
            f"bad link state {state!r} for {name!r}: use down, up or the fraction of capacity "
            "left (LINK=0.5)"
        ) from None
    return validation.fraction(value, name, FabricError)


def link_changes(words: Sequence[str]) -> list[tuple[str, float]]:
    """(link name, capacity factor) from a command line: 'LINK=STATE' words (as --fail
    takes them; see `link_factor`), or the older forms 'down LINK', 'up LINK' and
    'degrade LINK FRACTION' (also 'degrade LINK=FRACTION')."""
    words = list(words)
    if words and words[0] in LINK_VERBS:
        verb, rest = words[0], words[1:]
        if verb == "degrade" and len(rest) == 1 and "=" in rest[0]:
            name, _, value = rest[0].partition("=")
            return [(name, link_factor(name, value))]
        if verb == "degrade" and len(rest) == 2:
            return [(rest[0], link_factor(rest[0], rest[1]))]
        if verb != "degrade" and len(rest) == 1:
            return [(rest[0], 0.0 if verb == "down" else 1.0)]
        usage = "degrade LINK FRACTION" if verb == "degrade" else f"{verb} LINK"
        raise FabricError(f"expected `{usage}` or LINK=STATE, got {' '.join(words)!r}")
    out = []
    for word in words:
        name, eq, state = word.partition("=")
        if not eq:
            raise FabricError(
                f"{word!r}: give the link's state as LINK=down, LINK=up or LINK=0.5 (the "
                "fraction of capacity left)"
            )
        # SWITCH=drain: reported down, which the controller takes for every link of it; a
        # switch is drained or brought back, never degraded (a link's name has a ':')
        said = state.strip().lower()
        if ":" in name:
            out.append((name, link_factor(name, state)))
        elif said in ("drain", "down", "up"):
            out.append((name, 1.0 if said == "up" else 0.0))
        else:
            raise FabricError(f"{word}: a switch is drained ({name}=drain) or brought back "
                              f"({name}=up), not degraded; a link is named A:B")  # fmt: skip
    if not out:
        raise FabricError("no link given: LINK=down, LINK=up or LINK=0.5")
    return out


def factor_state(factor: float) -> tuple[str, float | None]:
    """A capacity factor as a link report: ('down', None), ('up', None) or ('degrade', f)."""
    if factor == 0.0:
        return "down", None
    if factor == 1.0:
        return "up", None
    return "degrade", factor


def parse_health(
    fabric: Fabric, specs: Iterable[str], base: LinkHealth | None = None
) -> LinkHealth:
    """Apply textual health specs: 'LINK' or 'LINK=down' (down), 'LINK=up', 'LINK=0.5'
    (degraded to half), 'SWITCH=drain' (every link of a switch down); 'LINK=degrade:0.5'
    is taken too."""
    health = base or LinkHealth.all_up(fabric)
    updates: dict[int, float] = {}
    given: dict[int, str] = {}  # link -> the spec that named it
    drained: dict[int, str] = {}  # link -> the drain that took it down (drains may overlap)

    def twice(link: int, first: str, spec: str) -> FabricError:
        return FabricError(f"link {fabric.link_name(link)} given twice ({first!r} and "
                           f"{spec!r}): give each link one state")  # fmt: skip

    for spec in specs:
        spec = spec.strip()
        name, eq, state = spec.partition("=")
        state = state.strip().lower()
        if eq and not state:
            raise FabricError(f"{spec!r}: no state after '='; give LINK, LINK=down, LINK=up, "
                              "LINK=0.5 or SWITCH=drain")  # fmt: skip
        state = state or "down"
        if state == "drain":  # its links down: a link also given down agrees, else a clash
            if ":" in name:  # a link's name (two ends), not a switch's
                raise FabricError(f"{spec}: drain names a switch; take a link down with "
                                  f"{name}=down (or {name} alone)")  # fmt: skip
            for link in map(int, fabric.switch_links(name)):
                if link in given and updates[link] != 0.0:
                    raise twice(link, given[link], spec)
                drained.setdefault(link, spec)
                updates[link] = 0.0
            continue
        link = fabric.link_by_name(name)
        if link in given:
            raise twice(link, given[link], spec)
        given[link] = spec
        factor = link_factor(name, state.removeprefix("degrade:"))
        if link in drained and factor != 0.0:
            raise twice(link, drained[link], spec)
        updates[link] = factor
    fabric.check_installed(link for link, value in updates.items() if value > 0)
    return health.with_factors(updates)


def random_failures(fabric: Fabric, per_pod: int, seed: int) -> LinkHealth:
    """`per_pod` distinct random installed RTSW-CTSW links down in every pod (seeded);
    FabricError when a pod has fewer."""
    rng = np.random.default_rng(seed)
    per_pod_links = fabric.rtsws_per_pod * fabric.ctsws_per_pod * fabric.rack_links
    down: list[int] = []
    for pod in range(fabric.pods):
        first = fabric.rack_base + pod * per_pod_links
        links = first + np.arange(per_pod_links)
        links = links[fabric.installed[links]]  # a cable never installed cannot fail
        if per_pod > links.size:
            raise FabricError(f"{per_pod} random RTSW-CTSW links down in every pod: a pod of "
                              f"fabric {fabric.name!r} has {links.size} RTSW-CTSW links")
        picks = rng.choice(links, size=per_pod, replace=False)
        down.extend(np.sort(picks).tolist())
    return LinkHealth.all_up(fabric).down(down)
