"""The guard's configuration file: per-policy action and the namespaces it never judges.

    policies:
      workload-switch-with-gpu-pods: {action: deny}
      permitted-device-without-hardware: {action: audit}
    exemptNamespaces: [kube-system, gpu-guard]

A bad file is refused as a whole with the file and the field named; nothing half-applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from policies.model import Action, Policy
from policies.registry import POLICIES_BY_ID

DEFAULT_EXEMPT_NAMESPACES = frozenset({"kube-system", "gpu-guard"})


class ConfigError(ValueError):
    """A configuration that cannot be used; the text names the file and the field."""


@dataclass(frozen=True)
class GuardConfig:
    actions: Mapping[str, Action] = field(default_factory=dict)
    exempt_namespaces: frozenset[str] = DEFAULT_EXEMPT_NAMESPACES

    def action_for(self, policy: Policy) -> Action:
        return self.actions.get(policy.id, policy.default_action)


def parse_config(data: Any, source: str) -> GuardConfig:
    if data is None:
        return GuardConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    unknown = sorted(set(data) - {"policies", "exemptNamespaces"})
    if unknown:
        raise ConfigError(
            f"{source}: {unknown[0]}: unknown setting (known: policies, exemptNamespaces)"
        )
    actions: dict[str, Action] = {}
    policies = data.get("policies") or {}
    if not isinstance(policies, Mapping):
        raise ConfigError(f"{source}: policies: expected a mapping of policy id to settings")
    for policy_id, settings in policies.items():
        where = f"{source}: policies.{policy_id}"
        if policy_id not in POLICIES_BY_ID:
            raise ConfigError(f"{where}: unknown policy id (known: {', '.join(POLICIES_BY_ID)})")
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{where}: expected a mapping such as {{action: warn}}")
        extra = sorted(set(settings) - {"action"})
        if extra:
            raise ConfigError(f"{where}.{extra[0]}: unknown setting (known: action)")
        if "action" in settings:
            if not isinstance(settings["action"], str):
                raise ConfigError(f"{where}.action: expected deny, warn, audit or off")
            try:
                actions[policy_id] = Action.parse(settings["action"])
            except ValueError as exc:
                raise ConfigError(f"{where}.action: {exc}") from None
    namespaces = data.get("exemptNamespaces", sorted(DEFAULT_EXEMPT_NAMESPACES))
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise ConfigError(f"{source}: exemptNamespaces: expected a list of namespace names")
    return GuardConfig(actions, frozenset(namespaces))


def load_config(path: str | None) -> GuardConfig:
    if path is None:
        return GuardConfig()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    return parse_config(data, path)
