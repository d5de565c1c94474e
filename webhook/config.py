"""The guard's configuration file: per-policy action and exemptions, mutations, global exemptions.

    policies:
      workload-switch-with-gpu-pods:
        action: deny                      # deny | warn | audit | off
        exemptions:                       # expires (RFC 3339): past it, judged again
          users: [system:serviceaccount:ops:relabeler]
          expires: "2026-12-31T00:00:00Z"
    mutations:
      set-eviction-none-on-gpu-vms: {enabled: true}
    exemptions:                           # never judged by any policy
      namespaces: [kube-system, gpu-guard]
      users: []
      groups: []
      objectSelector: {matchLabels: {gpu-guard.io/exempt: "true"}}
    gpuOperator:
      version: v26.7.0                    # how it picks among several ClusterPolicies
    dra:
      deviceTaintRules: true              # kube-apiserver runs with DRADeviceTaintRules on
                                          # (--device-taint-rules / --no-... wins over it)

``exemptNamespaces: [...]`` is still read (the first format). A bad file is refused as a whole
with the file and the field named; nothing half-applies, and a running server keeps the last
good configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from policies.cluster.view import AuditView, ClusterView
from policies.registry import DIAGNOSES_BY_ID, MUTATIONS_BY_ID, POLICIES_BY_ID
from policies.vocabulary.audit import Diagnosis
from policies.vocabulary.fields import ObjectError, parse_time
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.semver import normalize_version
from policies.vocabulary.text import printable, rfc3339
from policies.vocabulary.verdicts import Action, Policy
from webhook.documents import DuplicateKeyError, UniqueKeySafeLoader
from webhook.selectors import LabelSelector, parse_selector

DEFAULT_EXEMPT_NAMESPACES = frozenset({"kube-system", "gpu-guard"})


class ConfigError(ValueError):
    """A configuration that cannot be used; the text names the file and the field."""


def _unknown(data: Mapping[Any, Any], known: Iterable[str]) -> str | None:
    """The first key of ``data`` not in ``known``, printable (YAML keys may be any type)."""
    extra = sorted(printable(k) for k in data if k not in set(known))
    return extra[0] if extra else None


def _settings(data: Any, where: str, known: tuple[str, ...], example: str) -> Mapping[Any, Any]:
    """A section of settings: a mapping holding only ``known`` keys, else one line naming the
    section (or the unknown key) and what it expects."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping such as {{{example}}}")
    extra = _unknown(data, known)
    if extra is not None:
        raise ConfigError(f"{where}.{extra}: unknown setting (known: {', '.join(known)})")
    return data


@dataclass(frozen=True)
class Exemptions:
    """Requests no policy (or one policy) judges: by namespace, user, group or object labels,
    until ``expires`` when one is set (a policy's own exemptions only: the global ones are the
    guard's perimeter, kube-system and its own namespace, and never expire)."""

    namespaces: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    selector: LabelSelector | None = None
    expires: datetime | None = None
    """Past this instant the exemption no longer applies, and the audit says it expired."""

    def active(self, now: datetime) -> bool:
        return self.expires is None or now < self.expires

    def describe(self) -> str:
        """What it exempts, for the audit's and the log's lines: "users a, b; groups c"."""
        parts = [
            f"{what} {', '.join(sorted(names))}"
            for what, names in (
                ("namespaces", self.namespaces),
                ("users", self.users),
                ("groups", self.groups),
            )
            if names
        ]
        if self.selector is not None and self.selector.requirements:
            parts.append("objects by labels")
        return "; ".join(parts) or "nothing"

    def reason(self, request: AdmissionRequest, now: datetime | None = None) -> str | None:
        """Why ``request`` is exempt, or None (also once expired: ``now``, else the clock)."""
        if self.expires is not None and not self.active(now or datetime.now(UTC)):
            return None
        if request.namespace and request.namespace in self.namespaces:
            return f"namespace {request.namespace}"
        if request.user.username in self.users:
            return f"user {request.user.username}"
        for group in request.user.groups:
            if group in self.groups:
                return f"group {group}"
        if self.selector is not None and self.selector.requirements:
            current = request.current or {}
            meta = current.get("metadata")
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            if isinstance(labels, Mapping) and self.selector.matches(labels):
                return "object labels"
        return None


