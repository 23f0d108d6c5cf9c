"""`tectl serve` and the client commands that talk to a running controller."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import DriverError, FabricTeError, InputError
from controller.formats.output import plural, strict, to_json
from controller.model.validation import flag
from controller.service.client import (
    DEFAULT_ADDRESS,
    Client,
    Delta,
    InSync,
    JobListing,
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


# the driver flags of `tectl serve`, by the option names a driver's constructor takes
DRIVER_FLAGS = {"--driver-dir": ("directory",), "--lab": ("lab",),
                "--config-db": ("server", "databases")}  # fmt: skip


def _driver_options(args: argparse.Namespace) -> dict[str, object]:
    """The options of --driver from its flags, checked against what the driver takes (a
    flag it has no option for, a required one not given), before anything is started: an
    unknown driver is named first."""
    import inspect

    from controller.drivers.interface import driver_class

    try:
        cls = driver_class(args.driver)
    except DriverError as err:
        raise InputError(f"--driver: {err}") from None
    params = inspect.signature(cls.__init__).parameters
    given = {"--driver-dir": args.driver_dir, "--lab": args.lab, "--config-db": args.config_db}
    takes = [opt for opt, names in DRIVER_FLAGS.items() if any(n in params for n in names)]
    for opt, value in given.items():
        if value is not None and opt not in takes:
            raise InputError(f"{opt} does not apply to --driver {args.driver} (it takes "
                             f"{', '.join(takes) or 'none of ' + ', '.join(DRIVER_FLAGS)})")
    for name, param in params.items():
        needed = next((f for f, names in DRIVER_FLAGS.items() if name in names), None)
        if needed and param.default is inspect.Parameter.empty and given[needed] is None:
            raise InputError(f"--driver {args.driver} needs {needed}")
    options: dict[str, object] = {}
    if "--driver-dir" in takes:
        options["directory"] = args.driver_dir or "tables"
    if args.lab:
        options["lab"] = args.lab
    if args.config_db:
        options.update(_config_db(args.config_db))
    return options


def _config_db(value: str) -> dict[str, object]:
    """The sonic driver's CONFIG_DB option (`controller.drivers.sonic.config_db_options`)."""
    from controller.drivers.sonic import config_db_options

    return config_db_options(value)


def cmd_serve(args: argparse.Namespace) -> int:
    # no fork handlers: the controller forks only to exec, and gRPC would log on every fork
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    api()  # a one-line error, before the server module needs the generated code
    from controller.drivers.interface import load_driver
    from controller.formats.fabric_file import load_fabric
    from controller.service.auth import PolicyStore
    from controller.service.engine import Engine
    from controller.service.logs import configure
    from controller.service.replica import Replica
    from controller.service.server import is_loopback, listen_problem, start
    from controller.service.store import default_state_dir, open_store
    from controller.service.tls import HandshakeFailures, ServerTls, TlsFiles

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
    if args.insecure_remote and not args.insecure:
        raise InputError("--insecure-remote only widens --insecure; give both, or neither")
    if tls is None and not args.insecure_remote and not is_loopback(args.listen):
        raise InputError(f"--insecure on {args.listen}: plaintext is served on loopback only; "
                         "add --insecure-remote if every host that can reach this address "
                         "may reroute the fabric")  # fmt: skip
    native = configure()  # every line on stderr from here on is one JSON object
    fabric = load_fabric(args.fabric)
    options: dict[str, object] = {"fabric": fabric, **_driver_options(args)}
    port = args.listen.rsplit(":", 1)[-1]
    problem = None if port == "0" else listen_problem(args.listen)
    if problem:  # before the engine takes the lead and pushes anything
        raise InputError(f"cannot listen on {args.listen}: {problem}")
    # the default identity is fabric + port; an ephemeral port has none to restart as
    default = "memory" if port == "0" else f"dir:{default_state_dir() / f'{fabric.name}-{port}'}"
    url = args.store or default
    store = None if url == "memory" else open_store(url, fabric.name)
    replica = Replica(fabric, store, replica_id=args.replica_id, ttl=args.lease_ttl)
    driver = load_driver(args.driver, **options)
    engine = Engine(
        fabric, driver, driver_name=args.driver, debounce=args.debounce,
        reconcile_interval=args.reconcile_interval, replica=replica,
        **precompute_options(args),
    )  # fmt: skip
    native.on_native = HandshakeFailures(engine.metrics.registry).observe
    if args.metrics_port:
        try:
            engine.metrics.serve(args.metrics_port, args.metrics_address)
        except OSError as err:
            engine.close()
            raise InputError(f"cannot serve /metrics on {args.metrics_address}:"
                             f"{args.metrics_port}: {err.strerror or err}") from None  # fmt: skip
    # SIGTERM/SIGINT are caught before the port opens: a client may signal as soon as it can
    # connect, and the default action would kill the process instead of stopping it well
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        running = start(engine, args.listen, tls=tls, policy=policy, limits=limits,
                        insecure=args.insecure, insecure_remote=args.insecure_remote)  # fmt: skip
    except BaseException:
        engine.close()
        raise
    print(f"fabric-te serving fabric {fabric.name} on port {running.port} "
          f"(driver {args.driver}, store {url}, replica {replica.id}, "
          f"{'mTLS' if tls else 'plaintext'})",
          file=sys.stderr, flush=True)  # fmt: skip
    signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=running.reload).start())
    # a timed wait, not a bare one: the kernel may hand SIGTERM to any thread (gRPC's, the
    # engine's), and then nothing wakes a main thread blocked in an untimed lock; Python runs
    # the handler only once the main thread wakes
    while not done.wait(0.2):
        pass
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
        native.close()
        os._exit(0)
    return 0


