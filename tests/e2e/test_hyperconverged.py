"""OpenShift Virtualization's HyperConverged against a real API server with HCO's real CRD: the
live guard lists and watches it, a ``kubectl apply`` of one permitting a PCI id no node has gets
the warning with the field as written, and HCO's own writes of the KubeVirt CR never reach the
guard (the kubevirt webhook's matchCondition), while an admin's direct edit of that CR is warned
that HCO reverts it. Under a running VM that uses the A10, the HyperConverged's jsonpatch
annotation that empties the permitted devices in two steps (stash, then move) is denied, as HCO
would apply it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import yaml

from tests.builders import node, vm
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import guard_configuration, render
from tests.e2e.objects import load
from tests.e2e.test_webhooks import register

NAMESPACE = "openshift-cnv"
HCO_SA = f"system:serviceaccount:{NAMESPACE}:hyperconverged-cluster-operator"
SA_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}")
A10 = "nvidia.com/GA102GL_A10"
Obj = dict[str, Any]


def hyperconverged(*pci: tuple[str, str]) -> Obj:
    return {
        "apiVersion": "hco.kubevirt.io/v1",
        "kind": "HyperConverged",
        "metadata": {"name": "kubevirt-hyperconverged", "namespace": NAMESPACE},
        "spec": {
            "virtualization": {
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {
                            "pciDeviceSelector": s,
                            "resourceName": r,
                            "externalResourceProvider": True,
                        }
                        for s, r in pci
                    ]
                }
            }
        },
    }


def hcos_kubevirt(*pci: tuple[str, str]) -> Obj:
    """The KubeVirt CR as HCO writes it: its name and labels, the devices in KubeVirt's spelling."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {
            "name": "kubevirt-kubevirt-hyperconverged",
            "namespace": NAMESPACE,
            "labels": {
                "app": "kubevirt-hyperconverged",
                "app.kubernetes.io/managed-by": "hco-operator",
            },
        },
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {
                            "pciVendorSelector": s,
                            "resourceName": r,
                            "externalResourceProvider": True,
                        }
                        for s, r in pci
                    ]
                },
                "developerConfiguration": {"featureGates": ["HostDevices"]},
            }
        },
    }


def apply(plane: ControlPlane, obj: Obj, *flags: str, as_user: str | None = None) -> str:
    """``kubectl apply`` of ``obj``: what kubectl printed (a denial included)."""
    done = plane.kubectl(
        "apply",
        *flags,
        "-f",
        "-",
        stdin=yaml.safe_dump(obj),
        as_user=as_user,
        as_groups=SA_GROUPS if as_user else (),
        check=False,
    )
    return done.stdout + done.stderr


async def test_a_hyperconverged_is_judged_by_its_translation_and_hcos_own_writes_never_sent(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    rendered = render("enforce")
    load(
        plane,
        [
            node(
                "a10-pt-1",
                labels={
                    "nvidia.com/gpu.workload.config": "vm-passthrough",
                    "feature.node.kubernetes.io/pci-0302_10de_2236.present": "true",
                },
                allocatable={A10: "1"},
            )
        ],
    )
    plane.create_namespace(NAMESPACE)
    plane.create_namespace("ml")  # register's canary VM
    plane.ensure_service_account(NAMESPACE, "hyperconverged-cluster-operator")
    plane.kubectl(
        "create", "role", "hco-kubevirt", "-n", NAMESPACE,
        "--verb=get,list,watch,create,update,patch", "--resource=kubevirts.kubevirt.io",
    )  # fmt: skip
    plane.kubectl(
        "create", "rolebinding", "hco-kubevirt", "-n", NAMESPACE, "--role=hco-kubevirt",
        f"--serviceaccount={NAMESPACE}:hyperconverged-cluster-operator",
    )  # fmt: skip
    config = tmp_path / "guard.yaml"
    config.write_text(guard_configuration(rendered))
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)

    # kubectl apply of a HyperConverged permitting the A10 the node has and an H100 none has
    said = apply(plane, hyperconverged(("10DE:2236", A10), ("10DE:2330", "nvidia.com/H100")))
    assert "hyperconverged.hco.kubevirt.io/kubevirt-hyperconverged created" in said, said
    assert "Warning: [permitted-device-without-hardware]" in said, said
    assert "spec.virtualization.permittedHostDevices.pciHostDevices[1] 10de:2330" in said, said
    assert "pciHostDevices[0]" not in said, said
    assert await guard.reviews(kind="HyperConverged", operation="CREATE", endpoint="validate")

    # HCO writes the KubeVirt CR, and dry-runs an update of it: neither is sent to the guard
    by_hco = hcos_kubevirt(("10DE:2236", A10), ("10DE:2330", "nvidia.com/H100"))
    said = apply(plane, by_hco, as_user=HCO_SA)
    assert "created" in said, said
    said = apply(plane, by_hco, "--dry-run=server", as_user=HCO_SA)
    assert "Warning" not in said, said
    assert await guard.reviews(kind="KubeVirt") == 0

    # an admin's direct edit of HCO's KubeVirt CR, once the live state holds the HyperConverged
    # and the CR: warned that HCO reverts it, naming the HyperConverged's field
    edited = hcos_kubevirt(("10DE:2236", A10))
    for _ in range(100):
        said = apply(plane, edited, "--dry-run=server")
        if "[kubevirt-config-reverted-by-hco]" in said:
            break
        await asyncio.sleep(0.1)
    assert "Warning: [kubevirt-config-reverted-by-hco] HCO reverts this edit of " in said, said
    assert "spec.virtualization.permittedHostDevices" in said, said
    assert await guard.reviews(kind="KubeVirt") > 0

    # a VM runs on the A10; the annotation stashes an empty list and moves it over the devices
    load(plane, [vm("a10-vm", namespace=NAMESPACE, gpus=[A10])])
    stash = "/spec/configuration/stash"
    two_steps = hyperconverged(("10DE:2236", A10), ("10DE:2330", "nvidia.com/H100"))
    two_steps["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": json.dumps(
            [
                {"op": "add", "path": stash, "value": []},
                {
                    "op": "move",
                    "from": stash,
                    "path": "/spec/configuration/permittedHostDevices/pciHostDevices",
                },
            ]
        )
    }
    for _ in range(100):  # until the live state holds the VM
        said = apply(plane, two_steps, "--dry-run=server")
        if "denied the request" in said:
            break
        await asyncio.sleep(0.1)
    assert "[permitted-device-in-use-removed]" in said and A10 in said, said
