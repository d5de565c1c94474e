"""KubeVirt feature gates as the running KubeVirt reads them: the one place for gate knowledge.

The gates gpu-guard asks about, each one's maturity by KubeVirt minor (kubevirt/kubevirt
pkg/virt-config/featuregate/active.go, and inactive.go for GPU, on release-1.6 to release-1.9;
docs/feature-gates.md cites the lines), and how KubeVirt reads a gate from the KubeVirt CR's
spec.configuration.developerConfiguration:

- from 1.9, ``featuregate.IsEnabled`` (feature-gates.go): GA on; listed in ``featureGates`` on;
  listed in ``disabledFeatureGates`` off; else Beta on and Alpha off;
- before 1.9, ``ClusterConfig.isFeatureGateEnabled`` (pkg/virt-config/feature-gates.go): GA on,
  else on only when listed in ``featureGates`` (1.8 has ``disabledFeatureGates`` too, but an
  unlisted Beta gate is off there, so the field does not tell the version).

The version is the CR's ``status.observedKubeVirtVersion`` (what is deployed), else
``status.operatorVersion``. A CR that reports none is read as before 1.9, and messages say what
1.9 would do instead: guessing "on" would hide a VM that never starts on 1.8.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from policies.vocabulary.semver import normalize_version
from policies.vocabulary.text import few

GPU_GATE = "GPU"
HOST_DEVICES_GATE = "HostDevices"
GPUS_WITH_DRA_GATE = "GPUsWithDRA"
HOST_DEVICES_WITH_DRA_GATE = "HostDevicesWithDRA"

#: The gate a gpus[] or hostDevices[] entry that uses a claim needs (kubevirt/kubevirt
#: pkg/dra/admitter: "contains DRA enabled GPUs but feature gate is not enabled").
DRA_GATES: Mapping[str, str] = MappingProxyType(
    {"gpus": GPUS_WITH_DRA_GATE, "hostDevices": HOST_DEVICES_WITH_DRA_GATE}
)

DEVELOPER_CONFIGURATION = "spec.configuration.developerConfiguration"
FEATURE_GATES_FIELD = f"{DEVELOPER_CONFIGURATION}.featureGates"
DISABLED_GATES_FIELD = f"{DEVELOPER_CONFIGURATION}.disabledFeatureGates"


class Maturity(StrEnum):
    ALPHA = "Alpha"
    BETA = "Beta"
    GA = "GA"


Release = tuple[int, int]
"""A KubeVirt minor, (1, 9) for every 1.9.z build."""

#: The minors the table was read from; older ones read as the first, newer ones as the last.
TABLE_RELEASES: tuple[Release, ...] = ((1, 6), (1, 7), (1, 8), (1, 9))
#: From this minor on, an unlisted Beta gate is on unless disabledFeatureGates lists it.
BETA_ON_FROM: Release = (1, 9)

_A, _B = Maturity.ALPHA, Maturity.BETA
#: gate -> its maturity in each minor of TABLE_RELEASES.
GATE_TABLE: Mapping[str, Mapping[Release, Maturity]] = MappingProxyType(
    {
        GPU_GATE: MappingProxyType(dict.fromkeys(TABLE_RELEASES, Maturity.GA)),
        HOST_DEVICES_GATE: MappingProxyType(dict.fromkeys(TABLE_RELEASES, _A)),
        GPUS_WITH_DRA_GATE: MappingProxyType({(1, 6): _A, (1, 7): _A, (1, 8): _A, (1, 9): _B}),
        HOST_DEVICES_WITH_DRA_GATE: MappingProxyType(
            {(1, 6): _A, (1, 7): _A, (1, 8): _A, (1, 9): _B}
        ),
    }
)
#: What an unknown version is read as: the last minor before BETA_ON_FROM.
UNKNOWN_READ_AS: Release = max(r for r in TABLE_RELEASES if r < BETA_ON_FROM)


#: How KubeVirt reads a gate, in the words the reference prints (``read_gate`` does it).
READING_RULES: tuple[str, ...] = (
    "KubeVirt 1.9 and later (`featuregate.IsEnabled`): a GA gate is on; a gate listed in "
    "`featureGates` is on; one listed in `disabledFeatureGates` is off; otherwise a Beta gate "
    "is on and an Alpha gate off.",
    "Before 1.9 (`ClusterConfig.isFeatureGateEnabled`): a GA gate is on, any other only when "
    "`featureGates` lists it (1.8 has `disabledFeatureGates` too, but an unlisted Beta gate is "
    "off there).",
    "The version is the CR's `status.observedKubeVirtVersion`, else `status.operatorVersion` "
    '("v1.9.0", "1.9.0-rc.1" and "v1.9.0-12-gabcdef" are all 1.9). A CR that reports '
    "none is read as before 1.9, and the message says what 1.9 would do.",
    "A gate in both lists reads as on (`featureGates` is checked first); virt-operator refuses "
    "an update that changes the gates and leaves one in both (`feature-gate-in-both-lists`).",
)


def release_of(version: str) -> Release | None:
    """The minor of a version as KubeVirt reports it ("v1.9.0", "1.9.0-rc.1",
    "v1.9.0-12-gabcdef" are all 1.9); None when it is not one."""
    parsed = normalize_version(version.strip())
    return (parsed.major, parsed.minor) if parsed is not None else None


def maturity_at(gate: str, release: Release | None) -> Maturity | None:
    """The gate's maturity in ``release`` (None: read as UNKNOWN_READ_AS); None for a gate the
    table does not know."""
    by_release = GATE_TABLE.get(gate)
    if by_release is None:
        return None
    at = UNKNOWN_READ_AS if release is None else release
    return by_release[min(max(at, TABLE_RELEASES[0]), TABLE_RELEASES[-1])]


@dataclass(frozen=True, slots=True)
class GateReading:
    """One gate as KubeVirt reads it, with what the reading rests on (what messages say)."""

    gate: str
    on: bool
    listed: bool
    """In featureGates."""
    disabled: bool
    """In disabledFeatureGates."""
    release: Release | None
    """The minor it was read for; None when the CR reports no version (read as before 1.9)."""

    @property
    def beta_on_later(self) -> bool:
        """Off here, but on KubeVirt 1.9 and later it would be on: the version is unknown and
        there it is Beta and not disabled. Messages add the note."""
        return (
            self.release is None
            and not self.on
            and not self.disabled
            and maturity_at(self.gate, BETA_ON_FROM) is Maturity.BETA
        )

    @property
    def needs_listing(self) -> bool:
        """To turn it on, featureGates must list it (it is not Beta on 1.9 or later)."""
        return not (
            self.release is not None
            and self.release >= BETA_ON_FROM
            and maturity_at(self.gate, self.release) is Maturity.BETA
        )


def read_gate(
    gate: str, enabled: Collection[str], disabled: Collection[str], release: Release | None
) -> GateReading:
    """``gate`` as KubeVirt ``release`` reads these lists (before 1.9 when ``release`` is None).

    Listed in both is read as listed (IsEnabled checks featureGates first): only a CR that
    virt-operator's webhook never judged can be stored so (feature-gate-in-both-lists)."""
    listed, off_listed = gate in enabled, gate in disabled
    maturity = maturity_at(gate, release)
    if maturity is Maturity.GA or listed:
        on = True
    elif release is None or release < BETA_ON_FROM:
        on = False
    else:
        on = not off_listed and maturity is Maturity.BETA
    return GateReading(gate, on, listed, off_listed, release)


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """developerConfiguration's two lists as written (order kept: virt-operator compares them
    so), and the KubeVirt version that reads them."""

    enabled: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    version: str = ""
    """status.observedKubeVirtVersion, else status.operatorVersion; '' when neither is set."""
    release: Release | None = None
    """``release_of(version)``, computed once by ``feature_gates``."""

    def read(self, gate: str) -> GateReading:
        return read_gate(gate, self.enabled, self.disabled, self.release)

    @property
    def in_both(self) -> tuple[str, ...]:
        """Gates listed in both lists, once each, in featureGates order: virt-operator refuses
        a change of the gates that leaves any (validateFeatureGates)."""
        off = set(self.disabled)
        return tuple(dict.fromkeys(g for g in self.enabled if g in off))


