"""Inputs that must not pass silently (issue 13, 1-6): every input judged or refused.

A state with no Node, an empty change file, the second document of a file, a key given twice,
a change to an object the state does not hold, a manifest without a namespace: each is judged
or refused out loud, never an all-clear about nothing.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from policies.cluster.kinds import WATCHED_KINDS
from tests.builders import gpu_pod, node, vm
from webhook.cli import main
from webhook.state.snapshot import write_state_file

ROOT = Path(__file__).resolve().parents[1]
HOMELAB = ROOT / "examples" / "homelab"
STATE = str(HOMELAB / "cluster.yaml")
CHANGES = sorted((HOMELAB / "changes").glob("0[1-5]*.yaml"))
NOW = "2026-10-30T12:00:00Z"
SWITCH_OMEN1 = str(HOMELAB / "changes" / "01-switch-omen1-to-vm-passthrough.yaml")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def snapshot_of(tmp_path: Path, *objects: dict[str, Any]) -> str:
    """A state of ``objects`` alone as gpu-guard snapshot writes it: every kind listed, so a
    kind without an object here is none (not unseen, which would leave answers not judged)."""
    path = tmp_path / "state.yaml"
    write_state_file(list(objects), str(path), WATCHED_KINDS)
    return str(path)


def results(out: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = orjson.loads(out)["results"]
    return found


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}}


def config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "x"}}


DEPLOYMENTS_AND_A_CONFIG_MAP = yaml.safe_dump_all(
    [{**deployment(f"d{i}"), "metadata": {"name": f"d{i}", "namespace": "x"}} for i in range(3)]
    + [config_map("c")]
)

# --- 1. a state that holds nothing gpu-guard reads -------------------------------------------


def command(name: str, state: str) -> list[str]:
    return {
        "audit": ["audit", "--state", state, "--now", NOW],
        "check": ["check", "-f", SWITCH_OMEN1, "--state", state],
        "serve": ["serve", "--state", state, "--tls-cert", "c", "--tls-key", "k"],
    }[name]


@pytest.mark.parametrize("name", ["audit", "check", "serve"])
@pytest.mark.parametrize(
    "content, read",
    [
        ("", "read no objects"),
        ("# kubectl get ... failed\n", "read no objects"),
        ('{"apiVersion": "v1", "kind": "List", "items": []}', "read no objects"),
        (DEPLOYMENTS_AND_A_CONFIG_MAP, "read 3 Deployment, 1 ConfigMap"),
        (yaml.safe_dump(vm("v", gpus=["nvidia.com/X"])), "read 1 VirtualMachine"),
    ],
    ids=["an empty file", "comments only", "an empty List", "only other kinds", "VMs but no node"],
)
def test_a_state_without_nodes_exits_2_saying_what_was_read_and_that_no_node_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str, read: str
) -> None:
    state = write(tmp_path, "dump.yaml", content)
    code, out, err = run(capsys, *command(name, state))
    assert code == 2
    assert out == ""
    assert err.startswith(f"gpu-guard: {state}: {read}, and no Node: a state needs the nodes (")
    assert err.count("\n") == 1


@pytest.mark.parametrize("name", ["audit", "check"])
def test_kinds_no_policy_reads_are_named_once_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    extra = write(tmp_path, "extra.yaml", DEPLOYMENTS_AND_A_CONFIG_MAP)
    code, out, err = run(capsys, *command(name, STATE), "--state", STATE, extra)
    assert code == 1  # the recovery trap, the omen1 switch: the state is judged as before
    assert out
    assert err.splitlines() == [
        "gpu-guard: ignored: 3 Deployment, 1 ConfigMap (no policy reads these kinds)"
    ]


def test_serve_names_the_kinds_no_policy_reads_once_in_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    extra = write(tmp_path, "extra.yaml", DEPLOYMENTS_AND_A_CONFIG_MAP)
    argv = [*command("serve", STATE), "--state", STATE, extra, "--audit-interval", "0"]
    code, _, _ = run(capsys, *argv)
    assert code == 2  # the certificate files do not exist: refused after the state was read
    ignored = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in ignored] == [
        ("WARNING", "state: ignored: 3 Deployment, 1 ConfigMap (no policy reads these kinds)")
    ]


# --- 2. an empty change file -------------------------------------------------------------------


@pytest.mark.parametrize("output", ["text", "json"])
@pytest.mark.parametrize(
    "content",
    [
        "",
        "\n",
        "# only a comment\n",
        "---\n---\n",
        '{"apiVersion": "v1", "kind": "List", "items": []}',
    ],
    ids=["empty", "a blank line", "a comment", "separators only", "an empty List"],
)
def test_an_empty_change_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, output: str
) -> None:
    change = write(tmp_path, "change.yaml", content)
    code, out, err = run(capsys, "check", "-f", change, "--state", STATE, "-o", output)
    assert code == 2
    assert out == ""
    assert err == f"gpu-guard: {change}: no objects in it\n"


# --- 3. every document of a change file ----------------------------------------------------------


def homelab_changes_as_one_file(tmp_path: Path) -> str:
    return write(tmp_path, "all.yaml", "---\n".join(path.read_text() for path in CHANGES))


def test_every_document_of_a_change_file_is_judged_in_order_and_the_exit_is_the_worst(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    all_changes = homelab_changes_as_one_file(tmp_path)
    code, out, _ = run(capsys, "check", "-f", all_changes, "--state", STATE)
    assert code == 1
    separately = []
    for path in CHANGES:
        _, alone, _ = run(capsys, "check", "-f", str(path), "--state", STATE)
        separately.append(alone.replace(str(path), all_changes))
    assert out == "".join(separately)  # the five homelab changes touch five different objects


def test_check_json_of_several_documents_keeps_allowed_and_gives_one_result_per_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    all_changes = homelab_changes_as_one_file(tmp_path)
    code, out, _ = run(capsys, "check", "-f", all_changes, "--state", STATE, "-o", "json")
    assert code == 1
    report = orjson.loads(out)
    assert set(report) == {"allowed", "results"}
    assert report["allowed"] is False
    assert [(r["resource"]["name"], r["operation"], r["allowed"]) for r in report["results"]] == [
        ("omen1", "UPDATE", False),
        ("gpu-ubuntu", "CREATE", True),
        ("kubevirt", "UPDATE", True),
        ("gpu-typo", "CREATE", True),
        ("omen2", "UPDATE", True),
    ]


def small_gpu_cluster(tmp_path: Path) -> str:
    """One idle container-mode GPU node (and no pod anywhere)."""
    idle = node(
        "a",
        labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.workload.config": "container"},
        allocatable={"nvidia.com/gpu": "1"},
    )
    return snapshot_of(tmp_path, idle)


SWITCH_A = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "a", "labels": {"nvidia.com/gpu.workload.config": "vm-passthrough"}},
}


def test_a_later_document_is_judged_against_what_the_earlier_ones_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = small_gpu_cluster(tmp_path)
    switch = write(tmp_path, "switch.yaml", yaml.safe_dump(SWITCH_A))
    assert run(capsys, "check", "-f", switch, "--state", state)[0] == 0  # an idle node
    both = write(tmp_path, "both.yaml", yaml.safe_dump_all([gpu_pod("train", "a"), SWITCH_A]))
    code, out, _ = run(capsys, "check", "-f", both, "--state", state, "-o", "json")
    assert code == 1
    pod_created, switched = results(out)
    assert (pod_created["operation"], pod_created["allowed"]) == ("CREATE", True)
    assert (switched["operation"], switched["allowed"]) == ("UPDATE", False)
    assert "ml/train" in switched["verdicts"][0]["message"]


def test_a_later_document_naming_the_same_object_is_an_update_of_the_earlier_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = vm("gpu-new", gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"])
    relabelled = {**created, "metadata": {**created["metadata"], "labels": {"team": "ml"}}}
    change = write(tmp_path, "vm.yaml", yaml.safe_dump_all([created, relabelled, created]))
    code, out, _ = run(capsys, "check", "-f", change, "--state", STATE, "-o", "json")
    assert code == 0
    assert [r["operation"] for r in results(out)] == ["CREATE", "UPDATE", "UPDATE"]


def test_a_denied_document_leaves_the_object_as_it_was_for_the_next_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twice = write(tmp_path, "twice.yaml", "---\n".join([Path(SWITCH_OMEN1).read_text()] * 2))
    code, out, _ = run(capsys, "check", "-f", twice, "--state", STATE)
    assert code == 1
    assert out.count("denied the request: [workload-switch-with-gpu-pods]") == 2


# --- 4. a key given twice -----------------------------------------------------------------------

NODE_WITH_A_LABEL_TWICE = """\
apiVersion: v1
kind: Node
metadata:
  name: omen1
  labels:
    nvidia.com/gpu.workload.config: container
    nvidia.com/gpu.workload.config: vm-passthrough
