"""The chart rendered by the real helm, for tests/test_chart.py and tests/test_manifests.py.

helm is looked for in ``$KUBEBUILDER_ASSETS`` (where the e2e tier's binaries are), else on PATH.
Without it the chart's tests are skipped with one reason, the same line for each; with
``GPU_GUARD_REQUIRE_E2E=1`` (CI) they fail instead, since a skip there would read as a pass.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.chart import ASSETS_VARIABLE, CHART, find_helm

Resource = dict[str, Any]

REQUIRE_VARIABLE = "GPU_GUARD_REQUIRE_E2E"
NOT_FOUND = (
    f"helm is not in ${ASSETS_VARIABLE} nor on PATH: the chart's tests did not run "
    "(put a Helm 3.8+ or 4 release's helm in either)"
)

#: What the chart's optional features need served, "group/version/Kind" as helm's
#: --api-versions and .Capabilities.APIVersions.Has take them.
CERT_MANAGER_KINDS = ("cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer")
MONITORING_KINDS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
EVERY_CRD = (*CERT_MANAGER_KINDS, *MONITORING_KINDS)


def helm() -> str:
    """The helm binary; the calling test is skipped without it (fails under CI)."""
    found = find_helm()
    if found is None:
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1: {NOT_FOUND}", pytrace=False)
        pytest.skip(NOT_FOUND)
    return found


def run_helm(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """helm with these arguments, never near a real cluster: no kubeconfig, its own home."""
    with tempfile.TemporaryDirectory(prefix="gpu-guard-helm-") as home:
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "KUBECONFIG": os.path.join(home, "no-kubeconfig"),
            "HELM_CACHE_HOME": os.path.join(home, "cache"),
            "HELM_CONFIG_HOME": os.path.join(home, "config"),
            "HELM_DATA_HOME": os.path.join(home, "data"),
            **(env or {}),
        }
        return subprocess.run(
            [helm(), *args], capture_output=True, text=True, timeout=120, env=environment
        )


@dataclass(frozen=True)
class Render:
    """One ``helm template`` of the chart: its values, namespace and served CRDs."""

    values: Mapping[str, Any] = field(default_factory=dict)
    namespace: str = "gpu-guard"
    api_versions: tuple[str, ...] = EVERY_CRD
    kube_version: str = ""
    """The cluster's Kubernetes version (``--kube-version``); '' for Helm's own default."""

    def arguments(self, values_file: Path) -> list[str]:
        api = [arg for kind in self.api_versions for arg in ("--api-versions", kind)]
        if self.kube_version:
            api += ["--kube-version", self.kube_version]
        return [
            "template",
            "gpu-guard",
            str(CHART),
            "-n",
            self.namespace,
            "-f",
            str(values_file),
            *api,
        ]

    def run(self) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="gpu-guard-values-") as directory:
            values_file = Path(directory) / "values.yaml"
            values_file.write_text(yaml.safe_dump(dict(self.values)))
            return run_helm(*self.arguments(values_file))

    def objects(self) -> list[Resource]:
        """The rendered objects, a private copy; a render that fails fails the test."""
        return copy.deepcopy(list(_objects(_key(self))))

    def error(self) -> str:
        """What helm says when it refuses these values (the test fails if it renders)."""
        done = self.run()
        assert done.returncode != 0, f"helm rendered {dict(self.values)} without complaint"
        return done.stderr.strip()


def _key(render: Render) -> str:
    """The render as text, to cache on (its values are mappings, which do not hash)."""
    return json.dumps(
        {
            "values": render.values,
            "namespace": render.namespace,
            "api": render.api_versions,
            "kube": render.kube_version,
        },
        sort_keys=True,
    )


@functools.cache
def _objects(key: str) -> tuple[Resource, ...]:
    spec = json.loads(key)
    render = Render(spec["values"], spec["namespace"], tuple(spec["api"]), spec["kube"])
    done = render.run()
    assert done.returncode == 0, f"helm template {dict(render.values)}: {done.stderr.strip()}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def values_file(name: str) -> dict[str, Any]:
    """charts/gpu-guard/ci/<name>-values.yaml: the values that make overlay <name>'s objects."""
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())
    return loaded
