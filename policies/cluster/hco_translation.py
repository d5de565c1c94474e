"""What HCO will write from a HyperConverged: the KubeVirt CR's permitted devices and feature
gates as the policies read them, the jsonpatch annotation applied.

Apart from ``hyperconverged.py`` (the HyperConverged as it is, and HCO's identity) because it is
the other half: HCO's ``NewKubeVirt`` (controllers/handlers/kubevirt.go of
kubevirt/hyperconverged-cluster-operator), followed for the fields the policies read:

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
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from policies.cluster.feature_gates import GATE_TABLE, Maturity, maturity_at
from policies.cluster.hyperconverged import (
    HCO_KUBEVIRT_NAME,
    HCO_LABELS,
    JSONPATCH_ANNOTATION,
    USB_KV,
    HyperConvergedInfo,
)
from policies.cluster.kinds import KUBEVIRT, RESOURCE_OF
from policies.cluster.kubevirt import (
    KubeVirtInfo,
    PermittedMdev,
    PermittedPciDevice,
    PermittedUsb,
    project_kubevirt,
)
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import JSONObject

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
    usbs: list[PermittedUsb] = [replace(d, field=at(USB_KV, d.index)) for d in kubevirt.usb_devices]
    return replace(
        kubevirt, pci_devices=tuple(pci), mediated_devices=tuple(mdevs), usb_devices=tuple(usbs)
    )
