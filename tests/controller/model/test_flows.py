"""Flow sets: finding a flow again by its (source NIC, destination NIC) pair."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from controller.model.flows import (
    FlowSet,
    distinct,
    distinct_below,
    distinct_counts,
    match_pairs,
    pair_keys,
)


def test_pair_keys_agree_across_sets_exactly_when_the_pairs_do() -> None:
    a = FlowSet.build([0, 1, 2], [9, 3, 2], 1.0)
    b = FlowSet.build([1, 0, 9], [3, 9, 0], 1.0)
    ka, kb = pair_keys(a, b)
    assert ka[0] == kb[1] and ka[1] == kb[0]  # (0, 9) and (1, 3) in both
    assert kb[2] not in ka  # (9, 0) is not (0, 9)
    assert np.unique(np.concatenate([ka, kb])).size == 4


def test_match_pairs_finds_the_first_row_with_the_same_pair() -> None:
    rows = FlowSet.build([1, 0, 5, 1], [3, 9, 5, 3], 1.0)
    within = FlowSet.build([0, 1, 1, 7], [9, 3, 3, 2], 1.0)
    assert match_pairs(rows, within).tolist() == [1, 0, -1, 1]


def test_match_pairs_with_an_empty_side() -> None:
    rows = FlowSet.build([1, 2], [3, 4], 1.0)
    assert match_pairs(rows, FlowSet.empty()).tolist() == [-1, -1]
    assert match_pairs(FlowSet.empty(), rows).size == 0


@given(st.lists(st.integers(-3, 40), max_size=60), st.booleans())
def test_distinct_is_numpy_unique_in_order_or_not(values: list[int], in_order: bool) -> None:
    a = np.array(sorted(values) if in_order else values, dtype=np.int64)
    got = distinct(a)
    assert got.dtype == np.unique(a).dtype and got.tolist() == np.unique(a).tolist()
    keys, counts = distinct_counts(a)
    want_keys, want_counts = np.unique(a, return_counts=True)
    assert keys.tolist() == want_keys.tolist() and counts.tolist() == want_counts.tolist()


def test_distinct_below_is_unique_either_way() -> None:
    rng = np.random.default_rng(7)
    for size, n in ((5, 1_000), (900, 1_000), (0, 10)):  # a sort, then a mask, then none
        ids = rng.integers(0, n, size=size)
        got = distinct_below(ids, n)
        assert np.array_equal(got, np.unique(ids)) and got.dtype == np.int64
