"""PCI id knowledge in one place: pci.ids names, sandbox resource names, GFD products.

A guard sees the same GPU under several spellings: ``10de:2b85`` in KubeVirt's
``pciVendorSelector`` and in NFD, ``nvidia.com/GB202_GEFORCE_RTX_5090`` in a node's
allocatable (NVIDIA's sandbox device plugin, vm-passthrough mode) and
``NVIDIA-GeForce-RTX-5090`` in GFD's ``nvidia.com/gpu.product`` label (container mode).
All of them are tied together by the pci.ids database, so this module owns it.

Pure: no I/O except reading the committed data files once (:func:`database`); no clock, no
machine facts.  The machine's own pci.ids, when there is one, reaches :func:`database` as text
from the edge (``webhook.state.pciids``, the one place that looks for it).  Every lookup is a
dict hit on indexes built once at construction (admission hot path).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from policies.resources import NVIDIA_DOMAIN

NVIDIA_VENDOR = "10de"
#: How NFD spells a PCI device in a node label: ``pci-<class>_<vendor>_<device>.present`` and
#: shorter field sets (deviceLabelFields), e.g. ``pci-0300_10de.present``.
NFD_LABEL_PREFIX = "feature.node.kubernetes.io/pci-"
NOT_IN_PCI_IDS = "(not in pci.ids)"
NOT_NVIDIA = "not an NVIDIA device"

DATA_DIR = Path(__file__).resolve().parent / "data"
NVIDIA_SNAPSHOT = DATA_DIR / "pci.ids.nvidia"
SUPPLEMENT = DATA_DIR / "pci-ids-supplement.txt"

_HEX4 = re.compile(r"[0-9a-f]{4}")
_SELECTOR = re.compile(r"\s*([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\s*")
_ID_FIELD = re.compile(r"[0-9a-fA-F]{4}")

# Sandbox device plugin naming, from NVIDIA/kubevirt-gpu-device-plugin
# pkg/device_plugin/device_plugin.go getDeviceName() (same in every version read, 2019 to
# the current one with iommufd/EGM support):
#     deviceName = strings.TrimSpace(strings.TrimPrefix(line, "\t"+deviceID))
#     deviceName = strings.ToUpper(deviceName)
#     deviceName = strings.Replace(deviceName, "/", "_", -1)
#     deviceName = strings.Replace(deviceName, ".", "_", -1)
#     deviceName = regexp.MustCompile(`\s+`).ReplaceAllString(deviceName, "_")
#     deviceName = regexp.MustCompile(`[^a-zA-Z0-9_.]+`).ReplaceAllString(deviceName, "")
# and createDevicePlugins(): an empty result falls back to the raw device id; the resource
# is "nvidia.com/" + name (generic_device_plugin.go Register(), DeviceNamespace).  So
# brackets are dropped, a whitespace run becomes one "_", but underscores are never
# collapsed: the plugin's own test expects "gk104.gl [grid/k./520]" -> GK104_GL_GRID_K__520.
# The name is looked up under vendor 10de only, in the pci.ids bundled in the plugin image.
_GO_WHITESPACE_RUN = re.compile(r"[\t\n\f\r ]+")  # RE2's \s is ASCII [\t\n\f\r ]
_NOT_RESOURCE_CHAR = re.compile(r"[^a-zA-Z0-9_.]+")

# GFD product label: NVML's device name with " " -> "-", then "-MIG-<profile>" for MIG
# devices and "-SHARED" when time-sliced without rename
# (NVIDIA/k8s-device-plugin internal/lm/resource.go productLabel()).
_GFD_SHARED = re.compile(r"-SHARED$", re.IGNORECASE)
_GFD_MIG = re.compile(r"-MIG-.*$", re.IGNORECASE)
_NON_ALNUM = re.compile(r"[^0-9a-z]+")
_BRACKETED = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True, order=True)
class PciId:
    """A PCI vendor:device pair, both 4 lowercase hex digits (use parse_pci_id for input)."""

    vendor: str
    device: str

    def __post_init__(self) -> None:
        # A non-canonical id would silently miss every index, so refuse it loudly.
        if not (_HEX4.fullmatch(self.vendor) and _HEX4.fullmatch(self.device)):
            raise ValueError(
                f"PciId wants 4 lowercase hex digits each: {self.vendor!r}:{self.device!r}"
            )

    def __str__(self) -> str:
        return f"{self.vendor}:{self.device}"


def parse_pci_id(text: str) -> PciId | None:
    """``"10DE:2B85"`` or ``" 10de:2b85 "`` -> PciId; anything malformed -> None.

    KubeVirt documents pciVendorSelector as case-insensitive hex, so case and surrounding
    whitespace are forgiven; nothing else is (no 0x, no short ids).
    """
    if not isinstance(text, str):
        return None
    match = _SELECTOR.fullmatch(text)
    if match is None:
        return None
    return PciId(match.group(1).lower(), match.group(2).lower())


def sandbox_name(device_name: str) -> str:
    """The sandbox plugin's name part for a pci.ids device name ("" if nothing survives)."""
    name = device_name.strip()
    # Go's ToUpper maps rune by rune (no "ß" -> "SS"); only ASCII survives the filter anyway.
    name = "".join(u if len(u := c.upper()) == 1 else c for c in name)
    name = name.replace("/", "_").replace(".", "_")
    name = _GO_WHITESPACE_RUN.sub("_", name)
    return _NOT_RESOURCE_CHAR.sub("", name)


