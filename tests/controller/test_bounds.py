"""Lower bounds: hand-derived values and validity against concrete routings."""

from __future__ import annotations

import numpy as np
import pytest

from controller.bounds import lower_bound
from controller.commodities import commodities
from controller.fabric import Fabric
from controller.flows import FlowSet
from controller.health import LinkHealth, parse_health
from controller.paths import CROSS_POD, SAME_POD
from sim.clos import ClosSpec, build


@pytest.fixture
def pod2() -> Fabric:
    return build(ClosSpec(pods=1, racks_per_pod=2, hosts_per_rack=2, nics_per_host=2,
                          ctsws_per_pod=2))  # fmt: skip


def test_rack_egress_cut(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2], [4, 5, 6], 400.0)
    bound = lower_bound(pod2, LinkHealth.all_up(pod2), flows)
    assert bound.parts["rack-egress"] == pytest.approx(1.5)
    # three unsplit 400G flows over two uplinks: one carries two
    assert bound.parts["rack-egress-unsplit"] == pytest.approx(2.0)
    assert bound.value == pytest.approx(2.0) and bound.name == "rack-egress-unsplit"


def test_unsplit_bound_with_failure(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1], [4, 5], 400.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c1"])
    bound = lower_bound(pod2, health, flows)
    assert bound.parts["rack-egress"] == pytest.approx(2.0)
    assert bound.parts["rack-egress-unsplit"] == pytest.approx(2.0)


def test_largest_flow_over_degraded_paths(pod2: Fabric) -> None:
    flows = FlowSet.build([0], [4], 400.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c0=0.5", "rtsw-p0-r0:ctsw-p0-c1=0.25"])
    assert lower_bound(pod2, health, flows).parts["largest-flow"] == pytest.approx(2.0)


def test_access_bound(pod2: Fabric) -> None:
    flows = FlowSet.build([0, 1], [4, 4], 300.0)  # NIC 4 receives 600 over 400
    assert lower_bound(pod2, LinkHealth.all_up(pod2), flows).parts["access"] == 1.5


def test_pod_cut(tiny: Fabric) -> None:
    # 8 flows of 400G out of pod 0 over 4 CTSW->ATSW links of 400G
    src = np.arange(8)
    flows = FlowSet.build(src, src + 8, 400.0)
    bound = lower_bound(tiny, LinkHealth.all_up(tiny), flows)
    assert bound.parts["pod-egress"] == pytest.approx(2.0)
    assert bound.value == pytest.approx(2.0)


def test_no_path_is_infinite(pod2: Fabric) -> None:
    flows = FlowSet.build([0], [4], 100.0)
    health = parse_health(pod2, ["rtsw-p0-r0:ctsw-p0-c0", "rtsw-p0-r0:ctsw-p0-c1"])
    assert lower_bound(pod2, health, flows).value == float("inf")


def test_empty_flows(pod2: Fabric) -> None:
    assert lower_bound(pod2, LinkHealth.all_up(pod2), FlowSet.empty()).value == 0.0


def test_commodities_aggregate_by_rack_pair(tiny: Fabric) -> None:
    flows = FlowSet.build([0, 1, 2, 0, 0], [4, 5, 6, 8, 3], [100.0, 200, 50, 400, 10])
    comm = commodities(tiny, flows)
    assert comm.src_rtsw.tolist() == [0, 0] and comm.dst_rtsw.tolist() == [1, 2]
    assert comm.demand.tolist() == [350.0, 400.0]
    assert comm.cls.tolist() == [SAME_POD, CROSS_POD]
    assert comm.flow_comm.tolist() == [0, 0, 0, 1, -1]  # last flow stays in its rack
