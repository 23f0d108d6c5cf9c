"""Single failures: the elements listed, their links, and the health after each."""

from __future__ import annotations

import numpy as np
import pytest

from controller.errors import FabricError
from controller.model.fabric import ACCESS, Fabric
from controller.model.failures import ELEMENT_KINDS, single_failures
from controller.model.health import LinkHealth


def test_every_switch_link_and_switch_is_listed_once(tiny: Fabric) -> None:
    sf = single_failures(tiny, LinkHealth.all_up(tiny))
    kinds = [ELEMENT_KINDS[k] for k in sf.kind]
    links = int((tiny.link_kind != ACCESS).sum())
    assert kinds.count("link") == links
    assert kinds.count("rtsw") == tiny.num_rtsws
    assert kinds.count("ctsw") == tiny.num_ctsws
    assert kinds.count("atsw") == tiny.num_atsws
    assert len(set(sf.names)) == len(sf)
    for i, name in enumerate(sf.names):
        if kinds[i] == "link":
            assert sf.links_of(i).tolist() == [tiny.link_by_name(name)]
        else:  # a switch takes down exactly the links touching it
            assert sf.links_of(i).tolist() == sorted(tiny.switch_links(name).tolist())


def test_health_after_takes_down_only_the_element(tiny: Fabric) -> None:
    health = LinkHealth.all_up(tiny).with_factors({tiny.rack_base: 0.5})
    sf = single_failures(tiny, health)
    i = sf.index(tiny.rtsw_name(1))
    after = sf.health_after(health, i)
    down = np.flatnonzero(after.factor == 0.0)
    assert down.tolist() == sf.links_of(i).tolist()
    keep = np.setdiff1d(np.arange(tiny.num_links), down)
    assert np.array_equal(after.factor[keep], health.factor[keep])


def test_elements_already_down_are_not_listed(tiny: Fabric) -> None:
    ctsw = tiny.ctsw_name(0)
    link = tiny.rack_base + 3
    health = LinkHealth.all_up(tiny).down(tiny.switch_links(ctsw)).down([link])
    sf = single_failures(tiny, health)
    assert ctsw not in sf.names and tiny.link_names[link] not in sf.names
    with pytest.raises(FabricError, match="not a switch-to-switch link"):
        sf.index(ctsw)


def test_kinds_filter_and_unknown_kind(tiny: Fabric) -> None:
    sf = single_failures(tiny, LinkHealth.all_up(tiny), kinds=("ctsw",))
    assert len(sf) == tiny.num_ctsws
    with pytest.raises(FabricError, match="unknown element kind"):
        single_failures(tiny, LinkHealth.all_up(tiny), kinds=("spine",))