def cmd_job_put(args: argparse.Namespace) -> int:
    from controller.errors import JobError
    from controller.formats.placement import all_problems, check_job_entry
    from controller.model.documents import read_document

    api()  # a one-line error, before the file is read
    doc = read_document(args.file, JobError, "job file")
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or set(doc) != {"jobs"}:
        raise InputError(f'{args.file}: expected {{"jobs": [...]}}')
    entries: list[dict[str, Any] | None] = []
    problems: list[tuple[str, str]] = []
    for i, job in enumerate(jobs):  # every job checked before the first is sent
        try:
            entries.append(check_job_entry(job, f"jobs[{i}]"))
        except JobError as err:
            entries.append(None)  # keeps the file's indices for the clashes below
            problems.append((err.field or f"jobs[{i}]", err.detail or str(err)))
    problems += _clashes(entries, {})
    if problems:  # in file order, as a placement file's problems
        problems.sort(key=lambda p: int(p[0].split("[", 1)[1].split("]", 1)[0])
                      if p[0].startswith("jobs[") else -1)  # fmt: skip
        raise all_problems(str(args.file), problems)
    good = [entry for entry in entries if entry is not None]  # all of them, here
    with _client(args) as client:  # the file is checked before any connection is made
        if args.dry_run:
            return _preview(args, client.preview(put=good))
        # the jobs held now too, so that a clash found by the third put leaves nothing put
        held = {job.id: job.hosts for job in client.list_jobs()}
        clashes = _clashes(good, held)
        if clashes:
            raise all_problems(str(args.file), clashes)
        for i, entry in _put_order(good, held, str(args.file)):
            try:
                generation = client.put_job(entry)
            except InputError as err:  # the server's check: said of the file's job
                raise InputError(f"{args.file}: jobs[{i}] ({entry['id']}): {err} (the jobs "
                                 "before it were put)" if i else
                                 f"{args.file}: jobs[{i}] ({entry['id']}): {err}") from None
            print(f"{entry['id']}: generation {generation}")
        if not entries:
            print(f"{args.file}: no jobs in the file: nothing put")
    return 0


def _put_order(entries: list[dict[str, Any]], held: dict[str, tuple[str, ...]],
               file: str) -> list[tuple[int, dict[str, Any]]]:  # fmt: skip
    """(index, entry) in the order the puts go: a job that takes a host another job of the
    file gives up is put after that job (else the controller, which takes one job at a
    time, refuses it and leaves the jobs before it put); otherwise the file's order. Jobs
    that take each other's hosts in a cycle cannot go one at a time: refused up front."""
    index = {entry["id"]: i for i, entry in enumerate(entries)}
    after: dict[int, set[int]] = {i: set() for i in range(len(entries))}
    for i, entry in enumerate(entries):
        for job, hosts in held.items():
            j = index.get(job)
            if j is not None and j != i and (set(hosts) - set(entries[j]["hosts"])) & set(
                    entry["hosts"]):  # fmt: skip
                after[i].add(j)  # entry takes a host job j gives up: j goes first
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(entries):
        ready = [i for i in range(len(entries)) if i not in done and after[i] <= done]
        if not ready:
            cycle = sorted(i for i in range(len(entries)) if i not in done)
            names = ", ".join(f"jobs[{i}] ({entries[i]['id']})" for i in cycle)
            raise InputError(f"{file}: {names} take each other's hosts, and jobs are put one "
                             "at a time: delete one of them first (`tectl job rm`)")
        order.append(ready[0])
        done.add(ready[0])
    return [(i, entries[i]) for i in order]