def _product_tokens(name: str) -> tuple[str, ...]:
    """Lower-case alphanumeric runs, without a leading "nvidia" (NVML adds it, pci.ids doesn't)."""
    tokens = tuple(t for t in _NON_ALNUM.split(name.lower()) if t)
    if tokens[:1] == ("nvidia",):
        tokens = tokens[1:]
    return tokens


def _marketing_name(device_name: str) -> str:
    """The bracketed part of a pci.ids name ("GB202 [GeForce RTX 5090]"), else the whole name."""
    match = _BRACKETED.search(device_name)
    return match.group(1) if match else device_name


def _parse(
    text: str, device_vendors: frozenset[str] | None
) -> tuple[dict[str, str], dict[PciId, str]]:
    """Vendor names and device names from pci.ids text; first line wins within one text.

    ``device_vendors`` limits which vendors' device lines are kept (None: all), so the
    1.3 MB system file costs one pass and a few thousand dict entries.
    """
    vendors: dict[str, str] = {}
    devices: dict[PciId, str] = {}
    collecting: str | None = None  # vendor whose device lines we are reading, if any
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if line[0] == "\t":
            if collecting is None or line[1:2] == "\t" or not _ID_FIELD.match(line, 1):
                continue  # other vendor, subsystem line, or junk
            if line[5:6] in (" ", "\t"):
                devices.setdefault(PciId(collecting, line[1:5].lower()), line[5:].strip())
        elif _ID_FIELD.match(line) and line[4:5] in (" ", "\t"):
            vendor = line[:4].lower()
            vendors.setdefault(vendor, line[5:].strip())
            keep = device_vendors is None or vendor in device_vendors
            collecting = vendor if keep else None
        else:
            collecting = None  # "C xx" device-class section or junk: its \t lines are not devices
    return vendors, devices


