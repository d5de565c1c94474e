"""The instancetypes, and which VMs take devices from them: a VM naming an instancetype that gives
a GPU uses that GPU as surely as one listing it (KubeVirt copies the instancetype's gpus[] and
hostDevices[] into the VM's: policies/cluster/vms_to_run.py ``resolved``), so ``vms_using`` and
``vms_needing_gate`` count it, and a deny about a device's users sees it while the VM is stopped
(a running one's VMI lists the devices itself).

Apart from ``policies.state.cluster`` so that the state's two tables of instancetypes and their
indexes live together, fed through its hooks; read as it is now, like every kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from policies.cluster.kinds import VM_INSTANCETYPE
from policies.cluster.kubevirt import VMInfo
from policies.cluster.vm_templates import InstancetypeInfo
from policies.vocabulary.requests import GroupKind

Key = tuple[str, str]  # (namespace, name)
TypeKey = tuple[GroupKind, str, str]
"""An instancetype: its kind, its namespace ('' cluster-wide) and its name."""


def _add(index: dict[str, set[TypeKey]], key: str, value: TypeKey) -> None:
    index.setdefault(key, set()).add(value)


def _discard(index: dict[str, set[TypeKey]], key: str, value: TypeKey) -> None:
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


def named_by(vm: VMInfo) -> TypeKey | None:
    """The instancetype a VM names, as a key of this index (None: none, or no kind KubeVirt
    knows)."""
    ref = vm.instancetype
    if ref is None or ref.kind is None or not ref.name:
        return None
    return (ref.kind, vm.namespace if ref.kind == VM_INSTANCETYPE else "", ref.name)


class InstancetypeIndex:
    """Both instancetype kinds by key, what each gives, and the VMs naming each."""

    def __init__(self) -> None:
        self.types: dict[TypeKey, InstancetypeInfo] = {}
        self._by_device: dict[str, set[TypeKey]] = {}
        self._by_gate: dict[str, set[TypeKey]] = {}
        self._naming: dict[TypeKey, set[Key]] = {}

    def keep(self, info: InstancetypeInfo) -> None:
        key = (info.kind, info.namespace, info.name)
        self.drop(key)
        self.types[key] = info
        for device in info.devices:
            if device.device_name:
                _add(self._by_device, device.device_name, key)
            for gate in device.gates_needed:
                _add(self._by_gate, gate, key)

    def drop(self, key: TypeKey) -> None:
        info = self.types.pop(key, None)
        if info is None:
            return
        for device in info.devices:
            _discard(self._by_device, device.device_name, key)
            for gate in device.gates_needed:
                _discard(self._by_gate, gate, key)

    def link(self, vm_key: Key, vm: VMInfo, add: bool) -> None:
        """Notes (or forgets) that the VM names its instancetype, whether or not it exists."""
        named = named_by(vm)
        if named is None:
            return
        if add:
            self._naming.setdefault(named, set()).add(vm_key)
            return
        keys = self._naming.get(named)
        if keys is not None:
            keys.discard(vm_key)
            if not keys:
                del self._naming[named]

    def vms_using(self, device_name: str) -> set[Key]:
        """The VMs naming an instancetype that gives ``device_name``."""
        return self._vms_of(self._by_device.get(device_name, ()))

    def vms_needing_gate(self, gate: str) -> set[Key]:
        """The VMs naming an instancetype with an entry that needs ``gate``."""
        return self._vms_of(self._by_gate.get(gate, ()))

    def _vms_of(self, types: Iterable[TypeKey]) -> set[Key]:
        out: set[Key] = set()
        for key in types:
            out |= self._naming.get(key, set())
        return out
