"""OpenShift Virtualization's HyperConverged CR (hco.kubevirt.io v1 and v1beta1) as it is, and
HCO's identity: who writes the KubeVirt CR it owns.

HCO owns the KubeVirt CR on such a cluster (docs/openshift.md): it builds it from the
HyperConverged (``NewKubeVirt`` in controllers/handlers/kubevirt.go of
kubevirt/hyperconverged-cluster-operator) and reverts any direct edit. What HCO will write is
``policies.cluster.hco_translation``; this module reads the HyperConverged and knows HCO's
identity.

The HyperConverged's own gates: v1 lists ``{name, state}`` (no state is Enabled); v1beta1 a map
of booleans. An unlisted gate takes HCO's default for its phase (pkg/featuregatedetails).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from policies.cluster.kinds import HCO_VERSIONS, MANAGED_BY_LABEL
from policies.cluster.kubevirt import KubeVirtInfo
from policies.vocabulary.fields import (
    ObjectError,
    as_maps,
    get_bool,
    get_list,
    get_map,
    get_str,
)
from policies.vocabulary.requests import JSONObject, UserInfo

#: The one HyperConverged HCO reconciles in its namespace (pkg/util/consts.go HyperConvergedName;
#: the CRD's name pattern).
HCO_NAME = "kubevirt-hyperconverged"
#: Where HCO runs: OpenShift Virtualization's namespace, and the upstream one.
HCO_NAMESPACES = ("openshift-cnv", "kubevirt-hyperconverged")
#: The ServiceAccount of HCO's operator and webhook deployments (deploy/operator.yaml): the
#: writer of the KubeVirt CR and of the dry-run updates HCO's webhook makes of it.
HCO_SERVICE_ACCOUNT = "hyperconverged-cluster-operator"
#: The name HCO gives the KubeVirt CR it writes, and the labels it puts on it.
HCO_KUBEVIRT_NAME = "kubevirt-kubevirt-hyperconverged"
HCO_LABELS: Mapping[str, str] = MappingProxyType(
    {MANAGED_BY_LABEL: "hco-operator", "app": "kubevirt-hyperconverged"}
)
#: The HyperConverged annotation HCO applies to the KubeVirt CR it writes (controllers/common).
JSONPATCH_ANNOTATION = "kubevirt.kubevirt.io/jsonpatch"

#: Gates HCO always sets (``hardCodeKvFgs``, and HypervStrictCheck unless KVM is emulated).
HCO_MANDATORY_GATES = ("CPUManager", "Snapshot", "HostDevices", "KubevirtSeccompProfile")
HCO_STRICT_CHECK_GATE = "HypervStrictCheck"
#: A HyperConverged gate -> the KubeVirt gates HCO sets while it is on (``getFeatureGateChecks``).
HC_GATE_MAP: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "downwardMetrics": ("DownwardMetrics",),
        "alignCPUs": ("AlignCPUs",),
        "objectGraph": ("ObjectGraph",),
        "decentralizedLiveMigration": ("DecentralizedLiveMigration",),
        "incrementalBackup": ("IncrementalBackup", "UtilityVolumes"),
        "containerPathVolumes": ("ContainerPathVolumes",),
        "template": ("Template",),
    }
)
#: declarativeHotplugVolumes on: DeclarativeHotplugVolumes, off: HotplugVolumes.
DECLARATIVE_HOTPLUG = "declarativeHotplugVolumes"
#: HyperConverged gates in HCO's Beta phase: on unless the HyperConverged turns them off.
HC_BETA_GATES = frozenset({"decentralizedLiveMigration", DECLARATIVE_HOTPLUG, "template"})

#: HyperConverged list -> KubeVirt's name for it.
_LISTS = {"pciHostDevices": "pciHostDevices", "mediatedDevices": "mediatedDevices"}
USB_HC, USB_KV = "usbHostDevices", "usb"


@dataclass(frozen=True, slots=True)
class DisabledEntry:
    """A permitted-devices entry the HyperConverged keeps with ``disabled: true``."""

    field: str
    resource_name: str


@dataclass(frozen=True, slots=True)
class HyperConvergedInfo:
    namespace: str
    name: str
    layout: str
    """"v1" or "v1beta1": where its fields are (a v1beta1 body sent as v1 is read as v1beta1)."""
    permitted_field: str
    """Where its permitted devices are: ``spec.virtualization.permittedHostDevices`` (v1)."""
    permitted: JSONObject | None
    """KubeVirt's permittedHostDevices as HCO writes it (None: the HyperConverged has none)."""
    fields: Mapping[str, tuple[str, ...]]
    """KubeVirt list name -> the HyperConverged field of each entry HCO keeps, in order."""
    disabled: tuple[DisabledEntry, ...]
    gates: tuple[str, ...]
    """The KubeVirt gates HCO sets (before the jsonpatch annotation), sorted as HCO sorts them."""
    jsonpatch: str
    """The kubevirt.kubevirt.io/jsonpatch annotation ('' when absent)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gates_field(self) -> str:
        return "spec.featureGates"


def _hc_gates(spec: JSONObject, layout: str) -> dict[str, bool]:
    """The HyperConverged's gates as set: name -> on (unlisted ones are absent)."""
    raw = spec.get("featureGates")
    out: dict[str, bool] = {}
    if raw is None:
        return out
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            if value is not None and not isinstance(value, bool):
                raise ObjectError(f"spec.featureGates.{name}", "expected a boolean")
            if value is not None:
                out[str(name)] = value
        return out
    for where, gate in as_maps(get_list(spec, "featureGates", "spec"), "spec.featureGates"):
        state = get_str(gate, "state", where, "Enabled")
        out[get_str(gate, "name", where)] = state == "Enabled"
    return out


