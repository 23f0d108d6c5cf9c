"""What every tectl command module shares: the subcommand table a command registers in,
the ``--fabric`` option, and the exit codes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def add_fabric_arg(p: argparse.ArgumentParser, from_routes: str | None = None) -> None:
    """The ``--fabric`` option every offline command takes. A command that reads a route
    file gives `from_routes`, what its default is (the preset the file names): the option
    then defaults to None, for the command to resolve."""
    from controller.model.clos import DEFAULT_PRESET, PRESETS

    p.add_argument(
        "--fabric",
        default=None if from_routes else DEFAULT_PRESET,
        help=f"preset ({', '.join(sorted(PRESETS))}), a YAML/JSON fabric file or a CSV cable "
        f"list (default: {from_routes or DEFAULT_PRESET})",
    )


@dataclass
class Commands:
    """What a command plug-in gets: the subcommand table and the shared groups."""

    sub: argparse._SubParsersAction
    groups: dict[str, argparse._SubParsersAction] = field(default_factory=dict)
    root: argparse.ArgumentParser = field(default_factory=argparse.ArgumentParser)  # tectl

    @staticmethod
    def add_fabric_arg(p: argparse.ArgumentParser, from_routes: str | None = None) -> None:
        add_fabric_arg(p, from_routes)
