"""`tectl certs DIR`: a throw-away CA, a server certificate and one client certificate per
role, plus a policy file (controller.service.certs makes them). For tests and demos only;
never commit them (`certs/` is git-ignored).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import InputError
from controller.model.validation import flag
from controller.service.certs import DEFAULT_CLIENTS, make_certs

if TYPE_CHECKING:
    from controller.cli.commands import Commands


def cmd_certs(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if directory.exists() and any(directory.glob("*.key")) and not args.force:
        raise InputError(f"{directory}: already holds keys; pass --force to replace them")
    clients = tuple(args.client) if args.client else DEFAULT_CLIENTS
    make_certs(directory, domain=args.domain, clients=clients,
               hosts=tuple(args.host) if args.host else ("localhost", "127.0.0.1", "::1"),
               days=args.days)  # fmt: skip
    print(f"wrote ca, server and {', '.join(clients)} certificates and policy.yaml to "
          f"{directory} (throw-away, valid {args.days} days: do not commit)")  # fmt: skip
    return 0


def register(cli: Commands) -> None:
    """Add `certs` to `tectl`."""
    p = cli.sub.add_parser("certs", help="make a throw-away CA and certificates for tests/demos")
    p.add_argument("directory", help="where to write the PEM files and policy.yaml")
    p.add_argument("--client", action="append", metavar="NAME",
                   help=f"a client certificate per name (default: {', '.join(DEFAULT_CLIENTS)})")
    p.add_argument("--host", action="append", metavar="NAME_OR_IP",
                   help="server certificate SANs (default: localhost, 127.0.0.1, ::1)")
    p.add_argument("--domain", default="fabric-te.test",
                   help="SPIFFE trust domain of the clients' URI SANs (fabric-te.test)")
    p.add_argument("--days", type=flag(int, 1, 3650), default=2, help="validity, 1-3650 (2)")
    p.add_argument("--force", action="store_true", help="replace existing keys")
    p.set_defaults(func=cmd_certs)
