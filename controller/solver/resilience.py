"""The resilience sweep: for every single failure, what each job keeps under fabric-te's
repair, under E-ECMP and under capacity-aware WCMP, and how far the repair reaches.

For each element of controller.model.failures.single_failures (a switch-to-switch link or
a whole switch) and the installed TE assignment (its RouteIndex):

- fabric-te: the repair (controller.solver.repair.repair_indexed from the installed index,
  `old_health` the health before) with its certificate; a job's value is the certificate's
  TE value (the mean over the data planes of its bus bandwidth, 1 where no row of it
  crosses an arc offered more than its capacity);
- E-ECMP and WCMP: the mean over the certificate's K hash seeds of the job's bus
  bandwidth under that hashing after the failure (the certificate's reference values);
- a job with a flow left without any path is stalled: its value is 0 under every routing;
- the blast radius: input flows and jobs the repair moved (handed back included), and
  those whose TE path crossed the element.

`sweep_one` computes an element straightforwardly (a full repair and certificate, every
hashed QP walked and every plane filled). `Sweep` computes the same with shortcuts whose
exactness docs/resilience.md argues: an element no TE row and no hashed walk reads changes
nothing; a hashed walk reads only the links of its source and destination racks and, across
pods, of their pods' aggregation links, so only those flows are walked again; max-min rates
are filled again only where the change reaches (controller.model.local_rates, exact to its
tolerance); the certificate is decided on those values and, when a job would be handed
back, run in full. Everything is deterministic: same inputs, same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.errors import InputError
from controller.model.assignment import UNROUTED, Assignment
from controller.model.dataplane import carried
from controller.model.fabric import ACCESS, AGG, RACK, Fabric
from controller.model.failures import ELEMENT_KINDS, SingleFailures, check_kinds, single_failures
from controller.model.flows import ALL_QPS, FlowSet, distinct_below
from controller.model.hashing import WcmpTables, hashed_arcs_seeds, hashed_routes
from controller.model.health import LinkHealth
from controller.model.local_rates import Plane
from controller.model.paths import CROSS_POD, flow_class, stranded
from controller.model.rates import REL_TOL, flow_shares
from controller.routes.budget import TableBudget
from controller.solver.certificate import CertifyOptions, input_flows, job_values, row_parents
from controller.solver.qp_buckets import DEFAULT_QPS
from controller.solver.repair import RouteIndex, certified, repair_indexed

ROUTINGS = ("fabric-te", "eecmp", "wcmp")
KINDS = (*ELEMENT_KINDS, "double")  # element kinds of a sweep: the singles', then pairs
KEEP = 0.5  # a repair is not good for a job left below this share of its value before


@dataclass(frozen=True)
class SweepInputs:
    """What a sweep starts from: plain data, sent once to every worker."""

    fabric: Fabric
    health: LinkHealth
    assignment: Assignment  # the installed TE routing (rows: input flows or QP buckets)
    qps: int = DEFAULT_QPS
    table_budget: TableBudget | None = None
    certify: CertifyOptions = field(default_factory=CertifyOptions)
    kinds: tuple[str, ...] = ELEMENT_KINDS
    # double failures to evaluate after the single ones: pairs of single-failure ids
    doubles: tuple[tuple[int, int], ...] = ()
    # ids of the jobs the solve left to the fabric's hashing whole (SolveResult.hashed_jobs):
    # a repair gives them no entry, as the service's does not
    hashed_jobs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.qps < 1:
            raise InputError(f"qps must be >= 1, got {self.qps}")
        check_kinds(self.kinds, err=InputError)
        if not self.kinds:
            raise InputError(f"unknown element kind(s) {self.kinds}; known: "
                             f"{', '.join(ELEMENT_KINDS)}")  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """One element's figures (a row of Resilience)."""

    values: np.ndarray  # [3, jobs]: per routing (ROUTINGS), each job's value after
    moved_flows: int
    moved_jobs: int
    crossed_flows: int
    crossed_jobs: int
    handed_back: int  # input flows the certificate handed back to hashing


