"""`tectl resilience`: every single failure's cost to each job under fabric-te's repair,
E-ECMP and capacity-aware WCMP, ranked; as text, JSON and a picture."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.errors import InputError
from controller.formats.output import Progress, emit, format_table, plural
from controller.formats.picture import check_picture_path, require_matplotlib, save_picture
from controller.model.validation import MAX_QPS, MAX_SEED, flag

if TYPE_CHECKING:
    from controller.cli.commands import Commands
    from controller.model.assignment import Assignment
    from controller.solver.resilience import Resilience

TOP = 20  # elements listed in the text report by default
ROUTING_NAMES = ("fabric-te", "eecmp", "wcmp")  # controller.solver.resilience.ROUTINGS


def _inputs(args: argparse.Namespace, progress: Progress) -> Any:
    """The fabric, health and installed routing: a route file, or a solve of the jobs."""
    from controller.formats.fabric_file import load_fabric
    from controller.formats.placement import load_jobs
    from controller.model.clos import DEFAULT_PRESET
    from controller.model.failures import ELEMENT_KINDS, single_failures
    from controller.model.health import parse_health
    from controller.model.jobs import jobs_flows
    from controller.solver import CertifyOptions, SolveOptions, solve, warm_up
    from controller.solver.certificate import DEFAULT_HASHES
    from controller.solver.greedy import WARM_UP_STAGE
    from controller.solver.qp_buckets import DEFAULT_QPS
    from controller.solver.resilience import SweepInputs, sample_doubles

    kinds = _kinds(args) or ELEMENT_KINDS
    qps = DEFAULT_QPS if args.qps is None else args.qps
    if args.routes and args.jobs is not None:
        raise InputError("--routes and --jobs: give one (a route file holds its flows)")
    if args.routes and args.fill is not None:
        raise InputError(f"--fill {args.fill:g}: the share of hosts a job mix takes (--jobs "
                         "random), not used with --routes (a route file holds its flows)")
    routed: Assignment | None = None
    with progress.stage("loading inputs"):
        if args.routes:
            from controller.formats.route_file import read_routes_for

            # the fabric the file names, unless --fabric says otherwise
            fabric, routed, _ = read_routes_for(args.routes, args.fabric)
        else:
            fabric = load_fabric(args.fabric or DEFAULT_PRESET)
        health = parse_health(fabric, args.fail)
        certify = CertifyOptions(reference=args.reference or "eecmp",
                                 hashes=args.hashes or DEFAULT_HASHES, seed=args.seed)
    with progress.stage(WARM_UP_STAGE):
        warm_up()
    hashed: tuple[str, ...] = ()  # routes from a file say nothing of jobs left to hashing
    if routed is not None:
        assignment = routed
        _check_alive(args.routes, fabric, health, assignment)
    else:
        if args.fill is not None and not 0.0 < args.fill <= 1.0:
            raise InputError(f"--fill must be in (0, 1], got {args.fill}")
        jobs = load_jobs(fabric, args.jobs or "random", seed=args.seed, fill=args.fill)
        flows = jobs_flows(fabric, jobs)
        options = SolveOptions(qps=qps, table_budget=args.table_budget, certify=certify)
        with progress.stage("TE solve", steps="controller.solver"):
            solved = solve(fabric, health, flows, options=options)
            assignment, hashed = solved.assignment, tuple(solved.hashed_jobs)
    doubles: tuple[tuple[int, int], ...] = ()
    if args.doubles:
        doubles = sample_doubles(single_failures(fabric, health, kinds), args.doubles,
                                 args.seed)  # fmt: skip
    return SweepInputs(fabric, health, assignment, qps=qps, table_budget=args.table_budget,
                       certify=certify, kinds=kinds, doubles=doubles,
                       hashed_jobs=hashed)  # fmt: skip


def _kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """--kinds as a tuple, checked (empty: not given, every kind)."""
    from controller.model.failures import check_kinds

    if args.kinds is None:
        return ()
    return check_kinds(tuple(k.strip() for k in args.kinds.split(",")), "--kinds", InputError)


def _check_alive(path: str, fabric: Any, health: Any, assignment: Any) -> None:
    """Refuse a routing with paths over links down in --fail: the sweep starts from a
    routing installed on this health (the controller repairs such paths before anything
    else), and would count their flows as stopped."""
    import numpy as np

    arcs = assignment.arcs(fabric)
    dead = health.arc_capacity(fabric) <= 0
    hit = ((arcs >= 0) & dead[np.maximum(arcs, 0)]).any(axis=1)
    if hit.any():
        row = int(np.flatnonzero(hit)[0])
        link = int(arcs[row][(arcs[row] >= 0) & dead[np.maximum(arcs[row], 0)]][0]) // 2
        raise InputError(
            f"{path}: {int(hit.sum()):,} flow(s) are routed over links down in --fail (the "
            f"first over {fabric.link_name(link)}); the sweep starts from routes installed on "
            "this health: solve with these failures (tectl solve --fail ... --out FILE) and "
            "give that file, or leave out --routes")


class _Ticker:
    """Elements done / in all and the rate, on stderr, at most every few seconds. The rate
    is measured from the first batch done on: before it the workers start and build their
    sweep (seconds to a minute), which counted as sweeping made the first estimates of the
    time left many times too long (tiny: ~572 s left of a sweep that ended 13 s later)."""

    def __init__(self, quiet: bool, every: float = 5.0) -> None:
        self.quiet, self.every = quiet, every
        self.start = time.perf_counter()
        self.last = 0.0
        self.first: tuple[float, int] | None = None  # (seconds, elements) at the first call

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter() - self.start
        if self.first is None:
            self.first = (now, done)
        if self.quiet or (now - self.last < self.every and done < total):
            return
        self.last = now
        t0, d0 = self.first
        if done == d0 or now <= t0:  # one batch seen: no rate yet
            print(f"  swept {done:,}/{total:,} elements in {now:,.0f} s (workers' start "
                  "included)", file=sys.stderr, flush=True)  # fmt: skip
            return
        rate = (done - d0) / (now - t0)
        left = (total - done) / rate
        print(f"  swept {done:,}/{total:,} elements, {rate:,.1f}/s, ~{left:,.0f} s left",
              file=sys.stderr, flush=True)  # fmt: skip


def cmd_resilience(args: argparse.Namespace) -> int:
    from controller.solver.sweep_runners import run_local, run_ray

    if args.server:
        return _from_server(args)
    progress = Progress(quiet=args.json)
    if args.plot:
        check_picture_path(args.plot)
    inputs = _inputs(args, progress)
    ticker = _Ticker(quiet=False)  # minutes of work: on stderr even beside --json's stdout
    print(f"  sweeping on {'Ray at ' + args.ray if args.ray else 'local worker processes'}: "
          "each worker builds the sweep first (seconds; up to a minute on meta-24k), then "
          "reports as its batches end", file=sys.stderr, flush=True)  # fmt: skip
    if args.ray:
        result, stats = run_ray(inputs, address=args.ray, workers=args.workers, progress=ticker)
    else:
        result, stats = run_local(inputs, workers=args.workers, progress=ticker)
    if not args.json:
        print(f"  sweep: {stats.elements:,} elements on {plural(stats.workers, 'worker')} "
              f"({stats.runner}) in {stats.seconds:.1f} s", file=sys.stderr)  # fmt: skip
    data = report_data(result, inputs.fabric.name)
    data["run"] = {"seconds": stats.seconds, "workers": stats.workers, "runner": stats.runner,
                   "elements": stats.elements}  # fmt: skip
    text = report_text(result, inputs.fabric.name, args.top)
    if args.plot:
        plot(args.plot, result, inputs.fabric.name, args.top)
        text += f"wrote {args.plot}\n"
    emit(args.json, data, text)
    return 0


# offline inputs a controller decides itself: refused with --server (its own are swept:
# its fabric too, and a --fill of jobs it does not solve)
SERVER_OWNS = ("fabric", "routes", "jobs", "fill", "fail", "ray", "table_budget", "reference",
               "hashes", "qps")  # fmt: skip


def _from_server(args: argparse.Namespace) -> int:
    """The sweep of what the controller at --server has installed, printed as offline."""
    from controller.cli.service import _client

    given = [f"--{name.replace('_', '-')}" for name in SERVER_OWNS
             if getattr(args, name) not in (None, [])]
    if given:
        raise InputError(f"{', '.join(given)}: not with --server, which sweeps the "
                         "controller's installed routing and health under its own options")
    if args.plot:
        check_picture_path(args.plot)
    kinds = _kinds(args)  # as offline: --kinds '' is an error, not every kind
    print(f"  sweeping what {args.server} has installed ...", file=sys.stderr, flush=True)
    done = threading.Event()

    def heartbeat(start: float = time.perf_counter(), every: float = 10.0) -> None:
        while not done.wait(every):  # one reply at the end: say it is still under way
            print(f"  still sweeping at {args.server}: {time.perf_counter() - start:,.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    beat = threading.Thread(target=heartbeat, name="resilience-heartbeat", daemon=True)
    beat.start()
    try:
        with _client(args) as client:
            result, fabric_name, run = client.resilience(kinds, args.workers or 0,
                                                         args.doubles, args.seed)  # fmt: skip
    finally:
        done.set()
        beat.join()
    if not args.json:
        print(f"  sweep: {run['elements']:,} elements on {plural(run['workers'], 'worker')} "
              f"({run['runner']}, at {args.server}) in {run['seconds']:.1f} s",
              file=sys.stderr)  # fmt: skip
    data = report_data(result, fabric_name)
    data["run"] = run
    text = report_text(result, fabric_name, args.top)
    if args.plot:
        plot(args.plot, result, fabric_name, args.top)
        text += f"wrote {args.plot}\n"
    emit(args.json, data, text)
    return 0


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.1f}%"


def report_text(r: Resilience, fabric_name: str, top: int = TOP) -> str:
    """The operator's report: ranked elements, a summary per kind, jobs with no good repair,
    the blast radius."""
    from controller.solver.resilience import KINDS

    n, jobs = len(r.names), int(r.has_flows.sum())
    worst, loss = r.worst_loss, r.loss
    lines = [
        f"resilience of {fabric_name}: {plural(n, 'element')} failed one at a time "
        + "(" + ", ".join(f"{KINDS[k]} {int((r.kind == k).sum()):,}"
                          for k in range(len(KINDS)) if (r.kind == k).any()) + "), "
        + f"{plural(jobs, 'job')} with flows",
        "before any failure, worst job: " + ", ".join(
            f"{name} {_pct(float(np.nanmin(np.where(r.has_flows, r.before[i], np.nan))))}"
            if jobs else f"{name} -" for i, name in enumerate(ROUTING_NAMES))
        + " (a hashing's: the mean over its hash seeds, as the certificate counts it)",
        "",
        f"elements ranked by the jobs they stall (a flow with no path under any routing: "
        f"the job stops), then by the worst job loss over the other jobs under fabric-te's "
        f"repair (bus bandwidth before - after, share of line rate; top {min(top, n)} of "
        f"{n:,}):",
    ]  # fmt: skip
    rows = []
    for rank, i in enumerate(r.ranking[:top].tolist(), start=1):
        j = int(np.argmax(loss[i, 0])) if jobs else 0
        # every job with flows stalled (by the element, or before it): no other job whose
        # loss the columns could show
        live = r.has_flows & ~r.stalled[i] & ~r.stalled_before
        others = bool(live.any())
        losses = [_pct(worst[i, x]) if others else "-" for x in range(3)]
        # what each routing leaves its worst job (a loss is from each routing's own value
        # before, and fabric-te's is higher: its loss can be the larger, its job still
        # better off)
        after = " / ".join(_pct(float(r.after[i, x][live].min())) for x in range(3)) \
            if others else "-"  # fmt: skip
        rows.append([rank, r.names[i], KINDS[r.kind[i]], *losses, after,
                     r.job_ids[j] if worst[i, 0] > 0 else "-",
                     int(r.stalled[i].sum()), int(r.crossed_flows[i]), int(r.moved_flows[i]),
                     int(r.moved_jobs[i]), int(r.handed_back[i])])  # fmt: skip
    lines.append(format_table(["rank", "element", "kind", "te loss", "eecmp loss", "wcmp loss",
                               "worst job after (te / eecmp / wcmp)", "worst job (te)",
                               "jobs stalled", "flows crossed", "flows moved", "jobs moved",
                               "handed back"], rows).rstrip("\n"))  # fmt: skip
    lines += ["", "per kind (worst job loss over the elements of the kind: mean / max):"]
    krows = []
    for k in range(len(KINDS)):
        m = r.kind == k
        if not m.any():
            continue
        krows.append([KINDS[k], int(m.sum())]
                     + [f"{_pct(worst[m, x].mean())} / {_pct(worst[m, x].max())}" for x in range(3)]
                     + [int((worst[m, 0] > 1e-9).sum()),
                        int(r.stalled[m].any(axis=1).sum())])  # fmt: skip
    head = ["kind", "elements", "fabric-te", "eecmp", "wcmp", "hurting a job (te)",
            "stalling a job"]
    lines.append(format_table(head, krows).rstrip("\n"))
    bad = np.argwhere(r.no_good)
    lines += ["", f"jobs with no good repair (fabric-te below E-ECMP or WCMP after the same "
                  f"failure, or below {r.keep:.0%} of its value before): "
                  f"{plural(len(bad), 'case')} in "
                  f"{plural(len(np.unique(bad[:, 0])) if len(bad) else 0, 'element')}"]  # fmt: skip
    if len(bad):
        order = np.lexsort((bad[:, 1], bad[:, 0], r.after[bad[:, 0], 0, bad[:, 1]]))
        brows = [[r.names[e], r.job_ids[j], _pct(r.before[0, j]), _pct(r.after[e, 0, j]),
                  _pct(r.after[e, 1, j]), _pct(r.after[e, 2, j])]
                 for e, j in bad[order][:top].tolist()]  # fmt: skip
        lines.append(format_table(["element", "job", "te before", "te after", "eecmp after",
                                   "wcmp after"], brows).rstrip("\n"))  # fmt: skip
    stalled = r.stalled.any(axis=1)
    lines += ["", "stalled (a flow with no path left under any routing: its NIC's switch, or "
                  "every path out of its rack or pod, failed): "
                  f"{plural(int(stalled.sum()), 'element')}"]  # fmt: skip
    before = np.flatnonzero(r.stalled_before)
    if len(before):
        lines.append(f"stalled before any failure (a flow with no path in the health swept "
                     f"from, counted for no element): {plural(len(before), 'job')}: "
                     + " ".join(r.job_ids[j] for j in before[:top].tolist())
                     + (" ..." if len(before) > top else ""))  # fmt: skip
    moved, crossed = r.moved_flows, r.crossed_flows
    if n:
        beyond = int((moved > crossed).sum())
        lines += [
            "",
            f"blast radius: fabric-te's repairs, one per element, moved {int(moved.sum()):,} "
            f"flows summed over the {n:,} elements (per element: median "
            f"{int(np.median(moved)):,}, max {int(moved.max()):,}; "
            f"jobs moved: max {int(r.moved_jobs.max()):,}); {beyond:,} element(s) moved more "
            f"flows than crossed them (the certificate's hand-backs or shared entries); "
            f"{int((crossed == 0).sum()):,} element(s) carried no TE flow",
        ]  # fmt: skip
    return "\n".join(lines) + "\n"


def report_data(r: Resilience, fabric_name: str) -> dict[str, Any]:
    """The whole result for machines (strict JSON: NaN as null)."""
    from controller.formats.output import strict
    from controller.solver.resilience import KINDS

    return strict({
        "fabric": fabric_name, "routings": list(ROUTING_NAMES), "jobs": list(r.job_ids),
        "keep": r.keep,
        "before": {name: dict(zip(r.job_ids, r.before[i].tolist(), strict=True))
                   for i, name in enumerate(ROUTING_NAMES)},
        "ranking": [r.names[i] for i in r.ranking.tolist()],
        "stalled_before": [r.job_ids[j] for j in np.flatnonzero(r.stalled_before).tolist()],
        "elements": [
            {"name": r.names[i], "kind": KINDS[r.kind[i]],
             "worst_loss": dict(zip(ROUTING_NAMES, r.worst_loss[i].tolist(), strict=True)),
             "after": {name: r.after[i, x].tolist() for x, name in enumerate(ROUTING_NAMES)},
             "flows_crossed": int(r.crossed_flows[i]), "jobs_crossed": int(r.crossed_jobs[i]),
             "flows_moved": int(r.moved_flows[i]), "jobs_moved": int(r.moved_jobs[i]),
             "handed_back": int(r.handed_back[i]),
             "no_good_repair": [r.job_ids[j] for j in np.flatnonzero(r.no_good[i]).tolist()],
             "stalled": [r.job_ids[j] for j in np.flatnonzero(r.stalled[i]).tolist()]}
            for i in range(len(r.names))
        ],
    })  # fmt: skip


def plot(path: str, r: Resilience, fabric_name: str, top: int = TOP) -> None:
    """Ranked bars: the `top` elements by fabric-te's worst job loss, each with the worst
    job loss under the three routings, and beside them each kind's mean (PNG or SVG)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from controller.solver.resilience import KINDS

    colours = ("#1b7837", "#f1a340", "#2166ac")
    ids = r.ranking[:top]
    worst = r.worst_loss
    fig, (ax, axk) = plt.subplots(1, 2, figsize=(max(9.0, 0.45 * len(ids) + 5), 5.5),
                                  gridspec_kw={"width_ratios": [3, 1]})  # fmt: skip
    width = 0.27
    x = np.arange(len(ids))
    stalls = r.stalled[ids].any(axis=1)
    if stalls.any():  # no loss to draw: the job stops under any routing
        ax.bar(x[stalls], 100, 3 * width, color="#d9d9d9", zorder=0,
               label="stalls a job (no path under any routing)")  # fmt: skip
    for k, name in enumerate(ROUTING_NAMES):
        ax.bar(x + (k - 1) * width, 100 * worst[ids, k], width, label=name, color=colours[k])
    ax.set_xticks(x, [r.names[i] for i in ids.tolist()], rotation=60, ha="right",
                  fontsize="small")  # fmt: skip
    ax.set_ylabel("worst job's bus bandwidth lost, % of line rate")
    ax.set_ylim(0, 105)
    ax.set_title(f"the {len(ids)} failures that hurt jobs most under fabric-te")
    ax.legend(frameon=False)
    kinds = [k for k in range(len(KINDS)) if (r.kind == k).any()]
    xk = np.arange(len(kinds))
    for k, name in enumerate(ROUTING_NAMES):
        axk.bar(xk + (k - 1) * width, [100 * worst[r.kind == kk, k].mean() for kk in kinds],
                width, color=colours[k], label=name)  # fmt: skip
    axk.set_xticks(xk, [KINDS[k] for k in kinds])
    axk.set_title("mean over each kind")
    axk.set_ylim(0, 105)
    fig.suptitle(f"{fabric_name}: single failures, worst job loss per routing",
                 fontweight="bold")  # fmt: skip
    fig.tight_layout()
    save_picture(fig, path)


