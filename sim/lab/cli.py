"""`tectl lab up|down|status|verify|apply|link|ls|gc`: a fabric in network namespaces, from
the shell; `apply` installs a saved route file on a lab; `ls` shows every lab with its
owner, `gc` removes those whose owner is gone. `pick_lab` and `packet_check` also serve
`tectl solve --apply linux`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from controller.formats.output import emit
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.validation import flag
from controller.routes.tables import RouteSet

DEFAULT_LAB = "fte"


def default_underlay() -> str:
    """FRR where it is installed, static multipath otherwise."""
    from sim.lab.frr import installed

    return "frr" if installed() else "static"


def apply_health(plan: Any, health: Any, link_gbit: float) -> None:
    """Down links set down; a link degraded to factor f rate-limited to f x `link_gbit`
    (links not installed have no ports: their factor 0 is the missing cable, not a fault)."""
    from sim.lab.links import set_link

    for link in down_installed(plan.fabric, health).tolist():
        set_link(plan, int(link), "down")
    for link in health.degraded_links().tolist():
        rate = f"{max(1, round(float(health.factor[link]) * link_gbit * 1000))}mbit"
        set_link(plan, int(link), "degrade", rate=rate)


def down_installed(fabric: Fabric, health: Any) -> np.ndarray:
    """The links down in `health` that have a cable (a missing one is not a failure)."""
    down = health.down_links()
    return down[fabric.installed[down]]


def cmd_up(args: argparse.Namespace) -> int:
    from controller.drivers.linux_plan import LabPlan
    from controller.formats.fabric_file import load_fabric
    from controller.model.health import parse_health
    from sim.lab.build import down, reap, up
    from sim.lab.shared import exit_on_signals

    exit_on_signals()  # SIGTERM, SIGHUP: the half-built lab is removed, as on Ctrl-C
    for gone in reap():  # orphans first: their namespaces may clash, and nobody wants them
        print(f"removed orphaned lab {gone.lab} (owner pid {(gone.owner or {}).get('pid')} "
              "is gone)", file=sys.stderr)  # fmt: skip
    fabric = load_fabric(args.fabric)
    underlay = args.underlay
    if underlay == "auto":  # several RTSWs a rack: the static underlay keeps the rails
        underlay = "static" if fabric.rtsws_per_rack > 1 else default_underlay()
    path = Path(args.fabric)  # a fabric file is recorded by absolute path, a preset by name
    source = str(path.resolve()) if path.is_file() else args.fabric
    health = parse_health(fabric, args.fail)  # bad specs fail before anything is built
    if args.switch == "ovs" and args.underlay not in ("auto", "static"):
        from controller.errors import LabError

        raise LabError("--switch ovs: the underlay is OpenFlow select groups (no --underlay)")
    record = up(fabric, args.name, source, underlay=underlay, owner=args.owner,
                switch=args.switch, health=health, lldp=args.lldp)  # fmt: skip
    try:
        if args.switch == "linux":
            apply_health(LabPlan(fabric, args.name), health, args.link_gbit)
    except BaseException:
        down(args.name)
        raise
    kind = "" if record.switch == "linux" else ", switches Open vSwitch bridges"
    kind += ", lldpd in every namespace" if record.lldp else ""
    text = (f"lab {record.lab}: fabric {record.fabric}{kind}, {len(record.namespaces)} "
            f"namespaces, {record.links} links, underlay {record.underlay}, built in "
            f"{record.build_seconds:.2f} s; {down_installed(fabric, health).size} links down, "
            f"{health.degraded_links().size} degraded\n")  # fmt: skip
    text += wiring_text(record)
    emit(args.json, asdict(record), text)
    return 0


def wiring_text(record: Any) -> str:
    """What a lab built from irregular wiring left out: links not installed (no veth), and
    host pairs that no cabled path joins (their flows cannot be routed, so are not
    checked); empty for a complete fabric."""
    from controller.formats.output import plural

    text = ""
    if record.not_installed:
        text += (f"  {plural(record.not_installed, 'link')} not installed: no veth for a "
                 "missing cable, no namespace for an absent host or switch\n")  # fmt: skip
    if record.own_ports:
        text += f"  ports named by the lab, not the inventory: {record.own_ports}\n"
    if record.unreachable:
        more = record.unreachable - len(record.unreachable_shown)
        text += (f"  {plural(record.unreachable, 'host pair')} with no cabled path: "
                 + ", ".join(record.unreachable_shown) + (f" and {more} more" if more else "")
                 + "\n")  # fmt: skip
    return text


def cmd_down(args: argparse.Namespace) -> int:
    from sim.lab.build import down

    record = down(args.name)
    emit(args.json, {"lab": record.lab, "removed": len(record.namespaces)},
         f"lab {record.lab}: removed {len(record.namespaces)} namespaces\n")  # fmt: skip
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from sim.lab.build import require_root, status

    require_root()  # without, no namespace's ports can be read
    s = status(args.name)
    kind = "switches Open vSwitch bridges, " if s.switch == "ovs" else ""
    text = (f"lab {s.lab}: fabric {s.fabric}, {kind}underlay {s.underlay}, {s.state}; "
            f"{s.namespaces_present}/{s.namespaces} namespaces, {s.ports_up}/{s.ports} ports "
            f"up" + (f"; restorer {s.restorer}" if s.switch == "linux" else "")
            + (f"; NOT RUNNING: {', '.join(s.daemons_down)} (its bridges forward nothing)"
               if s.daemons_down else "") + "\n")
    emit(args.json, asdict(s), text)
    return 0 if s.namespaces_present == s.namespaces and not s.daemons_down else 1


def _owner_text(owner: dict[str, int] | None) -> str:
    from sim.lab.build import owner_alive

    if owner is None:
        return "kept (until lab down)"
    return f"pid {owner['pid']} ({'running' if owner_alive(owner) else 'gone: orphan'})"


def cmd_ls(args: argparse.Namespace) -> int:
    from sim.lab.build import labs, owner_alive

    records = labs()
    data = [{"lab": r.lab, "fabric": r.fabric, "state": r.state,
             "namespaces": len(r.namespaces), "owner": r.owner,
             "orphan": not owner_alive(r.owner)} for r in records]  # fmt: skip
    text = "".join(f"{r.lab}\t{r.fabric}\t{r.state}\t{len(r.namespaces)} namespaces\t"
                   f"{_owner_text(r.owner)}\n" for r in records) or "no labs\n"  # fmt: skip
    emit(args.json, data, text)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from sim.lab.build import reap, require_root

    require_root()
    gone = reap()
    data = [{"lab": r.lab, "removed": len(r.namespaces), "owner": r.owner} for r in gone]
    text = "".join(f"removed orphaned lab {r.lab}: {len(r.namespaces)} namespaces (owner "
                   f"{_owner_text(r.owner)})\n" for r in gone) or "no orphaned labs\n"  # fmt: skip
    emit(args.json, data, text)
    return 0


def whole_lab(name: str) -> None:
    """A LabError unless this process may program lab `name` (root) and every namespace its
    record lists is there."""
    from controller.errors import LabError
    from sim.lab import netns
    from sim.lab.build import load_record, require_root

    require_root()
    record = load_record(name)
    missing = sorted(set(record.namespaces) - netns.existing())
    if missing:
        raise LabError(f"lab {name!r} lacks {len(missing)} of its namespaces "
                       f"({', '.join(missing[:5])}): `tectl lab down --name {name}` and "
                       "build it again")  # fmt: skip


def lab_fabric(name: str) -> Fabric:
    from controller.formats.fabric_file import load_fabric
    from sim.lab.build import load_record

    return load_fabric(load_record(name).fabric)


def cmd_link(args: argparse.Namespace) -> int:
    from controller.drivers.linux_plan import LabPlan
    from controller.errors import FabricError, FabricTeError, LabError
    from controller.model.health import factor_state, link_changes
    from sim.lab.build import require_root
    from sim.lab.links import set_link

    require_root()
    words = list(args.change)
    if args.factor is not None:
        words.append(str(args.factor))
    elif len(words) == 2 and words[0] == "degrade" and "=" not in words[1]:
        words.append("0.5")  # `lab link degrade LINK` meant half before FRACTION was asked
    changes = link_changes(words)
    fabric = lab_fabric(args.name)
    plan = LabPlan(fabric, args.name)
    links = [fabric.link_by_name(name) for name, _ in changes]  # all, before any is changed
    try:
        fabric.check_installed(links)
    except FabricError as err:
        raise LabError(f"lab {args.name}: {err}") from None
    lines, data = [], []
    for link, (_, factor) in zip(links, changes, strict=True):
        state, fraction = factor_state(factor)
        set_link(plan, link, state, rate=args.rate, fraction=fraction)
        shown = f"{fabric.link_name(link)}={state if fraction is None else f'{fraction:g}'}"
        text = f"lab {args.name}: {shown}"
        if args.controller:
            try:
                report_link(args.controller, fabric.link_name(link), state, fraction)
            except FabricTeError as err:  # the lab's link is changed: say so, and how to tell
                raise LabError(f"lab {args.name}: {shown} is set in the lab, but the controller "
                               f"at {args.controller} was not told: {err}; tell it with "
                               f"`tectl link {shown}`") from None  # fmt: skip
            text += f"; reported to {args.controller}"
        lines.append(text)
        data.append({"link": fabric.link_name(link), "state": state, "fraction": factor})
    emit(args.json, data, "\n".join(lines) + "\n")
    return 0


def report_link(address: str, link: str, state: str, factor: float | None) -> None:
    """Tell a running controller about the change, as `tectl link` does (TLS or plaintext
    from the FABRIC_TE_* settings); the client's error if it does not take it."""
    from controller.service.client import Client, Target

    with Client.connect(Target.from_env(address)) as client:
        client.report_link(link, state, factor if state == "degrade" else None)