class PciDatabase:
    """Names for PCI ids and the reverse indexes the guard needs, built once."""

    def __init__(
        self,
        vendors: Mapping[str, str],
        devices: Mapping[PciId, str],
        other_names: Mapping[PciId, Sequence[str]] | None = None,
        other_vendors: Callable[[], Mapping[PciId, str]] | None = None,
    ) -> None:
        """``devices`` gives each id's name; ``other_names`` extra spellings for reverse lookups;
        ``other_vendors`` loads names of other vendors' devices, for messages only, on first use
        (:func:`database` passes one for a system pci.ids: ours keep only NVIDIA's devices)."""
        self._vendors = dict(vendors)
        self._devices = dict(devices)
        self._other_vendors = other_vendors
        self._resource_by_id: dict[PciId, str] = {}
        by_resource: dict[str, set[PciId]] = {}
        by_product: dict[str, set[PciId]] = {}
        by_product_tokens: dict[tuple[str, ...], set[PciId]] = {}
        extra = other_names or {}
        for pci in self._devices.keys() | extra.keys():
            names = [self._devices[pci]] if pci in self._devices else []
            names += [n for n in extra.get(pci, ()) if n not in names]
            if pci in self._devices:
                self._resource_by_id[pci] = NVIDIA_DOMAIN + (sandbox_name(names[0]) or pci.device)
            if pci.vendor != NVIDIA_VENDOR:
                continue  # the sandbox plugin and GFD only ever name NVIDIA devices
            for name in names:
                by_resource.setdefault(sandbox_name(name) or pci.device, set()).add(pci)
                tokens = _product_tokens(_marketing_name(name))
                if tokens:
                    by_product.setdefault("".join(tokens), set()).add(pci)
                    by_product_tokens.setdefault(tuple(sorted(tokens)), set()).add(pci)
        self._ids_by_resource = {k: frozenset(v) for k, v in by_resource.items()}
        self._ids_by_product = {k: frozenset(v) for k, v in by_product.items()}
        self._ids_by_product_tokens = {k: frozenset(v) for k, v in by_product_tokens.items()}

    @classmethod
    def from_texts(cls, *texts: str) -> PciDatabase:
        """Database from pci.ids texts: earlier texts win per id, later ones fill gaps."""
        return cls._from_parsed(_parse(text, None) for text in texts)

    @classmethod
    def _from_parsed(
        cls,
        parsed: Iterable[tuple[dict[str, str], dict[PciId, str]]],
        other_vendors: Callable[[], Mapping[PciId, str]] | None = None,
    ) -> PciDatabase:
        vendors: dict[str, str] = {}
        devices: dict[PciId, str] = {}
        other_names: dict[PciId, list[str]] = {}
        for text_vendors, text_devices in parsed:
            for vendor, name in text_vendors.items():
                vendors.setdefault(vendor, name)
            for pci, name in text_devices.items():
                winner = devices.setdefault(pci, name)
                if name != winner and name not in other_names.setdefault(pci, []):
                    other_names[pci].append(name)
        return cls(vendors, devices, other_names, other_vendors)

    def vendor_name(self, vendor: str) -> str | None:
        """``"10de"`` -> ``"NVIDIA Corporation"``; None when unknown."""
        return self._vendors.get(vendor.strip().lower())

    def device_name(self, pci: PciId) -> str | None:
        """``10de:2b85`` -> ``"GB202 [GeForce RTX 5090]"``; None when unknown."""
        return self._devices.get(pci)

    def describe(self, pci: PciId) -> str:
        """Id plus name for messages: ``"10de:2b85 GB202 [GeForce RTX 5090]"``.

        Another vendor's id is said to be one (our pci.ids keeps only NVIDIA's devices, so
        "not in pci.ids" would be false): ``"8086:6f54 (Intel Corporation, not an NVIDIA
        device)"``, with its name first when the system pci.ids has one.
        """
        name = self._devices.get(pci)
        if name is not None:
            return f"{pci} {name}"
        if pci.vendor == NVIDIA_VENDOR:
            return f"{pci} {NOT_IN_PCI_IDS}"
        system_name = self._other_vendors().get(pci) if self._other_vendors else None
        if system_name is not None:
            return f"{pci} {system_name} ({NOT_NVIDIA})"
        vendor = self._vendors.get(pci.vendor)
        return f"{pci} ({vendor}, {NOT_NVIDIA})" if vendor else f"{pci} ({NOT_NVIDIA})"

    def sandbox_resource_name(self, pci: PciId) -> str:
        """The resource the sandbox device plugin registers for this id.

        ``nvidia.com/GB202_GEFORCE_RTX_5090``; the raw device id (``nvidia.com/2b85``) when
        the id has no name.  The plugin only serves vendor 10de; for other vendors this is
        just the same rule applied to their name.
        """
        found = self._resource_by_id.get(pci)
        return found if found is not None else NVIDIA_DOMAIN + pci.device

    def ids_for_resource_name(self, resource: str) -> frozenset[PciId]:
        """NVIDIA ids a sandbox resource name can stand for; empty when none.

        Exact, case-sensitive match on the part after ``nvidia.com/`` (kubelet resource
        names are case-sensitive, so ``TU104GL_Tesla_T4`` matches nothing).  Every spelling
        any source gives an id counts, and a 4-lowercase-hex name always means that raw
        device id: the plugin names from the pci.ids in its own image, which may be older
        or newer than ours.
        """
        if not resource.startswith(NVIDIA_DOMAIN):
            return frozenset()
        name = resource[len(NVIDIA_DOMAIN) :]
        found = self._ids_by_resource.get(name, frozenset())
        if _HEX4.fullmatch(name):
            return found | {PciId(NVIDIA_VENDOR, name)}
        return found

    def ids_for_gfd_product(self, product: str) -> frozenset[PciId]:
        """NVIDIA ids a GFD ``nvidia.com/gpu.product`` value can stand for; empty when none.

        ``-SHARED`` and ``-MIG-<profile>`` suffixes are ignored; the rest is compared with the
        bracketed marketing name (whole name without brackets), ignoring case, non-alphanumerics
        and a leading "NVIDIA".  When that finds nothing, the same words in any order count
        (NVML says "A100 80GB PCIe" where pci.ids says "A100 PCIe 80GB").  NVML names that
        differ in words ("H100 80GB HBM3" vs "H100 SXM5 80GB") stay unknown.
        """
        base = _GFD_MIG.sub("", _GFD_SHARED.sub("", product.strip()))
        tokens = _product_tokens(base)
        if not tokens:
            return frozenset()
        found = self._ids_by_product.get("".join(tokens))
        if found is not None:
            return found
        return self._ids_by_product_tokens.get(tuple(sorted(tokens)), frozenset())


