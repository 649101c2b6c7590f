"""The demo's alert line names the severity of the alert that fired, not the rule's base severity."""

from __future__ import annotations

from kvpilot.alerts.rules import alert_rules
from kvpilot.commands.demo_alerts import ALERT, fired_labels, fired_line


def _series(severity: str) -> dict[str, object]:
    metric = {"__name__": "ALERTS", "alertname": ALERT, "alertstate": "firing", "severity": severity}
    return {"metric": {**metric, "limit_source": "kvpilot_vllmserver_limit"}, "value": [0, "1"]}


def test_the_demo_alert_has_a_warning_and_a_critical_variant():
    # the premise: the base rule says warning, its critical variant says critical
    [rule] = [r for r in alert_rules() if r.name == ALERT]
    assert rule.severity == "warning"
    assert [v.severity for v in rule.variants()] == ["warning", "critical"]


def test_the_line_says_critical_when_the_critical_variant_fired():
    labels = fired_labels([_series("critical")])
    line = fired_line(labels, 1.25, "ns", "pod")
    assert line.startswith(f"{ALERT} (critical: ")
    assert "after 1.2 s" in line or "after 1.3 s" in line
    assert "as ns/pod (limit_source=kvpilot_vllmserver_limit)" in line


def test_both_variants_firing_post_the_critical_one():
    # Alertmanager's shipped inhibit rule mutes the warning while the critical one fires
    labels = fired_labels([_series("warning"), _series("critical")])
    assert labels["severity"] == "critical"
    assert "alertstate" not in labels
    assert "__name__" not in labels
    assert fired_line(labels, 0.5, "ns", "pod").startswith(f"{ALERT} (critical: ")


def test_the_line_says_warning_when_only_the_warning_fired():
    labels = fired_labels([_series("warning")])
    assert fired_line(labels, 0.5, "ns", "pod").startswith(f"{ALERT} (warning: ")
