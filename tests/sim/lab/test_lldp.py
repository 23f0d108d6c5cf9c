"""Discovery on a real lab: lldpd in every namespace of a `tiny` lab, `tectl fabric discover
--lab` reads them, and the result is the lab's own plan; then LLDP is broken on purpose and
the report names the devices and ports. Needs root and the lldpd package (CI has both)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.cli.discover import from_lab
from controller.cli.main import main
from controller.drivers.linux_plan import LabPlan, lldp_dir
from controller.model.discovery import Discovery, discover
from controller.model.fabric import Fabric
from sim.lab import build as lab
from sim.lab import lldp
from sim.lab.shared import unique_name

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="lab tests need root to make network "
                       "namespaces (CI runs as root)"),  # fmt: skip
    pytest.mark.skipif(lldp.missing() is not None, reason=f"{lldp.missing()} (CI installs "
                       "it: the Makefile's DEBS)"),  # fmt: skip
]
HOST, NIC, RTSW, PORT = "host-p0-r0-h0", "nic0", "rtsw-p0-r0", "h0n0"


def until(check: Callable[[], Discovery | None], what: str, timeout: float = 20.0) -> Discovery:
    """Poll `check` until it returns a discovery, with a deadline (LLDP ages out by TTL)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {timeout:g} s")
        time.sleep(0.25)


def now(name: str) -> Discovery:
    """What the lab's tables say at this moment."""
    tables, unreadable = from_lab(name, 10, 8)
    return discover(tables, 400, unreadable)


def lldpcli(name: str, node: str, *words: str) -> None:
    import subprocess

    subprocess.run(["lldpcli", "-u", str(lldp.socket(name, node)), *words], check=True,
                   capture_output=True)  # fmt: skip


