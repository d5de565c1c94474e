"""What PCI hardware a node has, from every source a guard can see (docs/field-guide.md 2).

Sources: NFD device-level labels, NFD NodeFeature pci.device attributes, GFD's gpu.product label,
sandbox-device-plugin resource names in allocatable, and the devices NVIDIA's DRA driver publishes
in ResourceSlices (docs/dra.md); allocatable and product names map back through pci.ids.
Hardware does not vanish with kubelet, so stale values on a dead node (its labels, allocatable,
and the slices its kubelet plugin can no longer remove) still count as hardware.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from policies.dra import NVIDIA_DRIVER, DeviceInfo, PublishedDevice, qualified
from policies.objects import NodeFeatureInfo, NodeInfo
from policies.pciids import NFD_LABEL_PREFIX, PciDatabase, PciId, bundled_database
from policies.resources import is_container_gpu_resource, is_nvidia_resource
from policies.workload import GPU_PRODUCT_LABEL

_NFD_FIELDS = re.compile(rf"^{re.escape(NFD_LABEL_PREFIX)}([0-9a-f_]+)\.present$")
_HEX4 = re.compile(r"^[0-9a-f]{4}$")
#: How NVIDIA's DRA driver spells vendorID/deviceID: "0x%04x" (nvlib.go getVfioDeviceInfo).
_DRA_PCI_FIELD = re.compile(r"^(?:0x)?([0-9a-f]{4})$")

SOURCE_NFD_LABEL = "NFD label"
SOURCE_NODE_FEATURE = "NFD NodeFeature"
SOURCE_GFD = "GFD gpu.product"
SOURCE_ALLOCATABLE = "allocatable"
SOURCE_DRA = "DRA ResourceSlice"

Hardware = dict[PciId, set[str]]

#: NVIDIA PCI functions that are not GPUs (a GPU's HDMI audio, USB-C controller, NVSwitch, ...).
_NOT_A_GPU = re.compile(r"audio|usb|ucsi|serial bus|nvswitch|smbus|bridge", re.IGNORECASE)


def is_gpu_function(pci: PciId, db: PciDatabase) -> bool:
    """Whether a PCI function is a GPU rather than one of its companions, by its pci.ids name
    (NodeFeature keeps no class here); unknown ids count as GPUs."""
    name = db.device_name(pci)
    return name is None or not _NOT_A_GPU.search(name)


def _is_class_code(field: str) -> bool:
    """PCI base classes are 0x00-0x13 (and 0xff); taken alone this also fits vendor 10de."""
    base = int(field[:2], 16)
    return base <= 0x13 or base == 0xFF


def pci_from_nfd_label(label: str, db: PciDatabase | None = None) -> PciId | None:
    """The vendor:device in an NFD label, when deviceLabelFields include the device.

    ``pci-0300_10de_2b85`` (class, vendor, device) and ``pci-10de_2b85`` (vendor, device) name a
    device; ``pci-0300_10de`` (class, vendor) and ``pci-10de`` (vendor) do not. Two fields are
    (class, vendor) only when the first can be a class code and the second is a known vendor:
    10de alone could be class 0x10, so the shape of one field cannot decide.
    """
    match = _NFD_FIELDS.match(label)
    if match is None:
        return None
    fields = match.group(1).split("_")
    if not all(_HEX4.match(f) for f in fields):
        return None
    if len(fields) == 3:
        return PciId(fields[1], fields[2])
    if len(fields) == 2:
        vendors = db if db is not None else bundled_database()
        if _is_class_code(fields[0]) and vendors.vendor_name(fields[1]) is not None:
            return None
        return PciId(fields[0], fields[1])
    return None


def _add(hardware: Hardware, ids: Iterable[PciId], source: str) -> None:
    for pci in ids:
        hardware.setdefault(pci, set()).add(source)


def node_hardware(node: NodeInfo, db: PciDatabase) -> Hardware:
    hardware: Hardware = {}
    for label, value in node.labels.items():
        if label.startswith(NFD_LABEL_PREFIX) and value == "true":
            pci = pci_from_nfd_label(label, db)
            if pci is not None:
                _add(hardware, [pci], SOURCE_NFD_LABEL)
    product = node.labels.get(GPU_PRODUCT_LABEL)
    if product:
        _add(hardware, db.ids_for_gfd_product(product), SOURCE_GFD)
    for resource, count in node.allocatable.items():
        if count > 0 and is_nvidia_resource(resource) and not is_container_gpu_resource(resource):
            _add(hardware, db.ids_for_resource_name(resource), SOURCE_ALLOCATABLE)
    return hardware


def node_feature_hardware(feature: NodeFeatureInfo) -> Hardware:
    hardware: Hardware = {}
    _add(hardware, feature.pci_devices, SOURCE_NODE_FEATURE)
    return hardware


#: The attributes NVIDIA's driver names a device by, fully qualified (its own domain).
_VENDOR_ID, _DEVICE_ID, _PRODUCT_NAME = (
    qualified(name, NVIDIA_DRIVER) for name in ("vendorID", "deviceID", "productName")
)


def _hex_field(value: object) -> str | None:
    match = _DRA_PCI_FIELD.match(value.strip().lower()) if isinstance(value, str) else None
    return match.group(1) if match is not None else None


def _exact_id(device: DeviceInfo) -> PciId | None:
    """vendorID/deviceID, as NVIDIA's driver publishes them for vfio devices."""
    vendor = _hex_field(device.attributes.get(_VENDOR_ID))
    device_id = _hex_field(device.attributes.get(_DEVICE_ID)) if vendor is not None else None
    return PciId(vendor, device_id) if vendor is not None and device_id is not None else None


def _named_ids(device: DeviceInfo, db: PciDatabase) -> frozenset[PciId]:
    product = device.attributes.get(_PRODUCT_NAME)
    return _product_ids(db, product) if isinstance(product, str) else frozenset()


@functools.lru_cache(maxsize=1024)
def _product_ids(db: PciDatabase, product: str) -> frozenset[PciId]:
    """A cluster has a handful of GPU models and thousands of devices of each: name them once."""
    return db.ids_for_gfd_product(product)


def dra_device_ids(device: DeviceInfo, db: PciDatabase) -> frozenset[PciId]:
    """The PCI ids a device of NVIDIA's DRA driver stands for: its vendorID/deviceID (vfio
    devices), else its productName mapped through pci.ids as GFD's gpu.product is (NVML names
    both). Other drivers' attributes are not known here: none."""
    if device.driver != NVIDIA_DRIVER:
        return frozenset()
    exact = _exact_id(device)
    return frozenset({exact}) if exact is not None else _named_ids(device, db)


def published_hardware(devices: Iterable[PublishedDevice], db: PciDatabase) -> Hardware:
    """What one node's published devices show. One GPU published twice (``gpu-0`` and
    ``gpu-vfio-0``, or a MIG device of it, share its PCI bus id) is named by the exact id where
    one of them carries it, not by every id its product name could mean."""
    exact: dict[str, set[PciId]] = {}
    named: dict[str, set[PciId]] = {}
    for published in devices:
        device = published.device
        if device.driver != NVIDIA_DRIVER:
            continue
        bus = device.pci_bus_id or str(published.id)
        pci = _exact_id(device)
        if pci is not None:
            exact.setdefault(bus, set()).add(pci)
        else:
            named.setdefault(bus, set()).update(_named_ids(device, db))
    hardware: Hardware = {}
    for bus, ids in named.items():
        if bus not in exact:
            _add(hardware, ids, SOURCE_DRA)
    for ids in exact.values():
        _add(hardware, ids, SOURCE_DRA)
    return hardware
