"""The checks both route file forms share (controller.formats.route_checks)."""

from __future__ import annotations

import numpy as np

from controller.formats.route_checks import check_flows
from controller.model.fabric import Fabric
from controller.model.flows import ALL_QPS


def test_a_bad_demand_is_shown_as_a_number(tiny: Fabric) -> None:
    """NaN and an out-of-range demand read as the numbers a file holds, not as numpy's
    reprs (np.float64(nan))."""
    one = np.ones(2, np.int64)
    columns = (np.array([0, 0]), np.array([4, 5]), np.array([np.nan, 1e12]), 0 * one,
               0 * one, np.full(2, ALL_QPS))  # fmt: skip
    texts = [text for _, text in check_flows(tiny, ("a",), columns)]
    assert "flows[0][2]: must be a finite number, got nan" in texts
    assert any(t.startswith("flows[1][2]: 1000000000000.0 is not within") for t in texts)
    assert not any("np." in t for t in texts)