"""
NODE_WITH_A_LABEL_TWICE_JSON = """\
{"apiVersion": "v1", "kind": "Node",
 "metadata": {"name": "omen1", "labels": {
   "nvidia.com/gpu.workload.config": "container",
   "nvidia.com/gpu.workload.config": "vm-passthrough"}}}
"""
CONFIG_WITH_A_POLICY_TWICE = """\
policies:
  workload-switch-with-gpu-pods: {action: deny}
  workload-switch-with-gpu-pods: {action: "off"}
"""
LABEL_TWICE = "key 'nvidia.com/gpu.workload.config' given twice in one mapping"


@pytest.mark.parametrize(
    "role, content, expected",
    [
        ("state", NODE_WITH_A_LABEL_TWICE, f"line 7: {LABEL_TWICE} (first at line 6)"),
        ("state", NODE_WITH_A_LABEL_TWICE_JSON, f"line 4: {LABEL_TWICE} (first at line 3)"),
        ("change", NODE_WITH_A_LABEL_TWICE, f"line 7: {LABEL_TWICE} (first at line 6)"),
        ("change", NODE_WITH_A_LABEL_TWICE_JSON, f"line 4: {LABEL_TWICE} (first at line 3)"),
        (
            "config",
            CONFIG_WITH_A_POLICY_TWICE,
            "line 3: key 'workload-switch-with-gpu-pods' given twice in one mapping "
            "(first at line 2)",
        ),
    ],
    ids=["a YAML state", "a JSON state", "a YAML change", "a JSON change", "a configuration"],
)
def test_a_key_given_twice_is_refused_naming_the_file_the_line_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], role: str, content: str, expected: str
) -> None:
    file = write(tmp_path, "twice.json" if content.startswith("{") else "twice.yaml", content)
    argv = {
        "state": ["audit", "--state", STATE, file],
        "change": ["check", "-f", file, "--state", STATE],
        "config": ["audit", "--state", STATE, "--config", file],
    }[role]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err == f"gpu-guard: {file}: {expected}\n"


def test_objects_pasted_together_without_a_separator_are_refused_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pasted = write(tmp_path, "all.yaml", "".join(path.read_text() for path in CHANGES))
    code, out, err = run(capsys, "check", "-f", pasted, "--state", STATE)
    assert code == 2
    assert out == ""
    assert "key 'apiVersion' given twice in one mapping" in err
    assert err.endswith("two objects without '---' between them?\n")


# --- 5. a change to an object the state does not hold ------------------------------------------

NOT_IN_STATE = "is not in the state: judged as a CREATE of exactly what the file holds"


@pytest.mark.parametrize(
    "change, name",
    [
        (SWITCH_A, "node/a"),
        (
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "KubeVirt",
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": {"permittedHostDevices": {"pciHostDevices": []}}},
            },
            "kubevirt.kubevirt.io/kubevirt",
        ),
        (
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "metadata": {"name": "v", "namespace": "vms", "labels": {"team": "ml"}},
            },
            "virtualmachine.kubevirt.io/v",
        ),
    ],
    ids=["a label-only node change", "a KubeVirt CR patch", "a label-only VM change"],
)
def test_a_change_to_an_object_missing_from_the_state_says_it_is_judged_as_a_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], name: str
) -> None:
    state = snapshot_of(tmp_path, node("b"))
    file = write(tmp_path, "change.yaml", yaml.safe_dump(change))
    code, out, _ = run(capsys, "check", "-f", file, "--state", state)
    assert code == 0
    note, created, judged = out.splitlines()
    assert [note, created] == [f"Note: {name} {NOT_IN_STATE}", f"{name} created (server dry run)"]
    assert judged.startswith("  gpu-guard: ")
    _, out, _ = run(capsys, "check", "-f", file, "--state", state, "-o", "json")
    (result,) = results(out)
    assert result["operation"] == "CREATE"
    assert result["note"] == f"{name} {NOT_IN_STATE}"


def test_a_whole_new_object_and_an_existing_one_carry_no_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    new_vm, existing_node = CHANGES[1], CHANGES[4]
    code, out, _ = run(capsys, "check", "-f", str(new_vm), str(existing_node), "--state", STATE)
    assert code == 0
    assert "Note:" not in out


# --- 6. manifests as kubectl reads them ----------------------------------------------------------


def without_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "namespace"}
    return {**obj, "metadata": meta}


@pytest.mark.parametrize(
    "flags, obj, namespace",
    [
        ([], without_namespace(vm("v", gpus=["nvidia.com/X"])), "default"),
        (["-n", "vms"], without_namespace(vm("v", gpus=["nvidia.com/X"])), "vms"),
        (["--namespace", "vms"], without_namespace(gpu_pod("p", "")), "vms"),
        (["-n", "ml"], vm("v", gpus=["nvidia.com/X"]), "vms"),
        (["-n", "vms"], SWITCH_A, ""),
        (["-n", "vms"], deployment("web"), "vms"),
        (["-n", "vms"], {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "c"}}, ""),
    ],
    ids=[
        "a VM goes to default",
        "a VM goes to the namespace given",
        "a pod goes to the namespace given",
        "a namespace written in the file stays",
        "a node is cluster-scoped",
        "a workload controller goes to the namespace given",
        "a kind gpu-guard does not know is judged as written",
    ],
)
def test_a_manifest_without_a_namespace_is_judged_in_the_namespace_given_when_its_kind_has_one(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    obj: dict[str, Any],
    namespace: str,
) -> None:
    change = write(tmp_path, "manifest.yaml", yaml.safe_dump(obj))
    code, out, err = run(capsys, "check", "-f", change, *flags, "--state", STATE, "-o", "json")
    assert code in (0, 1), err
    (result,) = results(out)
    assert result["resource"]["namespace"] == namespace


MALFORMED_VM = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {"name": "broken", "namespace": "vms"},
    "spec": {"template": {"spec": {"domain": {"devices": {"gpus": "nvidia.com/x"}}}}},
}
BROKEN = "VirtualMachine vms/broken: spec.template.spec.domain.devices.gpus: expected a list"


def test_one_bad_file_is_reported_and_the_others_are_still_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, "bad.yaml", yaml.safe_dump(MALFORMED_VM))
    broken_yaml = write(tmp_path, "broken.yaml", "a: [1, 2\n")
    argv = ["check", "-f", bad, broken_yaml, SWITCH_OMEN1, "--state", STATE]
    code, out, err = run(capsys, *argv)
    assert code == 2  # the worst: bad input, over the deny
    assert "denied the request: [workload-switch-with-gpu-pods]" in out
    assert err.splitlines() == [
        f"gpu-guard: {bad}: {BROKEN}, got string",
        f"gpu-guard: {broken_yaml}: not valid YAML at line 2, column 1: "
        "did not find expected ',' or ']'",
    ]
    code, out, _ = run(capsys, *argv, "-o", "json")
    assert code == 2
    report = orjson.loads(out)
    assert report["allowed"] is False
    assert [r["resource"]["name"] for r in report["results"]] == ["omen1"]
    assert [e.split(": ")[0] for e in report["errors"]] == [bad, broken_yaml]


def test_one_bad_document_is_reported_and_the_others_of_its_file_are_still_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = vm("fine", gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"])
    change = write(tmp_path, "two.yaml", yaml.safe_dump_all([MALFORMED_VM, good]))
    code, out, err = run(capsys, "check", "-f", change, "--state", STATE)
    assert code == 2
    assert out.splitlines()[-2] == "virtualmachine.kubevirt.io/fine created (server dry run)"
    assert err == f"gpu-guard: {change}: {BROKEN}, got string\n"


def manifests_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    write(folder, "b.yaml", yaml.safe_dump(vm("b", gpus=["nvidia.com/X"])))
    write(folder, "a.json", orjson.dumps(vm("a", gpus=["nvidia.com/X"])).decode())
    write(folder, "c.yml", yaml.safe_dump(vm("c", gpus=["nvidia.com/X"])))
    write(folder, "notes.txt", "not a manifest")
    write(folder, "sub/d.yaml", yaml.safe_dump(vm("d", gpus=["nvidia.com/X"])))
    return folder


@pytest.mark.parametrize(
    "flags, names",
    [
        ([], ["a", "b", "c"]),
        (["-R"], ["a", "b", "c", "d"]),
        (["--recursive"], ["a", "b", "c", "d"]),
    ],
    ids=["its own files", "-R: and its subdirectories'", "--recursive"],
)
def test_a_directory_is_read_as_its_yaml_and_json_files_in_name_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], names: list[str]
) -> None:
    folder = manifests_folder(tmp_path)
    code, out, err = run(capsys, "check", "-f", str(folder), *flags, "--state", STATE, "-o", "json")
    assert code == 0, err
    assert [r["resource"]["name"] for r in results(out)] == names


def test_a_directory_with_no_manifests_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "notes.txt", "nothing")
    code, out, err = run(capsys, "check", "-f", str(tmp_path), "--state", STATE)
    assert code == 2
    assert out == ""
    assert err == f"gpu-guard: {tmp_path}: no .yaml, .yml, .json files in it\n"


def test_standard_input_is_read_for_dash_and_named_as_kubectl_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(Path(SWITCH_OMEN1).read_bytes()))
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, _ = run(capsys, "check", "-f", "-", "--state", STATE)
    assert code == 1
    assert out.startswith('Error from server (Forbidden): error when patching "STDIN": ')
