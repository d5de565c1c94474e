"""What a state keeps but cannot read: said once per object and cause, never per watch event.

A ResourceSlice of a newer Kubernetes or driver may publish attribute types this code does not
read (``policies.cel.values.Unreadable``) or fields that change what a device can give and are
not modelled yet (``UNMODELLED_DEVICE_FIELDS``). The slice is
kept and its devices still count where they can; the answers that rest on them say "cannot
tell". An operator learns why from one log line per slice and cause, however often the driver
republishes it.
"""

from __future__ import annotations

import logging

from policies.cluster.dra import ResourceSliceInfo
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import GroupKind, JSONObject

log = logging.getLogger("gpu-guard.state")


def causes(info: ResourceSliceInfo) -> list[str]:
    """Each thing the slice publishes that is kept unread, with the devices it concerns."""
    unreadable: dict[str, list[str]] = {}
    unmodelled: dict[str, list[str]] = {}
    for device in info.devices:
        for name in device.unreadable:
            unreadable.setdefault(name, []).append(device.name)
        for field in device.unmodelled:
            unmodelled.setdefault(field, []).append(device.name)
    out = [
        f"attribute {name} is of a type gpu-guard cannot read (kept; selectors reading it "
        f"cannot be decided): devices {', '.join(devices)}"
        for name, devices in sorted(unreadable.items())
    ]
    out += [
        f"{field}: not modelled by gpu-guard (provider answers over these devices are "
        f"'cannot tell'): devices {', '.join(devices)}"
        for field, devices in sorted(unmodelled.items())
    ]
    return out


class UnreadNotes:
    """Logs each (object, cause) once for the life of the state."""

    def __init__(self) -> None:
        self._said: set[tuple[str, str]] = set()

    def _once(self, subject: str, cause: str) -> None:
        if (subject, cause) not in self._said:
            self._said.add((subject, cause))
            log.warning("%s: %s", subject, cause)

    def note(self, info: ResourceSliceInfo) -> None:
        for cause in causes(info):
            self._once(f"ResourceSlice {info.name}", cause)

    def refused(self, kind: GroupKind, obj: JSONObject, problem: ObjectError) -> None:
        """A watched object that cannot be read at all (a malformed field an open CRD schema let
        through): left out of the view, said once however often its watch resends it."""
        meta = obj.get("metadata") or {}
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        self._once(f"{kind} {where}", f"ignored: {problem}")
