"""The API server's REST interface as a test uses it: one request as the admin (or impersonating),
and objects created as a full cluster would hold them (``ControlPlane`` has these methods)."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Sequence
from typing import Any

from tests.e2e.pki import Pki

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ControlPlaneError(Exception):
    """The control plane did not start, the API server refused what a test asked of it
    (``Rest.call``), or one of the tools (kubectl, helm, etcdctl) failed."""


class Rest:
    """Requests to the API server on 127.0.0.1:``port`` with the admin's certificate."""

    port: int
    pki: Pki

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._discovered: dict[str, dict[str, tuple[str, bool]]] = {}

    # --- talking to the API server ---------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            context = ssl.create_default_context(cadata=self.pki.ca.cert_pem.decode())
            context.load_cert_chain(self.pki.admin_cert, self.pki.admin_key)
            self._context = context
        return self._context

    def readyz(self) -> int:
        """The status /readyz answers the admin; 0 when nothing answers."""
        try:
            return self.request("GET", "/readyz", timeout=2)[0]
        except (OSError, http.client.HTTPException):
            return 0

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        timeout: float = 30,
        as_user: str | None = None,
        as_groups: Sequence[str] = (),
    ) -> tuple[int, Any]:
        """One request as the admin (or ``as_user`` in ``as_groups``, impersonated): the status
        and the decoded body (text when not JSON)."""
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self._ssl(), timeout=timeout
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = [("Accept", JSON)]
            if payload is not None:
                headers += [("Content-Type", content_type), ("Content-Length", str(len(payload)))]
            if as_user is not None:
                headers.append(("Impersonate-User", as_user))
            headers += [("Impersonate-Group", group) for group in as_groups]
            connection.putrequest(method, path)
            for header, value in headers:
                connection.putheader(header, value)
            connection.endheaders(payload)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(data) if data else None
        except ValueError:
            return response.status, data.decode(errors="replace")

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        as_user: str | None = None,
        as_groups: Sequence[str] = (),
    ) -> Any:
        """``request`` that raises ControlPlaneError unless the API server answers 2xx."""
        status, answer = self.request(
            method, path, body, content_type=content_type, as_user=as_user, as_groups=as_groups
        )
        if not 200 <= status < 300:
            message = answer.get("message", answer) if isinstance(answer, dict) else answer
            raise ControlPlaneError(f"{method} {path}: {status} {message}")
        return answer

    # --- objects ---------------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> tuple[str, bool, bool]:
        """(plural, namespaced, has a status subresource) of a kind, from discovery."""
        for fresh in (False, True):
            served = self._discover(api_version, fresh)
            if kind in served:
                plural, namespaced = served[kind]
                return plural, namespaced, f"{plural}/status" in served
        raise ControlPlaneError(f"{api_version} {kind} is not served")

    def _discover(self, api_version: str, fresh: bool) -> dict[str, tuple[str, bool]]:
        if fresh or api_version not in self._discovered:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, answer = self.request("GET", prefix)
            served: dict[str, tuple[str, bool]] = {}
            for item in (answer or {}).get("resources", []) if status == 200 else []:
                served.setdefault(
                    item["kind"] if "/" not in item["name"] else item["name"],
                    (item["name"], item["namespaced"]),
                )
            self._discovered[api_version] = served
        return self._discovered[api_version]

    def path_of(self, obj: dict[str, Any], name: bool = True) -> str:
        """The REST path of ``obj`` (its collection with ``name=False``)."""
        api_version, meta = obj["apiVersion"], obj["metadata"]
        plural, namespaced, _ = self.resource(api_version, obj["kind"])
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        scope = f"/namespaces/{meta.get('namespace') or 'default'}" if namespaced else ""
        collection = f"{prefix}{scope}/{plural}"
        return f"{collection}/{meta['name']}" if name else collection

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Creates ``obj`` as written, as far as a bare API server lets it: its status set
        through the status subresource, and a Node's taints set to its own (the API server
        adds the not-ready taint to a new Node). Returns what the server holds."""
        _, _, has_status = self.resource(obj["apiVersion"], obj["kind"])
        body = {key: value for key, value in obj.items() if key != "status" or not has_status}
        created: dict[str, Any] = self.call("POST", self.path_of(obj, name=False), body)
        path = self.path_of(created | {"apiVersion": obj["apiVersion"], "kind": obj["kind"]})
        if obj["kind"] == "Node" and obj["apiVersion"] == "v1":
            taints = (obj.get("spec") or {}).get("taints")
            created = self.call("PATCH", path, {"spec": {"taints": taints}}, MERGE_PATCH)
        if has_status and obj.get("status"):  # a PUT: a merge patch would drop its nulls
            created = self.call("PUT", f"{path}/status", {**created, "status": obj["status"]})
        return created

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """The namespace and its ``default`` ServiceAccount (no controller makes it here)."""
        meta: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
        self.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": meta},
        )
        self.ensure_service_account(name, "default")
        return name

    def ensure_service_account(self, namespace: str, name: str) -> None:
        status, _ = self.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
        if status == 404:
            self.call(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
