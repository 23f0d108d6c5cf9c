"""Strict JSON and table cells."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest

from controller.formats.output import (
    Percent,
    Progress,
    counts_text,
    format_table,
    plural,
    strict,
    to_json,
)


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


def test_a_stage_shows_its_steps_as_they_come(capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger("fabric_te.test.steps")
    logger.setLevel(logging.WARNING)  # as a quiet library leaves it
    progress = Progress()
    with progress.stage("work", steps="fabric_te.test.steps"):
        logging.getLogger("fabric_te.test.steps.child").info("round %d of %s", 1, "two")
        logger.debug("not a step")
    with progress.stage("quiet", steps="fabric_te.test.steps"):
        pass
    err = capsys.readouterr().err
    assert re.fullmatch(r"  work \.\.\.\n    round 1 of two\n  work: \d+\.\d\d s\n"
                        r"  quiet \.\.\. \d+\.\d\d s\n", err), err
    # the logger is left as it was: no handler of the stage's, its own level
    assert logger.level == logging.WARNING and not logger.handlers
    with Progress(quiet=True).stage("work", steps="fabric_te.test.steps"):
        logger.info("not shown either: --json keeps stderr for errors")
    assert "not shown either" not in capsys.readouterr().err
    assert not logger.handlers


def test_a_failed_stage_with_steps_says_so_on_its_own_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.getLogger("fabric_te.test.steps")
    with pytest.raises(RuntimeError), Progress().stage("work", steps="fabric_te.test.steps"):
        logger.warning("a step")
        raise RuntimeError("broken")
    assert capsys.readouterr().err.endswith("    a step\n  work: failed\n")
    assert not logger.handlers
