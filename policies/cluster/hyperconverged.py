"""OpenShift Virtualization's HyperConverged CR (hco.kubevirt.io v1 and v1beta1), and what HCO
makes of it: the KubeVirt CR's permitted devices and feature gates as HCO will write them.

HCO owns the KubeVirt CR on such a cluster (docs/openshift.md): it builds it from the
HyperConverged (``NewKubeVirt`` in controllers/handlers/kubevirt.go of
kubevirt/hyperconverged-cluster-operator) and reverts any direct edit. The translation here
follows that code, for the fields the policies read:

- permitted devices: v1 ``spec.virtualization.permittedHostDevices``, v1beta1
  ``spec.permittedHostDevices``; ``pciDeviceSelector`` becomes ``pciVendorSelector``,
  ``usbHostDevices`` becomes ``usb``, entries with ``disabled: true`` are dropped, and each list
  replaces KubeVirt's whole (``toKvPciHostDevices``, ``toKvMediatedDevices``,
  ``toKvUSBHostDevices``);
- feature gates: HCO's hard-coded gates plus those the HyperConverged's own gates turn on, sorted
  (``getKvFeatureGateList``); ``disabledFeatureGates`` is every KubeVirt Beta gate HCO does not
  enable (``getKvDisabledFeatureGateList``): read here from the KubeVirt CR HCO last wrote, with
  the Beta gates of ``feature_gates.GATE_TABLE`` for the CR's version added back (a patch may have
  taken one out);
- then the ``kubevirt.kubevirt.io/jsonpatch`` annotation, an RFC 6902 patch of the whole KubeVirt
  object, applied as HCO applies it (``applyAnnotationPatch`` in controllers/operands/operand.go,
  evanphx/json-patch): every operation's path must be under ``/spec/``, then every operation in
  order. One that does not apply on the fields above is reported (HCO then writes nothing and
  says "invalid jsonPatch"); one that fails only because the translation lacks a field HCO writes
  (a field the policies do not read) is "cannot tell", with its index: when it would write a
  field the policies read, what HCO writes there is unknown and nothing is judged on it.

The HyperConverged's own gates: v1 lists ``{name, state}`` (no state is Enabled); v1beta1 a map
of booleans. An unlisted gate takes HCO's default for its phase (pkg/featuregatedetails).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from policies.cluster.feature_gates import GATE_TABLE, Maturity, maturity_at
from policies.cluster.kinds import HCO_VERSIONS, KUBEVIRT, MANAGED_BY_LABEL, RESOURCE_OF
from policies.cluster.kubevirt import (
    KubeVirtInfo,
    PermittedMdev,
    PermittedPciDevice,
    PermittedUsb,
    project_kubevirt,
)
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

BETA = Maturity.BETA

#: The KubeVirt fields the policies read, which the translation writes as HCO does; the rest of
#: the CR HCO writes is not modelled, so a jsonpatch operation that fails there may apply in HCO.
_PERMITTED = "/spec/configuration/permittedHostDevices"
_DEVELOPER = "/spec/configuration/developerConfiguration"
_READ = (_PERMITTED, f"{_DEVELOPER}/featureGates", f"{_DEVELOPER}/disabledFeatureGates")
#: Of those, the ones written exactly as HCO writes them (``disabledFeatureGates`` is rebuilt
#: from the CR HCO last wrote): an operation failing there fails in HCO too.
_EXACT = (_PERMITTED, f"{_DEVELOPER}/featureGates")
#: HCO refuses a patch with any operation outside the spec (``applyAnnotationPatch``).
_SPEC = "/spec/"
#: The operations that write (at ``path``, and at ``from`` for a move).
_WRITES = frozenset({"add", "remove", "replace", "move", "copy"})
#: HyperConverged list -> KubeVirt's name for it.
_LISTS = {"pciHostDevices": "pciHostDevices", "mediatedDevices": "mediatedDevices"}
_USB_HC, _USB_KV = "usbHostDevices", "usb"


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
    for hc_list, kv_list in (*_LISTS.items(), (_USB_HC, _USB_KV)):
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


# --- the translation ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Translation:
    """What HCO will write from a HyperConverged, as the policies read a KubeVirt CR."""

    kubevirt: KubeVirtInfo
    patch_problem: str = ""
    """Why the jsonpatch annotation does not apply ('' when it does or there is none)."""
    patched: bool = False
    """The annotation changed what the policies read."""
    cannot_tell: str = ""
    """The first operation gpu-guard cannot apply for want of a field HCO writes ('' if none)."""
    known: bool = True
    """False when that operation writes a field the policies read: ``kubevirt`` is then only
    what the operations before it made, and nothing is to be judged on it."""


def _disabled_gates(gates: Sequence[str], written: KubeVirtInfo | None) -> list[str]:
    """``disabledFeatureGates`` as HCO computes it: the written CR's, without the gates HCO now
    enables, with the Beta gates gpu-guard knows (for the CR's version) that HCO does not."""
    if written is None:
        return []
    release = written.gates.release
    beta = [] if release is None else [g for g in GATE_TABLE if maturity_at(g, release) is BETA]
    return sorted({*written.gates.disabled, *beta} - set(gates))


def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def _touches(path: str, prefixes: Sequence[str]) -> bool:
    """``path`` is one of ``prefixes``, below one, or above one (writing it rewrites them)."""
    return _under(path, prefixes) or any(p.startswith(path + "/") for p in prefixes)


@dataclass(frozen=True, slots=True)
class _Applied:
    obj: JSONObject
    problem: str = ""
    cannot_tell: str = ""
    known: bool = True


def _shown_op(i: int, op: Mapping[str, Any]) -> str:
    return f"operation {i} ({op.get('op')} {op.get('path')})"


def _operations(text: str) -> list[Mapping[str, Any]] | str:
    """The annotation's operations, or why HCO refuses the whole patch before applying any."""
    try:
        ops = json.loads(text)
    except ValueError as exc:
        return f"{JSONPATCH_ANNOTATION} is not JSON ({exc})"
    if not isinstance(ops, list):
        return f"{JSONPATCH_ANNOTATION} is not a JSON Patch (a list of operations)"
    for i, op in enumerate(ops):
        if not isinstance(op, Mapping) or not isinstance(op.get("path"), str):
            return f"jsonpatch annotation: operation {i} is not a JSON Patch operation"
        if not op["path"].startswith(_SPEC):
            return f"jsonpatch annotation: {_shown_op(i, op)}: HCO modifies only spec fields"
    return ops


def _apply(kubevirt: JSONObject, text: str) -> _Applied:
    """Every operation in order, on the translation, as HCO applies them on the CR it writes."""
    import jsonpatch  # only a HyperConverged with the annotation needs it

    ops = _operations(text)
    if isinstance(ops, str):
        return _Applied(kubevirt, ops)
    patched, cannot_tell = kubevirt, ""
    for i, op in enumerate(ops):
        try:
            patched = jsonpatch.apply_patch(patched, [op])
            continue
        except jsonpatch.JsonPatchTestFailed:
            why = "its test fails"
        except (jsonpatch.JsonPatchConflict, jsonpatch.JsonPointerException):
            why = "no such path in what HCO writes"
        except (jsonpatch.JsonPatchException, TypeError, AttributeError):
            problem = f"jsonpatch annotation: {_shown_op(i, op)} is not a JSON Patch operation"
            return _Applied(kubevirt, problem)
        paths = [p for p in (op.get("path"), op.get("from")) if isinstance(p, str)]
        if all(_under(p, _EXACT) for p in paths):
            problem = f"jsonpatch annotation: {_shown_op(i, op)} does not apply: {why}"
            return _Applied(kubevirt, problem)
        unsure = (
            f"jsonpatch annotation: cannot tell whether {_shown_op(i, op)} applies (it needs a "
            "field of the KubeVirt CR that gpu-guard does not model)"
        )
        cannot_tell = cannot_tell or unsure
        written = paths if op.get("op") == "move" else paths[:1]
        if op.get("op") in _WRITES and any(_touches(p, _READ) for p in written):
            return _Applied(patched, "", unsure, known=False)
    return _Applied(patched, "", cannot_tell)


def translate(hc: HyperConvergedInfo, written: KubeVirtInfo | None) -> Translation:
    """The KubeVirt CR HCO will write from ``hc``; ``written`` is the one it last wrote (its
    version and disabled gates), None when there is none yet."""
    developer = {"featureGates": list(hc.gates)}
    disabled = _disabled_gates(hc.gates, written)
    if disabled:
        developer["disabledFeatureGates"] = disabled
    configuration: dict[str, Any] = {"developerConfiguration": developer}
    if hc.permitted is not None:
        configuration["permittedHostDevices"] = hc.permitted
    status = {"observedKubeVirtVersion": written.gates.version} if written is not None else {}
    name = written.name if written is not None else HCO_KUBEVIRT_NAME
    obj: JSONObject = {
        "apiVersion": RESOURCE_OF[KUBEVIRT].api_version,
        "kind": "KubeVirt",
        "metadata": {"namespace": hc.namespace, "name": name, "labels": dict(HCO_LABELS)},
        "spec": {"configuration": configuration},
        "status": status,
    }
    applied = _apply(obj, hc.jsonpatch) if hc.jsonpatch else _Applied(obj)
    problem, patched_obj = applied.problem, applied.obj
    try:
        kubevirt = project_kubevirt(patched_obj)
    except ObjectError as exc:
        problem = f"{JSONPATCH_ANNOTATION} makes {exc}"
        kubevirt = project_kubevirt(obj)
        patched_obj = obj
    before = obj["spec"]["configuration"].get("permittedHostDevices")
    after = patched_obj["spec"]["configuration"].get("permittedHostDevices")
    origin = f"the KubeVirt CR HCO writes from HyperConverged {hc.key}"
    kubevirt = replace(kubevirt, origin=origin)
    if before == after:
        kubevirt = _with_fields(kubevirt, hc)
    return Translation(
        kubevirt, problem, patched_obj is not obj, applied.cannot_tell, applied.known
    )


def _with_fields(kubevirt: KubeVirtInfo, hc: HyperConvergedInfo) -> KubeVirtInfo:
    """Each entry named by the HyperConverged field it came from."""

    def at(kv_list: str, i: int) -> str:
        fields = hc.fields.get(kv_list, ())
        return fields[i] if i < len(fields) else ""

    pci: list[PermittedPciDevice] = [
        replace(d, field=at("pciHostDevices", d.index)) for d in kubevirt.pci_devices
    ]
    mdevs: list[PermittedMdev] = [
        replace(d, field=at("mediatedDevices", d.index)) for d in kubevirt.mediated_devices
    ]
    usbs: list[PermittedUsb] = [
        replace(d, field=at(_USB_KV, d.index)) for d in kubevirt.usb_devices
    ]
    return replace(
        kubevirt, pci_devices=tuple(pci), mediated_devices=tuple(mdevs), usb_devices=tuple(usbs)
    )