def solved(fabric: Fabric, seed: int, fill: float,
           health: Any = None) -> tuple[Assignment, RouteSet]:  # fmt: skip
    """A seeded random job mix solved on `health` (default: all links up), and its TE
    routes."""
    from controller.formats.placement import load_jobs
    from controller.model.health import LinkHealth
    from controller.model.jobs import jobs_flows
    from controller.routes.entries import build_routes
    from controller.solver.solve import solve

    flows = jobs_flows(fabric, load_jobs(fabric, "random", seed=seed, fill=fill))
    result = solve(fabric, health if health is not None else LinkHealth.all_up(fabric), flows)
    return result.assignment, build_routes(fabric, result.assignment)


def held(driver: Any) -> RouteSet:
    """What the driver's switches hold; a DriverError naming every switch that cannot be
    read (planning over it as if it held nothing would be wrong)."""
    from controller.drivers.push import read_back
    from controller.errors import DriverError

    actual, unreadable = read_back(driver, driver.switches())
    if unreadable:
        raise DriverError("; ".join(unreadable.values()))
    return actual


def install(driver: Any, fabric: Fabric, routes: RouteSet) -> None:
    """Make the driver's switches hold exactly `routes` (fabric-te's entries)."""
    from controller.drivers.push import push
    from controller.errors import DriverError
    from controller.routes.plan import diff

    report = push(driver, diff(held(driver), routes, fabric))
    if not report.ok:
        raise DriverError(f"routes did not install: {report.summary()}")


