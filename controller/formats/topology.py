"""The fabric's hierarchy in the forms schedulers read.

slurm-conf        Slurm topology.conf for topology/tree (every Slurm release): one line per
                  RTSW (its hosts), per pod (its RTSWs) and one for the cluster (its pods)
slurm-block-conf  Slurm topology.conf for topology/block (Slurm 23.11 and later): one base
                  block per rack, listed pod by pod, and BlockSizes (see `block_sizes`)
slurm-yaml        Slurm topology.yaml (25.05 and later): a list of named topologies, each
                  with exactly one of tree/block/flat: `tree` (the cluster default) and
                  `block` as above
k8s-labels        node -> labels: fabric-te.io/pod, fabric-te.io/rack, fabric-te.io/host and
                  kubernetes.io/hostname
kueue             a Kueue Topology, kueue.x-k8s.io/v1beta2 (served from Kueue 0.15, the
                  storage version from 0.16), levels pod, rack, kubernetes.io/hostname
                  (outermost first; Kueue wants the hostname label as the lowest level)
volcano           Volcano HyperNodes, topology.volcano.sh/v1alpha1 (Volcano 1.12 and later):
                  tier 1 per rack (nodes), tier 2 per pod (rack hypernodes), tier 3 for the
                  cluster (pod hypernodes) when there is more than one pod
json              pods -> racks -> hosts, with switch names
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

from controller.errors import InputError
from controller.formats.output import to_json
from controller.model.fabric import Fabric

FORMATS = (
    "slurm-conf", "slurm-block-conf", "slurm-yaml", "k8s-labels", "kueue", "volcano", "json",
)  # fmt: skip
KUEUE_API = "kueue.x-k8s.io/v1beta2"
VOLCANO_API = "topology.volcano.sh/v1alpha1"
# The oldest Slurm release that reads each Slurm format (topology/tree: all of them).
SLURM_MIN_VERSION = {"slurm-conf": (0, 0), "slurm-block-conf": (23, 11), "slurm-yaml": (25, 5)}
POD_LABEL, RACK_LABEL, HOST_LABEL = (
    "fabric-te.io/pod", "fabric-te.io/rack", "kubernetes.io/hostname",
)  # fmt: skip
FABRIC_HOST_LABEL = "fabric-te.io/host"


def hostlist(prefix: str, numbers: Iterable[int]) -> str:
    """Slurm hostlist form: prefix[0-3,5] (or prefix7 for a single number)."""
    nums = sorted(set(numbers))
    if len(nums) == 1:
        return f"{prefix}{nums[0]}"
    runs: list[tuple[int, int]] = []
    for n in nums:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    return f"{prefix}[{','.join(parts)}]"


def _pod_name(p: int) -> str:
    return f"pod{p}"


def _rack_hosts(fabric: Fabric, rack: int) -> str:
    pod, r = divmod(rack, fabric.racks_per_pod)
    return hostlist(f"host-p{pod}-r{r}-h", range(fabric.hosts_per_rack))


def slurm_conf(fabric: Fabric) -> str:
    """topology.conf for the tree plugin: rack switches, pod switches, one top switch."""
    lines = [f"# Slurm topology.conf (tree) for fabric {fabric.name}, by fabric-te"]
    for rack in range(fabric.num_racks):
        lines.append(f"SwitchName={fabric.rtsw_name(rack)} Nodes={_rack_hosts(fabric, rack)}")
    for p in range(fabric.pods):
        racks = hostlist(f"rtsw-p{p}-r", range(fabric.racks_per_pod))
        lines.append(f"SwitchName={_pod_name(p)} Switches={racks}")
    if fabric.pods > 1:
        lines.append(f"SwitchName=cluster Switches={hostlist('pod', range(fabric.pods))}")
    return "\n".join(lines) + "\n"


def slurm_block_conf(fabric: Fabric) -> str:
    """topology.conf for the block plugin (Slurm 23.11+): a base block per rack."""
    lines = [f"# Slurm topology.conf (block) for fabric {fabric.name}, by fabric-te"]
    for rack in range(fabric.num_racks):
        lines.append(f"BlockName={fabric.rtsw_name(rack)} Nodes={_rack_hosts(fabric, rack)}")
    lines.append("BlockSizes=" + ",".join(str(n) for n in block_sizes(fabric)))
    return "\n".join(lines) + "\n"


def parse_slurm_version(text: str) -> tuple[int, int]:
    """(major, minor) of "22.05", "23.11.4" or "slurm-wlm 22.05.8"."""
    m = re.search(r"(\d+)\.(\d+)", text)
    if m is None:
        raise InputError(f"--slurm-version: expected a version like 23.11, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def check_slurm_version(fmt: str, version: str) -> None:
    """Fail, naming the release needed, when Slurm `version` cannot read format `fmt`."""
    need = SLURM_MIN_VERSION.get(fmt)
    if need is None:
        raise InputError(f"--slurm-version applies to {', '.join(SLURM_MIN_VERSION)}, not {fmt}")
    if parse_slurm_version(version) < need:
        raise InputError(
            f"{fmt} needs Slurm {need[0]}.{need[1]:02d} or later; Slurm {version} reads "
            "slurm-conf (topology/tree)"
        )


def slurm_yaml(fabric: Fabric) -> str:
    """topology.yaml (Slurm 25.05+): a default `tree` topology and a `block` one (racks)."""
    switches: list[dict[str, Any]] = [
        {"switch": fabric.rtsw_name(r), "nodes": _rack_hosts(fabric, r)}
        for r in range(fabric.num_racks)
    ]
    switches += [
        {"switch": _pod_name(p), "children": hostlist(f"rtsw-p{p}-r", range(fabric.racks_per_pod))}
        for p in range(fabric.pods)
    ]
    if fabric.pods > 1:
        switches.append({"switch": "cluster", "children": hostlist("pod", range(fabric.pods))})
    blocks = [
        {"block": fabric.rtsw_name(r), "nodes": _rack_hosts(fabric, r)}
        for r in range(fabric.num_racks)
    ]
    doc = [
        {"topology": "tree", "cluster_default": True, "tree": {"switches": switches}},
        {"topology": "block", "cluster_default": False,
         "block": {"block_sizes": block_sizes(fabric), "blocks": blocks}},
    ]  # fmt: skip
    return yaml.safe_dump(doc, sort_keys=False)


def block_sizes(fabric: Fabric) -> list[int]:
    """Hosts per block at each level: a rack, then 2, 4, ... racks while that divides a pod."""
    sizes, racks = [], 1
    while fabric.racks_per_pod % racks == 0:
        sizes.append(racks * fabric.hosts_per_rack)
        racks *= 2
    return sizes


def k8s_labels(fabric: Fabric) -> dict[str, dict[str, str]]:
    """Node name -> the labels to put on it (pod, rack, host)."""
    out = {}
    for host in range(fabric.num_hosts):
        rack = int(fabric.rack_of_host(host))
        pod, r = divmod(rack, fabric.racks_per_pod)
        name = fabric.host_name(host)
        out[name] = {POD_LABEL: f"p{pod}", RACK_LABEL: f"p{pod}-r{r}",
                     FABRIC_HOST_LABEL: name, HOST_LABEL: name}  # fmt: skip
    return out


def k8s_name(name: str) -> str:
    """`name` as a Kubernetes object name (DNS-1123 subdomain: lower case, digits, - and .)."""
    out = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")[:253].strip("-.")
    return out or "fabric"


def kueue(fabric: Fabric) -> str:
    """A Kueue Topology object over the labels of `k8s_labels`."""
    doc = {
        "apiVersion": KUEUE_API,
        "kind": "Topology",
        "metadata": {"name": k8s_name(fabric.name)},
        "spec": {"levels": [{"nodeLabel": k} for k in (POD_LABEL, RACK_LABEL, HOST_LABEL)]},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def volcano(fabric: Fabric) -> str:
    """Volcano HyperNodes, one YAML document each: racks (tier 1), then pods (tier 2)."""
    docs = []
    for rack in range(fabric.num_racks):
        pod, r = divmod(rack, fabric.racks_per_pod)
        members = [
            {"type": "Node", "selector": {"exactMatch": {"name": fabric.host_name(h)}}}
            for h in range(rack * fabric.hosts_per_rack, (rack + 1) * fabric.hosts_per_rack)
        ]
        docs.append(_hypernode(f"rack-p{pod}-r{r}", 1, members))
    for p in range(fabric.pods):
        members = [
            {"type": "HyperNode", "selector": {"exactMatch": {"name": f"rack-p{p}-r{r}"}}}
            for r in range(fabric.racks_per_pod)
        ]
        docs.append(_hypernode(f"pod-p{p}", 2, members))
    if fabric.pods > 1:
        members = [
            {"type": "HyperNode", "selector": {"exactMatch": {"name": f"pod-p{p}"}}}
            for p in range(fabric.pods)
        ]
        docs.append(_hypernode("cluster", 3, members))
    return yaml.safe_dump_all(docs, sort_keys=False)


def _hypernode(name: str, tier: int, members: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": VOLCANO_API,
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": members},
    }


def as_json(fabric: Fabric) -> str:
    """pods -> racks -> hosts with switch names, as JSON."""
    pods = []
    for p in range(fabric.pods):
        racks = []
        for r in range(fabric.racks_per_pod):
            rack = p * fabric.racks_per_pod + r
            hosts = range(rack * fabric.hosts_per_rack, (rack + 1) * fabric.hosts_per_rack)
            racks.append({"name": f"p{p}-r{r}", "switch": fabric.rtsw_name(rack),
                          "hosts": [fabric.host_name(h) for h in hosts]})  # fmt: skip
        pods.append({"name": _pod_name(p), "racks": racks})
    return to_json({"fabric": fabric.name, "gpus_per_host": fabric.nics_per_host, "pods": pods})


def export(fabric: Fabric, fmt: str) -> str:
    """The fabric's hierarchy in format `fmt` (see FORMATS)."""
    if fmt == "slurm-conf":
        return slurm_conf(fabric)
    if fmt == "slurm-block-conf":
        return slurm_block_conf(fabric)
    if fmt == "slurm-yaml":
        return slurm_yaml(fabric)
    if fmt == "k8s-labels":
        return to_json(k8s_labels(fabric))
    if fmt == "kueue":
        return kueue(fabric)
    if fmt == "volcano":
        return volcano(fabric)
    if fmt == "json":
        return as_json(fabric)
    raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
