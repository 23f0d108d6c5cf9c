"""Route queries as table slices: every page is the slice of the plain entry list."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import InputError, PreconditionError
from controller.routes.tables import Entry, RouteSet
from controller.service import route_query
from controller.service.route_query import RouteQuery, Selection

SWITCHES = ("rtsw-0", "rtsw-1", "ctsw-0")
entries = st.lists(
    st.builds(
        Entry,
        st.sampled_from(SWITCHES),
        st.integers(0, 9),
        st.integers(0, 9),
        st.integers(0, 9),
        st.just("fabric-te"),
        st.sampled_from((-1, 0, 3)),
    ),  # fmt: skip
    max_size=60,
    unique_by=lambda e: e.key,
)


@settings(max_examples=60, deadline=None)
@given(entries=entries, size=st.integers(0, 13), hosts=st.none() | st.frozensets(st.integers(0, 9)))
def test_pages_of_a_selection_are_slices_of_the_list(
    entries: list[Entry], size: int, hosts: frozenset[int] | None
) -> None:
    routes = RouteSet.from_entries(entries)
    plain = [e for e in routes if hosts is None or e.dst_host in hosts]
    chosen = RouteQuery(frozenset(), hosts).select(routes)
    assert len(chosen) == len(plain) and list(chosen) == plain
    assert chosen[3:11] == plain[3:11] and chosen[::2] == plain[::2]
    got = [e for part, _ in route_query.chunks(chosen, 5, size, "") for e in part]
    assert got == plain
    if plain:
        assert chosen[-1] == plain[-1] and chosen[0] == plain[0]


def test_a_page_lists_only_its_own_rows() -> None:
    table = RouteSet.from_entries(Entry("rtsw-0", 1, d, 2) for d in range(100)).tables["rtsw-0"]
    fresh = RouteSet({"rtsw-0": table.take(slice(0, 100))})  # nothing listed yet
    part, token = route_query.page(Selection.of(fresh), 7, 10, "")
    assert [e.dst_host for e in part] == list(range(10)) and token == ".7:10"
    assert fresh.tables["rtsw-0"]._entries is None  # the other 90 rows were never made
    assert fresh.tables["rtsw-0"].rows(90, 100) == tuple(table)[90:]


def test_a_token_names_its_version_and_epoch() -> None:
    """A page token of another version, or of another controller process (whose versions
    count from 1 again), is refused rather than read as an offset into this table."""
    rows = Selection.of(RouteSet.from_entries(Entry("rtsw-0", 1, d, 2) for d in range(30)))
    part, token = route_query.page(rows, 4, 10, "", "e1")
    assert token == "e1.4:10"
    assert route_query.page(rows, 4, 10, token, "e1")[0] == list(rows[10:20])
    with pytest.raises(PreconditionError, match="another controller process"):
        route_query.page(rows, 4, 10, token, "e2")
    with pytest.raises(PreconditionError, match="changed since"):
        route_query.page(rows, 5, 10, token, "e1")
    with pytest.raises(PreconditionError, match="another controller process"):
        route_query.page(rows, 4, 10, "4:10", "e1")  # a token cut before epochs were
    for junk in ("e1.x:10", "e1.4", "x:10"):
        with pytest.raises(InputError, match="not a token"):
            route_query.page(rows, 4, 10, junk, "e1")


def test_a_named_fabrics_switches_are_known_to_route_queries() -> None:
    """The defect: a switch was known by the prefix 'rtsw-'/'ctsw-'/'atsw-', so every
    switch of an inventory ('leaf-a0', 'spine-a0', 'super-00') was refused; a host is
    still refused, and an unknown name is named with the fabric."""
    from controller.model.clos import PRESETS, build
    from controller.model.inventory import fabric_from_cables
    from controller.model.name_templates import named_cable_list

    names = {"host": "gpu-{pod_letter}{rack}{host}", "rtsw": "leaf-{pod_letter}{rack}",
             "ctsw": "spine-{pod_letter}{ctsw}", "atsw": "super-{plane}{atsw}"}  # fmt: skip
    fabric = fabric_from_cables("dc1", *named_cable_list(build(PRESETS["small"]), names))
    switches = [n for n in fabric.switch_names() if n.startswith(("leaf-", "spine-", "super-"))]
    assert {n.split("-")[0] for n in switches} == {"leaf", "spine", "super"}
    assert RouteQuery.parse(fabric, switches, None).switches == frozenset(switches)
    for wrong in (fabric.host_name(0), "leaf-zz", "rtsw-p0-r0"):
        with pytest.raises(InputError, match=f"unknown switch '{wrong}' in fabric 'dc1'"):
            RouteQuery.parse(fabric, [wrong], None)