def lab_switch(name: str) -> str:
    """What lab `name`'s switches are: linux (namespaces) or ovs (Open vSwitch bridges)."""
    from sim.lab.build import load_record

    return str(load_record(name).switch)


def lab_driver(fabric: Fabric, name: str) -> Any:
    """The driver that programs lab `name`'s switches: `linux` or `ovs`."""
    if lab_switch(name) == "ovs":
        from controller.drivers.ovs import OvsDriver

        return OvsDriver(fabric, lab=name)
    from controller.drivers.linux import LinuxDriver

    return LinuxDriver(fabric=fabric, lab=name)


def lab_io(fabric: Fabric, name: str) -> Any:
    """Packets and per-port counters in lab `name` (`sim.lab.traffic.LabIO`)."""
    from controller.drivers.linux_plan import LabPlan

    if lab_switch(name) == "ovs":
        from sim.lab.ovs import OvsLabIO

        return OvsLabIO(LabPlan(fabric, name))
    from sim.lab.traffic import LabIO

    return LabIO(LabPlan(fabric, name))


def packet_check(fabric: Fabric, lab: str, assignment: Assignment, sample: int,
                 packets: int, seed: int = 1) -> tuple[Any, int]:  # fmt: skip
    """Real packets on up to `sample` seeded routed flows of `assignment` in lab `lab`:
    (the `sim.lab.traffic.verify` report, how many of the flows are QP buckets)."""
    from sim.lab.traffic import verify

    routed = np.flatnonzero(assignment.routed)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(routed, size=min(sample, routed.size), replace=False))
    io = lab_io(fabric, lab)
    try:
        report = verify(io, assignment, rows.tolist(), packets=packets)
    finally:
        io.close()
    return report, int((assignment.flows.qp[rows] >= 0).sum())


