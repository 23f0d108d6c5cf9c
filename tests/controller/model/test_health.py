"""Link health: parsing, capacities, drains and seeded random failures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import FabricError
from controller.model.fabric import Fabric
from controller.model.health import (
    LinkHealth,
    factor_state,
    link_changes,
    parse_health,
    random_failures,
)


def test_down_and_degraded_capacity(tiny: Fabric) -> None:
    health = parse_health(tiny, ["rtsw-p0-r0:ctsw-p0-c1", "rtsw-p0-r1:ctsw-p0-c2=0.25"])
    cap = health.arc_capacity(tiny)
    down = tiny.rack_link(0, 1)
    half = tiny.rack_link(1, 2)
    assert cap[tiny.up(down)] == 0 and cap[tiny.down(down)] == 0
    assert cap[tiny.up(half)] == pytest.approx(100.0)
    assert list(health.down_links()) == [down]
    assert list(health.degraded_links()) == [half]
    # the original state is untouched
    assert LinkHealth.all_up(tiny).arc_capacity(tiny)[tiny.up(down)] == 400


def test_drain_switch(tiny: Fabric) -> None:
    health = parse_health(tiny, ["ctsw-p1-c0=drain"])
    assert sorted(health.down_links().tolist()) == sorted(tiny.switch_links("ctsw-p1-c0").tolist())


def test_up_restores(tiny: Fabric) -> None:
    health = parse_health(tiny, ["rtsw-p0-r0:ctsw-p0-c1"])
    health = parse_health(tiny, ["rtsw-p0-r0:ctsw-p0-c1=up"], base=health)
    assert health.down_links().size == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rtsw-p0-r0:ctsw-p0-c9", "unknown link"),
        ("rtsw-p0-r0:ctsw-p0-c1=1.5", r"not within \[0, 1\]"),
        ("rtsw-p0-r0:ctsw-p0-c1=broken", "bad link state 'broken'"),
        ("host-p0-r0-h0=drain", "not a switch"),
        ("rtsw-p0-r0:ctsw-p0-c1=drain", "drain names a switch; take a link down with "
         "rtsw-p0-r0:ctsw-p0-c1=down"),
        ("ctsw-p0-c1=0.5", "is a node .* not a link .*'SWITCH=drain'"),
    ],
)
def test_bad_specs_are_named(tiny: Fabric, spec: str, message: str) -> None:
    with pytest.raises(FabricError, match=message):
        parse_health(tiny, [spec])


def test_a_link_given_twice_is_refused_and_parallel_links_are_named(wide: Fabric) -> None:
    """`--fail L --fail L=0.5` kept the last silently; a link of parallel members named
    without its member said only "unknown link"."""
    with pytest.raises(FabricError, match="given twice .*give each link one state"):
        parse_health(wide, ["rtsw-p0-r0:ctsw-p0-c0#0", "ctsw-p0-c0:rtsw-p0-r0#0=0.5"])
    with pytest.raises(FabricError, match=r"parallel links, named rtsw-p0-r0:ctsw-p0-c0#0, #1"):
        parse_health(wide, ["rtsw-p0-r0:ctsw-p0-c0"])
    # a drain and a link of that switch agree (down): not a clash
    drained = parse_health(wide, ["ctsw-p0-c0=drain", "rtsw-p0-r0:ctsw-p0-c0#0"])
    assert drained.factor[wide.link_by_name("rtsw-p0-r0:ctsw-p0-c0#0")] == 0.0
    # but a link of a drained switch given another state, in either order, is a clash (the
    # order decided which held); and a state left empty is not taken as "down"
    for specs in (["ctsw-p0-c0=drain", "rtsw-p0-r0:ctsw-p0-c0#0=0.5"],
                  ["rtsw-p0-r0:ctsw-p0-c0#0=up", "ctsw-p0-c0=drain"]):  # fmt: skip
        with pytest.raises(FabricError, match="given twice .*drain"):
            parse_health(wide, specs)
    with pytest.raises(FabricError, match="no state after '='"):
        parse_health(wide, ["rtsw-p0-r0:ctsw-p0-c0#0="])


def test_random_failures_seeded(small: Fabric) -> None:
    a = random_failures(small, per_pod=3, seed=7)
    b = random_failures(small, per_pod=3, seed=7)
    c = random_failures(small, per_pod=3, seed=8)
    assert np.array_equal(a.factor, b.factor)
    assert not np.array_equal(a.factor, c.factor)
    down = a.down_links()
    assert down.size == 3 * small.pods
    assert set(small.link_kind[down].tolist()) == {1}


@pytest.mark.parametrize(
    "words",
    [
        ["rtsw-p0-r0:ctsw-p0-c1=0.5"],  # the one spelling, as --fail takes it
        ["degrade", "rtsw-p0-r0:ctsw-p0-c1", "0.5"],  # the older `tectl link degrade`
        ["degrade", "rtsw-p0-r0:ctsw-p0-c1=0.5"],
    ],
)
def test_every_spelling_of_a_degraded_link_is_one_state(words: list[str]) -> None:
    assert link_changes(words) == [("rtsw-p0-r0:ctsw-p0-c1", 0.5)]


def test_link_changes_down_up_and_mistakes() -> None:
    assert link_changes(["down", "a:b"]) == link_changes(["a:b=down"]) == [("a:b", 0.0)]
    assert link_changes(["a:b=up", "c:d=0"]) == [("a:b", 1.0), ("c:d", 0.0)]
    # a switch drained: reported down, which the controller takes for all its links
    assert link_changes(["ctsw-p0-c1=drain"]) == [("ctsw-p0-c1", 0.0)]
    assert factor_state(0.5) == ("degrade", 0.5) and factor_state(0.0) == ("down", None)
    with pytest.raises(FabricError, match="give the link's state as LINK=down"):
        link_changes(["a:b"])
    with pytest.raises(FabricError, match="expected `degrade LINK FRACTION`"):
        link_changes(["degrade", "a:b"])
    with pytest.raises(FabricError, match="bad link state 'half'"):
        link_changes(["a:b=half"])
    # drain takes a switch, a switch is drained or back: both were taken as something else
    # (a link's drain as down, a switch at 0 as its drain)
    with pytest.raises(FabricError, match=r"a:b=drain: drain takes a switch \(SWITCH=drain\)"):
        link_changes(["a:b=drain"])
    for state in ("0", "0.5", "1"):
        with pytest.raises(FabricError, match="a switch is drained .* not degraded"):
            link_changes([f"ctsw-p0-c1={state}"])
    assert link_changes(["ctsw-p0-c1=up", "ctsw-p0-c2=DOWN"]) == [("ctsw-p0-c1", 1.0),
                                                                 ("ctsw-p0-c2", 0.0)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["link", "drain", "up"]), st.integers(0, 10_000),
                          st.sampled_from([0.0, 0.5, 1.0])), max_size=12))  # fmt: skip
def test_drains_hold_links_down_and_give_back_what_is_beneath(tiny: Fabric, ops) -> None:  # type: ignore[no-untyped-def]
    """Over random sequences of link reports, drains and ends of drains, the controller's
    health is what a plain model says: a link is 0 while a switch at either end is drained,
    else its last state reported (a switch brought back that was not drained reports every
    link of it up)."""
    fabric = tiny
    switches = [n for n in range(fabric.num_nodes) if fabric.node_kind(n) not in ("host", "nic")]
    lo, hi = fabric.link_ends
    level = fabric.installed.astype(float)
    drained: set[int] = set()
    health = LinkHealth.all_up(fabric)
    for what, pick, value in ops:
        if what == "link":
            k = int(np.flatnonzero(fabric.installed)[pick % int(fabric.installed.sum())])
            health = health.reported(fabric, {k: value})
            level[k] = value
            continue
        node = switches[pick % len(switches)]
        links = fabric.switch_links(fabric.node_name(node))
        links = links[fabric.installed[links]]
        health = health.reported(fabric, {}, {node: what == "drain"})
        if what == "drain":
            drained.add(node)
        elif node in drained:
            drained.discard(node)
        else:
            level[links] = 1.0
    held = np.isin(lo, list(drained)) | np.isin(hi, list(drained))
    assert np.array_equal(health.factor, np.where(held, 0.0, level))
    assert health.drained == drained
    assert set(health.beneath) == set(np.flatnonzero(held & fabric.installed).tolist())