def _clashes(entries: Sequence[dict[str, Any] | None],
             held: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:  # fmt: skip
    """(field, problem) for a job id twice in the file, and a host in two jobs: of the file,
    or of the file and one `held` by the controller that the file does not replace (None:
    a job of the file found bad already)."""
    owner = {host: job for job, hosts in held.items()
             if job not in {e["id"] for e in entries if e} for host in hosts}  # fmt: skip
    where = {host: "the controller's job" for host in owner}
    problems: list[tuple[str, str]] = []
    ids: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry is None:
            continue
        if entry["id"] in ids:  # as a placement file's check words it
            problems.append((f"jobs[{i}].id",
                             f"duplicate job id {entry['id']!r} (also jobs[{ids[entry['id']]}])"))
        ids.setdefault(entry["id"], i)
        for k, host in enumerate(entry["hosts"]):
            other = owner.get(host)
            if other is not None and other != entry["id"]:
                problems.append((f"jobs[{i}].hosts[{k}]",
                                 f"{host} is already in {where[host]} {other!r}"))  # fmt: skip
            else:
                owner[host], where[host] = entry["id"], "the file's job"
    return problems


def cmd_job_rm(args: argparse.Namespace) -> int:
    from controller.errors import JobError
    from controller.model import validation

    for i, job_id in enumerate(args.ids):  # every id checked before the first is deleted
        validation.text(job_id, f"job id {i + 1} ({job_id!r})", JobError)
    with _client(args) as client:
        for job_id in dict.fromkeys(args.ids):  # each once, in the order given
            existed = client.delete_job(job_id)
            print(f"{job_id}: {'deleted' if existed else 'not found (nothing to do)'}",
                  flush=True)  # fmt: skip
    return 0


def cmd_job_export(args: argparse.Namespace) -> int:
    """The controller's jobs as a placement file: what `tectl job put` and `--jobs` read
    (a spec's optional keys whose zero or empty value means "not given" on the wire left
    out)."""
    from controller.formats.placement import JOB_KEYS, REQUIRED

    with _client(args) as client:
        jobs = client.list_jobs()
    optional = [k for k in JOB_KEYS if k not in REQUIRED]
    doc = {"jobs": [{"id": job.id, "hosts": list(job.hosts)}
                    | {k: job.spec[k] for k in optional if job.spec.get(k)}
                    for job in jobs]}  # fmt: skip
    if args.output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
    else:
        print(to_json(doc))
    return 0


def cmd_job_ls(args: argparse.Namespace) -> int:
    with _client(args) as client:
        jobs = client.list_jobs()
    if _structured(args, [_job_doc(job) for job in jobs]):
        return 0
    if not jobs:
        print("no jobs (`tectl job put FILE` adds some)")
    for job in jobs:
        busbw = _busbw(job.figures)
        stalled = bool(job.figures and job.figures.get("stalled_flows"))
        example = (job.figures or {}).get("stalled_example")
        print(f"{job.id}\tgeneration {job.generation}\t{plural(len(job.hosts), 'host')}"
              + (f"\tpredicted busbw {busbw}" if busbw else "")
              + ("\tstalled: a flow of it has no path alive" if stalled else "")
              + (f" ({example})" if stalled and example else ""))  # fmt: skip
    return 0


def cmd_job_describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
        jobs = {job.id: job for job in client.list_jobs()}
        job = jobs.get(args.id)
        if job is None:
            print(f"tectl: job {args.id!r} not found", file=sys.stderr)
            return 2
        entries = next(iter(client.stream_routes(job=job.id, chunk=1)), None)
        status = client.status() if job.figures is None else {}
    leader = status.get("leader") or "another replica"
    follower = status.get("role") == "follower"
    doc = _job_doc(job) | {"te_entries_towards": entries.total_entries if entries else 0}
    if _structured(args, doc):
        return 0
    spec, fig = job.spec, job.figures
    g = "{:,}".format
    lines = [
        f"job         {job.id} (generation {job.generation})",
        f"shape       {plural(len(job.hosts), 'host')}; dp {spec['dp']}, pp {spec['pp'] or 1}, "
        f"tp {spec['tp'] or 1}; {', '.join(spec['collectives']) or 'ring'}"
        + (f"; priority {spec['priority']}" if spec.get("priority") else "")
        + (f"; demand {spec['demand_gbps']:g} Gbps a NIC" if spec.get("demand_gbps")
           else "; demand: line rate"),
        f"hosts       {', '.join(job.hosts[:8])}" + (" ..." if len(job.hosts) > 8 else ""),
    ]
    if fig is None and follower:
        lines.append(f"routing     figures kept by the leader, {leader}: this replica follows "
                     "its pushes; ask the leader's address for them")  # fmt: skip
    elif fig is None:
        lines.append("routing     not installed yet")
    elif not fig["flows"]:
        lines.append("routing     no flows across the fabric: its GPUs exchange nothing over "
                     "it, so there is nothing to route")  # fmt: skip
    else:
        stalled = int(fig.get("stalled_flows", 0))
        lines.append(f"flows       {g(fig['flows'])}: {g(fig['te_flows'])} on TE paths, "
                     f"{g(fig['hashed_flows'] - stalled)} on the fabric's hashing"
                     + (f", {g(stalled)} with no path alive: the job is stalled (a NIC link "
                        "down, its RTSW drained or its rack cut off)" if stalled else ""))
        if stalled and fig.get("stalled_example"):
            lines.append(f"stalled     first flow with no path: {fig['stalled_example']} (look "
                         "at these NICs' links and switches)")  # fmt: skip
        lines.append(f"busbw       {_busbw(fig) or 'not predicted yet'}")
        if fig["handed_back"]:
            lines.append(f"why hashed  {fig['handed_back']}")
        if fig.get("over_line_rate"):
            ratio = fig["over_line_rate"]
            lines.append(f"line rate   a NIC of it is asked {ratio:.4g} x its line rate: "
                         f"planned at {1 / ratio:.1%} of its demand, what its NICs carry")
    lines.append(f"entries     {g(doc['te_entries_towards'])} TE entries towards its hosts")
    print("\n".join(lines))
    return 0


def _job_doc(job: JobListing) -> dict[str, Any]:
    return {"id": job.id, "generation": job.generation, "job": job.spec,
            "figures": job.figures}  # fmt: skip


def _busbw(figures: dict[str, Any] | None) -> str:
    """The predicted busbw as a share of line rate, or of its demand for a job that asks
    less (1 = nothing in the fabric slows it), with the rate a NIC that is; "" when not
    predicted."""
    if not figures or not figures["predicted"]:
        return ""
    share = f"{figures['predicted_busbw']:.1%}"
    demand, line = figures.get("demand_gbps", 0.0), figures.get("line_rate_gbps", 0.0)
    if not line:  # a server that does not say
        return f"{share} of line rate"
    if demand < line * (1 - 1e-9):
        return f"{share} of its demand ({demand:g} Gbps a NIC; its NICs carry {line:g})"
    return f"{share} of line rate ({line:g} Gbps a NIC)"


def _structured(args: argparse.Namespace, data: Any) -> bool:
    """Print `data` as JSON or YAML when `-o` asks for it; whether it did."""
    if args.output == "json":
        sys.stdout.write(to_json(data) + "\n")
    elif args.output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(strict(data), sort_keys=True))
    else:
        return False
    return True


def cmd_link(args: argparse.Namespace) -> int:
    from controller.model.health import factor_state, link_changes

    if args.change == ["ls"]:
        return cmd_link_ls(args)
    if args.change and args.change[0] == "ls":
        raise InputError(f"link ls takes no arguments, got {' '.join(args.change[1:])!r} "
                         "(it lists every link not fully up)")  # fmt: skip
    extra = [] if args.fraction is None else [str(args.fraction)]
    changes = link_changes(args.change + extra)
    with _client(args) as client:
        if args.dry_run:
            links = [(name, *factor_state(factor)) for name, factor in changes]
            return _preview(args, client.preview(links=links))
        reports = [(name, *factor_state(factor)) for name, factor in changes]
        version = client.report_links(reports)  # one request: all of them, or none
        for name, state, fraction in reports:
            if ":" not in name and state == "down":  # a switch's name: its drain
                state = "drain"
            print(f"{name}={state if fraction is None else f'{fraction:g}'}: accepted; state "
                  f"version {version}")  # fmt: skip
    return 0


