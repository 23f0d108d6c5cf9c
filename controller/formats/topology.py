"""The fabric's hierarchy in the forms schedulers read.

slurm-conf        Slurm topology.conf for topology/tree (every Slurm release): one line per
                  RTSW (its hosts), per pod (its RTSWs) and one for the cluster (its pods)
slurm-block-conf  Slurm topology.conf for topology/block (Slurm 23.11 and later): one base
                  block per rack, listed pod by pod, and BlockSizes (see `block_sizes`)
slurm-yaml        Slurm topology.yaml (25.05 and later): a list of named topologies, each
                  with exactly one of tree/block/flat: `tree` (the cluster default) and
                  `block` as above
k8s-labels        node name -> labels: fabric-te.io/fabric, fabric-te.io/pod, fabric-te.io/rack,
                  fabric-te.io/host (never kubernetes.io/hostname: the kubelet owns it)
kueue             kubectl-appliable YAML, one document each: a Kueue Topology,
                  kueue.x-k8s.io/v1beta2 (served from Kueue 0.15, the storage version from
                  0.16), levels pod, rack, kubernetes.io/hostname (outermost first; Kueue
                  wants the hostname label, which the kubelet sets, as the lowest level); a
                  ResourceFlavor with that topologyName and the fabric's node label; and a
                  Node per host carrying the labels of k8s-labels (applied as a patch)
volcano           Volcano HyperNodes, topology.volcano.sh/v1alpha1 (Volcano 1.12 and later):
                  tier 1 per rack (nodes), tier 2 per pod (rack hypernodes), tier 3 for the
                  cluster (pod hypernodes) when there is more than one pod
json              pods -> racks -> hosts, with switch names

Every host and switch is named as the fabric names it (the inventory's names for a fabric
loaded from one); hosts and racks an inventory does not have are left out. A host's Node is
its name lower-cased, as the kubelet registers it, and nothing else is rewritten: k8s-labels,
kueue and volcano refuse a host name that is no Node name (or, where it is the
fabric-te.io/host label's value, no label value), two hosts on one Node, and volcano two racks
or pods on one HyperNode, and the Slurm exports a name holding Slurm's syntax ('[', ']', ',',
'=', '#', blanks), rather than export a host as another or as a node no cluster has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

from controller.errors import FabricError, InputError
from controller.formats.output import to_json
from controller.model import validation
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
FABRIC_LABEL = "fabric-te.io/fabric"  # the ResourceFlavor's nodeLabels select on it
_NUMBERED = re.compile(r"^(.*?)(\d+)$")
# Kubernetes object names (Node, HyperNode): an RFC 1123 subdomain, at most 253 characters of
# dot-separated parts of a-z 0-9 and '-', a letter or digit at both ends of each. A host's
# name may be in upper case (the kubelet lower-cases it), so A-Z is matched here too.
_PART = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_PART}(\.{_PART})*")
MAX_OBJECT_NAME, MAX_LABEL_VALUE = 253, 63


def hostlist(prefix: str, numbers: Iterable[int]) -> str:
    """Slurm hostlist form: prefix[0-3,5] (or prefix7 for a single number)."""
    runs = _runs(numbers)
    if len(runs) == 1 and runs[0][0] == runs[0][1]:
        return f"{prefix}{runs[0][0]}"
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    return f"{prefix}[{','.join(parts)}]"


def _runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """The distinct numbers as ascending runs of consecutive ones: [(first, last), ...]."""
    runs: list[tuple[int, int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def hostlist_of(names: Iterable[str]) -> str:
    """Names in Slurm hostlist form, runs of a numbered name folded: gpu-a[01-03],leaf7
    (zero padding kept; names without a trailing number listed as they are)."""
    groups: dict[tuple[str, int], list[int]] = {}  # (prefix, padded width or 0) -> numbers
    for name in names:
        m = _NUMBERED.match(name)
        if m is None:
            groups.setdefault((name, -1), [])
            continue
        prefix, digits = m.groups()
        width = len(digits) if digits[0] == "0" and len(digits) > 1 else 0
        if not width and (prefix, len(digits)) in groups:
            width = len(digits)  # 10 joins 01-09 as a two-digit number
        groups.setdefault((prefix, width), []).append(int(digits))
    out = []
    for (prefix, width), numbers in groups.items():
        if width < 0:
            out.append(prefix)
            continue
        runs = _runs(numbers)
        fmt = f"{{:0{width}d}}"
        parts = [fmt.format(a) if a == b else f"{fmt.format(a)}-{fmt.format(b)}" for a, b in runs]
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        out.append(f"{prefix}{parts[0]}" if single else f"{prefix}[{','.join(parts)}]")
    return ",".join(out)


def _pod_name(fabric: Fabric, p: int) -> str:
    """A pod as Slurm and the json export name it: the operator's name, else podP."""
    return fabric.pod_name(p) or f"pod{p}"


