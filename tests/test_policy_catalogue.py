"""The policy catalogue as a whole: identities, scopes, and each hazard on the home-lab cluster.

The per-policy tests judge each policy alone on small states; here every policy runs together
through ``gpu-guard check`` on examples/homelab/cluster.yaml, the incident cluster, so a change
gets exactly the verdicts a user would see, and no policy speaks where it should not.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

import policies.rules
from policies.cluster.kinds import JUDGED_KINDS, WATCHED_KINDS
from policies.registry import ALL_POLICIES, POLICIES_BY_ID
from policies.vocabulary.verdicts import Action
from webhook.cli import main

HOMELAB = Path(__file__).resolve().parents[1] / "examples" / "homelab"
STATE = str(HOMELAB / "cluster.yaml")
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"


# --- identities and scopes --------------------------------------------------------------------


def test_every_policy_module_is_registered_once() -> None:
    defined = set()
    for info in pkgutil.iter_modules(policies.rules.__path__):
        module = importlib.import_module(f"policies.rules.{info.name}")
        policy = getattr(module, "POLICY", None)
        if policy is not None:
            defined.add(policy.id)
    registered = [p.id for p in ALL_POLICIES]
    assert len(registered) == len(set(registered))
    assert defined == set(registered)


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=[p.id for p in ALL_POLICIES])
def test_each_policy_is_complete(policy: Any) -> None:
    assert KEBAB.match(policy.id)
    assert policy.summary.endswith(".")
    assert policy.default_reason.endswith(".")
    assert policy.scope, "a policy judges something"
    assert set(policy.scope) <= set(JUDGED_KINDS), "scope kinds must be watched or reviewed kinds"
    assert set(policy.reads) <= set(WATCHED_KINDS)
    if policy.default_action == Action.DENY:
        assert policy.reads, "a deny must say what knowledge it rests on"


# --- every hazard on the incident cluster -----------------------------------------------------


def node_labels(name: str, labels: dict[str, str | None]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def kubevirt_devices(*entries: tuple[str, str, bool], gates: list[str] | None = None) -> Any:
    configuration: dict[str, Any] = {
        "permittedHostDevices": {
            "pciHostDevices": [
                {"pciVendorSelector": s, "resourceName": r, "externalResourceProvider": e}
                for s, r, e in entries
            ]
        }
    }
    if gates is not None:
        configuration["developerConfiguration"] = {"featureGates": gates}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": configuration},
    }


def cluster_policy(**sandbox: Any) -> Any:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"sandboxWorkloads": sandbox},
    }


def gpu_pod(**spec: Any) -> Any:
    container = {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda", "namespace": "ml"},
        "spec": {"containers": [container], **spec},
    }


HAZARDS = [
    pytest.param(
        node_labels("omen1", {"nvidia.com/gpu.deploy.vfio-manager": "true"}),
        "vfio-rebind-with-gpu-pods",
        "killing 2 GPU pods (ml/jupyter-alice and ml/train-llama-0)",
        id="vfio-manager under omen1's CUDA pods is denied",
    ),
    pytest.param(
        node_labels("omen1", {"nvidia.com/gpu.workload.config": "vm_passthrough"}),
        "workload-label-invalid",
        "runs omen1 as container (ClusterPolicy default). Did you mean vm-passthrough?",
        id="a misspelt mode on omen1 is warned about, and its CUDA pods keep their GPUs",
    ),
    pytest.param(
        node_labels("tower1", {"nvidia.com/gpu.workload.config": "container"}),
        "passthrough-to-container-with-live-vms",
        "under live GPU VMs vms/win11-gaming",
        id="tower1 to container under win11-gaming is denied",
    ),
    pytest.param(
        node_labels("omen1", {"nvidia.com/mig.config": "all-1g.10gb"}),
        "mig-reconfig-with-gpu-pods",
        "set to all-1g.10gb on omen1 while 2 GPU pods run there",
        id="a MIG layout under omen1's CUDA pods is denied",
    ),
    pytest.param(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "tower1"},
            "spec": {"unschedulable": True},
        },
        "cordon-sole-provider",
        f"cordoning tower1, the only healthy provider of {RTX_3090}, while vms/win11-gaming "
        "(here) uses it",
        id="cordoning tower1, the only healthy RTX 3090, is warned",
    ),
    pytest.param(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": "win11-gaming", "namespace": "vms"},
            "spec": {"template": {"spec": {"evictionStrategy": "LiveMigrate"}}},
        },
        "evictionstrategy-not-migratable",
        "evictionStrategy LiveMigrate (its own)",
        id="win11-gaming set to LiveMigrate is warned",
    ),
    pytest.param(
        kubevirt_devices(("10DE:2B85", RTX_5090, True)),
        "permitted-device-in-use-removed",
        f"removes {RTX_3090} while vms/old-ci-runner and vms/win11-gaming use it",
        id="dropping the RTX 3090 entry win11-gaming uses is denied",
    ),
    pytest.param(
        kubevirt_devices(("10DE:2B85", RTX_5090, True), ("10de:2204", RTX_3090, False)),
        "external-provider-flip",
        f"the sandbox plugin serves {RTX_3090} on tower1",
        id="flipping the RTX 3090 to KubeVirt's own plugin is warned (inferred)",
    ),
    pytest.param(
        cluster_policy(enabled=False),
        "sandbox-disable-with-live-vms",
        "moves tower1 (vm-passthrough -> container) under live GPU VMs vms/win11-gaming",
        id="turning sandbox workloads off under win11-gaming is denied",
    ),
    pytest.param(
        gpu_pod(nodeSelector={"kubernetes.io/hostname": "tower1"}),
        "gpu-pod-on-passthrough-node",
        "can only run on tower1 (vm-passthrough)",
        id="a CUDA pod pinned to tower1 is warned",
    ),
    pytest.param(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": "gpu-gaming-2", "namespace": "vms"},
            "spec": {
                "runStrategy": "Always",
                "template": {
                    "spec": {
                        "domain": {
                            "devices": {"hostDevices": [{"name": "g", "deviceName": RTX_3090}]}
                        }
                    }
                },
            },
        },
        None,
        "",
        id="a new VM with a permitted, provided hostDevice draws nothing",
    ),
]


@pytest.mark.parametrize(("change", "policy", "said"), HAZARDS)
def test_each_hazard_on_the_homelab_gets_exactly_its_policys_verdict(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any,
    policy: str | None,
    said: str,
) -> None:
    """At its default action, from the registry."""
    path = tmp_path / "change.yaml"
    path.write_text(yaml.safe_dump(change))
    code = main(["check", "-o", "json", "-f", str(path), "--state", STATE])
    out, err = capsys.readouterr()
    (result,) = orjson.loads(out)["results"]
    verdicts = [(v["policy"], v["action"]) for v in result["verdicts"]]
    if policy is None:
        assert verdicts == [], err
        assert code == 0
        return
    action = POLICIES_BY_ID[policy].default_action.label
    assert verdicts == [(policy, action)], err
    assert said in result["verdicts"][0]["message"]
    assert code == (1 if action == "deny" else 0)


def test_on_the_homelab_only_the_stuck_vms_draw_policy_findings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The new policies' audits find nothing there: win11-gaming has evictionStrategy None, every
    device is permitted, and no CUDA pod sits on a VM-mode node. (The diagnosis adds its own
    findings, under its own ids.)"""
    main(["audit", "--state", STATE, "--now", "2026-10-30T12:00:00Z", "-o", "json"])
    out, _ = capsys.readouterr()
    ids = {p.id for p in ALL_POLICIES}
    found = [
        (f["policy"], f["action"]) for f in orjson.loads(out)["findings"] if f["policy"] in ids
    ]
    assert found == [("passthrough-without-ready-provider", "warn")] * 2