@functools.cache
def _committed() -> tuple[tuple[dict[str, str], dict[PciId, str]], ...]:
    """pci.ids.nvidia, then the supplement, parsed once. They are required: a broken install
    should fail loudly."""
    return tuple(_parse(p.read_text(encoding="utf-8"), None) for p in (NVIDIA_SNAPSHOT, SUPPLEMENT))


def other_vendors_devices(text: str) -> dict[PciId, str]:
    """Other vendors' device names in a pci.ids text (no NVIDIA, subsystem or class lines)."""
    return {pci: name for pci, name in _parse(text, None)[1].items() if pci.vendor != NVIDIA_VENDOR}


def database(system_text: str | None = None) -> PciDatabase:
    """A system pci.ids text (when the edge found one) first, then the committed files.

    The system file usually is newer than our snapshot; only its vendor names and NVIDIA
    devices are indexed, other vendors' names are parsed when a message first needs one (~0.1 s
    for the whole file), so admission of pods and VMs never pays for it.
    """
    if system_text is None:
        return PciDatabase._from_parsed(_committed())
    system = _parse(system_text, frozenset({NVIDIA_VENDOR}))
    others = functools.cache(functools.partial(other_vendors_devices, system_text))
    return PciDatabase._from_parsed((system, *_committed()), others)


@functools.cache
def bundled_database() -> PciDatabase:
    """The committed files alone, the same on every machine: what a caller without the edge's
    database (``pci_from_nfd_label``'s vendor names) falls back to."""
    return database(None)