def _pod_label(fabric: Fabric, p: int) -> str:
    """A pod's label value: the operator's name, else pP."""
    return fabric.pod_name(p) or f"p{p}"


def _rack_label(fabric: Fabric, rack: int) -> str:
    """A rack's label value (and json name): the operator's name, else pP-rR."""
    p, r = divmod(rack, fabric.racks_per_pod)
    return fabric.rack_name(rack) or f"p{p}-r{r}"


def _rack_block(fabric: Fabric, rack: int) -> str:
    """A rack's Slurm block: the operator's rack name, else its switch (`_rack_switch`)."""
    return fabric.rack_name(rack) or _rack_switch(fabric, rack)


def _pods_switch(fabric: Fabric, pods: Iterable[int]) -> str:
    """The pods as the children of Slurm's cluster switch (pod[0-3] with no names)."""
    if fabric.wiring is None or not fabric.wiring.pod_names:
        return hostlist("pod", pods)
    return hostlist_of(_pod_name(fabric, p) for p in pods)


def _hosts_of_rack(fabric: Fabric, rack: int) -> list[int]:
    """The host ids of a rack that exist (all of a preset's)."""
    lo = rack * fabric.hosts_per_rack
    present = fabric.present[fabric.node_id("host", lo) : fabric.node_id("host", lo)
                             + fabric.hosts_per_rack]  # fmt: skip
    return [lo + h for h in range(fabric.hosts_per_rack) if present[h]]


def _racks(fabric: Fabric) -> list[int]:
    """The rack ids that have an RTSW and hold a host."""
    lo, s = fabric.node_id("rtsw", 0), fabric.rtsws_per_rack
    return [r for r in range(fabric.num_racks)
            if fabric.present[lo + r * s : lo + (r + 1) * s].any() and _hosts_of_rack(fabric, r)]


def _rack_switch(fabric: Fabric, rack: int) -> str:
    """The switch a scheduler sees for a rack: its RTSW, or with several RTSWs a rack
    (a rail-optimized scalable unit, a dual-ToR segment) the logical rack they form: the
    operator's rack name, else `rack-pP-rR`."""
    if fabric.rtsws_per_rack == 1:
        return fabric.rtsw_name(rack)
    p, r = divmod(rack, fabric.racks_per_pod)
    return fabric.rack_name(rack) or f"rack-p{p}-r{r}"


def _pods(fabric: Fabric) -> dict[int, list[int]]:
    """pod -> its racks (of `_racks`), pods without one left out."""
    out: dict[int, list[int]] = {}
    for r in _racks(fabric):
        out.setdefault(int(fabric.pod_of_rack(r)), []).append(r)
    return out


def _rack_hosts(fabric: Fabric, rack: int) -> str:
    return hostlist_of(fabric.host_name(h) for h in _hosts_of_rack(fabric, rack))


# What Slurm reads as syntax in a name: hostlist brackets and separators, key=value, blanks
# and comments. A name holding one would be read as other names (gpu[7] as gpu7).
_SLURM_SYNTAX = re.compile(r"[\[\],=#\s]")


def _check_slurm_names(fabric: Fabric) -> None:
    """Refuse (FabricError, naming them) host, rack, switch and pod names Slurm would read
    as other names: rewriting one would export a host as another host."""
    names = [(kind, name) for rack in _racks(fabric) for kind, name in (
        *(("host", fabric.host_name(h)) for h in _hosts_of_rack(fabric, rack)),
        ("rack switch", _rack_switch(fabric, rack)), ("rack block", _rack_block(fabric, rack)))]
    names += [("pod", _pod_name(fabric, p)) for p in _pods(fabric)]
    bad = sorted({f"{kind} {name!r}" for kind, name in names if _SLURM_SYNTAX.search(name)})
    if bad:
        raise FabricError("names the Slurm exports cannot use (Slurm reads '[', ']', ',', '=', "
                          "'#' and blanks in them as syntax: gpu[7] as gpu7):\n  "
                          + validation.report(bad))  # fmt: skip


def slurm_conf(fabric: Fabric) -> str:
    """topology.conf for the tree plugin: rack switches, pod switches, one top switch."""
    _check_slurm_names(fabric)
    lines = [f"# Slurm topology.conf (tree) for fabric {fabric.name}, by fabric-te"]
    for rack in _racks(fabric):
        lines.append(f"SwitchName={_rack_switch(fabric, rack)} Nodes={_rack_hosts(fabric, rack)}")
    pods = _pods(fabric)
    for p, racks in pods.items():
        lines.append(f"SwitchName={_pod_name(fabric, p)} "
                     f"Switches={hostlist_of(_rack_switch(fabric, r) for r in racks)}")  # fmt: skip
    if len(pods) > 1:
        lines.append(f"SwitchName=cluster Switches={_pods_switch(fabric, pods)}")
    return "\n".join(lines) + "\n"