def _preview(args: argparse.Namespace, reply: dict[str, Any]) -> int:
    """Print a dry run of input changes (`-o json|yaml`: every field)."""
    if not _structured(args, reply):
        sys.stdout.write(preview_text(reply))
    return 0


def preview_text(d: dict[str, Any]) -> str:
    """A dry run for a person: what would move, the entries per switch, the would-be
    routing's quality and certificate; it says nothing was stored or pushed."""
    g, m = "{:,}".format, d["metrics"]
    jobs = d["jobs_affected"]
    named = ": " + ", ".join(jobs[:10]) + (" ..." if len(jobs) > 10 else "") if jobs else ""
    lines = [
        "dry run: nothing stored or pushed",
        f"would move {g(d['flows_moved'])} of {g(d['flows'])} flows; "
        f"{plural(len(jobs), 'job')} affected{named}",
        f"routing     MLU {m['mlu']:.4g} over bound {m['bound']:.4g} (ratio {m['ratio']:.4g})",
    ]
    cert = d.get("certificate")
    if cert:
        lines.append(_certificate_line(cert))
    plan = plan_text(d["plan"], "the would-be routing", "install").splitlines()
    lines.append("entries     " + plan[0].split(" would change ", 1)[1].removesuffix(
        "; nothing changed"))  # fmt: skip
    lines += plan[1:]
    return "\n".join(lines) + "\n"


def _certificate_line(cert: dict[str, Any]) -> str:
    """A certificate (Status' or a dry run's, as a dict) for a person: one line."""
    g = "{:,}".format
    # no job compared: each ratio is a bound (1 on the wire), as `tectl solve` words it
    none = not cert["jobs_checked"]

    def ratio(v: float | None) -> str:
        return "-" if v is None else ">= 1 (no job at risk)" if none else format(v, ".4g")

    worst = ", ".join(f"{k} {ratio(v)}" for k, v in sorted(cert["worst_ratio"].items()))
    fell = cert["fallback_jobs"]
    return (
        f"certificate {'passed' if cert['passed'] else 'FAILED'} against "
        f"{cert['reference']}: {g(cert['jobs_checked'])} of {g(cert['jobs'])} jobs with flows "
        f"compared, worst TE/hashing {worst}; {plural(len(fell), 'job')} handed back"
        + (": " + ", ".join(f"{j} ({why})" for j, why in sorted(fell.items())[:5])
           if fell else "")
        + (f"; {plural(cert['jobs_stalled'], 'job')} stalled under any routing, not compared"
           if cert.get("jobs_stalled") else "")
    )  # fmt: skip


def _links_line(links: list[dict[str, Any]], shown: int = 5,
                drained: Sequence[str] = ()) -> str:  # fmt: skip
    """Status's links not fully up, the first `shown` named (`tectl link ls`: all) after
    the links of the `drained` switches, which are named instead."""
    if not links:
        return "links       every link is up"
    held = [link for link in links if link.get("drained_by")]
    own = [link for link in links if not link.get("drained_by")]
    down = sum(1 for link in own if link["fraction"] == 0)
    named = ", ".join(f"{link['link']} " + ("down" if link["fraction"] == 0 else
                                            f"at {link['fraction']:g}")
                      for link in own[:shown])  # fmt: skip
    more = f", and {len(own) - shown:,} more (`tectl link ls`)" if len(own) > shown else ""
    parts = []
    if drained:
        ends = f"`tectl link {drained[0]}=up`" if len(drained) == 1 else "each SWITCH=up"
        parts.append(f"{', '.join(drained)} drained ({plural(len(held), 'link')} held down "
                     f"until {ends})")  # fmt: skip
    if own:
        parts.append(f"{len(own):,} not fully up ({down:,} down, {len(own) - down:,} "
                     f"degraded): {named}{more}")  # fmt: skip
    return "links       " + "; ".join(parts)


def cmd_link_ls(args: argparse.Namespace) -> int:
    """`tectl link ls`: the links not fully up, as the controller's inputs say."""
    with _client(args) as client:
        links = client.status()["links"]
    if _structured(args, links):
        return 0
    if not links:
        print("every link is up")
    for link in links:
        f, by = link["fraction"], link.get("drained_by")
        state = "down" if f == 0 else f"degraded to {f:g} of capacity"
        if by:
            b = link.get("beneath", 0.0)
            under = "up" if b == 1 else "down" if b == 0 else f"degraded to {b:g}"
            state = f"down: {by} drained ({under} when the drain ends)"
        print(f"{link['link']}\t{state}")
    return 0


def _entry_line(prefix: str, e: RouteLine) -> str:
    qp = f" qp {e.qp_bucket}" if e.qp_bucket is not None else ""
    return f"{prefix}{e.switch}\t{e.in_port} -> {e.dst_host}{qp} via {e.next_hop}"


def cmd_routes_show(args: argparse.Namespace) -> int:
    if args.since != ("", 0) and not args.watch:
        raise InputError("--since resumes a watch: give --watch too")
    with _client(args) as client:
        try:
            if args.watch:
                epoch, since = args.since
                hosts: set[str] | None = None
                if args.job:  # its hosts as the watch starts
                    held = {job.id: job.hosts for job in client.list_jobs()}
                    if args.job not in held:
                        raise InputError(f"--job {args.job}: no such job")
                    hosts = set(held[args.job])
                if args.switch:  # names the server does not know refused, as in a listing
                    for _ in client.stream_routes(args.switch, "", 1):
                        break
                return _watch(client, since, set(args.switch), epoch, hosts)
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
    # the entries are what the switches were read to hold: one that could not be read is
    # listed as holding none, so say which (on stderr: the listing stays the listing)
    unread = [why for why in client.status().get("differing", []) if ": unreadable" in why
              and (not args.switch or why.split(":", 1)[0] in args.switch)]  # fmt: skip
    if unread:
        print(f"tectl: warning: {plural(len(unread), 'switch')} could not be read, their "
              f"entries not listed: {'; '.join(unread[:5])}", file=sys.stderr)


