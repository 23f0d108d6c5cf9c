"""`tectl advise` and `tectl topology export`."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from controller.errors import AdvisorError, FabricError, InputError

if TYPE_CHECKING:
    from controller.cli.commands import Commands
from controller.formats.output import Percent, Progress, emit, format_table, plural
from controller.model.fabric import Fabric
from controller.model.validation import MAX_ADVICE, MAX_GPUS, MAX_SEED, flag

# controller.advisor.advise.SAME_POD, spelled here so that `tectl` starts without loading the
# solver (tests/controller/cli checks the two agree)
SAME_POD = ("require", "prefer", "any")
ADVICE_HEADER = ["rank", "candidate", "hosts", "pods", "racks", "cross-pod Gbps", "TE MLU",
                 "MLU/bound", "new job busbw", "Gbps a NIC",
                 "worst running-job change"]  # fmt: skip


def _gbps(value: float) -> str:
    """A candidate's Gbps a NIC ('-': no flows, or a server that does not say)."""
    return "-" if math.isnan(value) or not value else f"{value:,.4g}"


def cmd_advise(args: argparse.Namespace) -> int:
    from controller.advisor.advise import Request, advise
    from controller.formats.fabric_file import load_fabric
    from controller.formats.placement import load_jobs
    from controller.model.clos import DEFAULT_PRESET
    from controller.model.health import parse_health

    if args.server:
        return _advise_at(args)
    args.seed = 1 if args.seed is None else args.seed
    progress = Progress(quiet=args.json)
    with progress.stage("loading inputs"):
        fabric = load_fabric(args.fabric or DEFAULT_PRESET)
        jobs = load_jobs(fabric, args.jobs or "random", seed=args.seed, fill=args.fill,
                         default_fill=0.5)  # fmt: skip
        health = parse_health(fabric, args.fail)
    request = Request(
        gpus=args.gpus or 0, hosts=args.hosts or 0, dp=args.dp, pp=args.pp, tp=args.tp,
        pattern=args.pattern,
        same_pod=args.same_pod, avoid_hosts=_avoid(fabric, args.avoid),
        top=args.top,
    )  # fmt: skip
    from controller.solver.greedy import WARM_UP_STAGE, warm_up

    with progress.stage(WARM_UP_STAGE):
        warm_up()
    with progress.stage(f"routing {len(jobs)} running jobs and scoring candidates"):
        try:
            advice = advise(fabric, health, jobs, request, seed=args.seed)
        except AdvisorError as err:  # named as the request's fields: say the flags instead
            raise AdvisorError(_as_flags(str(err))) from None
    rows = [
        [s.rank, s.strategy, len(s.hosts), s.pods, s.racks, s.cross_pod_gbps, s.te_mlu,
         s.mlu_ratio, Percent(s.new_job_busbw), _gbps(s.new_job_gbps), s.worst_existing_delta]
        for s in advice
    ]  # fmt: skip
    gpus = request.gpus or request.hosts * fabric.gpus_per_host
    dp = args.dp or gpus // (args.pp * args.tp)
    text = (
        f"fabric {fabric.name}: {plural(len(jobs), 'running job')}; request {plural(gpus, 'GPU')} "
        f"(dp {dp} x pp {args.pp} x tp {args.tp}{'' if args.dp else ', dp from the GPUs asked'}, "
        f"{args.pattern})\n\n"
        + format_table(ADVICE_HEADER, rows)
        + "".join(f"\n#{i + 1} hosts: {_names(fabric, s.hosts)}"
                  + (f"\n#{i + 1} note: {s.note}" if s.note else "")
                  for i, s in enumerate(advice))  # fmt: skip
        + ("\n\n" + mlu_note(advice[0].mlu_before, max(s.te_mlu for s in advice))
           if advice else "")
        + (NO_FLOWS if advice and all(math.isnan(s.new_job_busbw) for s in advice) else "")
        + (STALLED if advice and all(s.new_job_busbw == 0 for s in advice) else "")
    )
    data = [
        {**asdict(s), "hosts": [fabric.host_name(h) for h in s.hosts], "mlu_ratio": s.mlu_ratio,
         "new_job_gbps": s.new_job_gbps}
        for s in advice
    ]
    emit(args.json, data, text + "\n")
    return 0


STALLED = ("\n\nevery candidate stalls the job (busbw 0): some flow of it has no live path\n"
           "(its racks cut off from each other by the failures); do not place it now")
NO_FLOWS = ("\n\nthe job exchanges nothing across the fabric (its GPUs in one host, or one\n"
            "pipeline stage with nothing else): no busbw to predict ('-'); the candidates are\n"
            "ranked by what they do to the running jobs")

