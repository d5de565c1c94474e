"""One pod as the API server holds it: a ``PodShape`` (what differs between kinds of pod) filled in
the way the controllers, the scheduler and kubelet fill it (env, probes, volumes, status...)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.synthetic import draw
from bench.synthetic.draw import Obj
from bench.synthetic.layout import Image, Images, Placement, words

#: The env a container gets first: the downward API's names.
_FIELD_ENV = (
    ("POD_NAME", "metadata.name"),
    ("POD_NAMESPACE", "metadata.namespace"),
    ("NODE_NAME", "spec.nodeName"),
)
_VALUE_ENV = words(
    "LOG_LEVEL OTEL_EXPORTER_OTLP_ENDPOINT SERVICE_NAME GOMAXPROCS HTTP_PORT CACHE_TTL"
    " FEATURE_FLAGS REGION DB_POOL_SIZE QUEUE"
)
_STATUS_FIELDS = words("conditions containerStatuses hostIP phase podIP podIPs startTime")
_POD_CONDITIONS = words("PodReadyToStartContainers Initialized Ready ContainersReady PodScheduled")


@dataclass
class PodShape:
    """What differs between the kinds of pod; the maker fills in the rest the way kubelet does."""

    namespace: str
    name: str
    node: str
    app: str
    image: Image
    owner_kind: str
    owner_name: str
    phase: str = "Running"
    resources: Obj | None = None
    env: int = 8
    tolerations: list[Obj] | None = None
    problem: str = ""  # a waiting/terminated reason (CrashLoopBackOff, Error, OOMKilled)
    sidecar: Image | None = None
    init: Image | None = None
    extra_labels: dict[str, str] | None = None
    host_network: bool = False
    priority_class: str = ""


#: What the admission plugin adds to a pod that tolerates nothing else.
DEFAULT_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for taint in ("not-ready", "unreachable")
]


class PodMaker:
    """Pods from shapes, drawing from the pods' random stream; names never taken twice."""

    def __init__(self, layout: Placement) -> None:
        self.layout = layout
        self.rng = random.Random(f"{layout.seed}:pods")
        self.images = Images.of(layout.seed)
        self.rs_hash: dict[str, str] = {}
        self.used: set[tuple[str, str]] = set()

    def unique(self, namespace: str, prefix: str) -> str:
        """``prefix-xxxxx`` as the ReplicaSet/DaemonSet controllers name pods, never taken twice."""
        return draw.unique_name(self.rng, self.used, namespace, prefix)

    def owner(self, namespace: str, app: str) -> str:
        """The ReplicaSet of a deployment: its pod-template hash drawn once."""
        key = f"{namespace}/{app}"
        if key not in self.rs_hash:
            self.rs_hash[key] = draw.hexdigits(self.rng, 10)
        return f"{app}-{self.rs_hash[key]}"

    def _env(self, n: int) -> list[Obj]:
        env: list[Obj] = [
            {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}
            for name, path in _FIELD_ENV[:n]
        ]
        for key in _VALUE_ENV[: max(0, n - len(env))]:
            env.append({"name": key, "value": str(self.rng.randrange(1000))})
        return env

    def _container(self, shape: PodShape, image: Image, name: str, main: bool) -> Obj:
        rng = self.rng
        resources = (
            shape.resources
            if main and shape.resources is not None
            else {
                "requests": {"cpu": f"{rng.choice((50, 100, 250, 500))}m", "memory": "256Mi"},
                "limits": {"memory": f"{rng.choice((256, 512, 1024, 2048))}Mi"},
            }
        )
        port = rng.choice((8080, 8443, 9090, 3000))
        container: Obj = {
            "name": name,
            "image": image.ref,
            "imagePullPolicy": "IfNotPresent",
            "args": [f"--port={port}"],
            "env": self._env(shape.env if main else 1),
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "resources": resources,
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/app", "readOnly": True},
                {
                    "name": "kube-api-access",
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "readOnly": True,
                },
            ],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }
        if main:
            container["readinessProbe"] = {
                "httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"},
                "periodSeconds": 10,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": 3,
            }
        if main and shape.owner_kind == "ReplicaSet":
            container["securityContext"] = {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
            }
        return container

    def _container_state(self, shape: PodShape, crashing: bool, started: str, name: str) -> Obj:
        """Waiting, terminated or running, as the phase and the problem say."""
        rng = self.rng
        if shape.phase == "Pending":
            return {"waiting": {"reason": "ContainerCreating"}}
        if shape.phase in ("Succeeded", "Failed"):
            succeeded = shape.phase == "Succeeded"
            return {
                "terminated": {
                    "exitCode": 0 if succeeded else 1,
                    "reason": "Completed" if succeeded else (shape.problem or "Error"),
                    "startedAt": started,
                    "finishedAt": draw.stamp(rng, 0.5),
                    "containerID": f"containerd://{draw.hexdigits(rng, 64)}",
                }
            }
        if crashing:
            message = f"back-off 5m0s restarting failed container={name}"
            return {"waiting": {"reason": shape.problem, "message": message}}
        return {"running": {"startedAt": started}}

    def _status(
        self, shape: PodShape, containers: list[Obj], started: str, host_ip: str, pod_ip: str
    ) -> Obj:
        rng = self.rng
        running = shape.phase == "Running"
        pending = shape.phase == "Pending"
        statuses = []
        for i, c in enumerate(containers):
            crashing = bool(shape.problem) and i == 0
            state = self._container_state(shape, crashing, started, c["name"])
            restarts = rng.randrange(5, 300) if crashing and running else 0
            entry: Obj = {
                "name": c["name"],
                "image": c["image"],
                "imageID": f"{c['image'].rsplit(':', 1)[0]}@sha256:{draw.hexdigits(rng, 64)}",
                "ready": running and not crashing,
                "restartCount": restarts,
                "started": running and not crashing,
                "state": state,
                "lastState": {},
            }
            if not pending:
                entry["containerID"] = f"containerd://{draw.hexdigits(rng, 64)}"
            statuses.append(entry)
        ready = "True" if running and not shape.problem else "False"
        condition_status = {
            "PodReadyToStartContainers": "True" if not pending else "False",
            "Initialized": "True",
            "Ready": ready,
            "ContainersReady": ready,
            "PodScheduled": "False" if pending and not shape.node else "True",
        }
        status: Obj = {
            "phase": shape.phase,
            "conditions": [
                {
                    "type": kind,
                    "status": condition_status[kind],
                    "lastProbeTime": None,
                    "lastTransitionTime": started,
                }
                for kind in _POD_CONDITIONS
            ],
            "qosClass": "Burstable",
            "startTime": started,
            "containerStatuses": statuses,
        }
        if shape.node:
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": host_ip}]
        if not pending:
            status["podIP"] = pod_ip
            status["podIPs"] = [{"ip": pod_ip}]
        return status

    def pod(self, shape: PodShape) -> Obj:
        rng = self.rng
        started = draw.stamp(rng, 60)
        host_ip = draw.ip(rng, "10")
        pod_ip = host_ip if shape.host_network else draw.ip(rng, "192")
        account = shape.app.split("/")[-1][:40]
        containers = [self._container(shape, shape.image, account, True)]
        if shape.sidecar is not None:
            containers.append(self._container(shape, shape.sidecar, "log-shipper", False))
        labels = {
            "app": shape.app,
            "app.kubernetes.io/name": shape.app,
            **(shape.extra_labels or {}),
        }
        if shape.owner_kind == "ReplicaSet":
            labels["pod-template-hash"] = shape.owner_name.rsplit("-", 1)[-1]
        elif shape.owner_kind == "DaemonSet":
            labels["controller-revision-hash"] = draw.hexdigits(rng, 9)
            labels["pod-template-generation"] = str(rng.randrange(1, 20))
        owner_api = "batch/v1" if shape.owner_kind == "Job" else "apps/v1"
        meta: Obj = {
            "name": shape.name,
            "generateName": shape.name[:-5],
            "namespace": shape.namespace,
            "uid": draw.uid(rng),
            "resourceVersion": draw.resource_version(rng),
            "creationTimestamp": started,
            "labels": labels,
            "annotations": {
                "cni.projectcalico.org/containerID": draw.hexdigits(rng, 64),
                "cni.projectcalico.org/podIP": f"{pod_ip}/32",
                "cni.projectcalico.org/podIPs": f"{pod_ip}/32",
            },
            "ownerReferences": [
                draw.controller_ref(rng, owner_api, shape.owner_kind, shape.owner_name)
            ],
            "managedFields": [
                draw.managed_fields(
                    "kubelet", started, {"f:status": draw.fields_of(list(_STATUS_FIELDS))}, "status"
                )
            ],
        }
        pod_spec: Obj = {
            "containers": containers,
            "dnsPolicy": "ClusterFirstWithHostNet" if shape.host_network else "ClusterFirst",
            "enableServiceLinks": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 1000 if shape.priority_class else 0,
            "restartPolicy": "OnFailure" if shape.owner_kind == "Job" else "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
            "serviceAccount": account,
            "serviceAccountName": account,
            "terminationGracePeriodSeconds": 30,
            "tolerations": DEFAULT_TOLERATIONS if shape.tolerations is None else shape.tolerations,
            "volumes": [
                {
                    "name": "config",
                    "configMap": {"name": f"{shape.app[:40]}-config", "defaultMode": 420},
                },
                self._api_access_volume(),
            ],
        }
        if shape.priority_class:
            pod_spec["priorityClassName"] = shape.priority_class
        if shape.host_network:
            pod_spec["hostNetwork"] = True
        if shape.node:
            pod_spec["nodeName"] = shape.node
        if shape.init is not None:
            pod_spec["initContainers"] = [self._container(shape, shape.init, "init-config", False)]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": pod_spec,
            "status": self._status(shape, containers, started, host_ip, pod_ip),
        }

    def _api_access_volume(self) -> Obj:
        """The projected service-account token volume every pod gets."""
        namespace = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
        return {
            "name": f"kube-api-access-{draw.suffix(self.rng)}",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": namespace}]}},
                ],
            },
        }
