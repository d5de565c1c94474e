"""Exemptions that expire (issue 40): a policy's exemptions take an RFC 3339 ``expires``; past
it they no longer apply, the audit reports them expired, a metric counts the active ones; an
exemption without one keeps working."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from tests.test_controls import STATE, switch
from webhook.audit.policyreport import policy_reports
from webhook.audit.report import run_audit
from webhook.config import EXEMPTION_EXPIRED, ConfigError, Exemptions, parse_config
from webhook.engine import Engine
from webhook.metrics import Metrics

EXPIRY = datetime(2026, 12, 31, tzinfo=UTC)
POLICY = "workload-switch-with-gpu-pods"


def config_of(exemptions: str) -> Any:
    text = f"policies: {{{POLICY}: {{exemptions: {exemptions}}}}}"
    return parse_config(yaml.safe_load(text), "guard.yaml")


@pytest.mark.parametrize(
    "written",
    ["'2026-12-31T00:00:00Z'", "2026-12-31T00:00:00Z", "'2026-12-31T01:00:00+01:00'"],
    ids=["quoted", "a YAML timestamp", "with an offset"],
)
def test_an_expiry_is_read_as_the_instant_it_names(written: str) -> None:
    config = config_of(f"{{users: [ops-bot], expires: {written}}}")
    assert config.policy_exemptions[POLICY].expires == EXPIRY


@pytest.mark.parametrize(
    ("written", "says"),
    [
        (
            "2026-12-31",
            "guard.yaml: policies.workload-switch-with-gpu-pods.exemptions.expires: "
            "expected an RFC 3339 time with its zone, such as 2026-12-31T00:00:00Z "
            "(got 2026-12-31)",
        ),
        ("'2026-12-31T00:00:00'", "with its zone"),
        ("tomorrow", "(got tomorrow)"),
        ("1767139200", "(got 1767139200)"),
    ],
    ids=["a date", "no zone", "words", "a number"],
)
def test_an_expiry_that_is_not_an_rfc3339_time_is_refused_naming_the_field(
    written: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        config_of(f"{{users: [ops-bot], expires: {written}}}")
    assert says in str(refused.value)


def test_the_global_exemptions_never_expire_and_say_where_expiry_belongs() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"exemptions": {"users": ["x"], "expires": "2026-12-31T00:00:00Z"}}, "g")
    assert str(refused.value) == (
        "g: exemptions.expires: only a policy's exemptions expire "
        "(policies.<id>.exemptions.expires); these are the guard's perimeter"
    )


@pytest.mark.parametrize(
    ("now", "applies"),
    [
        (EXPIRY - timedelta(seconds=1), True),
        (EXPIRY, False),
        (EXPIRY + timedelta(days=30), False),
    ],
    ids=["a second before", "at the instant", "a month after"],
)
def test_an_exemption_applies_until_its_expiry_and_not_from_then(
    now: datetime, applies: bool
) -> None:
    exemptions = Exemptions(users=frozenset({"ops-bot"}), expires=EXPIRY)
    assert (exemptions.reason(switch("ops-bot"), now) is not None) is applies
    assert exemptions.active(now) is applies


def test_an_exemption_without_expiry_keeps_working_whenever() -> None:
    exemptions = config_of("{users: [ops-bot]}").policy_exemptions[POLICY]
    far = datetime(9999, 1, 1, tzinfo=UTC)
    assert exemptions.expires is None and exemptions.reason(switch("ops-bot"), far) is not None


def test_the_audit_reports_an_expired_exemption_once_and_not_a_live_or_unexpiring_one() -> None:
    now = EXPIRY + timedelta(days=3)
    expired = config_of("{users: [ops-bot, relabeler], expires: 2026-12-31T00:00:00Z}")
    (finding,) = [
        f
        for f in run_audit(Engine(expired), STATE, now).findings
        if f.verdict.policy == EXEMPTION_EXPIRED
    ]
    assert finding.verdict.message == (
        f"policies.{POLICY}.exemptions (users ops-bot, relabeler) expired at "
        f"2026-12-31T00:00:00Z: {POLICY} judges those requests again. Remove the entry from the "
        "configuration, or set a later expires if the exemption is still needed."
    )
    assert finding.verdict.since == EXPIRY
    cluster_report = policy_reports(run_audit(Engine(expired), STATE, now))[0]
    (result,) = [r for r in cluster_report["results"] if r["policy"] == EXEMPTION_EXPIRED]
    assert (result["category"], result["result"]) == ("configuration", "warn")
    for config in (
        config_of("{users: [ops-bot], expires: 2027-01-05T00:00:00Z}"),
        config_of("{users: [ops-bot]}"),
    ):
        ids = {f.verdict.policy for f in run_audit(Engine(config), STATE, now).findings}
        assert EXEMPTION_EXPIRED not in ids


def test_a_metric_counts_the_active_exemptions_and_the_expired_ones() -> None:
    text = (
        "policies: {"
        f"{POLICY}: {{exemptions: {{users: [a], expires: 2001-01-01T00:00:00Z}}}}, "
        "cordon-sole-provider: {exemptions: {users: [b], expires: 2999-01-01T00:00:00Z}}, "
        "mig-reconfig-with-gpu-pods: {exemptions: {users: [c]}}}"
    )
    config = parse_config(yaml.safe_load(text), "guard.yaml")
    metrics = Metrics()
    metrics.watch_exemptions(config.exemption_counts)
    metrics.watch_exemptions(config.exemption_counts)  # a restarted server: registered once
    lines = metrics.exposition().decode().splitlines()
    assert "gpu_guard_exemptions_active 3.0" in lines  # the global block, b and c
    assert "gpu_guard_exemptions_expired 1.0" in lines