def _watch(client: Client, since: int, switches: Collection[str] = (), epoch: str = "",
           hosts: Collection[str] | None = None) -> int:  # fmt: skip
    """Print the watch, its snapshot's entries then each delta's (only `switches`' entries
    and those towards `hosts`, when given); the client resumes it when the server drops it
    for falling behind. Each sync line says how to resume from it. A watch runs until it
    is stopped: when the server ends it (stopping), that is said, and the exit code is 1."""
    first_chunk = True
    last = InSync(since, epoch)

    def shown(e: RouteLine) -> bool:
        return _shown(e, switches) and (hosts is None or e.dst_host in hosts)

    filtered = bool(switches) or hosts is not None
    for event in client.watch_routes(since, epoch):
        if isinstance(event, Snapshot):
            if first_chunk:
                print(f"# snapshot version {event.version}: {event.total_entries} entries"
                      + (" in all, those asked for below" if filtered else ""),
                      flush=True)  # fmt: skip
            sys.stdout.write("".join(_entry_line("", e) + "\n" for e in event.entries
                                     if shown(e)))  # fmt: skip
            sys.stdout.flush()
            first_chunk = not event.more
        elif isinstance(event, InSync):
            last = event
            resume = f" (resume with --since {event.epoch}:{event.version})" if event.epoch else ""
            print(f"# in sync at version {event.version}{resume}", flush=True)
        elif isinstance(event, Resumed):
            print(f"# fell behind; resuming from version {event.version}", flush=True)
            first_chunk = True
        elif isinstance(event, Delta):
            lines = [_entry_line("+ ", e) for e in event.added if shown(e)]
            lines += [_entry_line("- ", e) for e in event.removed if shown(e)]
            if lines or not filtered:  # filtered: a delta of other entries says nothing
                print("\n".join([f"# delta version {event.version}", *lines]), flush=True)
            last = InSync(event.version, last.epoch)
    resume = f"; resume with --since {last.epoch}:{last.version}" if last.epoch else ""
    print(f"tectl: the server ended the watch (it is stopping){resume}", file=sys.stderr)
    return 1


def _since(text: str) -> tuple[str, int]:
    """`--since EPOCH:VERSION` as (epoch, version)."""
    epoch, colon, version = text.rpartition(":")
    if not colon or not epoch:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not EPOCH:VERSION: a watch's sync lines print it (`# in sync at "
            "version V (resume with --since EPOCH:V)`); versions count from 1 in each "
            "controller process, so a version alone names no table")
    return epoch, flag(int, 1, 2**63 - 1)(version)


def _shown(e: RouteLine, switches: Collection[str]) -> bool:
    return not switches or e.switch in switches


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        data = client.status()
    if not _structured(args, data):
        sys.stdout.write(status_text(data))
    return 0


def _solving(d: dict[str, Any]) -> str:
    """The inputs line's tail: the global solve running, if any."""
    if not d.get("solving_version"):
        return ""
    what = ("the certificate of a settled link change" if d.get("solving_settle")
            else "a global solve")  # fmt: skip
    return (f"; {what} of state version {d['solving_version']:,} running for "
            f"{d.get('solving_seconds', 0.0):.1f} s")


def status_text(d: dict[str, Any]) -> str:
    """`tectl status` for a person: who pushes, what is installed, how good it is."""
    f, last, cert = d["fabric"], d["last_solve"], d.get("certificate")
    follower = d.get("role") == "follower"
    g = "{:,}".format
    lines = [
        f"fabric      {f.get('name', '?')}: {g(f.get('gpus', 0))} GPUs, {g(f.get('racks', 0))} "
        f"racks, {g(f.get('ctsws', 0))} CTSWs, {g(f.get('atsws', 0))} ATSWs",
        f"replica     {d['replica']} ({d['role'] or 'no role'}; leader {d['leader'] or '-'}"
        f"{'' if d['store_ok'] or not d['leader'] else ' as last seen'}), "
        f"store {d['store']} {'ok' if d['store_ok'] else 'REFUSING WRITES'} "
        f"at revision {g(d['store_revision'])}",
        f"driver      {d['driver']}: {'ok' if d['driver_ok'] else 'NOT OK'}; "
        f"{g(d['installed_entries'])} entries installed (routes version "
        f"{g(d['routes_version'])}), {g(d['switches_differing'])} switches differ, "
        f"{g(d['entries_missing'])} entries missing",
        f"inputs      state version {g(d['state_version'])}, "
        f"{g(d['pending_changes'])} changes pending{_solving(d)}",
        _links_line(d.get("links", []), drained=d.get("drained", [])),
    ]
    if last.get("restored") or last.get("held"):
        quality = (
            f"MLU {last['mlu']:.4g} over bound {last.get('bound', 0):.4g} "
            f"(ratio {last.get('ratio', 0):.4g})" if math.isfinite(last.get("mlu", math.nan))
            else "MLU being counted (with the rate prediction: rows ride the fabric's hashing)"
        )  # fmt: skip
        whose = ("none while routes applied from a file are held; theirs" if last.get("held")
                 else "none since this controller started; the routing restored from the "
                 "store")  # fmt: skip
        lines.append(
            f"last solve  {whose}: {quality}; {g(int(last.get('flows', 0)))} flows "
            f"({g(int(last.get('subflows', 0)))} subflows)"
        )
        if not cert and last.get("restored"):
            lines.append("certificate not kept across a restart: the next solve certifies")
    elif last:
        quality = (
            "MLU being counted (every flow rides the fabric's hashing; counted after the push)"
            if last.get("mlu_pending") else
            f"MLU {last.get('mlu', 0):.4g} over bound {last.get('bound', 0):.4g} "
            f"(ratio {last.get('ratio', 0):.4g})"
        )  # fmt: skip
        lines.append(
            f"last solve  {quality}; {g(int(last.get('flows', 0)))} flows "
            f"({g(int(last.get('subflows', 0)))} subflows), "
            f"{g(int(last.get('churn', 0)))} moved, {g(int(last.get('fallback_ecmp', 0)))} on "
            "ECMP by the table budget"
        )
    elif follower:
        lines.append(f"last solve  none here: the leader, {d['leader'] or 'another replica'}, "
                     "solves, certifies and pushes; ask its address for the routing's figures "
                     "(this replica follows its pushes)")  # fmt: skip
    elif d["installed_entries"]:
        lines.append("last solve  none since this controller started: the routes installed were "
                     "there (or stored) before it; figures follow the next change")  # fmt: skip
    if cert and cert.get("pending"):
        lines.append(f"certificate pending against {cert['reference']}: a repair of "
                     f"{g(cert['jobs'])} jobs installed, not checked yet; it is certified "
                     "in full next, off the reaction path")  # fmt: skip
    elif cert:
        lines.append(_certificate_line(cert))
    if d["report_to_installed_count"]:
        lines.append(
            f"latency     report to installed p50 {d['report_to_installed_p50_seconds']:.3g} s, "
            f"p99 {d['report_to_installed_p99_seconds']:.3g} s over "
            f"the last {g(d['report_to_installed_count'])} rounds installed (each from its "
            f"oldest change); {g(d['repairs'])} repairs"
        )
    elif not follower:
        lines.append("latency     no change reported and installed yet since this controller "
                     "started")  # fmt: skip
    pre = d.get("precomputed")
    if pre and not (follower and not pre["total"]):
        lines += _precomputed_lines(pre, held=bool(d.get("held")))
    held = d.get("held")
    if held:
        point = ("checkpoint kept (`tectl routes rollback`)" if held["checkpoint"]
                 else "no checkpoint")  # fmt: skip
        lines.append(f"held        routes of {held['source']} ({g(held['flows'])} flows, "
                     f"{g(held['entries'])} TE entries) applied from a file: the engine solves "
                     f"nothing until `tectl routes release`; {point}")  # fmt: skip
    if d["last_error"]:
        lines.append(f"last error  {d['last_error']}")
    lines += [f"differs     {why}" for why in d["differing"][:10]]
    return "\n".join(lines) + "\n"


