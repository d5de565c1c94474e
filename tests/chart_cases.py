"""The chart's renders that the manifest tests hold to what they hold the overlays to: each
overlay's equivalent values (charts/gpu-guard/ci/), and at least one render per documented value
(charts/gpu-guard/README.md's table; tests/test_chart_values.py checks the table, the schema
and values.yaml against ``covers``, and what each render must show)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.helm import Render, values_file

OVERLAYS = ("audit", "enforce", "cert-manager", "monitoring")
OTHER_NAMESPACE = "gpu-system"
DIGEST = "sha256:" + "0123456789abcdef" * 4
MIRROR = "mirror.internal/gpu/gpu-guard"

MONITORING_ON: Mapping[str, Any] = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "dashboard": {"enabled": True},
}


@dataclass(frozen=True)
class Case:
    """A render, and the documented values it shows at work."""

    render: Render
    covers: tuple[str, ...] = ()


def case(values: Mapping[str, Any], *covers: str, namespace: str = "gpu-guard") -> Case:
    return Case(Render(values, namespace), covers)


CASES: dict[str, Case] = {
    **{f"overlay-{name}": Case(Render(values_file(name))) for name in OVERLAYS},
    "mode-enforce": case({"mode": "enforce"}, "mode"),
    "policy-actions-and-exemptions": case(
        {
            "mode": "enforce",
            "policies": {
                "cordon-sole-provider": {"action": "deny"},
                "workload-switch-with-gpu-pods": {
                    "exemptions": {"users": ["system:serviceaccount:ops:relabeler"]}
                },
                "gpu-node-not-ready": {"action": "off"},
            },
        },
        "policies",
    ),
    "a-policy-enforced-in-audit-mode": case(
        {"policies": {"vfio-rebind-with-gpu-pods": {"action": "deny"}}}, "policies"
    ),
    "a-mutation-on": case(
        {"mode": "enforce", "mutations": {"set-eviction-none-on-gpu-vms": {"enabled": True}}},
        "mutations",
    ),
    "exemptions": case(
        {
            "exemptions": {
                "users": ["system:serviceaccount:ops:relabeler"],
                "groups": ["ops:gpu-admins"],
                "objectSelector": {"matchLabels": {"gpu-guard.io/exempt": "true"}},
            }
        },
        "exemptions.users",
        "exemptions.groups",
        "exemptions.objectSelector",
    ),
    "excluded-namespaces": case(
        {"mode": "enforce", "excludedNamespaces": ["ci-runners", "sandbox"]},
        "excludedNamespaces",
    ),
    "gpu-operator-version": case({"gpuOperator": {"version": "v26.7.0"}}, "gpuOperator.version"),
    "device-taint-rules": case({"dra": {"deviceTaintRules": True}}, "dra.deviceTaintRules"),
    "webhook-settings-over-enforce": case(
        {
            "mode": "enforce",
            "webhooks": {
                "validating": {"nodes": {"failurePolicy": "Fail", "timeoutSeconds": 2}},
                "mutating": {"vms": {"timeoutSeconds": 1}},
            },
        },
        "webhooks.validating",
        "webhooks.mutating",
    ),
    "webhook-settings-over-audit": case(
        {"webhooks": {"validating": {"clusterpolicy": {"failurePolicy": "Fail"}}}},
        "webhooks.validating",
    ),
    "three-replicas": case({"replicas": 3}, "replicas"),
    "reports-as-openreports": case({"reports": {"format": "openreports"}}, "reports.format"),
    "one-replica-without-election": case(
        {"replicas": 1, "leaderElection": {"enabled": False}}, "replicas", "leaderElection.enabled"
    ),
    "one-replica-elected": case({"replicas": 1}, "replicas", "leaderElection.enabled"),
    "image-from-a-mirror": case(
        {"image": {"repository": MIRROR, "tag": "0.1.0-mirrored", "pullPolicy": "Always"}},
        "image.repository",
        "image.tag",
        "image.pullPolicy",
    ),
    "image-by-digest": case({"image": {"digest": DIGEST}}, "image.digest"),
    "image-pull-secrets": case({"image": {"pullSecrets": ["regcred"]}}, "image.pullSecrets"),
    "resources": case(
        {
            "resources": {
                "requests": {"cpu": "250m", "memory": "1Gi"},
                "limits": {"cpu": 2, "memory": "2Gi"},
            }
        },
        "resources",
    ),
    "placement": case(
        {
            "nodeSelector": {"node-role.kubernetes.io/infra": ""},
            "tolerations": [
                {
                    "key": "node-role.kubernetes.io/infra",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/arch",
                                        "operator": "In",
                                        "values": ["amd64"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "gpu-guard"}},
                }
            ],
            "priorityClassName": "gpu-guard-critical",
        },
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
    ),
    "spread-by-topology-instead-of-anti-affinity": case(
        {
            "affinity": {"podAntiAffinity": None},
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "gpu-guard"}},
                }
            ],
        },
        "affinity",
        "topologySpreadConstraints",
    ),
    "security-contexts": case(
        {
            "podSecurityContext": {"fsGroupChangePolicy": "OnRootMismatch"},
            "securityContext": {"privileged": False},
        },
        "podSecurityContext",
        "securityContext",
    ),
    "cert-manager-chain": case({"certificates": {"mode": "certManager"}}, "certificates.mode"),
    "cert-manager-issuer-of-yours": case(
        {
            "certificates": {
                "mode": "certManager",
                "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
            }
        },
        "certificates.certManager.issuerRef",
    ),
    "service-monitor": case(
        {
            "monitoring": {
                "serviceMonitor": {
                    "enabled": True,
                    "labels": {"release": "prometheus"},
                    "interval": "1m",
                    "scrapeTimeout": "20s",
                }
            }
        },
        "monitoring.serviceMonitor.enabled",
        "monitoring.serviceMonitor.labels",
        "monitoring.serviceMonitor.interval",
        "monitoring.serviceMonitor.scrapeTimeout",
    ),
    "prometheus-rule": case(
        {"monitoring": {"prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}}},
        "monitoring.prometheusRule.enabled",
        "monitoring.prometheusRule.labels",
    ),
    "dashboard": case(
        {"monitoring": {"dashboard": {"enabled": True, "labels": {"grafana_dashboard": "gpu"}}}},
        "monitoring.dashboard.enabled",
        "monitoring.dashboard.labels",
    ),
    "rendered-without-the-clusters-api-versions": Case(
        Render({"checkCRDs": False, "monitoring": MONITORING_ON}, api_versions=()), ("checkCRDs",)
    ),
    "another-namespace": case({}, namespace=OTHER_NAMESPACE),
    "everything-in-another-namespace": case(
        {
            "mode": "enforce",
            "certificates": {"mode": "certManager"},
            "monitoring": MONITORING_ON,
            "excludedNamespaces": ["sandbox"],
        },
        namespace=OTHER_NAMESPACE,
    ),
}
