"""The mutations: one module per opt-in change gpu-guard may make to an object on its way in,
each defining ``ID``, ``mutate`` and ``MUTATION`` (``policies.vocabulary.mutation.Mutation``, listed
in ``policies.registry.ALL_MUTATIONS``).

A mutation imports ``vocabulary``, ``cel`` and ``cluster``, never a rule, a diagnosis or another
mutation; it is idempotent and explained by the warning it returns.
"""
