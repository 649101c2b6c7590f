"""The demo's alert line names the severity of the alert that fired, not the rule's base severity."""

from __future__ import annotations

from kvpilot.alerts.rules import alert_rules
from kvpilot.commands.demo_alerts import ALERT, fired_labels, fired_line, firing_alerts

NEVER = "0001-01-01T00:00:00Z"  # Prometheus' lastEvaluation of a rule not evaluated yet


def _labels(severity: str) -> dict[str, str]:
    return {"alertname": ALERT, "severity": severity, "limit_source": "kvpilot_vllmserver_limit"}


def _rule(severity: str, state: str, evaluated: str = "2026-01-01T00:00:00Z") -> dict[str, object]:
    alerts = [{"labels": _labels(severity), "state": state}] if state != "inactive" else []
    return {"name": ALERT, "type": "alerting", "lastEvaluation": evaluated, "alerts": alerts}


def _api(*rules: dict[str, object]) -> dict[str, object]:
    other = {"name": "VLLMTargetDown", "lastEvaluation": NEVER, "alerts": []}
    return {"groups": [{"name": "kvpilot", "rules": [other, *rules]}]}


def test_the_demo_alert_has_a_warning_and_a_critical_variant():
    # the premise: the base rule says warning, its critical variant says critical
    [rule] = [r for r in alert_rules() if r.name == ALERT]
    assert rule.severity == "warning"
    assert [v.severity for v in rule.variants()] == ["warning", "critical"]


def test_the_line_says_critical_when_the_critical_variant_fired():
    labels = fired_labels([_labels("critical")])
    line = fired_line(labels, 1.25, "ns", "pod")
    assert line.startswith(f"{ALERT} (critical: ")
    assert "after 1.2 s" in line or "after 1.3 s" in line
    assert "as ns/pod (limit_source=kvpilot_vllmserver_limit)" in line


def test_both_variants_firing_post_the_critical_one():
    # Alertmanager's shipped inhibit rule mutes the warning while the critical one fires
    labels = fired_labels(firing_alerts(_api(_rule("warning", "firing"), _rule("critical", "firing"))) or [])
    assert labels["severity"] == "critical"
    assert fired_line(labels, 0.5, "ns", "pod").startswith(f"{ALERT} (critical: ")


def test_the_line_says_warning_when_only_the_warning_fired():
    labels = fired_labels(firing_alerts(_api(_rule("warning", "firing"), _rule("critical", "inactive"))) or [])
    assert fired_line(labels, 0.5, "ns", "pod").startswith(f"{ALERT} (warning: ")


def test_no_answer_until_every_variant_was_evaluated():
    # the warning variant fired in this round, the critical one is not evaluated yet: wait for it
    assert firing_alerts(_api(_rule("warning", "firing"), _rule("critical", "inactive", NEVER))) is None
    # evaluated, neither fires (pending is not firing)
    assert firing_alerts(_api(_rule("warning", "pending"), _rule("critical", "inactive"))) is None
    assert firing_alerts(_api()) is None