# a PlacementRequest's fields, as tectl advise's flags spell them (in the server's errors)
API_FLAGS = (("avoid_hosts", "--avoid"), ("same_pod", "--same-pod"), ("gpus", "--gpus"),
             ("hosts", "--hosts"), ("dp", "--dp"), ("pp", "--pp"), ("tp", "--tp"),
             ("top", "--top"), ("pattern", "--pattern"))  # fmt: skip

def _as_flags(text: str) -> str:
    """An advice error naming a request field (`request.gpus`, or `gpus:` first, as the
    advisor names them) said with the flags instead."""
    for name, flag_name in API_FLAGS:
        text = text.replace(f"request.{name}", flag_name)
        if text.startswith(f"{name}:"):
            text = flag_name + text[len(name) :]
    if text.startswith("dp*pp*tp:"):
        text = "--dp x --pp x --tp" + text[len("dp*pp*tp") :]
    return text


# offline inputs a controller has of its own: refused with --server
SERVER_OWNS = ("fabric", "jobs", "seed", "fill", "fail")


def _advise_at(args: argparse.Namespace) -> int:
    """`tectl advise --server`: the controller's Advise, among its own jobs and health."""
    from controller.cli.service import _client

    given = [f"--{name}" for name in SERVER_OWNS if getattr(args, name) not in (None, [])]
    if given:
        raise AdvisorError(f"{', '.join(given)}: not with --server, which advises among the "
                           "controller's own fabric, jobs and link health")  # fmt: skip
    request = {"gpus": args.gpus, "hosts": args.hosts, "dp": args.dp, "pp": args.pp,
               "tp": args.tp, "pattern": args.pattern, "same_pod": args.same_pod,
               "avoid_hosts": args.avoid, "top": args.top}  # fmt: skip
    with _client(args) as client:
        try:
            advice = client.advise(request)
        except InputError as err:  # named as the server's fields: say the flags instead
            raise InputError(_as_flags(str(err))) from None
    rows = [
        [rank, c["strategy"], len(c["hosts"]), c["pods"], c["racks"], c["cross_pod_gbps"],
         c["te_mlu"], c["mlu_ratio"], Percent(c["new_job_busbw"]),
         _gbps(c.get("new_job_gbps", float("nan"))), c["worst_existing_delta"]]
        for rank, c in enumerate(advice, start=1)
    ]  # fmt: skip
    size = plural(args.gpus, "GPU") if args.gpus else plural(args.hosts, "host")
    text = (
        f"controller at {args.server}: request {size} (pp {args.pp} x tp {args.tp}, "
        f"{args.pattern})\n\n" + format_table(ADVICE_HEADER, rows)
        + "".join(f"\n#{i + 1} hosts: {_listed(c['hosts'])}"
                  + (f"\n#{i + 1} note: {c['note']}" if c.get("note") else "")
                  for i, c in enumerate(advice))  # fmt: skip
        + ("\n\n" + mlu_note(advice[0]["mlu_before"], max(c["te_mlu"] for c in advice))
           if advice else "")
        + (NO_FLOWS if advice and all(math.isnan(c["new_job_busbw"]) for c in advice) else "")
        + (STALLED if advice and all(c["new_job_busbw"] == 0 for c in advice) else "")
    )  # fmt: skip
    data = [{**c, "rank": rank} for rank, c in enumerate(advice, start=1)]
    emit(args.json, data, text + "\n")
    return 0


def mlu_note(before: float, worst: float) -> str:
    """What the TE MLU column measures, and the running jobs' own MLU (`before`) beside the
    candidates' highest (`worst`)."""
    note = (
        "TE MLU: the most loaded link of the fabric with the job added, every flow on one path "
        "(the advisor does not split flows into QP buckets, so it reads above `tectl solve`'s "
        f"MLU for the same jobs). The running jobs alone: MLU {before:.4g}"
    )
    if worst <= before * (1 + 1e-9):
        note += (
            "; no candidate raises it: the most loaded links are the running jobs', and the "
            "new job's busbw depends only on the links it uses."
        )
    else:
        note += "; a candidate above it loads the hottest link further."
    return textwrap.fill(note, 92)


def _avoid(fabric: Fabric, names: list[str]) -> tuple[int, ...]:
    """Host ids of the --avoid names; an unknown name is an error naming the option."""

    out = []
    for name in names:
        try:
            out.append(fabric.host_by_name(name))
        except FabricError as err:
            raise AdvisorError(f"--avoid: {err}") from None
    return tuple(out)


