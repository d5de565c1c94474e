"""tests/promql.py: the metric names an expression reads, and nothing else."""

from __future__ import annotations

import pytest

from tests.promql import metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (policy) (rate(a_total{b="c"}[5m]))', {"a_total"}),
        ("x and on (instance) y", {"x", "y"}),
        ("x == on (job) group_left () max by (job) (y)", {"x", "y"}),
        ("x * ignoring (pod) group_right (node) y", {"x", "y"}),
        ("sum without (instance) (x)", {"x"}),
        ("max(x) by (node)", {"x"}),
        (
            'histogram_quantile(0.9, sum by (le) (rate(h_bucket{job="$job"}[$__rate_interval])))',
            {"h_bucket"},
        ),
        ("x offset 5m", {"x"}),
        ("time() - max(ts) > 7 * 24 * 3600", {"ts"}),
        ("count(x > 0) unless on (a) count(y) or vector(0)", {"x", "y"}),
        ('absent(up{job="a}b", pod=~"[x]"})', {"up"}),
        ("rec:rule:name > bool 1e3", {"rec:rule:name"}),
        ("max_over_time(x[5m:1m]) @ start()", {"x"}),
        ("topk by (node) (3, x)", {"x"}),
        ("x > Inf or y < NaN", {"x", "y"}),
        ("'by' or x", {"x"}),
    ],
)
def test_metric_names_are_the_identifiers_that_are_neither_functions_nor_labels_nor_keywords(
    expr: str, names: set[str]
) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize(
    "expr",
    [
        '{__name__="x"}',  # the name hides in a matcher: the check could not see it
        "nonsense by (x) (y)",  # not an aggregation
        "sum(x",  # unbalanced
        "x # y",  # not PromQL
    ],
)
def test_what_the_tokenizer_cannot_read_faithfully_is_refused(expr: str) -> None:
    with pytest.raises(ValueError):
        metric_names(expr)
