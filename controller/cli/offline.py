"""Offline `tectl` commands of the controller: `fabric show` and `routes diff`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from controller.formats.output import emit, format_table
from controller.model.flows import ALL_QPS

if TYPE_CHECKING:
    from controller.cli.commands import Commands


def cmd_fabric_show(args: argparse.Namespace) -> int:
    from controller.formats.fabric_file import load_fabric

    fabric = load_fabric(args.fabric)
    summary = fabric.summary()
    rows = [[key, value] for key, value in summary.items()]
    emit(args.json, summary, format_table(["field", "value"], rows))
    return 0


def cmd_routes_diff(args: argparse.Namespace) -> int:
    from controller.formats.fabric_file import load_fabric
    from controller.formats.route_file import read_routes
    from controller.routes.plan import diff

    fabric = load_fabric(args.fabric)
    _, old = read_routes(args.old, fabric)
    _, new = read_routes(args.new, fabric)
    plan = diff(old, new, fabric)
    lines = [f"{len(plan)} operations in {len(plan.stages)} stages: {plan.counts()}"]
    for stage_no, batch in plan.batches():
        for op in batch.ops:
            e = op.entry
            lines.append(
                f"  [{stage_no}] {batch.switch}: {type(op).__name__.lower()} "
                f"{fabric.link_name(e.in_port)} -> {fabric.host_name(e.dst_host)} "
                + (f"qp {e.qp} " if e.qp != ALL_QPS else "")
                + f"via {fabric.link_name(e.next_hop)}"
            )
    emit(args.json, {"counts": plan.counts(), "stages": len(plan.stages)}, "\n".join(lines) + "\n")
    return 0


def register(cli: Commands) -> None:
    """Add `fabric show` and the `routes` group with `routes diff` to `tectl`."""
    fabric = cli.sub.add_parser("fabric", help="inspect fabrics")
    fsub = fabric.add_subparsers(dest="fabric_command", required=True, metavar="SUBCOMMAND")
    show = fsub.add_parser("show", help="summary of a preset or fabric file")
    show.add_argument("fabric", help="preset name or fabric file")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_fabric_show)

    routes = cli.sub.add_parser("routes", help="route files and installed routes")
    rsub = routes.add_subparsers(dest="routes_command", required=True, metavar="SUBCOMMAND")
    cli.groups["routes"] = rsub
    rdiff = rsub.add_parser("diff", help="operations to go from OLD to NEW, in safe order")
    cli.add_fabric_arg(rdiff)
    rdiff.add_argument("old")
    rdiff.add_argument("new")
    rdiff.add_argument("--json", action="store_true")
    rdiff.set_defaults(func=cmd_routes_diff)