def slurm_block_conf(fabric: Fabric) -> str:
    """topology.conf for the block plugin (Slurm 23.11+): a base block per rack."""
    _check_slurm_names(fabric)
    lines = [f"# Slurm topology.conf (block) for fabric {fabric.name}, by fabric-te"]
    for rack in _racks(fabric):
        lines.append(f"BlockName={_rack_block(fabric, rack)} Nodes={_rack_hosts(fabric, rack)}")
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
    _check_slurm_names(fabric)
    racks, pods = _racks(fabric), _pods(fabric)
    switches: list[dict[str, Any]] = [
        {"switch": _rack_switch(fabric, r), "nodes": _rack_hosts(fabric, r)} for r in racks
    ]
    switches += [
        {"switch": _pod_name(fabric, p),
         "children": hostlist_of(_rack_switch(fabric, r) for r in members)}
        for p, members in pods.items()
    ]
    if len(pods) > 1:
        switches.append({"switch": "cluster", "children": _pods_switch(fabric, pods)})
    blocks = [{"block": _rack_block(fabric, r), "nodes": _rack_hosts(fabric, r)} for r in racks]
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


def _label_value(text: str) -> str:
    """`text` as a label value (at most 63 of letters, digits, '-', '_', '.'; alphanumeric
    at both ends)."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", out)


def k8s_labels(fabric: Fabric) -> dict[str, dict[str, str]]:
    """Node name (`node_names`) -> the labels fabric-te puts on it (fabric, pod, rack, host:
    fabric-te.io/* only; kubernetes.io/hostname is the kubelet's); the host label's value is
    the host's name as it is."""
    out = {}
    nodes = node_names(fabric, labelled=True)
    fabric_value = _label_value(k8s_name(fabric.name))
    for rack in _racks(fabric):
        pod = int(fabric.pod_of_rack(rack))
        pod_value, rack_value = _pod_label(fabric, pod), _rack_label(fabric, rack)
        for host in _hosts_of_rack(fabric, rack):
            out[nodes[host]] = {FABRIC_LABEL: fabric_value, POD_LABEL: pod_value,
                                RACK_LABEL: rack_value, FABRIC_HOST_LABEL: fabric.host_name(host)}
    return out


def node_names(fabric: Fabric, *, labelled: bool = False) -> dict[int, str]:
    """Host id -> its Kubernetes Node name, for every host the exports list: the host's name
    lower-cased, as the kubelet registers it. Refuses (FabricError, naming the hosts) a name
    that is no RFC 1123 subdomain, two hosts on one Node and, when `labelled` (the name is
    then also the fabric-te.io/host label's value), a name over 63 characters: rewriting or
    cutting one would export a host as another host's node, or as a node no cluster has."""
    nodes: dict[int, str] = {}
    owner: dict[str, str] = {}  # Node name -> the first host on it
    problems = []
    for rack in _racks(fabric):
        for host in _hosts_of_rack(fabric, rack):
            name = fabric.host_name(host)
            if len(name) > MAX_OBJECT_NAME or not _SUBDOMAIN.fullmatch(name):
                problems.append(f"host {name!r} is not a Node name (an RFC 1123 subdomain: at "
                                f"most {MAX_OBJECT_NAME} characters, dot-separated parts of "
                                "a-z 0-9 '-', a letter or digit at both ends of each)")
                continue
            if labelled and len(name) > MAX_LABEL_VALUE:
                problems.append(f"host {name!r} has {len(name)} characters; the "
                                f"{FABRIC_HOST_LABEL} label value takes at most "
                                f"{MAX_LABEL_VALUE}")  # fmt: skip
            node = nodes[host] = name.lower()
            first = owner.setdefault(node, name)
            if first != name:
                problems.append(f"hosts {first!r} and {name!r} are both Node {node!r} (the "
                                "kubelet lower-cases host names)")  # fmt: skip
    if problems:
        raise FabricError("host names the Kubernetes exports cannot use:\n  "
                          + validation.report(problems))  # fmt: skip
    return nodes


def k8s_name(name: str) -> str:
    """`name` as a Kubernetes object name (DNS-1123 subdomain: lower case, digits, - and .)."""
    out = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")[:253].strip("-.")
    return out or "fabric"


def kueue(fabric: Fabric) -> str:
    """kubectl-appliable YAML: a Kueue Topology over the labels of `k8s_labels`, the
    ResourceFlavor that uses it, and every host's Node with those labels (a patch)."""
    name = k8s_name(fabric.name)
    docs: list[dict[str, Any]] = [
        {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": name},
         "spec": {"levels": [{"nodeLabel": k} for k in (POD_LABEL, RACK_LABEL, HOST_LABEL)]}},
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name},
         "spec": {"nodeLabels": {FABRIC_LABEL: _label_value(name)}, "topologyName": name}},
    ]  # fmt: skip
    docs += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
             for node, labels in k8s_labels(fabric).items()]  # fmt: skip
    return yaml.safe_dump_all(docs, sort_keys=False)


def volcano(fabric: Fabric) -> str:
    """Volcano HyperNodes, one YAML document each: racks (tier 1), then pods (tier 2)."""
    docs = []
    pods = _pods(fabric)
    nodes = node_names(fabric)
    _check_hypernodes(fabric, pods)
    for rack in _racks(fabric):
        members = [
            {"type": "Node", "selector": {"exactMatch": {"name": nodes[h]}}}
            for h in _hosts_of_rack(fabric, rack)
        ]
        docs.append(_hypernode(_rack_hypernode(fabric, rack), 1, members))
    for p, racks in pods.items():
        members = [
            {"type": "HyperNode", "selector": {"exactMatch": {
                "name": _rack_hypernode(fabric, r)}}}
            for r in racks
        ]  # fmt: skip
        docs.append(_hypernode(_pod_hypernode(fabric, p), 2, members))
    if len(pods) > 1:
        members = [
            {"type": "HyperNode", "selector": {"exactMatch": {"name": _pod_hypernode(fabric, p)}}}
            for p in pods
        ]
        docs.append(_hypernode("cluster", 3, members))
    return yaml.safe_dump_all(docs, sort_keys=False)


def _rack_hypernode(fabric: Fabric, rack: int) -> str:
    """A rack's HyperNode name: the operator's rack name as an object name, else rack-pP-rR."""
    named = fabric.rack_name(rack)
    if named:
        return k8s_name(named)
    p, r = divmod(rack, fabric.racks_per_pod)
    return f"rack-p{p}-r{r}"


def _pod_hypernode(fabric: Fabric, p: int) -> str:
    """A pod's HyperNode name: the operator's pod name as an object name, else pod-pP."""
    named = fabric.pod_name(p)
    return k8s_name(named) if named else f"pod-p{p}"


def _check_hypernodes(fabric: Fabric, pods: dict[int, list[int]]) -> None:
    """Refuse (FabricError, naming them) two racks or pods on one HyperNode name, or one on
    the cluster's, and a name that is no object name: `kubectl apply` would merge the first
    into the second, or reject it. Racks and pods the operator named are the ones at risk
    (`A_1` and `a-1` are both HyperNode `a-1`; a rack named `rack-p0-r1` is an unnamed one's)."""
    owner = {"cluster": "the cluster"} if len(pods) > 1 else {}
    places = [(f"rack {_rack_label(fabric, r)!r}", _rack_hypernode(fabric, r))
              for racks in pods.values() for r in racks]
    places += [(f"pod {_pod_label(fabric, p)!r}", _pod_hypernode(fabric, p)) for p in pods]
    problems = []
    for place, name in places:
        if len(name) > MAX_OBJECT_NAME or not _SUBDOMAIN.fullmatch(name):
            problems.append(f"{place}: HyperNode name {name!r} is not an object name (an RFC "
                            "1123 subdomain)")  # fmt: skip
        first = owner.setdefault(name, place)
        if first != place:
            problems.append(f"{first} and {place} are both HyperNode {name!r}")
    if problems:
        raise FabricError("rack and pod names Volcano cannot use as HyperNodes:\n  "
                          + validation.report(problems))  # fmt: skip


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
    for p, members in _pods(fabric).items():
        racks = []
        for rack in members:
            entry = {"name": _rack_label(fabric, rack), "switch": _rack_switch(fabric, rack),
                     "hosts": [fabric.host_name(h) for h in _hosts_of_rack(fabric, rack)]}
            if fabric.rtsws_per_rack > 1:  # its RTSWs by slot: NIC n of a host on slot n % S
                entry["switches"] = [fabric.rtsw_name(int(t)) for t in fabric.rtsws_of_rack(rack)]
            racks.append(entry)
        pods.append({"name": _pod_name(fabric, p), "racks": racks})
    return to_json({"fabric": fabric.name, "gpus_per_host": fabric.gpus_per_host, "pods": pods})


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
