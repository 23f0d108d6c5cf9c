"""The table-counting helpers of controller.routes.entries against plain references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.assignment import Assignment
from controller.model.clos import PRESETS, build
from controller.model.flows import ALL_QPS
from controller.routes.budget import fit_and_count, fit_tables, table_usage
from controller.routes.entries import _FOLDED, _fold_buckets, _stable_order

TINY = build(PRESETS["tiny"])


def _fold_reference(in_arc, out_arc, dst, qp):  # type: ignore[no-untyped-def]
    """Per (in_arc, dst): with an all-buckets entry every bucket folds into it; else the
    most common next hop (ties: smallest arc) becomes ALL_QPS on its first bucket."""
    out = list(qp)
    keys: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(in_arc.tolist(), dst.tolist(), strict=True)):
        keys.setdefault(key, []).append(i)
    for rows in keys.values():
        if any(qp[i] == ALL_QPS for i in rows):
            for i in rows:
                if qp[i] != ALL_QPS:
                    out[i] = _FOLDED
            continue
        hops = [int(out_arc[i]) for i in rows]
        mode = min(set(hops), key=lambda h: (-hops.count(h), h))
        winners = [i for i in rows if out_arc[i] == mode]
        for i in winners:
            out[i] = _FOLDED
        out[winners[0]] = ALL_QPS
    return out


# (in_arc, dst host, qp, next hop) rows of a few keys, many of them shared
_KEY_ROWS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(-1, 5), st.integers(0, 3)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(_KEY_ROWS)
def test_fold_buckets_matches_the_reference(rows: list[tuple[int, int, int, int]]) -> None:
    arr = np.array(rows, np.int64)
    in_arc, dst, qp, out = arr.T
    # distinct (in_arc, dst, qp) in sorted order, as _installed passes them
    key = (in_arc * TINY.num_hosts + dst) * 8 + (qp - ALL_QPS)
    _, first = np.unique(key, return_index=True)
    args = (in_arc[first], out[first], dst[first], qp[first])
    assert _fold_buckets(TINY, *args).tolist() == _fold_reference(*args)


@settings(max_examples=80, deadline=None)
@given(_KEY_ROWS)
def test_fold_buckets_counts_uplinks_like_the_reference(
    rows: list[tuple[int, int, int, int]],
) -> None:
    """Bucket entries leave their source RTSW on one of its uplinks: those are counted per
    key in a table instead of sorted, with the same answer."""
    arr = np.array(rows, np.int64)
    nic, dst, qp, c = arr.T
    rack = TINY.rack_of_nic(nic)
    in_arc = TINY.up(TINY.access_link(nic))
    out = TINY.up(TINY.rack_link(rack, c))
    key = (in_arc * TINY.num_hosts + dst) * 8 + (qp - ALL_QPS)
    _, first = np.unique(key, return_index=True)
    args = (in_arc[first], out[first], dst[first], qp[first])
    assert _fold_buckets(TINY, *args).tolist() == _fold_reference(*args)


def test_fit_and_count_counts_what_table_usage_counts() -> None:
    from controller.model.flows import FlowSet

    flows = FlowSet.build([0, 1, 2, 3, 0], [5, 9, 13, 6, 9], 100.0)
    a = Assignment(flows, np.array([0, 1, 2, 3, 1], np.int64))
    arcs = a.arcs(TINY)
    for budget in (100, 2, 1, 0):
        fitted, usage = fit_and_count(TINY, a, budget, arcs)
        assert fitted.path.tolist() == fit_tables(TINY, a, budget).path.tolist()
        assert usage.tolist() == table_usage(TINY, fitted).tolist()
        assert usage.max() <= budget


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, (1 << 50) - 1), max_size=200), st.integers(0, 50))
def test_stable_order_is_a_stable_argsort(values: list[int], bits: int) -> None:
    keys = np.array(values, np.int64) >> (50 - bits)  # many ties when bits is small
    assert _stable_order(keys).tolist() == np.argsort(keys, kind="stable").tolist()
