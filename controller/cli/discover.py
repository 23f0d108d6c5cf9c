"""`tectl fabric discover`: the cable-list fabric document from LLDP neighbour tables.

The tables come from a directory (DEVICE.json per device, as `lldpcli -f json0 show
neighbors details` prints it; `-f json` too), from a command run per device (`--command 'ssh
{device} lldpcli -f json0 show neighbors details' --devices FILE`, each with a timeout), or
from a lab run with `tectl lab up --lldp` (`--lab NAME`: lldpcli on each namespace's control
socket). The document goes to stdout (or `--out`), YAML or `--json`; the report to stderr.
Exit 0 when every table agrees, 1 on inconsistencies or a device's table that cannot be read
or parsed (no document unless `--allow-partial`, which writes the cables that agree), 2 on
bad arguments or roles that cannot be told.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import FabricError
from controller.model.discovery import Neighbour
from controller.model.fabric import MAX_PORTS_PER_NIC
from controller.model.validation import MAX_GBPS, MIN_GBPS, flag

if TYPE_CHECKING:
    from controller.cli.commands import Commands

EXIT_OK, EXIT_INCONSISTENT = 0, 1
DEFAULT_GBPS = 400.0
DEFAULT_TIMEOUT = 15.0
DEFAULT_PARALLEL = 8
LAB_COMMAND = "lldpcli -u {socket} -f json0 show neighbors details"

Tables = dict[str, list[Neighbour]]


def read_devices(path: str) -> list[str]:
    """Device names, one a line ('#' comments and blank lines skipped; a name may hold
    blanks, as LLDP system names may: one a fabric file cannot take is refused once its
    table is read); FabricError on a missing file, a repeated name or no names."""
    from controller.model.documents import read_text

    try:
        lines = read_text(path, FabricError, "the device list").splitlines()
    except FabricError as err:  # not there, not a regular file, not UTF-8, too large
        raise FabricError(f"--devices {err}") from None
    names: list[str] = []
    for number, line in enumerate(lines, 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if name in names:
            raise FabricError(f"--devices {path}:{number}: {name} is listed twice")
        names.append(name)
    if not names:
        raise FabricError(f"--devices {path}: no device names")
    return names


def from_directory(path: str) -> tuple[Tables, dict[str, str]]:
    """The tables of DIR/*.json, by file stem; unreadable files named with why."""
    from controller.formats.lldp import read_table
    from controller.model.documents import read_text

    root = Path(path)
    if not root.is_dir():
        raise FabricError(f"{path}: not a directory of DEVICE.json neighbour tables")
    files = sorted(root.glob("*.json"))
    if not files:
        raise FabricError(f"{path}: no DEVICE.json neighbour tables in it")
    tables: Tables = {}
    unreadable: dict[str, str] = {}
    for file in files:
        try:
            text = read_text(file, FabricError, "neighbour table")  # a FIFO would block
        except FabricError as err:
            unreadable[file.stem] = str(err)
            continue
        try:
            tables[file.stem] = read_table(file.stem, text)
        except FabricError as err:
            unreadable[file.stem] = f"{file}: {str(err).removeprefix(file.stem + ': ')}"
    return tables, unreadable


def run_per_device(template: str, devices: list[str], timeout: float,
                   parallel: int) -> tuple[Tables, dict[str, str]]:  # fmt: skip
    """Run `template` (split as a shell would, then {device} replaced in each word: no
    shell runs) for every device, `parallel` at a time; the tables, and the devices whose
    command failed, timed out or printed no table, with why."""
    from controller.formats.lldp import read_table

    words = shlex.split(template)
    if not any("{device}" in w for w in words):
        raise FabricError(f"--command {template!r}: put {{device}} where the device name goes")

    def one(device: str) -> tuple[list[Neighbour] | None, str]:
        argv = [w.replace("{device}", device) for w in words]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"`{shlex.join(argv)}` gave no answer in {timeout:g} s"
        except OSError as err:
            return None, f"`{shlex.join(argv)}` did not run: {err.strerror or err}"
        if done.returncode != 0:
            tail = " ".join(done.stderr.strip().split())[-300:] or "no message"
            return None, f"`{shlex.join(argv)}` exited {done.returncode}: {tail}"
        try:
            return read_table(device, done.stdout), ""
        except FabricError as err:
            return None, str(err).removeprefix(device + ": ")

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        results = list(pool.map(one, devices))
    tables = {d: t for d, (t, _) in zip(devices, results, strict=True) if t is not None}
    unreadable = {d: why for d, (t, why) in zip(devices, results, strict=True) if t is None}
    return tables, unreadable


def from_lab(lab: str, timeout: float, parallel: int) -> tuple[Tables, dict[str, str]]:
    """Every node's table of a lab run with `tectl lab up --lldp`, over lldpd's control
    sockets (no namespace needs entering). The nodes are those the lab configured lldpd for
    (NODE.conf), so a daemon that died is reported, not forgotten."""
    from controller.drivers.linux_plan import lldp_dir

    directory = lldp_dir(lab)
    devices = sorted(p.stem for p in directory.glob("*.conf")) if directory.is_dir() else []
    if not devices:
        raise FabricError(f"--lab {lab}: no lldpd configured in {directory} (is the lab up, "
                          "and was it started with `tectl lab up --lldp`?)")  # fmt: skip
    socket = shlex.quote(str(directory)) + "/{device}.sock"
    return run_per_device(LAB_COMMAND.replace("{socket}", socket), devices, timeout, parallel)


def cmd_fabric_discover(args: argparse.Namespace) -> int:
    from controller.formats.cable_list import cable_list_document, dump
    from controller.formats.lldp import report_text
    from controller.model.device_roles import parse_role_patterns, with_roles
    from controller.model.discovery import discover
    from controller.model.inventory import NOT_A_DEVICE_NAME, listing, usable_device_name

    patterns = parse_role_patterns(args.roles)  # bad flags fail before anything runs
    if args.lab:
        tables, unreadable = from_lab(args.lab, args.timeout, args.parallel)
    elif args.command:
        if not args.devices:
            raise FabricError("--command needs --devices FILE (the devices to run it for)")
        tables, unreadable = run_per_device(args.command, read_devices(args.devices),
                                            args.timeout, args.parallel)  # fmt: skip
    elif args.source:
        tables, unreadable = from_directory(args.source)
    else:
        raise FabricError("give a directory of DEVICE.json tables, --command with --devices, "
                          "or --lab NAME")  # fmt: skip
    found = discover(tables, args.gbps, unreadable, force_default=args.force_gbps)
    if not found.ok and not args.allow_partial:
        sys.stderr.write(report_text(found, None, found.cables, found.problems, args.gbps,
                                     args.force_gbps))  # fmt: skip
        sys.stderr.write("no document written (--allow-partial writes the cables that agree)\n")
        return EXIT_INCONSISTENT
    devices, cables, tier_problems = with_roles(found, patterns)
    problems = list(found.problems) + tier_problems
    sys.stderr.write(report_text(found, devices, cables, problems, args.gbps, args.force_gbps))
    if problems and not args.allow_partial:
        sys.stderr.write("no document written (--allow-partial writes the cables that agree)\n")
        return EXIT_INCONSISTENT
    unusable = [d.name for d in devices if not usable_device_name(d.name)]
    if unusable:  # the document would be one no fabric file loads
        raise FabricError("no fabric file would load the document: " + listing(
            [repr(n) for n in unusable], 8) + f" {NOT_A_DEVICE_NAME}; rename these devices "
            "(their LLDP system names, or their tables' file names)")
    text = dump(cable_list_document(args.name, devices, cables, args.ports_per_nic),
                as_json=args.json)  # fmt: skip
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def register(cli: Commands) -> None:
    """Add `fabric discover` to the `fabric` group."""
    p = cli.groups["fabric"].add_parser(
        "discover", help="the cable-list fabric document from LLDP neighbour tables",
        description="Build the cable-list fabric document (devices with roles, cables with "
        "both ports and speeds) from LLDP neighbour tables as lldpd prints them (`lldpcli -f "
        "json0 show neighbors details`, or -f json). A cable is taken when both ends hear "
        "each other on the same ports; anything else is reported on stderr, naming devices "
        "and ports. Exit 0: every table agrees; 1: inconsistencies, or a device's table that "
        "cannot be read or parsed (no document unless --allow-partial); 2: bad arguments or "
        "roles that cannot be told. See docs/discovery.md.",
    )  # fmt: skip
    p.add_argument("source", nargs="?", metavar="DIR",
                   help="directory of DEVICE.json tables, one per device (the file name, "
                   "less .json, is the device's name)")  # fmt: skip
    p.add_argument("--command", metavar="CMD",
                   help="run per device instead, {device} replaced by its name, e.g. 'ssh "
                   "{device} lldpcli -f json0 show neighbors details' (split as a shell "
                   "would, but no shell runs)")  # fmt: skip
    p.add_argument("--devices", metavar="FILE", help="the devices for --command, one a line")
    p.add_argument("--lab", metavar="NAME",
                   help="read a lab built with `tectl lab up --lldp` (root)")
    p.add_argument("--timeout", type=flag(float, 0.1, 3600), default=DEFAULT_TIMEOUT,
                   help=f"seconds per device for --command and --lab ({DEFAULT_TIMEOUT:g})")
    p.add_argument("--parallel", type=flag(int, 1, 256), default=DEFAULT_PARALLEL,
                   help=f"devices asked at once ({DEFAULT_PARALLEL})")
    p.add_argument("--roles", action="append", default=[], metavar="PATTERN=ROLE",
                   help="role of the devices matching a shell pattern (host, rtsw, ctsw, atsw), "
                   "e.g. 'gpu-*=host'; repeatable; the rest are inferred (docs/discovery.md)")
    p.add_argument("--gbps", type=flag(float, MIN_GBPS, MAX_GBPS), default=DEFAULT_GBPS,
                   help=f"speed of cables whose ends advertise none ({DEFAULT_GBPS:g})")
    p.add_argument("--force-gbps", action="store_true",
                   help="give every cable --gbps, whatever its ends advertise (a lab's veth "
                   "ports advertise 10G)")  # fmt: skip
    p.add_argument("--name", default="discovered", help="the fabric's name (discovered)")
    p.add_argument("--ports-per-nic", type=flag(int, 1, MAX_PORTS_PER_NIC), default=1,
                   metavar="P", help="each GPU's NIC has P ports, a host's ports P at a time "
                   "in natural order (LLDP cannot tell; 2 for dual-ToR NICs; 1)")  # fmt: skip
    p.add_argument("--allow-partial", action="store_true",
                   help="write the document of the cables that agree even when others do not, "
                   "and exit 0")  # fmt: skip
    p.add_argument("--out", metavar="FILE", help="write the document here, not to stdout")
    p.add_argument("--json", action="store_true", help="the document as JSON, not YAML")
    p.set_defaults(func=cmd_fabric_discover)
