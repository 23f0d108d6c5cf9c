"""Offline `tectl` commands of the controller: `fabric show` and `routes diff`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from controller.formats.output import Progress, counts_text, emit, format_table, plural
from controller.model.flows import ALL_QPS

EXIT_SAME, EXIT_DIFFERENT = 0, 1  # `routes diff`, as diff(1); errors exit 2

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
    """Exit 0 when the files hold the same routes, 1 when they differ (as diff(1) does)."""
    from controller.formats.route_file import read_routes, read_routes_for
    from controller.routes.plan import STAGE_NAMES, diff

    progress = Progress(quiet=args.json)
    with progress.stage(f"reading {args.old}"):
        fabric, _, old = read_routes_for(args.old, args.fabric)
    with progress.stage(f"reading {args.new}"):
        _, new = read_routes(args.new, fabric)
    with progress.stage("diff"):
        plan = diff(old, new, fabric)
    stages = sum(1 for stage in plan.stages if stage)
    lines = [
        f"{plural(len(plan), 'operation')} in {plural(stages, 'stage')} "
        f"({counts_text(plan.counts())})"
        if len(plan) else "same routes: no operations"
    ]  # fmt: skip
    links, hosts = fabric.link_names, fabric.node_names
    ops: list[dict[str, object]] = []  # what the text lists, one record per operation
    for stage_no, batch in plan.batches():
        for op in batch.ops:
            e = op.entry
            qp = None if e.qp == ALL_QPS else int(e.qp)
            ops.append({"stage": stage_no, "stage_name": STAGE_NAMES[stage_no],
                        "switch": batch.switch, "op": type(op).__name__.lower(),
                        "in": links[e.in_port], "dst": hosts[e.dst_host], "qp": qp,
                        "via": links[e.next_hop]})  # fmt: skip
            lines.append(
                f"  [{stage_no} {STAGE_NAMES[stage_no]}] {batch.switch}: "
                f"{type(op).__name__.lower()} "
                f"{links[e.in_port]} -> {hosts[e.dst_host]} "
                + (f"qp {qp} " if qp is not None else "")
                + f"via {links[e.next_hop]}"
            )
    data = {"same": not len(plan), "operations": len(plan), "counts": plan.counts(),
            "stages": stages, "ops": ops}  # fmt: skip
    emit(args.json, data, "\n".join(lines) + "\n")
    return EXIT_SAME if not len(plan) else EXIT_DIFFERENT


def register(cli: Commands) -> None:
    """Add `fabric show` and the `routes` group with `routes diff` to `tectl`."""
    fabric = cli.sub.add_parser("fabric", help="inspect fabrics")
    fsub = fabric.add_subparsers(dest="fabric_command", required=True, metavar="SUBCOMMAND")
    cli.groups["fabric"] = fsub
    show = fsub.add_parser("show", help="summary of a preset or fabric file")
    show.add_argument("fabric", help="preset name or fabric file")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_fabric_show)

    routes = cli.sub.add_parser("routes", help="route files and installed routes")
    rsub = routes.add_subparsers(dest="routes_command", required=True, metavar="SUBCOMMAND")
    cli.groups["routes"] = rsub
    rdiff = rsub.add_parser(
        "diff",
        help="operations to go from OLD to NEW, in safe order; exits 0 when the files hold "
        "the same routes, 1 when they differ, 2 on an error (as diff does)",
    )
    cli.add_fabric_arg(rdiff, "the preset OLD names")
    rdiff.add_argument("old", metavar="OLD", help="route file (.json, or .npz columns)")
    rdiff.add_argument("new", metavar="NEW", help="route file (.json, or .npz columns)")
    rdiff.add_argument("--json", action="store_true", help="machine-readable output")
    rdiff.set_defaults(func=cmd_routes_diff)