@dataclass(frozen=True)
class GuardConfig:
    actions: Mapping[str, Action] = field(default_factory=dict)
    exempt_namespaces: frozenset[str] = DEFAULT_EXEMPT_NAMESPACES
    exempt_users: frozenset[str] = frozenset()
    exempt_groups: frozenset[str] = frozenset()
    exempt_selector: LabelSelector | None = None
    policy_exemptions: Mapping[str, Exemptions] = field(default_factory=dict)
    mutations: frozenset[str] = frozenset()
    """Ids of the mutations switched on; every mutation is off unless named here."""
    gpu_operator_version: str = ""
    """``gpuOperator.version``: the GPU Operator's release ('' unknown), which decides how it
    picks among several ClusterPolicies (``policies.cluster.gpu_operator``); set on the state
    the policies read (``ClusterState.set_gpu_operator_version``)."""
    device_taint_rules: bool = False
    """``dra.deviceTaintRules``: the cluster runs with the DRADeviceTaintRules gate on, so
    DeviceTaintRules taint the devices they select (``policies.cluster.device_taints``)."""

    def action_for(self, check: Policy[ClusterView] | Diagnosis[AuditView]) -> Action:
        """The configured action, else the one the policy or diagnosis declares."""
        return self.actions.get(check.id, check.default_action)

    @property
    def exemptions(self) -> Exemptions:
        return Exemptions(
            self.exempt_namespaces, self.exempt_users, self.exempt_groups, self.exempt_selector
        )

    def exempt_from(self, policy_id: str, request: AdmissionRequest) -> str | None:
        own = self.policy_exemptions.get(policy_id)
        return own.reason(request) if own is not None else None

    def expired_exemptions(self, now: datetime) -> Iterator[tuple[str, Exemptions]]:
        """Each policy's exemptions whose expiry has passed at ``now``, by policy id."""
        for policy_id, exemptions in self.policy_exemptions.items():
            if not exemptions.active(now):
                yield policy_id, exemptions

    def exemption_counts(self, now: datetime) -> tuple[int, int]:
        """How many exemptions apply at ``now`` (the global ones, which never expire, and each
        policy's own not past its expiry), and how many policies' exemptions have expired."""
        expired = sum(1 for _ in self.expired_exemptions(now))
        return 1 + len(self.policy_exemptions) - expired, expired


EXEMPTION_EXPIRED = "exemption-expired"
"""The audit's finding for a policy's exemption past its expiry (not a policy: the config's)."""


def expired_message(policy_id: str, exemptions: Exemptions) -> str:
    """The audit's line for an expired exemption: what it exempted, since when, what to do."""
    assert exemptions.expires is not None
    return (
        f"policies.{policy_id}.exemptions ({exemptions.describe()}) expired at "
        f"{rfc3339(exemptions.expires)}: {policy_id} judges those requests again. Remove the "
        "entry from the configuration, or set a later expires if the exemption is still needed."
    )


