"""Offline `tectl` commands: simulate baselines, solve, and inspect route files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass

from controller.fabric import Fabric
from controller.flows import FlowSet
from controller.health import LinkHealth, parse_health, random_failures
from controller.report import format_table


@dataclass(frozen=True)
class Inputs:
    """What every offline command starts from."""

    fabric: Fabric
    health: LinkHealth
    flows: FlowSet
    jobs: int


def add_input_args(p: argparse.ArgumentParser, add_fabric_arg: Callable[..., None]) -> None:
    add_fabric_arg(p)
    p.add_argument(
        "--jobs",
        default="random",
        help="placement file (JSON) or 'random' for a seeded job mix (default: random)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed for job mixes and hashing (1)")
    p.add_argument(
        "--fill", type=float, default=1.0, help="fraction of hosts random jobs use (1.0)"
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
        type=int,
        default=0,
        metavar="N",
        help="N random RTSW-CTSW links down in every pod (seeded by --seed)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def load_inputs(args: argparse.Namespace) -> Inputs:
    """Fabric, health and flows from the command line, validated all or nothing."""
    from sim.fabricfile import load_fabric
    from sim.jobmix import random_jobs
    from sim.placement import load_placement
    from sim.workloads import jobs_flows

    fabric = load_fabric(args.fabric)
    if not 0.0 < args.fill <= 1.0:
        raise ValueError(f"--fill must be in (0, 1], got {args.fill}")
    if args.jobs == "random":
        jobs = random_jobs(fabric, seed=args.seed, fill=args.fill)
    else:
        jobs = load_placement(fabric, args.jobs)
    health = random_failures(fabric, args.fail_random, args.seed) if args.fail_random else None
    health = parse_health(fabric, args.fail, base=health)
    flows = jobs_flows(fabric, jobs)
    return Inputs(fabric, health, flows, len(jobs))


def _describe(inputs: Inputs) -> str:
    f = inputs.fabric
    return (
        f"fabric {f.name}: {f.num_nics} GPUs in {f.pods} pod(s); {inputs.jobs} jobs, "
        f"{len(inputs.flows)} flows; {inputs.health.down_links().size} links down, "
        f"{inputs.health.degraded_links().size} degraded"
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    from sim.compare import BASELINES, HEADER, baseline, table_rows

    inputs = load_inputs(args)
    rows = [
        baseline(name, inputs.fabric, inputs.health, inputs.flows, args.seed, args.qps)
        for name in (args.routing or BASELINES)
    ]
    data = {"inputs": _describe(inputs), "rows": [row.to_dict() for row in rows]}
    text = _describe(inputs) + "\n\n" + format_table(HEADER, table_rows(rows, None))
    _emit(args, data, text)
    return 0


def _emit(args: argparse.Namespace, data: object, text: str) -> None:
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True, default=float)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)


def register(sub: argparse._SubParsersAction, add_fabric_arg: Callable[..., None]) -> None:
    """Add the offline subcommands to `tectl`."""
    sim = sub.add_parser("simulate", help="simulate baseline routings (ECMP, E-ECMP, pinning)")
    add_input_args(sim, add_fabric_arg)
    sim.add_argument(
        "--routing",
        action="append",
        choices=("ecmp", "eecmp", "pinning"),
        help="routing to simulate; repeatable (default: all three)",
    )
    sim.add_argument("--qps", type=int, default=16, help="queue pairs per flow for eecmp (16)")
    sim.set_defaults(func=cmd_simulate)
