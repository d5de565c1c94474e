"""Node Feature Discovery's NodeFeature: the PCI devices it found on a node (``pci.device``
elements), one source of ``policies.cluster.hardware``.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.cluster.pciids import PciId, parse_pci_id
from policies.vocabulary.fields import as_maps, get_list, get_map, get_str, get_string_map
from policies.vocabulary.requests import JSONObject

NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


@dataclass(frozen=True, slots=True)
class NodeFeatureInfo:
    namespace: str
    name: str
    node: str
    pci_devices: tuple[PciId, ...]


def project_node_feature(obj: JSONObject) -> NodeFeatureInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    features = get_map(spec, "features", "spec")
    instances = get_map(features, "instances", "spec.features")
    pci_device = get_map(instances, "pci.device", "spec.features.instances")
    where = "spec.features.instances.pci.device"
    found = []
    for w, element in as_maps(get_list(pci_device, "elements", where), f"{where}.elements"):
        attrs = get_string_map(element, "attributes", w)
        pci = parse_pci_id(f"{attrs.get('vendor', '')}:{attrs.get('device', '')}")
        if pci is not None:
            found.append(pci)
    name = get_str(meta, "name", "metadata")
    return NodeFeatureInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=name,
        node=get_string_map(meta, "labels", "metadata").get(NFD_NODE_NAME_LABEL, name),
        pci_devices=tuple(found),
    )