def precompute_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Engine's precompute_* keywords of `tectl serve`'s flags (unset: its defaults)."""
    out: dict[str, Any] = {
        "precompute": args.precompute == "on", "precompute_budget": args.precompute_budget,
        "precompute_elements": args.precompute_elements}  # fmt: skip
    if args.precompute_in is not None:
        out["precompute_process"] = args.precompute_in == "process"
    if args.precompute_settle is not None:
        out["precompute_settle"] = args.precompute_settle
    return out


def _precomputed_lines(p: dict[str, Any], held: bool = False) -> list[str]:
    """Status's precomputed repairs: how many are ready and what they move (`held`: routes
    applied from a file are held, for which none are made or used)."""
    g = "{:,}".format
    if not p["enabled"]:
        return ["precomputed off (`tectl serve --precompute off`): every link report is "
                "repaired on demand"]  # fmt: skip
    if held:
        return ["precomputed none while routes applied from a file are held: link reports "
                f"are repaired on demand; {g(p['hits'])} reports served from them before"]
    if not p["total"] and not p["generation"]:  # no routing installed yet: nothing to cover
        return ["precomputed none yet: made once a routing is installed"]
    state = "done" if p["done"] else "refreshing"
    if p.get("failed"):
        state = (f"failed: {p['failed']}; reports are repaired on demand until the next "
                 "change of jobs, health or routes")
    lines = [f"precomputed {g(p['ready'])} of {g(p['total'])} single failures ready "
             f"(generation {g(p['generation'])}, {state}, {p['bytes'] / 1e6:.3g} MB, "
             f"{p['seconds']:.3g} s); {g(p['hits'])} reports served from them",
             f"blast       per repair ready: rows moved max {g(p['rows_moved_max'])}, mean "
             f"{p['rows_moved_mean']:.3g}; jobs moved max {g(p['jobs_moved_max'])}, mean "
             f"{p['jobs_moved_mean']:.3g}; {g(p['elements_moving_others'])} move rows that did "
             "not cross the element"]  # fmt: skip
    lines += [f"  widest    {w['element']} ({w['kind']}): {plural(w['rows_moved'], 'row')} moved "
              f"({g(w['rows_off_element'])} off it), {plural(w['jobs_moved'], 'job')}"
              for w in p["widest"][:5]]  # fmt: skip
    return lines


APPLY_MAX_BYTES = 4 << 20  # the API's limit on one ApplyRoutes request (limits.py)
PLAN_SWITCHES = 30  # switches a plan lists in text (all of them with -o json)


def cmd_routes_apply(args: argparse.Namespace) -> int:
    """`tectl routes apply FILE`: install a route file's routes on the service, held."""
    path = Path(args.file)
    try:
        content = path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(content) > APPLY_MAX_BYTES:
        raise InputError(f"{path}: {len(content):,} bytes, over the {APPLY_MAX_BYTES >> 20} MiB "
                         "a request may carry; write the routes as columns (`tectl solve "
                         "--out routes.npz`, about 1/150 of the JSON)")  # fmt: skip
    with _client(args) as client:
        plan = client.apply_routes(path.name, content, args.dry_run)
    if not _structured(args, plan):
        sys.stdout.write(plan_text(plan, f"routes of {path.name}", "apply"))
    return 0


def cmd_routes_rollback(args: argparse.Namespace) -> int:
    """`tectl routes rollback`: re-install the checkpoint the last apply kept."""
    with _client(args) as client:
        plan = client.rollback_routes(args.dry_run)
        held = client.status().get("held")
    if not _structured(args, plan | {"held": held}):
        sys.stdout.write(plan_text(plan, "the checkpoint", "rollback", held))
    return 0