@dataclass(frozen=True)
class Resilience:
    """The sweep's result as arrays: element i is names[i] (kind KINDS[kind[i]]),
    routing r is ROUTINGS[r], job j is job_ids[j]."""

    names: tuple[str, ...]
    kind: np.ndarray  # int8 [elements], index into KINDS
    job_ids: tuple[str, ...]
    has_flows: np.ndarray  # bool [jobs]
    before: np.ndarray  # [3, jobs] each routing's job values with nothing failed
    after: np.ndarray  # [elements, 3, jobs]
    moved_flows: np.ndarray  # int64 [elements]
    moved_jobs: np.ndarray
    crossed_flows: np.ndarray
    crossed_jobs: np.ndarray
    handed_back: np.ndarray
    keep: float = KEEP

    @property
    def loss(self) -> np.ndarray:
        """[elements, 3, jobs]: value before minus after, per routing (0 for jobs without
        flows and for stalled jobs, which no routing can help: see `stalled`)."""
        out = self.before[None] - self.after
        keep = (self.has_flows & ~self.stalled_before)[None, None] & ~self.stalled[:, None, :]
        return np.where(keep, np.nan_to_num(out, nan=0.0), 0.0)

    @property
    def worst_loss(self) -> np.ndarray:
        """[elements, 3]: the largest job loss per routing (stalled jobs left out)."""
        return self.loss.max(axis=2, initial=0.0)

    @property
    def ranking(self) -> np.ndarray:
        """Element ids by the jobs they stall, most first (a stalled job stops, whatever
        the routing), then by fabric-te's worst job loss over the other jobs, largest
        first (ties: by E-ECMP's, then WCMP's, then by id). Losses are compared to 1e-9 of
        line rate, so elements whose losses differ only by rounding (a symmetric fabric's
        CTSWs) stay in id order."""
        w = np.round(self.worst_loss, 9)
        stalls = self.stalled.sum(axis=1)
        return np.lexsort((np.arange(len(self.names)), -w[:, 2], -w[:, 1], -w[:, 0], -stalls))

    @property
    def stalled_before(self) -> np.ndarray:
        """[jobs]: jobs with a flow that has no path before any element fails (a NIC's link
        down in the health swept from): 0 under every routing whatever fails, so no element
        stalls them."""
        return self.has_flows & (self.before == 0.0).all(axis=0)

    @property
    def stalled(self) -> np.ndarray:
        """[elements, jobs]: jobs the element stalls, a flow left without any path (0 under
        every routing) that had one before."""
        return (self.has_flows & ~self.stalled_before)[None] & (self.after == 0.0).all(axis=1)

    @property
    def no_good(self) -> np.ndarray:
        """[elements, jobs]: jobs fabric-te's repair leaves below E-ECMP or WCMP after the
        same failure, or below `keep` of their value before (stalled jobs excepted)."""
        te, ee, wc = self.after[:, 0], self.after[:, 1], self.after[:, 2]
        low = (te < ee * (1 - REL_TOL)) | (te < wc * (1 - REL_TOL))
        low |= te < self.keep * self.before[0][None] * (1 - REL_TOL)
        return low & self.has_flows[None] & ~self.stalled

    def digest_arrays(self) -> list[np.ndarray]:
        """Every array of the result, for byte-for-byte comparisons."""
        return [self.kind, self.has_flows, self.before, self.after, self.moved_flows,
                self.moved_jobs, self.crossed_flows, self.crossed_jobs,
                self.handed_back]  # fmt: skip


def _stalled_jobs(share: np.ndarray, job: np.ndarray, num_jobs: int) -> np.ndarray:
    """Jobs with a flow whose share is NaN (no path at all)."""
    out = np.zeros(num_jobs, bool)
    out[job[np.isnan(share)]] = True
    return out


def reported(values: np.ndarray, stalled: np.ndarray) -> np.ndarray:
    """A routing's job values as the sweep reports them: 0 for stalled jobs."""
    return np.where(stalled, 0.0, values)


# ---- the straightforward computation --------------------------------------------------


def te_values(
    fabric: Fabric, health: LinkHealth, assignment: Assignment, opts: CertifyOptions, qps: int
) -> tuple[np.ndarray, np.ndarray]:
    """(the certificate's TE value per job, stalled jobs) of an assignment under `health`:
    every data plane carried and filled (controller.solver.certificate's definition)."""
    rows = assignment.flows
    parent = row_parents(rows)
    n_in = int(parent.max()) + 1 if parent.size else 0
    num_jobs = _num_jobs(rows)
    flows = input_flows(rows, parent)
    cap = health.arc_capacity(fabric)
    deterministic = bool((assignment.path != UNROUTED).all())
    seeds = opts.seeds[:1] if deterministic else opts.seeds
    at_risk = np.zeros(num_jobs, bool)
    shares = []
    for seed in seeds:
        plane = carried(fabric, health, assignment, parent, kind=opts.reference, seed=seed,
                        qps=qps)  # fmt: skip
        valid = plane.arcs >= 0
        weights = np.repeat(plane.flows.demand, plane.arcs.shape[1])[valid.ravel()]
        load = np.bincount(plane.arcs[valid], weights, minlength=fabric.num_arcs)
        over = load > cap * (1 + REL_TOL) + REL_TOL
        hit = (valid & over[np.maximum(plane.arcs, 0)]).any(axis=1)
        at_risk[np.unique(plane.flows.job[hit])] = True
        shares.append(flow_shares(fabric, health, plane.arcs, plane.flows, plane.parent,
                                  num_parents=n_in, weight=plane.weight,
                                  model=opts.model))  # fmt: skip
    te = np.mean([job_values(s, flows.job, num_jobs) for s in shares], axis=0)
    return np.where(at_risk, te, 1.0), _stalled_jobs(shares[0], flows.job, num_jobs)