def _names(fabric: Fabric, hosts: tuple[int, ...]) -> str:
    return _listed([fabric.host_name(h) for h in hosts])


def _listed(names: Sequence[str], shown: int = 6) -> str:
    more = f" ... (+{len(names) - shown} more; --json lists all)" if len(names) > shown else ""
    return " ".join(names[:shown]) + more


def cmd_topology_export(args: argparse.Namespace) -> int:
    from controller.formats.fabric_file import load_fabric
    from controller.formats.topology import check_slurm_version, export

    if args.slurm_version:
        check_slurm_version(args.format, args.slurm_version)
    sys.stdout.write(export(load_fabric(args.fabric), args.format).rstrip("\n") + "\n")
    return 0


def register(cli: Commands) -> None:
    """Add `advise` and `topology export` to `tectl`."""
    sub, add_fabric_arg = cli.sub, cli.add_fabric_arg
    from controller.cli.service import add_tls_args
    from controller.formats.topology import FORMATS

    adv = sub.add_parser("advise", help="where should a new job run (ranked placements), "
                         "offline or asking a controller (--server)")  # fmt: skip
    add_fabric_arg(adv)
    adv.set_defaults(fabric=None)  # offline: the default preset; refused with --server
    adv.add_argument(
        "--jobs",
        default=None,
        help="running jobs: placement file, a job mix ('random', the default: seeded) or "
             "'none'",
    )  # fmt: skip
    adv.add_argument(
        "--seed",
        type=flag(int, 0, MAX_SEED),
        default=None,
        help="seed of the random job mix and of the advisor's tie-breaks (1)",
    )
    adv.add_argument(
        "--fill", type=float, default=None,
        help="with --jobs random: fraction of hosts the running jobs take (0.5: half, so there "
             "is room for the new job; solve and simulate default to 1.0, a full fabric)",
    )  # fmt: skip
    adv.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="LINK[=STATE]",
        help="link down (or =0.5 degraded, SWITCH=drain) while advising; repeatable",
    )
    size = adv.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "--gpus",
        type=flag(int, 1, MAX_GPUS),
        help="GPUs the new job needs: a multiple of the GPUs per host",
    )
    size.add_argument("--hosts", type=flag(int, 1, MAX_GPUS), help="instead of --gpus: whole hosts")
    adv.add_argument(
        "--dp",
        type=flag(int, 0, MAX_GPUS),
        default=0,
        help="data-parallel degree (0, the default: GPUs / (pp x tp))",
    )
    adv.add_argument(
        "--pp", type=flag(int, 1, MAX_GPUS), default=1, help="pipeline-parallel degree (1)"
    )
    adv.add_argument(
        "--tp",
        type=flag(int, 1, MAX_GPUS),
        default=1,
        help="tensor-parallel degree, inside a host (1)",
    )
    adv.add_argument(
        "--pattern",
        default="ring",
        choices=("ring", "alltoall", "pipeline"),
        help="the new job's collective traffic (ring)",
    )
    adv.add_argument(
        "--same-pod",
        default="prefer",
        choices=SAME_POD,
        help="require: one pod or no advice; prefer (default): across pods only "
        "when no pod fits; any: candidates across pods too",
    )
    adv.add_argument(
        "--avoid", nargs="*", default=[], metavar="HOST", help="hosts the new job must not use"
    )
    adv.add_argument(
        "--top",
        type=flag(int, 1, MAX_ADVICE),
        default=3,
        help=f"candidates to show, best first (3; at most {MAX_ADVICE})",
    )
    adv.add_argument("--json", action="store_true", help="machine-readable output")
    adv.add_argument("--server", metavar="HOST:PORT",
                     help="ask the controller there (its fabric, running jobs and link "
                          "health; not with --fabric, --jobs, --seed, --fill, --fail)")
    add_tls_args(adv)
    adv.set_defaults(func=cmd_advise)  # fmt: skip

    topo = sub.add_parser("topology", help="the fabric's hierarchy for schedulers")
    tsub = topo.add_subparsers(dest="topology_command", required=True, metavar="SUBCOMMAND")
    exp = tsub.add_parser("export", help="Slurm, Kubernetes (Kueue, Volcano) or JSON")
    add_fabric_arg(exp)
    exp.add_argument("--format", required=True, choices=FORMATS)
    exp.add_argument(
        "--slurm-version", metavar="X.Y",
        help="fail unless this Slurm release reads the format (block: 23.11+, yaml: 25.05+)",
    )  # fmt: skip
    exp.set_defaults(func=cmd_topology_export)
