"""The vocabulary: the words every other room of ``policies`` speaks, and nothing else.

What a policy is asked (``requests``: AdmissionRequest, GroupKind, ObjectRef, the operations), what
it answers (``verdicts``: Action, Severity, Finding, Verdict, the Policy declaration), what the
audit says (``audit``: Link, DiagnosisFinding, the Diagnosis declaration, AuditFinding), the
Mutation declaration (``mutation``), the controllers that own what a policy judges (``owners``),
the override annotations (``overrides``), the typed field readers every projection uses
(``fields``: ObjectError, get_map, parse_quantity, ...), semantic versions (``semver``) and the
helpers that keep messages short and alike (``text``). It imports no other room: a declaration is
generic in the view it is given (``Policy[ClusterView]``), so the vocabulary needs no cluster
model, not even to type-check. Domain knowledge (a label, a resource name, a kind) does not belong
here: it goes in ``cluster``.
"""
