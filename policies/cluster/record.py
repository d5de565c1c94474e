"""The record the API server's own policy reads when gpu-guard cannot answer (docs/security.md,
"When gpu-guard is down").

A ValidatingAdmissionPolicy cannot list pods: it sees the request and one params object. The
audit leader keeps that object, the ConfigMap ``gpu-guard-record``, current with what the
node-label deny policies read from the cluster, precomputed per node, so the policy
(``manifests/base/record.yaml``) denies what they deny. One builder, pure over the view: the
same answer for the leader's writes and for the test that holds the CEL to the Python rules.

A ConfigMap's data is a map of strings, and Kubernetes CEL has no JSON parser, so every fact is
its own key (a node name is a DNS subdomain, valid in a ConfigMap key):

- ``pods.<node>``: the node's GPU users as ``gpu_users_on`` counts them ("2: ml/a (...), ml/b");
- ``vms.<node>``: its VM-like users, live GPU VMIs and Kata pods (``vm_users_on``);
- ``vgpu.<node>``: its live VMIs holding vGPUs (``vgpu_holders_on``, under its labels now);
- ``clusterPolicies``: each ClusterPolicy that may be in force as the rules read it (its
  sandbox workloads and default mode, the CC manager and its default, whether the workload
  label is ignored), so the policy, like the rules, denies if it would under any
  (``cluster_facts``);
- ``deny``: the ids of the carried policies configured to deny, so a configuration reload that
  sets one to warn or off reaches the API server's policy too;
- ``judged``: those configured to anything but off, which the audit overlay's (and the chart's
  audit mode's) copy of the policy judges instead, under validationActions [Audit];
- ``known``: every policy id, since an override naming an unknown one overrides nothing;
- ``exempt`` and ``exempt.<scope>.users|groups|labels``: the exemptions in force that can match
  a Node request (``all`` for the global ones, a policy id for its own, expired ones left out):
  users and groups one a line, a label selector as one requirement a line, ``Op key v1,v2``;
- ``asOf``: when the leader computed it (RFC 3339), which every denial quotes.

A node without users has no key: a missing key, like a missing record, never denies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from policies.cluster.cc_mode import default_cc_mode
from policies.cluster.gpu_operator import ClusterPolicyInfo, workload_label_ignored
from policies.cluster.gpu_users import gpu_users_on, vm_users_on
from policies.cluster.vgpu import vgpu_holders_on
from policies.cluster.view import ClusterView

RECORD_NAME = "gpu-guard-record"
AS_OF = "asOf"
DENY = "deny"
JUDGED = "judged"
KNOWN = "known"
CLUSTER_POLICIES = "clusterPolicies"
EXEMPT = "exempt"
#: The scope of the global exemptions in ``exempt`` (policy ids are lowercase with dashes).
EVERY_POLICY = "all"
#: The deny policies the record carries: every one that judges a node's GPU-mode labels.
CARRIED = (
    "workload-switch-with-gpu-pods",
    "vfio-rebind-with-gpu-pods",
    "mig-reconfig-with-gpu-pods",
    "vgpu-reconfig-with-live-vms",
    "passthrough-to-container-with-live-vms",
    "cc-mode-change-with-gpu-users",
)
#: Names per node kept in the record: enough to say who, bounded at any scale.
NAMED = 3
#: A value's length at most (pod names may be 253 characters long).
MAX_VALUE = 100
#: A ConfigMap holds at most 1 MiB; past this the record keeps counts only (``bounded``).
MAX_BYTES = 900_000
UNKNOWN = "unknown"


def _users(names: list[str]) -> str:
    """ "2: ml/a, ml/b", or "5: a, b, c, ..." past ``NAMED``, cut at ``MAX_VALUE``."""
    shown = ", ".join(names[:NAMED]) + (", ..." if len(names) > NAMED else "")
    text = f"{len(names)}: {shown}"
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."


def size(data: Mapping[str, str]) -> int:
    """About the bytes the data takes in the stored ConfigMap (keys, values, JSON quoting)."""
    return sum(len(k.encode()) + len(v.encode()) + 6 for k, v in data.items())


def bounded(data: dict[str, str]) -> dict[str, str]:
    """The data within ``MAX_BYTES``: the per-node values cut to their counts when the names
    would not fit (a denial then says how many users, not who: the guard, when up, names them)."""
    if size(data) <= MAX_BYTES:
        return data
    per_node = ("pods.", "vms.", "vgpu.")
    return {k: v.split(":", 1)[0] if k.startswith(per_node) else v for k, v in data.items()}


def _facts(policy: ClusterPolicyInfo | None, view: ClusterView) -> str:
    """One ClusterPolicy's facts as the node rules read them, ``|``-separated: its name, sandbox
    workloads (true, false, unknown without one), their default mode, the CC manager enabled,
    its default mode, whether the workload label is ignored (a GPUCluster and no ClusterPolicy).
    """
    ignored = workload_label_ignored(policy, view.gpu_clusters())
    return "|".join(
        (
            "" if policy is None else policy.name,
            UNKNOWN if policy is None else str(policy.sandbox_enabled).lower(),
            "" if policy is None else policy.default_workload,
            UNKNOWN if policy is None else str(policy.cc_enabled).lower(),
            default_cc_mode(policy),
            str(ignored).lower(),
        )
    )


def cluster_facts(view: ClusterView) -> dict[str, str]:
    """The facts of every ClusterPolicy that may be in force (``cluster_policies_in_force``: the
    oldest from GPU Operator v26.7.0, else each), ``;``-separated, oldest first; with none, the
    facts of no ClusterPolicy. The policy judges under each and denies if any would, as the
    rules do (``policy_in_force.under_each_policy_in_force``)."""
    in_force = view.cluster_policies_in_force() or (None,)
    return {CLUSTER_POLICIES: ";".join(_facts(policy, view) for policy in in_force)}


def configured(
    denying: Iterable[str], judging: Iterable[str], known: Iterable[str]
) -> dict[str, str]:
    """The configuration's keys: ``denying`` the policy ids configured to deny, ``judging`` those
    not off, ``known`` every policy id (exemptions: ``exemption_keys``)."""
    denies, judges = set(denying), set(judging)
    return {
        DENY: ",".join(p for p in CARRIED if p in denies),
        JUDGED: ",".join(p for p in CARRIED if p in judges),
        KNOWN: ",".join(sorted(known)),
    }


def selector_lines(requirements: Iterable[tuple[str, str, Iterable[str]]]) -> str:
    """A label selector's requirements (key, operator, values) as the policy's CEL reads them:
    ``Op key v1,v2`` a line (label keys and values hold no space, comma or newline)."""
    return "\n".join(
        f"{op} {key} {','.join(sorted(values))}".rstrip() for key, op, values in requirements
    )


def exemption_keys(
    scopes: Mapping[str, tuple[Iterable[str], Iterable[str], str]],
) -> dict[str, str]:
    """Per scope (``EVERY_POLICY`` or a carried policy id): its users, groups and label
    requirements (``selector_lines``), as record keys; empty parts and scopes left out."""
    data: dict[str, str] = {}
    for scope, (users, groups, labels) in scopes.items():
        parts = {"users": "\n".join(sorted(users)), "groups": "\n".join(sorted(groups))}
        parts["labels"] = labels
        kept = {f"{EXEMPT}.{scope}.{part}": text for part, text in parts.items() if text}
        if kept:
            data.update(kept)
            data[EXEMPT] = ",".join(filter(None, (data.get(EXEMPT, ""), scope)))
    return data


def record_data(view: ClusterView, settings: Mapping[str, str]) -> dict[str, str]:
    """The record's content without its time: what decides whether it must be rewritten.
    ``settings``: the configuration's keys (``configured``, ``exemption_keys``)."""
    in_force = view.cluster_policies_in_force() or (None,)
    data = {**cluster_facts(view), **settings}
    for node in view.nodes():
        pods = gpu_users_on(node.name, view)
        if pods:
            data[f"pods.{node.name}"] = _users([p.key for p in pods])
        vms = vm_users_on(node.name, view)
        if vms:
            data[f"vms.{node.name}"] = _users([u.key for u in vms])
        # Held under any ClusterPolicy that may be in force: the rule denies if any would.
        held = {
            (h.vmi.namespace, h.vmi.name): h.vmi.key
            for p in in_force
            for h in vgpu_holders_on(node.name, node.labels, view, p)
        }
        if held:
            data[f"vgpu.{node.name}"] = _users([held[k] for k in sorted(held)])
    return bounded(data)


def stamped(data: Mapping[str, str], now: datetime) -> dict[str, str]:
    """The data with its time, as the denial quotes it."""
    return {**data, AS_OF: now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def content_changed(written: Mapping[str, str] | None, data: Mapping[str, str]) -> bool:
    """Whether ``data`` differs from the record as written, its time aside: only then is it
    written again (no etcd churn from a leader that recomputes the same answer)."""
    if written is None:
        return True
    return {k: v for k, v in written.items() if k != AS_OF} != dict(data)