def feature_gates(enabled: Sequence[str], disabled: Sequence[str], version: str) -> FeatureGates:
    return FeatureGates(tuple(enabled), tuple(disabled), version, release_of(version))


# --- how messages say it ------------------------------------------------------------------------

#: What a reading for an unknown version adds, where 1.9 would read the gate otherwise.
UNKNOWN_NOTE = "its version is unknown, read as before 1.9"
BETA_NOTE = "on KubeVirt 1.9 and later {which} Beta and on unless disabled"


def gate_off(reading: GateReading) -> str:
    """The verb a message puts between the CR and an off gate: it lacks or disables it."""
    return "disables" if reading.disabled else "lacks"


def _by_list(readings: Sequence[GateReading]) -> tuple[list[str], list[str]]:
    """Off gates that featureGates lacks, and those disabledFeatureGates lists."""
    return [r.gate for r in readings if not r.disabled], [r.gate for r in readings if r.disabled]


def why_off(readings: Sequence[GateReading]) -> str:
    """Why these gates (all off) are off, after the CR's name: "lacks A in featureGates",
    "lists B in disabledFeatureGates", with the note when the version is unknown."""
    lacking, disabled = _by_list(readings)
    parts = []
    if lacking:
        parts.append(f"lacks {few(lacking)} in featureGates")
    if disabled:
        parts.append(f"lists {few(disabled)} in disabledFeatureGates")
    text = " and ".join(parts)
    later = [r.gate for r in readings if r.beta_on_later]
    if later:
        which = "this gate is" if len(later) == 1 else f"{few(later)} are"
        text += f" ({UNKNOWN_NOTE}; {BETA_NOTE.format(which=which)})"
    return text