def test_discover_reproduces_the_lab_and_names_what_breaks(tiny: Fabric, capsys):
    name = unique_name("ld")
    record = lab.up(tiny, name, "tiny", underlay="static", lldp=True)
    pids = [int(p.read_text()) for p in lldp_dir(name).glob("*.pid")]
    try:
        assert record.lldp and len(pids) == 24 and "lldp" in record.phases
        plan = LabPlan(tiny, name)
        # every cable, both port names, every role, as the lab's plan has them
        assert main(["fabric", "discover", "--lab", name, "--json", "--force-gbps",
                     "--name", "tiny"]) == 0  # fmt: skip
        out, err = capsys.readouterr()
        doc = json.loads(out)
        want = {}
        for link in range(tiny.num_links):
            lower, upper = plan.ends(link)
            want[(lower.node, lower.ifname, upper.node, upper.ifname)] = float(
                tiny.capacity[2 * link])
        got = {(c["a"], c["a_port"], c["b"], c["b_port"]): float(c["gbps"])
               for c in doc["cables"]}  # fmt: skip
        assert got == want and len(doc["cables"]) == tiny.num_links
        roles = {d["name"]: d["role"] for d in doc["devices"]}
        assert roles == {**{h: "host" for h in plan.hosts},
                         **{s: s.split("-")[0] for s in plan.switches}}  # fmt: skip
        assert ("40 cables agreed from 24 devices' tables; 24 devices (8 hosts, 4 rtsw, 8 ctsw, "
                "4 atsw)") in err
        # the document is a fabric file: it loads as the lab's fabric, name for name
        from controller.formats.fabric_file import parse_fabric

        found_fabric = parse_fabric(doc, "discovered")
        for dim in ("pods", "racks_per_pod", "hosts_per_rack", "nics_per_host", "ctsws_per_pod",
                    "rack_links", "atsws_per_plane", "agg_links"):  # fmt: skip
            assert getattr(found_fabric, dim) == getattr(tiny, dim), dim
        assert found_fabric.node_names == tiny.node_names
        assert found_fabric.link_names == tiny.link_names
        assert found_fabric.capacity.tobytes() == tiny.capacity.tobytes()
        assert found_fabric.wiring is not None and found_fabric.wiring.installed.all()
        # the speeds lldpd advertises are the veth ports' own
        found = now(name)
        assert found.ok and found.speed_from_lldp == 40 and {c.gbps for c in found.cables} == {10}

        # the host stops sending on one NIC: once the RTSW's entry ages out, one-sided
        lldpcli(name, HOST, "configure", "ports", NIC, "lldp", "status", "rx-only")
        found = until(lambda: (f := now(name)).problems and f or None,
                      "a one-sided cable")  # fmt: skip
        assert [(p.kind, p.message) for p in found.problems] == [(
            "one-sided", f"{HOST}:{NIC} hears {RTSW}:{PORT}, but {RTSW} (which speaks LLDP) "
            f"hears no neighbour on {PORT}")]  # fmt: skip
        assert main(["fabric", "discover", "--lab", name]) == 1
        out, err = capsys.readouterr()
        assert out == "" and f"one-sided: {HOST}:{NIC} hears {RTSW}:{PORT}" in err
        lldpcli(name, HOST, "configure", "ports", NIC, "lldp", "status", "rx-and-tx")
        until(lambda: (f := now(name)).ok and f or None,
              "the cable back")  # fmt: skip

        # an ATSW's lldpd dies: its table is missing, and it is named. While it shuts down
        # (shutdown frames sent, its own table emptied, its socket not yet gone) it reads as
        # "alone" for a moment, so wait for the state it settles in
        atsw = "atsw-c0-a0"
        os.kill(int((lldp_dir(name) / f"{atsw}.pid").read_text()), 15)
        found = until(lambda: (f := now(name)).problems
                      and f.problems[0].kind != "alone" and f or None,
                      "the missing table")  # fmt: skip
        assert found.problems[0].kind == "missing"
        assert found.problems[0].message.startswith(f"{atsw}: no neighbour table (`lldpcli -u ")
        assert len(found.cables) == tiny.num_links - 2  # its two CTSWs' cables
    finally:
        lab.down(name)
    assert not [p for p in pids if Path(f"/proc/{p}").exists()
                and Path(f"/proc/{p}/comm").read_text().strip() == "lldpd"
                and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]


def test_an_up_interrupted_while_lldpd_starts_leaves_no_daemon(tiny: Fabric, monkeypatch):
    """Ctrl-C while lldpd is being started: the daemons already launched have not written
    their pid files yet, and must be stopped all the same (nothing may be left running in
    the lab's namespaces, which would outlive their names)."""
    import signal
    import subprocess

    from controller.drivers.netns import NETNS_DIR

    name = unique_name("li")
    nets: set[int] = set()
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def popen(cmd, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "lldpd" not in cmd:
            return real(cmd, *args, **kwargs)
        if len(started) == 6:  # Ctrl-C as the 7th lldpd is launched
            raise KeyboardInterrupt
        nets.add(os.stat(NETNS_DIR / cmd[cmd.index("exec") + 1]).st_ino)
        started.append(real(cmd, *args, **kwargs))
        return started[-1]

    def left() -> list[int]:
        out = []
        for ns in Path("/proc").glob("[0-9]*/ns/net"):
            try:
                if os.stat(ns).st_ino in nets:
                    out.append(int(ns.parent.parent.name))
            except OSError:
                continue
        return out

    monkeypatch.setattr(lldp.subprocess, "Popen", popen)
    try:
        with pytest.raises(KeyboardInterrupt):
            lab.up(tiny, name, "tiny", underlay="static", lldp=True)
        for proc in started:
            proc.wait(timeout=10)
        time.sleep(1.0)  # a daemon that was still starting would be up by now
        assert len(nets) == 6 and not left(), f"left running in lab {name}: {left()}"
        assert not lab.lab_path(name).exists()
    finally:
        for pid in left():
            os.kill(pid, signal.SIGKILL)