def _listing(records: list[Any]) -> str:
    return ", ".join(f"{r.lab} (fabric {r.fabric})" for r in records) or "none"


def pick_lab(name: str | None, fabric: Fabric | None = None, switch: str | None = None) -> str:
    """The running lab to program: `name`, or else the one lab running (built from `fabric`
    when given, with `switch` switches when given); a LabError naming the running labs when
    there is no such lab, or more than one to choose from, or the lab was built from another
    fabric or with other switches."""
    from controller.errors import FabricTeError, LabError
    from controller.formats.fabric_file import load_fabric
    from sim.lab.build import labs

    running = [r for r in labs() if r.state == "up"]

    def built_from(record: Any) -> Fabric | None:
        try:
            return load_fabric(record.fabric)
        except FabricTeError:  # its fabric file is gone or changed: not this fabric's lab
            return None

    def same(record: Any) -> bool:
        made = built_from(record)
        return fabric is None or (made is not None and made.fingerprint == fabric.fingerprint)

    if switch is not None:
        wrong = [r for r in running if r.switch != switch and (name is None or r.lab == name)]
        if name is not None and wrong:
            other = "ovs" if switch == "linux" else "linux"
            kind = "Open vSwitch bridges" if other == "ovs" else "Linux namespaces"
            raise LabError(f"lab {name!r} has {kind} for switches: program it with the "
                           f"{other} driver")  # fmt: skip
        running = [r for r in running if r.switch == switch]
    if name is not None:
        record = next((r for r in running if r.lab == name), None)
        if record is None:
            raise LabError(f"no lab {name!r} is running; running labs: {_listing(running)}")
        if not same(record):
            assert fabric is not None
            raise LabError(f"lab {name!r} was built from fabric {record.fabric}, not "
                           f"{fabric.name}: its switches cannot take these routes")  # fmt: skip
        return str(record.lab)
    fits = [r for r in running if same(r)]
    if len(fits) == 1:
        return str(fits[0].lab)
    of = f" of fabric {fabric.name}" if fabric is not None else ""
    if not fits:
        raise LabError(f"no lab{of} is running (running labs: {_listing(running)}); start one "
                       f"with `tectl lab up --fabric {fabric.name if fabric else 'FABRIC'} "
                       f"--name NAME`")  # fmt: skip
    raise LabError(f"{len(fits)} labs{of} are running ({_listing(fits)}): name one with "
                   "--lab NAME")  # fmt: skip


