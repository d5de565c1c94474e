"""Prediction and overview over a snapshot: ``what_if`` applies hypothetical events (a node down,
a cordon, a drain, a label) to copies of the raw objects, whose audit is then compared with the
real one; ``inventory`` puts every GPU node's facts side by side.

It may import every room below: ``vocabulary``, ``cel``, ``cluster``, the rules and the diagnoses
(their facts are computed once per audit); nothing but the registry's consumers builds on it.
"""