def cmd_routes_release(args: argparse.Namespace) -> int:
    """`tectl routes release`: the engine routes again."""
    with _client(args) as client:
        plan = client.release_routes()
    if not _structured(args, plan):
        print("released: the engine solves the current inputs and installs its own routes")
    return 0


def plan_text(plan: dict[str, Any], what: str, verb: str, held: Any = None) -> str:
    """A route plan for a person: totals, then one line per switch that changes."""
    g = "{:,}".format
    add, rep, rm = plan["add"], plan["replace"], plan["remove"]
    changes = (f"{g(len(plan['switches']))} switches: {g(add)} entries to add, {g(rep)} to "
               f"replace, {g(rm)} to remove")  # fmt: skip
    size = f"{g(plan['flows'])} flows, {g(plan['entries'])} TE entries"
    if plan["dry_run"]:
        lines = [f"dry run: {verb} of {what} ({size}) would change {changes}; nothing changed"]
    elif verb == "apply":
        lines = [f"applied {what} ({size}) and holding them: changed {changes} (routes "
                 f"version {g(plan['routes_version'])}). The engine solves nothing while they "
                 "are held (link reports are still repaired on them); `tectl routes "
                 "rollback` restores the routes they replaced, `tectl routes release` hands "
                 "the fabric back to the engine"]  # fmt: skip
    else:
        after = (f"routes of {held['source']} held again (no checkpoint left)" if held
                 else "the engine routes again")  # fmt: skip
        lines = [f"rolled back to {what} ({size}): changed {changes} (routes version "
                 f"{g(plan['routes_version'])}); {after}"]  # fmt: skip
    foreign, missing = plan.get("flows_of_no_job", 0), plan.get("job_flows_missing", 0)
    if foreign or missing:
        lines.append(f"warning: these routes were made for other jobs: {g(foreign)} of their "
                     f"flows belong to no job of the controller, and {g(missing)} flows of its "
                     "jobs have no route in them (those ride the fabric's hashing)")  # fmt: skip
    rows = [(s["switch"], s["add"], s["replace"], s["remove"]) for s in plan["switches"]]
    if rows:
        width = max(len("switch"), *(len(r[0]) for r in rows))
        lines.append(f"{'switch':<{width}}  {'add':>7}  {'replace':>7}  {'remove':>7}")
        lines += [f"{sw:<{width}}  {g(a):>7}  {g(r):>7}  {g(d):>7}"
                  for sw, a, r, d in rows[:PLAN_SWITCHES]]  # fmt: skip
        if len(rows) > PLAN_SWITCHES:
            lines.append(f"... and {g(len(rows) - PLAN_SWITCHES)} more switches (`-o json` "
                         "lists every one)")  # fmt: skip
    return "\n".join(lines) + "\n"


def _output(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The `-o` option of every read command."""
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="text for a person (default), or every field as JSON or YAML")
    return p


def add_tls_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A client command's TLS flags and --insecure (defaults from FABRIC_TE_*)."""
    from_env = Target.from_env()
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
        help="name to verify in the server certificate, if not the host "
        "(FABRIC_TE_TLS_SERVER_NAME)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        default=from_env.insecure,
        help="plaintext to a local --insecure server (FABRIC_TE_INSECURE=1)",
    )
    return p


