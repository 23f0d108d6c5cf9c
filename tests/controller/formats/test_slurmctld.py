"""The Slurm exports, read by a real slurmctld (Debian slurm-wlm) on 127.0.0.1.

Each test writes a throw-away slurm.conf (its own cluster name, ports, state directory;
auth/none, so no munge) beside the exported topology, runs `slurmctld -D` as a child
process and asks `scontrol show topology` what it loaded. slurmctld is always stopped and
the directory removed, even when the test fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from controller.formats.topology import (
    SLURM_MIN_VERSION,
    _hosts_of_rack,
    _rack_hosts,
    _racks,
    export,
    parse_slurm_version,
)
from controller.model.fabric import Fabric
from sim.processes import free_port, stop

SLURMCTLD = shutil.which("slurmctld") or "/usr/sbin/slurmctld"
SCONTROL = shutil.which("scontrol") or "/usr/bin/scontrol"


def _skip_reason() -> str | None:
    if not (os.path.exists(SLURMCTLD) and os.path.exists(SCONTROL)):
        return "slurmctld/scontrol not installed (Debian slurmctld; `make system-deps` as root)"
    if os.geteuid() != 0:
        return "slurmctld runs here as SlurmUser=root: needs root"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _version() -> tuple[int, int]:
    out = subprocess.run([SLURMCTLD, "-V"], capture_output=True, text=True, timeout=10)
    return parse_slurm_version(out.stdout + out.stderr)


def _slurm_conf(fabric: Fabric, d: Path, plugin: str) -> str:
    nodes = ",".join(_rack_hosts(fabric, r) for r in _racks(fabric))
    return "\n".join([
        f"ClusterName=fabte{os.getpid() % 100000}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "AuthType=auth/none", "CredType=cred/none", "SlurmUser=root",
        f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmctldLogFile={d / 'slurmctld.log'}",
        f"TopologyPlugin=topology/{plugin}", "SelectType=select/cons_tres",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        f"NodeName={nodes} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN",
        "PartitionName=all Nodes=ALL Default=YES State=UP",
    ]) + "\n"  # fmt: skip


@contextmanager
def slurmctld(fabric: Fabric, plugin: str, topology: str) -> Iterator[dict[str, str]]:
    """A running slurmctld reading `topology` as topology.conf; yields scontrol's env."""
    with tempfile.TemporaryDirectory(prefix="fabric-te-slurm-") as tmp:
        d = Path(tmp)
        (d / "state").mkdir()
        conf = d / "slurm.conf"
        conf.write_text(_slurm_conf(fabric, d, plugin))
        (d / "topology.conf").write_text(topology)
        env = dict(os.environ, SLURM_CONF=str(conf))
        proc = subprocess.Popen(
            [SLURMCTLD, "-D", "-i", "-f", str(conf)], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while True:
                ping = subprocess.run([SCONTROL, "ping"], env=env, capture_output=True,
                                      text=True, timeout=10)  # fmt: skip
                if "is UP" in ping.stdout:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    log = proc.communicate(timeout=5)[0]
                    pytest.fail(f"slurmctld did not come up:\n{log[-3000:]}")
                time.sleep(0.2)
            yield env
        finally:
            stop(proc)


def expand(spec: str) -> list[str]:
    """Slurm hostlist -> names, for the forms Slurm prints ('a[0-1],b[3,5]', 'x')."""
    out: list[str] = []
    for prefix, body, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", spec):
        if plain:
            out.append(plain)
            continue
        for part in body.split(","):
            a, _, b = part.partition("-")
            width = len(a) if a.startswith("0") else 0  # zero padding, as Slurm keeps it
            out += [f"{prefix}{i:0{width}d}" for i in range(int(a), int(b or a) + 1)]
    return out


def test_slurmctld_loads_the_tree_topology(small: Fabric) -> None:
    with slurmctld(small, "tree", export(small, "slurm-conf")) as env:
        shown = subprocess.run([SCONTROL, "show", "topology"], env=env, capture_output=True,
                               text=True, timeout=10, check=True).stdout  # fmt: skip
    switches = {}
    for line in shown.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "SwitchName" in fields:
            switches[fields["SwitchName"]] = fields
    racks = [small.rtsw_name(r) for r in range(small.num_racks)]
    assert set(switches) == set(racks) | {"pod0", "pod1", "cluster"}
    for rack in range(small.num_racks):  # each rack switch holds exactly its hosts
        s = switches[small.rtsw_name(rack)]
        hosts = range(rack * small.hosts_per_rack, (rack + 1) * small.hosts_per_rack)
        assert s["Level"] == "0"
        assert expand(s["Nodes"]) == [small.host_name(h) for h in hosts]
    for p in range(small.pods):
        pod = switches[f"pod{p}"]
        assert pod["Level"] == "1"
        assert expand(pod["Switches"]) == [f"rtsw-p{p}-r{r}" for r in range(small.racks_per_pod)]
    assert switches["cluster"]["Level"] == "2"
    assert len(expand(switches["cluster"]["Nodes"])) == small.num_hosts


def test_slurmctld_loads_the_block_topology(small: Fabric) -> None:
    need = SLURM_MIN_VERSION["slurm-block-conf"]
    have = _version()
    if have < need:
        pytest.skip(
            f"slurmctld {have[0]}.{have[1]:02d} has no topology/block "
            f"(Slurm {need[0]}.{need[1]:02d}+); the tree export is checked instead"
        )
    with slurmctld(small, "block", export(small, "slurm-block-conf")) as env:
        shown = subprocess.run([SCONTROL, "show", "topology"], env=env, capture_output=True,
                               text=True, timeout=10, check=True).stdout  # fmt: skip
    for rack in range(small.num_racks):
        assert f"BlockName={small.rtsw_name(rack)}" in shown


def test_slurmctld_loads_an_inventorys_names(tmp_path: Path) -> None:
    """A cable-list fabric with operator names, zero-padded numbers and a partial rack: the
    tree slurmctld loads has exactly the inventory's hosts under its leaves."""
    from controller.formats.fabric_file import load_fabric

    example = Path(__file__).parents[3] / "docs" / "examples" / "tiny-cables.yaml"
    text = example.read_text()
    lines = [ln for ln in text.splitlines() if "gpu-b11" not in ln]  # never racked
    (tmp_path / "f.yaml").write_text("\n".join(lines) + "\n")
    fabric = load_fabric(str(tmp_path / "f.yaml"))
    with slurmctld(fabric, "tree", export(fabric, "slurm-conf")) as env:
        shown = subprocess.run([SCONTROL, "show", "topology"], env=env, capture_output=True,
                               text=True, timeout=10, check=True).stdout  # fmt: skip
    leaves = {}
    for line in shown.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if fields.get("SwitchName", "").startswith("leaf-"):
            leaves[fields["SwitchName"]] = expand(fields["Nodes"])
    assert leaves == {fabric.rtsw_name(r): [fabric.host_name(h) for h in _hosts_of_rack(fabric, r)]
                      for r in _racks(fabric)}  # fmt: skip
    assert leaves["leaf-b1"] == ["gpu-b10"] and leaves["leaf-a0"] == ["gpu-a00", "gpu-a01"]


@pytest.mark.parametrize("plugin", ["tree", "block"])
def test_slurmctld_loads_an_inventorys_pod_and_rack_names(named_tiny: Fabric, plugin: str) -> None:
    """The operator's pod names as tree switches, its rack names as blocks: slurmctld loads
    them and shows them."""
    fmt = "slurm-conf" if plugin == "tree" else "slurm-block-conf"
    if plugin == "block" and _version() < SLURM_MIN_VERSION[fmt]:
        have = _version()
        pytest.skip(f"slurmctld {have[0]}.{have[1]:02d} has no topology/block (Slurm 23.11+)")
    with slurmctld(named_tiny, plugin, export(named_tiny, fmt)) as env:
        shown = subprocess.run([SCONTROL, "show", "topology"], env=env, capture_output=True,
                               text=True, timeout=10, check=True).stdout  # fmt: skip
    if plugin == "tree":
        assert "SwitchName=Hall-A" in shown and "SwitchName=Hall-B" in shown
    else:
        for rack in ("A01", "A02", "B01", "B02"):
            assert f"BlockName={rack}" in shown
