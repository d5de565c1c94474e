"""Diagnoses: what should run and cannot, since when, the chain of causes, the safe repair order.

The admission policies judge one object at a time; the audit also needs the story that connects them
(docs/field-guide.md section 1): swap on a node -> kubelet down -> node NotReady -> NFD labels and
device plugin gone -> a passthrough VM with nowhere to go, for 112 days. Each diagnosis is a
``policies.vocabulary.audit.Diagnosis``: an id, defaults, and a pure function ``(AuditView, now) ->
findings`` the engine runs beside the policies' audits (``policies.registry.ALL_DIAGNOSES``).

By subject: ``nodes`` (recovery trap, NotReady GPU nodes, unhealthy operands), ``vms`` (VMs that
cannot be scheduled), ``claims`` (workloads whose DRA claim is allocated on a NotReady node),
``managed_twice`` (GPUs both the device plugin and the DRA driver hand out), ``mode_kills`` (a
node whose GPU mode kills what uses its GPUs), ``names`` (resource
names that differ only in case), ``sole_provider`` (a prediction: the healthy node whose failure
would strand workloads, since no other can serve them). What several of them
read is computed once per audit: ``facts`` (every node, and the GPU nodes' overview) and
``workloads`` (which VMs want to run and what stops them); ``chains`` and ``repair`` turn facts
into links and ordered steps. A diagnosis imports ``vocabulary``, ``cel``, ``cluster`` and those
four helpers, never another diagnosis nor a rule (import-linter holds it): what a diagnosis and a
rule both tell (why no node provides a VM's device) lives in ``policies.cluster``.

Pure domain logic: no I/O, no clock reads (durations are measured to the ``now`` passed in).
Every scan is linear in the state: each node is examined once, each VM once, each resource name
once, so an audit stays fast at 5,000 nodes / 150,000 pods / 10,000 VMs.
"""
