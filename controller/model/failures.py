"""Single failures: every element of a fabric that can fail alone, and the health after it.

An element is a switch-to-switch link (RTSW-CTSW or CTSW-ATSW) or a whole switch (RTSW,
CTSW, ATSW: all of its links down, as a drain). NIC links are not elements: a NIC whose link
is down has no path under any routing, so nothing can be repaired for it. Only elements
still carrying something under the given health are listed (a link already down, or a
switch with every link down, cannot fail again). The order is fixed: links by id, then
switches by node id, so a sweep over them is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.errors import FabricError, FabricTeError
from controller.model.fabric import ACCESS, Fabric
from controller.model.health import LinkHealth

ELEMENT_KINDS = ("link", "rtsw", "ctsw", "atsw")


@dataclass(frozen=True)
class SingleFailures:
    """Elements that can fail, as arrays: element i is `names[i]` of kind
    `ELEMENT_KINDS[kind[i]]`, and takes down links `links[start[i]:start[i + 1]]`."""

    names: tuple[str, ...]
    kind: np.ndarray  # int8 [n], index into ELEMENT_KINDS
    start: np.ndarray  # int64 [n + 1]
    links: np.ndarray  # int64, each element's links, sorted

    def __len__(self) -> int:
        return len(self.names)

    def links_of(self, i: int) -> np.ndarray:
        return self.links[self.start[i] : self.start[i + 1]]

    def index(self, name: str) -> int:
        """Element id by name; FabricError names the element when it is not listed."""
        try:
            return self.names.index(name)
        except ValueError:
            raise FabricError(
                f"{name!r} is not a switch-to-switch link or switch that is up in this fabric"
            ) from None

    def health_after(self, health: LinkHealth, i: int) -> LinkHealth:
        """`health` with element i failed (its links down)."""
        factor = health.factor.copy()
        factor[self.links_of(i)] = 0.0
        return LinkHealth(factor)


def check_kinds(
    kinds: tuple[str, ...], where: str = "", err: type[FabricTeError] = FabricError
) -> tuple[str, ...]:
    """`kinds`, or `err` naming the ones not in ELEMENT_KINDS (prefixed `where: `)."""
    unknown = sorted(set(kinds) - set(ELEMENT_KINDS))
    if unknown:
        raise err(f"{where + ': ' if where else ''}unknown element kind(s) {unknown}; known: "
                  f"{', '.join(ELEMENT_KINDS)}")  # fmt: skip
    return kinds


def single_failures(
    fabric: Fabric, health: LinkHealth, kinds: tuple[str, ...] = ELEMENT_KINDS
) -> SingleFailures:
    """Every element of `kinds` that is not already down under `health` (module docstring)."""
    check_kinds(kinds)
    up = health.factor > 0.0
    names: list[str] = []
    kind: list[int] = []
    groups: list[np.ndarray] = []
    if "link" in kinds:
        links = np.flatnonzero(up & (fabric.link_kind != ACCESS))
        names.extend(fabric.link_names[int(link)] for link in links)
        kind.extend([0] * links.size)
        groups.extend(links[:, None])
    lo, hi = fabric.link_ends
    ends = np.concatenate([lo, hi])
    owner = np.concatenate([np.arange(fabric.num_links)] * 2)
    order = np.argsort(ends, kind="stable")
    ends, owner = ends[order], owner[order]
    for k, tier in enumerate(ELEMENT_KINDS[1:], start=1):
        if tier not in kinds:
            continue
        first = fabric.node_id(tier, 0)
        count = {"rtsw": fabric.num_rtsws, "ctsw": fabric.num_ctsws,
                 "atsw": fabric.num_atsws}[tier]  # fmt: skip
        bounds = np.searchsorted(ends, np.arange(first, first + count + 1))
        for s in range(count):
            mine = np.sort(owner[bounds[s] : bounds[s + 1]])
            if not up[mine].any():
                continue
            names.append(fabric.node_name(first + s))
            kind.append(k)
            groups.append(mine)
    sizes = np.array([g.size for g in groups], dtype=np.int64)
    start = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum(sizes, out=start[1:])
    flat = np.concatenate(groups) if groups else np.zeros(0, np.int64)
    return SingleFailures(tuple(names), np.asarray(kind, np.int8), start, flat.astype(np.int64))
