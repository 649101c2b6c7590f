"""What the hook sends anywhere is made safe: kvpilot.alerts.hook.safe_json / safe_alert."""

from __future__ import annotations

import json

from kvpilot.alerts.hook import safe_alert, safe_json
from kvpilot.alerts.payload import Alert

HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"


def test_every_string_keys_included_is_one_safe_line():
    doc = {
        "target": {"model_name": f"HF_TOKEN={HF}", "instance": "x --api-key sk-live-" + "k" * 24, "job": "\x1b[31mjob"},
        "evidence": ["a\nb", "bidi\u202e"],
        "recommendations": [{"flag": "--kv-cache-dtype", "current": "fp8\x1b]0;t\x07", "suggested": 2}],
        f"key {HF}": None,
        "n": 1.5,
        "ok": True,
    }
    got = safe_json(doc)
    assert got == {
        "target": {"model_name": "HF_TOKEN=[REDACTED]", "instance": "x --api-key [REDACTED]", "job": "job"},
        "evidence": ["a b", "bidi"],
        "recommendations": [{"flag": "--kv-cache-dtype", "current": "fp8", "suggested": 2}],
        "key [REDACTED]": None,
        "n": 1.5,
        "ok": True,
    }


def test_a_lone_surrogate_becomes_a_question_mark_and_long_strings_are_cut():
    assert safe_json(["a\ud800b"]) == ["a?b"]
    json.dumps(safe_json(["a\ud800b"]), ensure_ascii=False).encode()  # encodable as UTF-8
    assert safe_json("x" * 50, limit=10) == "x" * 9 + "…"


def test_the_sinks_alert_has_safe_labels_annotations_and_fingerprint():
    alert = Alert(
        status="firing",
        labels={"alertname": "VLLM\x1b[2J", "note": f"HF_TOKEN={HF}"},
        annotations={"description": "line1\nline2"},
        fingerprint="sk-live-" + "f" * 30,
    )
    got = safe_alert(alert)
    assert dict(got.labels) == {"alertname": "VLLM", "note": "HF_TOKEN=[REDACTED]"}
    assert dict(got.annotations) == {"description": "line1 line2"}
    assert got.fingerprint == "[REDACTED]"
    assert got.name == "VLLM"
    assert got.firing


def test_a_secret_beside_an_escape_is_redacted_in_the_answer_and_for_the_sinks():
    coloured = f"\x1b[1m{HF}\x1b[0m"  # a coloured log line quoted in a label
    doc = safe_json({"target": {"model_name": coloured}, "note": "HF_TO\x07KEN=literal-value", coloured: 1})
    assert doc == {"target": {"model_name": "[REDACTED]"}, "note": "HF_TOKEN=[REDACTED]", "[REDACTED]": 1}
    alert = Alert(
        status="firing",
        labels={"alertname": "VLLM", "model_name": coloured},
        annotations={"summary": f"Bearer\x1b[0m {HF}x"},
        fingerprint=coloured,
    )
    got = safe_alert(alert)
    assert got.labels["model_name"] == "[REDACTED]"
    assert got.annotations["summary"] == "Bearer [REDACTED]"
    assert got.fingerprint == "[REDACTED]"
