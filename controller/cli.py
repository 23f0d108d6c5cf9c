"""`tectl`: the command line of fabric-te.

Offline commands (fabric, simulate, solve, routes, advise) work on a fabric preset or file;
service commands (serve, job, link, routes get/watch, status) talk to a running controller.
Reports go to stdout (`--json` for machines); progress and timings go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from controller.drivers import DriverError
from controller.report import emit, format_table

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def cmd_fabric_show(args: argparse.Namespace) -> int:
    from sim.fabricfile import load_fabric

    fabric = load_fabric(args.fabric)
    summary = fabric.summary()
    rows = [[key, value] for key, value in summary.items()]
    emit(args.json, summary, format_table(["field", "value"], rows))
    return EXIT_OK


def _add_fabric_arg(p: argparse.ArgumentParser) -> None:
    from sim.clos import DEFAULT_PRESET, PRESETS

    p.add_argument(
        "--fabric",
        default=DEFAULT_PRESET,
        help=f"preset ({', '.join(sorted(PRESETS))}) or a YAML/JSON fabric file "
        f"(default: {DEFAULT_PRESET})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tectl", description="fabric-te: traffic engineering for AI-training fabrics"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    fabric = sub.add_parser("fabric", help="inspect fabrics")
    fsub = fabric.add_subparsers(dest="fabric_command", required=True, metavar="SUBCOMMAND")
    show = fsub.add_parser("show", help="summary of a preset or fabric file")
    show.add_argument("fabric", help="preset name or fabric file")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_fabric_show)

    from controller import cli_advise, cli_offline, cli_service

    routes = cli_offline.register(sub, _add_fabric_arg)
    cli_service.register(sub, _add_fabric_arg, routes)
    cli_advise.register(sub, _add_fabric_arg)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or EXIT_OK)
    except DriverError as err:  # a switch or driver failed: the command did not complete
        print(f"tectl: driver error: {err}", file=sys.stderr)
        return EXIT_FAIL
    except ValueError as err:  # every input error (FabricError, FlowError, ...) is one
        print(f"tectl: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
