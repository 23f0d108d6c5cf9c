"""Topology exports parse back and describe exactly the fabric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from controller.formats.topology import FORMATS, export, hostlist
from controller.model.fabric import Fabric


def expand(spec: str) -> list[str]:
    """Inverse of hostlist: 'h[0-2,5]' -> ['h0', 'h1', 'h2', 'h5']."""
    m = re.fullmatch(r"(.*?)\[([0-9,\-]+)\]", spec)
    if not m:
        return [spec]
    out = []
    for part in m.group(2).split(","):
        a, _, b = part.partition("-")
        out += [f"{m.group(1)}{i}" for i in range(int(a), int(b or a) + 1)]
    return out


def test_hostlist_round_trip() -> None:
    assert hostlist("h", [5, 0, 1, 2, 7, 8]) == "h[0-2,5,7-8]"
    assert expand(hostlist("h", [3, 9, 4])) == ["h3", "h4", "h9"]
    assert hostlist("h", [3]) == "h3"


def test_slurm_conf_tree(small: Fabric) -> None:
    parents: dict[str, str] = {}
    for line in export(small, "slurm-conf").splitlines():
        if line.startswith("#"):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split())
        children = fields.get("Nodes") or fields["Switches"]
        for child in expand(children):
            assert child not in parents
            parents[child] = fields["SwitchName"]
    for host in range(small.num_hosts):
        rtsw = parents[small.host_name(host)]
        assert rtsw == small.rtsw_name(small.rack_of_host(host))
        assert parents[rtsw] == f"pod{small.pod_of_rack(small.rack_of_host(host))}"
    assert parents["pod0"] == parents["pod1"] == "cluster"


def test_slurm_yaml_tree_and_blocks(small: Fabric) -> None:
    doc = yaml.safe_load(export(small, "slurm-yaml"))
    tree, block = doc[0]["tree"]["switches"], doc[1]["block"]["blocks"]
    hosts = [h for s in tree if "nodes" in s for h in expand(s["nodes"])]
    assert sorted(hosts) == sorted(small.host_name(h) for h in range(small.num_hosts))
    assert len(block) == small.num_racks
    assert doc[1]["block"]["block_sizes"][0] == small.hosts_per_rack  # the base block: a rack


def test_k8s_kueue_volcano(small: Fabric) -> None:
    labels = json.loads(export(small, "k8s-labels"))
    assert labels["host-p1-r3-h1"] == {
        "fabric-te.io/fabric": "small", "fabric-te.io/pod": "p1", "fabric-te.io/rack": "p1-r3",
        "fabric-te.io/host": "host-p1-r3-h1",
    }  # the kubelet's own kubernetes.io/hostname is never set  # fmt: skip
    kueue = next(yaml.safe_load_all(export(small, "kueue")))
    assert [lvl["nodeLabel"] for lvl in kueue["spec"]["levels"]] == [
        "fabric-te.io/pod", "fabric-te.io/rack", "kubernetes.io/hostname"]  # fmt: skip
    docs = list(yaml.safe_load_all(export(small, "volcano")))
    tiers = [d["spec"]["tier"] for d in docs]
    assert tiers.count(1) == small.num_racks and tiers.count(2) == small.pods
    rack = next(d for d in docs if d["metadata"]["name"] == "rack-p0-r2")
    names = [m["selector"]["exactMatch"]["name"] for m in rack["spec"]["members"]]
    assert names == ["host-p0-r2-h0", "host-p0-r2-h1"]


def test_json_and_unknown_format(small: Fabric) -> None:
    doc = json.loads(export(small, "json"))
    assert sum(len(r["hosts"]) for p in doc["pods"] for r in p["racks"]) == small.num_hosts
    with pytest.raises(ValueError, match="unknown format 'dot'"):
        export(small, "dot")
    assert "json" in FORMATS


def test_slurm_yaml_blocks_are_racks_and_tree_nests(small: Fabric) -> None:
    doc = yaml.safe_load(export(small, "slurm-yaml"))
    assert [t["topology"] for t in doc] == ["tree", "block"]
    blocks = {b["block"]: expand(b["nodes"]) for b in doc[1]["block"]["blocks"]}
    for rack in range(small.num_racks):
        hosts = range(rack * small.hosts_per_rack, (rack + 1) * small.hosts_per_rack)
        assert blocks[small.rtsw_name(rack)] == [small.host_name(h) for h in hosts]
    children = {s["switch"]: expand(s["children"]) for s in doc[0]["tree"]["switches"]
                if "children" in s}  # fmt: skip
    assert children["cluster"] == ["pod0", "pod1"]
    assert children["pod1"] == [f"rtsw-p1-r{r}" for r in range(small.racks_per_pod)]


def test_kueue_and_volcano_objects(tiny: Fabric) -> None:
    kueue, flavor, *nodes = yaml.safe_load_all(export(tiny, "kueue"))
    assert (kueue["apiVersion"], kueue["kind"]) == ("kueue.x-k8s.io/v1beta2", "Topology")
    labels = json.loads(export(tiny, "k8s-labels"))
    assert set(labels) == {tiny.host_name(h) for h in range(tiny.num_hosts)}
    levels = [lvl["nodeLabel"] for lvl in kueue["spec"]["levels"]]
    assert levels[-1] == "kubernetes.io/hostname"  # the kubelet's label, the lowest level
    assert all(level in labels["host-p0-r0-h0"] for level in levels[:-1])
    assert (flavor["kind"], flavor["spec"]["topologyName"]) == ("ResourceFlavor", "tiny")
    assert {(n["kind"], n["metadata"]["name"]) for n in nodes} == {("Node", h) for h in labels}
    for node in nodes:  # the flavor's node labels select every node of the fabric
        assert flavor["spec"]["nodeLabels"].items() <= node["metadata"]["labels"].items()
        assert node["metadata"]["labels"] == labels[node["metadata"]["name"]]
    docs = list(yaml.safe_load_all(export(tiny, "volcano")))
    assert {d["apiVersion"] for d in docs} == {"topology.volcano.sh/v1alpha1"}
    assert {d["kind"] for d in docs} == {"HyperNode"}
    pod1 = next(d for d in docs if d["metadata"]["name"] == "pod-p1")
    assert [m["type"] for m in pod1["spec"]["members"]] == ["HyperNode", "HyperNode"]
    assert [m["selector"]["exactMatch"]["name"] for m in pod1["spec"]["members"]] == [
        "rack-p1-r0", "rack-p1-r1"]  # fmt: skip


def test_slurm_conf_tiny_text(tiny: Fabric) -> None:
    lines = [ln for ln in export(tiny, "slurm-conf").splitlines() if not ln.startswith("#")]
    assert lines == [
        "SwitchName=rtsw-p0-r0 Nodes=host-p0-r0-h[0-1]",
        "SwitchName=rtsw-p0-r1 Nodes=host-p0-r1-h[0-1]",
        "SwitchName=rtsw-p1-r0 Nodes=host-p1-r0-h[0-1]",
        "SwitchName=rtsw-p1-r1 Nodes=host-p1-r1-h[0-1]",
        "SwitchName=pod0 Switches=rtsw-p0-r[0-1]",
        "SwitchName=pod1 Switches=rtsw-p1-r[0-1]",
        "SwitchName=cluster Switches=pod[0-1]",
    ]


def test_slurm_block_levels_stay_inside_pods(small: Fabric) -> None:
    block = yaml.safe_load(export(small, "slurm-yaml"))[1]["block"]
    assert block["block_sizes"] == [2, 4, 8, 16]  # 8 racks of 2 hosts a pod
    hosts = [h for b in block["blocks"] for h in expand(b["nodes"])]
    for size in block["block_sizes"]:
        for start in range(0, len(hosts), size):  # higher levels join consecutive blocks
            pods = {small.host_by_name(h) // (small.racks_per_pod * small.hosts_per_rack)
                    for h in hosts[start : start + size]}  # fmt: skip
            assert len(pods) == 1


def test_volcano_cluster_tier(small: Fabric) -> None:
    docs = list(yaml.safe_load_all(export(small, "volcano")))
    top = [d for d in docs if d["spec"]["tier"] == 3]
    assert [d["metadata"]["name"] for d in top] == ["cluster"]
    names = {d["metadata"]["name"] for d in docs}
    members = [m["selector"]["exactMatch"]["name"] for m in top[0]["spec"]["members"]]
    assert members == ["pod-p0", "pod-p1"] and set(members) <= names


def test_slurm_block_conf_matches_the_yaml_blocks(small: Fabric) -> None:
    lines = [ln for ln in export(small, "slurm-block-conf").splitlines() if ln[:1] != "#"]
    assert lines[-1] == "BlockSizes=2,4,8,16"
    blocks = [dict(kv.split("=", 1) for kv in ln.split()) for ln in lines[:-1]]
    yaml_blocks = yaml.safe_load(export(small, "slurm-yaml"))[1]["block"]["blocks"]
    assert [(b["BlockName"], b["Nodes"]) for b in blocks] == [
        (b["block"], b["nodes"]) for b in yaml_blocks
    ]


def test_slurm_yaml_follows_the_schedmd_schema(small: Fabric) -> None:
    """A list of named topologies; the name first; exactly one of tree/block/flat; at most
    one cluster default; tree switches carry nodes or children; block sizes double."""
    doc = yaml.safe_load(export(small, "slurm-yaml"))
    assert isinstance(doc, list)
    names = [t["topology"] for t in doc]
    assert len(set(names)) == len(names)
    assert sum(bool(t.get("cluster_default")) for t in doc) == 1
    for t in doc:
        assert next(iter(t)) == "topology"
        assert set(t) - {"topology", "cluster_default"} in ({"tree"}, {"block"}, {"flat"})
        if "tree" in t:
            for s in t["tree"]["switches"]:
                assert set(s) in ({"switch", "nodes"}, {"switch", "children"})
        if "block" in t:
            sizes = t["block"]["block_sizes"]
            assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))
            assert all(set(b) == {"block", "nodes"} for b in t["block"]["blocks"])


def test_slurm_versions(tiny: Fabric) -> None:
    from controller.formats.topology import check_slurm_version, parse_slurm_version

    assert parse_slurm_version("slurm-wlm 22.05.8") == (22, 5)
    check_slurm_version("slurm-conf", "22.05")
    check_slurm_version("slurm-block-conf", "23.11.4")
    with pytest.raises(ValueError, match="slurm-block-conf needs Slurm 23.11 or later"):
        check_slurm_version("slurm-block-conf", "22.05.8")
    with pytest.raises(ValueError, match="needs Slurm 25.05"):
        check_slurm_version("slurm-yaml", "24.11")
    with pytest.raises(ValueError, match="expected a version"):
        parse_slurm_version("new")


def test_a_rack_of_several_rtsws_is_one_logical_switch() -> None:
    from controller.model.clos import PRESETS, build

    rail = build(PRESETS["superpod-4su"])
    text = export(rail, "slurm-conf")
    assert "SwitchName=rack-p0-r0 Nodes=host-p0-r0-h[0-31]" in text
    assert "SwitchName=pod0 Switches=rack-p0-r[0-3]" in text
    doc = json.loads(export(rail, "json"))
    rack = doc["pods"][0]["racks"][1]
    assert rack["switch"] == "rack-p0-r1"
    assert rack["switches"] == [f"rtsw-p0-r1-s{s}" for s in range(8)]
    assert len(rack["hosts"]) == 32


def test_a_named_inventorys_exports_carry_its_pod_and_rack_names(named_tiny: Fabric) -> None:
    """Every format names pods and racks as the inventory does (Volcano: as object names)."""
    tree = export(named_tiny, "slurm-conf")
    assert "SwitchName=Hall-A Switches=leaf-a[0-1]" in tree
    assert "SwitchName=cluster Switches=Hall-A,Hall-B" in tree and "pod0" not in tree
    block = export(named_tiny, "slurm-block-conf")
    assert [ln.split()[0] for ln in block.splitlines()[1:-1]] == [
        "BlockName=A01", "BlockName=A02", "BlockName=B01", "BlockName=B02"]
    tree_yaml, block_yaml = yaml.safe_load(export(named_tiny, "slurm-yaml"))
    assert [s["switch"] for s in tree_yaml["tree"]["switches"]][-3:] == [
        "Hall-A", "Hall-B", "cluster"]
    assert [b["block"] for b in block_yaml["block"]["blocks"]] == ["A01", "A02", "B01", "B02"]
    labels = json.loads(export(named_tiny, "k8s-labels"))
    assert labels["gpu-a10"]["fabric-te.io/pod"] == "Hall-A"
    assert labels["gpu-b01"]["fabric-te.io/rack"] == "B01"
    hypernodes = {d["metadata"]["name"]: d for d in yaml.safe_load_all(export(named_tiny,
                                                                               "volcano"))}
    assert set(hypernodes) == {"a01", "a02", "b01", "b02", "hall-a", "hall-b", "cluster"}
    assert [m["selector"]["exactMatch"]["name"] for m in hypernodes["hall-b"]["spec"]["members"]
            ] == ["b01", "b02"]  # fmt: skip
    doc = json.loads(export(named_tiny, "json"))
    assert [(p["name"], [r["name"] for r in p["racks"]]) for p in doc["pods"]] == [
        ("Hall-A", ["A01", "A02"]), ("Hall-B", ["B01", "B02"])]


def test_a_rail_optimized_rack_is_its_rack_name(tmp_path: Path) -> None:
    """With several RTSWs a rack, Slurm's rack switch is the operator's rack name."""
    from controller.formats.fabric_file import load_fabric

    path = tmp_path / "su.yaml"
    path.write_text('preset: superpod-4su\nnames: {rack: "su{rack_id}", pod: "cluster-a"}\n')
    fabric = load_fabric(str(path))
    tree = export(fabric, "slurm-conf")
    assert "SwitchName=su0 Nodes=" in tree and "SwitchName=cluster-a Switches=su[0-3]" in tree


TINY_CABLES = Path(__file__).parents[3] / "docs" / "examples" / "tiny-cables.yaml"
K8S_FORMATS = ("k8s-labels", "kueue", "volcano")  # the formats that name Nodes


def renamed(tmp_path: Path, names: dict[str, str], racks: dict[str, str] | None = None) -> Fabric:
    """docs/examples/tiny-cables.yaml with devices renamed (old -> new) and RTSWs given racks
    (RTSW -> rack name)."""
    from controller.formats.fabric_file import load_fabric

    doc = yaml.safe_load(TINY_CABLES.read_text())
    for device in doc["devices"]:
        device["rack"] = (racks or {}).get(device["name"])
        if device["rack"] is None:
            del device["rack"]
        device["name"] = names.get(device["name"], device["name"])
    for cable in doc["cables"]:
        for end in ("a", "b"):
            cable[end] = names.get(cable[end], cable[end])
    path = tmp_path / "fabric.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return load_fabric(str(path))


def test_two_hosts_on_one_node_are_refused(tmp_path: Path) -> None:
    """The operator's case: GPU-A01 and gpu-a01 are both the kubelet's Node gpu-a01; merged,
    one host's labels and HyperNode membership were the other's."""
    from controller.errors import FabricError

    fabric = renamed(tmp_path, {"gpu-a00": "GPU-A01"})
    for fmt in K8S_FORMATS:
        with pytest.raises(FabricError, match="hosts 'GPU-A01' and 'gpu-a01' are both Node "
                                              "'gpu-a01'"):  # fmt: skip
            export(fabric, fmt)
    conf = export(fabric, "slurm-conf")  # Slurm and json take the names as they are
    assert "SwitchName=leaf-a0 Nodes=GPU-A01,gpu-a01\n" in conf
    assert json.loads(export(fabric, "json"))["pods"][0]["racks"][0]["hosts"] == [
        "GPU-A01", "gpu-a01"]  # fmt: skip


@pytest.mark.parametrize("name", [
    "гпу-a00",  # non-ASCII: was exported as Node 'a00'
    "gpu-\u212a00",  # the Kelvin sign, which lower-cases to an ASCII 'k'
    "gpu_a00", "gpu-a00-", "gpu..a00", "gpu-a00.-x",  # ("gpu a00": no device name at all)
])  # fmt: skip
def test_a_host_name_no_node_can_have_is_refused(tmp_path: Path, name: str) -> None:
    from controller.errors import FabricError

    fabric = renamed(tmp_path, {"gpu-a00": name})
    for fmt in K8S_FORMATS:
        with pytest.raises(FabricError, match=re.escape(f"host {name!r} is not a Node name")):
            export(fabric, fmt)


@pytest.mark.parametrize("names", [{"gpu-a00": "gpu[7]"}, {"leaf-a0": "leaf=2"},
                                   {"gpu-a01": "g,3"}])  # fmt: skip
def test_a_name_slurm_reads_as_syntax_is_refused_by_the_slurm_exports(
    tmp_path: Path, names: dict[str, str]
) -> None:
    """`gpu[7]` came out as `Nodes=gpu[7]`, which Slurm reads as host gpu7, and `leaf=2` as
    `SwitchName=leaf=2`: a topology.conf naming other hosts, written without a word."""
    from controller.errors import FabricError

    fabric = renamed(tmp_path, names)
    (name,) = names.values()
    for fmt in ("slurm-conf", "slurm-block-conf", "slurm-yaml"):
        with pytest.raises(FabricError, match=re.escape(f"{name!r}")):
            export(fabric, fmt)
    assert name in export(fabric, "json")  # json takes names as they are


def test_a_host_label_over_63_characters_is_refused(tmp_path: Path) -> None:
    """Two 71-character names that differ at the end were both cut to one 63-character
    fabric-te.io/host value; as Node names (up to 253) they are fine, so Volcano takes them."""
    from controller.errors import FabricError

    long = "x" * 70
    fabric = renamed(tmp_path, {"gpu-a00": long + "0", "gpu-a01": long + "1"})
    for fmt in ("k8s-labels", "kueue"):
        with pytest.raises(FabricError) as err:
            export(fabric, fmt)
        for name in (long + "0", long + "1"):
            assert f"host {name!r} has 71 characters; the fabric-te.io/host label value takes " \
                   "at most 63" in str(err.value)  # fmt: skip
    rack = next(yaml.safe_load_all(export(fabric, "volcano")))
    assert [m["selector"]["exactMatch"]["name"] for m in rack["spec"]["members"]] == [
        long + "0", long + "1"]  # fmt: skip


def test_valid_names_export_as_before(tmp_path: Path) -> None:
    """Upper case is the one rewrite (the Node is the name lower-cased, as the kubelet
    registers it; the host label keeps the name); dotted names and 63 characters pass as
    they are."""
    top = "a" * 62 + "0"  # 63 characters: the longest label value
    fabric = renamed(tmp_path, {"gpu-a00": "GPU-A00", "gpu-a01": "gpu-a01.dc1.example.com",
                                "gpu-a10": top})  # fmt: skip
    labels = json.loads(export(fabric, "k8s-labels"))
    assert sorted(labels) == sorted(["gpu-a00", "gpu-a01.dc1.example.com", top, "gpu-a11",
                                     "gpu-b00", "gpu-b01", "gpu-b10", "gpu-b11"])  # fmt: skip
    assert labels["gpu-a00"] == {
        "fabric-te.io/fabric": "dc1-tiny", "fabric-te.io/pod": "p0", "fabric-te.io/rack": "p0-r0",
        "fabric-te.io/host": "GPU-A00",
    }  # fmt: skip
    assert labels[top]["fabric-te.io/host"] == top
    nodes = [d for d in yaml.safe_load_all(export(fabric, "kueue")) if d["kind"] == "Node"]
    assert {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes} == labels
    rack = next(yaml.safe_load_all(export(fabric, "volcano")))
    assert [m["selector"]["exactMatch"]["name"] for m in rack["spec"]["members"]] == [
        "gpu-a00", "gpu-a01.dc1.example.com"]  # fmt: skip


@pytest.mark.parametrize(("racks", "message"), [
    ({"leaf-a0": "A_1", "leaf-a1": "a-1"}, "rack 'A_1' and rack 'a-1' are both HyperNode 'a-1'"),
    ({"leaf-a0": "rack-p0-r1"}, "rack 'rack-p0-r1' and rack 'p0-r1' are both HyperNode "
                                "'rack-p0-r1'"),
    ({"leaf-a0": "Cluster"}, "the cluster and rack 'Cluster' are both HyperNode 'cluster'"),
    ({"leaf-a0": "a..1"}, "rack 'a..1': HyperNode name 'a..1' is not an object name"),
])  # fmt: skip
def test_two_racks_on_one_hypernode_are_refused(tmp_path: Path, racks: dict[str, str],
                                                message: str) -> None:  # fmt: skip
    """Rack names the inventory takes as distinct label values can still be one HyperNode
    (lower-cased, '_' as '-') or no object name; `kubectl apply` would merge or reject."""
    from controller.errors import FabricError

    fabric = renamed(tmp_path, {}, racks)
    with pytest.raises(FabricError, match=re.escape(message)):
        export(fabric, "volcano")
    assert json.loads(export(fabric, "k8s-labels"))  # the labels take the names as they are


def test_tectl_prints_the_refusal_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli.main import main

    text = TINY_CABLES.read_text().replace("gpu-a00", "GPU-A01")
    (tmp_path / "case.yaml").write_text(text)
    argv = ["topology", "export", "--fabric", str(tmp_path / "case.yaml"), "--format"]
    for fmt in K8S_FORMATS:
        assert main([*argv, fmt]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "Traceback" not in err
        assert err.startswith("tectl: error: host names the Kubernetes exports cannot use:\n")
        assert "'GPU-A01' and 'gpu-a01'" in err
