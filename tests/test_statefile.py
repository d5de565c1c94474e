"""State files: every format people have; errors name the file, the object and the field."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from tests import FIXTURES
from tests.builders import dead_node, gpu_pod, node
from tests.conftest import require_fixture
from webhook.state.files import StateFileError, load_state, read_objects


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


NODE_A = node("a", allocatable={"nvidia.com/gpu": "1"})
POD_A = gpu_pod("train", "a")


@pytest.mark.parametrize(
    "name, text",
    [
        (
            "list.yaml",
            yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [NODE_A, POD_A]}),
        ),
        ("stream.yaml", yaml.safe_dump_all([NODE_A, None, POD_A])),
        ("list.json", orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE_A, POD_A]})),
        ("array.json", orjson.dumps([NODE_A, POD_A])),
        (
            "typed-list.yaml",
            yaml.safe_dump({"apiVersion": "v1", "kind": "NodeList", "items": [NODE_A]})
            + "---\n"
            + yaml.safe_dump(POD_A),
        ),
    ],
    ids=[
        "a kind List",
        "a YAML stream",
        "a JSON List",
        "a JSON array",
        "a typed list then an object",
    ],
)
def test_state_loads_from_every_format_kubectl_prints(tmp_path: Path, name: str, text: str) -> None:
    state = load_state([write(tmp_path, name, text)])
    assert state.node("a") is not None
    assert [p.key for p in state.gpu_pods_on("a")] == ["ml/train"]


def test_later_files_win_for_an_object_named_twice(tmp_path: Path) -> None:
    first = write(tmp_path, "1.yaml", yaml.safe_dump(node("a")))
    second = write(tmp_path, "2.yaml", yaml.safe_dump(dead_node("a")))
    state = load_state([first, second])
    assert state.healthy_provider_count("nvidia.com/gpu") == 0
    node_a = state.node("a")
    assert node_a is not None and node_a.condition("Ready") is not None


def test_kinds_no_policy_reads_are_ignored(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "y"}}
    state = load_state([write(tmp_path, "s.yaml", yaml.safe_dump_all([cm, NODE_A]))])
    assert state.counts()["Node"] == 1


def bad(obj_path: str, value: object) -> dict[str, object]:
    """NODE_A with one field replaced, addressed as 'a.b.c'."""
    obj = orjson.loads(orjson.dumps(NODE_A))
    parts = obj_path.split(".")
    target = obj
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    return dict(obj)


@pytest.mark.parametrize(
    "content, expected",
    [
        ("{not json", "not valid JSON"),
        ("a: [1, 2\n", "not valid YAML at line"),
        ("a: 2026-13-45T00:00:00Z\n", "not valid YAML: month must be in 1..12"),
        ("- 1\n- 2\n", "document 1: expected an object"),
        (yaml.safe_dump({"kind": "List", "items": "x"}), "items: expected a list"),
        (yaml.safe_dump({"kind": "Node", "metadata": {"name": "a"}}), "apiVersion: missing"),
        (yaml.safe_dump({"apiVersion": "v1", "kind": "Node"}), "metadata: missing"),
        (
            yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            "Pod p: metadata.namespace: a Pod must have a namespace",
        ),
        (
            yaml.safe_dump(bad("metadata.labels", ["x"])),
            "Node a: metadata.labels: expected a mapping",
        ),
        (
            yaml.safe_dump(bad("status.allocatable", {"nvidia.com/gpu": "lots"})),
            "Node a: status.allocatable.nvidia.com/gpu: not a quantity",
        ),
        (
            yaml.safe_dump(bad("spec", {"taints": [5]})),
            "Node a: spec.taints[0]: expected a mapping",
        ),
        (
            yaml.safe_dump(
                bad("status.conditions", [{"type": "Ready", "lastTransitionTime": "soon"}])
            ),
            "Node a: status.conditions[0].lastTransitionTime: not an RFC 3339 time",
        ),
    ],
    ids=[
        "broken JSON",
        "broken YAML",
        "a YAML timestamp that is no date",
        "a document that is not an object",
        "items not a list",
        "no apiVersion",
        "no metadata",
        "a pod without a namespace",
        "labels as a list",
        "a quantity that is not one",
        "a taint that is not a mapping",
        "a time that is not one",
    ],
)
def test_a_bad_state_file_names_the_file_the_object_and_the_field(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = write(tmp_path, "bad.yaml", content)
    with pytest.raises(StateFileError) as caught:
        load_state([path])
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_a_missing_state_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match=r"nope\.yaml: cannot read"):
        load_state([str(tmp_path / "nope.yaml")])


def test_objects_remember_where_they_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", yaml.safe_dump({"kind": "List", "items": [NODE_A, POD_A]}))
    items = list(read_objects(path))
    assert [i.position for i in items] == ["document 1, items[0]", "document 1, items[1]"]
    assert items[1].describe() == "Pod ml/train"


def test_a_json_list_streamed_item_by_item_gives_the_same_state_as_the_full_loader(
    tmp_path: Path,
) -> None:
    from webhook.state.files import load_state_objects

    homelab = Path(__file__).resolve().parents[1] / "examples" / "homelab" / "cluster.yaml"
    document = yaml.safe_load(homelab.read_text())
    path = write(tmp_path, "dump.json", orjson.dumps(document, option=orjson.OPT_INDENT_2))
    streamed = load_state([path])
    full, _ = load_state_objects([path])
    assert streamed.counts() == full.counts()
    assert streamed.nodes() == full.nodes()
    assert streamed.vms() == full.vms() and streamed.vmis() == full.vmis()
    assert streamed.pods() == full.pods()
    assert streamed.kubevirts() == full.kubevirts()


def test_a_json_list_with_a_bad_field_is_still_named_by_file_object_and_field(
    tmp_path: Path,
) -> None:
    bad_node = bad("metadata.labels", ["x"])
    path = write(
        tmp_path,
        "dump.json",
        orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [POD_A, bad_node]}),
    )
    with pytest.raises(StateFileError) as caught:
        load_state([path])
    assert str(caught.value) == (f"{path}: Node a: metadata.labels: expected a mapping, got list")


# --- Dynamic Resource Allocation ------------------------------------------------------------------

DRA_OBJECTS = FIXTURES / "dra" / "objects.yaml"


def test_a_saved_dra_cluster_loads_every_dra_kind_and_streams_the_same_as_json(
    tmp_path: Path,
) -> None:
    require_fixture(DRA_OBJECTS)
    state = load_state([str(DRA_OBJECTS)])
    counts = state.counts()
    assert [counts[f"{kind}.resource.k8s.io"] for kind in (
        "DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"
    )] == [3, 1, 2, 2]  # fmt: skip
    path = write(tmp_path, "dump.json", orjson.dumps(yaml.safe_load(DRA_OBJECTS.read_text())))
    streamed = load_state([path])
    assert streamed.counts() == counts
    assert streamed.resource_slices() == state.resource_slices()
    assert streamed.claims() == state.claims()


def test_a_dra_object_with_a_bad_field_is_named_by_file_object_and_field(tmp_path: Path) -> None:
    require_fixture(DRA_OBJECTS)
    document = yaml.safe_load(DRA_OBJECTS.read_text())
    (slice_,) = [i for i in document["items"] if i["kind"] == "ResourceSlice"]
    slice_["spec"]["devices"][0]["capacity"]["addressableMemory"]["value"] = "a lot"
    path = write(tmp_path, "dra.yaml", yaml.safe_dump(document))
    with pytest.raises(StateFileError) as caught:
        load_state([path])
    assert str(caught.value) == (
        f"{path}: ResourceSlice omen2-gpu.nvidia.com-7x2kq: "
        "spec.devices[0].capacity.addressableMemory.value: not a quantity: 'a lot'"
    )


def test_a_claim_without_a_namespace_is_refused_like_any_namespaced_object(
    tmp_path: Path,
) -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}}
    with pytest.raises(StateFileError, match=r"metadata\.namespace: a ResourceClaim must have"):
        load_state([write(tmp_path, "c.yaml", yaml.safe_dump(claim))])
