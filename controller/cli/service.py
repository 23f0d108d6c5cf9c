"""`tectl serve` and the client commands that talk to a running controller."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import FabricTeError, InputError
from controller.formats.output import to_json
from controller.model.validation import flag
from controller.service.client import (
    DEFAULT_ADDRESS,
    Client,
    Delta,
    InSync,
    Resumed,
    RouteLine,
    Snapshot,
    Target,
    api,
)  # fmt: skip

if TYPE_CHECKING:
    from controller.cli.commands import Commands


def _client(args: argparse.Namespace) -> Client:
    """A client to `--server` with the TLS flags (or --insecure)."""
    target = Target(args.server, args.tls_ca, args.tls_cert, args.tls_key,
                    args.tls_server_name, args.insecure)  # fmt: skip
    return Client.connect(target)


def _limits(items: list[str]) -> Any:
    """`Limits` with `NAME=VALUE` overrides (e.g. write_rate=50); unknown names are named."""
    import dataclasses

    from controller.service.limits import Limits

    known = {f.name: f.type for f in dataclasses.fields(Limits)}
    values: dict[str, float] = {}
    for item in items:
        name, _, text = item.partition("=")
        if name not in known:
            raise InputError(f"--limit {item}: unknown limit; known: {', '.join(sorted(known))}")
        try:
            values[name] = float(text) if "float" in str(known[name]) else int(text)
        except ValueError:
            raise InputError(f"--limit {item}: not a number") from None
    try:
        return Limits(**values)  # type: ignore[arg-type]
    except FabricTeError as err:
        raise InputError(f"--limit: {err}") from None


def _config_db(value: str) -> dict[str, object]:
    """The sonic driver's CONFIG_DB option: `server` (a URL) or `databases` (a JSON file)."""
    if "://" in value:
        return {"server": value}
    from controller.model.documents import parse_text, read_text

    doc = parse_text(read_text(Path(value), InputError, "--config-db"), "json",
                     f"--config-db {value}", InputError)  # fmt: skip
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise InputError(f"--config-db {value}: want a JSON object of switch -> Redis URL")
    return {"databases": doc}


