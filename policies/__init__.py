"""gpu-guard's pure domain: (review, cluster view) -> verdicts, and the audit's diagnoses.

No I/O but the committed data files, no clock, no machine facts, never an import of ``webhook``.
The rooms, bottom up; each imports only the rooms below it (``make lint`` checks it with
import-linter, the contracts in pyproject.toml), and each ``__init__`` says what belongs in it:

- ``vocabulary/``: the words every room speaks (requests, findings, verdicts, policy, diagnosis
  and mutation declarations), the typed field readers, semantic versions, message text;
- ``cel/``: DRA device selectors evaluated as the scheduler does, and their did-you-mean hints;
- ``cluster/``: the cluster model: the kinds, one projection module per kind family, resource
  names, PCI ids, node health, workload modes, hardware, the read-only view, and what several
  rules and diagnoses ask of it (GPU users, VMs to run, whether a DRA claim fits);
- ``rules/`` (one module per admission policy), ``mutations/``, ``diagnoses/`` (audit-only
  checks by subject): side by side, none imports another of its room; beside them ``state/``,
  the cluster in memory that implements the view (``ClusterState`` and its indexes), which
  none of them imports: they read the view;
- ``prediction/``: what-if events and the inventory, on the rules and diagnoses;
- ``registry.py`` (every policy, diagnosis and mutation) and ``reference.py`` (the generated
  policy reference) on top. ``samples/`` holds each policy's example change files, ``data/``
  the pci.ids subset.
"""