def register(cli: Commands) -> None:
    """Add `tectl resilience`."""
    from controller.cli.service import add_tls_args
    from controller.model.hashing import HASHINGS

    p = cli.sub.add_parser(
        "resilience",
        help="every single failure's cost to each job: fabric-te's repair vs E-ECMP and WCMP",
    )
    cli.add_fabric_arg(p, "with --routes, the preset the file names; else pod")
    p.add_argument("--jobs", default=None,
                   help="placement file (JSON) or a job mix ('random'), solved first (random)")
    p.add_argument("--routes", metavar="FILE",
                   help="the installed routing from a route file (.json or .npz) instead of a "
                        "solve of --jobs")  # fmt: skip
    p.add_argument("--seed", type=flag(int, 0, MAX_SEED), default=1,
                   help="seed of the job mix, the first hash seed and --doubles (1)")
    p.add_argument("--fill", type=float, default=None,
                   help="with --jobs random: hosts taken (1.0)")
    p.add_argument("--fail", action="append", default=[], metavar="LINK[=STATE]",
                   help="the health before the sweep: link down (or =0.5, SWITCH=drain)")
    p.add_argument("--qps", type=flag(int, 1, MAX_QPS), default=None,
                   help="queue pairs per flow (hashed) and QP buckets TE may split into (16)")
    p.add_argument("--table-budget", type=flag(int, 0, 2**31 - 1), default=None, metavar="N",
                   help="TE entries per switch, every tier; a switch's own (an inventory's) is "
                        "kept where smaller (default: the fabric's)")
    p.add_argument("--reference", choices=HASHINGS, default=None,
                   help="the routing the repair's certificate holds every job to (eecmp)")
    p.add_argument("--hashes", type=flag(int, 1, 64), default=None, metavar="K",
                   help="hash seeds the hashed values are the mean over (4)")
    p.add_argument("--kinds", metavar="K[,K]",
                   help="element kinds to fail: link, rtsw, ctsw, atsw (default: all)")
    p.add_argument("--doubles", type=flag(int, 0, 1_000_000), default=0, metavar="N",
                   help="also N sampled double failures (pairs drawn with --seed; every "
                        "pair when there are no more than N: the report counts them)")
    p.add_argument("--workers", type=flag(int, 1, 4096), default=None, metavar="N",
                   help="local worker processes (default and most: the cores, and no more "
                        "than the elements; 1: this process); with --ray, actors (default: "
                        "the cluster's CPUs)")  # fmt: skip
    p.add_argument("--ray", metavar="auto|ADDRESS",
                   help="run on a Ray cluster (the `ray` extra): auto, or its host:port")
    p.add_argument("--top", type=flag(int, 1, 1_000_000), default=TOP,
                   help=f"elements and cases listed (and plotted) (default {TOP})")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="FILE",
                   help="ranked bars of the worst job loss per routing (.png, .svg, .pdf, ...)")
    p.add_argument("--server", metavar="HOST:PORT",
                   help="sweep what the controller there has installed (its routing, jobs, "
                        "health and options; --workers bounded by it, --seed draws "
                        "--doubles) instead of files")
    add_tls_args(p)
    p.set_defaults(func=cmd_resilience)