def gate_state(readings: Sequence[GateReading]) -> str:
    """The CR's link in a chain: what its lists say of these (off) gates."""
    lacking, disabled = _by_list(readings)
    parts = []
    if lacking:
        parts.append(f"no {', '.join(lacking)} in {FEATURE_GATES_FIELD}")
    if disabled:
        parts.append(f"{', '.join(disabled)} in {DISABLED_GATES_FIELD}")
    text = "; ".join(parts)
    if any(r.beta_on_later for r in readings):
        text += f" ({UNKNOWN_NOTE})"
    return text


def turn_on_steps(readings: Sequence[GateReading], where: str) -> tuple[str, ...]:
    """The remediation that turns these gates on in the CR ``where`` names. A disabled gate
    leaves disabledFeatureGates first: added to featureGates alone it would be in both lists."""
    disabled = [r.gate for r in readings if r.disabled]
    listing = [r.gate for r in readings if r.needs_listing]
    steps = []
    if disabled:
        steps.append(f"remove {', '.join(disabled)} from {DISABLED_GATES_FIELD} of {where}")
    if listing:
        steps.append(f"add {', '.join(listing)} to {FEATURE_GATES_FIELD} of {where}")
    return tuple(steps)


def turn_on_instruction(readings: Sequence[GateReading]) -> str:
    """``turn_on_steps`` in short, for a message's last sentence."""
    removed = [r.gate for r in readings if r.disabled and not r.needs_listing]
    moved = [r.gate for r in readings if r.disabled and r.needs_listing]
    added = [r.gate for r in readings if not r.disabled]
    parts = []
    if removed:
        parts.append(f"remove {few(removed)} from disabledFeatureGates")
    if moved:
        parts.append(f"move {few(moved)} from disabledFeatureGates to featureGates")
    if added:
        parts.append(f"add {few(added)} to featureGates")
    return " and ".join(parts)