def _listen(value: str) -> str:
    """--listen: HOST:PORT ([V6]:PORT), the port a number in 0-65535 (0: any free one)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT with a port in 0-65535")
    return value


def register(cli: Commands) -> None:
    """Add `serve`, `job`, `link`, `status` and `routes show` to `tectl`."""
    sub, add_fabric_arg, routes_sub = cli.sub, cli.add_fabric_arg, cli.groups["routes"]
    serve = sub.add_parser("serve", help="run the controller as a gRPC service")
    add_fabric_arg(serve)
    serve.add_argument("--driver", default="emulated", help="switch driver (emulated)")
    serve.add_argument("--driver-dir", help="directory for --driver file (tables)")
    serve.add_argument("--lab", help="lab name for --driver linux or ovs (see `tectl lab up`)")
    serve.add_argument(
        "--config-db", metavar="URL|FILE",
        help="for --driver sonic: the switches' CONFIG_DB, a Redis URL with a database per "
        "switch in name order, or a JSON file mapping each switch to its URL",
    )  # fmt: skip
    serve.add_argument("--listen", type=_listen, default=DEFAULT_ADDRESS,
                       help=f"HOST:PORT to serve on, port 0-65535 ({DEFAULT_ADDRESS})")  # fmt: skip
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
        "--insecure", action="store_true",
        help="plaintext, no client identities: a local demo only (loopback addresses only)",
    )  # fmt: skip
    serve.add_argument(
        "--insecure-remote", action="store_true",
        help="with --insecure: allow plaintext on a non-loopback --listen address too",
    )  # fmt: skip
    serve.add_argument("--precompute", choices=("on", "off"), default="on",
                       help="compute the repair of every single failure of what is installed, "
                            "beside the engine, and serve link reports from them (on)")
    serve.add_argument("--precompute-elements", type=flag(int, 0, 2**31 - 1), default=None,
                       metavar="N", help="precompute at most N elements, in compute order "
                                         "(links carrying fewest TE rows first; default all)")
    serve.add_argument("--precompute-settle", type=flag(float, 0, 3600), default=None,
                       metavar="SECONDS",
                       help="start the refresh once the installed routes have stood this long "
                            "(0.5): the reports of a burst are repaired without it beside")
    serve.add_argument("--precompute-in", choices=("process", "thread"), default=None,
                       help="compute the elements in a child process forked from the service "
                            "(the default where fork exists) or in a thread of its own that "
                            "gives way to the engine (no extra process, no copy-on-write)")
    serve.add_argument("--precompute-budget", type=flag(int, 0, 2**63 - 1), default=None,
                       metavar="ROWS", help="stop once the elements computed carry this many "
                                            "TE rows in all (work, not seconds; default none)")
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
        return add_tls_args(p)

    job = sub.add_parser("job", help="jobs on a running controller")
    jsub = job.add_subparsers(dest="job_command", required=True, metavar="SUBCOMMAND")
    put = client(jsub.add_parser(
        "put", help="create or replace the jobs of a placement file (checked against each "
        "other and the controller's jobs before the first is sent; one request per job, so "
        "a job refused on its own stops the rest: check with --dry-run first)"))  # fmt: skip
    put.add_argument("file", help="placement file (JSON or YAML: a 'jobs' list, as `tectl "
                     "solve --jobs` reads); each job is put whole, by its id")  # fmt: skip
    put.add_argument("--dry-run", action="store_true",
                     help="print what would move (flows, entries per switch, jobs affected) "
                     "and the would-be routing's certificate; store and push nothing")  # fmt: skip
    _output(put).set_defaults(func=cmd_job_put)
    rm = client(jsub.add_parser("rm", help="delete jobs (idempotent)"))
    rm.add_argument("ids", nargs="+", metavar="ID", help="job id; several are deleted one "
                    "by one, in the order given")  # fmt: skip
    rm.set_defaults(func=cmd_job_rm)
    ls = _output(client(jsub.add_parser("ls", help="list jobs")))
    ls.set_defaults(func=cmd_job_ls)
    describe = _output(client(jsub.add_parser(
        "describe", help="one job: its shape, flows, predicted busbw and TE entries")))
    describe.add_argument("id", help="job id (`tectl job ls` lists them)")
    describe.set_defaults(func=cmd_job_describe)
    export = client(jsub.add_parser(
        "export", help="print the controller's jobs as a placement file ({\"jobs\": [...]}, "
        "what `tectl job put` and `tectl solve --jobs` read): a backup, or the jobs of one "
        "controller for another"))  # fmt: skip
    export.add_argument("-o", "--output", choices=("json", "yaml"), default="json",
                        help="file format (default json)")  # fmt: skip
    export.set_defaults(func=cmd_job_export)

    link = client(sub.add_parser(
        "link", help="report links' states to a running controller: LINK=down, LINK=up or "
        "LINK=0.5 (the fraction of capacity left), as --fail spells a link's; SWITCH=drain "
        "holds every link of a switch down until SWITCH=up ends the drain",
        description="Report links' states: tectl link rtsw-p0-r3:ctsw-p0-c2=0.5 (degraded to "
        "half), ...=down, ...=up; several at once. SWITCH=drain holds every link of the "
        "switch down; reports of its links meanwhile are remembered, not applied. SWITCH=up "
        "ends the drain: each link gets back the state it had or was reported meanwhile (a "
        "link down on its own stays down; one the other end's drain holds stays down until "
        "that ends); on a switch not drained, SWITCH=up reports every link of it up. The "
        "older `link down LINK`, `link up LINK` and `link degrade LINK FRACTION` are taken "
        "too. `tectl link ls` lists the links not fully up.",
    ))  # fmt: skip
    link.add_argument(
        "change",
        nargs="+",
        metavar="LINK=STATE",
        help="e.g. rtsw-p0-r3:ctsw-p0-c2=0.5; STATE: down, up or a fraction (drain: a "
        "switch)",
    )
    link.add_argument("--dry-run", action="store_true",
                      help="print what would move and the would-be routing's certificate; "
                      "report nothing")  # fmt: skip
    link.add_argument(
        "--fraction", "--factor", type=flag(float, 0, 1), default=None, help=argparse.SUPPRESS
    )  # `link degrade LINK --factor F`, as lab took it
    _output(link).set_defaults(func=cmd_link)

    _output(client(sub.add_parser("status", help="controller status"))).set_defaults(
        func=cmd_status
    )

    show = client(routes_sub.add_parser("show", help="installed routes of a running controller"))
    show.add_argument("--switch", action="append", default=[], metavar="NAME",
                      help="only this switch's entries; repeatable")  # fmt: skip
    show.add_argument("--job", default="", help="only entries towards this job's hosts")
    show.add_argument("--chunk", type=flag(int, 1, 1_000_000), default=10_000, metavar="N",
                      help="entries per streamed message (10000)")  # fmt: skip
    show.add_argument("--watch", action="store_true", help="stream changes")
    show.add_argument(
        "--since", type=_since, default=("", 0), metavar="EPOCH:VERSION",
        help="resume a watch from a version, as its sync lines print it (the epoch names the "
             "controller process: from another, or a restarted one, a snapshot comes first)",
    )  # fmt: skip
    show.set_defaults(func=cmd_routes_show)

    apply = _output(client(routes_sub.add_parser(
        "apply", help="install a route file's routes on a running controller and hold them",
        description="Install the routes of a route file (JSON or .npz, as `tectl solve --out` "
        "writes them) on a running controller, all or nothing, and hold them: the engine "
        "solves nothing while they are held (link reports are still repaired on them). The "
        "routes they replace are kept as a checkpoint (`tectl routes rollback`); `tectl "
        "routes release` hands the fabric back to the engine.",
    )))  # fmt: skip
    apply.add_argument("file", help="route file (JSON, or .npz columns; at most 4 MiB)")
    apply.add_argument("--dry-run", action="store_true",
                       help="print the plan (entries per switch) and change nothing")  # fmt: skip
    apply.set_defaults(func=cmd_routes_apply)
    rollback = _output(client(routes_sub.add_parser(
        "rollback", help="re-install the routes the last `routes apply` replaced")))  # fmt: skip
    rollback.add_argument("--dry-run", action="store_true",
                          help="print the plan and change nothing")  # fmt: skip
    rollback.set_defaults(func=cmd_routes_rollback)
    release = _output(client(routes_sub.add_parser(
        "release", help="stop holding applied routes: the engine solves again")))  # fmt: skip
    release.set_defaults(func=cmd_routes_release)