def cmd_verify(args: argparse.Namespace) -> int:
    from controller.drivers.linux_plan import LabPlan
    from sim.lab.links import lab_health

    whole_lab(args.name)  # before the solve: it is of no use otherwise
    fabric = lab_fabric(args.name)
    plan = LabPlan(fabric, args.name)
    health = lab_health(plan)  # solve around the links that are down in the lab
    assignment, routes = solved(fabric, args.seed, args.fill, health)
    with lab_driver(fabric, args.name) as driver:
        install(driver, fabric, routes)
    report, buckets = packet_check(fabric, args.name, assignment, args.sample, args.packets,
                                   args.seed)  # fmt: skip
    down = down_installed(fabric, health).size
    unrouted = int((~assignment.routed).sum())  # e.g. between hosts no cabled path joins
    data = {"entries": len(routes), "links_down": int(down), "bucket_flows": buckets,
            "unrouted_flows": unrouted, **asdict(report), "ok": report.ok}  # fmt: skip
    text = (f"{down} links down; {len(routes):,} TE entries installed; {report.summary()} "
            f"({buckets} of them QP buckets)\n")  # fmt: skip
    if unrouted:
        text += f"  {unrouted} flows of the mix have no usable path: not routed, not checked\n"
    text += "".join(f"  {p}\n" for p in report.problems[:20])
    emit(args.json, data, text)
    return 0 if report.ok else 1


def cmd_apply(args: argparse.Namespace) -> int:
    """Install a saved route file on a running lab, then check sampled flows with packets."""
    from controller.drivers.push import push
    from controller.formats.output import counts_text, plural
    from controller.formats.route_file import read_routes
    from controller.routes.plan import diff
    from sim.lab.build import require_root

    require_root()
    name = pick_lab(args.name)
    whole_lab(name)
    fabric = lab_fabric(name)
    assignment, routes = read_routes(args.file, fabric)  # refuses another fabric's file
    with lab_driver(fabric, name) as driver:
        plan = diff(held(driver), routes, fabric)
        report = push(driver, plan, dry_run=args.dry_run)
    stages = sum(1 for stage in plan.stages if stage)
    lines = [f"lab {name} (fabric {fabric.name}): {args.file}: {len(routes):,} TE entries on "
             f"{len(routes.switches()):,} switches",
             f"plan: {plural(len(plan), 'operation')} in {plural(stages, 'stage')} "
             f"({counts_text(plan.counts())})" if len(plan)
             else f"plan: no operations; the {len(routes):,} entries are installed",
             f"push: {report.summary()}"]  # fmt: skip
    data: dict[str, Any] = {"lab": name, "file": args.file, "entries": len(routes),
                            "plan": plan.counts(), "push_ok": report.ok}  # fmt: skip
    ok = report.ok
    if ok and not args.dry_run and args.sample > 0:
        check, buckets = packet_check(fabric, name, assignment, args.sample, args.packets)
        lines.append(f"forwarding check with real packets: {check.summary()} ({buckets} of "
                     "them QP buckets)")  # fmt: skip
        lines += [f"  {p}" for p in check.problems[:20]]
        data["verify"] = {**asdict(check), "ok": check.ok}
        ok = check.ok
    data["ok"] = ok
    emit(args.json, data, "\n".join(lines) + "\n")
    return 0 if ok else 1


