"""The one severity policy (kvpilot.diagnose.severity) that the rules, the hook and the alert rules follow."""

from __future__ import annotations

from kvpilot.diagnose import severity
from kvpilot.diagnose.model import SEVERITIES, VERDICTS


def test_every_verdict_has_a_severity_rule_and_only_known_severities():
    verdicts = set(VERDICTS) | {"lora_slot_cap", "unexplained_queue"}  # docs: verdicts being added
    kv = {"kv_cache_exhaustion"}
    assert verdicts <= set(severity.FIXED) | set(severity.QUEUE_VERDICTS) | kv
    assert set(severity.FIXED.values()) <= set(SEVERITIES)


def test_growth_of_one_request_over_the_window_is_growing():
    assert severity.growing(1.0)
    assert severity.growing(12.5)
    assert not severity.growing(0.99)
    assert not severity.growing(-3.0)
    assert not severity.growing(None)


def test_a_queue_behind_a_limit_is_critical_only_while_it_grows():
    assert severity.queue_severity(True) == "critical"
    assert severity.queue_severity(False) == "warning"


def test_kv_exhaustion_is_critical_when_preemptions_meet_a_queue():
    assert severity.kv_severity(preempted=True, queued=True, queue_growing=False) == "critical"
    assert severity.kv_severity(preempted=True, queued=False, queue_growing=True) == "critical"
    assert severity.kv_severity(preempted=True, queued=False, queue_growing=False) == "warning"
    assert severity.kv_severity(preempted=False, queued=True, queue_growing=True) == "warning"
