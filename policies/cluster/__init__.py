"""The cluster model: what gpu-guard knows of Kubernetes, KubeVirt, the GPU Operator, NFD and DRA.

``kinds`` is the table of every kind (group, version, plural, scope). One projection module per
kind family turns an object into a compact typed record, and is the one place its fields are
read: ``nodes``, ``pods``, ``kubevirt`` (VMs, VMIs and the KubeVirt CR), ``gpu_operator``
(ClusterPolicy), ``nfd`` (NodeFeature), ``dra`` and ``dra_claims`` (DeviceClass, ResourceSlice,
ResourceClaim and its template; ``node_selector``), with ``conditions`` shared by them and
``projections`` mapping each watched kind to its projection. The facts: ``resources`` (resource
names), ``pciids`` (PCI ids, with ``data/``), ``feature_gates`` (KubeVirt's), ``workload`` (the
GPU Operator's modes and labels), ``health`` (node health), ``hardware``. ``view`` is the
read-only snapshot every policy sees (``ClusterView``, implemented by ``policies.state``) and
``AuditView``, one audit's. What more than one rule or diagnosis asks of the view lives here too,
so that rules never import each other: ``gpu_users``, ``vms_to_run``, ``pod_templates``,
``device_class``, ``device_providers``, ``claim_fit``, ``claim_shortfall`` and
``policy_in_force`` (judging under each ClusterPolicy the GPU Operator may act on). It imports
``vocabulary`` and ``cel``, never a rule, a mutation, a diagnosis or prediction.
"""
