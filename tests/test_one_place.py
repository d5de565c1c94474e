"""One place for each fact: a second literal copy of a domain fact in policies/ or webhook/ fails
here, naming the file and line, and says which constant to import instead.

Literals are read from the syntax tree (docstrings left out, f-string parts included): prose in
a docstring may mention a label, code may not spell it out again.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from policies.cluster import kinds
from policies.cluster.kinds import MANAGED_BY_LABEL, REVIEWED, WATCHED, WRITTEN
from policies.cluster.pciids import NFD_LABEL_PREFIX, NVIDIA_VENDOR
from policies.cluster.resources import NVIDIA_DOMAIN
from policies.cluster.workload import (
    DEPLOY_LABEL_PREFIX,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    MIG_CONFIG_LABEL,
    WORKLOAD_LABEL,
)
from webhook.admission import review

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("policies", "webhook")
KINDS = "policies/cluster/kinds.py"

#: Modules being rewritten elsewhere that still hold copies (NFD prefix, CLUSTER, hand-built
#: ObjectRefs): once they import the single sources, drop them from here.
NOT_YET: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Literal:
    module: str
    line: int
    value: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.value!r}"


def _docstrings(tree: ast.AST) -> set[int]:
    """Strings standing alone as a statement: module, class, function and attribute docs."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


@functools.cache
def _trees() -> tuple[tuple[str, ast.Module], ...]:
    return tuple(
        (str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path)))
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
    )


@functools.cache
def literals() -> tuple[Literal, ...]:
    """Every string literal in the scanned code, docstrings left out."""
    found = []
    for module, tree in _trees():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
            ):
                found.append(Literal(module, node.lineno, node.value))
    return tuple(found)


def _where(match: Callable[[str], bool]) -> list[Literal]:
    return [lit for lit in literals() if match(lit.value) and lit.module not in NOT_YET]


def equals(value: str) -> Callable[[str], bool]:
    return lambda text: text == value


def contains(value: str) -> Callable[[str], bool]:
    """Also in a regular expression: backslashes are dropped before looking."""
    return lambda text: value in text.replace("\\", "")


def starts_with(value: str) -> Callable[[str], bool]:
    return lambda text: text.startswith(value)


@dataclass(frozen=True)
class Fact:
    what: str
    home: str
    constant: str
    match: Callable[[str], bool]
    once: bool = True
    """Written exactly once (an equality fact); else at least once, and only in its home."""


GROUPS = [
    Fact(f"API group {value}", KINDS, name, equals(value))
    for name, value in vars(kinds).items()
    if name.endswith("_GROUP") and "." in value  # "policy" is also a word
]
LABELS = [
    Fact(f"label {value}", "policies/cluster/workload.py", value, equals(value))
    for value in (WORKLOAD_LABEL, MIG_CONFIG_LABEL, GPU_PRESENT_LABEL, GPU_PRODUCT_LABEL)
]
FACTS = [
    Fact(
        "the NFD PCI label prefix",
        "policies/cluster/pciids.py",
        "NFD_LABEL_PREFIX",
        contains(NFD_LABEL_PREFIX),
        once=False,
    ),
    Fact(
        "NVIDIA's PCI vendor id",
        "policies/cluster/pciids.py",
        "NVIDIA_VENDOR",
        contains(NVIDIA_VENDOR),
        once=False,
    ),
    Fact(
        "NVIDIA's resource domain",
        "policies/cluster/resources.py",
        "NVIDIA_DOMAIN",
        equals(NVIDIA_DOMAIN),
    ),
    Fact(
        "the GPU Operator's deploy labels",
        "policies/cluster/workload.py",
        "DEPLOY_LABEL_PREFIX",
        starts_with(DEPLOY_LABEL_PREFIX),
    ),
    *LABELS,
    *GROUPS,
    Fact(
        "the AdmissionReview apiVersion",
        "webhook/admission/review.py",
        "API_VERSION",
        equals(review.API_VERSION),
    ),
    Fact("the AdmissionReview kind", "webhook/admission/review.py", "KIND", equals(review.KIND)),
    Fact(
        "the managed-by label (of our reports, of HCO's KubeVirt CR)",
        "policies/cluster/kinds.py",
        "MANAGED_BY_LABEL",
        equals(MANAGED_BY_LABEL),
    ),
    Fact(
        "RFC 3339 in UTC", "policies/vocabulary/text.py", "rfc3339", contains("+00:00"), once=False
    ),
    Fact(
        "REST paths",
        KINDS,
        "ApiResource paths",
        lambda text: text.startswith("/api") or "/namespaces/" in text,
        once=False,
    ),
]


