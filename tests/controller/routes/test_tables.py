"""Column tables against entry-by-entry models: the same routes, the same plans."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.clos import PRESETS, build
from controller.routes.checks import entry_role, switch_ports
from controller.routes.entries import CTSW_DOWN, build_routes
from controller.routes.plan import STAGE_NAMES, Add, Batch, Delete, Op, Plan, Replace, diff
from controller.routes.tables import (
    OWNER,
    Entry,
    RouteSet,
    Table,
    match_keys,
    match_rows,
    splice_of,
)

FABRIC = build(PRESETS["small"])
SWITCHES = ("rtsw-p0-r0", "ctsw-p0-c0", "ctsw-p1-c1", "atsw-c0-a0")


def reference_diff(installed: RouteSet, wanted: RouteSet, owner: str = OWNER) -> Plan:
    """The plan worked out one entry at a time with dicts (the model `diff` must match)."""
    staged: dict[tuple[int, str], list[Op]] = {}
    blocked: list[Entry] = []
    for switch in sorted(set(installed.tables) | set(wanted.tables)):
        have = {e.match: e for e in installed.table(switch)}
        want = {e.match: e for e in wanted.table(switch)}
        for key, new in sorted(want.items()):
            old = have.get(key)
            if old == new:
                continue
            at = (CTSW_DOWN - entry_role(FABRIC, new), switch)
            if old is None:
                staged.setdefault(at, []).append(Add(new))
            elif old.owner != owner:
                blocked.append(new)
            else:
                staged.setdefault(at, []).append(Replace(old, new))
        for key, old in sorted(have.items()):
            if old.owner == owner and key not in want:
                at = (CTSW_DOWN + entry_role(FABRIC, old), switch)
                staged.setdefault(at, []).append(Delete(old))
    stages: list[list[Batch]] = [[] for _ in STAGE_NAMES]
    for (stage, switch), ops in sorted(staged.items()):
        ordered = sorted(ops, key=lambda op: (*op.entry.match, isinstance(op, Delete)))
        stages[stage].append(Batch.of_ops(switch, ordered))
    return Plan(tuple(tuple(s) for s in stages), tuple(sorted(blocked)))


def _entries(draw: st.DrawFn, owners: tuple[str, ...]) -> list[Entry]:
    """Entries on a few switches, on their own links, some of other owners and buckets."""
    ports = {sw: sorted(p) for sw, p in _PORTS.items()}
    out = []
    for _ in range(draw(st.integers(0, 30))):
        sw = draw(st.sampled_from(SWITCHES))
        out.append(Entry(sw, draw(st.sampled_from(ports[sw][:4])), draw(st.integers(0, 3)),
                         draw(st.sampled_from(ports[sw])), draw(st.sampled_from(owners)),
                         draw(st.sampled_from((-1, -1, 0, 3)))))  # fmt: skip
    return out


_PORTS = {sw: p for sw, p in switch_ports(FABRIC).items() if sw in SWITCHES}


def _route_set(entries: list[Entry]) -> RouteSet:
    return RouteSet.from_entries({e.key: e for e in entries}.values())


@st.composite
def route_pairs(draw: st.DrawFn) -> tuple[RouteSet, RouteSet]:
    installed = _route_set(_entries(draw, (OWNER, OWNER, "ops")))
    wanted = _route_set(_entries(draw, (OWNER,)))
    if draw(st.booleans()):  # wanted shares part of what is installed, as after a push
        keep = [e for e in installed if e.owner == OWNER and draw(st.booleans())]
        wanted = _route_set([*keep, *wanted])
    return installed, wanted


@settings(max_examples=60, deadline=None)
@given(route_pairs())
def test_diff_on_columns_plans_what_the_entry_model_plans(pair: tuple[RouteSet, RouteSet]):
    installed, wanted = pair
    plan, ref = diff(installed, wanted, FABRIC), reference_diff(installed, wanted)
    assert [[(b.switch, b.ops) for b in s] for s in plan.stages] == [
        [(b.switch, b.ops) for b in s] for s in ref.stages
    ]
    assert plan.blocked == ref.blocked and plan.counts() == ref.counts()
    assert len(plan) == len(ref)


def test_a_table_into_an_empty_switch_is_pushed_as_the_wanted_table_itself(random_assignment):
    wanted = build_routes(FABRIC, random_assignment(FABRIC, np.random.default_rng(3), 300))
    plan = diff(RouteSet(), wanted, FABRIC)
    for _, batch in plan.batches():
        if batch.switch.startswith(("rtsw", "atsw")):
            assert batch.put is wanted.table(batch.switch)  # no copy, no entry objects
    assert plan == reference_diff(RouteSet(), wanted)
    assert diff(wanted, wanted, FABRIC).stages == tuple(() for _ in STAGE_NAMES)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 400))
def test_built_tables_are_the_entries_they_list(random_assignment, seed: int, n: int):
    routes = build_routes(FABRIC, random_assignment(FABRIC, np.random.default_rng(seed), n))
    listed = list(routes)
    again = RouteSet.from_entries(listed)  # made entry by entry
    assert again == routes and list(again) == listed
    for name, table in routes.tables.items():
        assert all(e.switch == name for e in table)
        keys = match_keys(table)[0]
        assert (np.diff(keys) > 0).all()  # sorted by match, one entry per match
        assert table == tuple(sorted(table, key=lambda e: e.match))
        assert Table.of(name, reversed(table)) == table


@settings(max_examples=60, deadline=None)
@given(route_pairs(), route_pairs())
def test_updated_sets_then_removes_like_a_dict(a: tuple[RouteSet, RouteSet], b):
    for sw in SWITCHES:
        table, put, drop = a[0].table(sw), a[1].table(sw), b[0].table(sw)
        model = {e.match: e for e in table}
        model.update({e.match: e for e in put})
        for e in drop:
            model.pop(e.match, None)
        assert table.updated(put, drop) == tuple(model[k] for k in sorted(model))


@settings(max_examples=60, deadline=None)
@given(route_pairs(), route_pairs())
def test_spliced_by_the_positions_found_ahead_is_updated(a: tuple[RouteSet, RouteSet], b):
    for sw in SWITCHES:
        table, put, drop = a[0].table(sw), a[1].table(sw), b[0].table(sw)
        found = splice_of(table, put, drop)
        if found is None:  # a row of put dropped by the same batch: updated handles it
            assert len(put) and len(drop)
            continue
        gone, at = found
        assert gone.dtype == at.dtype == np.int32 and at.size == len(put)
        got, want = table.spliced(gone, at, put), table.updated(put, drop)
        assert got == want
        assert [c.dtype for c in got.columns()] == [c.dtype for c in want.columns()]


@settings(max_examples=40, deadline=None)
@given(route_pairs())
def test_match_rows_finds_each_row_in_its_own_pair(pair: tuple[RouteSet, RouteSet]):
    """Pairs matched all at once: a row of right[i] finds its match in left[i] only."""
    left = [pair[0].table(sw) for sw in SWITCHES]
    right = [pair[1].table(sw) for sw in (*SWITCHES[1:], SWITCHES[0])]  # other switches too
    right = [Table(a.switch, b.in_port, b.dst_host, b.next_hop, b.owner, b.qp)
             for a, b in zip(left, right, strict=True)]  # fmt: skip
    matched = match_rows(left, right)
    assert matched is not None
    pos, found = matched
    start = np.cumsum([0] + [len(t) for t in left])
    row = 0
    for i, (a, b) in enumerate(zip(left, right, strict=True)):
        at = {e.match: k for k, e in enumerate(a)}
        for e in b:
            k = at.get(e.match)
            assert bool(found[row]) == (k is not None)
            assert k is None or pos[row] == start[i] + k
            row += 1
    assert row == found.size
    bad = Table("x", np.array([-1]), np.array([0]), np.array([0]), "o", np.array([-1]))
    assert match_rows([bad, bad], [bad, bad]) is None  # out of range: pair by pair instead


def test_match_keys_compare_across_tables_and_order_out_of_range_ids():
    a = Table.of("x", [Entry("x", 1, 2, 0), Entry("x", 1, 2, 0, qp=7), Entry("x", 3, 0, 0)])
    b = Table.of("x", [Entry("x", 1, 2, 9, qp=7), Entry("x", 2, 5, 9)])
    ka, kb = match_keys(a, b)
    assert ka[1] == kb[0] and len(set(ka.tolist()) | set(kb.tolist())) == 4
    huge = Table.of("x", [Entry("x", 2**40, 2**30, 0), Entry("x", -1, 0, 0), Entry("x", 5, 0, 0)])
    (kh,) = match_keys(huge)
    assert (np.diff(kh) > 0).all()


def test_a_batch_of_ops_keeps_the_last_op_per_match_and_lists_ops_in_match_order():
    e1, e2 = Entry("x", 1, 0, 5), Entry("x", 2, 0, 5)
    batch = Batch.of_ops("x", [Delete(e2), Add(e1), Replace(e2, e2._replace(next_hop=6))])
    assert batch.ops == (Add(e1), Replace(e2, e2._replace(next_hop=6)))
    assert batch.counts() == (1, 1, 0) and len(batch) == 2
    assert Batch.of_ops("x", [Add(e2), Delete(e1)]).ops == (Delete(e1), Add(e2))
