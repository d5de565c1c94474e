"""Dynamic Resource Allocation on the real ``resource.k8s.io/v1``: DeviceClasses, ResourceSlices and
ResourceClaims whose allocation is written through the status subresource, as the scheduler writes
it; the core hazard denied on a GPU a pod holds through its claim; and the API server's own CEL
checks of a selector beside what gpu-guard says of the same selector (docs/dra.md, "The API
server's CEL checks and gpu-guard's").

The enforce overlay's webhooks are registered by url to a real ``serve`` (as in test_webhooks.py);
what a person types is kubectl, what gpu-guard would say offline is ``gpu-guard check``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.builders import node
from tests.dra_builders import device_class, resource_claim
from tests.e2e import crds
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard, guard_configuration, render
from tests.e2e.objects import as_a_kubelet_writes_them, load
from tests.e2e.test_webhooks import WORKLOAD, register
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dra" / "cluster.yaml"
RECORDED = ROOT / "tests" / "fixtures" / "dra" / "objects.yaml"
DRA = "/apis/resource.k8s.io/v1"
DENIED = 'admission webhook "nodes.validate.gpu-guard.io" denied the request: '
Obj = dict[str, Any]


def items(path: Path) -> list[Obj]:
    listed: list[Obj] = yaml.safe_load(path.read_text())["items"]
    return listed


def recorded_cluster() -> list[Obj]:
    """What the recording left (tests/fixtures/dra): its DRA objects, pods, VM and VMI, with the
    two nodes it made, Ready (``kubectl get`` of the recording listed no nodes): omen2 in
    container mode, its GPU held by ml/train-dra through claim ml/train-gpu; tower1 for VMs."""
    gpu = {"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/pci-10de.present": "true"}
    return [
        node("omen2", labels={**gpu, WORKLOAD: "container"}),
        node("tower1", labels={**gpu, WORKLOAD: "vm-passthrough"}),
        *items(RECORDED),
    ]


@dataclass(frozen=True)
class Held:
    """A node whose GPU a pod holds through an allocated claim, and how the deny names them."""

    source: str
    objects: list[Obj]
    node: str
    claim: str
    named: str


HELD = [
    Held(
        "examples-dra",
        as_a_kubelet_writes_them(items(EXAMPLE)),
        "omen1",
        "ml/train-llama-gpu",
        "ml/train-llama-0 (claim ml/train-llama-gpu: gpu-0)",
    ),
    Held(
        # The driver republished omen2's pool without gpu-0; the allocation still stands.
        "recorded-dra",
        recorded_cluster(),
        "omen2",
        "ml/train-gpu",
        "ml/train-dra (claim ml/train-gpu: gpu-0 (no longer published))",
    ),
]


async def guarded(plane: ControlPlane, serve: ServeGuard, tmp_path: Path) -> Guard:
    """A serve with the enforce overlay's configuration, its webhooks registered by url."""
    rendered = render("enforce")
    config = tmp_path / "guard.yaml"
    config.write_text(guard_configuration(rendered))
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)
    return guard


def claim_path(key: str) -> str:
    namespace, name = key.split("/")
    return f"{DRA}/namespaces/{namespace}/resourceclaims/{name}"


