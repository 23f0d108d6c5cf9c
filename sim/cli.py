"""The simulator's `tectl` commands: simulate baselines, solve side by side with them, and
verify route files on the emulated fabric."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.errors import InputError
from controller.formats.output import (
    Progress,
    counts_text,
    emit,
    format_table,
    plural,
    strict,
)
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet, distinct
from controller.model.hashing import HASHINGS
from controller.model.health import LinkHealth, parse_health, random_failures
from controller.model.jobs import Job, jobs_over_line_rate
from controller.model.validation import MAX_LINKS, MAX_QPS, MAX_SEED, flag

if TYPE_CHECKING:
    from controller.solver.solve import SolveResult


@dataclass(frozen=True)
class Inputs:
    """What every offline command starts from."""

    fabric: Fabric
    health: LinkHealth
    flows: FlowSet
    jobs: int
    # per job asking a NIC for more than its line rate, how many times (jobs_over_line_rate)
    over: dict[str, float]


def add_input_args(p: argparse.ArgumentParser, add_fabric_arg: Callable[..., None]) -> None:
    add_fabric_arg(p)
    p.add_argument(
        "--jobs",
        default="random",
        help="placement file (JSON) or 'random' for a seeded job mix (default: random)",
    )
    p.add_argument(
        "--seed", type=flag(int, 0, MAX_SEED), default=1, help="seed for job mixes and hashing (1)"
    )
    p.add_argument(
        "--jobs-out", metavar="FILE",
        help="also write the jobs as a placement file (JSON), as `tectl job put` and --jobs "
             "take it: a random mix made again by hand",
    )  # fmt: skip
    p.add_argument(
        "--fill",
        type=float,
        default=None,
        help="with --jobs random: fraction of hosts the jobs take (1.0: a full fabric, the "
        "hardest case; advise defaults to 0.5 to leave room for the job it places)",
    )
    p.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="LINK[=STATE]",
        help="link down (or =0.5 degraded, SWITCH=drain); repeatable",
    )
    p.add_argument(
        "--fail-random",
        type=flag(int, 0, MAX_LINKS),
        default=0,
        metavar="N",
        help="N random RTSW-CTSW links down in every pod (seeded by --seed); the report names them",
    )
    p.add_argument(
        "--rate-model",
        choices=("striped", "summed"),
        default="striped",
        help="how a flow split over QPs gets its rate: striped = QPs x its slowest QP, every "
        "QP a competitor (default); summed = its subflows' rates added",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def load_inputs(args: argparse.Namespace) -> Inputs:
    """Fabric, health and flows from the command line, validated all or nothing."""
    from controller.formats.fabric_file import load_fabric
    from controller.formats.placement import load_jobs
    from controller.model.jobs import jobs_flows

    fabric = load_fabric(args.fabric)
    if args.fill is not None and not 0.0 < args.fill <= 1.0:
        raise InputError(f"--fill must be in (0, 1], got {args.fill}")
    jobs = load_jobs(fabric, args.jobs, seed=args.seed, fill=args.fill)
    health = random_failures(fabric, args.fail_random, args.seed) if args.fail_random else None
    health = parse_health(fabric, args.fail, base=health)
    flows = jobs_flows(fabric, jobs)
    if args.jobs_out:
        write_placement(args.jobs_out, fabric, jobs)
    return Inputs(fabric, health, flows, len(jobs), jobs_over_line_rate(fabric, jobs))


def write_placement(path: str, fabric: Fabric, jobs: Sequence[Job]) -> None:
    """The jobs as a placement file (`tectl job put`, `--jobs`), one job a line as the README
    writes them; errors name the file."""
    from controller.formats.placement import dump_placement

    jobs_doc = dump_placement(fabric, jobs)["jobs"]
    lines = [json.dumps(strict(job), allow_nan=False) for job in jobs_doc]  # id, hosts, ...
    try:
        with open(path, "w") as fh:
            fh.write('{"jobs": [\n  ' + ",\n  ".join(lines) + "\n]}\n")
    except OSError as bad:
        raise InputError(f"--jobs-out: cannot write {path}: {bad.strerror or bad}") from None


def _describe(inputs: Inputs) -> str:
    from controller.model.counts import Counts

    f = inputs.fabric
    down = inputs.health.down_links()
    missing = int((~f.installed).sum())
    gpus = int(f.installed[: f.num_access_links].sum()) // f.ports_per_nic  # a port a NIC
    return (
        f"fabric {f.name}: {gpus:,} GPUs in {f.pods} pod(s); "
        f"{Counts.of(inputs.flows).text()}; {down.size - missing:,} links down, "
        f"{inputs.health.degraded_links().size:,} degraded"
        + (f", {missing:,} not installed" if missing else "")
    )


def counts_of(result: Any, entries: int, off: int) -> tuple[str, dict[str, Any]]:
    """The routing's counts in the one vocabulary (controller.model.counts): a line for
    people, fields for --json; `off`: flows without a TE path (`without_te_path`)."""
    from controller.model.counts import Counts

    counts = Counts.of(result.assignment.flows)
    where = f" ({off:,} of them without a TE path)" if off else ""
    line = f"counts: {counts.text()}{where}; {entries:,} TE entries"
    return line, counts.to_dict() | {"te_entries": entries}


def without_te_path(result: Any) -> int:
    """Input flows with a row without a TE path: on ECMP for the tables, handed back by the
    certificate, left to the hashing whole, or with no path alive (the lines around say
    which)."""
    off = ~result.assignment.routed
    if result.parent is None:
        return int(off.sum())
    return int(distinct(np.asarray(result.parent)[off]).size)


def health_report(inputs: Inputs) -> tuple[list[str], dict[str, object]]:
    """The links down and degraded, by name: lines for people, fields for --json."""
    fabric = inputs.fabric
    names, factor = fabric.link_names, inputs.health.factor
    dead = [link for link in inputs.health.down_links().tolist()
            if fabric.installed[link]]  # a link without a cable is not a failure
    down = [names[link] for link in dead]
    degraded = {names[link]: float(factor[link]) for link in inputs.health.degraded_links()}
    # a switch every cabled link of which is down is named as drained, its links not listed
    lo, hi = fabric.link_ends
    ends = np.concatenate([lo[fabric.installed], hi[fabric.installed]])
    gone = np.concatenate([lo[dead], hi[dead]]) if dead else np.zeros(0, np.int64)
    cabled = np.bincount(ends, minlength=fabric.num_nodes)
    cut = np.bincount(gone, minlength=fabric.num_nodes)
    drained = [int(n) for n in np.flatnonzero((cabled > 0) & (cut == cabled))
               if fabric.node_kind(int(n)) not in ("host", "nic")]  # fmt: skip
    if drained:
        mark = np.isin(lo[dead], drained) | np.isin(hi[dead], drained)
        listed = [name for name, hit in zip(down, mark.tolist(), strict=True) if not hit]
        lines = [f"switches drained (every link down): "
                 f"{' '.join(fabric.node_name(n) for n in drained)}"]
        lines += [f"links down: {' '.join(listed)}"] if listed else []
    else:
        lines = [f"links down: {' '.join(down)}"] if down else []
    if degraded:
        lines.append("links degraded: " + " ".join(f"{k}={v:g}" for k, v in degraded.items()))
    return lines, {"links_down": down, "links_degraded": degraded}


def cmd_simulate(args: argparse.Namespace) -> int:
    from sim.compare import BASELINES, HEADER, baseline, table_rows

    inputs = load_inputs(args)
    rows = [
        baseline(
            name, inputs.fabric, inputs.health, inputs.flows, args.seed, args.qps, args.rate_model
        )
        for name in dict.fromkeys(args.routing or BASELINES)  # each once, in the order given
    ]
    health_lines, health_data = health_report(inputs)
    data = {"inputs": _describe(inputs), **health_data, "rows": [row.to_dict() for row in rows]}
    text = (
        "\n".join([_describe(inputs), *health_lines])
        + "\n\n"
        + format_table(HEADER, table_rows(rows, None))
    )
    emit(args.json, data, text)
    return 0


SIM_SUBFLOWS = 4_000_000  # routings simulated by default at most this many subflows


def simulated_subflows(
    fabric: Fabric, flows: FlowSet, result: SolveResult, qps: int
) -> dict[str, int]:
    """The subflows the simulation of each routing of the table holds (TE: its TE rows, and
    `qps` QPs for each row on the defaults; pinning: a placement of every flow)."""
    from controller.model.flows import ALL_QPS
    from controller.model.paths import flow_class, num_paths

    rows = result.assignment.flows
    off = result.assignment.path < 0
    whole = rows.qp == ALL_QPS  # a QP bucket on the defaults is one QP, a whole flow `qps`
    te = int((~off).sum()) + int((off & whole).sum()) * qps + int((off & ~whole).sum())
    spray = int(np.array(num_paths(fabric))[flow_class(fabric, flows.src_nic,
                                                       flows.dst_nic)].sum())  # fmt: skip
    n = len(flows)
    return {"fabric-te": te, "ecmp": n, "eecmp": n * qps, "wcmp": n * qps, "pinning": n,
            "spray": spray}  # fmt: skip


def cmd_solve(args: argparse.Namespace) -> int:
    from controller.solver.certificate import CertifyOptions
    from controller.solver.solve import SolveOptions, solve
    from sim.compare import (
        BASELINES,
        HEADER,
        adaptive_spray,
        baseline,
        oblivious_spray,
        routed,
        table_rows,
    )

    progress = Progress(quiet=args.json)
    if args.plot:
        from controller.formats.picture import check_picture_path

        check_picture_path(args.plot)
    if args.apply:
        from controller.drivers.interface import known_drivers

        if args.apply not in known_drivers():
            raise InputError(
                f"--apply: unknown driver {args.apply!r}; known: {', '.join(known_drivers())}"
            )
    _apply_flags(args)  # before any work
    with progress.stage("loading inputs"):
        inputs = load_inputs(args)
    if args.apply in ("linux", "ovs"):  # before the solve: a missing lab is an input error
        from sim.lab.build import require_root
        from sim.lab.cli import pick_lab

        require_root()
        args.lab = pick_lab(args.lab, inputs.fabric, args.apply)
    elif args.apply and args.lab is not None:
        raise InputError(f"--lab is for --apply linux or ovs, not --apply {args.apply}")
    options = SolveOptions(
        lp=args.lp,
        backend=args.backend,
        lp_time_limit=args.time_limit,
        table_budget=args.table_budget,
        qps=args.qps,
        certify=CertifyOptions(
            reference=args.reference, hashes=args.hashes, seed=args.seed,
            model=args.rate_model, compare=tuple(h for h in HASHINGS if h != args.reference),
            enabled=not args.no_certify,
        ),  # fmt: skip
        **({} if args.search_tries is None else {"search_tries": args.search_tries}),
        **({} if args.relief_tries is None else {"relief_tries": args.relief_tries}),
        **({} if args.job_rounds is None else {"job_rounds": args.job_rounds}),
        **({} if args.job_pass_below is None else {"job_pass_below": args.job_pass_below}),
    )
    from controller.solver.greedy import WARM_UP_STAGE, warm_up

    with progress.stage(WARM_UP_STAGE):
        warm_up()
    with progress.stage("TE solve", steps="controller.solver"):
        result = solve(inputs.fabric, inputs.health, inputs.flows, options=options)
    from controller.routes.entries import build_routes

    with progress.stage("building routes"):
        routes = build_routes(inputs.fabric, result.assignment)
    rows = []
    sizes = simulated_subflows(inputs.fabric, inputs.flows, result, args.qps)
    skipped = {name: n for name, n in sizes.items()
               if args.baselines == "auto" and n > SIM_SUBFLOWS}  # fmt: skip
    with progress.stage("simulating TE and baselines"):
        if "fabric-te" not in skipped:
            rows.append(routed("fabric-te", inputs.fabric, inputs.health, result.assignment,
                               result.times["total"], args.seed, args.qps, result.parent,
                               len(routes), args.rate_model, args.reference))  # fmt: skip
        for name in BASELINES:
            if name not in skipped:
                rows.append(baseline(name, inputs.fabric, inputs.health, inputs.flows,
                                     args.seed, args.qps, args.rate_model))  # fmt: skip
        if "spray" not in skipped:
            rows.append(oblivious_spray(inputs.fabric, inputs.health, inputs.flows,
                                        args.rate_model))  # fmt: skip
    with progress.stage("the fractional optimum (adaptive spray)"):
        t = time.perf_counter()
        optimum = _optimum(inputs, result)
        rows.append(adaptive_spray(inputs.fabric, inputs.health, inputs.flows, optimum,
                                   time.perf_counter() - t))  # fmt: skip
    bound = result.bound.value
    cert = result.certificate
    # rows without a TE entry ride the hashing: then TE's MLU is the certificate's mean over
    # its seeds, where the table's row is one seed's
    off = without_te_path(result)
    over_seeds = (f" (mean over the certificate's {len(cert.seeds)} hash seeds: rows ride "
                  "the hashing)" if cert is not None and off and len(cert.seeds) > 1
                  else "")  # fmt: skip
    counts_line, counts = counts_of(result, len(routes), off)
    metrics = result.metrics()  # its "flows" are the routing's rows: subflows, so named
    metrics["subflows"], metrics["flows"] = metrics["flows"], float(counts["flows"])
    metrics["flows_without_te_path"] = float(off)
    health_lines, health_data = health_report(inputs)
    lines = [
        _describe(inputs),
        *health_lines,
        "",
        format_table(HEADER, table_rows(rows, bound)).rstrip("\n"),
        *([f"hashed rows (ecmp, eecmp, wcmp; fabric-te's rows without an entry): hash seed "
           f"{args.seed}; the certificate compares each job's mean over seeds "
           f"{cert.seeds[0]}-{cert.seeds[-1]}"] if cert is not None and len(cert.seeds) > 1
          else []),  # fmt: skip
        "",
        f"lower bound on MLU: {bound:.4g} ({result.bound.name}{_whole_units(result.bound.name)})"
        + (f"; LP optimum {result.lp.mlu:.4g} via {result.lp.backend}" if result.lp else ""),
        f"fabric-te: MLU {result.mlu:.4g}{over_seeds} = {result.ratio:.4f} x bound, "
        f"method {result.method}, "
        f"{result.unroutable.size} unroutable, {result.fallback_ecmp.size} on ECMP (tables), "
        f"solve {result.times['total']:.3f} s",
        _tables_line(result.metrics(), result.fallback_ecmp.size,
                     _fullest(inputs.fabric, result, options.table_budget)),
        _gap_line(rows, optimum),
    ]
    lines.append(counts_line)
    if skipped:
        lines.append("not simulated (over " + f"{SIM_SUBFLOWS:,} subflows; --baselines all to "
                     "simulate them): " + ", ".join(f"{n} ({k:,} subflows)"
                                                    for n, k in skipped.items()))  # fmt: skip
    for job, why in result.hashed_jobs.items():
        lines.append(f"job {job}: {why}")
    over = inputs.over
    for job, ratio in over.items():
        lines.append(f"job {job}: a NIC of it is asked {ratio:.4g} x its line rate, so its "
                     f"flows are planned at {1 / ratio:.1%} of its demand, what its NICs can "
                     "carry (a demand_gbps above the NIC's rate?); its busbw is a share of "
                     "that")  # fmt: skip
    if result.objective is not None:
        handed = 0 if result.certificate is None else len(result.certificate.fallback_jobs)
        lines.append(result.objective.summary() + (
            f" (of the routing before the certificate handed {handed} job(s) back to the "
            "hashing; the fabric-te row above is after)" if handed else ""))
    if result.certificate is not None:
        lines.append(result.certificate.summary())
    data: dict[str, object] = {
        "inputs": _describe(inputs),
        "counts": counts,
        **health_data,
        "bound": {"value": bound, "name": result.bound.name, "parts": result.bound.parts},
        "te": _counts_as_ints(metrics),
        "rows": [row.to_dict(bound) for row in rows],
        "objective": None if result.objective is None else result.objective.to_dict(),
        "hashed_jobs": dict(result.hashed_jobs),
        "over_line_rate": over,
        "not_simulated": dict(skipped),
        "certificate": None if cert is None else {**cert.to_dict(),
                                                  "per_job": _per_job(cert, inputs.flows)},
    }
    if args.out or args.apply:
        per = list(routes.counts().values()) or [0]
        lines.append(
            f"routes: {len(routes):,} TE entries on {len(routes.switches()):,} switches "
            f"(max {max(per):,}, median {sorted(per)[len(per) // 2]:,} per switch)"
        )
        data["routes"] = {"entries": len(routes), "switches": len(routes.switches())}
        if args.out:
            from controller.formats.route_file import write_routes

            with progress.stage(f"writing {args.out}"):
                write_routes(args.out, inputs.fabric, result.assignment, routes)
            lines.append(f"wrote {args.out}")
    if getattr(args, "jobs_out", None):
        lines.append(f"wrote {args.jobs_out} ({plural(inputs.jobs, 'job')}, as --jobs and "
                     "tectl job put take them)")  # fmt: skip
    if args.apply:
        ok, text, pushed = _apply(args, inputs, result.assignment, progress)
        lines.extend(text)
        data["apply"] = pushed
        if not ok:
            emit(args.json, data, "\n".join(lines) + "\n")
            return 1
    if args.plot:
        from sim.plot import plot_comparison

        with progress.stage("plotting"):
            plot_comparison(args.plot, inputs.fabric.name, {row.method: row.report for row in rows})
        lines.append(f"wrote {args.plot}")
    emit(args.json, data, "\n".join(lines) + "\n")
    return 0


def _per_job(cert: Any, flows: Any) -> dict[str, dict[str, float]]:
    """Per job with flows, once the certificate compared some: TE's value and each
    hashing's, as it defines them (the mean over its seeds), so that the promise can be
    checked from the JSON. A job not at risk reads TE 1 (it gets its demand) and is not
    among the compared ones `worst_ratio` is taken over; a job with a flow cut off reads 0
    for TE and the reference. Empty when no job was at risk (every job then gets its demand)."""
    if cert.job_values is None or cert.reference_values is None:
        return {}
    columns = {"te": cert.job_values, cert.reference: cert.reference_values,
               **cert.compared_values}  # fmt: skip
    return {job: {name: float(v[j]) for name, v in columns.items() if np.isfinite(v[j])}
            for j, job in enumerate(flows.job_ids)
            if j < cert.job_values.size and np.isfinite(cert.job_values[j])}


def _whole_units(name: str) -> str:
    """Why a spray row may read below the bound: the part counts whole flows or buckets."""
    if name.endswith("qp") or name.endswith("unsplit") or name == "largest-flow":
        return ("; for routings of whole flows or QP buckets: spray, which splits flows "
                "finer, may go below it")
    return ""


def _gap_line(rows: list[Any], optimum: float) -> str:
    """fabric-te's worst job against adaptive spray's (the last row): a ceiling on the worst
    job only, so no mean is compared (the table shows none)."""
    head = (f"gap to adaptive spray (the ceiling on the worst job, min(1, 1 / fractional "
            f"optimum {optimum:.4g})): ")  # fmt: skip
    te = next((row for row in rows if row.method == "fabric-te"), None)
    if te is None:
        return head + "fabric-te not simulated (see below)"
    ceiling = rows[-1].report
    if not ceiling.busbw_fraction_min > 0:  # a job with a flow no routing can carry
        stalled = [job for job, v in ceiling.job_busbw_fraction.items() if not v > 0]
        names = ", ".join(stalled[:5]) + (", ..." if len(stalled) > 5 else "")
        return head + (f"{len(stalled)} job(s) stalled under any routing (a flow with no alive "
                       f"path: {names})")  # fmt: skip
    worst = _over(te.report.busbw_fraction_min, ceiling.busbw_fraction_min)
    # the ceiling binds the worst job only: jobs off the bottleneck can read above it
    return head + f"worst job {worst} of it"


def _over(a: float, b: float) -> str:
    return f"{a / b:.4f}" if b > 0 else "-"


def _optimum(inputs: Inputs, result: Any) -> float:
    """The fractional min-MLU optimum, access links included (the solve's LP if it ran).
    Where the even split over every alive path already meets the solve's lower bound, that
    is the optimum and no LP is solved (a pod-wide all-to-all: 4 s of LP saved)."""
    from controller.solver.commodities import commodities
    from controller.solver.lp import even_split, solve_lp

    access = result.bound.parts.get("access", 0.0)
    if result.lp is not None:
        return max(float(result.lp.mlu), access)
    comm = commodities(inputs.fabric, inputs.flows)
    if not len(comm.demand):
        return access
    upper = max(even_split(inputs.fabric, inputs.health, comm), access)
    if upper <= result.bound.value * (1 + 1e-9):
        return upper
    return max(solve_lp(inputs.fabric, inputs.health, comm).mlu, access)


def _fullest(fabric: Fabric, result: Any, table_budget: int | None) -> dict[str, str]:
    """Per tier the fabric has, the name of the switch the TE-entries line reads."""
    from controller.routes.budget import fullest_switches

    usage = result.usage if result.usage is not None else np.zeros(fabric.num_nodes)
    budget = fabric.table_budget(table_budget)
    return {tier: fabric.node_name(node)
            for tier, node in fullest_switches(fabric, usage, budget).items()}  # fmt: skip


def _tables_line(metrics: dict[str, float], on_ecmp: int,
                 fullest: dict[str, str] | None = None) -> str:  # fmt: skip
    """TE entries used against the per-switch budgets, per tier the fabric has (`fullest`:
    tier -> the name of its fullest switch, by the share of its own budget used), and what
    the budgets left on ECMP."""

    def budget(tier: str) -> str:
        value = metrics[f"te_entries_budget_{tier}"]
        return "unlimited" if value == float("inf") else f"{value:,.0f}"

    fullest = fullest or {"rtsw": "", "ctsw": "", "atsw": ""}
    tiers = ", ".join(
        f"{tier}{' ' + name if name and metrics[f'te_entries_max_{tier}'] else ''} "
        f"{metrics[f'te_entries_max_{tier}']:,.0f}/{budget(tier)}"
        for tier, name in fullest.items()
    )
    return (
        f"TE entries: {metrics['te_entries']:,.0f} (fullest switch of each tier, entries / "
        f"its budget: {tiers}); {plural(on_ecmp, 'flow')} left on ECMP by the table budget"
    )


def _apply_flags(args: argparse.Namespace) -> None:
    """Refuse the push's flags where they would be ignored; fill in their defaults."""
    given = [name for name, value in (("--driver-dir", args.driver_dir),
                                      ("--sample", args.sample), ("--packets", args.packets))
             if value is not None]  # fmt: skip
    given = ["--dry-run"] * bool(args.dry_run) + given
    if given and not args.apply:
        raise InputError(f"{', '.join(given)}: only with --apply DRIVER (nothing is pushed "
                         "without it)")  # fmt: skip
    if args.driver_dir is not None and args.apply != "file":
        raise InputError(f"--driver-dir is for --apply file, not --apply {args.apply}")
    for name, value in (("--sample", args.sample), ("--packets", args.packets)):
        if value is not None and args.apply not in ("linux", "ovs"):
            raise InputError(f"{name} is for --apply linux or ovs, not --apply {args.apply}")
    if args.config_db is not None and args.apply != "sonic":
        raise InputError("--config-db is for --apply sonic"
                         + (f", not --apply {args.apply}" if args.apply else ""))
    if args.apply == "sonic" and args.config_db is None:  # said before the solve, not after
        raise InputError("--apply sonic needs --config-db URL|FILE (the switches' CONFIG_DB, "
                         "as tectl serve takes it)")  # fmt: skip
    args.driver_dir = "tables" if args.driver_dir is None else args.driver_dir
    args.sample = 64 if args.sample is None else args.sample
    args.packets = 5 if args.packets is None else args.packets


def _apply(
    args: argparse.Namespace, inputs: Inputs, assignment: Any, progress: Progress
) -> tuple[bool, list[str], dict[str, object]]:
    """Push an assignment through a driver; verify forwarding on the emulated fabric."""
    from controller.drivers.interface import load_driver
    from controller.drivers.push import push
    from controller.routes.plan import plan_update
    from controller.routes.tables import RouteSet

    options: dict[str, object] = {"fabric": inputs.fabric}
    if args.apply == "file":
        options["directory"] = args.driver_dir
    if args.apply in ("linux", "ovs"):
        options["lab"] = args.lab  # picked before the solve
    if args.apply == "sonic":
        from controller.drivers.sonic import config_db_options

        options.update(config_db_options(args.config_db))
    with load_driver(args.apply, **options) as driver:
        installed = RouteSet.from_entries(e for sw in driver.switches() for e in driver.read(sw))
        plan, _ = plan_update(inputs.fabric, installed, assignment)
        counts = plan.counts()
        stages = sum(1 for stage in plan.stages if stage)
        text = [
            f"plan: {plural(len(plan), 'operation')} in {plural(stages, 'stage')} "
            f"({counts_text(counts)})"
            if len(plan)
            else f"plan: no operations; the {len(installed):,} entries wanted are installed"
        ]
        with progress.stage(f"pushing to {args.apply}"):
            report = push(driver, plan, dry_run=args.dry_run)
        text.append(f"push: {report.summary()}")
        if args.apply == "file" and not args.dry_run:
            text.append(f"tables: {args.driver_dir.rstrip('/')}/ (one file per switch)")
        out: dict[str, object] = {"plan": counts, "push_ok": report.ok}
        if not report.ok:
            return False, text, out
        emulated = getattr(driver, "emulated", None)
        if emulated is not None and not args.dry_run:
            from sim.switches import verify

            with progress.stage("verifying forwarding"):
                check = verify(inputs.fabric, emulated, assignment)
            text.append(f"forwarding check: {check.summary()}")
            out["verify_ok"] = check.ok
            return check.ok, text, out
    if args.apply in ("linux", "ovs") and not args.dry_run and args.sample > 0:
        from sim.lab.cli import packet_check

        lab = str(options["lab"])
        text[0] = f"lab {lab}: {text[0]}"
        with progress.stage(f"checking {args.sample} flows with real packets in lab {lab}"):
            report, buckets = packet_check(inputs.fabric, lab, assignment, args.sample,
                                           args.packets, args.seed)  # fmt: skip
        text.append(f"forwarding check with real packets: {report.summary()} ({buckets} of "
                    "them QP buckets)")  # fmt: skip
        text += [f"  {p}" for p in report.problems[:20]]
        out.update(lab=lab, verify_ok=report.ok)
        return report.ok, text, out
    return True, text, out


def cmd_routes_verify(args: argparse.Namespace) -> int:
    from controller.drivers.push import push
    from controller.formats.route_file import read_routes_for
    from controller.routes.plan import diff
    from controller.routes.tables import RouteSet
    from sim.driver import EmulatedDriver
    from sim.switches import verify

    if args.file and args.routes_flag and args.file != args.routes_flag:
        raise InputError("routes verify: give the route file once (FILE, or --routes FILE)")
    args.routes = args.file or args.routes_flag
    if not args.routes:
        raise InputError("routes verify: the route file to verify is missing (tectl routes "
                         "verify FILE --fabric NAME)")  # fmt: skip
    fabric, assignment, routes = read_routes_for(args.routes, args.fabric)
    health = parse_health(fabric, args.fail)
    driver = EmulatedDriver(fabric)
    driver.emulated.set_links(health.down_links().tolist(), up=False)
    report = push(driver, diff(RouteSet(), routes, fabric))
    if not report.ok:
        raise InputError(f"{args.routes}: the routes do not install: {report.summary()}")
    check = verify(fabric, driver.emulated, assignment)
    from controller.model.counts import Counts

    counts = Counts.of(assignment.flows).to_dict() | {"te_entries": len(routes)}
    named = {kind: _subflow_names(fabric, assignment.flows, rows) for kind, rows in
             (("looped", check.looped), ("dropped", check.dropped),
              ("off_path", check.off_path))}  # fmt: skip
    text = check.summary() + "".join(
        f"\n{kind.replace('_', ' ')}: " + ", ".join(names)
        + (f", ... ({len(rows):,} in all; --json lists up to {VERIFY_NAMED})"
           if len(rows) > len(names) else "")
        for (kind, names), rows in zip(named.items(), (check.looped, check.dropped,
                                                        check.off_path), strict=True)
        if names)  # fmt: skip
    emit(args.json, {"ok": check.ok, "summary": check.summary(), "counts": counts, **named},
         text + "\n")  # fmt: skip
    return 0 if check.ok else 1


VERIFY_NAMED = 20  # subflows routes verify names per problem


def _subflow_names(fabric: Any, flows: Any, rows: Any) -> list[str]:
    """The first VERIFY_NAMED subflows of `rows`, by their NICs (and QP bucket)."""
    from controller.model.flows import ALL_QPS

    out = []
    for r in rows[:VERIFY_NAMED].tolist():
        qp = int(flows.qp[r])
        out.append(f"{fabric.nic_name(int(flows.src_nic[r]))}>{fabric.nic_name(int(flows.dst_nic[r]))}"
                   + ("" if qp == ALL_QPS else f" (QP bucket {qp})"))
    return out


def register(cli: Any) -> None:
    """Add `simulate`, `solve` and `routes verify` to `tectl` (the ``fabric_te.commands``
    entry point; `cli` is a `controller.cli.main.Commands`)."""
    sub, add_fabric_arg = cli.sub, cli.add_fabric_arg
    sim = sub.add_parser("simulate",
                         help="simulate baseline routings (ECMP, E-ECMP, WCMP, pinning)")
    add_input_args(sim, add_fabric_arg)
    sim.add_argument(
        "--routing",
        action="append",
        choices=("ecmp", "eecmp", "wcmp", "pinning"),
        help="routing to simulate; repeatable (default: all four)",
    )
    sim.add_argument(
        "--qps", type=flag(int, 1, MAX_QPS), default=16,
        help="queue pairs per flow, each hashed on its own, for eecmp and wcmp (16)",
    )
    sim.set_defaults(func=cmd_simulate)

    solve = sub.add_parser(
        "solve", help="TE solve, side by side with ECMP, E-ECMP, WCMP, pinning, oblivious "
        "and adaptive spray, and the lower bound on MLU"
    )
    add_input_args(solve, add_fabric_arg)
    solve.add_argument(
        "--qps", type=flag(int, 1, MAX_QPS), default=16,
        help="queue pairs per flow: E-ECMP hashes them; TE may split a flow on an overloaded "
             "link into this many QP buckets (1: never split) (16)",
    )  # fmt: skip
    solve.add_argument(
        "--lp",
        choices=("auto", "always", "never"),
        default="auto",
        help="run the LP: auto = only when the cheap bound is not met",
    )
    solve.add_argument("--backend", default="auto", help="OR-Tools LP backend (auto)")
    solve.add_argument(
        "--time-limit", type=flag(float, 0.001, 86400), default=30.0, help="LP time limit, s (30)"
    )
    solve.add_argument(
        "--table-budget",
        type=flag(int, 0, 2**31 - 1),
        default=None,
        metavar="N",
        help="TE entries per switch, every tier (default: the fabric's te_entries, 2048 per "
        "switch unless the fabric file says otherwise); a switch's own te_entries (an "
        "inventory's) is kept where smaller; flows beyond it stay on ECMP",
    )
    solve.add_argument(
        "--search-tries",
        type=flag(int, 0, 2**31 - 1),
        default=None,
        metavar="N",
        help="flows each local search tries on other paths (default 10,000): work, not "
        "seconds, so the same inputs give the same routes on any machine",
    )
    solve.add_argument(
        "--relief-tries",
        type=flag(int, 0, 2**31 - 1),
        default=None,
        metavar="N",
        help="flows the relief pass tries on other paths to drain links loaded beyond capacity "
        "below the maximum, which MLU alone leaves alone (default 30,000; 0: no relief pass)",
    )
    solve.add_argument(
        "--baselines", choices=("auto", "all"), default="auto",
        help="auto: simulate only the routings of at most "
             f"{SIM_SUBFLOWS:,} subflows (a flow's QPs or spray paths each count; each is "
             "held in memory with its arcs while simulated), the others named as skipped; "
             "all: every one (default auto)",
    )  # fmt: skip
    solve.add_argument(
        "--job-rounds", type=flag(int, 0, 2**31 - 1), default=None, metavar="N",
        help="moves the job-level pass may keep to raise the worst job, then the next "
             "(docs/objective.md; default 32; 0: the jobs and their bound reported, nothing "
             "moved)",
    )  # fmt: skip
    solve.add_argument(
        "--job-pass-below", type=flag(float, 0.0, 1.0), default=None, metavar="F",
        help="on a mix too large for the job-level pass's work limit (the meta-24k mix), run "
             "it with local predictions where a job is below F of line rate (docs/objective.md; "
             "default 0.85; 0: only where a job is below its hashing)",
    )  # fmt: skip
    solve.add_argument(
        "--reference", choices=HASHINGS, default="eecmp",
        help="the fabric's own routing every job is certified against, and that jobs below "
             "it are handed back to: eecmp (16 hashed QPs) or wcmp (capacity-aware) (eecmp)",
    )  # fmt: skip
    solve.add_argument(
        "--hashes", type=flag(int, 1, 64), default=4, metavar="K",
        help="hash seeds (--seed, --seed+1, ...) the reference is the mean over (4)",
    )  # fmt: skip
    solve.add_argument(
        "--no-certify", action="store_true",
        help="the solver's routing as it is: no certificate, no job handed back to hashing",
    )  # fmt: skip
    solve.add_argument(
        "--out", metavar="FILE",
        help="write the routes: FILE.npz as compressed columns (fast, small), else JSON",
    )  # fmt: skip
    solve.add_argument("--plot", metavar="PNG",
                       help="per-job bus bandwidth and per-tier utilisation, TE vs E-ECMP vs "
                            "ECMP")  # fmt: skip
    solve.add_argument(
        "--apply", metavar="DRIVER", help="push the routes through a driver (emulated, file, ...)"
    )
    solve.add_argument("--driver-dir", default=None,
                       help="directory for --apply file (./tables)")  # fmt: skip
    solve.add_argument("--config-db", metavar="URL|FILE", default=None,
                       help="CONFIG_DB for --apply sonic: a Redis URL (a database per switch) "
                            "or a JSON file of switch -> URL, as tectl serve takes it")
    solve.add_argument("--lab", metavar="NAME", default=None,
                       help="lab for --apply linux or ovs (default: the one lab of this fabric "
                       "and switch kind running; see `tectl lab ls`)")  # fmt: skip
    solve.add_argument("--sample", type=flag(int, 0, 1_000_000), default=None,
                       help="with --apply linux or ovs: flows checked with real packets (64; 0: "
                       "none)")  # fmt: skip
    solve.add_argument("--packets", type=flag(int, 1, 10_000), default=None,
                       help="with --apply linux or ovs: packets per checked flow (5)")  # fmt: skip
    solve.add_argument("--dry-run", action="store_true", help="with --apply: plan only")
    solve.set_defaults(func=cmd_solve)  # fmt: skip

    rsub = cli.groups["routes"]
    rver = rsub.add_parser("verify", help="install a route file on the emulated fabric and "
                           "check every flow forwards on its assigned path")  # fmt: skip
    add_fabric_arg(rver, "the preset the route file names")
    rver.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="route file (.json, or .npz columns), as `routes diff` takes them",
    )
    rver.add_argument("--routes", dest="routes_flag", metavar="FILE", help=argparse.SUPPRESS)
    rver.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="LINK[=STATE]",
        help="link down (or =0.5 degraded, SWITCH=drain); repeatable",
    )
    rver.add_argument("--json", action="store_true", help="machine-readable output")
    rver.set_defaults(func=cmd_routes_verify)

    from sim.lab.cli import register as register_lab

    register_lab(cli)


# SolveResult.metrics() keys that count things (floats there, as gauges are): ints in --json,
# so that `te.flows` reads as `counts.flows` does
_COUNT_KEYS = ("flows", "subflows", "churn", "shared_links_over_capacity", "unroutable",
               "fallback_ecmp", "handed_back", "hashed_flows", "hashed_jobs", "qp_split_flows",
               "flows_without_te_path", "objective_floored_jobs", "objective_moves",
               "objective_stalled_jobs", "objective_tried", "certificate_fallback_flows",
               "certificate_fallback_jobs", "certificate_jobs", "certificate_jobs_checked",
               "certificate_rounds")  # fmt: skip
_COUNT_PREFIXES = ("te_entries", "certificate_below_")


def _counts_as_ints(metrics: dict[str, float]) -> dict[str, float | int]:
    """`metrics` with its counts as ints (the rest as they are)."""
    def count(key: str) -> bool:
        return key in _COUNT_KEYS or key.startswith(_COUNT_PREFIXES)

    return {k: int(v) if count(k) and isinstance(v, float) and v.is_integer() else v
            for k, v in metrics.items()}  # fmt: skip