@pytest.mark.parametrize("fact", FACTS, ids=lambda f: f.what)
def test_each_fact_is_written_in_its_home_module_only(fact: Fact) -> None:
    found = _where(fact.match)
    elsewhere = [str(lit) for lit in found if lit.module != fact.home]
    assert not elsewhere, f"{fact.what}: import {fact.constant} from {fact.home}: {elsewhere}"
    at_home = [lit for lit in found if lit.module == fact.home]
    assert at_home, f"{fact.what} is not in {fact.home} any more: move this test's table too"
    if fact.once:
        assert len(at_home) == 1, f"{fact.what} written {len(at_home)} times in {fact.home}"


def _path_segment(plural: str) -> re.Pattern[str]:
    return re.compile(rf"(^|/){re.escape(plural)}(/|$)")


@pytest.mark.parametrize("resource", [*WATCHED, *REVIEWED, *WRITTEN], ids=lambda r: r.plural)
def test_every_plural_comes_from_the_kinds_table(resource: kinds.ApiResource) -> None:
    """In a path anywhere, or on its own; a core plural alone ("nodes") is also a word that
    progress lines use, so it counts only inside a path."""
    segment = _path_segment(resource.plural)

    def spells_it(text: str) -> bool:
        if text == resource.plural:
            return bool(resource.kind.group)
        return "/" in text and segment.search(text) is not None

    found = _where(spells_it)
    elsewhere = [str(lit) for lit in found if lit.module != KINDS]
    assert not elsewhere, (
        f"use policies.cluster.kinds.RESOURCE_OF[...].plural or its paths: {elsewhere}"
    )
    at_home = [lit for lit in literals() if lit.module == KINDS and lit.value == resource.plural]
    assert len(at_home) == 1, at_home


VERSION = re.compile(r"(^|/)v\d+((alpha|beta)\d+)?($|/)")
#: apiVersions that are not a resource the table serves, and why.
OTHER_VERSIONS = {
    ("webhook/admission/review.py", review.API_VERSION): "the AdmissionReview envelope",
    ("webhook/state/snapshot.py", "v1"): "the kind: List a snapshot file is",
}


def test_api_versions_are_written_only_in_the_kinds_table() -> None:
    copies = [
        str(lit)
        for lit in _where(lambda text: VERSION.search(text) is not None)
        if lit.module != KINDS and (lit.module, lit.value) not in OTHER_VERSIONS
    ]
    assert not copies, (
        f"take apiVersion from policies.cluster.kinds (object_ref, api_version): {copies}"
    )


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    return [
        (module, node)
        for module, tree in _trees()
        if module not in NOT_YET
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def test_object_references_are_built_by_one_constructor() -> None:
    """A finding names its object with ``kinds.object_ref``; the request names its own
    (``AdmissionRequest.ref``, in vocabulary/requests.py) from the versions the API server sent."""
    builders = {f"{module}:{call.lineno}" for module, call in _calls("ObjectRef")}
    allowed = {
        m for m in builders if m.startswith((f"{KINDS}:", "policies/vocabulary/requests.py:"))
    }
    others = sorted(builders - allowed)
    assert not others, f"use policies.cluster.kinds.object_ref(kind, namespace, name): {others}"
    assert allowed, "the scan found no constructor at all: is it still called ObjectRef?"


def test_group_kinds_are_declared_only_in_the_kinds_table() -> None:
    declared = [
        f"{module}:{call.lineno}"
        for module, call in _calls("GroupKind")
        if any(isinstance(arg, ast.Constant) for arg in call.args) and module != KINDS
    ]
    assert not declared, f"declare the kind in policies/cluster/kinds.py: {declared}"
