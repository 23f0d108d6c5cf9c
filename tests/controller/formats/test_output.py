"""Strict JSON and table cells."""

from __future__ import annotations

import json

import numpy as np
import pytest

from controller.formats.output import Percent, counts_text, format_table, plural, strict, to_json


def test_non_finite_numbers_become_null() -> None:
    data = {"lp_mlu": float("nan"), "mlu": float("inf"), "n": np.int64(3),
            "x": np.float64(0.5), "v": np.array([1.0, np.nan]), "t": (1, 2)}  # fmt: skip
    text = to_json(data)
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "lp_mlu": None, "mlu": None, "n": 3, "x": 0.5, "v": [1.0, None], "t": [1, 2],
    }  # fmt: skip


def test_strict_refuses_what_json_cannot_say() -> None:
    with pytest.raises(TypeError, match="object"):
        strict({"a": object()})


def test_percent_cells_are_right_aligned_percentages() -> None:
    table = format_table(["routing", "busbw"], [["te", Percent(1.0)], ["ecmp", Percent(0.125)]])
    assert table.splitlines()[2:] == ["te       100.0%", "ecmp      12.5%"]


def test_counts_are_thousands_separated_the_same_way_everywhere() -> None:
    table = format_table(["n"], [[9504], [61824], [999]])
    assert table.splitlines()[2:] == [" 9,504", "61,824", "   999"]
    assert counts_text({"add": 61824, "replace": 9504, "delete": 0}) == (
        "add 61,824, replace 9,504, delete 0"
    )
    assert plural(1, "stage") == "1 stage" and plural(9504, "operation") == "9,504 operations"