def register(cli: Any) -> None:
    """Add the `lab` group to `tectl`."""
    lab = cli.sub.add_parser("lab", help="a fabric built in Linux network namespaces (root)")
    group = lab.add_subparsers(dest="lab_command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default=DEFAULT_LAB,
                       help=f"lab name, the prefix of its namespaces ({DEFAULT_LAB})")  # fmt: skip
        p.add_argument("--json", action="store_true", help="machine-readable output")

    up = group.add_parser("up", help="build the fabric as namespaces and veth links")
    cli.add_fabric_arg(up)
    common(up)
    up.add_argument("--underlay", choices=("auto", "frr", "static"), default="auto",
                    help="default routing: FRR eBGP (auto: when installed, and one RTSW a "
                         "rack) or static ECMP")
    up.add_argument("--switch", choices=("linux", "ovs"), default="linux",
                    help="switches as Linux namespaces (linux) or Open vSwitch bridges on the "
                    "userspace datapath (ovs: underlay as OpenFlow select groups, TE entries "
                    "through the ovs driver)")  # fmt: skip
    up.add_argument("--lldp", action="store_true",
                    help="run lldpd in every namespace (1 s interval, port ids = interface "
                    "names), for `tectl fabric discover --lab NAME`; needs the lldpd "
                    "package")  # fmt: skip
    up.add_argument("--fail", action="append", default=[], metavar="LINK[=STATE]",
                    help="link down (or =0.5 degraded: a tc rate limit); repeatable")
    up.add_argument("--link-gbit", type=flag(float, 0.001, 10_000), default=10.0,
                    help="rate a degraded link's factor applies to, Gbit/s (10)")
    up.add_argument("--owner", type=int, default=None, metavar="PID",
                    help="remove the lab (lab gc, the next lab up) once process PID is gone; "
                    "default: kept until lab down")  # fmt: skip
    up.set_defaults(func=cmd_up)
    ls = group.add_parser("ls", help="every lab on this machine, with its owner")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=cmd_ls)
    gc = group.add_parser("gc", help="remove the labs whose owner process is gone")
    gc.add_argument("--json", action="store_true", help="machine-readable output")
    gc.set_defaults(func=cmd_gc)
    for name, func, text in (("down", cmd_down, "remove exactly what `lab up` made"),
                             ("status", cmd_status, "what the lab holds")):  # fmt: skip
        p = group.add_parser(name, help=text)
        common(p)
        p.set_defaults(func=func)
    verify = group.add_parser("verify", help="solve a job mix, install it through the linux "
                              "driver and check sampled flows with real packets")  # fmt: skip
    common(verify)
    verify.add_argument("--seed", type=int, default=1, help="seed of the random job mix (1)")
    verify.add_argument("--fill", type=float, default=1.0,
                        help="fraction of hosts the job mix takes (1.0)")
    verify.add_argument("--sample", type=int, default=64, help="flows to check (64)")
    verify.add_argument("--packets", type=int, default=20, help="packets per flow (20)")
    verify.set_defaults(func=cmd_verify)
    apply = group.add_parser(
        "apply", help="install a saved route file (tectl solve --out) on a running lab through "
        "the linux driver, then check sampled flows with real packets",
        description="Install FILE (.json or .npz, as `tectl solve --out` writes it) on a lab: "
        "the plan from what the lab's switches hold to the file's routes, pushed stage by "
        "stage, read back; then sampled flows of the file checked with real packets. Exit "
        "0: installed and every checked flow on its path; 1: the push or the check failed; "
        "2: a bad file, a file of another fabric, or no such lab.",
    )  # fmt: skip
    apply.add_argument("file", metavar="FILE", help="route file (.json, or .npz columns)")
    apply.add_argument("--name", "--lab", dest="name", default=None, metavar="NAME",
                       help="the lab (default: the one lab running)")  # fmt: skip
    apply.add_argument("--dry-run", action="store_true", help="the plan only, nothing pushed")
    apply.add_argument("--sample", type=flag(int, 0, 1_000_000), default=64,
                       help="flows to check with packets afterwards (64; 0: none)")  # fmt: skip
    apply.add_argument("--packets", type=flag(int, 1, 10_000), default=5,
                       help="packets per checked flow (5)")  # fmt: skip
    apply.add_argument("--json", action="store_true", help="machine-readable output")
    apply.set_defaults(func=cmd_apply)
    link = group.add_parser(
        "link", help="set lab links down, up or degraded: LINK=down, LINK=up or LINK=0.5, as "
        "--fail and `tectl link` spell them",
        description="Set lab links: tectl lab link rtsw-p0-r0:ctsw-p0-c1=0.5 --name fte (a tc "
        "rate limit, reported as half the capacity). The older `lab link down|up LINK` and "
        "`lab link degrade LINK [--factor F]` are taken too.",
    )  # fmt: skip
    link.add_argument("change", nargs="+", metavar="LINK=STATE",
                      help="e.g. rtsw-p0-r0:ctsw-p0-c1=0.5; STATE: down, up or a fraction")
    common(link)
    link.add_argument("--rate", default="1gbit", help="tc rate of a degraded link (1gbit)")
    link.add_argument("--factor", "--fraction", type=flag(float, 0, 1), default=None,
                      help=argparse.SUPPRESS)  # the older `degrade LINK --factor F`
    link.add_argument("--controller", metavar="ADDR",
                      help="also report the change to the controller at ADDR")  # fmt: skip
    link.set_defaults(func=cmd_link)