def hashed_values(
    kind: str, fabric: Fabric, health: LinkHealth, flows: FlowSet, num_jobs: int,
    opts: CertifyOptions, qps: int,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(mean over the seeds of each job's value under hashing `kind`, stalled jobs)."""
    runs, stalled = [], np.zeros(num_jobs, bool)
    parent = np.repeat(np.arange(len(flows), dtype=np.int64), qps)
    sub = FlowSet(flows.src_nic[parent], flows.dst_nic[parent], flows.demand[parent] / qps,
                  flows.job[parent], flows.job_ids)  # fmt: skip
    for seed in opts.seeds:
        arcs = hashed_routes(kind, fabric, flows, health, seed, qps)[1]
        share = flow_shares(fabric, health, arcs, sub, parent, num_parents=len(flows),
                            model=opts.model)  # fmt: skip
        runs.append(job_values(share, flows.job, num_jobs))
        stalled |= _stalled_jobs(share, flows.job, num_jobs)
    return np.mean(runs, axis=0), stalled


def _num_jobs(rows: FlowSet) -> int:
    return max(len(rows.job_ids), int(rows.job.max(initial=-1)) + 1, 1)


def sweep_one(inputs: SweepInputs, index: RouteIndex, health: LinkHealth) -> Outcome:
    """One failure (`health`: the health after it), straightforwardly: the repair with its
    full certificate, every plane carried and filled, every hashed QP walked."""
    fabric, opts, qps = inputs.fabric, inputs.certify, inputs.qps
    rows = index.assignment.flows
    parent = row_parents(rows)
    flows = input_flows(rows, parent)
    num_jobs = _num_jobs(rows)
    res, _ = repair_indexed(health, index, old_health=inputs.health,
                            table_budget=inputs.table_budget, certify_options=opts,
                            qps=qps, hashed_jobs=inputs.hashed_jobs)  # fmt: skip
    te, te_stalled = te_values(fabric, health, res.assignment, opts, qps)
    ee, ee_stalled = hashed_values("eecmp", fabric, health, flows, num_jobs, opts, qps)
    wc, wc_stalled = hashed_values("wcmp", fabric, health, flows, num_jobs, opts, qps)
    stalled = te_stalled | ee_stalled | wc_stalled
    values = np.stack([reported(te, stalled), reported(ee, stalled), reported(wc, stalled)])
    lost = _lost_arcs(fabric, inputs.health, health)
    cert = res.certificate
    return _outcome(values, index, parent, res.churn, lost,
                    0 if cert is None else cert.fallback_flows)  # fmt: skip


def _lost_arcs(fabric: Fabric, before: LinkHealth, after: LinkHealth) -> np.ndarray:
    links = np.flatnonzero(after.factor != before.factor)
    return np.sort(np.concatenate([2 * links, 2 * links + 1])).astype(np.int64)


def _outcome(values: np.ndarray, index: RouteIndex, parent: np.ndarray, churn: np.ndarray,
             lost: np.ndarray, handed: int) -> Outcome:  # fmt: skip
    job = index.assignment.flows.job
    crossed = index.rows_on(lost)
    return Outcome(
        values=values,
        moved_flows=int(np.unique(parent[churn]).size),
        moved_jobs=int(np.unique(job[churn]).size),
        crossed_flows=int(np.unique(parent[crossed]).size),
        crossed_jobs=int(np.unique(job[crossed]).size),
        handed_back=int(handed),
    )


# ---- the fast sweep -------------------------------------------------------------------


class _Parents:
    """Rows grouped into input flows and jobs, to sum a plane's rates into job values
    (controller.model.kernels.per_parent's striped or summed model, then job_values)."""

    def __init__(self, plane: Plane, parent: np.ndarray, num_parents: int, job: np.ndarray,
                 num_jobs: int, model: str) -> None:  # fmt: skip
        self.plane, self.parent, self.n, self.model = plane, parent, num_parents, model
        self.job, self.num_jobs = job, num_jobs  # job per parent
        order = np.argsort(parent, kind="stable")
        self.p_rows = order
        self.p_start = np.zeros(num_parents + 1, np.int64)
        np.cumsum(np.bincount(parent, minlength=num_parents), out=self.p_start[1:])
        jorder = np.argsort(job, kind="stable")
        self.j_parents = jorder
        self.j_start = np.zeros(num_jobs + 1, np.int64)
        np.cumsum(np.bincount(job, minlength=num_jobs), out=self.j_start[1:])
        routed = plane.arcs[:, 0] >= 0
        self.share = self._shares(np.arange(num_parents), plane.rate, routed, None)
        self.values = job_values(self.share, job, num_jobs)
        self.stalled = _stalled_jobs(self.share, job, num_jobs)

    def _shares(self, parents: np.ndarray, rate: np.ndarray, routed: np.ndarray,
                rows_of: np.ndarray | None) -> np.ndarray:  # fmt: skip
        """Share per parent of `parents` (rate and routed given per row of `rows_of`, the
        parents' rows in CSR order; None: per plane row)."""
        lo, hi = self.p_start[parents], self.p_start[parents + 1]
        lens = hi - lo
        idx = np.repeat(lo - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        rows = self.p_rows[idx]
        r = rate[rows] if rows_of is None else rate
        ok = routed[rows] if rows_of is None else routed
        w = self.plane.weight[rows]
        dm = self.plane.demand[rows]
        first = np.cumsum(lens) - lens
        nz = lens > 0
        out = np.full(parents.size, np.nan)
        if not nz.any():
            return out
        f = first[nz]
        demand = np.add.reduceat(dm, f)
        any_routed = np.logical_or.reduceat(ok, f)
        if self.model == "striped":
            rate_p = np.minimum.reduceat(r / w, f) * np.add.reduceat(w, f)
        else:
            rate_p = np.add.reduceat(r, f)
        share = np.divide(rate_p, demand, out=np.ones(f.size), where=demand > 0)
        out[nz] = np.where(any_routed, share, np.nan)
        return out

    def rows_of(self, parents: np.ndarray) -> np.ndarray:
        lo, hi = self.p_start[parents], self.p_start[parents + 1]
        lens = hi - lo
        idx = np.repeat(lo - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        return self.p_rows[idx]

    def after(self, rows: np.ndarray, rates: np.ndarray, routed_rows: np.ndarray,
              routed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """(job values, stalled jobs) once `rows` have `rates` and `routed_rows` are routed
        or not (`routed`); every other row as in the plane."""
        touched = distinct_below(np.concatenate([rows, routed_rows]), self.plane.arcs.shape[0])
        if not touched.size:
            return self.values, self.stalled
        n = self.plane.arcs.shape[0]
        if touched.size * 8 > n:  # most of the plane: every flow again, vectorised
            rate = self.plane.rate.copy()
            rate[rows] = rates
            ok = self.plane.arcs[:, 0] >= 0
            ok[routed_rows] = routed
            share = self._shares(np.arange(self.n), rate, ok, None)
            return (job_values(share, self.job, self.num_jobs),
                    _stalled_jobs(share, self.job, self.num_jobs))  # fmt: skip
        parents = distinct_below(self.parent[touched], self.n)
        prow = self.rows_of(parents)
        rate = self.plane.rate[prow]
        pos = np.searchsorted(rows, prow)
        hit = (pos < rows.size) & (rows[np.minimum(pos, max(rows.size - 1, 0))] == prow) \
            if rows.size else np.zeros(prow.size, bool)
        rate[hit] = rates[pos[hit]]
        ok = self.plane.arcs[prow, 0] >= 0
        pos = np.searchsorted(routed_rows, prow)
        hit = (pos < routed_rows.size) & (
            routed_rows[np.minimum(pos, max(routed_rows.size - 1, 0))] == prow
        ) if routed_rows.size else np.zeros(prow.size, bool)
        ok[hit] = routed[pos[hit]]
        share = self._shares(parents, rate, ok, prow)
        full = self.share.copy()  # O(parents): the jobs' minima need every flow of them
        full[parents] = share
        jobs = distinct_below(self.job[parents], self.num_jobs)
        values = self.values.copy()
        stalled = self.stalled.copy()
        for j in jobs.tolist():
            ps = self.j_parents[self.j_start[j] : self.j_start[j + 1]]
            s = full[ps]
            fin = s[np.isfinite(s)]
            values[j] = fin.min() if fin.size else np.nan
            stalled[j] = bool(np.isnan(s).any())
        return values, stalled


def _sorted_rows(rows: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    order = np.argsort(rows, kind="stable")
    return (rows[order], *(a[order] for a in arrays))


class Sweep:
    """The fast sweep of `inputs` (module docstring): built once (per worker process),
    then `outcome(i)` per element."""

    def __init__(self, inputs: SweepInputs) -> None:
        fabric, health, opts, qps = inputs.fabric, inputs.health, inputs.certify, inputs.qps
        self.inputs = inputs
        self.index = RouteIndex.build(fabric, inputs.assignment)
        self.failures: SingleFailures = single_failures(fabric, health, inputs.kinds)
        rows = inputs.assignment.flows
        self.parent = row_parents(rows)
        self.flows = input_flows(rows, self.parent)
        self.num_jobs = _num_jobs(rows)
        self.cap = health.arc_capacity(fabric)
        n_in = len(self.flows)
        path = inputs.assignment.path
        # the TE plane: one when every row has a path (else each failure is computed fully)
        self.te: _Parents | None = None
        if (path != UNROUTED).all():
            plane = Plane(inputs.assignment.arcs(fabric), rows.demand,
                          np.where(rows.qp == ALL_QPS, float(qps), 1.0), self.cap)  # fmt: skip
            self.te = _Parents(plane, self.parent, n_in, self.flows.job, self.num_jobs,
                               opts.model)  # fmt: skip
            self.te_hot = self._hot_rows(plane, self._over(plane.load))
            self.te_job_hot = np.bincount(rows.job[self.te_hot > 0], minlength=self.num_jobs)
        # hashed planes: per routing, per seed; WCMP's weights kept to be summed again only
        # where a failure changes them
        self.wcmp = WcmpTables(fabric, health)
        sub_parent = np.repeat(np.arange(n_in, dtype=np.int64), qps)
        self.hashed: dict[str, list[_Parents]] = {}
        for kind in ("eecmp", "wcmp"):
            self.hashed[kind] = []
            for seed in opts.seeds:
                arcs = hashed_routes(kind, fabric, self.flows, health, seed, qps)[1]
                plane = Plane(arcs, self.flows.demand[sub_parent] / qps, np.ones(arcs.shape[0]),
                              self.cap)  # fmt: skip
                self.hashed[kind].append(_Parents(plane, sub_parent, n_in, self.flows.job,
                                                  self.num_jobs, opts.model))  # fmt: skip
        # flows by source and destination rack, and cross-pod flows by pod (what a walk reads)
        f = self.flows
        self.src_rack = fabric.rtsw_of_nic(f.src_nic)
        self.dst_rack = fabric.rtsw_of_nic(f.dst_nic)
        cross = flow_class(fabric, f.src_nic, f.dst_nic) == CROSS_POD
        self.src_pod = np.where(cross, fabric.pod_of_rtsw(self.src_rack), -1)
        self.dst_pod = np.where(cross, fabric.pod_of_rtsw(self.dst_rack), -1)
        self.by_src_rack = _Csr(self.src_rack, fabric.num_rtsws)
        self.by_dst_rack = _Csr(self.dst_rack, fabric.num_rtsws)
        self.by_src_pod = _Csr(self.src_pod, fabric.pods)
        self.by_dst_pod = _Csr(self.dst_pod, fabric.pods)
        n = len(self.failures)
        for a, b in inputs.doubles:
            if not (0 <= a < n and 0 <= b < n and a != b):
                raise InputError(f"double failure ({a}, {b}): two distinct ids in [0, {n})")
        # every plane indexed for its changes here, once per worker, not by the first
        # elements that need it: a full sweep needs it on every plane, and an element's
        # figures (and time) are then its own
        for par in ([self.te] if self.te is not None else []) + [
                p for planes in self.hashed.values() for p in planes]:  # fmt: skip
            par.plane.indexed()
        self.before = self._before()
        self.full_certificates = 0

    def _over(self, load: np.ndarray) -> np.ndarray:
        return load > self.cap * (1 + REL_TOL) + REL_TOL

    @staticmethod
    def _hot_rows(plane: Plane, over: np.ndarray) -> np.ndarray:
        a = plane.arcs
        return (over[np.maximum(a, 0)] & (a >= 0)).sum(axis=1)

    def _before(self) -> np.ndarray:
        """[3, jobs]: each routing's values with nothing failed."""
        inputs = self.inputs
        if self.te is not None:
            at_risk = self.te_job_hot > 0
            te = np.where(at_risk, self.te.values, 1.0)
            te_stalled = self.te.stalled
        else:
            te, te_stalled = te_values(inputs.fabric, inputs.health, inputs.assignment,
                                       inputs.certify, inputs.qps)  # fmt: skip
        ee = np.mean([p.values for p in self.hashed["eecmp"]], axis=0)
        wc = np.mean([p.values for p in self.hashed["wcmp"]], axis=0)
        stalled = te_stalled.copy()
        for kind in ("eecmp", "wcmp"):
            for p in self.hashed[kind]:
                stalled |= p.stalled
        return np.stack([reported(te, stalled), reported(ee, stalled), reported(wc, stalled)])

    def walked_flows(self, links: np.ndarray) -> np.ndarray:
        """Input flows whose hashed walk reads any of `links` (module docstring)."""
        fab = self.inputs.fabric
        kind = fab.link_kind[links]
        racks = np.concatenate([
            fab.rtsw_of_nic(links[kind == ACCESS]),
            (links[kind == RACK] - fab.rack_base) // (fab.ctsws_per_pod * fab.rack_links),
        ])  # fmt: skip
        per_pod = fab.ctsws_per_pod * fab.atsws_per_plane * fab.agg_links
        pods = (links[kind == AGG] - fab.agg_base) // max(per_pod, 1)
        racks, pods = np.unique(racks), np.unique(pods)
        parts = [self.by_src_rack.of(racks), self.by_dst_rack.of(racks),
                 self.by_src_pod.of(pods), self.by_dst_pod.of(pods)]  # fmt: skip
        return np.unique(np.concatenate(parts))

    def links_of(self, i: int) -> np.ndarray:
        """The links element i takes down (a single failure's, or a pair's)."""
        n = len(self.failures)
        if i < n:
            return self.failures.links_of(i)
        a, b = self.inputs.doubles[i - n]
        return np.union1d(self.failures.links_of(a), self.failures.links_of(b))

    def health_after(self, i: int) -> LinkHealth:
        factor = self.inputs.health.factor.copy()
        factor[self.links_of(i)] = 0.0
        return LinkHealth(factor)

    def outcome(self, i: int) -> Outcome:
        """Element i's figures (equal to sweep_one's, to local_rates' tolerance)."""
        inputs, fabric, opts, qps = self.inputs, self.inputs.fabric, self.inputs.certify, \
            self.inputs.qps  # fmt: skip
        health = self.health_after(i)
        links = self.links_of(i)
        lost = np.sort(np.concatenate([2 * links, 2 * links + 1])).astype(np.int64)
        cap = health.arc_capacity(fabric)
        # hashed routings: the flows whose walk reads the element, walked again
        walked = self.walked_flows(links)
        hashed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for kind, planes in self.hashed.items():
            runs, stalled = [], np.zeros(self.num_jobs, bool)
            sub = self.flows.take(walked)
            walks = (hashed_arcs_seeds(kind, fabric, sub, health, opts.seeds, qps, self.wcmp)
                     if walked.size else [None] * len(planes))  # fmt: skip
            for new, par in zip(walks, planes, strict=True):
                plane = par.plane
                if new is not None:
                    rows = (walked[:, None] * qps + np.arange(qps)).ravel()
                    diff = (new != plane.arcs[rows]).any(axis=1)
                    rows, new = rows[diff], new[diff]
                else:
                    rows, new = np.zeros(0, np.int64), np.zeros((0, plane.arcs.shape[1]), np.int64)
                r_rows, r_rates = plane.after(cap, rows, new, lost)
                r_rows, r_rates = _sorted_rows(r_rows, r_rates)
                values, st = par.after(r_rows, r_rates, rows, new[:, 0] >= 0)
                runs.append(values)
                stalled |= st
            hashed[kind] = (np.mean(runs, axis=0), stalled)
        # fabric-te's repair
        crossed = self.index.rows_on(lost)
        ref = hashed[opts.reference][0]
        waiting = self.index.unrouted(inputs.hashed_jobs)  # rows a repair would retry
        if not crossed.size and not waiting.size and self.te is not None:
            # no TE row hit and none to retry: the repair moves nothing, every TE rate stays
            at_risk = self.te_job_hot > 0
            te = np.where(at_risk, self.te.values, 1.0)
            if not (at_risk & (te < ref * (1 - REL_TOL))).any():
                return self._finish(te, self.te.stalled, hashed, np.zeros(0, np.int64), lost, 0)
        res, fresh = repair_indexed(health, self.index, old_health=inputs.health,
                                    table_budget=inputs.table_budget, certify_options=None,
                                    qps=qps, hashed_jobs=inputs.hashed_jobs)  # fmt: skip
        if self.te is None or self._rides_hashing(res.unroutable, health):
            return self._full(health, res, fresh, hashed, lost)
        churn = res.churn
        new = fresh.arcs_of(churn)
        te_plane = self.te.plane
        old = te_plane.arcs[churn]
        load = te_plane.load.copy()
        for arcs, sign in ((old, -1.0), (new, 1.0)):
            ok = arcs >= 0
            np.add.at(load, arcs[ok], sign * np.repeat(te_plane.demand[churn], arcs.shape[1])[
                ok.ravel()])  # fmt: skip
        over_before = self._over(te_plane.load)
        touched = np.unique(np.concatenate([old[old >= 0], new[new >= 0], lost]))
        over = over_before.copy()
        over[touched] = load[touched] > cap[touched] * (1 + REL_TOL) + REL_TOL
        flipped = touched[over[touched] != over_before[touched]]
        again = np.union1d(te_plane.rows_on(flipped), churn)
        arcs_now = te_plane.arcs[again].copy()
        pos = np.searchsorted(churn, again)
        is_churn = (pos < churn.size) & (churn[np.minimum(pos, max(churn.size - 1, 0))] == again) \
            if churn.size else np.zeros(again.size, bool)
        arcs_now[is_churn] = new[pos[is_churn]]
        hot_now = (over[np.maximum(arcs_now, 0)] & (arcs_now >= 0)).sum(axis=1)
        job = inputs.assignment.flows.job[again]
        job_hot = self.te_job_hot - np.bincount(job[self.te_hot[again] > 0],
                                                minlength=self.num_jobs)  # fmt: skip
        job_hot += np.bincount(job[hot_now > 0], minlength=self.num_jobs)
        at_risk = job_hot > 0
        r_rows, r_rates = te_plane.after(cap, churn, new, lost)
        r_rows, r_rates = _sorted_rows(r_rows, r_rates)
        values, te_stalled = self.te.after(r_rows, r_rates, churn, new[:, 0] >= 0)
        te = np.where(at_risk, values, 1.0)
        if (at_risk & (te < ref * (1 - REL_TOL))).any():
            return self._full(health, res, fresh, hashed, lost)
        return self._finish(te, te_stalled, hashed, churn, lost, 0)

    def _rides_hashing(self, off: np.ndarray, health: LinkHealth) -> bool:
        """Whether a row without a TE path still has a path under hashing (then it rides
        the defaults and the TE planes differ per seed); rows with none are stranded under
        every routing (all their arcs -1 in the plane, as carried walks them)."""
        if not off.size:
            return False
        rows, fabric = self.inputs.assignment.flows.take(off), self.inputs.fabric
        # hashing finds a path wherever one is alive
        return not stranded(fabric, health.arc_capacity(fabric), rows.src_nic, rows.dst_nic).all()

    def _full(self, health: LinkHealth, res: object, fresh: RouteIndex,
              hashed: dict[str, tuple[np.ndarray, np.ndarray]],
              lost: np.ndarray) -> Outcome:  # fmt: skip
        """fabric-te's side of an element computed in full: the certificate run on the
        repair (handing jobs back where it must), every TE plane carried and filled."""
        inputs = self.inputs
        self.full_certificates += 1
        out, _ = certified(health, res, fresh, inputs.certify, inputs.qps)  # type: ignore[arg-type]
        te, te_stalled = te_values(inputs.fabric, health, out.assignment, inputs.certify,
                                   inputs.qps)  # fmt: skip
        cert = out.certificate
        return self._finish(te, te_stalled, hashed, out.churn, lost,
                            0 if cert is None else cert.fallback_flows)  # fmt: skip

    def _finish(self, te: np.ndarray, te_stalled: np.ndarray,
                hashed: dict[str, tuple[np.ndarray, np.ndarray]], churn: np.ndarray,
                lost: np.ndarray, handed: int) -> Outcome:  # fmt: skip
        ee, ee_st = hashed["eecmp"]
        wc, wc_st = hashed["wcmp"]
        stalled = te_stalled | ee_st | wc_st
        values = np.stack([reported(te, stalled), reported(ee, stalled), reported(wc, stalled)])
        return _outcome(values, self.index, self.parent, churn, lost, handed)

    def header(self) -> Header:
        """The elements (singles, then the pairs as "a+b" of kind "double"), jobs, and the
        values before."""
        f, pairs = self.failures, self.inputs.doubles
        names = f.names + tuple(f"{f.names[a]}+{f.names[b]}" for a, b in pairs)
        kind = np.concatenate([f.kind, np.full(len(pairs), len(ELEMENT_KINDS), np.int8)])
        rows = self.inputs.assignment.flows
        job_ids = tuple(rows.job_ids[j] if j < len(rows.job_ids) else f"job{j}"
                        for j in range(self.num_jobs))  # fmt: skip
        has = np.bincount(self.flows.job, minlength=self.num_jobs) > 0
        return Header(names, kind, job_ids, has, self.before)

    def run(self, elements: np.ndarray) -> list[Outcome]:
        return [self.outcome(int(i)) for i in elements]


class _Csr:
    """Ids grouped by a key (negative keys left out), for `of(keys)`."""

    def __init__(self, key: np.ndarray, num: int) -> None:
        keep = np.flatnonzero(key >= 0)
        order = keep[np.argsort(key[keep], kind="stable")]
        self.ids = order.astype(np.int64)
        self.start = np.zeros(num + 1, np.int64)
        np.cumsum(np.bincount(key[keep], minlength=num), out=self.start[1:])

    def of(self, keys: np.ndarray) -> np.ndarray:
        parts = [self.ids[self.start[k] : self.start[k + 1]] for k in np.asarray(keys).tolist()]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@dataclass(frozen=True)
class Header:
    """What every element's figures are assembled with: the elements, jobs and the values
    before any failure (small: sent back by a worker once)."""

    names: tuple[str, ...]
    kind: np.ndarray
    job_ids: tuple[str, ...]
    has_flows: np.ndarray
    before: np.ndarray

    def assemble(self, elements: np.ndarray, outcomes: list[Outcome]) -> Resilience:
        """The Resilience of `outcomes` (of `elements`, in that order)."""
        elements = np.asarray(elements, np.int64)

        def col(name: str) -> np.ndarray:
            return np.array([getattr(o, name) for o in outcomes], dtype=np.int64)

        after = (np.stack([o.values for o in outcomes]) if outcomes
                 else np.zeros((0, 3, len(self.job_ids))))  # fmt: skip
        # a job without flows has no value under any routing (NaN: null in JSON), where
        # fabric-te's figures would read 1 (no flow below its demand) and the hashings' NaN
        after = np.where(self.has_flows[None, None], after, np.nan)
        before = np.where(self.has_flows[None], self.before, np.nan)
        return Resilience(
            names=tuple(self.names[i] for i in elements.tolist()), kind=self.kind[elements],
            job_ids=self.job_ids, has_flows=self.has_flows, before=before, after=after,
            moved_flows=col("moved_flows"), moved_jobs=col("moved_jobs"),
            crossed_flows=col("crossed_flows"), crossed_jobs=col("crossed_jobs"),
            handed_back=col("handed_back"),
        )  # fmt: skip


def sweep(inputs: SweepInputs, elements: np.ndarray | None = None) -> Resilience:
    """The fast sweep of every element (or of `elements`), in this process."""
    s = Sweep(inputs)
    total = len(s.failures) + len(inputs.doubles)
    ids = np.arange(total) if elements is None else np.asarray(elements, np.int64)
    return s.header().assemble(ids, s.run(ids))


def sample_doubles(failures: SingleFailures, count: int, seed: int) -> tuple[tuple[int, int], ...]:
    """`count` distinct pairs of single failures (a < b), drawn with `seed`, in the order
    drawn (all pairs when there are no more). A pair where one element's links hold the
    other's (a switch and one of its links) is not drawn: it fails what the larger one
    fails alone, a single failure already in the sweep."""
    n = len(failures)
    if count < 0:
        raise InputError(f"doubles must be >= 0, got {count}")
    nested = _nested_pairs(failures)
    rng = np.random.default_rng(seed)
    if count >= n * (n - 1) // 2 - len(nested):
        a, b = np.triu_indices(n, 1)
        return tuple(p for p in zip(a.tolist(), b.tolist(), strict=True) if p not in nested)
    seen: set[tuple[int, int]] = set(nested)
    out: list[tuple[int, int]] = []
    while len(out) < count:
        a, b = sorted(rng.choice(n, size=2, replace=False).tolist())
        if (a, b) not in seen:
            seen.add((a, b))
            out.append((a, b))
    return tuple(out)


def _nested_pairs(failures: SingleFailures) -> set[tuple[int, int]]:
    """The pairs (a < b) of elements where one's links are all among the other's: an
    element's candidates are those that hold its first link (a link, its two switches)."""
    holders: dict[int, list[int]] = {}
    for i in range(len(failures)):
        for k in failures.links_of(i).tolist():
            holders.setdefault(k, []).append(i)
    out: set[tuple[int, int]] = set()
    for a in range(len(failures)):
        mine = failures.links_of(a)
        if not mine.size:
            continue
        for b in holders[int(mine[0])]:
            if b != a and (mine.size == 1 or np.isin(mine, failures.links_of(b)).all()):
                out.add((min(a, b), max(a, b)))
    return out