@pytest.mark.parametrize("held", HELD, ids=lambda h: h.source)
async def test_a_relabel_under_a_pod_holding_the_gpu_through_its_claim_is_denied_naming_both(
    held: Held, own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    loaded = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in load(plane, held.objects)
    }

    # The DRA objects are served by the real v1 API, the allocation set through status.
    names = plane.kubectl("get", "deviceclasses,resourceslices", "-o", "name").stdout.split()
    wanted = sorted(
        f"{o['kind'].lower()}.resource.k8s.io/{o['metadata']['name']}"
        for o in held.objects
        if o["kind"] in ("DeviceClass", "ResourceSlice")
    )
    assert sorted(names) == wanted
    recorded = next(
        o
        for o in held.objects
        if o["kind"] == "ResourceClaim"
        and f"{o['metadata']['namespace']}/{o['metadata']['name']}" == held.claim
    )
    claim = plane.call("GET", claim_path(held.claim))
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["status"]["allocation"] == recorded["status"]["allocation"]
    (consumer,) = claim["status"]["reservedFor"]
    pod = loaded[("Pod", claim["metadata"]["namespace"], consumer["name"])]
    assert consumer["uid"] == pod["metadata"]["uid"]  # as the scheduler writes it

    await guarded(plane, serve, tmp_path)
    done = plane.kubectl(
        "label", "node", held.node, f"{WORKLOAD}=vm-passthrough", "--overwrite", check=False
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert f"{DENIED}[workload-switch-with-gpu-pods] node {held.node} would move" in said, said
    assert held.named in said, said
    # The same relabel through nodes/status (issue 32): judged alike.
    status_patch = orjson.dumps({"metadata": {"labels": {WORKLOAD: "vm-passthrough"}}}).decode()
    done = plane.kubectl(
        "patch", "node", held.node, "--subresource=status", "--type=merge", "-p", status_patch,
        check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 1 and held.named in said, said
    assert f"{DENIED}[workload-switch-with-gpu-pods] node {held.node} would move" in said, said
    labels = plane.call("GET", f"/api/v1/nodes/{held.node}")["metadata"]["labels"]
    assert labels[WORKLOAD] == "container"


# --- the API server's CEL checks, and gpu-guard's ------------------------------------------------


@dataclass(frozen=True)
class Selector:
    """A selector, what the API server answers when a DeviceClass or a claim carries it, and
    what gpu-guard says of it (part of the reason its warnings give)."""

    expression: str
    refused: str | None
    """Part of the API server's 422 message; None when it accepts the selector."""
    guard: str


TOO_LONG = "device.driver == '" + "x" * 10240 + "'"
SELECTORS = [
    # Refused by both: a CEL compiler's errors.
    Selector(
        "device.driver == ",
        "compilation failed: ERROR: <input>:1:18: Syntax error: mismatched input '<EOF>'",
        "does not compile: syntax error at column 15",
    ),
    Selector(
        "devices.driver == 'gpu.nvidia.com'",
        "undeclared reference to 'devices'",
        "does not compile: undeclared reference to 'devices'",
    ),
    Selector(
        "device.driver.startsWithText('gpu')",
        "undeclared reference to 'startsWithText'",
        "does not compile: found no matching overload for 'startsWithText'",
    ),
    Selector(TOO_LONG, "Too long: may not be more than 10240 bytes", "is longer than the API"),
    # Refused at admission by the API server's type checker; gpu-guard finds out on a device.
    Selector(
        "device.driver",
        "must evaluate to bool or the unknown type, not string",
        "evaluates to string, not a bool",
    ),
    Selector(
        "device.capacity['gpu.nvidia.com'].memory > 5",
        "found no matching overload for '_>_' applied to '(kubernetes.Quantity, int)'",
        "fails on this device: found no matching overload for '_>_' applied to "
        "'(kubernetes.Quantity, int)'",
    ),
    Selector(
        "device.driver.matches('[')",
        "invalid matches argument",
        "fails on this device: not a regular expression: missing ]",
    ),
    Selector(
        "'gpu.nvidia.com'.format([device.driver]) == device.driver",
        "too many arguments supplied to string.format (expected 0, got 1)",
        "uses format(), which this evaluator does not have",
    ),
    # Accepted: attributes are of no declared type; what fails, fails on a device.
    Selector(
        "device.attributes['gpu.nvidia.com'].type == 1",
        None,
        "fails on this device: found no matching overload for '_==_' applied to '(string, int)'",
    ),
    Selector(
        "device.attributes['gpu.nvidia.com'].type.isGreaterThan(quantity('1'))",
        None,
        "fails on this device: no such overload for string and kubernetes.Quantity",
    ),
    Selector(
        "semver('not-a-version').major() == 1",
        None,
        "fails on this device: not a semantic version: 'not-a-version'",
    ),
    Selector(
        "device.allowMultipleAllocations == false",
        None,
        "fails on this device: no such member in mapping: 'allowMultipleAllocations'",
    ),
    # Accepted: what this evaluator does not run.
    Selector(
        "'%s'.format([device.driver]) == 'gpu.nvidia.com'",
        None,
        "uses format(), which this evaluator does not have",
    ),
    Selector(
        "cel.bind(t, device.attributes['gpu.nvidia.com'].type, t == 'gpu')",
        None,
        "uses bind(), which this evaluator does not have",
    ),
    Selector(
        "device.attributes['gpu.nvidia.com'].exists(a, [1].all(b, [2].all(c, c > b)))",
        None,
        "nests comprehensions deeper than 2 levels",
    ),
]


PROBE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "probes.e2e.gpu-guard.io"},
    "spec": {
        "group": "e2e.gpu-guard.io",
        "scope": "Namespaced",
        "names": {
            "plural": "probes",
            "singular": "probe",
            "kind": "Probe",
            "listKind": "ProbeList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"type": {"type": "string"}},
                                "x-kubernetes-validations": [
                                    {"rule": "dyn(self.type) == 1"},
                                    {"rule": "dyn(self.type) > 1"},
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}
"""A rule per comparison of a string attribute with an int, as a selector would make it."""


def selector_objects(index: int, expression: str) -> tuple[Obj, Obj]:
    """A DeviceClass and a ml claim of the chart's GPU class, each with the one selector."""
    claim = resource_claim(f"selector-{index}", "ml", selectors=[expression])
    del claim["status"]
    return device_class(f"selector-{index}", expression), claim


async def reviewed(guard: Guard, kind: str, before: float) -> None:
    """Until the guard counts one more review of ``kind`` than ``before``."""
    for _ in range(200):
        if await guard.reviews(kind=kind) > before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the guard was sent no {kind}")


def warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("Warning: ")]


def checked(
    capsys: pytest.CaptureFixture[str], folder: Path
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``gpu-guard check`` of every file in ``folder`` against the example's state: by
    ``<kind>/<name>``, the warning lines it prints (as kubectl would) and its verdicts' messages."""
    argv = ["check", "-f", str(folder), "--state", str(EXAMPLE)]
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert main([*argv, "-o", "json"]) == 0
    verdicts = orjson.loads(capsys.readouterr().out)["results"]
    lines: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in printed.splitlines():
        done = re.match(r"(deviceclass|resourceclaim)\.resource\.k8s\.io/(\S+) created", line)
        if done:
            lines[f"{done[1]}/{done[2]}"] = pending
            pending = []
        elif line.startswith("Warning: "):
            pending.append(line)
    messages = {
        f"{r['resource']['kind'].lower()}/{r['resource']['name']}": [
            v["message"] for v in r["verdicts"]
        ]
        for r in verdicts
    }
    return lines, messages


async def test_the_api_servers_cel_checks_and_gpu_guards_judgement_of_a_selector_hold_together(
    own_control_plane: ControlPlane,
    serve: ServeGuard,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plane = own_control_plane
    load(plane, items(EXAMPLE))
    guard = await guarded(plane, serve, tmp_path)
    folder = tmp_path / "selectors"
    folder.mkdir()
    for i, selector in enumerate(SELECTORS):
        for obj in selector_objects(i, selector.expression):
            (folder / f"{i:02d}-{obj['kind'].lower()}.yaml").write_text(yaml.safe_dump(obj))
    offline, messages = checked(capsys, folder)

    # The first selector gpu-guard evaluates live loads its CEL library: not within a timeout.
    canary = yaml.safe_dump(device_class("canary", "device.driver == 'gpu.nvidia.com'"))
    for _ in range(50):
        plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=canary)
        if await guard.reviews(kind="DeviceClass"):
            break
    else:
        raise AssertionError("the API server never sent a DeviceClass to the guard")

    accepted = []
    for i, selector in enumerate(SELECTORS):
        for obj in selector_objects(i, selector.expression):
            key = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
            sent = await guard.reviews(kind=obj["kind"])
            done = plane.kubectl(
                "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj), check=False
            )
            # What gpu-guard says of it, offline as live: it cannot be judged (never "matches"
            # or "matches nothing"), and why.
            (message,) = messages[key]
            assert "cannot be judged" in message and selector.guard in message, (key, message)
            if selector.refused is None:
                assert done.returncode == 0, (key, done.stderr)
                await reviewed(guard, obj["kind"], sent)
                assert warnings(done.stderr) == offline[key], key
                accepted.append(message)
            else:
                assert done.returncode == 1, (key, done.stderr)
                assert selector.refused in done.stderr, (key, done.stderr)
                assert await guard.reviews(kind=obj["kind"]) == sent  # never sent to gpu-guard
                # ``check`` prints what kubectl would: here a warning and "created", not the 422.
                assert offline[key], key

    # The relation docs/dra.md states: gpu-guard calls no selector the API server accepts
    # invalid; what it cannot run there is its own limit or fails on a device.
    assert [m for m in accepted if "does not compile" in m] == []

    # What the scheduler's CEL (cel-go, the API server's) makes of a string compared with an
    # int, read off a CRD validation rule: == is false, > an error. gpu-guard judges neither.
    crds.install(plane, [PROBE_CRD])
    status, answer = plane.request(
        "POST",
        "/apis/e2e.gpu-guard.io/v1/namespaces/ml/probes",
        {
            "apiVersion": "e2e.gpu-guard.io/v1",
            "kind": "Probe",
            "metadata": {"name": "p"},
            "spec": {"type": "gpu"},
        },
    )
    assert status == 422, answer
    causes = [cause["message"] for cause in answer["details"]["causes"]]
    assert causes == [
        "Invalid value: failed rule: dyn(self.type) == 1",
        "Invalid value: \"object\": 'no such overload': call arguments did not match a supported "
        "operator, function or macro signature for rule: dyn(self.type) > 1",
    ]
