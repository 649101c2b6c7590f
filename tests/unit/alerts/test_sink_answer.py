"""Every sink carries the answer: the change the diagnosis recommends and its predicted effect."""

from __future__ import annotations

import asyncio
import io
import json

from kvpilot.alerts.payload import Alert, Target
from kvpilot.alerts.sinks import LogSink, answer, summary

NOW = {"requests_finished_per_s": 2.78, "queue_time_mean_s": 65.8, "ttft_mean_s": 66.1}
THEN = {"requests_finished_per_s": 5.01, "queue_time_mean_s": 0.5, "ttft_mean_s": 0.75}
ALERT = Alert("firing", {"alertname": "VLLMMaxNumSeqsCap", "namespace": "llm", "pod": "qwen-0"}, {}, "f1")


def _result(replay_matches: bool = True, recommendations: bool = True) -> dict:
    rec = {
        "flag": "--max-num-seqs",
        "current": 4,
        "suggested": 16,
        "expected_effect": "Keeps up. More.",
        "predicted": THEN,
    }
    target = {
        "verdict": "max_num_seqs_cap",
        "severity": "critical",
        "confidence": 0.6,
        "evidence": ["Running requests pinned at max_num_seqs."],
        "recommendations": [rec] if recommendations else [],
        "replay": {"predicted": NOW, "observed": NOW, "matches": replay_matches},
    }
    return {"target": {"namespace": "llm", "pod": "qwen-0"}, "diagnosis": {"targets": [target]}}


def test_the_log_line_carries_the_change_and_its_predicted_effect():
    stream = io.StringIO()
    asyncio.run(LogSink(stream).emit(ALERT, Target(namespace="llm", pod="qwen-0"), _result()))
    line = json.loads(stream.getvalue())
    assert line["verdict"] == "max_num_seqs_cap"
    assert line["change"] == "--max-num-seqs 4 -> 16"
    assert (
        line["predicted_effect"]
        == "predicted requests/s 2.78 -> 5.01, queue time 65.8 s -> 0.5 s, TTFT 66.1 s -> 0.75 s"
    )


def test_the_summary_grafana_and_events_use_says_the_change_first():
    text = summary(ALERT, _result())
    assert text.startswith(
        "VLLMMaxNumSeqsCap on llm/qwen-0: max_num_seqs_cap (critical, confidence 0.6): change --max-num-seqs 4 -> 16: "
        "predicted requests/s 2.78"
    )
    assert text.endswith("Running requests pinned at max_num_seqs.")


def test_without_a_matching_replay_the_effect_is_the_rules_estimate_and_none_without_a_change():
    assert answer(_result(replay_matches=False)) == ("--max-num-seqs 4 -> 16", "Keeps up")
    assert answer(_result(recommendations=False)) == (None, None)
    assert ": change " not in summary(ALERT, _result(recommendations=False))