def _strings(value: Any, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return frozenset(value)


def _expiry(value: Any, where: str) -> datetime:
    """``expires``: an RFC 3339 time with its zone, quoted or as YAML wrote it unquoted."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    try:
        if isinstance(value, str) and "T" in value.upper():
            return parse_time(value, where)
    except ObjectError:
        pass
    raise ConfigError(
        f"{where}: expected an RFC 3339 time with its zone, such as 2026-12-31T00:00:00Z "
        f"(got {printable(value)})"
    )


def _exemptions(
    data: Any, where: str, default_namespaces: frozenset[str], may_expire: bool = False
) -> Exemptions:
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: expected a mapping (namespaces, users, groups, objectSelector)"
        )
    known = ("namespaces", "users", "groups", "objectSelector")
    unknown = _unknown(data, (*known, "expires") if may_expire else known)
    if unknown == "expires":
        raise ConfigError(
            f"{where}.expires: only a policy's exemptions expire (policies.<id>.exemptions."
            "expires); these are the guard's perimeter"
        )
    if unknown is not None:
        raise ConfigError(f"{where}.{unknown}: unknown setting")
    selector = None
    if data.get("objectSelector") is not None:
        try:
            selector = parse_selector(data["objectSelector"], f"{where}.objectSelector")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return Exemptions(
        _strings(data["namespaces"], f"{where}.namespaces")
        if "namespaces" in data
        else default_namespaces,
        _strings(data.get("users", []), f"{where}.users"),
        _strings(data.get("groups", []), f"{where}.groups"),
        selector,
        _expiry(data["expires"], f"{where}.expires") if "expires" in data else None,
    )


def _policies(data: Any, source: str) -> tuple[dict[str, Action], dict[str, Exemptions]]:
    actions: dict[str, Action] = {}
    exemptions: dict[str, Exemptions] = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: policies: expected a mapping of policy id to settings")
    for policy_id, settings in data.items():
        where = f"{source}: policies.{printable(policy_id)}"
        if policy_id not in POLICIES_BY_ID and policy_id not in DIAGNOSES_BY_ID:
            known = ", ".join([*POLICIES_BY_ID, *DIAGNOSES_BY_ID])
            raise ConfigError(f"{where}: unknown policy id (known: {known})")
        settings = _settings(settings, where, ("action", "exemptions"), "action: warn")
        if "action" in settings:
            if not isinstance(settings["action"], str):
                raise ConfigError(f"{where}.action: expected deny, warn, audit or off")
            try:
                actions[policy_id] = Action.parse(settings["action"])
            except ValueError as exc:
                raise ConfigError(f"{where}.action: {exc}") from None
        if "exemptions" in settings:
            exemptions[policy_id] = _exemptions(
                settings["exemptions"], f"{where}.exemptions", frozenset(), may_expire=True
            )
    return actions, exemptions


def _mutations(data: Any, source: str) -> frozenset[str]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: mutations: expected a mapping of mutation id to settings")
    enabled = set()
    for mutation_id, settings in data.items():
        where = f"{source}: mutations.{printable(mutation_id)}"
        if mutation_id not in MUTATIONS_BY_ID:
            raise ConfigError(f"{where}: unknown mutation id (known: {', '.join(MUTATIONS_BY_ID)})")
        if not isinstance(settings, Mapping) or set(settings) - {"enabled"}:
            raise ConfigError(f"{where}: expected {{enabled: true|false}}")
        if not isinstance(settings.get("enabled", False), bool):
            raise ConfigError(f"{where}.enabled: expected true or false")
        if settings.get("enabled", False):
            enabled.add(mutation_id)
    return frozenset(enabled)


def _gpu_operator(data: Any, source: str) -> str:
    """``gpuOperator.version``, checked: a version the rule cannot read is refused, not guessed."""
    where = f"{source}: gpuOperator"
    data = _settings(data, where, ("version",), "version: v26.7.0")
    version = data.get("version", "")
    if version is None or version == "":
        return ""
    if not isinstance(version, str) or normalize_version(version.strip()) is None:
        raise ConfigError(
            f"{where}.version: expected the GPU Operator's release, such as v26.7.0 or 26.3.1 "
            "(its image tag)"
        )
    return version.strip()


def _dra(data: Any, source: str) -> bool:
    """``dra.deviceTaintRules``: whether DeviceTaintRules act (the gate is the cluster's)."""
    where = f"{source}: dra"
    data = _settings(data, where, ("deviceTaintRules",), "deviceTaintRules: true")
    value = data.get("deviceTaintRules", False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.deviceTaintRules: expected true or false")
    return value


KNOWN_SETTINGS = ("policies", "mutations", "exemptions", "exemptNamespaces", "gpuOperator", "dra")


def parse_config(data: Any, source: str) -> GuardConfig:
    if data is None:
        return GuardConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    unknown = _unknown(data, KNOWN_SETTINGS)
    if unknown is not None:
        raise ConfigError(
            f"{source}: {unknown}: unknown setting (known: {', '.join(KNOWN_SETTINGS)})"
        )
    actions, policy_exemptions = _policies(data.get("policies") or {}, source)
    namespaces = DEFAULT_EXEMPT_NAMESPACES
    if "exemptNamespaces" in data:
        namespaces = _strings(data["exemptNamespaces"], f"{source}: exemptNamespaces")
    exemptions = _exemptions(data.get("exemptions") or {}, f"{source}: exemptions", namespaces)
    return GuardConfig(
        actions=actions,
        exempt_namespaces=exemptions.namespaces,
        exempt_users=exemptions.users,
        exempt_groups=exemptions.groups,
        exempt_selector=exemptions.selector,
        policy_exemptions=policy_exemptions,
        mutations=_mutations(data.get("mutations") or {}, source),
        gpu_operator_version=_gpu_operator(data.get("gpuOperator") or {}, source),
        device_taint_rules=_dra(data.get("dra") or {}, source),
    )


def load_config(path: str | None, device_taint_rules: bool | None = None) -> GuardConfig:
    """The configuration in ``path`` (the defaults without one), then the command line's over
    it: ``device_taint_rules`` (``--device-taint-rules`` / ``--no-device-taint-rules``) wins over
    the file's ``dra.deviceTaintRules``, at start and at every reload; None leaves the file's."""
    config = _read_config(path)
    if device_taint_rules is None:
        return config
    return replace(config, device_taint_rules=device_taint_rules)


def _read_config(path: str | None) -> GuardConfig:
    if path is None:
        return GuardConfig()
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        # the pure loader: libyaml refuses some valid characters
        data = yaml.load(text, Loader=UniqueKeySafeLoader)
    except DuplicateKeyError as exc:
        raise ConfigError(printable(f"{path}: {exc}")) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a configuration") from None
    return parse_config(data, path)
