"""The cluster in memory: ``ClusterState``, the compact projections of every watched object and
the indexes that make each question of ``policies.cluster.view.ClusterView`` a dict hit.

``cluster`` is the one writer (``upsert``/``delete``, each kind through the store its row of
``READ_KINDS`` names) and the class the view's readers mix in: ``queries`` (nodes, pods, VMs,
the operators' CRs), ``dra`` (DeviceClasses, slices, claims; ``taints`` and ``taint_view`` for
device taints and Namespaces), ``providers`` (who provides each extended resource),
``pod_filter`` (which pods are kept at all), ``instancetypes`` (KubeVirt's instancetypes and the
VMs taking devices from them). No I/O: the feeders (state files, live watches) and
the machine's pci.ids are ``webhook.state``'s, which builds and fills a state
(``webhook.state.feeding``). It imports ``cluster``, ``cel`` and ``vocabulary``; no rule,
mutation or diagnosis imports it (they read the view), and it imports none of them.
"""
