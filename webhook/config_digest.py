"""The configuration in force as flat settings: what a reload changed, one line each, and a hash.

A policy switched off or an exemption added changes what the guard lets through, so a reload
must say what it changed, not only that it happened, and a scrape must tell which configuration
each replica runs. Both read one canonical form: every effective setting under the name a user
writes in guard.yaml (``policies.<id>.action``, ``policies.<id>.exemptions.users``,
``exemptions.namespaces``, ``mutations.<id>.enabled``), defaults included, so that a setting
removed from the file shows as its return to the default. Fields ``Exemptions`` and
``GuardConfig`` gain later are read generically and show up without a change here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from datetime import date, datetime
from enum import Enum
from typing import Any

from policies.registry import DIAGNOSES_BY_ID, MUTATIONS_BY_ID, POLICIES_BY_ID
from policies.vocabulary.text import printable
from webhook.config import GuardConfig

#: GuardConfig's fields read by name below; any other is read generically.
_NAMED = frozenset(
    {
        "actions",
        "exempt_namespaces",
        "exempt_users",
        "exempt_groups",
        "exempt_selector",
        "policy_exemptions",
        "mutations",
        "gpu_operator_version",
        "device_taint_rules",
    }
)


def _canonical(value: Any) -> Any:
    """``value`` as JSON that is the same for equal settings (sets sorted, enums by value)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return _canonical(value.value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted((_canonical(v) for v in value), key=_text)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (datetime, date)):  # an exemption's expiry, say
        return value.isoformat()
    return str(value)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _exemptions(prefix: str, exemptions: Any, out: dict[str, Any]) -> None:
    for name, value in _canonical(exemptions).items():
        out[f"{prefix}.{'objectSelector' if name == 'selector' else name}"] = value


def settings(config: GuardConfig) -> dict[str, Any]:
    """Every effective setting, by the name guard.yaml gives it."""
    out: dict[str, Any] = {}
    for policy in POLICIES_BY_ID.values():
        out[f"policies.{policy.id}.action"] = config.action_for(policy).label
    for diagnosis in DIAGNOSES_BY_ID.values():
        out[f"policies.{diagnosis.id}.action"] = config.action_for(diagnosis).label
    for policy_id, own in sorted(config.policy_exemptions.items()):
        _exemptions(f"policies.{policy_id}.exemptions", own, out)
    _exemptions("exemptions", config.exemptions, out)
    for mutation_id in sorted(MUTATIONS_BY_ID):
        out[f"mutations.{mutation_id}.enabled"] = mutation_id in config.mutations
    out["gpuOperator.version"] = config.gpu_operator_version
    out["dra.deviceTaintRules"] = config.device_taint_rules
    for f in dataclasses.fields(config):
        if f.name not in _NAMED:
            out[f.name] = _canonical(getattr(config, f.name))
    return out


def digest(config: GuardConfig) -> str:
    """The sha256 of the configuration in force (its canonical settings), in hex."""
    return hashlib.sha256(_text(settings(config)).encode()).hexdigest()


def changes(old: GuardConfig, new: GuardConfig) -> list[str]:
    """One line per setting that differs: a list's additions and removals, else old -> new."""
    before, after = settings(old), settings(new)
    lines = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if isinstance(was, list) or isinstance(now, list):  # absent: no list at all
            was, now = was or [], now or []
            added = [v for v in now if v not in was]
            removed = [v for v in was if v not in now]
            said = [f"added {_text(added)}"] if added else []
            said += [f"removed {_text(removed)}"] if removed else []
            if said:  # not an empty list appearing where there was none
                lines.append(f"{name}: {', '.join(said)}")
        else:
            lines.append(f"{name}: {_text(was)} -> {_text(now)}")
    return [printable(line) for line in lines]
