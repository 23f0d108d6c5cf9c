"""`tectl`: the command line of fabric-te.

Offline commands (fabric, routes diff, advise, topology) work on a fabric preset or file;
service commands (serve, job, link, routes show, status) talk to a running controller.
More commands plug in through the entry-point group ``fabric_te.commands``: each entry is a
callable ``register(cli: Commands)``; the simulator adds ``simulate``, ``solve`` and
``routes verify`` that way. Reports go to stdout (``--json`` for machines); progress and
timings go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from controller.cli.commands import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Commands
from controller.errors import DriverError, InputError, SolverError, StoreError

__all__ = ["EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "Commands", "build_parser", "main"]

COMMANDS_GROUP = "fabric_te.commands"


def version() -> str:
    """The installed fabric-te's version ("unknown" when run from a tree not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("fabric-te")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from controller.cli import advise, certs, completion, discover, offline, resilience, service

    parser = argparse.ArgumentParser(
        prog="tectl", description="fabric-te: traffic engineering for AI-training fabrics"
    )
    parser.add_argument("--version", action="version", version=f"tectl (fabric-te) {version()}")
    cli = Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"),
                   root=parser)  # fmt: skip
    offline.register(cli)
    discover.register(cli)
    service.register(cli)
    advise.register(cli)
    resilience.register(cli)
    certs.register(cli)
    completion.register(cli)
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        ep.load()(cli)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args.func, "__name__", "") != "cmd_serve" and "grpc" not in sys.modules:
        # a client's failed handshake is in its error message; gRPC's core would also log
        # it as a raw line ("I1129 ... ssl_transport_security.cc ...") on stderr. Read
        # when gRPC starts, so only where it has not (a process of its own, not a caller's
        # that imported it); the service keeps its lines: it reads and counts them
        # (controller.service.logs)
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        return int(args.func(args) or EXIT_OK)
    except DriverError as err:  # a switch or driver failed: the command did not complete
        print(f"tectl: driver error: {err}", file=sys.stderr)
        return EXIT_FAIL
    except StoreError as err:  # the state store is unreachable, in use, or untrustworthy
        print(f"tectl: store error: {err}", file=sys.stderr)
        return EXIT_FAIL
    except SolverError as err:  # the solver failed on valid input
        print(f"tectl: solver error: {err}", file=sys.stderr)
        return EXIT_FAIL
    except InputError as err:  # every input error (FabricError, FlowError, ...) is one
        print(f"tectl: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tectl ... | head`: the reader has what it wanted
        # what is left in stdout's buffer goes nowhere, so the flush at exit stays quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL
    except OSError as err:  # the output could not be written (a full disk, /dev/full)
        if err.filename is not None:
            raise  # a file a command opened names itself: not the output's failure
        print(f"tectl: error: cannot write the output: {err.strerror or err}", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