def hco_gates(hc_gates: Mapping[str, bool]) -> tuple[str, ...]:
    """The KubeVirt gates HCO sets for these HyperConverged gates (``getKvFeatureGateList``)."""

    def on(name: str) -> bool:
        return hc_gates.get(name, name in HC_BETA_GATES)

    gates = [*HCO_MANDATORY_GATES, HCO_STRICT_CHECK_GATE]
    for name, kubevirt_gates in HC_GATE_MAP.items():
        if on(name):
            gates.extend(kubevirt_gates)
    gates.append("DeclarativeHotplugVolumes" if on(DECLARATIVE_HOTPLUG) else "HotplugVolumes")
    return tuple(sorted(gates))


def _entry(kind: str, d: JSONObject, where: str) -> JSONObject:
    """One HyperConverged entry in KubeVirt's spelling."""
    out: dict[str, Any] = {"resourceName": get_str(d, "resourceName", where)}
    if get_bool(d, "externalResourceProvider", where):
        out["externalResourceProvider"] = True
    if kind == "pciHostDevices":
        out["pciVendorSelector"] = get_str(d, "pciDeviceSelector", where)
    elif kind == "mediatedDevices":
        out["mdevNameSelector"] = get_str(d, "mdevNameSelector", where)
    else:
        out["selectors"] = [
            {"vendor": get_str(s, "vendor", sw), "product": get_str(s, "product", sw)}
            for sw, s in as_maps(get_list(d, "selectors", where), f"{where}.selectors")
        ]
    return out


def project_hyperconverged(obj: JSONObject) -> HyperConvergedInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    version = get_str(obj, "apiVersion", "").rpartition("/")[2]
    v1beta1_body = "virtualization" not in spec and (
        "permittedHostDevices" in spec or isinstance(spec.get("featureGates"), Mapping)
    )
    v1, v1beta1 = HCO_VERSIONS
    layout = v1beta1 if version == v1beta1 or v1beta1_body else v1
    if layout == v1:
        holder, base = get_map(spec, "virtualization", "spec"), "spec.virtualization"
    else:
        holder, base = spec, "spec"
    pbase = f"{base}.permittedHostDevices"
    permitted_obj = holder.get("permittedHostDevices")
    permitted_map = get_map(holder, "permittedHostDevices", base)
    permitted: dict[str, Any] | None = None if permitted_obj is None else {}
    fields: dict[str, tuple[str, ...]] = {}
    disabled: list[DisabledEntry] = []
    for hc_list, kv_list in (*_LISTS.items(), (USB_HC, USB_KV)):
        kept, kept_fields = [], []
        for where, d in as_maps(get_list(permitted_map, hc_list, pbase), f"{pbase}.{hc_list}"):
            entry = _entry(hc_list, d, where)
            if get_bool(d, "disabled", where):
                disabled.append(DisabledEntry(where, entry["resourceName"]))
                continue
            kept.append(entry)
            kept_fields.append(where)
        if kept and permitted is not None:
            permitted[kv_list] = kept
        fields[kv_list] = tuple(kept_fields)
    annotations = get_map(meta, "annotations", "metadata")
    return HyperConvergedInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=get_str(meta, "name", "metadata"),
        layout=layout,
        permitted_field=pbase,
        permitted=permitted,
        fields=MappingProxyType(fields),
        disabled=tuple(disabled),
        gates=hco_gates(_hc_gates(spec, layout)),
        jsonpatch=get_str(annotations, JSONPATCH_ANNOTATION, "metadata.annotations"),
    )


# --- ownership ---------------------------------------------------------------------------------


def is_hco_operator(user: UserInfo, namespace: str) -> bool:
    """HCO's own ServiceAccount in ``namespace`` (one of HCO's), as the API server authenticates
    a ServiceAccount: its username and its namespace's ServiceAccount group, both."""
    return (
        namespace in HCO_NAMESPACES
        and user.username == f"system:serviceaccount:{namespace}:{HCO_SERVICE_ACCOUNT}"
        and f"system:serviceaccounts:{namespace}" in user.groups
    )


def is_hco_owned(kubevirt: KubeVirtInfo) -> bool:
    """The KubeVirt CR carries HCO's labels: HCO wrote it and reverts what others change."""
    return all(kubevirt.labels.get(k) == v for k, v in HCO_LABELS.items())


def written_by_hco(
    hc: HyperConvergedInfo, kubevirts: Sequence[KubeVirtInfo]
) -> KubeVirtInfo | None:
    """The KubeVirt CR HCO last wrote from ``hc``: HCO-labelled, in its namespace."""
    owned = [k for k in kubevirts if k.namespace == hc.namespace and is_hco_owned(k)]
    return owned[0] if owned else None