def cmd_serve(args: argparse.Namespace) -> int:
    api()  # a one-line error, before the server module needs the generated code
    from controller.drivers.interface import load_driver
    from controller.formats.fabric_file import load_fabric
    from controller.service.auth import PolicyStore
    from controller.service.engine import Engine
    from controller.service.replica import Replica
    from controller.service.server import start
    from controller.service.store import default_state_dir, open_store
    from controller.service.tls import ServerTls, TlsFiles

    logging.basicConfig(
        level=logging.INFO, format='{"time": "%(asctime)s", "level": "%(levelname)s", '
        '"logger": "%(name)s", "message": "%(message)s"}',
    )  # fmt: skip
    tls_args = (args.tls_cert, args.tls_key, args.tls_client_ca)
    limits = _limits(args.limit or [])
    tls = policy = None
    if any(tls_args):
        if not all(tls_args):
            raise InputError("mTLS needs all of --tls-cert, --tls-key and --tls-client-ca")
        if not args.policy:
            raise InputError("mTLS needs --policy: the file mapping client identities to roles")
        tls = ServerTls(TlsFiles(*map(Path, tls_args)))
        policy = PolicyStore(args.policy)
    elif not args.insecure:
        raise InputError("give --tls-cert, --tls-key, --tls-client-ca and --policy (or "
                         "FABRIC_TE_TLS_*), or --insecure for plaintext")  # fmt: skip
    elif args.policy:
        policy = PolicyStore(args.policy)
    fabric = load_fabric(args.fabric)
    options: dict[str, object] = {"fabric": fabric}
    if args.driver == "file":
        options["directory"] = args.driver_dir
    if args.lab:
        options["lab"] = args.lab
    if args.config_db:
        options.update(_config_db(args.config_db))
    port = args.listen.rsplit(":", 1)[-1]
    # the default identity is fabric + port; an ephemeral port has none to restart as
    default = "memory" if port == "0" else f"dir:{default_state_dir() / f'{fabric.name}-{port}'}"
    url = args.store or default
    store = None if url == "memory" else open_store(url, fabric.name)
    replica = Replica(fabric, store, replica_id=args.replica_id, ttl=args.lease_ttl)
    driver = load_driver(args.driver, **options)
    engine = Engine(
        fabric, driver, driver_name=args.driver, debounce=args.debounce,
        reconcile_interval=args.reconcile_interval, replica=replica,
    )  # fmt: skip
    if args.metrics_port:
        engine.metrics.serve(args.metrics_port, args.metrics_address)
    # SIGTERM/SIGINT are caught before the port opens: a client may signal as soon as it can
    # connect, and the default action would kill the process instead of stopping it well
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        running = start(engine, args.listen, tls=tls, policy=policy, limits=limits,
                        insecure=args.insecure)  # fmt: skip
    except BaseException:
        engine.close()
        raise
    print(f"fabric-te serving fabric {fabric.name} on port {running.port} "
          f"(driver {args.driver}, store {url}, replica {replica.id}, "
          f"{'mTLS' if tls else 'plaintext'})",
          file=sys.stderr, flush=True)  # fmt: skip
    signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=running.reload).start())
    done.wait()
    print("shutting down: NOT_SERVING, then stop; installed routes stay", file=sys.stderr)
    running.stop(grace=args.grace)
    driver.close()
    stuck = [t for t in threading.enumerate()
             if t is not threading.current_thread() and not t.daemon]  # fmt: skip
    for t in stuck:
        t.join(timeout=0.2)
    stuck = [t for t in stuck if t.is_alive()]
    if stuck:  # a handler thread gRPC could not end: do not let it hold the exit
        print(f"exiting with {len(stuck)} RPC threads still busy", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(0)
    return 0


def cmd_job_put(args: argparse.Namespace) -> int:
    from controller.errors import JobError
    from controller.formats.placement import check_job_entry
    from controller.model.documents import read_document

    api()  # a one-line error, before the file is read
    doc = read_document(args.file, JobError, "job file")
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or set(doc) != {"jobs"}:
        raise InputError(f'{args.file}: expected {{"jobs": [...]}}')
    entries = []
    for i, job in enumerate(jobs):  # every job checked before the first is sent
        try:
            entries.append(check_job_entry(job, f"jobs[{i}]"))
        except JobError as err:
            raise JobError(f"{args.file}: {err}") from None
    with _client(args) as client:  # the file is checked before any connection is made
        for entry in entries:
            print(f"{entry['id']}: generation {client.put_job(entry)}")
    return 0


def cmd_job_rm(args: argparse.Namespace) -> int:
    with _client(args) as client:
        existed = client.delete_job(args.id)
    print(f"{args.id}: {'deleted' if existed else 'not found (nothing to do)'}")
    return 0


def cmd_job_ls(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for job in client.list_jobs():
            print(f"{job.id}\tgeneration {job.generation}\t{len(job.hosts)} hosts")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    with _client(args) as client:
        version = client.report_link(args.link, args.state, args.fraction)
    print(f"accepted; state version {version}")
    return 0


def _entry_line(prefix: str, e: RouteLine) -> str:
    qp = f" qp {e.qp_bucket}" if e.qp_bucket is not None else ""
    return f"{prefix}{e.switch}\t{e.in_port} -> {e.dst_host}{qp} via {e.next_hop}"


def cmd_routes_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            if args.watch:
                _watch(client, args.since)
            else:
                _show(client, args)
        except BrokenPipeError:  # `tectl routes show | head`
            sys.stderr.close()
    return 0


def _show(client: Client, args: argparse.Namespace) -> None:
    """Stream the installed entries (filtered) in chunks, printing each as it arrives."""
    for i, chunk in enumerate(client.stream_routes(args.switch, args.job, args.chunk)):
        if i == 0:
            print(f"# routes version {chunk.version}: {chunk.total_entries} entries", flush=True)
        sys.stdout.write("".join(_entry_line("", e) + "\n" for e in chunk.entries))
    sys.stdout.flush()


def _watch(client: Client, since: int) -> None:
    """Print the watch; the client resumes it when the server drops it for falling behind."""
    first_chunk = True
    for event in client.watch_routes(since):
        if isinstance(event, Snapshot):
            if first_chunk:
                print(f"# snapshot version {event.version}: {event.total_entries} entries",
                      flush=True)  # fmt: skip
            first_chunk = not event.more
        elif isinstance(event, InSync):
            print(f"# in sync at version {event.version}", flush=True)
        elif isinstance(event, Resumed):
            print(f"# fell behind; resuming from version {event.version}", flush=True)
            first_chunk = True
        elif isinstance(event, Delta):
            lines = [f"# delta version {event.version}"]
            lines += [_entry_line("+ ", e) for e in event.added]
            lines += [_entry_line("- ", e) for e in event.removed]
            print("\n".join(lines), flush=True)


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        data = client.status()
    sys.stdout.write(to_json(data) + "\n")
    return 0


def register(cli: Commands) -> None:
    """Add `serve`, `job`, `link`, `status` and `routes show` to `tectl`."""
    sub, add_fabric_arg, routes_sub = cli.sub, cli.add_fabric_arg, cli.groups["routes"]
    serve = sub.add_parser("serve", help="run the controller as a gRPC service")
    add_fabric_arg(serve)
    serve.add_argument("--driver", default="emulated", help="switch driver (emulated)")
    serve.add_argument("--driver-dir", default="tables", help="directory for --driver file")
    serve.add_argument("--lab", help="lab name for --driver linux (see `tectl lab up`)")
    serve.add_argument(
        "--config-db", metavar="URL|FILE",
        help="for --driver sonic: the switches' CONFIG_DB, a Redis URL with a database per "
        "switch in name order, or a JSON file mapping each switch to its URL",
    )  # fmt: skip
    serve.add_argument("--listen", default=DEFAULT_ADDRESS, help=f"({DEFAULT_ADDRESS})")
    serve.add_argument(
        "--debounce", type=flag(float, 0, 60), default=0.2, help="batch window, s (0.2)"
    )
    serve.add_argument("--metrics-port", type=flag(int, 0, 65535), default=9464,
                       help="Prometheus /metrics port (9464; 0 = off)")  # fmt: skip
    serve.add_argument("--metrics-address", default="127.0.0.1",
                       help="address /metrics listens on (127.0.0.1; 0.0.0.0 = all)")  # fmt: skip
    serve.add_argument("--reconcile-interval", type=flag(float, 0.01, 86400), default=5.0,
                       help="read back and repair every switch every S seconds (5)")  # fmt: skip
    serve.add_argument(
        "--store",
        default="",
        help="where inputs live: dir:PATH, etcd://HOST:PORT[,..]/PREFIX or "
        "memory (default dir:$XDG_STATE_HOME/fabric-te/FABRIC-PORT; memory on port 0)",
    )
    serve.add_argument("--replica-id", default="", help="id among replicas (host:pid)")
    serve.add_argument("--lease-ttl", type=flag(float, 1, 3600), default=1.0,
                       help="leader lease on a shared store, s (1)")  # fmt: skip
    serve.add_argument(
        "--grace", type=flag(float, 0, 3600), default=5.0, help="shutdown grace, s (5)"
    )
    env = os.environ.get
    serve.add_argument(
        "--tls-cert",
        default=env("FABRIC_TE_TLS_CERT"),
        help="server certificate chain, PEM (FABRIC_TE_TLS_CERT)",
    )
    serve.add_argument(
        "--tls-key",
        default=env("FABRIC_TE_TLS_KEY"),
        help="server private key, PEM (FABRIC_TE_TLS_KEY)",
    )
    serve.add_argument(
        "--tls-client-ca",
        default=env("FABRIC_TE_TLS_CLIENT_CA"),
        help="CA bundle client certificates must chain to (FABRIC_TE_TLS_CLIENT_CA)",
    )
    serve.add_argument(
        "--policy",
        default=env("FABRIC_TE_POLICY"),
        help="identity -> roles file (FABRIC_TE_POLICY); see docs/security.md",
    )
    serve.add_argument(
        "--insecure", action="store_true", help="plaintext, no client identities: a local demo only"
    )
    serve.add_argument(
        "--limit",
        action="append",
        metavar="NAME=VALUE",
        help="override an API limit, e.g. write_rate=50 (docs/security.md)",
    )
    serve.set_defaults(func=cmd_serve)

    from_env = Target.from_env()

    def client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--server",
            default=from_env.address,
            help=f"host:port (FABRIC_TE_SERVER; {DEFAULT_ADDRESS})",
        )
        p.add_argument(
            "--tls-ca",
            default=from_env.ca,
            help="CA bundle of the server certificate (FABRIC_TE_TLS_CA)",
        )
        p.add_argument(
            "--tls-cert", default=from_env.cert, help="client certificate, PEM (FABRIC_TE_TLS_CERT)"
        )
        p.add_argument(
            "--tls-key", default=from_env.key, help="client private key, PEM (FABRIC_TE_TLS_KEY)"
        )
        p.add_argument(
            "--tls-server-name",
            default=from_env.server_name,
            help="name to verify in the server certificate, if not the host",
        )
        p.add_argument(
            "--insecure",
            action="store_true",
            default=from_env.insecure,
            help="plaintext to a local --insecure server (FABRIC_TE_INSECURE=1)",
        )
        return p

    job = sub.add_parser("job", help="jobs on a running controller")
    jsub = job.add_subparsers(dest="job_command", required=True, metavar="SUBCOMMAND")
    put = client(jsub.add_parser("put", help="create or replace the jobs of a placement file"))
    put.add_argument("file")
    put.set_defaults(func=cmd_job_put)
    rm = client(jsub.add_parser("rm", help="delete a job (idempotent)"))
    rm.add_argument("id")
    rm.set_defaults(func=cmd_job_rm)
    client(jsub.add_parser("ls", help="list jobs")).set_defaults(func=cmd_job_ls)

    link = client(sub.add_parser("link", help="report a link's state to a running controller"))
    link.add_argument("state", choices=("down", "up", "degrade"))
    link.add_argument("link", help="link name, e.g. rtsw-p0-r3:ctsw-p0-c2")
    link.add_argument(
        "fraction", nargs="?", type=flag(float, 0, 1), help="for degrade: capacity left"
    )
    link.set_defaults(func=cmd_link)

    client(sub.add_parser("status", help="controller status")).set_defaults(func=cmd_status)

    show = client(routes_sub.add_parser("show", help="installed routes of a running controller"))
    show.add_argument("--switch", action="append", default=[], metavar="NAME",
                      help="only this switch's entries; repeatable")  # fmt: skip
    show.add_argument("--job", default="", help="only entries towards this job's hosts")
    show.add_argument("--chunk", type=flag(int, 1, 1_000_000), default=10_000, metavar="N",
                      help="entries per streamed message (10000)")  # fmt: skip
    show.add_argument("--watch", action="store_true", help="stream changes")
    show.add_argument(
        "--since", type=flag(int, 0, 2**63 - 1), default=0, help="resume a watch from a version"
    )
    show.set_defaults(func=cmd_routes_show)
