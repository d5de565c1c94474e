"""Who provides each extended resource: device plugins and DRA, counted once per node.

A node provides a resource when a device plugin advertises it in ``status.allocatable``, or when
DRA devices of a DeviceClass whose ``extendedResourceName`` it is are published for the node: the
scheduler then serves a pod asking the resource in its limits from those devices (KEP-5004,
docs/dra.md). Policies that ask "is there a provider, a healthy one, how many" ask this index, so
both sources count everywhere and no policy adds them up on its own. Health is
``policies.cluster.health``'s, applied by ClusterState, which shares its healthy-node set.
"""

from __future__ import annotations

from collections.abc import Sequence

DEVICE_PLUGIN = 1
DRA = 2


class ProviderIndex:
    def __init__(self, healthy_nodes: set[str]) -> None:
        self._healthy_nodes = healthy_nodes
        """ClusterState's own set, read only here: Ready, schedulable, untainted nodes."""
        self._sources: dict[str, dict[str, int]] = {}
        """resource -> node -> the sources providing it there (DEVICE_PLUGIN | DRA)."""
        self._healthy: dict[str, set[str]] = {}
        self._resources_of: dict[str, set[str]] = {}
        """node -> resources it provides (to follow its health)."""

    def add(self, resource: str, node: str, source: int) -> None:
        nodes = self._sources.setdefault(resource, {})
        nodes[node] = nodes.get(node, 0) | source
        self._resources_of.setdefault(node, set()).add(resource)
        if node in self._healthy_nodes:
            self._healthy.setdefault(resource, set()).add(node)

    def remove(self, resource: str, node: str, source: int) -> None:
        nodes = self._sources.get(resource)
        if nodes is None or node not in nodes:
            return
        left = nodes[node] & ~source
        if left:
            nodes[node] = left
            return
        del nodes[node]
        if not nodes:
            del self._sources[resource]
        resources = self._resources_of[node]
        resources.discard(resource)
        if not resources:
            del self._resources_of[node]
        healthy = self._healthy.get(resource)
        if healthy is not None:
            healthy.discard(node)
            if not healthy:
                del self._healthy[resource]

    def health_changed(self, node: str) -> None:
        """Follow ``node`` into or out of the healthy set, for every resource it provides."""
        healthy = node in self._healthy_nodes
        for resource in self._resources_of.get(node, ()):
            if healthy:
                self._healthy.setdefault(resource, set()).add(node)
                continue
            nodes = self._healthy.get(resource)
            if nodes is not None:
                nodes.discard(node)
                if not nodes:
                    del self._healthy[resource]

    def providers(self, resource: str) -> Sequence[str]:
        return sorted(self._sources.get(resource, ()))

    def any(self, resource: str) -> bool:
        return bool(self._sources.get(resource))

    def healthy_count(self, resource: str) -> int:
        return len(self._healthy.get(resource, ()))

    def resources_on(self, node: str) -> Sequence[str]:
        return sorted(self._resources_of.get(node, ()))
