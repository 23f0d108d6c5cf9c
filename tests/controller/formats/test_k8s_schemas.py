"""Kubernetes exports against the published schemas of the versions they name.

The schemas (k8s_schemas.yaml, beside this file) restate the CRDs of Kueue v0.19.2 and
Volcano v1.15.1 and Kubernetes' label syntax; objects are validated strictly (unknown fields
are errors), and the CRDs' CEL rules are checked by the functions below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from controller.formats.topology import KUEUE_API, VOLCANO_API, export, k8s_name
from controller.model.fabric import Fabric

SCHEMAS = yaml.safe_load((Path(__file__).parent / "k8s_schemas.yaml").read_text())


def validate(doc: Any, key: str) -> None:
    jsonschema.Draft7Validator(SCHEMAS[key]).validate(doc)


def kueue_rules(doc: dict[str, Any]) -> None:
    """Topology v1beta2 CEL: "must be unique"; "the kubernetes.io/hostname label can only be
    used at the lowest level of topology"."""
    labels = [lvl["nodeLabel"] for lvl in doc["spec"]["levels"]]
    assert len(set(labels)) == len(labels), "must be unique"
    if "kubernetes.io/hostname" in labels:
        assert labels[-1] == "kubernetes.io/hostname", "hostname only at the lowest level"


def flavor_rules(doc: dict[str, Any]) -> None:
    """ResourceFlavor v1beta2 CEL: "at least one nodeLabel is required when topology is
    set"."""
    spec = doc["spec"]
    if "topologyName" in spec:
        assert len(spec.get("nodeLabels", {})) >= 1, "at least one nodeLabel"


def volcano_rules(doc: dict[str, Any]) -> None:
    """HyperNode v1alpha1 CEL on every member selector: "Either ExactMatch or RegexMatch or
    LabelMatch must be specified" and "Only one of ... can be specified"."""
    for member in doc["spec"]["members"]:
        given = [k for k in ("exactMatch", "regexMatch", "labelMatch") if k in member["selector"]]
        assert len(given) == 1, f"{doc['metadata']['name']}: selector {member['selector']}"


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_kueue_topology_is_valid_v1beta2(preset: str, request: pytest.FixtureRequest) -> None:
    fabric: Fabric = request.getfixturevalue(preset)
    check_kueue(fabric)


def check_kueue(fabric: Fabric) -> None:
    """The Topology, the ResourceFlavor and every Node patch of the kueue export are valid,
    and the flavor and the levels select what the nodes carry."""
    doc, flavor, *nodes = yaml.safe_load_all(export(fabric, "kueue"))
    assert doc["apiVersion"] == KUEUE_API == "kueue.x-k8s.io/v1beta2"
    validate(doc, "kueue.x-k8s.io/v1beta2/Topology")
    kueue_rules(doc)
    validate(flavor, "kueue.x-k8s.io/v1beta2/ResourceFlavor")
    flavor_rules(flavor)
    assert flavor["spec"]["topologyName"] == doc["metadata"]["name"]
    labels = json.loads(export(fabric, "k8s-labels"))
    assert [n["metadata"]["name"] for n in nodes] == list(labels)
    levels = {lvl["nodeLabel"] for lvl in doc["spec"]["levels"]} - {"kubernetes.io/hostname"}
    for node in nodes:  # every level but the kubelet's hostname is a label each node carries
        validate(node, "v1/Node")
        node_labels = node["metadata"]["labels"]
        assert "kubernetes.io/hostname" not in node_labels
        assert levels <= set(node_labels)
        assert flavor["spec"]["nodeLabels"].items() <= node_labels.items()


def test_volcano_hypernodes_are_valid_and_closed(small: Fabric) -> None:
    docs = list(yaml.safe_load_all(export(small, "volcano")))
    names = {d["metadata"]["name"] for d in docs}
    nodes = set(json.loads(export(small, "k8s-labels")))
    assert len(names) == len(docs)
    for doc in docs:
        assert doc["apiVersion"] == VOLCANO_API
        validate(doc, "topology.volcano.sh/v1alpha1/HyperNode")
        volcano_rules(doc)
        for m in doc["spec"]["members"]:  # every member names an object that exists
            target = m["selector"]["exactMatch"]["name"]
            assert target in (names if m["type"] == "HyperNode" else nodes)


def test_node_labels_follow_kubernetes_label_syntax(small: Fabric) -> None:
    labels = json.loads(export(small, "k8s-labels"))
    assert len(labels) == small.num_hosts
    for node, node_labels in labels.items():
        jsonschema.Draft7Validator(SCHEMAS["definitions"]["dns1123_subdomain"]).validate(node)
        validate(node_labels, "node-labels")


def test_the_schemas_reject_what_a_cluster_rejects(tiny: Fabric) -> None:
    doc = next(yaml.safe_load_all(export(tiny, "kueue")))
    old = dict(doc, apiVersion="kueue.x-k8s.io/v1alpha1")  # removed from Kueue
    with pytest.raises(jsonschema.ValidationError):
        validate(old, "kueue.x-k8s.io/v1beta2/Topology")
    extra = json.loads(json.dumps(doc))
    extra["spec"]["levels"][0]["weight"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate(extra, "kueue.x-k8s.io/v1beta2/Topology")
    swapped = json.loads(json.dumps(doc))
    swapped["spec"]["levels"].reverse()
    with pytest.raises(AssertionError):
        kueue_rules(swapped)
    with pytest.raises(jsonschema.ValidationError):
        validate({"fabric-te.io/rack": "p0 r0"}, "node-labels")


def test_object_names_are_made_valid() -> None:
    assert k8s_name("DC1_Cluster 3") == "dc1-cluster-3"
    assert k8s_name("meta-24k") == "meta-24k"
    assert k8s_name("__") == "fabric"


def test_an_inventorys_exports_are_valid() -> None:
    """A cable-list fabric: the Kueue objects, Volcano HyperNodes and node labels of its own
    host names pass the same schemas."""
    from controller.formats.fabric_file import load_fabric

    fabric = load_fabric(str(Path(__file__).parents[3] / "docs" / "examples" / "tiny-cables.yaml"))
    check_kueue(fabric)
    nodes = set(json.loads(export(fabric, "k8s-labels")))
    assert "gpu-a00" in nodes
    for doc in yaml.safe_load_all(export(fabric, "volcano")):
        validate(doc, "topology.volcano.sh/v1alpha1/HyperNode")
        volcano_rules(doc)
        for m in doc["spec"]["members"]:
            if m["type"] == "Node":
                assert m["selector"]["exactMatch"]["name"] in nodes


def test_a_named_inventorys_exports_are_valid(named_tiny: Fabric) -> None:
    """The operator's pod and rack names pass the label and object-name schemas, and the
    HyperNodes they name are closed."""
    check_kueue(named_tiny)
    labels = json.loads(export(named_tiny, "k8s-labels"))
    for node_labels in labels.values():
        validate(node_labels, "node-labels")
    assert {v["fabric-te.io/rack"] for v in labels.values()} == {"A01", "A02", "B01", "B02"}
    docs = list(yaml.safe_load_all(export(named_tiny, "volcano")))
    names = {d["metadata"]["name"] for d in docs}
    assert len(names) == len(docs)
    for doc in docs:
        validate(doc, "topology.volcano.sh/v1alpha1/HyperNode")
        volcano_rules(doc)
        for m in doc["spec"]["members"]:
            target = m["selector"]["exactMatch"]["name"]
            assert target in (names if m["type"] == "HyperNode" else labels)
