"""A planned push as row positions: spliced, the wanted tables and the route-log deltas are
the ones `Table.updated` and the route log's matching give."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model.clos import PRESETS, build
from controller.routes.checks import switch_ports
from controller.routes.plan import diff
from controller.routes.tables import OWNER, RouteSet, Table
from controller.service.splices import apply_splices, splices_of
from controller.service.state import RouteLog

FABRIC = build(PRESETS["small"])
SWITCHES = ("rtsw-p0-r0", "rtsw-p0-r1", "ctsw-p0-c0", "ctsw-p1-c1", "atsw-c0-a0")
PORTS = {sw: np.array(sorted(p)) for sw, p in switch_ports(FABRIC).items() if sw in SWITCHES}


def _table(rng: np.random.Generator, sw: str, keys: np.ndarray, owner: str = OWNER) -> Table:
    """Rows of `keys` (unique (in_port index, dst_host, qp) codes), next hops drawn."""
    keys = np.unique(keys)
    ports = PORTS[sw]
    in_port = ports[np.minimum(keys // 64, min(3, ports.size - 1))]
    dst, qp = keys // 4 % 16, keys % 4 - 1
    order = np.lexsort((qp, dst, in_port))
    in_port, dst, qp = in_port[order], dst[order], qp[order]
    _, first = np.unique(np.stack([in_port, dst, qp], 1), axis=0, return_index=True)
    first.sort()
    nh = rng.choice(ports, size=first.size)
    return Table(sw, in_port[first], dst[first], nh, owner, qp[first])


def _routes(rng: np.random.Generator, n: int) -> RouteSet:
    return RouteSet({sw: t for sw in SWITCHES
                     if (t := _table(rng, sw, rng.integers(0, 256, size=n)))})  # fmt: skip


def _changed(rng: np.random.Generator, routes: RouteSet) -> RouteSet:
    """Some rows re-hopped, some dropped, some added; a switch emptied or filled."""
    tables = {}
    for sw in SWITCHES:
        t = routes.table(sw)
        keep = rng.random(len(t)) > 0.3
        nh = np.where(rng.random(len(t)) < 0.3, rng.choice(PORTS[sw], size=len(t)), t.next_hop)
        kept = Table(sw, t.in_port, t.dst_host, nh, t.owner, t.qp).take(keep)
        new = _table(rng, sw, rng.integers(0, 256, size=int(rng.integers(0, 20))))
        merged = new.updated(kept, Table.empty(sw)) if rng.random() > 0.1 else Table.empty(sw)
        if merged:
            tables[sw] = merged
    return RouteSet(tables)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 40), st.booleans())
def test_a_spliced_plan_gives_the_tables_and_deltas_matching_gives(
    seed: int, n: int, other_owner: bool
) -> None:
    rng = np.random.default_rng(seed)
    wanted = _routes(rng, n)
    installed = wanted
    if other_owner and wanted.tables:  # the switches hold an entry that is not ours
        sw = sorted(wanted.tables)[0]
        t = wanted.table(sw)
        ops = _table(rng, sw, np.array([255]), owner="ops")
        installed = RouteSet({**wanted.tables, sw: t.updated(ops, Table.empty(sw))})
    after = _changed(rng, wanted)
    plan = diff(installed, after, FABRIC)
    splices = splices_of(plan, wanted, installed)
    assert splices is not None
    got = apply_splices(splices, plan)
    want: dict[str, Table] = {}
    for _, batch in plan.batches():
        sw = batch.switch
        want[sw] = (want[sw] if sw in want else wanted.table(sw)).updated(batch.put, batch.drop)
    assert sorted(got.tables) == sorted(want)
    for sw, table in want.items():
        assert got.tables[sw].same(table)
        assert [c.dtype for c in got.tables[sw].columns()] == [c.dtype for c in table.columns()]
    # exact when the switches the plan touches hold just the wanted tables (the entry not
    # ours may sit on a switch the plan leaves alone)
    touched = {batch.switch for _, batch in plan.batches()}
    exact = all(installed.table(sw).same(wanted.table(sw)) for sw in touched)
    assert (splices.logged is not None) == exact
    if not exact:
        assert not got.known
        return
    # the delta a read-back of the tables after logs, with and without the positions
    read = RouteSet({**installed.tables, **{sw: t for sw, t in want.items() if t}})
    read = RouteSet({sw: t for sw, t in read.tables.items() if t})
    matched, fast = RouteLog(installed), RouteLog(installed)
    switches = list(want)
    a = matched.record(read, switches)
    b = fast.record(read, switches, {sw: (add, rem) for sw, (_, add, rem) in got.known.items()})
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert list(a.added) == list(b.added) and list(a.removed) == list(b.removed)
