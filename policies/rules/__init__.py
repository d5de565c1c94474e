"""The admission rules: one module per policy, each defining ``ID``, ``check``, optionally
``audit``, and ``POLICY`` (listed in ``policies.registry.ALL_POLICIES``).

A rule's module docstring states the hazard, its mechanism and its source. A rule imports
``vocabulary``, ``cel`` and ``cluster``, and never another rule (import-linter holds it): what two
rules share is domain knowledge and moves down into ``cluster``. Its examples are under
``policies/samples/<id>/``.
"""
