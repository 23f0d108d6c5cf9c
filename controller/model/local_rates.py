"""Max-min rates after a local change, from the rates before: some rows take other paths,
some arcs lose capacity, and only the rows the change reaches are filled again.

A `Plane` is rows on fixed paths (arc ids, -1 padded; demand for `weight` QPs each) with
their max-min fair rates (controller.model.rates.max_min_rates) and the rows per arc. After
a change (`Plane.after`), the set D starts as the changed rows; the rows outside D keep
their rates, D is filled (controller.model.kernels.fill) on what they leave of each arc, and
the result is checked on every arc D touches (before or after): an allocation is the max-min
fair one, which is unique, exactly when it is feasible and every row is at its demand or
crosses a saturated arc on which no row has a higher per-QP level (its bottleneck). Rows
outside D away from D's arcs keep their bottleneck (nothing on their arcs changed), and so
does a row whose bottleneck in the base is an arc D does not touch: the plane indexes each
row by its first bottleneck once (kernels.bottleneck_index), and the check visits only the
rows bottlenecked on D's arcs, not every row crossing them; a row that fails the check joins
D (for a row of D, the rows above it on its saturated arcs join: only a saturated arc can be
its bottleneck), an over-full arc's rows join, and D is filled again, until the check passes
or D grows beyond `most` rows (then the whole plane is filled again).

A whole refill fills the reduced problem of controller.model.rates (rows crossing an arc
offered more than its capacity, grouped by those arcs and their per-QP demand) without
grouping every row again: the plane keeps its groups, and only the changed rows and the rows
on an arc that crossed its capacity either way can change key; they leave their groups and
join their new ones (kernels.regroup), on a copy. On a hashed meta-24k plane (a million
rows, 185,000 groups) that is ~35 ms against ~120 ms grouping and filling anew (the rates
equal to rounding: the groups are filled in another order); a group's
weight is a sum of QP counts, exact in floating point, so an emptied group is exactly 0
(weights that are not whole numbers fill anew).

Exactness: the rates are the max-min allocation to the checks' tolerance (relative 1e-7),
not to the bit: filling D alone adds in another order than filling the whole plane.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field

import numpy as np

from controller.model import kernels
from controller.model.flows import distinct_below
from controller.model.rates import max_min_rates, row_groups

TOL = 1e-7  # relative tolerance of the bottleneck checks
SLACK = 1.0 + 1e-9  # progressive filling's, as controller.model.rates fills


def arcs_csr(arcs: np.ndarray, num_arcs: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, rows): the rows on each arc, arc a's at rows[start[a]:start[a + 1]], sorted."""
    hops = arcs.shape[1]
    flat = arcs.ravel()
    valid = np.flatnonzero(flat >= 0)
    order = np.argsort(flat[valid], kind="stable")
    rows = (valid // hops)[order].astype(np.int64)
    start = np.zeros(num_arcs + 1, np.int64)
    np.cumsum(np.bincount(flat[valid], minlength=num_arcs), out=start[1:])
    # within an arc the rows come in flat order, i.e. by row (a row crosses an arc once)
    return start, rows


@dataclass
class Plane:
    """Rows on fixed paths and their max-min rates, indexed for local changes."""

    arcs: np.ndarray  # int64 [rows, hops]
    demand: np.ndarray  # per row, for all its QPs
    weight: np.ndarray  # QPs a row stands for
    cap: np.ndarray  # capacity per arc the rates were filled on
    # the max-min rates on `cap`, if known (a plane after a change: `moved`); else filled
    known: InitVar[np.ndarray | None] = None
    # the rows per arc (arcs_csr of `arcs`), if known (`moved` updates them, not sorts)
    csr: InitVar[tuple[np.ndarray, np.ndarray] | None] = None
    rate: np.ndarray = field(init=False)
    start: np.ndarray = field(init=False, repr=False)
    rows: np.ndarray = field(init=False, repr=False)
    load: np.ndarray = field(init=False, repr=False)  # offered load per arc
    base_sum: np.ndarray = field(init=False, repr=False)  # rates per arc
    base_max: np.ndarray = field(init=False, repr=False)  # highest per-QP level per arc
    refills: int = 0  # changes that took the whole plane
    unexplained: int = 0  # of them, those where a row of D had no bottleneck to blame
    _epoch: int = 0
    # the max-min fill's groups of the rows on `cap` (rates.row_groups, with the arcs over
    # capacity first), made by the first whole refill; each whole refill updates a copy
    _groups: tuple | None = field(default=None, init=False, repr=False)
    # the rows by the arc that bottlenecks them (kernels.bottleneck_index), made by the first
    # change: a row whose bottleneck the change leaves alone is not checked again
    _necks: tuple | None = field(default=None, init=False, repr=False)

    def __post_init__(self, known: np.ndarray | None,
                      csr: tuple[np.ndarray, np.ndarray] | None) -> None:  # fmt: skip
        self.arcs = np.ascontiguousarray(self.arcs, np.int64)
        self.demand = np.ascontiguousarray(self.demand, np.float64)
        self.weight = np.ascontiguousarray(self.weight, np.float64)
        self.cap = np.ascontiguousarray(self.cap, np.float64)
        if known is None:
            self.rate = max_min_rates(self.arcs, self.cap, self.demand, weight=self.weight)
        else:
            self.rate = np.ascontiguousarray(known, np.float64)
        num = self.cap.size
        self.start, self.rows = arcs_csr(self.arcs, num) if csr is None else csr
        valid = self.arcs >= 0
        hops = self.arcs.shape[1]
        self.load = np.bincount(self.arcs[valid], np.repeat(self.demand, hops)[valid.ravel()],
                                minlength=num)  # fmt: skip
        self.base_sum = np.bincount(self.arcs[valid], np.repeat(self.rate, hops)[valid.ravel()],
                                    minlength=num)  # fmt: skip
        level = (self.rate / self.weight)[self.rows]
        self.base_max = np.zeros(num)
        full = np.flatnonzero(np.diff(self.start) > 0)
        if full.size:
            self.base_max[full] = np.maximum.reduceat(level, self.start[full])
        # the groups' weights are sums of rows' QP counts: exact while they are whole numbers
        self._integral = bool((self.weight == np.round(self.weight)).all()
                              and self.weight.sum() < 2.0**52)  # fmt: skip
        n = self.arcs.shape[0]
        self._mark = np.full(n, -1, np.int64)
        self._where = np.zeros(n, np.int64)
        self._arc_mark = np.full(num, -1, np.int64)
        self._arc_slot = np.zeros(num, np.int64)

    def rows_on(self, arcs: np.ndarray) -> np.ndarray:
        """Sorted rows crossing any of `arcs` (their CSR slices gathered at once)."""
        arcs = np.asarray(arcs, np.int64)
        lens = self.start[arcs + 1] - self.start[arcs]
        at = np.repeat(self.start[arcs] - np.cumsum(lens) + lens, lens)
        return distinct_below(self.rows[at + np.arange(at.size)], self.arcs.shape[0])

    def load_after(self, changed: np.ndarray, changed_arcs: np.ndarray) -> np.ndarray:
        """The offered load per arc once rows `changed` take paths `changed_arcs`, from the
        plane's: a pass over the changed rows instead of every row (a hashed meta-24k
        plane: 1M rows, ~40 ms a count)."""
        changed = np.asarray(changed, np.int64)
        new = np.asarray(changed_arcs, np.int64).reshape(-1, self.arcs.shape[1])
        load = self.load.copy()
        hops = self.arcs.shape[1]
        for sign, rows_arcs in ((-1.0, self.arcs[changed]), (1.0, new)):
            valid = rows_arcs >= 0
            np.add.at(load, rows_arcs[valid],
                      sign * np.repeat(self.demand[changed], hops)[valid.ravel()])  # fmt: skip
        return load

    def moved(self, changed: np.ndarray, changed_arcs: np.ndarray, rows: np.ndarray,
              rates: np.ndarray) -> Plane:  # fmt: skip
        """The plane once rows `changed` take paths `changed_arcs` and `rows` have `rates`
        (what `after` gave for the change, capacity unchanged), indexed again, not filled."""
        changed = np.asarray(changed, np.int64)
        hops = self.arcs.shape[1]
        new = np.asarray(changed_arcs, np.int64).reshape(-1, hops)
        arcs = self.arcs.copy()
        arcs[changed] = new
        rate = self.rate.copy()
        rate[rows] = rates
        # the rows per arc: the changed rows' entries out, their new ones merged in by
        # (arc, row), as arcs_csr orders them: no sort of every entry
        n, num = self.arcs.shape[0], self.cap.size
        gone = np.zeros(n, bool)
        gone[changed] = True
        keep = ~gone[self.rows]
        key = np.repeat(np.arange(num, dtype=np.int64), np.diff(self.start))[keep] * n
        key += self.rows[keep]
        valid = new >= 0
        add = np.sort(new[valid] * n + np.repeat(changed, hops)[valid.ravel()])
        key = np.insert(key, np.searchsorted(key, add), add)
        start = np.zeros(num + 1, np.int64)
        np.cumsum(np.bincount(key // n, minlength=num), out=start[1:])
        return Plane(arcs, self.demand, self.weight, self.cap, rate, (start, key % n))

    def indexed(self) -> Plane:
        """The plane with what its changes read built now, not by the first change that
        needs it: the rows by bottleneck (any change) and the fill's groups (a whole
        refill). For a caller that will make many changes, so that each costs only its own
        work (a sweep's worker: a hashed meta-24k plane ~0.1 s, once)."""
        self._neck_index()
        if self._integral:  # else a whole refill fills anew, without the groups
            self._fill_groups()
        return self

    def _neck_index(self) -> tuple:
        if self._necks is None:
            self._necks = kernels.bottleneck_index(
                self.arcs, self.rate, self.demand, self.weight, self.cap, self.base_sum,
                self.base_max, self.start, self.rows, TOL)  # fmt: skip
        return self._necks

    def _fill_groups(self) -> tuple:
        if self._groups is None:
            over = self.load > np.maximum(self.cap, 0.0)
            self._groups = (over, *row_groups(self.arcs, self.demand, self.weight, over))
        return self._groups

    def after(
        self,
        cap: np.ndarray,
        changed: np.ndarray,
        changed_arcs: np.ndarray,
        lost: np.ndarray,
        most: int = 30_000,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, their rates) whose rate may differ once rows `changed` take paths
        `changed_arcs` and arcs have capacity `cap` (differing from this plane's at the arcs
        `lost`); every other row keeps its rate (module docstring)."""
        changed = np.ascontiguousarray(changed, np.int64)
        changed_arcs = np.ascontiguousarray(changed_arcs, np.int64).reshape(-1, self.arcs.shape[1])
        lost = np.ascontiguousarray(lost, np.int64)
        cap = np.ascontiguousarray(cap, np.float64)
        if not changed.size and not lost.size:
            return np.zeros(0, np.int64), np.zeros(0)
        most = min(most, self.arcs.shape[0])
        out_rows = np.empty(most + 1, np.int64)
        out_rates = np.empty(most + 1)
        # epochs: one for the rows, then one per round for the arcs (at most `most` rounds)
        epoch = self._epoch + 1
        self._epoch += most + 3
        n_start, n_rows, loose, top_row = self._neck_index()
        d = kernels.refill(self.arcs, self.rate, self.demand, self.weight, self.start,
                           self.rows, self.base_sum, self.base_max, n_start, n_rows, loose,
                           top_row, cap, changed, changed_arcs, lost, self._mark, self._where,
                           self._arc_mark, self._arc_slot, epoch, most, TOL, SLACK, out_rows,
                           out_rates)  # fmt: skip
        if d >= 0:
            return out_rows[:d].copy(), out_rates[:d].copy()
        self.refills += 1
        self.unexplained += d == -2
        load = self.load_after(changed, changed_arcs)
        if not self._integral:
            arcs = self.arcs.copy()
            arcs[changed] = changed_arcs
            rates = max_min_rates(arcs, cap, self.demand, weight=self.weight, load=load)
            return np.arange(arcs.shape[0], dtype=np.int64), rates
        rates = self._regrouped(cap, changed, changed_arcs, load)
        differ = rates != self.rate
        differ[changed] = True
        rows = np.flatnonzero(differ)
        return rows, rates[rows]

    def _regrouped(self, cap: np.ndarray, changed: np.ndarray, changed_arcs: np.ndarray,
                   load: np.ndarray) -> np.ndarray:  # fmt: skip
        """Every row's max-min rate after the change, filled whole on the plane's groups
        (controller.model.rates, the reduced problem) updated for the rows whose key can
        differ: the changed rows and the rows on an arc that crossed its capacity either way
        (module docstring). The plane's first whole refill groups it first (a hashed
        meta-24k plane: ~97 ms once, then ~20 MB kept: a group per row and the groups)."""
        over, gid, groups, g_arcs, g_dm, g_w, table = self._fill_groups()
        over_now = load > np.maximum(cap, 0.0)
        flipped = self.rows_on(np.flatnonzero(over_now != over))
        rows = distinct_below(np.concatenate([changed, flipped]), self.arcs.shape[0])
        rows_arcs = self.arcs[rows]
        rows_arcs[np.searchsorted(rows, changed)] = changed_arcs
        gid = gid.copy()
        groups, g_arcs, g_dm, g_w, _ = kernels.regroup(
            self.demand, self.weight, over_now, rows, rows_arcs, gid, groups, g_arcs.copy(),
            g_dm.copy(), g_w.copy(), table.copy())  # fmt: skip
        live = np.flatnonzero(g_w[:groups] > 0)
        g_rates = np.empty(live.size)
        kernels.fill(g_arcs[live], cap, g_dm[live] * g_w[live], g_w[live], SLACK, g_rates)
        level = np.zeros(groups)
        level[live] = g_rates / g_w[live]
        rates = np.empty(self.arcs.shape[0])
        kernels.grouped_rates(self.arcs, self.demand, self.weight, gid, level, rates)
        # the changed rows in no group: their demand when routed on their new paths
        free = changed[gid[changed] < 0]
        routed = (rows_arcs[np.searchsorted(rows, free)] >= 0).any(axis=1)
        rates[free] = np.where(routed & (self.demand[free] > 0), self.demand[free], 0.0)
        return rates

